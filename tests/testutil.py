"""Helpers the tests share: bounded sessions and script runs."""

import os
import subprocess
import sys

import tensorflow.compat.v1 as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Any op that blocks longer than this (an empty queue, say) fails the test.
OP_TIMEOUT_MS = 60000


def session_config(num_cpus=1):
  return tf.ConfigProto(operation_timeout_in_ms=OP_TIMEOUT_MS,
                        device_count={'CPU': num_cpus})


def run_script(script, args, timeout=240):
  """Runs one of the repository's scripts as a user would; returns the result.

  Returns:
    subprocess.CompletedProcess with text stdout and stderr.
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')
  return subprocess.run([sys.executable, os.path.join(ROOT, script)] + args,
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout)
