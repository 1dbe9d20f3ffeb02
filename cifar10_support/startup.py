"""What every script does before TensorFlow loads.

    from cifar10_support import startup
    startup.before_tensorflow(__name__)

must come before anything imports TensorFlow, which reads these settings
once when it loads.
"""

import os

from cifar10_support import console


def choose_cpu_kernels():
  """oneDNN's CPU kernels, unless TF_ENABLE_ONEDNN_OPTS says otherwise.

  They train this model about 1.6x faster than TensorFlow's default CPU
  kernels (benchmarks/README.md, change 1). Before TensorFlow loads.
  """
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


def before_tensorflow(module_name):
  """Chooses oneDNN's CPU kernels and, run as a script, a quiet start-up.

  `choose_cpu_kernels`; TF_ENABLE_ONEDNN_OPTS=0 in the environment turns
  them off. Run as a script (module_name '__main__'), TensorFlow then loads
  without its start-up noise (`console.before_tensorflow`); imported as a
  module (the tests, the benchmark), the console is left as it is.

  Args:
    module_name: the calling script's __name__.
  """
  choose_cpu_kernels()
  if module_name == '__main__':
    console.before_tensorflow()
