"""cifar10_distributed_train.py survives its faults: real processes of a 1-ps,
2-worker cluster on 127.0.0.1, killed with SIGKILL and started again.

Each scenario asserts what docs/distributed.md promises: after a fault the
global step is at least the newest checkpoint's before it (at most one
checkpoint interval lost), the run reaches --max_steps, no task prints a
traceback, and every checkpoint on disk restores.
"""

import glob
import os
import re
import signal
import subprocess
import time

import pytest

from cifar10_support import checkpoints
import testutil
from test_distributed_train import DONE_LINE, LOG_LINE

# Clusters of processes (conftest's reading of the source misses _Cluster).
pytestmark = pytest.mark.slow

SAVE_STEPS = 10
# The original's 0.1 diverged in some asynchronous runs of a few hundred steps
# on the synthetic records; this one trains them without (see start()).
LEARNING_RATE = 0.02
# Waits short enough that a task which stays away ends the test quickly.
WAIT_SECS = 20
# Waits long enough for a killed task to start again on a loaded machine.
RESTART_WAIT_SECS = 90
# No scenario may take longer than this.
SCENARIO_SECS = 240
# Why a session was lost: the ps task by name when the worker could tell
# which one (it is down at that moment, or TF's error names it), else the
# general reason; which one a restart gives depends on the timing.
_LOST = (r'session lost \((ps task 0 at (?P<ps>\S+) restarted|a ps task '
         r'restarted, or a connection to one broke)\)')
RESTORED = re.compile(
    r'^Worker 0: ' + _LOST + r': restored model\.ckpt-(?P<checkpoint>\d+), '
    r'global step (?P<step>\d+); steps since then are lost\.$', re.M)
REJOINED = re.compile(
    r'^Worker 1: ' + _LOST + r': rejoined at global step (?P<step>\d+)\.$',
    re.M)
RESUMED = re.compile(r'^Resuming from checkpoint \S+model\.ckpt-(\d+) at step '
                     r'(\d+)', re.M)
# TensorFlow's Python and C++ log lines.
TF_LOG_LINE = re.compile(r'^((INFO|WARNING|ERROR):tensorflow|[IWEF]\d{4} )',
                         re.M)


