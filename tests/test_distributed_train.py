"""Tests for cifar10_distributed_train.py: cluster flags, placement, and real
1-ps/2-worker clusters of processes on 127.0.0.1."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_distributed_train as dist
from cifar10_support import checkpoints
from cifar10_support import clusters
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import summaries
from cifar10_support import train_dirs
import synthetic
import testutil

# The learning clusters train as users do (batch 128) on learnable data, long
# enough to learn with a margin (docs/reliability.md, "The learning tests":
# at 100 synchronous updates some runs ended at 0.70).
LEARN_STEPS = 200
# Two asynchronous workers' gradients are one update stale on average, which
# tips the original's 0.1 (the edge of SGD's stability) over; 0.05 learns.
ASYNC_LEARNING_RATE = 0.05


# --- Cluster flags and TF_CONFIG ---------------------------------------------


def test_parse_hosts():
  assert clusters.parse_hosts(' a.example.com:2222, 10.0.0.2:1 ,[::1]:65535',
                              '--ps_hosts', ValueError) == [
                                  'a.example.com:2222', '10.0.0.2:1',
                                  '[::1]:65535']


@pytest.mark.parametrize('value,message', [
    ('', r'--ps_hosts is empty'),
    ('localhost', r"--ps_hosts entry 'localhost' is not host:port"),
    ('localhost:2222,', r'--ps_hosts has an empty entry'),
    (':2222', r"entry ':2222' is not host:port"),
    ('localhost:http', r"entry 'localhost:http' is not host:port"),
    ('localhost:65536', r'with a port in 1\.\.65535'),
    ('localhost:0', r"entry 'localhost:0'"),
])
def test_malformed_host_lists_are_named(value, message):
  with pytest.raises(ValueError, match=message):
    clusters.parse_hosts(value, '--ps_hosts', ValueError)


def test_resolve_cluster_from_flags_or_tf_config(capsys):
  task = testutil.resolve('{"ignored": true}', 'worker', 1, 'h0:1',
                          'h1:1,h2:1')
  assert task == ({'ps': ['h0:1'], 'worker': ['h1:1', 'h2:1']}, 'worker', 1,
                  120, 60)
  assert (task.name, task.device, task.label, task.is_chief) == (
      '/job:worker/task:1', '/job:worker/task:1/cpu:0', 'Worker 1', False)
  assert capsys.readouterr().out == (
      'Cluster flags given: ignoring the TF_CONFIG environment variable.\n')
  tf_config = json.dumps({'cluster': {'ps': ['h0:1'],
                                      'worker': ['h1:1', 'h2:1']},
                          'task': {'type': 'worker', 'index': 1}})
  assert testutil.resolve(tf_config)[:3] == task[:3]
  assert capsys.readouterr().out == ''
  # An evaluator needs no cluster.
  assert testutil.resolve(None, 'evaluator', 0, '', '')[:3] == (
      None, 'evaluator', 0)


@pytest.mark.parametrize('job,index,ps,message', [
    ('worker', 2, 'h0:1', r'--task_index=2 is out of range for job "worker", '
                          r'which has 2 task\(s\): use 0\.\.1'),
    ('ps', 1, 'h0:1', r'--task_index=1 is out of range for job "ps", which '
                      r'has 1 task\(s\): use 0\.\.0'),
    ('worker', -1, 'h0:1', r'--task_index=-1 is out of range'),
    ('ps', 0, 'h1:1', r'h1:1 listed more than once'),
    (None, 0, 'h0:1', r'--job_name is required'),
])
def test_cluster_flags_no_task_could_run_with_are_usage_errors(
    job, index, ps, message):
  with pytest.raises(app.UsageError, match=message):
    testutil.resolve(None, job, index, ps, 'h1:1,h2:1')


@pytest.mark.parametrize('args,error,message', [
    # Refused by main, as a usage error (each: test_cluster_flags_...).
    (['--job_name=worker', '--ps_hosts=h:1', '--worker_hosts=h:2',
      '--task_index=3'], app.UsageError, r'--task_index=3 is out of range'),
    # Refused as the flags are parsed.
    # (--replicas_to_aggregate without --sync_replicas: test_flag_rules.py.)
    (['--sync_replicas', '--replicas_to_aggregate=0'],
     flags.IllegalFlagValueError, r'--replicas_to_aggregate must be -1 \(the '
     r'number of workers\) or at least 1'),
    (['--startup_wait_secs=0'], flags.IllegalFlagValueError,
     r'flag --startup_wait_secs=0: 0 is not a positive integer'),
    (['--local_cluster=1'], flags.IllegalFlagValueError,
     r'--local_cluster takes two positive counts'),
    (['--local_cluster=1,0'], flags.IllegalFlagValueError,
     r'--local_cluster takes two positive counts'),
    (['--local_cluster=1,2', '--job_name=ps'], flags.IllegalFlagValueError,
     r'--local_cluster starts every task itself'),
])
def test_flags_no_task_could_run_with_are_refused(args, error, message):
  with pytest.raises(error, match=message):
    with testutil.as_script('cifar10_distributed_train.py', args, dist.FLAGS):
      assert error is app.UsageError  # The others, refused as parsed.
      dist.main(sys.argv[:1])


def test_xdist_workers_pick_ports_apart(monkeypatch):
  monkeypatch.setenv('PYTEST_XDIST_WORKER_COUNT', '2')
  shares = []
  for worker in ('gw0', 'gw1'):
    monkeypatch.setenv('PYTEST_XDIST_WORKER', worker)
    shares.append(set(testutil.own_ports()))
    assert set(testutil.free_ports(20)) <= shares[-1]
  assert not shares[0] & shares[1]
  assert shares[0] | shares[1] == set(testutil.TASK_PORTS)


def test_a_run_whose_port_was_taken_runs_again_up_to_3_times():
  # (Runs again until it works: test_tasks_whose_port_was_taken_start_again.)
  runs = []

  def run():
    runs.append(len(runs))
    raise testutil.PortTaken()

  with pytest.raises(testutil.PortTaken):
    testutil.retry_port_taken(run)
  assert runs == [0, 1, 2]


# The script's stand-in for testutil.Tasks: it listens on the port given and
# says so, or says the port is taken and ends, as the script does.
_SERVE = """
import socket, sys, time
s = socket.socket()
try:
  s.bind(('127.0.0.1', int(sys.argv[1])))
