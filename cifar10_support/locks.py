"""Advisory file locks (flock), for a train_dir and a data download: the
kernel drops one when its process ends, however it ends (SIGKILL and crashes
too), so no stale lock is ever left behind."""

import contextlib
import errno
import fcntl
import os

# flock's errors where a file system cannot lock (some network, FUSE mounts).
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
_BUSY = (errno.EAGAIN, errno.EACCES)  # Another process holds the lock.


@contextlib.contextmanager
def exclusive(path, on_busy, on_unsupported=None):
  """Holds an exclusive lock on file `path` (never truncated: who holds it can
  be read from it) until the block ends. If another process holds it,
  on_busy(the open file) is called first: it raises, or returns to wait.
  Yields the open file (mode 'a+': writes append), or None where the file
  system cannot lock files: nothing is held, and on_unsupported (if given)
  is called with the OS's reason first. OSError if the file cannot be made."""
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
