"""cifar10_distributed_train.py survives its faults (docs/distributed.md's
table): a 1-ps, 2-worker cluster on 127.0.0.1 whose tasks are killed (SIGKILL)
and started again, or lost for good; the chief reaches the ps through a proxy
(_Proxy) that can cut its connections. Each cluster ends with a task lost for
good, before --max_steps, so no fault has to beat the run's end under load."""

import glob
import os
import re
import shutil
import signal
import socket
import threading
import time

import pytest

from cifar10_support import checkpoints
import testutil
from testutil import LEARNING_RATE

pytestmark = pytest.mark.slow

SAVE_STEPS = 10
MAX_STEPS = 100000  # Never reached: a task lost for good ends each cluster.
# --startup_wait_secs and --operation_timeout_secs while a task (re)starts
# (10 to 25 s seen on a loaded, shared 2-core machine).
START_WAIT_SECS = 180
# The waits for a task that stays away, given only to the tasks that wait for
# it (--startup_wait_secs bounds nothing else once the variables exist).
GONE_WAIT_SECS = 2
# --operation_timeout_secs, a synchronous worker's wait of its next update,
# bounds its first run too (up to 4.4 s seen at a load of 16).
GONE_OPERATION_SECS = 15


def _lost(ps_address):
  """Why a worker says it lost its session to a ps task restarted at
  ps_address: naming it where it can tell, else the general reason
  (docs/distributed.md, "Which ps task"), each whole."""
  return (r'session lost \((?:ps task 0 at %s went away and came back|a ps '
          r'task restarted, or a connection to one broke)\)'
          % re.escape(ps_address))


def _restored(ps_address):
  """The chief's line as it restores its newest checkpoint after losing the
  ps at ps_address (groups: the checkpoint's step, the global step)."""
  return (r'^Worker 0: %s: restored model\.ckpt-(\d+), global step (\d+); '
          r'steps since then are lost\.$' % _lost(ps_address))


RESUMED = re.compile(r'^Resuming from checkpoint \S+model\.ckpt-(\d+) at step '
                     r'(\d+)', re.M)
# TensorFlow's Python and C++ log lines.
TF_LOG_LINE = re.compile(r'^((INFO|WARNING|ERROR):tensorflow|[IWEF]\d{4} )',
                         re.M)


class _Proxy(object):
  """A TCP proxy from 127.0.0.1:`port` to `target` ('host:port'), two
  threads a connection, that the test can cut() (its port and every
  connection closed: new ones refused) and reopen() on the same port."""

  # A chunk this large is part of a tensor (the model's variables are 4 MB
  # in all; a call's other messages are far smaller).
  TENSOR_BYTES = 1 << 16

  def __init__(self, port, target):
    self.port, self._target = port, target
    self._lock = threading.Lock()
    self._sockets = set()  # Closed by cut(); the listener's first.
    self._listener = None
    self._midway = threading.Event()  # Set: cut within the next tensor.
    self.reopen()

  def reopen(self):
    listener = socket.create_server(('127.0.0.1', self.port), backlog=16)
    with self._lock:
      self._listener = listener
      self._sockets.add(listener)
    threading.Thread(target=self._accept, args=(listener,),
                     daemon=True).start()

  def _accept(self, listener):
    host, _, port = self._target.rpartition(':')
    while True:
      try:
        client = listener.accept()[0]
      except OSError:
        return  # Cut.
      try:
        server = socket.create_connection((host, int(port)), timeout=5)
      except OSError:
        client.close()  # The target is down: the connection drops.
        continue
      server.settimeout(None)
      with self._lock:
        if listener is not self._listener:  # Cut meanwhile.
          client.close()
          server.close()
          return
        self._sockets.update((client, server))
      for source, sink in ((client, server), (server, client)):
        threading.Thread(target=self._forward, args=(source, sink),
                         daemon=True).start()

  def _forward(self, source, sink):
    try:
      while True:
        data = source.recv(1 << 20)
        if not data:
          break
        sink.sendall(data)
        if len(data) >= self.TENSOR_BYTES and self._midway.is_set():
          self.cut()
      sink.shutdown(socket.SHUT_WR)
    except OSError:
      pass  # Cut, or the other end went away.

  def cut(self):
    with self._lock:
      sockets, self._sockets, self._listener = self._sockets, set(), None
      self._midway.clear()
    for s in sockets:
      try:
        s.shutdown(socket.SHUT_RDWR)  # Wakes the threads blocked on it.
      except OSError:
        pass
      s.close()

  def cut_midway(self):
    """cut() as soon as part of a tensor has gone through, the rest of it
    on its way: a call is cut short (else the chief's next calls could wait
    through the cut, as TensorFlow's calls wait for a connection)."""
    self._midway.set()
    testutil.wait_for('a tensor through the proxy', lambda: (
        not self._midway.is_set()), [], secs=60)


