"""A quiet start and a quiet run: TensorFlow's log noise kept off the scripts'
console (docs/console.md). Importing this module loads no TensorFlow."""

import contextlib
import ctypes
import logging
import os
import re
import sys
import tempfile

IMPORT_NOISE = re.compile(
    r'^(WARNING: All log messages before absl::InitializeLog\(\)'
    r'|[IW]\d{4} |To enable the following instructions: )')

PYTHON_NOISE = re.compile(
    r'is deprecated and will be removed|Instructions for updating:'
    r'|^Summary name .* is illegal; using .* instead\.$'
    # StepCounterHook's false alarm: it may read the step before its update.
    r'|^It seems that global step \(tf\.train\.get_global_step\) has not '
    r'been increased'
    # A lost cluster session: the worker prints its own line for it.
    r'|^An error occurred when attempting to close the session\. This may be '
    r'due to a preemption', re.S)


def asks_for_everything(level):
  """Whether a TF_CPP_MIN_LOG_LEVEL value (str or None) is 0 or less."""
  try:
    return int(level) <= 0
  except (TypeError, ValueError):
    return False


@contextlib.contextmanager
def filtered_stderr(noise):
  """Drops lines matching `noise` the block writes to fd 2, keeps the rest."""
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
      for line in captured.read().decode(errors='replace').splitlines(True):
        if not noise.match(line):
          sys.stderr.write(line)
      sys.stderr.flush()


def not_noise(record):
  """The filter quiet_python_logs adds to TensorFlow's logger."""
  return not PYTHON_NOISE.search(record.getMessage())


def quiet_python_logs():
  """Each TF Python log line once, without INFO lines and PYTHON_NOISE."""
  tf_logger = logging.getLogger('tensorflow')
  tf_logger.propagate = False
  if not asks_for_everything(os.environ.get('TF_CPP_MIN_LOG_LEVEL')):
    tf_logger.setLevel(logging.WARNING)
    tf_logger.addFilter(not_noise)  # Added once, however often called.


@contextlib.contextmanager
def on_tensorflow_log(prefix, callback):
  """Calls callback(message) for each TF Python log line starting with
  `prefix`, even hidden INFO lines, which may tell of an error TF handled."""
  tf_logger = logging.getLogger('tensorflow')
  level, old_level = tf_logger.getEffectiveLevel(), tf_logger.level
  def listen(record):
    if isinstance(record.msg, str) and record.msg.startswith(prefix):
      callback(record.getMessage())
    return record.levelno >= level  # Shown as before.
  tf_logger.setLevel(min(level, logging.INFO))
  tf_logger.filters.insert(0, listen)
  try:
    yield
  finally:
    tf_logger.removeFilter(listen)
    tf_logger.setLevel(old_level)


def before_tensorflow(module_name):
  """oneDNN's CPU kernels and, for '__main__', TensorFlow loaded quietly,
  unless it is loaded already (docs/console.md)."""
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
  user_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
  if (module_name != '__main__' or asks_for_everything(user_level)
      or 'tensorflow' in sys.modules):
    return
  try:
    ctypes.CDLL('libcuda.so.1')  # The NVIDIA driver, as TensorFlow finds it.
    level = 2
  except OSError:
    level = 3  # Hides CUDA's failed cuInit, the only error without one.
  try:
    level = max(level, int(user_level))
  except (TypeError, ValueError):
    pass
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = str(level)
  with filtered_stderr(IMPORT_NOISE):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
