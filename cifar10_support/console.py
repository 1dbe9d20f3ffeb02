"""Keeps TensorFlow's own log noise off the scripts' console.

A healthy run of a script prints the script's lines (start or resume, the
data check, the step lines, checkpoints, results) and real warnings and
errors. What TensorFlow writes besides on every run of this TF1-style code
says nothing to its users, so by default it is left out:

  * start-up lines written while TensorFlow loads (oneDNN, CUDA stubs, CPU
    features, absl's "before absl::InitializeLog()" banner), which absl
    writes whatever TF_CPP_MIN_LOG_LEVEL says;
  * C++ INFO and WARNING lines after that, among them the "Local rendezvous
    is aborting ... Enqueue operation was cancelled" lines each queue thread
    writes when a session closes; on a machine without an NVIDIA driver also
    C++ ERROR lines, which there only say that CUDA found no driver
    (TF_CPP_MIN_LOG_LEVEL 3 instead of 2);
  * the deprecation notices of the tf.compat.v1 queue API this project is
    about, the "Summary name ... is illegal" notices, and the INFO lines of
    MonitoredTrainingSession (the scripts print their own checkpoint lines).

The one switch: set TF_CPP_MIN_LOG_LEVEL yourself (0 for everything) and
TensorFlow logs as it would without this module, C++ and Python side alike.

Usage, in a script, before anything imports TensorFlow (through
startup.before_tensorflow(__name__), which calls it when run as a script):

    startup.before_tensorflow(__name__)  # console.before_tensorflow() as
                                         # a script

and in its main(), before building graphs: console.quiet_python_logs().
Importing a script as a module (the tests do) changes nothing.
"""

import contextlib
import ctypes
import logging
import os
import re
import sys
import tempfile

# Set by before_tensorflow: whether TF_CPP_MIN_LOG_LEVEL was the user's.
_state = {'user_level': None}

# Lines absl and TensorFlow write to stderr while TensorFlow loads.
_IMPORT_NOISE = re.compile(
    r'^(WARNING: All log messages before absl::InitializeLog\(\)'
    r'|[IW]\d{4} '
    r'|To enable the following instructions: )')

# Python-side TensorFlow records that say nothing to this project's users.
_PYTHON_NOISE = re.compile(
    r'is deprecated and will be removed|Instructions for updating:'
    r'|^Summary name .* is illegal; using .* instead\.$'
    # StepCounterHook reads the global step in the same run that increments
    # it, and on a busy machine sometimes before: a false alarm here.
    r'|^It seems that global step \(tf\.train\.get_global_step\) has not '
    r'been increased'
    # A lost cluster session: the worker prints its own line for it.
    r'|^An error occurred when attempting to close the session\. This may be '
    r'due to a preemption', re.S)


def user_set_tf_logging():
  """Whether the user set TF_CPP_MIN_LOG_LEVEL: TF's logging is then TF's."""
  if _state['user_level'] is None:
    return 'TF_CPP_MIN_LOG_LEVEL' in os.environ
  return _state['user_level']


def has_nvidia_driver():
  """Whether the NVIDIA driver's CUDA library loads (what TF looks for)."""
  try:
    ctypes.CDLL('libcuda.so.1')
  except OSError:
    return False
  return True


def default_cpp_level(driver_present):
  """TF_CPP_MIN_LOG_LEVEL for a run: '2' hides INFO and WARNING lines.

  Without a driver '3' also hides ERROR lines: on such a machine the only
  ones a healthy run gets are CUDA's failed cuInit. Failures of the run
  itself reach the user as Python exceptions, which the scripts print.
  """
  return '2' if driver_present else '3'


@contextlib.contextmanager
def _filtered_stderr(noise):
  """Drops lines matching `noise` that the block writes to file descriptor 2.

  absl's C++ logging writes to the descriptor directly, so sys.stderr cannot
  catch it. Everything else is written out when the block ends, in order, so
  an error during the block still shows.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = [line for line in captured.read().decode(errors='replace')
              .splitlines(keepends=True) if not noise.match(line)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


def before_tensorflow():
  """Sets TensorFlow's C++ log level and loads TensorFlow without its banner.

  Call before TensorFlow is imported; a call after TensorFlow is imported
  only records whether the level was the user's, and a second call (a
  driver that runs a script's own `__main__`) changes nothing. A
  TF_CPP_MIN_LOG_LEVEL the user set wins, and then nothing is filtered.
  """
  if _state['user_level'] is not None:
    return
  _state['user_level'] = 'TF_CPP_MIN_LOG_LEVEL' in os.environ
  if _state['user_level'] or 'tensorflow' in sys.modules:
    return
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = default_cpp_level(has_nvidia_driver())
  with _filtered_stderr(_IMPORT_NOISE):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import


class _NoiseFilter(logging.Filter):

  def filter(self, record):
    return not _PYTHON_NOISE.search(record.getMessage())


_NOISE_FILTER = _NoiseFilter()


def quiet_python_logs():
  """Prints each TensorFlow Python log line once; drops its known noise.

  Under absl's app.run, TF's logger has its own handler and also propagates
  to absl's root handler, which would print every line twice. Unless the
  user set TF_CPP_MIN_LOG_LEVEL, INFO lines and the notices _PYTHON_NOISE
  matches are dropped; real warnings and errors stay.
  """
  tf_logger = logging.getLogger('tensorflow')
  tf_logger.propagate = False
  if user_set_tf_logging():
    return
  tf_logger.setLevel(logging.WARNING)
  if _NOISE_FILTER not in tf_logger.filters:
    tf_logger.addFilter(_NOISE_FILTER)


@contextlib.contextmanager
def on_tensorflow_log(prefix, callback):
  """Within the block, calls callback(message) for each TensorFlow Python
  log line that starts with `prefix`, shown or not: some of TF's INFO lines
  carry the only account of an error that TF handled itself."""
  tf_logger = logging.getLogger('tensorflow')
  level = tf_logger.getEffectiveLevel()

  def listen(record):
    if isinstance(record.msg, str) and record.msg.startswith(prefix):
      callback(record.getMessage())
    return record.levelno >= level  # Shown as before.

  old_level = tf_logger.level
  tf_logger.setLevel(min(level, logging.INFO))
  tf_logger.filters.insert(0, listen)
  try:
    yield
  finally:
    tf_logger.removeFilter(listen)
    tf_logger.setLevel(old_level)
