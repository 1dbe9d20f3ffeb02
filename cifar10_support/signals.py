"""Signals and a closed output stop a run (docs/reliability.md)."""

import functools
import os
import signal
import sys
import threading

from absl import app
import tensorflow.compat.v1 as tf

from cifar10_support import console

_current = threading.local()  # .hook: this thread's running StopOnSignal.


class StopOnSignal(tf.train.SessionRunHook):
  """Stops the session after the step of a SIGINT, SIGTERM or closed output
  (a print_line's SIGPIPE): `signal`, the first (a signal.Signals), or None.
  A signal restores the previous handlers, so a second stops at once."""

  def __init__(self):
    self.signal = None
    self._previous = {}

  def begin(self):
    _current.hook = self
    # Only the main thread may handle signals.
    if threading.current_thread() is threading.main_thread():
      for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum) or signal.SIG_DFL
        # A session that failed never ends its hooks: its handler is left.
        left = getattr(previous, '__self__', None)
        if isinstance(left, StopOnSignal):
          previous = left._previous.get(signum, signal.SIG_DFL)  # pylint: disable=protected-access
        self._previous[signum] = previous
        signal.signal(signum, self._handle)

  def _handle(self, signum, unused_frame):
    # Only records it: printing here could re-enter a print in progress.
    self.signal = self.signal or signal.Signals(signum)
    self._restore()

  def _restore(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def after_run(self, run_context, run_values):
    if self.signal:
      run_context.request_stop()

  def end(self, session):
    self._restore()
    _current.hook = None


def exit_if_stopped(signum):
  """Exits with status 128 + signum, as a shell expects, if signum is set."""
  if signum:
    sys.exit(128 + signum)


def silence_stdout():
  """Points standard output at os.devnull (Python docs: Note on SIGPIPE)."""
  # Its descriptor stays open: the process is about to end.
  os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_line(text):
  """Prints a line, flushed; a closed output stops this thread's running
  StopOnSignal with SIGPIPE, or without one raises BrokenPipeError."""
  try:
    print(text, flush=True)
  except BrokenPipeError:
    silence_stdout()
    hook = getattr(_current, 'hook', None)
    if hook is None:
      raise
    hook.signal = hook.signal or signal.SIGPIPE


def script_main(errors=(), arguments=False):
  """Decorates a script's main(argv): quiet TF logs, app.UsageError for
  arguments unless `arguments`; one of `errors` exits 1 with the line
  '<script>: <message>', a closed output at once with 141, Ctrl-C with 130."""
  def decorate(main):
    @functools.wraps(main)
    def wrapped(argv):
      console.quiet_python_logs()
      if len(argv) > 1 and not arguments:
        raise app.UsageError('Unexpected arguments: %s' % ' '.join(argv[1:]))
      try:
        try:
          return main(argv)
        except errors as e:
          sys.exit('%s: %s' % (os.path.basename(sys.argv[0]), e))
        finally:
          sys.stdout.flush()  # Not at exit, where its error escapes.
      except BrokenPipeError:
        silence_stdout()
        sys.exit(128 + signal.SIGPIPE)
      except KeyboardInterrupt:  # Ctrl-C where no hook catches it: quietly.
        sys.exit(128 + signal.SIGINT)
    return wrapped
  return decorate
