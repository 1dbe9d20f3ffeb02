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

import contextlib
from datetime import datetime
import errno
import os
import signal
import sys
import threading
import time

# Set before TensorFlow loads, which reads it once: oneDNN's CPU kernels train
# this model about 1.6x faster than the default ones (benchmarks/README.md).
# TF_ENABLE_ONEDNN_OPTS=0 in the environment turns them off.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

# Run as a script, TensorFlow loads without its start-up noise (cifar10_console).
if __name__ == '__main__':
  import cifar10_console  # pylint: disable=g-import-not-at-top
  cifar10_console.before_tensorflow()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
import cifar10_lock
import cifar10_precision
import cifar10_resume
import cifar10_summaries

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


class DivergedError(RuntimeError):
  """The loss became NaN; the message names the last good checkpoint."""


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


class DiskFullError(RuntimeError):
  """The disk of train_dir filled up; the message names the directory."""


# What stops a training run with one line and exit status 1: each script's
# main catches these (and its own).
RUN_ERRORS = (cifar10.DataError, DivergedError, DiskFullError,
              cifar10_lock.TrainDirLockError, cifar10_resume.ResumeError)


@contextlib.contextmanager
def claim_train_dir(train_dir, fresh_start):
  """Locks train_dir for this run and says where training starts from.

  Holds cifar10_lock's lock until the block ends, so a second trainer on the
  same directory stops at once. With fresh_start, deletes everything in
  train_dir but the lock file. Damaged checkpoints are skipped (one line
  each), never deleted.

  Yields:
    The path of the newest checkpoint in train_dir that restores, or None.

  Raises:
    cifar10_lock.TrainDirBusyError: another trainer holds train_dir.
    cifar10_resume.NoRestorableCheckpointError: every listed checkpoint is
      damaged.
  """
  tf.io.gfile.makedirs(train_dir)
  with cifar10_lock.train_dir_lock(train_dir):
    if fresh_start:
      print('--fresh_start: deleting the contents of %s' % train_dir)
      for name in tf.io.gfile.listdir(train_dir):
        path = os.path.join(train_dir, name.rstrip('/'))
        if name == cifar10_lock.LOCK_NAME:
          continue
        if tf.io.gfile.isdir(path):
          tf.io.gfile.rmtree(path)
        else:
          tf.io.gfile.remove(path)
    checkpoint = cifar10_resume.newest_restorable(train_dir)
    if checkpoint is None:
      print('No checkpoint in %s: training from step 0.' % train_dir)
    else:
      print('Resuming from checkpoint %s at step %d (--fresh_start trains '
            'from scratch).' % (checkpoint, checkpoint_step(checkpoint)))
    yield checkpoint


def checkpoint_step(checkpoint):
  """The global step in a checkpoint's name ('.../model.ckpt-300' -> 300)."""
  return int(checkpoint.rsplit('-', 1)[-1]) if checkpoint else 0


def _remove_interrupted_saves(train_dir):
  """Removes the temporary directories of saves cut short.

  The saver writes each checkpoint there first and the index only ever
  names complete ones, so these are never read, only left behind (by a
  kill, or a full disk).
  """
  for partial in tf.io.gfile.glob(os.path.join(train_dir, 'model.ckpt-*_temp')):
    print('Removing %s, an interrupted save.' % partial)
    tf.io.gfile.rmtree(partial)


@contextlib.contextmanager
def stop_on_full_disk(train_dir):
  """Turns running out of space in train_dir into one DiskFullError.

  Also removes the half-written save, to give back its space. The
  checkpoint index is only rewritten after a complete save, so it still
  names the last complete checkpoint. Other errors pass unchanged.

  Raises:
    DiskFullError: naming train_dir and the checkpoint a new run resumes
      from.
  """
  try:
    yield
  except (tf.errors.OpError, OSError) as e:
    if isinstance(e, OSError):
      full = e.errno in (errno.ENOSPC, errno.EDQUOT)
    else:
      full = ('No space left on device' in e.message or
              'Disk quota exceeded' in e.message)
    if not full:
      raise
    _remove_interrupted_saves(train_dir)
    try:
      checkpoint = cifar10_resume.newest_restorable(train_dir,
                                                    report=lambda line: None)
    except cifar10_resume.ResumeError:
      checkpoint = None
    kept = ('the newest complete checkpoint, %s, is intact and a new run '
            'resumes from it' % checkpoint if checkpoint else
            'no complete checkpoint had been written yet')
    raise DiskFullError(
        'the disk of --train_dir=%s is full (no space left on device while '
        'writing to it): training stopped; %s. Free some space, then run the '
        'same command again.' % (train_dir, kept)) from None


