"""Trains the CIFAR-10 model on one device, resuming from its last checkpoint.

    python cifar10_train.py --data_dir=/tmp/cifar10_data --max_steps=2000

Every --log_frequency steps it prints

    <date time>: step <global step>, loss = <loss> (<examples/sec>; <sec/batch>)

and it writes checkpoints and TensorBoard summaries to --train_dir. Unlike
the original tutorial, a second run resumes from the newest checkpoint in
--train_dir instead of deleting it; --fresh_start deletes it on purpose.

The original's figures (theirs, not measured here): about 86 percent precision @ 1 after
100K steps, 0.25-0.35 sec/batch on a Tesla K40m. Ours are in README.md.
"""

from datetime import datetime
import os
import sys
import time

from cifar10_support import startup
startup.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
from cifar10_support import checkpoints
from cifar10_support import console
from cifar10_support import download
from cifar10_support import precision
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import summaries
from cifar10_support import train_dirs

FLAGS = flags.FLAGS

flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                    'Directory where to write event logs and checkpoint.')
flags.DEFINE_integer('max_steps', 100000, 'Number of batches to run.')
flags.DEFINE_boolean('log_device_placement', False,
                     'Whether to log device placement.')
flags.DEFINE_integer('log_frequency', 10,
                     'How often to log results to the console.')
flags.DEFINE_boolean('fresh_start', False,
                     'Delete what is in --train_dir (checkpoints and '
                     'events) and train from step 0 instead of resuming.')
flags.DEFINE_integer('save_checkpoint_secs', 600,
                     'Seconds between checkpoints (one is also written at '
                     'the start and at the end).')
flags.DEFINE_integer('save_summaries_steps', 100,
                     'Global steps between TensorBoard summaries (one is also '
                     'written after the first step and at the last); 0 '
                     'writes none.')
flags.DEFINE_integer('save_checkpoint_steps', 0,
                     'If positive, write a checkpoint every this many steps '
                     'instead of every --save_checkpoint_secs.')

LOG_FORMAT = '%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)'


def build_training_graph(global_step, data_dir, batch_size, use_fp16=False,
                         num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
                         compute_dtype=None):
  """Builds single-device training: input pipeline, model, loss, train op.

  Args:
    global_step: the int64 global step variable.
    data_dir: folder holding `cifar-10-batches-bin/`.
    batch_size: int, images per step.
    use_fp16: bool, float16 variables and activations (the original's flag).
    num_threads: int, input preprocessing threads.
    compute_dtype: None, or the mixed-precision dtype of cifar10.inference
      (float16 adds a loss scale).

  Returns:
    (train_op, loss, None): the op to run each step, the scalar total loss,
    and None for "write every summary in the graph".
  """
  images, labels = cifar10.distorted_inputs(
      data_dir, batch_size, use_fp16=use_fp16, num_threads=num_threads)
  loss = cifar10.loss(cifar10.inference(images, compute_dtype), labels)
  return (cifar10.train(loss, global_step, batch_size,
                        precision.needs_loss_scale(compute_dtype)),
          loss, None)


def train(data_dir, train_dir, max_steps=100000, batch_size=128,
          use_fp16=False, log_frequency=10, log_device_placement=False,
          fresh_start=False, save_checkpoint_secs=600,
          save_summaries_steps=100,
          num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
          save_checkpoint_steps=None, threads=(None, None),
          compute_dtype=None):
  """Trains up to global step `max_steps`, resuming from `train_dir`.

  Args:
    data_dir: folder holding `cifar-10-batches-bin/`.
    train_dir: where checkpoints and summaries go (and are resumed from).
    max_steps: int, global step at which training stops.
    batch_size: int, images per step.
    use_fp16: bool, float16 variables and activations.
    log_frequency: int, steps between console lines.
    log_device_placement: bool, log where each op runs.
    fresh_start: bool, delete train_dir first instead of resuming.
    save_checkpoint_secs: int, seconds between checkpoints.
    save_summaries_steps: int, steps between summary writes.
    num_threads: int, input preprocessing threads.
    save_checkpoint_steps: int, steps between checkpoints; when set, instead
      of save_checkpoint_secs.
    threads: (intra-op, inter-op) thread counts; None in either place for
      sessions.thread_settings' rule, 0 for TensorFlow's choice.
    compute_dtype: None (float32), or tf.bfloat16 or tf.float16 for mixed
      precision (cifar10_support.precision); the checkpoints are float32
      either way.

  Returns:
    A dict with 'global_step' (int, where training stopped), 'loss' (float,
    the last step's total loss, or None if no step ran),
    'examples_per_sec' (float of the last logged window, or None) and
    'signal' (the number of the SIGINT or SIGTERM that stopped training
    early, after a final checkpoint; None otherwise).

  Raises:
    train_dirs.DivergedError: if the loss became NaN. That step is not
      saved, so the newest checkpoint is the last good one.
    cifar10_input.DataError: if a data file is missing or malformed.
    checkpoints.CheckpointMismatchError: if the newest checkpoint in
      train_dir is of another model (train_dir is left as it was).
  """
  def build(global_step):
    return build_training_graph(global_step, data_dir, batch_size, use_fp16,
                                num_threads, compute_dtype)

  return run_training(
      build, train_dir, max_steps, batch_size, log_frequency, fresh_start,
      sessions.training_config(threads,
                               log_device_placement=log_device_placement),
      save_checkpoint_secs, save_summaries_steps,
      save_checkpoint_steps=save_checkpoint_steps)