except OSError:
  sys.exit('Could not start the server of /job:ps/task:0')
s.listen()
print('This task listens on port %s of every network interface; ...'
      % sys.argv[1], flush=True)
time.sleep(600)
"""


class _StandIns(testutil.Tasks):
  """Stand-in tasks; a socket in self.others takes the port of each task in
  `taken` just before it first starts."""

  def __init__(self, tmp_path, tasks, taken):
    super().__init__({task: str(tmp_path / (task + '.log'))
                      for task in tasks})
    self.taken = set(taken)
    self.others = []
    self.starts = []
    self.afreshes = 0
    self.ports = dict(zip(tasks, testutil.free_ports(len(tasks))))

  def afresh(self):
    self.afreshes += 1
    self.ports = dict(zip(self.ports, testutil.free_ports(len(self.ports))))

  def port(self, task):
    return self.ports[task]

  def start(self, task):
    if task in self.taken:
      self.taken.remove(task)
      self.others.append(socket.create_server(('127.0.0.1', self.ports[task])))
    self.starts.append((task, self.ports[task]))
    with open(self.logs[task], 'a') as log:
      self.processes[task] = subprocess.Popen(
          [sys.executable, '-c', _SERVE, str(self.ports[task])], stdout=log,
          stderr=subprocess.STDOUT)

  def stop(self):
    super().stop()
    for other in self.others:
      other.close()


@pytest.mark.slow  # Processes (of the stand-in).
def test_tasks_whose_port_was_taken_start_again(tmp_path, monkeypatch):
  tasks = _StandIns(tmp_path, ['ps', 'w0', 'w1'], taken=['w0'])
  first = dict(tasks.ports)
  port_bindable = testutil.port_bindable

  def bindable(port):  # The other process lets the port go once refused.
    free = port_bindable(port)
    if not free and tasks.others:
      tasks.others.pop().close()
    return free

  monkeypatch.setattr(testutil, 'port_bindable', bindable)
  order = ('ps', 'w1', 'w0')
  try:
    # At the start: every task again, on the new ports afresh() gave.
    tasks.start_all(order)
    assert tasks.afreshes == 1
    assert tasks.starts == ([(task, first[task]) for task in order] +
                            [(task, tasks.ports[task]) for task in order])
    for task in tasks.logs:  # The logs are the second attempt's.
      assert tasks.log(task) == (
          'This task listens on port %d of every network interface; ...\n'
          % tasks.ports[task])
    # After a kill, another process takes the port as the task starts
    # again: again on its own port, once that is free.
    tasks.kill('ps')
    tasks.taken.add('ps')
    offset = len(tasks.log('ps'))
    tasks.restart('ps')
    assert all(p.poll() is None for p in tasks.processes.values())
  finally:
    tasks.stop()
  assert tasks.starts[-2:] == [('ps', tasks.port('ps'))] * 2
  output = tasks.log('ps', offset)
  assert output.count(testutil.PORT_TAKEN) == 1, output
  assert testutil.LISTENING.search(output), output


class _Clock(object):
  """clusters' clock: each sleep moves it on, no real time passes (a wait's
  length is counted, not measured under load)."""

  def __init__(self, limit):
    self.now = 0.0
    self._limit = limit

  def time(self):
    return self.now

  def sleep(self, secs):
    self.now += secs
    # An unbounded wait fails here instead of at pytest's timeout.
    assert self.now < self._limit, 'still waiting at %s s' % self.now


def test_waits_for_a_ps_task_are_bounded_and_name_it(monkeypatch):
  # At the start (wait_for_addresses) and after a lost session.
  clock = _Clock(limit=10)
  monkeypatch.setattr(clusters, 'time', clock)
  with socket.create_server(('127.0.0.1', 0)) as s0, socket.create_server(
      ('127.0.0.1', 0)) as s1, testutil.refused_ports(1) as (port,):
    tasks = {'/job:ps/task:%d' % i: '127.0.0.1:%d' % s.getsockname()[1]
             for i, s in enumerate((s0, s1))}
    good, bad = tasks['/job:ps/task:0'], '127.0.0.1:%d' % port
    clusters.wait_for_addresses({'/job:ps/task:0': good}, wait_secs=5)
    assert clock.now == 0  # It answered at once: no wait.
    with pytest.raises(TimeoutError) as raised:
      clusters.wait_for_addresses({'/job:ps/task:0': good,
                                   '/job:ps/task:1': bad}, wait_secs=1)
    # It gave up once the wait was over, polling every 0.5 s until then.
    assert 1 <= clock.now < 1.5
    message = str(raised.value)
    assert 'No answer after 1 s from /job:ps/task:1 at %s' % bad in message
    assert '/job:ps/task:0' not in message
    # Both ps tasks answer (each back already): TF's log line for the error
    # names task 1, which must not be read as task 10 or the reverse.
    assert clusters.wait_for_lost_ps_tasks(
        'Worker 0', tasks, 5, 'An error was raised. ... UNAVAILABLE: From '
        '/job:ps/replica:0/task:1:\nSocket closed') == (
            'ps task 1 at %s went away and came back' % tasks['/job:ps/task:1'])
    assert clusters.wait_for_lost_ps_tasks(
        'Worker 0', tasks, 5, '... From /job:ps/replica:0/task:10: ...') == (
            'a ps task restarted, or a connection to one broke')
    clock.now = 0
    with pytest.raises(TimeoutError) as raised:
      clusters.wait_for_lost_ps_tasks('Worker 1', {'/job:ps/task:0': bad}, 1,
                                      '')
  assert 1 <= clock.now < 1.5
  assert str(raised.value).startswith(
      'ps task 0 at %s did not come back within 1 s (--startup_wait_secs): '
      'stopping.' % bad)


# --- The worker graph --------------------------------------------------------


_CLUSTER = {'ps': ['h0:1'], 'worker': ['h1:1', 'h2:1']}


def _worker_graph(data_dir, task, replicas=None, **settings):
  """build_worker_graph of clusters.Task `task` in the default graph."""
  settings = run_flags.TrainSettings(data_dir, None, **dict(
      dict(batch_size=2, input_threads=1), **settings))
  return dist.build_worker_graph(settings, testutil.described(settings),
                                 clusters.Task(*task), replicas=replicas)


@pytest.mark.parametrize('job,index,compute_dtype', [
    ('worker', 1, None), ('worker', 1, tf.bfloat16), ('chief', 0, None)],
                         ids=['float32', 'mixed_bf16', 'chief_job'])
def test_worker_graph_placement_and_checkpoint_names(data_dir, job, index,
                                                     compute_dtype):
  # A chief job's graph runs on the chief.
  cluster = {'ps': ['h0:1', 'h1:1'], 'worker': ['h2:1', 'h3:1']}
  if job == 'chief':
    cluster['chief'] = ['h4:1']
  with tf.Graph().as_default() as graph:
    built = _worker_graph(data_dir, (cluster, job, index), 2,
                          compute_dtype=compute_dtype)
    variables = tf.global_variables()
    # Run by the session hooks in training; unused here, which TF would
    # report at exit.
    built['sync_optimizer'].ready_for_local_init_op.mark_used()
    saved_variables = checkpoints.saved_variables()
    saved = set(v.op.name for v in saved_variables)
  # The chief's class names, for the other workers to check their data
  # against, live on the ps tasks and in no checkpoint.
  chief_classes = built['chief_classes'].op.name
  assert chief_classes in set(v.op.name for v in variables) - saved
  replicas = built['sync_optimizer']._total_num_replicas  # pylint: disable=protected-access
  assert replicas == (3 if job == 'chief' else 2)  # One per training task.
  # Variables round-robin over both ps tasks; everything else on the task.
  tasks = set(v.device[:len('/job:ps/task:0')] for v in variables)
  assert tasks == {'/job:ps/task:0', '/job:ps/task:1'}
  assert built['global_step'].device.startswith('/job:ps/task:')
  for op in graph.get_operations():
    if op.type in ('RandomShuffleQueueV2', 'FixedLengthRecordReaderV2',
                   'Conv2D', 'SaveV2', 'RestoreV2'):
      assert op.device == '/job:%s/task:%d/device:CPU:0' % (job, index), (
          op.name)
  # --mixed_precision: the worker's convolutions in bfloat16, the variables
  # on the ps tasks float32.
  convs = [op for op in graph.get_operations() if op.type == 'Conv2D']
  assert len(convs) == 2
  assert {op.get_attr('T') for op in convs} == {compute_dtype or tf.float32}
  assert {v.dtype.base_dtype for v in saved_variables} == {tf.float32,
                                                           tf.int64}
  # The chief's checkpoint holds each weight's moving average under the name
  # cifar10_eval.py restores from.
  with tf.Graph().as_default():
    cifar10.inference(tf.zeros([1, 24, 24, 3]))
    wanted = tf.train.ExponentialMovingAverage(
        cifar10.MOVING_AVERAGE_DECAY).variables_to_restore()
  assert len(wanted) == 10
  assert all(name.endswith('/ExponentialMovingAverage') for name in wanted)
  assert set(wanted) <= saved


# --- Real clusters -----------------------------------------------------------


@pytest.mark.slow  # A process.
def test_worker_gives_up_on_an_unreachable_ps_naming_it(data_dir, tmp_path):
  with testutil.refused_ports(1) as (ps_port,):
    result = testutil.retry_port_taken(lambda: _run_task([
        '--job_name=worker', '--ps_hosts=127.0.0.1:%d' % ps_port,
        '--worker_hosts=127.0.0.1:%d' % testutil.free_ports(1)[0],
        '--startup_wait_secs=2', '--data_dir=%s' % data_dir,
        '--train_dir=%s' % tmp_path]))
  assert result.returncode == 1
  assert ('Worker 0: No answer after 2 s from /job:ps/task:0 at 127.0.0.1:%d'
          % ps_port) in result.stderr
  assert 'Traceback' not in result.stderr
  assert os.listdir(tmp_path) == []  # Nothing was trained or written.


def _run_cluster(tmp_path, worker_args, tf_config_worker_1=False,
                 after=lambda ports, chief_args: None):
  """Starts a ps, worker 1, then worker 0 (the chief) on new ports, worker i
  with the cluster flags (worker 1: TF_CONFIG if tf_config_worker_1) and
  worker_args[i]; once they ended, calls after(ports, the chief's args) and
  stops the ps (SIGTERM). The workers' exit statuses, outputs, and after's
  result; testutil.PortTaken if a task's port was taken."""
  ports = testutil.free_ports(3)
  hosts = ['127.0.0.1:%d' % port for port in ports]
  cluster = ['--ps_hosts=' + hosts[0], '--worker_hosts=' + ','.join(hosts[1:])]
  commands = [(['--job_name=ps'] + cluster, None)] + [
      (['--job_name=worker', '--task_index=%d' % i] + cluster + args, None)
      for i, args in enumerate(worker_args)]
  if tf_config_worker_1:
    commands[2] = (worker_args[1], json.dumps({
        'cluster': {'ps': hosts[:1], 'worker': hosts[1:]},
        'task': {'type': 'worker', 'index': 1}}))
  for arg in sum(worker_args, []):
    if arg.startswith('--train_dir='):  # An attempt on taken ports.
      shutil.rmtree(arg.split('=', 1)[1], ignore_errors=True)
  logs = [str(tmp_path / name) for name in ('ps.log', 'w0.log', 'w1.log')]
  processes = {}
  try:
    for i in (0, 2, 1):
      processes[i] = testutil.start_script(
          'cifar10_distributed_train.py', commands[i][0], logs[i],
          env=dict(TF_CONFIG=commands[i][1]))
    workers = [processes[1], processes[2]]
    testutil.wait_for('the workers to end', lambda: all(
        p.poll() is not None for p in workers), logs)
    outputs = [open(path).read() for path in logs]
    if any(testutil.PORT_TAKEN in output for output in outputs):
      raise testutil.PortTaken()
    # The ps serves until it is stopped.
    assert processes[0].poll() is None, outputs[0][-3000:]
    result = after(ports, commands[1][0])
  finally:
    testutil.stop(list(processes.values()))
  assert processes[0].returncode == -signal.SIGTERM  # Stopped by us.
  return [p.returncode for p in workers], outputs[1:], result


def _run_task(args, port=None):
  """testutil.run_script of a task (once `port`, an ended task's, can be
  bound); testutil.PortTaken if another process bound its port first."""
  if port:
    testutil.wait_for('port %d to be free' % port,
                      lambda: testutil.port_bindable(port), [], secs=60)
  result = testutil.run_script('cifar10_distributed_train.py', args)
  if result.returncode and testutil.PORT_TAKEN in result.stderr:
    raise testutil.PortTaken()
  return result


def _finished(outputs):
  """Each worker's (final global step, steps of its own), by index."""
  done = {}
  for index, output in enumerate(outputs):
    lines = testutil.DONE_LINE.findall(output)
    assert len(lines) == 1 and lines[0][0] == 'Worker %d' % index, (
        output[-3000:])
    done[index] = (int(lines[0][1]), int(lines[0][2]))
    # A worker that ran a step logged it, under its own index (either may
    # run all of them).
    logged = list(testutil.step_line(r'Worker \d').finditer(output))
    assert bool(logged) == (done[index][1] > 0), output[-3000:]
    assert all(m['label'] == 'Worker %d' % index for m in logged), (
        output[-3000:])
    assert 'Traceback' not in output and 'Exception in thread' not in output
  return done


def _check_chief_checkpoint(train_dir, min_step, max_step, data_dir,
                            tmp_path):
  """The chief's newest checkpoint, evaluated on data_dir
  (learnable_data_dir) by the one-device eval graph, which restores its
  moving averages: they learned."""
  checkpoint = tf.train.latest_checkpoint(train_dir)
  step = int(checkpoint.rsplit('-', 1)[1])
  assert min_step <= step <= max_step
  # The name is the global step the save began at; asynchronous workers may
  # move it on before the values are read, never back.
  assert step <= tf.train.load_variable(checkpoint, 'global_step') <= max_step
  assert any(name.startswith('events.out.tfevents')
             for name in os.listdir(train_dir))
  # The index names it relative to train_dir, so a moved one still reads.
  with open(os.path.join(train_dir, 'checkpoint')) as f:
    assert ('model_checkpoint_path: "%s"' % os.path.basename(checkpoint)
            in f.read())
  assert testutil.eval_precision(data_dir, train_dir, str(
      tmp_path / 'eval')) >= testutil.LEARNED


def _listening(pid='self'):
  """{socket inode: (hex address, port)} of every TCP socket listening in
  process `pid`'s network namespace (address all zeros: every address)."""
  found = {}
  for table in ('tcp', 'tcp6'):
    with open('/proc/%s/net/%s' % (pid, table)) as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        if fields[3] == '0A':  # LISTEN
          address, port = fields[1].split(':')
          found[fields[9]] = (address, int(port, 16))
  return found


def _own_wildcard_ports(pid):
  """{socket inode: port} of process `pid`'s sockets listening on every
  address."""
  own = set()
  for fd in os.listdir('/proc/%d/fd' % pid):
    try:
      own.add(os.readlink('/proc/%d/fd/%s' % (pid, fd)))
    except OSError:
      continue  # Closed meanwhile.
  return {inode: port for inode, (address, port) in _listening(pid).items()
          if not address.strip('0') and 'socket:[%s]' % inode in own}


@pytest.mark.slow  # A cluster of processes.
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='Linux')
def test_async_cluster_trains_to_the_global_step_and_learns(
    learnable_data_dir, tmp_path):
  # The README's one-machine cluster, as a user runs it: --local_cluster
  # starts 1 ps and 2 workers in a network namespace of their own and ends
  # by itself once they are done.
  train_dir, log = str(tmp_path / 'train'), str(tmp_path / 'cluster.log')
  launcher = testutil.start_script(
      'cifar10_distributed_train.py',
      ['--local_cluster=1,2', '--data_dir=' + learnable_data_dir,
       '--train_dir=' + train_dir, '--max_steps=%d' % LEARN_STEPS,
       '--log_frequency=20', '--operation_timeout_secs=60',
       '--startup_wait_secs=120'], log,
      testutil.with_learning_rate(ASYNC_LEARNING_RATE),
      # Buffered, as a user's: each line one write, whole in the log the
      # three tasks share (unbuffered, print writes a line in pieces).
      dict(PYTHONUNBUFFERED=None))
  try:
    def serving():
      try:
        with open('/proc/%d/task/%d/children' % (launcher.pid,
                                                  launcher.pid)) as f:
          tasks = [int(pid) for pid in f.read().split()]
        listening = {pid: _own_wildcard_ports(pid) for pid in tasks}
      except FileNotFoundError:  # A process ended meanwhile.
        return None
      return len(tasks) == 3 and all(listening.values()) and listening

    listening = testutil.wait_for(
        'the 3 tasks to listen', serving, [log],
        failed=lambda: launcher.poll() is not None and 'the launcher ended')
    # Each task listens on every address of its namespace, its port as its
    # line says; none of those sockets is in this machine's namespace.
    ports = sorted(port for task in listening.values()
                   for port in task.values())
    assert ports == [2222, 2223, 2224]
    inodes = {inode for task in listening.values() for inode in task}
    assert not inodes & set(_listening())
    testutil.wait_for('the cluster to end', lambda: launcher.poll() is not None,
                      [log])
  finally:
    testutil.stop([launcher])
  output = open(log).read()
  assert launcher.returncode == 0, output[-3000:]
  for pid in listening:  # The launcher stopped its ps task too.
    assert not os.path.exists('/proc/%d' % pid)
  for port in ports:
    assert output.count(
        'This task listens on port %d of every network interface; '
        'TensorFlow\'s server runs any graph sent to it, without '
        'authentication: docs/distributed.md#security.\n' % port) == 1
  assert output.endswith('--local_cluster: the workers are done; ps task(s) '
                         'stopped.\n'), output[-3000:]
  assert 'Traceback' not in output
  done = _finished([''.join(line for line in output.splitlines(True)
                            if line.startswith('Worker %d:' % index))
                    for index in range(2)])
  final_step = max(step for step, _ in done.values())
  assert final_step >= LEARN_STEPS
  # Asynchronous: each worker step is one update of the global step, so the
  # steps the two workers ran add up to it exactly.
  assert done[0][1] + done[1][1] == final_step
  _check_chief_checkpoint(train_dir, LEARN_STEPS, final_step,
                          learnable_data_dir, tmp_path)


