"""Keeps TensorFlow's own log noise off the scripts' console.

What TensorFlow writes on every run of this TF1-style code says nothing to
its users, so by default it is left out: the start-up lines written while
TensorFlow loads (absl writes them whatever TF_CPP_MIN_LOG_LEVEL says); C++
INFO and WARNING lines (among them each queue thread's "Enqueue operation
was cancelled" at session close), and without an NVIDIA driver also C++
ERROR lines, which there only say CUDA found no driver; the deprecation
notices of the tf.compat.v1 API this project is about, and
MonitoredTrainingSession's INFO lines (the scripts print their own).

TF_CPP_MIN_LOG_LEVEL=0 asks for everything: TensorFlow then logs as it would
without this module. Any other value keeps the filter on, at the user's C++
level or the default, whichever hides more.

A script calls `startup.before_tensorflow(__name__)` before anything imports
TensorFlow, and `quiet_python_logs()` in its main(); importing a script as a
module (the tests do) changes nothing.
"""

import contextlib
import ctypes
import logging
import os
import re
import sys
import tempfile

# Set by before_tensorflow: whether the user asked for all of TF's output.
_state = {'verbose': None}

# Lines absl and TensorFlow write to stderr while TensorFlow loads.
IMPORT_NOISE = re.compile(
    r'^(WARNING: All log messages before absl::InitializeLog\(\)'
    r'|[IW]\d{4} '
    r'|To enable the following instructions: )')

# Python-side TensorFlow records that say nothing to this project's users.
PYTHON_NOISE = re.compile(
    r'is deprecated and will be removed|Instructions for updating:'
    r'|^Summary name .* is illegal; using .* instead\.$'
    # StepCounterHook reads the global step in the same run that increments
    # it, and on a busy machine sometimes before: a false alarm here.
    r'|^It seems that global step \(tf\.train\.get_global_step\) has not '
    r'been increased'
    # A lost cluster session: the worker prints its own line for it.
    r'|^An error occurred when attempting to close the session\. This may be '
    r'due to a preemption', re.S)


def asks_for_everything(level):
  """Whether a TF_CPP_MIN_LOG_LEVEL value (str, or None if unset) asks for
  all of TensorFlow's output: 0 or less."""
  try:
    return level is not None and int(level) <= 0
  except ValueError:
    return False


def tensorflow_verbose():
  """Whether TensorFlow logs unfiltered: the user set TF_CPP_MIN_LOG_LEVEL=0."""
  if _state['verbose'] is None:
    return asks_for_everything(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))
  return _state['verbose']


def has_nvidia_driver():
  """Whether the NVIDIA driver's CUDA library loads (what TF looks for)."""
  try:
    ctypes.CDLL('libcuda.so.1')
  except OSError:
    return False
  return True


def quiet_cpp_level(user_level, driver_present):
  """TF_CPP_MIN_LOG_LEVEL for a quiet run: the user's (str, or None if
  unset) where it hides at least as much as the default, else the default:
  '2' hides INFO and WARNING lines; without a driver '3' also hides CUDA's
  failed cuInit (the run's own failures reach the user as exceptions).
  """
  default = '2' if driver_present else '3'
  try:
    return str(max(int(user_level), int(default)))
  except (TypeError, ValueError):
    return default


@contextlib.contextmanager
def filtered_stderr(noise):
  """Drops lines matching `noise` that the block writes to file descriptor 2
  (absl's C++ logging writes there directly); the rest is written out, in
  order, when the block ends."""
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

  After TensorFlow is imported it only records whether the user asked for
  everything; a second call changes nothing.
  """
  if _state['verbose'] is not None:
    return
  user_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
  _state['verbose'] = asks_for_everything(user_level)
  if _state['verbose'] or 'tensorflow' in sys.modules:
    return
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = quiet_cpp_level(user_level,
                                                       has_nvidia_driver())
  with filtered_stderr(IMPORT_NOISE):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import


def not_noise(record):
  """The filter quiet_python_logs adds to TensorFlow's logger."""
  return not PYTHON_NOISE.search(record.getMessage())


def quiet_python_logs():
  """Prints each TensorFlow Python log line once (under app.run it would also
  propagate to absl's handler); unless TF_CPP_MIN_LOG_LEVEL=0, drops INFO
  lines and PYTHON_NOISE, keeping real warnings and errors."""
  tf_logger = logging.getLogger('tensorflow')
  tf_logger.propagate = False
  if tensorflow_verbose():
    return
  tf_logger.setLevel(logging.WARNING)
  tf_logger.addFilter(not_noise)  # Added once, however often called.


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