class _LoggerHook(tf.train.SessionRunHook):
  """Prints the loss and the speed every `log_frequency` global steps.

  With `num_towers` > 1 each step trains on that many batches of `batch_size`
  at once: examples/sec counts them all, and sec/batch is the step time over
  the towers, as in the original multi-GPU script.
  """

  def __init__(self, loss, global_step, batch_size, log_frequency,
               num_towers=1):
    self._loss = loss
    self._global_step = global_step
    self._batch_size = batch_size
    self._log_frequency = log_frequency
    self._num_towers = num_towers
    self.last_loss = None
    self.last_examples_per_sec = None

  def begin(self):
    # The first window also counts session start-up and the queue filling,
    # as in the original.
    self._window_start = time.time()
    self._window_steps = 0

  def after_create_session(self, session, coord):
    self.step = session.run(self._global_step)

  def before_run(self, run_context):
    return tf.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    # The step just run; global_step already counts it.
    step = self.step
    self.step += 1
    self._window_steps += 1
    self.last_loss = run_values.results
    if step % self._log_frequency:
      return
    duration = time.time() - self._window_start
    batches = self._window_steps * self._num_towers
    self.last_examples_per_sec = batches * self._batch_size / duration
    print(LOG_FORMAT % (datetime.now(), step, self.last_loss,
                        self.last_examples_per_sec, duration / batches),
          flush=True)
    self._window_start = time.time()
    self._window_steps = 0


class _SaveAnnouncer(tf.train.CheckpointSaverListener):
  """Prints a line after each checkpoint is written (TF's own is INFO)."""

  def __init__(self, train_dir):
    self._prefix = os.path.join(train_dir, 'model.ckpt')

  def after_save(self, session, global_step_value):
    print('%s: saved checkpoint %s-%d' % (datetime.now(), self._prefix,
                                          global_step_value), flush=True)


def monitored_session(train_dir, loss, global_step, batch_size, max_steps,
                      log_frequency, config, summary_op=None,
                      save_checkpoint_secs=600, save_summaries_steps=100,
                      num_towers=1, save_checkpoint_steps=None,
                      restore_plan=None):
  """The MonitoredTrainingSession training runs in, with all its hooks.

  Call it inside the training graph. It stops at global step max_steps,
  raises on a NaN loss before that step is saved, logs, and writes
  checkpoints and summaries to train_dir. The benchmark builds its
  training variants through it too, so it measures what users run.

  Args:
    loss: the scalar total-loss tensor.
    global_step: the int64 global step variable.
    summary_op: the summaries to write, or None for every one in the graph.
    restore_plan: the checkpoints.RestorePlan to resume from (see
      train_dirs.Start.restore_plan); None starts from the initial values.
    Others: as for `run_training`.

  Returns:
    (session, logger): the tf.train.MonitoredTrainingSession, not yet
    entered, and the `_LoggerHook` holding the last loss and speed.
  """
  logger = _LoggerHook(loss, global_step, batch_size, log_frequency,
                       num_towers)
  scaffold = checkpoints.restoring_scaffold(restore_plan, train_dir,
                                            summary_op=summary_op)
  # Our own saver, after the NaN check: the session's built-in one runs
  # before all our hooks and would save the diverged step.
  saver = tf.train.CheckpointSaverHook(
      train_dir, scaffold=scaffold, save_steps=save_checkpoint_steps or None,
      save_secs=None if save_checkpoint_steps else save_checkpoint_secs,
      listeners=[_SaveAnnouncer(train_dir)])
  hooks = [tf.train.StopAtStepHook(last_step=max_steps),
           tf.train.NanTensorHook(loss),
           logger,
           # After the NaN check: a diverged step's summaries are not written.
           summaries.SummaryHook(train_dir, save_summaries_steps,
                                 max_steps, summary_op),
           saver]
  # No checkpoint_dir: the scaffold restores, from any trainer's checkpoint.
  # The summaries are the hook's above, which also writes the last step's.
  session = tf.train.MonitoredTrainingSession(
      checkpoint_dir=None, summary_dir=train_dir, hooks=hooks, config=config,
      scaffold=scaffold, save_checkpoint_secs=None,
      save_checkpoint_steps=None, save_summaries_steps=None,
      save_summaries_secs=None,
      log_step_count_steps=save_summaries_steps or None)
  return session, logger