class _Cluster(object):
  """The processes of one cluster, each task's output appended to its log."""

  def __init__(self, tmp_path, data_dir, max_steps, extra_flags,
               wait_secs=WAIT_SECS):
    ports = testutil.free_ports(3)
    self.addresses = {'ps': '127.0.0.1:%d' % ports[0],
                      'w0': '127.0.0.1:%d' % ports[1],
                      'w1': '127.0.0.1:%d' % ports[2]}
    self.train_dir = str(tmp_path / 'train')
    self.logs = {task: str(tmp_path / (task + '.log')) for task in
                 self.addresses}
    cluster = ['--ps_hosts=' + self.addresses['ps'],
               '--worker_hosts=%s,%s' % (self.addresses['w0'],
                                         self.addresses['w1'])]
    settings = cluster + [
        '--data_dir=%s' % data_dir, '--max_steps=%d' % max_steps,
        '--batch_size=32', '--log_frequency=5',
        '--save_checkpoint_steps=%d' % SAVE_STEPS,
        '--startup_wait_secs=%d' % wait_secs,
        '--operation_timeout_secs=%d' % wait_secs] + extra_flags
    self.args = {
        'ps': ['--job_name=ps', '--task_index=0'] + cluster,
        'w0': ['--job_name=worker', '--task_index=0',
               '--train_dir=' + self.train_dir] + settings,
        'w1': ['--job_name=worker', '--task_index=1'] + settings}
    self.processes = {}
    self.deadline = time.time() + SCENARIO_SECS

  def start(self, task):
    """Starts the script for `task`, with LEARNING_RATE, as a user would."""
    env = testutil.script_env()  # The console a user sees.
    with open(self.logs[task], 'a') as log:
      self.processes[task] = subprocess.Popen(
          testutil.script_command('cifar10_distributed_train.py',
                                  LEARNING_RATE) + self.args[task],
          cwd=testutil.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

  def kill(self, task):
    """SIGKILL, as a crash or a lost machine; returns once it is gone."""
    self.processes[task].send_signal(signal.SIGKILL)
    self.processes[task].wait(timeout=30)

  def log(self, task):
    with open(self.logs[task]) as f:
      return f.read()

  def newest_step(self):
    paths = checkpoints.listed(self.train_dir)
    return checkpoints.step_of(paths[-1]) if paths else -1

  def wait_for(self, what, condition):
    """Polls condition() until it returns something true; returns that."""
    while time.time() < self.deadline:
      found = condition()
      if found:
        return found
      for task, process in self.processes.items():
        if task != 'ps' and process.poll() not in (None, 0):
          break
      else:
        time.sleep(0.2)
        continue
      break
    pytest.fail('waiting for %s:\n%s' % (what, self.tails()))

  def tails(self):
    return '\n'.join('--- %s\n%s' % (task, self.log(task)[-2500:])
                     for task in self.logs if os.path.exists(self.logs[task]))

  def finish(self, tasks=('w0', 'w1')):
    """Waits for the workers to end; returns their exit statuses."""
    try:
      return [self.processes[task].wait(
          timeout=max(self.deadline - time.time(), 1)) for task in tasks]
    except subprocess.TimeoutExpired:
      pytest.fail('the workers did not end:\n' + self.tails())

  def stop(self):
    for process in self.processes.values():
      if process.poll() is None:
        process.kill()
      process.wait()

  def check_console(self):
    """No traceback, and none of TensorFlow's own log lines, in any task's
    output: what a fault costs, each task says in its own words."""
    for task in self.logs:
      output = self.log(task)
      assert 'Traceback' not in output, '%s:\n%s' % (task, output[-3000:])
      assert 'Exception in thread' not in output, output[-3000:]
      assert not TF_LOG_LINE.search(output), '%s:\n%s' % (task, output)


def _check_every_checkpoint_restores(train_dir):
  indexes = glob.glob(os.path.join(train_dir, 'model.ckpt-*.index'))
  assert indexes
  for index in indexes:
    assert checkpoints.verified_reader(index[:-len('.index')])[1] is None


def _new_output(cluster, task, offset):
  return cluster.log(task)[offset:]


@pytest.mark.parametrize('mode', ['async', 'sync'])
def test_chief_ps_and_worker_killed_and_restarted(data_dir, tmp_path, mode):
  max_steps = 400 if mode == 'async' else 200
  cluster = _Cluster(tmp_path, data_dir, max_steps,
                     ['--sync_replicas'] if mode == 'sync' else [],
                     wait_secs=RESTART_WAIT_SECS)
  try:
    for task in ('ps', 'w1', 'w0'):
      cluster.start(task)
    cluster.wait_for('a checkpoint at step 20',
                     lambda: cluster.newest_step() >= 2 * SAVE_STEPS)

    # The chief: it resumes from its newest checkpoint; worker 1 goes on.
    before = cluster.newest_step()
    offset = len(cluster.log('w0'))
    cluster.kill('w0')
    time.sleep(1)
    cluster.start('w0')
    resumed = cluster.wait_for('the chief to resume', lambda: RESUMED.search(
        _new_output(cluster, 'w0', offset)))
    assert int(resumed.group(1)) >= before
    resumed_from = os.path.join(cluster.train_dir,
                                'model.ckpt-' + resumed.group(1))
    # Trained on until the checkpoint it resumed from is pruned: the
    # reported failure restored that one again after a ps restart.
    cluster.wait_for('the resumed-from checkpoint to be pruned', lambda: (
        not os.path.exists(resumed_from + '.index')))

    # The ps: both workers go on from the newest checkpoint.
    before = cluster.newest_step()
    cluster.kill('ps')
    time.sleep(1)
    cluster.start('ps')
    restored = cluster.wait_for('the chief to restore', lambda: RESTORED.search(
        _new_output(cluster, 'w0', offset)))
    assert restored.group('ps') in (None, cluster.addresses['ps'])
    assert int(restored.group('checkpoint')) >= before
    assert int(restored.group('step')) >= int(restored.group('checkpoint'))
    rejoined = cluster.wait_for('worker 1 to rejoin',
                                lambda: REJOINED.search(cluster.log('w1')))
    # Not before the chief's restore (which sets the global step last).
    assert int(rejoined.group('step')) >= int(restored.group('checkpoint'))
    cluster.wait_for('a checkpoint after the restore', lambda: (
        cluster.newest_step() > int(restored.group('checkpoint'))))

    # Worker 1: it rejoins and trains; the chief goes on in the session it
    # has (it may reach --max_steps alone meanwhile).
    offset = len(cluster.log('w1'))
    chief_offset = len(cluster.log('w0'))
    cluster.kill('w1')
    time.sleep(1)
    cluster.start('w1')
    # (Or to find the run already at --max_steps, if the chief got there
    # alone meanwhile.)
    cluster.wait_for('worker 1 to train again', lambda: (
        LOG_LINE.search(_new_output(cluster, 'w1', offset)) or
        DONE_LINE.search(_new_output(cluster, 'w1', offset))))

    assert cluster.finish() == [0, 0], cluster.tails()
    chief_since = _new_output(cluster, 'w0', chief_offset)
    assert not RESUMED.search(chief_since) and 'session lost' not in (
        chief_since), chief_since[-3000:]
    done = {index: int(step) for index, step, _ in DONE_LINE.findall(
        cluster.log('w0') + cluster.log('w1'))}
    assert done['0'] >= max_steps
  finally:
    cluster.stop()
  cluster.check_console()
  _check_every_checkpoint_restores(cluster.train_dir)
  assert checkpoints.step_of(checkpoints.newest(cluster.train_dir)) >= max_steps


def _index_files(train_dir):
  return set(glob.glob(os.path.join(train_dir, 'model.ckpt-*.index')))


# (A non-chief worker lost for good need not stop anything: asynchronous
# training goes on without it, and synchronous training did too in some runs,
# on the chief's gradients alone.)
@pytest.mark.parametrize('mode,lost', [
    ('async', 'ps'), ('sync', 'ps'), ('async', 'w0'), ('sync', 'w0')])
def test_a_task_that_does_not_come_back_is_named(data_dir, tmp_path, mode,
                                                  lost):
  cluster = _Cluster(tmp_path, data_dir, 100000,
                     ['--sync_replicas'] if mode == 'sync' else [])
  try:
    for task in ('ps', 'w1', 'w0'):
      cluster.start(task)
    cluster.wait_for('a checkpoint at step 10',
                     lambda: cluster.newest_step() >= SAVE_STEPS)
    cluster.kill(lost)
    saved = _index_files(cluster.train_dir)
    others = [task for task in ('w0', 'w1') if task != lost]
    assert cluster.finish(others) == [1] * len(others), cluster.tails()
  finally:
    cluster.stop()
  named = {'ps': 'ps task 0 at %s', 'w0': 'the chief (worker 0 at %s)'}[
      lost] % cluster.addresses[lost]
  for task in others:
    output = cluster.log(task)
    last = output.rstrip('\n').rsplit('\n', 1)[-1]
    assert last.startswith('Worker %s: ' % task[1]), output[-3000:]
    assert named in last, output[-3000:]
  cluster.check_console()
  # Nothing was deleted, and everything there restores.
  assert saved <= _index_files(cluster.train_dir)
  _check_every_checkpoint_restores(cluster.train_dir)
