"""A training run's train_dir: claiming it, where training starts, and
writing its checkpoints.

    with train_dirs.claim(path, fresh_start, data_set) as start:  # lock
      if start.nothing_to_train(max_steps): ...
      ...build the graph; scaffold = start.scaffold()  # restores it
      hooks = [..., train_dirs.CheckpointSaverHook(path, scaffold, ...)]

One trainer per train_dir (two would write checkpoints over each other):
each, and a cluster's chief, locks `<train_dir>/.cifar10_train.lock` and
writes its process id and host there; evaluation runs beside it unlocked.
Training never deletes a checkpoint, except on --fresh_start.
"""

import contextlib
import errno
import os
import socket
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import locks
from cifar10_support import progress

LOCK_NAME = '.cifar10_train.lock'


class TrainDirLockError(RuntimeError):
  """train_dir cannot be locked; the message says why."""


class TrainDirBusyError(TrainDirLockError):
  """Another trainer holds the train_dir; the message names it."""


class DiskFullError(RuntimeError):
  """The disk of train_dir filled up; the message names the directory."""


# What stops a training run with one line and exit status 1.
RUN_ERRORS = (data_files.DataError, progress.DivergedError, DiskFullError,
              TrainDirLockError, checkpoints.ResumeError)

_STOPPED = 'training stopped before reading or writing anything else'
# What the user can do about each reason a lock file cannot be made or
# written; for any other reason, 'fix that'.
_FULL = 'is the disk full? Free some space'
_NOT_WRITABLE = 'give this user write permission there'
_ADVICE = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL, errno.EFBIG: _FULL,
           errno.EACCES: _NOT_WRITABLE, errno.EPERM: _NOT_WRITABLE,
           errno.EROFS: 'give a --train_dir on a writable file system',
           errno.EISDIR: 'a directory has its name; move that away'}


def _lock_file_error(action, path, error):
  """TrainDirLockError: the lock file at path cannot be `action`ed for
  OSError `error`, with what the user can do about it."""
  advice = _ADVICE.get(error.errno, 'fix that')
  return TrainDirLockError(
      'cannot %s the lock file %s (%s): %s; %s, then run the same command '
      'again' % (action, path, error.strerror, _STOPPED, advice))


@contextlib.contextmanager
def train_dir_lock(train_dir):
  """Holds train_dir's lock, yielding its path (None for a remote directory,
  'gs://...', or a file system that cannot lock: nothing is held).

  Raises:
    TrainDirBusyError: at once, naming the directory and the process (pid,
      host, start time) that holds it.
    TrainDirLockError: the lock file cannot be made or written.
  """
  if '://' in train_dir:
    yield None
    return
  path = os.path.join(train_dir, LOCK_NAME)

  def busy(lock_file):
    lock_file.seek(0)
    holder = (lock_file.read().strip() or
              'a process that has not written its id yet')
    raise TrainDirBusyError(
        '--train_dir=%s is in use by another trainer: %s. Two trainers on '
        'one directory would overwrite each other\'s checkpoints; wait for '
        'that one to end (or stop it), or give this run another '
        '--train_dir. (cifar10_eval.py may run beside it.)'
        % (train_dir, holder))

  def unsupported(reason):
    print('Warning: the file system of --train_dir=%s cannot lock files '
          '(%s): nothing stops a second trainer on it.' % (train_dir, reason),
          flush=True)

  with contextlib.ExitStack() as stack:
    try:
      lock_file = stack.enter_context(
          locks.exclusive(path, busy, unsupported))
    except OSError as e:
      raise _lock_file_error('create', path, e) from None
    if lock_file is None:
      yield None
      return
    line = ('pid %d on host %s, started %s\n' % (
        os.getpid(), socket.gethostname(),
        time.strftime('%Y-%m-%d %H:%M:%S'))).encode()
    try:
      lock_file.seek(0)
      lock_file.truncate()
      # Unbuffered: a buffered write that failed would be written again when
      # the file closes, and fail again, with a traceback.
      while line:
        line = line[os.write(lock_file.fileno(), line):]
    except OSError as e:
      raise _lock_file_error('write', path, e) from None
    yield path