@pytest.mark.slow  # Clusters of processes.
def test_sync_cluster_trains_to_the_global_step_and_learns(
    learnable_data_dir, tmp_path):
  settings = ['--data_dir=%s' % learnable_data_dir, '--sync_replicas',
              '--max_steps=%d' % LEARN_STEPS, '--log_frequency=20',
              '--operation_timeout_secs=60', '--startup_wait_secs=120']
  train_dir, train_2 = str(tmp_path / 'train'), str(tmp_path / 'train_2')

  def new_chief(ports, chief_args):
    # A new chief, with a new --train_dir, on the same ps.
    shutil.rmtree(train_2, ignore_errors=True)
    return testutil.retry_port_taken(lambda: _run_task([
        a for a in chief_args if not a.startswith('--train_dir=')] + [
            '--train_dir=' + train_2], ports[1]))

  codes, outputs, rerun = testutil.retry_port_taken(lambda: _run_cluster(
      tmp_path, [settings + ['--train_dir=' + train_dir], settings],
      tf_config_worker_1=True, after=new_chief))
  assert codes == [0, 0], '\n'.join(o[-3000:] for o in outputs)
  for output in outputs:
    assert ('SyncReplicas enabled: replicas_to_aggregate=2; '
            'total_num_replicas=2') in output
  done = _finished(outputs)
  # Synchronous training stops on the global step, which counts updates.
  assert done[0][0] == done[1][0]
  assert LEARN_STEPS <= done[0][0] <= LEARN_STEPS + 1
  # Each update averages 2 gradients, one per worker step (from either
  # worker), so the workers ran at least 2 steps per update; at the end each
  # may have had one step in flight that the stop cut short.
  assert done[0][1] + done[1][1] >= 2 * done[0][0] - 2
  # The updates applied what the workers computed: the model learned.
  _check_chief_checkpoint(train_dir, LEARN_STEPS, done[0][0],
                          learnable_data_dir, tmp_path)

  # The ps still held that run's token queue, closed when the chief stopped;
  # a new run on it fails at once and says so, instead of training nothing.
  assert rerun.returncode == 1
  assert ('Worker 0: the synchronous token queue on the ps tasks is closed, '
          'as the chief leaves it when it stops' in rerun.stderr)
  assert 'a new synchronous run needs fresh ps tasks' in rerun.stderr
  assert 'Traceback' not in rerun.stderr