def run_training(build, train_dir, max_steps, batch_size, log_frequency,
                 fresh_start, config, save_checkpoint_secs=600,
                 save_summaries_steps=100, num_towers=1,
                 save_checkpoint_steps=None):
  """Builds a training graph and runs it up to global step `max_steps`.

  Shared by the single- and multi-tower scripts: resumes from the newest
  checkpoint in train_dir, stops on a NaN loss or a signal, logs every
  log_frequency steps, and writes checkpoints and summaries to train_dir.

  Args:
    build: function(global_step) building the graph in a fresh default graph
      and returning (train_op, loss, summary_op); loss is a scalar tensor and
      summary_op None for all summaries.
    train_dir, max_steps, log_frequency, fresh_start, save_checkpoint_secs,
      save_summaries_steps, save_checkpoint_steps: as for `train`.
    batch_size: int, images per batch (per tower).
    config: the tf.ConfigProto of the session.
    num_towers: int, batches trained on per step, for the speed figures.

  Returns:
    The dict `train` returns.

  Raises:
    As `train`.
  """
  with train_dirs.claim(train_dir, fresh_start) as start:
    if start.step >= max_steps:
      print('Checkpoint step %d is already at --max_steps=%d: nothing to '
            'train.' % (start.step, max_steps))
      return {'global_step': start.step, 'loss': None,
              'examples_per_sec': None, 'signal': None}

    with tf.Graph().as_default(), signals.stop_requests() as stop_signals:
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      train_op, loss, summary_op = build(global_step)
      plan = start.restore_plan()

      try:
        # Creating the session writes the first checkpoint.
        with start.stop_on_full_disk():
          mon_sess, logger = monitored_session(
              train_dir, loss, global_step, batch_size, max_steps,
              log_frequency, config, summary_op, save_checkpoint_secs,
              save_summaries_steps, num_towers, save_checkpoint_steps, plan)
          with mon_sess:
            while not mon_sess.should_stop() and not stop_signals:
              mon_sess.run(train_op)
      except tf.train.NanLossDuringTrainingError:
        raise start.diverged(logger.step) from None

  final = checkpoints.newest(train_dir)
  if stop_signals:
    print('Received %s: stopped at step %d; final checkpoint %s.'
          % (signals.name(stop_signals[0]), logger.step, final), flush=True)
  else:
    print('Done: step %d reached (--max_steps); final checkpoint %s.'
          % (logger.step, final), flush=True)
  return {'global_step': logger.step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec,
          'signal': stop_signals[0] if stop_signals else None}


def check_flags(flag_values):
  """Usage errors for the training flags every trainer shares.

  For a trainer's main(), before anything is written: it creates
  --train_dir if needed.
  """
  for name in ('max_steps', 'batch_size', 'log_frequency',
               'save_checkpoint_secs'):
    run_flags.check_flag_range(name, getattr(flag_values, name), minimum=1)
  for name in ('save_checkpoint_steps', 'save_summaries_steps'):
    run_flags.check_flag_range(name, getattr(flag_values, name), minimum=0)
  run_flags.check_flag_writable_dir('train_dir', flag_values.train_dir)


def train_args(flag_values):
  """The arguments of `train` that every trainer's flags give, as a dict."""
  return dict(
      data_dir=flag_values.data_dir, train_dir=flag_values.train_dir,
      max_steps=flag_values.max_steps, batch_size=flag_values.batch_size,
      use_fp16=flag_values.use_fp16, log_frequency=flag_values.log_frequency,
      log_device_placement=flag_values.log_device_placement,
      fresh_start=flag_values.fresh_start,
      save_checkpoint_secs=flag_values.save_checkpoint_secs,
      save_checkpoint_steps=flag_values.save_checkpoint_steps or None,
      save_summaries_steps=flag_values.save_summaries_steps,
      threads=run_flags.threads(flag_values))


def run_or_exit(train_fn, flag_values, **kwargs):
  """Gets the data, trains, and ends the process as the run ended.

  A run error (bad data, NaN, full disk, busy or unusable train_dir) exits
  with one line and status 1; a run stopped by a signal, after its final
  checkpoint, with the shell's status for that signal.

  Args:
    train_fn: `train`, or another trainer's, called with `train_args` of
      flag_values and kwargs.
    flag_values: the parsed flags.
    **kwargs: the trainer's own arguments.
  """
  try:
    download.prepare(flag_values.data_dir, flag_values.data_url,
                     flag_values.data_md5, cifar10_input.TRAIN_FILES)
    stats = train_fn(**train_args(flag_values), **kwargs)
  except train_dirs.RUN_ERRORS as e:
    sys.exit('%s: %s' % (os.path.basename(sys.argv[0]), e))
  if stats['signal']:
    sys.exit(signals.exit_status(stats['signal']))


def main(argv):
  run_flags.check_no_arguments(argv)
  console.quiet_python_logs()
  check_flags(FLAGS)
  # The model runs on a GPU when one is visible (TensorFlow's placement).
  compute_dtype = precision.compute_dtype_here(
      FLAGS.mixed_precision, sessions.has_gpu(), FLAGS.use_fp16)
  run_or_exit(train, FLAGS, compute_dtype=compute_dtype)


if __name__ == '__main__':
  app.run(main)
