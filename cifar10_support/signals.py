"""Ctrl-C, SIGTERM and a closed output stop training after the current step,
with a checkpoint.

    with signals.stop_requests() as stop_signals:
      while not mon_sess.should_stop() and not stop_signals:
        mon_sess.run(train_op)

A closed output is standard output read by a pipe whose reader has gone
(`| head -3`, `| grep -m1`, a pager closed). Python ignores SIGPIPE, so a
write there raises BrokenPipeError instead: a training run's lines
(print_line) turn it into a stop request, signal.SIGPIPE in that list; every
script's main is wrapped in ends_quietly_when_output_closes. Either way the
process ends with status 141 (128 + SIGPIPE), as a shell expects, without a
traceback.
"""

import contextlib
import functools
import os
import signal
import sys
import threading

# This thread's innermost stop_requests list, for print_line.
_current = threading.local()


@contextlib.contextmanager
def stop_requests():
  """Yields a list that receives each SIGINT or SIGTERM caught, as a
  signal.Signals (an int; `.name` is 'SIGTERM'), and signal.SIGPIPE when a
  print_line of this thread finds standard output closed.

  Stopping through the training loop, rather than by an exception, lets the
  session end normally, which writes the final checkpoint. The first signal
  restores the previous handlers, so a second one stops at once, without it.
  """
  received = []
  outer, _current.received = getattr(_current, 'received', None), received
  try:
    if threading.current_thread() is not threading.main_thread():
      yield received  # Only the main thread may handle signals.
    else:
      with _signal_handlers(received):
        yield received
  finally:
    _current.received = outer


@contextlib.contextmanager
def _signal_handlers(received):
  """Within the block, SIGINT and SIGTERM append to `received`."""
  previous = {signum: signal.getsignal(signum) or signal.SIG_DFL
              for signum in (signal.SIGINT, signal.SIGTERM)}

  def handler(signum, unused_frame):
    # Only records it: printing here could re-enter a print in progress.
    received.append(signal.Signals(signum))
    for old_signum, old_handler in previous.items():
      signal.signal(old_signum, old_handler)

  for signum in previous:
    signal.signal(signum, handler)
  try:
    yield
  finally:
    for signum, old_handler in previous.items():
      signal.signal(signum, old_handler)


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
  this thread's stop_requests list: the loop stops after the current step,
  with a final checkpoint, as for SIGTERM. Outside stop_requests the
  BrokenPipeError is raised again, for ends_quietly_when_output_closes.
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


def ends_quietly_when_output_closes(main):
  """Wraps a script's main: if standard output is closed (BrokenPipeError
  from a print or the last flush), the process ends at once with status 141
  (128 + SIGPIPE), printing nothing more (a trainer's loop stops through
  print_line first, and ends with exit_if_stopped)."""
  @functools.wraps(main)
  def wrapped(argv):
    try:
      try:
        return main(argv)
      finally:
        # What Python would flush at exit, where its error is caught.
        sys.stdout.flush()
    except BrokenPipeError:
      silence_stdout()
      sys.exit(128 + signal.SIGPIPE)
  return wrapped