def plan_resume(checkpoint, train_dir):
  """Checks that `checkpoint` fits the graph just built; readies train_dir.

  Call it inside the training graph, once built. Prints what starts fresh
  (state of another trainer's that this one has not). Only then, so that a
  refused run leaves train_dir as it was, it removes the temporary
  directories of saves cut short.

  Args:
    checkpoint: the path `claim_train_dir` gave, or None.
    train_dir: the training directory.

  Returns:
    The cifar10_resume.RestorePlan, or None when there is no checkpoint.

  Raises:
    cifar10_resume.CheckpointMismatchError: the checkpoint is of another
      model; train_dir is untouched.
  """
  plan = None
  if checkpoint is not None:
    plan = cifar10_resume.plan_restore(checkpoint)
    line = cifar10_resume.fresh_line(plan)
    if line:
      print(line)
  _remove_interrupted_saves(train_dir)
  return plan


@contextlib.contextmanager
def _stop_requests():
  """Turns SIGINT and SIGTERM into a request to stop after the current step.

  Stopping through the training loop, rather than by an exception, lets the
  session end normally, which writes the final checkpoint. The first signal
  restores the previous handlers, so a second one stops at once, without it.

  Yields:
    A list that receives the number of each signal caught.
  """
  received = []
  if threading.current_thread() is not threading.main_thread():
    yield received  # Only the main thread may handle signals.
    return
  previous = {signum: signal.getsignal(signum) or signal.SIG_DFL
              for signum in (signal.SIGINT, signal.SIGTERM)}

  def handler(signum, unused_frame):
    # Only records it: printing here could re-enter a print in progress.
    received.append(signum)
    for old_signum, old_handler in previous.items():
      signal.signal(old_signum, old_handler)

  for signum in previous:
    signal.signal(signum, handler)
  try:
    yield received
  finally:
    for signum, old_handler in previous.items():
      signal.signal(signum, old_handler)


