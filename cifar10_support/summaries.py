"""What training writes to TensorBoard, and when: after the first step of each
session, at every multiple of N and after the last step (TensorFlow's hook
writes at steps 1, N + 1, ...)."""

import time

import tensorflow.compat.v1 as tf


def are_due(step, every_steps, last_step, previous):
  """Whether the summaries of the run ending at global step `step` are due,
  every_steps (0: never) after `previous` (None: none yet this session)."""
  if not every_steps:
    return False
  if previous is None or step >= last_step:
    return True
  # Steps may jump by more than one (other workers); any multiple crossed.
  return step // every_steps > previous // every_steps


class SummaryHook(tf.train.SessionRunHook):
  """Writes summary_op (None: every summary) to `summary_dir` when `are_due`,
  at the global step after the run, with 'global_step/sec' (StepCounterHook's
  chart); the first of a session tells TensorBoard the run (re)started
  there. own_steps False: other processes move the global step too."""

  def __init__(self, summary_dir, every_steps, last_step, summary_op=None,
               own_steps=True):
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
    self._writing = self._summary_op is not None and are_due(
        self._step + 1, self._every_steps, self._last_step, self._previous)
    if self._writing:
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
  a scalar loss, in its variable '<loss op name>/avg', but starting at the
  loss, not 0. Returns the average, updated when evaluated."""
  # The trailing '/' keeps the tower's scope from nesting twice.
  with tf.device('/cpu:0'):
    with tf.name_scope(value.op.name + '/'):
      average = tf.Variable(lambda: tf.zeros([], value.dtype),
                            trainable=False, name='avg')
    with tf.name_scope(average.op.name + '/'):
      new = tf.where(tf.not_equal(average, 0),
                     average - (1 - decay) * (average - value), value)
      return tf.assign(average, new)


def global_and_last_tower(last_scope, strip_tower_prefix):
  """The graph's summaries in no tower, and those of the last tower (scope
  `last_scope`) tagged by strip_tower_prefix as on one device."""
  kept = []
  for summary in tf.get_collection(tf.GraphKeys.SUMMARIES):
    name, inputs = summary.op.name, summary.op.inputs
    if name.startswith(last_scope):
      tag = tf.compat.as_str(tf.get_static_value(inputs[0]).item())
      tag = strip_tower_prefix(tag)
      if summary.op.type == 'ScalarSummary':
        kept.append(tf.raw_ops.ScalarSummary(tags=tag, values=inputs[1]))
      else:  # fast_ops.histogram_summary's
        kept.append(tf.raw_ops.TensorSummaryV2(
            tag=tag, tensor=inputs[1], serialized_summary_metadata=inputs[2]))
    elif strip_tower_prefix(name) == name:  # In no tower.
      kept.append(summary)
  return kept
