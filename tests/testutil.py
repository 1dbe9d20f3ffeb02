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


def script_env(**overrides):
  """The environment a user's shell gives a script, plus `overrides`.

  Without TF_CPP_MIN_LOG_LEVEL (conftest sets it for the test process): the
  scripts then keep TensorFlow's noise off the console, as for a user.
  """
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  env.update(overrides)
  return env


def run_script(script, args, timeout=240, **env):
  """Runs one of the repository's scripts as a user would; returns the result.

  Args:
    env: environment variables to set for it (see script_env).

  Returns:
    subprocess.CompletedProcess with text stdout and stderr.
  """
  env = script_env(**env)
  return subprocess.run([sys.executable, os.path.join(ROOT, script)] + args,
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout)
