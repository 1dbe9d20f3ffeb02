"""One trainer per train_dir: an exclusive lock held for the whole run.

Two trainers on one train_dir would resume from the same checkpoint and then
write `model.ckpt-N` files and the `checkpoint` index over each other. Each
trainer (and the chief of a cluster) therefore holds an advisory lock
(`flock`) on `<train_dir>/.cifar10_train.lock` while it runs, and writes its
process id and host into that file. The kernel drops the lock when the
process ends, however it ends (SIGKILL and crashes too), so no stale lock is
ever left behind. Evaluation takes no lock and runs beside training.

    with train_dir_lock(train_dir):
      ...train...
"""

import contextlib
import errno
import fcntl
import os
import socket
import time

LOCK_NAME = '.cifar10_train.lock'


class TrainDirLockError(RuntimeError):
  """train_dir cannot be locked; the message says why."""


class TrainDirBusyError(TrainDirLockError):
  """Another trainer holds the train_dir; the message names it."""

# flock errors of file systems that do not support it (some network and FUSE
# mounts): the run goes on unlocked, with a line that says so.
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


_ADVICE = ('training stopped before reading or writing anything else; is '
           'the disk full? Free some space, then run the same command again')


def _holder(lock_file):
  """What the file says about the process that holds the lock."""
  lock_file.seek(0)
  text = lock_file.read().strip()
  return text or 'a process that has not written its id yet'


@contextlib.contextmanager
def train_dir_lock(train_dir):
  """Holds train_dir's lock; raises TrainDirBusyError at once if taken.

  Remote directories ('gs://...') are not locked: flock needs a local file.

  Args:
    train_dir: an existing directory.

  Yields:
    The lock file's path, or None when not locked.

  Raises:
    TrainDirBusyError: naming the directory and the process (pid, host,
      start time) that holds it.
    TrainDirLockError: the lock file cannot be made or written (a full
      disk, say).
  """
  if '://' in train_dir:
    yield None
    return
  path = os.path.join(train_dir, LOCK_NAME)
  try:
    # Not truncated on open: the holder's text is read if the lock is taken.
    lock_file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), 'r+')
  except OSError as e:
    raise TrainDirLockError('cannot create the lock file %s (%s): %s'
                            % (path, e.strerror, _ADVICE)) from None
  with lock_file:
    try:
      fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno in _UNSUPPORTED:
        print('Warning: the file system of --train_dir=%s cannot lock files '
              '(%s): nothing stops a second trainer on it.'
              % (train_dir, e.strerror), flush=True)
        yield None
        return
      if e.errno not in (errno.EAGAIN, errno.EACCES):
        raise
      raise TrainDirBusyError(
          '--train_dir=%s is in use by another trainer: %s. Two trainers on '
          'one directory would overwrite each other\'s checkpoints; wait for '
          'that one to end (or stop it), or give this run another '
          '--train_dir. (cifar10_eval.py may run beside it.)'
          % (train_dir, _holder(lock_file))) from None
    try:
      lock_file.seek(0)
      lock_file.truncate()
      lock_file.write('pid %d on host %s, started %s\n' % (
          os.getpid(), socket.gethostname(),
          time.strftime('%Y-%m-%d %H:%M:%S')))
      lock_file.flush()
    except OSError as e:
      raise TrainDirLockError('cannot write the lock file %s (%s): %s'
                              % (path, e.strerror, _ADVICE)) from None
    try:
      yield path
    finally:
      fcntl.flock(lock_file, fcntl.LOCK_UN)