class _Cluster(testutil.Tasks):
  """Tasks 'ps', 'w0' (the chief, through self.proxy) and 'w1'. waits:
  {worker: {flag: secs}} of startup_wait_secs and operation_timeout_secs
  (else START_WAIT_SECS), read at each start (a test may change them)."""

  def __init__(self, tmp_path, data_dir, extra_flags, waits=None):
    super().__init__({task: str(tmp_path / (task + '.log'))
                      for task in ('ps', 'w0', 'w1')})
    self.train_dir = str(tmp_path / 'train')
    self.settings = [
        '--data_dir=%s' % data_dir, '--max_steps=%d' % MAX_STEPS,
        '--batch_size=32', '--log_frequency=5',
        '--save_checkpoint_steps=%d' % SAVE_STEPS] + extra_flags
    self.waits = {task: dict(dict(startup_wait_secs=START_WAIT_SECS,
                                  operation_timeout_secs=START_WAIT_SECS),
                             **(waits or {}).get(task, {}))
                  for task in ('w0', 'w1')}
    self.afresh()

  def afresh(self):
    """New addresses, and no checkpoint of an attempt on the old ones."""
    ports = testutil.free_ports(4)
    self.addresses = {task: '127.0.0.1:%d' % port for task, port in zip(
        ('ps', 'w0', 'w1', 'proxy'), ports)}
    if getattr(self, 'proxy', None):
      self.proxy.cut()
    self.proxy = _Proxy(ports[3], self.addresses['ps'])
    shutil.rmtree(self.train_dir, ignore_errors=True)

  def start(self, task):
    cluster = ['--ps_hosts=' + self.addresses['proxy' if task == 'w0'
                                              else 'ps'],
               '--worker_hosts=%s,%s' % (self.addresses['w0'],
                                         self.addresses['w1'])]
    args = {'ps': ['--job_name=ps', '--task_index=0'],
            'w0': ['--job_name=worker', '--task_index=0',
                   '--train_dir=' + self.train_dir] + self.settings,
            'w1': ['--job_name=worker', '--task_index=1'] + self.settings}
    if task in self.waits:
      args[task] += ['--%s=%d' % wait for wait in self.waits[task].items()]
    self.processes[task] = testutil.start_script(
        'cifar10_distributed_train.py', args[task] + cluster, self.logs[task],
        testutil.with_learning_rate(LEARNING_RATE))

  def start_in_stages(self, stages, paused=()):
    """Starts each stage, [(tasks, what, ready)], once the one before is
    ready (listening, and ready() if given); tasks in `paused` are stopped
    (SIGSTOP) from their stage's readiness until the next stage listens."""

    def attempt():
      stopped = []
      for tasks, what, ready in stages:
        self.start_listening(tasks)
        for task in stopped:
          self.processes[task].send_signal(signal.SIGCONT)
        if ready:
          self.wait_for(what, ready)
        stopped = [task for task in tasks if task in paused]
        for task in stopped:
          self.processes[task].send_signal(signal.SIGSTOP)

    testutil.retry_port_taken(attempt)

  def port(self, task):
    return int(self.addresses[task].rsplit(':', 1)[1])

  def newest_step(self):
    paths = checkpoints.listed(self.train_dir)
    return checkpoints.step_of(paths[-1]) if paths else -1

  def stop(self):
    super().stop()
    self.proxy.cut()

  def saved(self):
    return set(glob.glob(os.path.join(self.train_dir, 'model.ckpt-*.index')))

  def check_end(self, saved):
    """No traceback, nor TF's own log lines, in any task's output (each says
    what a fault costs in its own words); the checkpoints `saved` kept, and
    every checkpoint restores."""
    for task in self.logs:
      output = self.log(task)
      assert 'Traceback' not in output, '%s:\n%s' % (task, output[-3000:])
      assert 'Exception in thread' not in output, output[-3000:]
      assert not TF_LOG_LINE.search(output), '%s:\n%s' % (task, output)
    assert saved <= self.saved()
    testutil.check_checkpoints_restore(self.train_dir)


# The wait a task left stops after (docs/distributed.md): for a ps task,
# --startup_wait_secs; for the chief, an asynchronous worker's
# --startup_wait_secs and a synchronous one's --operation_timeout_secs.
_PS_GONE_WAITS = dict(startup_wait_secs=GONE_WAIT_SECS)
_CHIEF_GONE_WAITS = {'async': dict(startup_wait_secs=GONE_WAIT_SECS),
                     'sync': dict(operation_timeout_secs=GONE_OPERATION_SECS)}


