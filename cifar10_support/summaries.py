"""What training writes to TensorBoard, and when: after the first step of
each session, at every multiple of N and after the last step, which
MonitoredTrainingSession's own hook (steps 1, N + 1, ...) never writes.
"""

import time

import tensorflow.compat.v1 as tf


def are_due(step, every_steps, last_step, previous):
  """Whether the summaries of the run ending at global step `step` are due:
  every_steps is N (0 for none), last_step --max_steps, previous the step
  they were last written at in this session (None for none yet)."""
  if not every_steps:
    return False
  if previous is None or step >= last_step:
    return True
  # Steps may jump by more than one (other workers); any multiple crossed.
  return step // every_steps > previous // every_steps


class SummaryHook(tf.train.SessionRunHook):
  """Writes the summary op's values to `summary_dir` at the steps `are_due`
  picks, at the global step after the run, as TensorFlow's hook does, with
  'global_step/sec' since the previous write (TensorFlow's StepCounterHook's
  chart); the first of a session tells TensorBoard the run (re)started
  there, dropping what a killed run wrote after its last checkpoint from the
  charts."""

  def __init__(self, summary_dir, every_steps, last_step, summary_op=None,
               own_steps=True):
    """every_steps, last_step: as `are_due`'s; summary_op None for every
    summary in the graph; own_steps False re-reads the global step after
    each run, where other processes move it too (a cluster's chief)."""
    self._summary_dir = summary_dir
    self._every_steps = every_steps
    self._last_step = last_step
    self._summary_op = summary_op
    self._own_steps = own_steps

  def begin(self):
    self._global_step = tf.train.get_global_step()
    if self._summary_op is None:
      self._summary_op = tf.train.Scaffold.get_or_default(
          'summary_op', tf.GraphKeys.SUMMARY_OP, tf.summary.merge_all)
    self._writer = tf.summary.FileWriterCache.get(self._summary_dir)
    self._previous = None

  def after_create_session(self, session, coord):
    self._step = int(session.run(self._global_step))

  def before_run(self, run_context):
    self._writing = (self._summary_op is not None and
                     are_due(self._step + 1, self._every_steps, self._last_step,
                         self._previous))
    if not self._writing:
      return None
    return tf.train.SessionRunArgs({'summary': self._summary_op})

  def after_run(self, run_context, run_values):
    if self._writing or not self._own_steps:
      self._step = int(run_context.session.run(self._global_step))
    else:
      self._step += 1
    if not self._writing:
      return
    now = time.time()
    if self._previous is None:
      self._writer.add_session_log(
          tf.SessionLog(status=tf.SessionLog.START), self._step)
    elif now > self._previous_time:
      rate = (self._step - self._previous) / (now - self._previous_time)
      self._writer.add_summary(tf.Summary(value=[tf.Summary.Value(
          tag='global_step/sec', simple_value=rate)]), self._step)
    self._writer.add_summary(run_values.results['summary'], self._step)
    self._previous, self._previous_time = self._step, now

  def end(self, session):
    self._writer.flush()


def loss_average(value, decay=0.9):
  """The original's `tf.train.ExponentialMovingAverage(0.9, name='avg')` of
  a loss, which TensorBoard shows beside it, without its charts' drop to 0
  at every start.

  The variable is the one the original's average made, '<loss op name>/avg'
  starting at 0, so checkpoints keep its name both ways; an average still
  exactly 0 (never updated: a loss is never exactly 0) takes the loss itself
  instead.

  Returns the updated average of the scalar `value`, in its dtype;
  evaluating it updates the variable (once per session.run).
  """
  # A trailing '/' makes a scope absolute: the name does not nest under a
  # tower's scope, which the loss's own op name already carries.
  with tf.device('/cpu:0'):
    with tf.name_scope(value.op.name + '/'):
      average = tf.Variable(lambda: tf.zeros([], value.dtype),
                            trainable=False, name='avg')
    with tf.name_scope(average.op.name + '/'):
      started = tf.not_equal(average, 0)
      new = tf.where(started, average - (1 - decay) * (average - value),
                     value)
      return tf.assign(average, new)


def _retag(summary, tag):
  """A copy of a scalar or histogram summary that writes under `tag`."""
  values = summary.op.inputs[1]
  if summary.op.type == 'ScalarSummary':
    return tf.raw_ops.ScalarSummary(tags=tag, values=values)
  if summary.op.type == 'TensorSummaryV2':  # fast_ops.histogram_summary
    return tf.raw_ops.TensorSummaryV2(
        tag=tag, tensor=values,
        serialized_summary_metadata=summary.op.inputs[2])
  raise ValueError('Cannot retag summary %s of type %s'
                   % (summary.op.name, summary.op.type))


def global_and_last_tower(last_scope, strip_tower_prefix):
  """The summary tensors cifar10_multi_gpu_train.py writes: the graph's
  global ones, and those of the last tower (scope `last_scope`, 'tower_1/')
  tagged as on one device by strip_tower_prefix (cifar10's)."""
  kept = []
  for summary in tf.get_collection(tf.GraphKeys.SUMMARIES):
    name = summary.op.name
    if name.startswith(last_scope):
      tag = tf.compat.as_str(tf.get_static_value(summary.op.inputs[0]).item())
      kept.append(_retag(summary, strip_tower_prefix(tag)))
    elif strip_tower_prefix(name) == name:  # In no tower.
      kept.append(summary)
  return kept