def _diverged(step, train_dir):
  checkpoint = tf.train.latest_checkpoint(train_dir)
  if checkpoint is None:
    kept = 'no checkpoint had been written yet'
  else:
    kept = ('the last good checkpoint, %s, is left intact and a new run '
            'resumes from it' % checkpoint)
  return DivergedError(
      'Model diverged with loss = NaN at step %d: training stopped without '
      'saving that step; %s. Lower the learning rate or check the data.'
      % (step, kept))


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
                        cifar10_precision.needs_loss_scale(compute_dtype)),
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
      cifar10.thread_settings' rule, 0 for TensorFlow's choice.
    compute_dtype: None (float32), or tf.bfloat16 or tf.float16 for mixed
      precision (cifar10_precision); the checkpoints are float32 either way.

  Returns:
    A dict with 'global_step' (int, where training stopped), 'loss' (float,
    the last step's total loss, or None if no step ran),
    'examples_per_sec' (float of the last logged window, or None) and
    'signal' (the number of the SIGINT or SIGTERM that stopped training
    early, after a final checkpoint; None otherwise).

  Raises:
    DivergedError: if the loss became NaN. That step is not saved, so the
      newest checkpoint is the last good one.
    cifar10.DataError: if a data file is missing or malformed.
    cifar10_resume.CheckpointMismatchError: if the newest checkpoint in
      train_dir is of another model (train_dir is left as it was).
  """
  def build(global_step):
    return build_training_graph(global_step, data_dir, batch_size, use_fp16,
                                num_threads, compute_dtype)

  return run_training(
      build, train_dir, max_steps, batch_size, log_frequency, fresh_start,
      cifar10.session_config(threads=threads,
                             log_device_placement=log_device_placement),
      save_checkpoint_secs, save_summaries_steps,
      save_checkpoint_steps=save_checkpoint_steps)


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
    restore_plan: the cifar10_resume.RestorePlan to resume from (see
      `plan_resume`); None starts from the initial values.
    Others: as for `run_training`.

  Returns:
    (session, logger): the tf.train.MonitoredTrainingSession, not yet
    entered, and the `_LoggerHook` holding the last loss and speed.
  """
  logger = _LoggerHook(loss, global_step, batch_size, log_frequency,
                       num_towers)
  scaffold = cifar10_resume.restoring_scaffold(restore_plan,
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
           cifar10_summaries.SummaryHook(train_dir, save_summaries_steps,
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
  checkpoint in train_dir, stops on a NaN loss, logs every log_frequency
  steps, and writes checkpoints and summaries to train_dir.

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
    DivergedError, cifar10_resume.CheckpointMismatchError: as for `train`.
  """
  with claim_train_dir(train_dir, fresh_start) as checkpoint:
    start_step = checkpoint_step(checkpoint)
    if start_step >= max_steps:
      print('Checkpoint step %d is already at --max_steps=%d: nothing to '
            'train.' % (start_step, max_steps))
      return {'global_step': start_step, 'loss': None,
              'examples_per_sec': None, 'signal': None}

    with tf.Graph().as_default(), _stop_requests() as stop_signals:
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      train_op, loss, summary_op = build(global_step)
      plan = plan_resume(checkpoint, train_dir)

      try:
        # Creating the session writes the first checkpoint.
        with stop_on_full_disk(train_dir):
          mon_sess, logger = monitored_session(
              train_dir, loss, global_step, batch_size, max_steps,
              log_frequency, config, summary_op, save_checkpoint_secs,
              save_summaries_steps, num_towers, save_checkpoint_steps, plan)
          with mon_sess:
            while not mon_sess.should_stop() and not stop_signals:
              mon_sess.run(train_op)
      except tf.train.NanLossDuringTrainingError:
        raise _diverged(logger.step, train_dir) from None

  if stop_signals:
    print('Received %s: stopped at step %d; final checkpoint %s.'
          % (signal.Signals(stop_signals[0]).name, logger.step,
             tf.train.latest_checkpoint(train_dir)), flush=True)
  else:
    print('Done: step %d reached (--max_steps); final checkpoint %s.'
          % (logger.step, tf.train.latest_checkpoint(train_dir)), flush=True)
  return {'global_step': logger.step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec,
          'signal': stop_signals[0] if stop_signals else None}


def main(argv, train_fn=train, **train_kwargs):
  """Trains as the flags say; other scripts pass their own train_fn.

  Args:
    argv: the command line left after the flags.
    train_fn: called with the common flags as `train`'s arguments, plus
      train_kwargs (the calling script's own flags).
  """
  if len(argv) > 1:
    raise app.UsageError('Unexpected arguments: %s' % ' '.join(argv[1:]))
  cifar10.configure_logging()
  for name in ('max_steps', 'batch_size', 'log_frequency',
               'save_checkpoint_secs'):
    cifar10.check_flag_range(name, getattr(FLAGS, name), minimum=1)
  for name in ('save_checkpoint_steps', 'save_summaries_steps'):
    cifar10.check_flag_range(name, getattr(FLAGS, name), minimum=0)
  cifar10.check_flag_writable_dir('train_dir', FLAGS.train_dir)
  # The model runs on a GPU when one is visible (TensorFlow's placement;
  # the multi-tower script's --tower_device=cpu keeps it on CPU devices).
  on_gpu = (train_kwargs.get('tower_device', 'gpu') == 'gpu'
            and bool(tf.config.list_physical_devices('GPU')))
  compute_dtype = cifar10_precision.compute_dtype_here(
      FLAGS.mixed_precision, on_gpu, FLAGS.use_fp16)
  try:
    cifar10.maybe_download_and_extract(FLAGS.data_dir, FLAGS.data_url,
                                       FLAGS.data_md5,
                                       files=cifar10_input.TRAIN_FILES)
    print(cifar10.data_line(FLAGS.data_dir, cifar10_input.TRAIN_FILES))
    stats = train_fn(
        data_dir=FLAGS.data_dir, train_dir=FLAGS.train_dir,
        max_steps=FLAGS.max_steps, batch_size=FLAGS.batch_size,
        use_fp16=FLAGS.use_fp16, log_frequency=FLAGS.log_frequency,
        log_device_placement=FLAGS.log_device_placement,
        fresh_start=FLAGS.fresh_start,
        save_checkpoint_secs=FLAGS.save_checkpoint_secs,
        save_checkpoint_steps=FLAGS.save_checkpoint_steps or None,
        save_summaries_steps=FLAGS.save_summaries_steps,
        threads=(FLAGS.num_intra_threads, FLAGS.num_inter_threads),
        compute_dtype=compute_dtype, **train_kwargs)
  except RUN_ERRORS as e:
    sys.exit('%s: %s' % (os.path.basename(sys.argv[0]), e))
  if stats['signal']:
    # The shell's convention for "stopped by a signal", so that a chain like
    # `train && eval` stops too; the checkpoint is already written.
    sys.exit(128 + stats['signal'])


if __name__ == '__main__':
  app.run(main)