def test_a_diverged_worker_names_the_global_step_and_prints_no_nan_line(
    capsys):
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    # As build_worker_graph orders it: the step is read before the update.
    step_before_update = global_step.read_value()
    # The loss turns NaN in the run that moves the global step from 3 to 4.
    loss = tf.where(step_before_update >= 3, np.nan, 1.0)
    with tf.control_dependencies([step_before_update]):
      train_op = tf.assign_add(global_step, 1)
    logger = progress.StepLogger(loss, batch_size=8, log_frequency=1,
                                 step=step_before_update, label='Worker 1')
    hooks = dist.step_hooks(logger, max_steps=100)
    with pytest.raises(progress.DivergedError) as diverged:
      with tf.train.MonitoredSession(hooks=hooks) as session:
        while not session.should_stop():
          session.run(train_op)
  assert logger.last_step == 3
  assert str(diverged.value).startswith(
      'Model diverged with loss = NaN at global step 3;')
  steps = [int(m['step']) for m in testutil.step_line(r'Worker \d').finditer(
      capsys.readouterr().out)]
  assert steps == [0, 1, 2]  # No line for the NaN step.


@pytest.mark.parametrize('task_index,sync', [(0, False), (0, True),
                                             (1, False)],
                         ids=['chief-async', 'chief-sync', 'worker-async'])
