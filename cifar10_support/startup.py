"""What every script runs before anything imports TensorFlow (which reads
these settings once, when it loads): startup.before_tensorflow(__name__)."""

import ctypes
import os
import sys

from cifar10_support import console


def before_tensorflow(module_name):
  """Chooses oneDNN's CPU kernels and, run as a script, a quiet start-up.

  oneDNN trains this model faster (benchmarks/README.md, change 1);
  TF_ENABLE_ONEDNN_OPTS=0 turns it off. For module_name '__main__' TensorFlow
  loads at console.quiet_cpp_level without its start-up lines, unless the
  user asks for everything or TensorFlow is loaded already (so a second call
  changes nothing); an imported module leaves the console as it is.
  """
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
  user_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
  if (module_name != '__main__' or console.asks_for_everything(user_level)
      or 'tensorflow' in sys.modules):
    return
  try:
    ctypes.CDLL('libcuda.so.1')  # The NVIDIA driver, as TensorFlow finds it.
    driver_present = True
  except OSError:
    driver_present = False
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = console.quiet_cpp_level(user_level,
                                                               driver_present)
  with console.filtered_stderr(console.IMPORT_NOISE):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