class StartPoint(object):
  """Where training starts in a claimed train_dir (what `claim` yields): the
  newest `checkpoint` there that restores, or None, and its global `step`
  (0 without one), for training data_files.DataSet `data_set`; raises
  checkpoints.check_classes' errors."""

  def __init__(self, train_dir, checkpoint, data_set):
    self.train_dir = train_dir
    self.checkpoint = checkpoint
    self.data_set = data_set
    self.step = 0
    if checkpoint:
      reader = tf.train.load_checkpoint(checkpoint)
      checkpoints.check_classes(checkpoint, data_set, reader)
      # The name's step, else its own (none: scaffold() refuses it).
      self.step = (checkpoints.step_of(checkpoint) or
                   checkpoints.saved_step(reader) or 0)

  def scaffold(self, **kwargs):
    """The training session's tf.train.Scaffold, built once the graph is
    complete: its sessions restore the checkpoint found, and its saver
    writes this run's (**kwargs: checkpoints.restoring_scaffold's). Once
    the checkpoint fits the graph, says so, records the data's classes
    beside it (for eval and classify) and removes interrupted saves; raises
    checkpoints.CheckpointMismatchError, changing nothing, if it does not."""
    plan = None
    if self.checkpoint is not None:
      plan = checkpoints.plan_restore(self.checkpoint)
      print('Resuming from checkpoint %s at step %d (--fresh_start trains '
            'from scratch).' % (self.checkpoint, self.step))
      line = checkpoints.not_in_checkpoint_message(plan)
      if line:
        print(line)
    checkpoints.record_classes(self.train_dir, self.data_set)
    remove_interrupted_saves(self.train_dir)
    return checkpoints.restoring_scaffold(plan, self.train_dir, **kwargs)

  def nothing_to_train(self, max_steps):
    """Whether the checkpoint is already at `max_steps`; says so if it is."""
    if self.step < max_steps:
      return False
    print('Checkpoint step %d is already at --max_steps=%d: nothing to '
          'train.' % (self.step, max_steps))
    return True



@contextlib.contextmanager
def claim(train_dir, fresh_start, data_set):
  """Locks train_dir for the block and yields its `StartPoint` for training
  data_set; fresh_start deletes everything there but the lock file first.
  Damaged checkpoints are skipped (one line each), never deleted.

  Raises:
    TrainDirBusyError: another trainer holds train_dir.
    checkpoints.NoRestorableCheckpointError: every checkpoint is damaged.
    checkpoints.ResumeError: the newest that restores is of other classes.
  """
  tf.io.gfile.makedirs(train_dir)
  with train_dir_lock(train_dir):
    if fresh_start:
      print('--fresh_start: deleting the contents of %s' % train_dir)
      for name in tf.io.gfile.listdir(train_dir):
        path = os.path.join(train_dir, name.rstrip('/'))
        if name == LOCK_NAME:
          continue
        if tf.io.gfile.isdir(path):
          tf.io.gfile.rmtree(path)
        else:
          tf.io.gfile.remove(path)
    start = StartPoint(train_dir, checkpoints.newest_restorable(train_dir),
                       data_set)
    if start.checkpoint is None:
      print('No checkpoint in %s: training from step 0.' % train_dir)
    yield start


def remove_interrupted_saves(train_dir):
  """Removes the temporary directories of saves cut short (a kill, a full
  disk): the index only ever names complete checkpoints, so none is read.
  Called once the checkpoint to resume from is known to fit the graph
  (StartPoint.scaffold), so that a refused run changes nothing."""
  for partial in tf.io.gfile.glob(os.path.join(train_dir, 'model.ckpt-*_temp')):
    print('Removing %s, an interrupted save.' % partial)
    tf.io.gfile.rmtree(partial)


@contextlib.contextmanager
def stop_on_full_disk(train_dir):
  """Turns running out of space in train_dir into one DiskFullError, naming
  the checkpoint a new run resumes from, after removing the half-written
  save (the index still names the last complete one)."""
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
    remove_interrupted_saves(train_dir)
    checkpoint = checkpoints.resumed_from(train_dir)
    kept = ('the newest complete checkpoint, %s, is intact and a new run '
            'resumes from it' % checkpoint if checkpoint else
            'no complete checkpoint had been written yet')
    raise DiskFullError(
        'the disk of --train_dir=%s is full (no space left on device while '
        'writing to it): training stopped; %s. Free some space, then run the '
        'same command again.' % (train_dir, kept)) from None


class CheckpointSaverHook(tf.train.CheckpointSaverHook):
  """TensorFlow's hook, saving to train_dir with the scaffold's saver when
  the session starts, every save_steps steps (if positive; else every
  save_secs seconds) and at the end; each save gets a line
  (progress.SaveAnnouncer, beginning `label`), and a full disk one
  DiskFullError (stop_on_full_disk)."""

  def __init__(self, train_dir, scaffold, max_steps, save_steps=0,
               save_secs=600, label=''):
    super().__init__(
        train_dir, save_steps=save_steps or None,
        save_secs=None if save_steps else save_secs, scaffold=scaffold,
        listeners=[progress.SaveAnnouncer(train_dir, max_steps, label)])
    self._train_dir = train_dir

  def after_create_session(self, session, coord):
    with stop_on_full_disk(self._train_dir):
      super().after_create_session(session, coord)

  def after_run(self, run_context, run_values):
    with stop_on_full_disk(self._train_dir):
      super().after_run(run_context, run_values)

  def end(self, session):
    with stop_on_full_disk(self._train_dir):
      super().end(session)