def test_the_chief_saves_after_the_nan_check_which_knows_the_step(
    task_index, sync, data_dir, tmp_path, monkeypatch):
  settings = run_flags.TrainSettings(data_dir, str(tmp_path), batch_size=2,
                                     input_threads=1)
  given = {}

  class Opened(Exception):
    pass

  def monitored_session(**kwargs):  # Never opened: nothing connects.
    given.update(kwargs)
    raise Opened()

  monkeypatch.setattr(tf.train, 'MonitoredSession', monitored_session)
  with pytest.raises(Opened):
    dist.train(settings, testutil.described(settings), clusters.Task(
        _CLUSTER, 'worker', task_index), None, 2 if sync else None)
  kinds = [type(hook) for hook in given['hooks']]
  # The logger stops at a NaN loss, naming the step it read.
  nan_check = kinds.index(progress.StepLogger)
  saving = [i for i, kind in enumerate(kinds) if kind in (
      summaries.SummaryHook, train_dirs.CheckpointSaverHook)]
  if task_index == 0:
    # A step whose loss is NaN writes no summary and no checkpoint.
    assert len(saving) == 2 and min(saving) > nan_check, kinds
  else:
    assert not saving and clusters.ChiefWatch in kinds, kinds


def _ancestors(op):
  """Every op `op` waits for, through its inputs and control inputs."""
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    if current not in seen:
      seen.add(current)
      stack.extend(t.op for t in current.inputs)
      stack.extend(current.control_inputs)
  return seen


