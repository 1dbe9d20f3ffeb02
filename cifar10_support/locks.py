"""Advisory file locks (flock), for a train_dir and a data download.

The kernel drops such a lock when its process ends, however it ends
(SIGKILL and crashes too), so no stale lock is ever left behind.
"""

import contextlib
import errno
import fcntl

# flock errors of file systems that do not support it (some network and FUSE
# mounts).
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


@contextlib.contextmanager
def exclusive(path, on_busy):
  """Holds an exclusive lock on file `path` until the block ends.

  The file is created if missing and never truncated, so that its text (who
  holds it) can be read while it is taken.

  Args:
    path: str, a local file.
    on_busy: called with the open file when another process holds the lock;
      it raises, or returns to wait for the lock.

  Yields:
    The open file (mode 'a+': writes append), or None where the file system
    cannot lock files: then nothing is held.

  Raises:
    OSError: the file cannot be created.
  """
  with open(path, 'a+') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      state = 'locked'
    except OSError as e:
      if e.errno in _UNSUPPORTED:
        state = 'unsupported'
      elif e.errno in (errno.EAGAIN, errno.EACCES):
        state = 'busy'
      else:
        raise
    if state == 'busy':
      on_busy(f)
      fcntl.flock(f, fcntl.LOCK_EX)
    yield None if state == 'unsupported' else f
