"""Advisory file locks (flock): the kernel drops one when its process ends,
however it ends, so no stale lock is ever left behind."""

import contextlib
import errno
import fcntl
import os

_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # Some mounts.
_BUSY = (errno.EAGAIN, errno.EACCES)  # Another process holds the lock.


@contextlib.contextmanager
def exclusive(path, on_busy, on_unsupported=None):
  """Holds an exclusive lock on file `path` until the block ends; if another
  process holds it, on_busy(the open file) first raises or returns to wait.
  Yields the file (mode 'a+', not truncated), or None where the file system
  cannot lock: on_unsupported (if given) gets the OS's reason first."""
  with open(path, 'a+') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      error = None
    except OSError as e:
      if e.errno not in _UNSUPPORTED + _BUSY:
        raise
      error = e.errno
    if error in _BUSY:
      on_busy(f)
      fcntl.flock(f, fcntl.LOCK_EX)
    elif error in _UNSUPPORTED and on_unsupported:
      on_unsupported(os.strerror(error))
    yield None if error in _UNSUPPORTED else f