def test_seed_gives_each_worker_its_own_graph_seed(data_dir):
  seeds = {}
  for seed, index in ((3, 0), (3, 1), (4, 0), (3, 0)):
    with tf.Graph().as_default() as graph:
      _worker_graph(data_dir, (_CLUSTER, 'worker', index), seed=seed)
      seeds.setdefault((seed, index), set()).add(graph.seed)
  assert all(len(s) == 1 and None not in s for s in seeds.values())
  assert len(set.union(*seeds.values())) == 3


@pytest.mark.parametrize('sync', [False, True])
def test_a_worker_reads_the_step_it_logs_before_its_own_update(sync,
                                                              data_dir):
  with tf.Graph().as_default() as g:
    graph = _worker_graph(data_dir, (_CLUSTER, 'worker', 1),
                          2 if sync else None)
    read = graph['step_before_update'].op
    handle = graph['global_step'].handle
    # Asynchronously the worker's run increments the global step itself;
    # synchronously its run hands its gradients to the accumulators, and the
    # chief's update of the global step waits for them.
    if sync:
      updates = [op for op in g.get_operations()
                 if op.type == 'ResourceAccumulatorApplyGradient']
    else:
      updates = [op for op in g.get_operations()
                 if op.type == 'AssignAddVariableOp' and
                 op.inputs[0] is handle]
    assert updates
    for op in updates:
      assert read in _ancestors(op), op.name


