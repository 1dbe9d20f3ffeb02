"""A train_dir, one trainer's at a time: `claim` it, build the graph, then its
`scaffold()` and CheckpointSaverHook; only --fresh_start deletes checkpoints."""

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
SEED_FILE = 'seed.txt'  # The newest run's --seed, or 'none'.


class TrainDirLockError(RuntimeError):
  """train_dir cannot be locked; the message says why."""


class TrainDirBusyError(TrainDirLockError):
  """Another trainer holds the train_dir; the message names it."""


class DiskFullError(RuntimeError):
  """The disk of train_dir filled up; the message names the directory."""


# What stops a training run with one line and exit status 1.
RUN_ERRORS = (data_files.DataError, progress.DivergedError, DiskFullError,
              TrainDirLockError, checkpoints.ResumeError)

# What to do when a lock file cannot be made or written, by errno.
_FULL = 'is the disk full? Free some space'
_NOT_WRITABLE = 'give this user write permission there'
_ADVICE = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL, errno.EFBIG: _FULL,
           errno.EACCES: _NOT_WRITABLE, errno.EPERM: _NOT_WRITABLE,
           errno.EROFS: 'give a --train_dir on a writable file system',
           errno.EISDIR: 'a directory has its name; move that away'}


def _lock_file_error(action, path, error):
  return TrainDirLockError(
      'cannot %s the lock file %s (%s): training stopped before reading or '
      'writing anything else; %s, then run the same command again'
      % (action, path, error.strerror, _ADVICE.get(error.errno, 'fix that')))


@contextlib.contextmanager
def train_dir_lock(train_dir):
  """Holds train_dir's lock, naming this process in it; yields its path (None
  where nothing can be held). TrainDirBusyError names the holder."""
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
      lock_file = stack.enter_context(locks.exclusive(path, busy, unsupported))
    except OSError as e:
      raise _lock_file_error('create', path, e) from None
    if lock_file is not None:
      line = ('pid %d on host %s, started %s\n' % (
          os.getpid(), socket.gethostname(),
          time.strftime('%Y-%m-%d %H:%M:%S'))).encode()
      try:
        lock_file.seek(0)
        lock_file.truncate()
        # Unbuffered: a buffered write that failed would fail again, with a
        # traceback, when the file closes.
        while line:
          line = line[os.write(lock_file.fileno(), line):]
      except OSError as e:
        raise _lock_file_error('write', path, e) from None
    yield None if lock_file is None else path


class StartPoint(object):
  """Where training starts in a claimed train_dir: `checkpoint`, the newest
  that restores, if of data_set's classes (or None), and its `step` (or 0);
  seed: the run's --seed (None: none)."""

  def __init__(self, train_dir, data_set, seed=None):
    self.train_dir = train_dir
    self.data_set = data_set
    self.seed = seed
    self.checkpoint = checkpoints.newest_restorable(train_dir)
    self.step = 0
    if self.checkpoint is None:
      print('No checkpoint in %s: training from step 0.' % train_dir)
    else:
      reader = tf.train.load_checkpoint(self.checkpoint)
      checkpoints.check_classes(self.checkpoint, data_set, reader)
      self.step = (checkpoints.step_of(self.checkpoint) or
                   checkpoints.saved_step(reader) or 0)

  def scaffold(self, **kwargs):
    """The Scaffold (restoring_scaffold's **kwargs) of the complete graph;
    once the checkpoint fits it, writes the class names and seed beside it,
    says the seed (and the checkpoint's, if other), removes interrupted
    saves."""
    plan = None
    if self.checkpoint is not None:
      plan = checkpoints.plan_restore(self.checkpoint)
      print('Resuming from checkpoint %s at step %d (--fresh_start trains '
            'from scratch).' % (self.checkpoint, self.step))
      if plan.not_in_checkpoint:
        print(checkpoints.not_in_checkpoint_message(plan))
    names = os.path.join(self.train_dir, checkpoints.CLASSES_FILE)
    try:
      recorded = data_files.read_class_names(names)
    except data_files.DataError:
      recorded = None  # Unreadable: written anew.
    if recorded != self.data_set.class_names:
      _write_whole(names, data_files.class_names_text(
          self.data_set.class_names))
    self._record_seed()
    remove_interrupted_saves(self.train_dir)
    return checkpoints.restoring_scaffold(plan, self.train_dir, **kwargs)

  def _record_seed(self):
    path = os.path.join(self.train_dir, SEED_FILE)
    seed = 'none' if self.seed is None else str(self.seed)
    if self.seed is not None:
      print('Seed: %s (docs/training.md#seed).' % seed)
    recorded = None
    if tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        recorded = f.read().strip()
    # A train_dir of a run before --seed existed was trained without one.
    was = recorded or 'none'
    if self.checkpoint is not None and was != seed:
      print('Note: steps up to %d were trained with %s; the steps from here '
            'on are %s.' % (
                self.step, 'no --seed' if was == 'none' else '--seed=' + was,
                'not reproducible' if self.seed is None else
                '--seed=%s\'s' % seed))
    if recorded != seed:
      _write_whole(path, (seed + '\n').encode())

  def nothing_to_train(self, max_steps):
    """Whether the checkpoint is already at `max_steps`; says so if it is."""
    if self.step < max_steps:
      return False
    print('Checkpoint step %d is already at --max_steps=%d: nothing to '
          'train.' % (self.step, max_steps))
    return True


@contextlib.contextmanager
def claim(train_dir, fresh_start, data_set, seed=None):
  """Locks train_dir for the block, yielding its StartPoint for data_set and
  seed; fresh_start first deletes everything there but the lock file."""
  tf.io.gfile.makedirs(train_dir)
  with train_dir_lock(train_dir):
    if fresh_start:
      print('--fresh_start: deleting the contents of %s' % train_dir)
      for name in tf.io.gfile.listdir(train_dir):
        path = os.path.join(train_dir, name.rstrip('/'))
        if tf.io.gfile.isdir(path):
          tf.io.gfile.rmtree(path)
        elif name != LOCK_NAME:
          tf.io.gfile.remove(path)
    yield StartPoint(train_dir, data_set, seed)


def _write_whole(path, contents):
  """Writes bytes to path whole: a reader sees the old file or the new one."""
  with tf.io.gfile.GFile(path + '.tmp', 'wb') as f:
    f.write(contents)
  tf.io.gfile.rename(path + '.tmp', path, overwrite=True)


def remove_interrupted_saves(train_dir):
  """Removes the directories of saves cut short, which no index names."""
  for partial in tf.io.gfile.glob(os.path.join(train_dir, 'model.ckpt-*_temp')):
    print('Removing %s, an interrupted save.' % partial)
    tf.io.gfile.rmtree(partial)


@contextlib.contextmanager
def stop_on_full_disk(train_dir):
  """Turns running out of space in train_dir into one DiskFullError, naming
  the checkpoint a new run resumes from, once the cut save is removed."""
  try:
    yield
  except (tf.errors.OpError, OSError) as e:
    if not any(os.strerror(code) in str(e)
               for code in (errno.ENOSPC, errno.EDQUOT)):
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
  """TensorFlow's, saving every save_steps steps (0: save_secs seconds), with
  progress.SaveAnnouncer's lines (beginning `label`) and stop_on_full_disk."""

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
