"""Helpers the tests share: bounded sessions, script runs, fixtures built once."""

import contextlib
import fcntl
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
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


def another_models_checkpoint(directory, step=5):
  """The path of a checkpoint at `step` in directory that another model
  wrote: a conv1/weights of another shape, its moving average and the
  global step; no softmax_linear/biases (this model's last layer)."""
  with tf.Graph().as_default():
    weights = tf.get_variable('conv1/weights', [3, 3, 3, 8],
                              initializer=tf.zeros_initializer())
    tf.train.ExponentialMovingAverage(0.9).apply([weights])
    global_step = tf.train.get_or_create_global_step()
    with tf.Session(config=session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(global_step.assign(step))
      return tf.train.Saver().save(
          sess, os.path.join(directory, 'model.ckpt'), global_step=step)


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
# 0.1) that only a model that learned reaches; a broken update, sign or label
# ends near chance or diverges. A healthy run separates every colour (1.000)
# or, now and then, all but two or three (0.80, 0.70): docs/reliability.md
# ("The learning tests") has every measured run of each test that uses it,
# and the 30 untrained checkpoints' 0.000-0.250.
LEARNED = 0.5
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
# What it prints once its server listens: a ps task's line, or a training
# task's before it waits for the ps tasks.
LISTENING = re.compile(r'^(ps task \d+ serving at \S+;|(Chief|Master|Worker '
                       r'\d+): waiting up to \d+ s for the ps tasks\.$)',
                       re.M)


def own_ports():
  """This pytest-xdist worker's share of TASK_PORTS, apart from every other
  worker's: two workers of a run never pick the same port, so none can take
  a port another picked before its task binds it (TensorFlow's servers
  refuse SO_REUSEPORT, so a picked port cannot be held open for them). Two
  runs at once share the shares; retry_port_taken covers that."""
  worker = os.environ.get('PYTEST_XDIST_WORKER', 'gw0')
  count = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
  return TASK_PORTS[int(worker[len('gw'):])::count]


def _bound_sockets(count):
  """`count` sockets, each bound to a different port of own_ports() on
  127.0.0.1, not listening."""
  share = own_ports()
  sockets = []
  for port in random.sample(share, min(200, len(share))):
    s = socket.socket()
    try:
      s.bind(('127.0.0.1', port))
    except OSError:
      s.close()
      continue
    sockets.append(s)
    if len(sockets) == count:
      return sockets
  for s in sockets:
    s.close()
  raise RuntimeError('no %d free ports in %s' % (count, share))


def free_ports(count):
  """`count` different ports on 127.0.0.1 that nothing listens on now,
  outside the ephemeral range and in this worker's own share of it; for the
  tasks of a test cluster, or a server."""
  sockets = _bound_sockets(count)
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


@contextlib.contextmanager
def refused_ports(count):
  """`count` ports, as free_ports', where nothing listens for certain while
  the block runs: held bound, not listening, so a connection to one is
  refused and no other process (another test run's server) can listen on
  one meanwhile."""
  sockets = _bound_sockets(count)
  try:
    yield [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


class PortTaken(Exception):
  """A task found its port taken (by a process outside the tests) between
  free_ports' pick and its bind."""


def retry_port_taken(run, attempts=3):
  """run(), again while it raises PortTaken: on new ports, which run picks,
  or on its own port once that is free again (Tasks.restart); the last
  attempt's PortTaken fails the test."""
  for attempt in range(attempts):
    try:
      return run()
    except PortTaken:
      if attempt == attempts - 1:
        raise


def port_bindable(port):
  """Whether a server could listen on `port` now, bound as TensorFlow's
  gRPC servers bind it: on every interface, with SO_REUSEADDR, so that the
  connections of a killed server in TIME_WAIT do not hold it, a process
  listening on it does."""
  try:
    s, address = socket.socket(socket.AF_INET6), '::'  # IPv4 too.
  except OSError:  # No IPv6 here.
    s, address = socket.socket(), '0.0.0.0'
  with s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind((address, port))
    except OSError:
      return False
  return True


# How long the tests let the processes they wait on print nothing before
# they call it a hang and fail, showing their output. Under load they print
# more slowly, never not at all: a healthy task's longest silence is its
# start, importing TensorFlow (4 to 25 s seen on the shared 2-core machine
# at loads of 10 to 20), or a wait the test set shorter (--startup_wait_secs).
# Well inside pytest's timeout (pytest.ini), so a hang fails with the output.
QUIET_SECS = 180


def wait_for(what, condition, logs, failed=lambda: None, secs=None,
             quiet_secs=QUIET_SECS, poll_secs=0.2):
  """Polls condition() until it returns something true; returns that.

  No wall-clock budget, which load could use up, unless `secs` is given:
  fails the test once nothing has been written to any of `logs` (paths) for
  `quiet_secs`, or once failed() returns something true (a process that
  ended with an error, say), showing the end of each log.
  """
  def written():
    return sum(os.path.getsize(path) for path in logs if os.path.exists(path))

  size, since = written(), time.monotonic()
  deadline = since + secs if secs else None
  while True:
    found = condition()
    if found:
      return found
    failure = failed()
    now = written()
    if now != size:
      size, since = now, time.monotonic()
    if deadline and time.monotonic() > deadline:
      failure = failure or 'not within %d s' % secs
    if failure or time.monotonic() - since > quiet_secs:
      found = condition()  # Come true as a process ended, say.
      if found:
        return found
      pytest.fail('waiting for %s: %s\n%s' % (
          what, failure or 'nothing printed for %d s' % quiet_secs,
          '\n'.join('--- %s\n%s' % (path, _tail(path)) for path in logs)))
    time.sleep(poll_secs)


def _tail(path, chars=2500):
  if not os.path.exists(path):
    return ''
  with open(path) as f:
    return f.read()[-chars:]


class Tasks(object):
  """The processes of a test cluster on 127.0.0.1, one per task, each
  task's output appended to its log; tasks whose names begin with 'ps'
  serve until they are stopped.

  A subclass gives start(task), which starts the task's process into
  self.processes, its output appended to self.logs[task]; port(task); and
  afresh(), which picks every task's port anew and deletes what the tasks
  wrote (for start_all).
  """

  def __init__(self, logs):
    self.logs = logs
    self.processes = {}

  def serves(self, task):
    """Whether the task's process runs a server (an evaluator's does not)."""
    return not task.startswith('evaluator')

  def start_all(self, order):
    """Starts the tasks in `order` and waits until every server listens.
    While one finds its port taken, stops every task and starts them all
    again afresh(), as retry_port_taken allows."""

    def start():
      for task in order:
        self.start(task)
      servers = [task for task in order if self.serves(task)]

      def ended_before_listening():
        return [task for task in servers
                if self.processes[task].poll() is not None and
                not LISTENING.search(self.log(task))]

      ended = self.wait_for('every server to listen', lambda: (
          ended_before_listening() or all(
              LISTENING.search(self.log(task)) for task in servers)))
      if ended is True:
        return
      self.stop()
      if not any(PORT_TAKEN in self.log(task) for task in ended):
        pytest.fail('%s ended before listening:\n%s' % (ended, self.tails()))
      for path in self.logs.values():
        if os.path.exists(path):
          os.remove(path)
      self.processes = {}
      self.afresh()
      raise PortTaken()

    retry_port_taken(start)

  def log(self, task):
    with open(self.logs[task]) as f:
      return f.read()

  def tails(self):
    return '\n'.join('--- %s\n%s' % (task, _tail(path))
                     for task, path in self.logs.items())

  def _failed(self, restarting):
    return ', '.join('%s ended with exit status %d' % (task, p.returncode)
                     for task, p in sorted(self.processes.items())
                     if not task.startswith('ps') and task != restarting and
                     p.poll() not in (None, 0))

  def wait_for(self, what, condition, restarting=None, secs=None):
    """testutil.wait_for on every task's log, failing as soon as a task
    but a ps (and `restarting`) has ended with an error."""
    return wait_for(what, condition, list(self.logs.values()),
                    lambda: self._failed(restarting), secs=secs)

  def finish(self, tasks=None):
    """Waits for `tasks`, by default all but the ps tasks, to end; returns
    {task: exit status}."""
    tasks = tasks or [task for task in self.processes
                      if not task.startswith('ps')]
    wait_for('%s to end' % ', '.join(tasks), lambda: all(
        self.processes[task].poll() is not None for task in tasks),
             list(self.logs.values()))
    return {task: self.processes[task].returncode for task in tasks}

  def kill(self, task):
    """SIGKILL, as a crash or a lost machine; returns once it has ended."""
    self.processes[task].kill()
    self.processes[task].wait(timeout=60)

  def restart(self, task):
    """Starts `task` again on its own port, once that can be bound, until
    it listens: again if another process bound the port first (which
    retry_port_taken allows a few times)."""
    port = self.port(task)

    def start():
      # A killed server's port is free as its process ends; a port taken
      # meanwhile may be let go soon (a probe like free_ports').
      self.wait_for('port %d to be free' % port,
                    lambda: port_bindable(port), restarting=task, secs=60)
      offset = len(self.log(task))
      self.start(task)
      process = self.processes[task]
      self.wait_for('%s to listen on port %d' % (task, port), lambda: (
          LISTENING.search(self.log(task)[offset:]) or
          process.poll() is not None), restarting=task)
      output = self.log(task)[offset:]
      if not LISTENING.search(output):
        if PORT_TAKEN in output:
          raise PortTaken()
        pytest.fail('%s ended before it listened:\n%s' % (task, self.tails()))

    retry_port_taken(start)

  def stop(self):
    for process in self.processes.values():
      if process.poll() is None:
        process.kill()
      process.wait()
