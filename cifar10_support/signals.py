"""Ctrl-C and SIGTERM stop training after the current step, with a checkpoint.

    with signals.stop_requests() as stop_signals:
      while not mon_sess.should_stop() and not stop_signals:
        mon_sess.run(train_op)
"""

import contextlib
import signal
import sys
import threading


@contextlib.contextmanager
def stop_requests():
  """Yields a list that receives each SIGINT or SIGTERM caught, as a
  signal.Signals (an int; `.name` is 'SIGTERM').

  Stopping through the training loop, rather than by an exception, lets the
  session end normally, which writes the final checkpoint. The first signal
  restores the previous handlers, so a second one stops at once, without it.
  """
  received = []
  if threading.current_thread() is not threading.main_thread():
    yield received  # Only the main thread may handle signals.
    return
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
    yield received
  finally:
    for signum, old_handler in previous.items():
      signal.signal(signum, old_handler)


def exit_if_stopped(signum):
  """If a signal (not None) stopped the run, ends the process with the
  shell's status for it, 128 + its number, so that a chain like
  `train && eval` stops too (the checkpoint is already written)."""
  if signum:
    sys.exit(128 + signum)
