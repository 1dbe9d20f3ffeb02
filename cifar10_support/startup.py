"""What every script does first, before anything imports TensorFlow (which
reads these settings once, when it loads):

    from cifar10_support import startup
    startup.before_tensorflow(__name__)
"""

import os

from cifar10_support import console


def before_tensorflow(module_name):
  """Chooses oneDNN's CPU kernels and, run as a script, a quiet start-up.

  oneDNN trains this model faster than TensorFlow's default CPU kernels
  (benchmarks/README.md, change 1); TF_ENABLE_ONEDNN_OPTS=0 in the
  environment turns them off. Run as a script (module_name '__main__'),
  TensorFlow then loads without its start-up noise; imported as a module,
  the console is left as it is.
  """
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
  if module_name == '__main__':
    console.before_tensorflow()
