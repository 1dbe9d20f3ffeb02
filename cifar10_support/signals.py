"""Ctrl-C, SIGTERM and a closed output stop training after the current step,
with a checkpoint: StopOnSignal, a hook of the training session.

A closed output is standard output read by a pipe whose reader has gone
(`| head -3`, `| grep -m1`, a pager closed). Python ignores SIGPIPE, so a
write there raises BrokenPipeError instead: a training run's lines
(print_line) turn it into a stop request, signal.SIGPIPE; every
script's main is wrapped in script_main. Either way the
process ends with status 141 (128 + SIGPIPE), as a shell expects, without a
traceback.
"""

import functools
import os
import signal
import sys
import threading

from absl import app
import tensorflow.compat.v1 as tf

from cifar10_support import console

# The running StopOnSignal's list of this thread, for print_line.
_current = threading.local()


class StopOnSignal(tf.train.SessionRunHook):
  """Asks the session to stop after the step during which a SIGINT or
  SIGTERM came, or a print_line of this thread found standard output
  closed: `received` gets each, as a signal.Signals (`.name` 'SIGTERM'),
  signal.SIGPIPE for the output; `signal` is the first (None before). The
  session then ends normally, writing the final checkpoint; the first
  signal restores the previous handlers, so a second stops at once."""

  def __init__(self):
    self.received = []
    self._previous = {}

  @property
  def signal(self):
    return self.received[0] if self.received else None

  def begin(self):
    _current.received = self.received
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
    self.received.append(signal.Signals(signum))
    self._restore()

  def _restore(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def after_run(self, run_context, run_values):
    if self.received:
      run_context.request_stop()

  def end(self, session):
    self._restore()
    _current.received = None


def exit_if_stopped(signum):
  """If a signal (not None) stopped the run, ends the process with the
  shell's status for it, 128 + its number, so that a chain like
  `train && eval` stops too (the checkpoint is already written)."""
  if signum:
    sys.exit(128 + signum)


def silence_stdout():
  """Points standard output at os.devnull, so that what is printed from here
  on, and Python's own flush at exit, succeed without a reader (what the
  Python docs advise for a closed pipe, "Note on SIGPIPE")."""
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, sys.stdout.fileno())
  os.close(devnull)


def print_line(text):
  """Prints a line of a training run's output, flushed.

  If standard output is closed, silences it and appends signal.SIGPIPE to
  this thread's running StopOnSignal: the loop stops after the current step,
  with a final checkpoint, as for SIGTERM. Without one the BrokenPipeError
  is raised again, for script_main.
  """
  try:
    print(text, flush=True)
  except BrokenPipeError:
    silence_stdout()
    received = getattr(_current, 'received', None)
    if received is None:
      raise
    if signal.SIGPIPE not in received:
      received.append(signal.SIGPIPE)


def script_main(errors=(), arguments=False):
  """Decorates a script's main(argv): TensorFlow's Python logs quiet; more
  than flags an app.UsageError unless `arguments`; one of `errors` ends the
  process with one line, '<script>: <message>', and exit status 1; a closed
  standard output (BrokenPipeError) at once with 141 (128 + SIGPIPE)."""
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
          # What Python would flush at exit, where its error is caught.
          sys.stdout.flush()
      except BrokenPipeError:
        silence_stdout()
        sys.exit(128 + signal.SIGPIPE)
    return wrapped
  return decorate