def _check_stopped_naming(cluster, task, named, wait):
  """The task's last line names the task lost for good, and the wait
  ({flag: secs}) it stopped after."""
  output = cluster.log(task)
  last = output.rstrip('\n').rsplit('\n', 1)[-1]
  assert last.startswith('Worker %s: ' % task[1]), output[-3000:]
  assert named in last, output[-3000:]
  (flag, secs), = wait.items()
  assert '%d s (--%s)' % (secs, flag) in last, last


def _waits_or_trains(cluster, task, quiet_secs=5):
  """A condition, true once `task` printed two step lines ('trains') or
  nothing for quiet_secs ('waits') from now on."""
  offset = len(cluster.log(task))
  last = [offset, time.monotonic()]  # The output's length, and since when.

  def condition():
    output = cluster.log(task)
    if len(testutil.step_line(r'Worker \d').findall(output[offset:])) >= 2:
      return 'trains'
    if len(output) != last[0]:
      last[:] = [len(output), time.monotonic()]
    return time.monotonic() - last[1] >= quiet_secs and 'waits'
  return condition


@pytest.mark.parametrize('mode', ['async', 'sync'])
def test_chief_ps_and_worker_killed_and_restarted(data_dir, tmp_path, mode):
  """Each task killed and restarted in turn; the chief cut from the running
  ps; worker 1 away, the chief training on, naming it (the table's "a
  non-chief worker that does not come back"); then the chief gone for good,
  which worker 1 names as it stops ("a chief that does not come back")."""
  cluster = _Cluster(tmp_path, data_dir,
                     ['--sync_replicas'] if mode == 'sync' else [])
  try:
    cluster.start_all(['ps', 'w1', 'w0'])  # Maybe on new ports: afresh().
    proxy = cluster.addresses['proxy']  # The ps, as the chief reaches it.
    cluster.wait_for('a checkpoint at step 20',
                     lambda: cluster.newest_step() >= 2 * SAVE_STEPS)

    # The chief: it resumes from its newest checkpoint; worker 1 goes on.
    before = cluster.newest_step()
    offset = len(cluster.log('w0'))
    cluster.kill('w0')
    cluster.restart('w0')
    resumed = cluster.wait_for('the chief to resume', lambda: RESUMED.search(
        cluster.log('w0', offset)))
    assert int(resumed.group(1)) >= before
    resumed_from = os.path.join(cluster.train_dir,
                                'model.ckpt-' + resumed.group(1))
    # On until that checkpoint is pruned (a reported failure restored it
    # again after a ps restart).
    cluster.wait_for('the resumed-from checkpoint to be pruned', lambda: (
        not os.path.exists(resumed_from + '.index')))

    # The ps: both workers go on from the newest checkpoint. The proxy is
    # closed while the ps is away, as the ps's own port is.
    before = cluster.newest_step()
    offsets = {task: len(cluster.log(task)) for task in ('w0', 'w1')}
    cluster.proxy.cut()
    cluster.kill('ps')
    cluster.restart('ps')
    cluster.proxy.reopen()
    restored = cluster.wait_for('the chief to restore', lambda: re.search(
        _restored(proxy), cluster.log('w0', offsets['w0']), re.M))
    checkpoint, step = int(restored.group(1)), int(restored.group(2))
    assert checkpoint >= before
    assert step >= checkpoint
    rejoined = cluster.wait_for('worker 1 to rejoin', lambda: re.search(
        r'^Worker 1: %s: rejoined at global step (\d+)\.$'
        % _lost(cluster.addresses['ps']),
        cluster.log('w1', offsets['w1']), re.M))
    # Not before the chief's restore (which sets the global step last).
    assert int(rejoined.group(1)) >= checkpoint
    cluster.wait_for('a checkpoint after the restore',
                     lambda: cluster.newest_step() > checkpoint)

    # The chief's connections to the running ps cut, then new ones let
    # through: it restores its newest checkpoint, and both train on.
    before = cluster.newest_step()
    offset = len(cluster.log('w0'))
    cluster.proxy.cut_midway()
    cluster.proxy.reopen()
    restored = cluster.wait_for('the chief to restore', lambda: re.search(
        _restored(proxy), cluster.log('w0', offset), re.M))
    checkpoint = int(restored.group(1))
    assert checkpoint >= before
    offset = len(cluster.log('w1'))
    cluster.wait_for('worker 1 to train and a checkpoint after the restore',
                     lambda: cluster.newest_step() > checkpoint and (
                         testutil.step_line(r'Worker \d').search(
                             cluster.log('w1', offset))))

    # Worker 1 away: the chief trains on without it, says so once, and when
    # it is back; restarted (with the short wait for the chief's end below),
    # it trains. Paused first (SIGSTOP), a synchronous worker 1 keeps any
    # token it took, so the kill lands while it holds one if it can.
    cluster.processes['w1'].send_signal(signal.SIGSTOP)
    cluster.wait_for('the chief to wait, or train alone',
                     _waits_or_trains(cluster, 'w0'))
    offset = len(cluster.log('w1'))
    chief_offset = len(cluster.log('w0'))
    cluster.kill('w1')
    named = 'Worker 0: worker task 1 at %s ' % cluster.addresses['w1']
    away = named + ('does not answer: training on without it until it is '
                    'back%s.' % (', the workers still here making up its '
                                 'share of each update' if mode == 'sync'
                                 else ''))
    # Bounded in time too: a chief that trains without the line prints.
    cluster.wait_for('the chief to train on without worker 1', lambda: (
        away in cluster.log('w0', chief_offset) and len(
            testutil.step_line(r'Worker \d').findall(
                cluster.log('w0', chief_offset))) >= 2),
                     restarting='w1', secs=START_WAIT_SECS)
    cluster.waits['w1'].update(_CHIEF_GONE_WAITS[mode])
    cluster.restart('w1')
    cluster.wait_for('worker 1 to train again, and the chief to see it back',
                     lambda: testutil.step_line(r'Worker \d').search(
                         cluster.log('w1', offset))
                     and named + 'is back.' in cluster.log('w0',
                                                           chief_offset),
                     secs=START_WAIT_SECS)
    chief_since = cluster.log('w0', chief_offset)
    assert [chief_since.count(away), chief_since.count(named + 'is back.')] == [
        1, 1], chief_since[-3000:]
    assert not RESUMED.search(chief_since) and 'session lost' not in (
        chief_since), chief_since[-3000:]

    # The chief, for good: worker 1 stops with one line naming it, after
    # its wait, and every checkpoint is kept.
    cluster.kill('w0')
    saved = cluster.saved()
    assert cluster.finish(['w1']) == {'w1': 1}, cluster.tails()
  finally:
    cluster.stop()
  _check_stopped_naming(cluster, 'w1',
                        'the chief (worker 0 at %s)' % cluster.addresses['w0'],
                        _CHIEF_GONE_WAITS[mode])
  cluster.check_end(saved)


