"""A quiet start and a quiet run: what every script runs before anything
imports TensorFlow (`before_tensorflow(__name__)`: TensorFlow reads these
settings once, when it loads), and TensorFlow's own log noise kept off the
scripts' console: its start-up lines, C++ INFO and WARNING lines (ERROR too
without an NVIDIA driver, where they only say CUDA found none),
tf.compat.v1 deprecation notices and Python INFO lines (docs/console.md has
the list). TF_CPP_MIN_LOG_LEVEL=0 or less gives TensorFlow all its output
back; any other value keeps the filter on. Importing this module loads no
TensorFlow.
"""

import contextlib
import ctypes
import logging
import os
import re
import sys
import tempfile

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
  """Whether a TF_CPP_MIN_LOG_LEVEL value (str, or None if unset) is 0 or
  less, asking for all of TensorFlow's output."""
  try:
    return level is not None and int(level) <= 0
  except ValueError:
    return False


def quiet_cpp_level(user_level, driver_present):
  """TF_CPP_MIN_LOG_LEVEL for a quiet run: the user's (str, or None if
  unset) where it hides at least as much as the default, '2' (no INFO or
  WARNING lines), or '3' without a driver (no CUDA failed cuInit either; the
  run's own failures reach the user as exceptions)."""
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
      lines = captured.read().decode(errors='replace').splitlines(keepends=True)
      sys.stderr.write(''.join(line for line in lines
                               if not noise.match(line)))
      sys.stderr.flush()


def not_noise(record):
  """The filter quiet_python_logs adds to TensorFlow's logger."""
  return not PYTHON_NOISE.search(record.getMessage())


def quiet_python_logs():
  """Prints each TensorFlow Python log line once (under app.run it would also
  propagate to absl's handler); unless TF_CPP_MIN_LOG_LEVEL asks for
  everything, drops INFO lines and PYTHON_NOISE, keeping real warnings and
  errors. For a script's main(), after before_tensorflow."""
  tf_logger = logging.getLogger('tensorflow')
  tf_logger.propagate = False
  # before_tensorflow only replaces a level that does not ask for
  # everything with another that does not.
  if asks_for_everything(os.environ.get('TF_CPP_MIN_LOG_LEVEL')):
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


def before_tensorflow(module_name):
  """Chooses oneDNN's CPU kernels and, run as a script, a quiet start-up.

  oneDNN trains this model faster; TF_ENABLE_ONEDNN_OPTS=0 turns it off. For module_name '__main__' TensorFlow
  loads at quiet_cpp_level without its start-up lines, unless the
  user asks for everything or TensorFlow is loaded already (so a second call
  changes nothing); an imported module leaves the console as it is.
  """
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
  user_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
  if (module_name != '__main__' or asks_for_everything(user_level)
      or 'tensorflow' in sys.modules):
    return
  try:
    ctypes.CDLL('libcuda.so.1')  # The NVIDIA driver, as TensorFlow finds it.
    driver_present = True
  except OSError:
    driver_present = False
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = quiet_cpp_level(user_level,
                                                               driver_present)
  with filtered_stderr(IMPORT_NOISE):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
