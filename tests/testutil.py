"""Helpers the tests share: bounded sessions, script runs, fixtures built once."""

import fcntl
import os
import random
import re
import shutil
import socket
import subprocess
import sys

import tensorflow.compat.v1 as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Any op that blocks longer than this (an empty queue, say) fails the test.
OP_TIMEOUT_MS = 60000


def session_config(num_cpus=1):
  return tf.ConfigProto(operation_timeout_in_ms=OP_TIMEOUT_MS,
                        device_count={'CPU': num_cpus})


def config_threads(config):
  """(intra, inter) of a tf.ConfigProto, as sessions.thread_settings gives
  them (benchmarks/benchmark.py prints them too)."""
  pools = config.session_inter_op_thread_pool
  inter = pools[0].num_threads if pools else config.inter_op_parallelism_threads
  return config.intra_op_parallelism_threads, inter


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


# Precision @ 1 on learnable_data_dir's 512 test records (10 classes, chance
# 0.1) that only a model that learned reaches. Healthy runs of every trainer
# end at 1.000 (a few records short of it at worst); a broken update, sign
# or label ends near chance or diverges.
LEARNED = 0.8
LEARNABLE_TEST_RECORDS = 512


# cifar10_eval.py's precision line.
PRECISION_LINE = re.compile(r'^\S+ \S+: precision @ 1 = (\d\.\d{3})$', re.M)


def script_command(script, learning_rate=None):
  """The command that runs one of the repository's scripts as a user would:
  [python, path, ...], through tests/with_learning_rate.py when
  learning_rate is given (None: the script's own)."""
  if learning_rate is None:
    return [sys.executable, os.path.join(ROOT, script)]
  return [sys.executable, os.path.join(ROOT, 'tests', 'with_learning_rate.py'),
          str(learning_rate), script]


def eval_precision(data_dir, train_dir, eval_dir):
  """cifar10_eval.py --run_once on train_dir's newest checkpoint, as a user
  runs it, on every test record once; returns its precision @ 1."""
  result = run_script('cifar10_eval.py', [
      '--run_once', '--data_dir=%s' % data_dir,
      '--checkpoint_dir=%s' % train_dir, '--eval_dir=%s' % eval_dir,
      '--num_examples=%d' % LEARNABLE_TEST_RECORDS], timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  return float(PRECISION_LINE.search(result.stdout).group(1))


# A learning rate the fixtures' short runs on the synthetic colours reach a
# working model with, every time (the original's 0.1 on 100 such records
# diverged in 1 of 28 measured runs and once ended at chance).
FIXTURE_LEARNING_RATE = 0.05
FIXTURE_SEED = 1


def train_fixture(data_dir, train_dir, max_steps, batch_size, **kwargs):
  """cifar10_train.train, deterministic where it can be: a graph seed, one
  input thread, and FIXTURE_LEARNING_RATE; for fixtures that need a model
  that learned, not for tests of training itself.

  Args:
    **kwargs: other fields of run_flags.TrainSettings.
  """
  import cifar10  # pylint: disable=g-import-not-at-top
  import cifar10_train  # pylint: disable=g-import-not-at-top
  from cifar10_support import run_flags  # pylint: disable=g-import-not-at-top

  real_inputs = cifar10.distorted_inputs

  def seeded_inputs(*args, **inputs_kwargs):
    # The first random op of the training graph: every op from here on
    # takes its seed from the graph's.
    tf.set_random_seed(FIXTURE_SEED)
    return real_inputs(*args, **inputs_kwargs)

  kwargs.setdefault('log_frequency', 100)
  original = cifar10.INITIAL_LEARNING_RATE
  cifar10.INITIAL_LEARNING_RATE = FIXTURE_LEARNING_RATE
  cifar10.distorted_inputs = seeded_inputs
  try:
    return cifar10_train.train(run_flags.TrainSettings(
        data_dir, train_dir, max_steps=max_steps, batch_size=batch_size,
        input_threads=1, **kwargs))
  finally:
    cifar10.INITIAL_LEARNING_RATE = original
    cifar10.distorted_inputs = real_inputs


def shared_dir(tmp_path_factory, name, build):
  """A directory built once for the whole run, by whichever worker first asks.

  Under pytest-xdist each worker has its own session, so a session fixture
  would be built once per worker; trained checkpoints that several tests
  only read are built here once, under a lock, in the run's shared temporary
  directory, and the others wait for it.

  Args:
    tmp_path_factory: pytest's fixture.
    name: str, the directory's name.
    build: function(path) that fills the (new) directory at path.

  Returns:
    The directory's path.
  """
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent  # The run's directory, above every worker's.
  path = os.path.join(str(root), name)
  with open(path + '.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(path + '.done'):
      shutil.rmtree(path, ignore_errors=True)  # A build that failed.
      os.makedirs(path)
      build(path)
      open(path + '.done', 'w').close()
  return path


# Below Linux's ephemeral range (32768-60999 by default), from which the
# kernel picks the source port of every outgoing connection: a cluster's own
# gRPC channels could otherwise take a port before its task binds it.
TASK_PORTS = range(20000, 32768)

# What the script prints when its server cannot bind its port.
PORT_TAKEN = 'Could not start the server of'


def own_ports():
  """This pytest-xdist worker's share of TASK_PORTS, apart from every other
  worker's: two workers of a run never pick the same port, so none can take
  a port another picked before its task binds it (TensorFlow's servers
  refuse SO_REUSEPORT, so a picked port cannot be held open for them). Two
  runs at once share the shares; retry_port_taken covers that."""
  worker = os.environ.get('PYTEST_XDIST_WORKER', 'gw0')
  count = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
  return TASK_PORTS[int(worker[len('gw'):])::count]


def free_ports(count):
  """`count` different ports on 127.0.0.1 that nothing listens on now,
  outside the ephemeral range and in this worker's own share of it; for the
  tasks of a test cluster, a server, or an address where nothing listens."""
  ports = []
  share = own_ports()
  for port in random.sample(share, min(200, len(share))):
    with socket.socket() as s:
      try:
        s.bind(('127.0.0.1', port))
      except OSError:
        continue
    ports.append(port)
    if len(ports) == count:
      return ports
  raise RuntimeError('no %d free ports in %s' % (count, share))


class PortTaken(Exception):
  """A task found its port taken (by a process outside the tests) between
  free_ports' pick and its bind."""


def retry_port_taken(run, attempts=3):
  """run(), again on new ports (run picks them) while it raises PortTaken;
  the last attempt's PortTaken fails the test."""
  for attempt in range(attempts):
    try:
      return run()
    except PortTaken:
      if attempt == attempts - 1:
        raise