# (The chief lost for good: the end of
# test_chief_ps_and_worker_killed_and_restarted, as is a worker that does
# not come back, which stops nothing.)
@pytest.mark.parametrize('mode', ['async', 'sync'], ids=['async-ps', 'sync-ps'])
def test_a_task_that_does_not_come_back_is_named(data_dir, tmp_path, mode):
  """A ps task lost for good: each worker stops with one line naming it
  after --startup_wait_secs; the chief cut from the running ps first, then
  worker 1 as the ps is killed."""
  cluster = _Cluster(tmp_path, data_dir,
                     ['--sync_replicas'] if mode == 'sync' else [],
                     waits={'w0': _PS_GONE_WAITS, 'w1': _PS_GONE_WAITS})
  # Short waits: each starts once what it waits for is there (the ps; for
  # worker 1, the chief's variables). The chief is paused until worker 1
  # listens (not to train alone on the cores worker 1 starts on); the fault
  # comes once worker 1 trains and a checkpoint of training is saved.
  initialised = ('the chief to initialise the variables',
                 lambda: cluster.newest_step() >= 0)
  training = ('worker 1 to train and a checkpoint at step %d' % SAVE_STEPS,
              lambda: (testutil.step_line(r'Worker \d').search(
                           cluster.log('w1')) and
                       cluster.newest_step() >= SAVE_STEPS))
  try:
    cluster.start_in_stages([(['ps'], None, None), (['w0'],) + initialised,
                             (['w1'],) + training], paused=['w0'])
    # Paused while the chief goes, worker 1 does not stop naming the chief.
    cluster.processes['w1'].send_signal(signal.SIGSTOP)
    cluster.proxy.cut()
    saved = cluster.saved()
    assert cluster.finish(['w0']) == {'w0': 1}, cluster.tails()
    cluster.kill('ps')
    cluster.processes['w1'].send_signal(signal.SIGCONT)
    assert cluster.finish(['w1']) == {'w1': 1}, cluster.tails()
  finally:
    cluster.stop()
  for task in ('w0', 'w1'):
    _check_stopped_naming(cluster, task, 'ps task 0 at %s' % cluster.addresses[
        'proxy' if task == 'w0' else 'ps'], _PS_GONE_WAITS)
  cluster.check_end(saved)