@pytest.mark.slow  # Clusters of processes.
def test_a_worker_whose_data_has_other_classes_than_the_chiefs_stops(
    data_dir, tmp_path):
  # Worker 1 reads a data set of three classes of its own; the chief,
  # CIFAR-10's ten: the worker names both and stops, the chief trains on.
  own_data = synthetic.make_own_data_dir(str(tmp_path / 'own'),
                                         ('red cat', 'зелёный', '青/blue'))
  common = ['--max_steps=20', '--batch_size=8', '--startup_wait_secs=120']
  codes, outputs, _ = testutil.retry_port_taken(lambda: _run_cluster(
      tmp_path, [['--data_dir=' + data_dir,
                  '--train_dir=%s' % (tmp_path / 'train')] + common,
                 ['--data_dir=' + own_data] + common]))
  assert codes == [0, 1], outputs
  assert re.search(
      r'^Worker 1: the data in .*own/cifar-10-batches-bin has 3 classes '
      r'\(red cat, зелёный, 青/blue\), but the chief\'s has 10 classes '
      r'\(airplane, .*\): every worker must read the same data set',
      outputs[1], re.M), outputs[1]
  assert 'Traceback' not in outputs[1]
  assert testutil.DONE_LINE.search(outputs[0]), outputs[0]
