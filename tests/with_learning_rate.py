"""Runs a training script as a user would (as __main__, the user's console),
with only cifar10.INITIAL_LEARNING_RATE changed, for process tests whose runs
on the synthetic data must not diverge (testutil.with_learning_rate):

    python tests/with_learning_rate.py 0.02 cifar10_distributed_train.py ARGS
"""

import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
  learning_rate, script = float(sys.argv[1]), os.path.join(ROOT, sys.argv[2])
  sys.argv = [script] + sys.argv[3:]
  sys.path.insert(0, ROOT)
  # The script's own first call, before the TensorFlow import below; its
  # second call, when the script runs, changes nothing.
  from cifar10_support import console  # pylint: disable=g-import-not-at-top
  console.before_tensorflow('__main__')
  import cifar10  # pylint: disable=g-import-not-at-top
  cifar10.INITIAL_LEARNING_RATE = learning_rate
  runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
  main()
