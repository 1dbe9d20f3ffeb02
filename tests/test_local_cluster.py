"""--local_cluster's launcher (cifar10_support/local_cluster.py): where the
tasks run, and how they are stopped. A real cluster of the script runs in
tests/test_distributed_train.py (test_async_cluster_trains_...)."""

import os
import signal
import subprocess
import sys

from absl.testing import flagsaver
import pytest

import cifar10_distributed_train as dist
from cifar10_support import local_cluster
import testutil


@pytest.mark.parametrize('unshare', [None, pytest.param(
    'echo "unshare: write failed /proc/self/uid_map: Operation not '
    'permitted" >&2; exit 1', marks=pytest.mark.slow, id='refused')])
def test_where_no_network_namespace_can_be_made_one_line_says_so(
    unshare, tmp_path, monkeypatch):
  # A machine with an interface besides loopback, even one that is down:
  # its tasks must not run there. Without unshare, or with one refused: one
  # line, what to do, and nothing started.
  if unshare:
    (tmp_path / 'unshare').write_text('#!/bin/sh\n' + unshare + '\n')
    (tmp_path / 'unshare').chmod(0o755)
  monkeypatch.setenv('PATH', str(tmp_path))
  monkeypatch.setattr(local_cluster.socket, 'if_nameindex',
                      lambda: [(1, 'lo'), (2, 'eth0')])
  monkeypatch.setattr(os, 'execv', None)
  monkeypatch.setattr(local_cluster, 'run_tasks', None)
  with flagsaver.flagsaver():
    dist.FLAGS(['cifar10_distributed_train.py', '--local_cluster=1,2'])
    with pytest.raises(SystemExit) as stopped:
      local_cluster.run(1, 2, dist.FLAGS)
  message = str(stopped.value.code)
  assert message.startswith(
      '--local_cluster: cannot make a private network namespace here (%s). '
      'Run this command in a container with no network' % (
          'unshare: write failed /proc/self/uid_map: Operation not permitted'
          if unshare else 'no unshare command (util-linux, Linux only)'))
  assert message.endswith('docs/distributed.md#security.')
  assert '\n' not in message


# A stand-in task: says it started, then waits for a signal, which it
# reports and ends with as a trainer does (128 + N); with 'fail LOG', it
# fails once LOG says w1 started (its signal handled), as a chief whose
# --train_dir is refused.
_TASK = """
import os, signal, sys, time
name = sys.argv[1]
if sys.argv[2:3] == ['fail']:
  while 'w1 started' not in open(sys.argv[3]).read():
    time.sleep(0.05)
  sys.exit(1)
def say(what):  # One write: the tasks share the log.
  os.write(1, ('%s %s\\n' % (name, what)).encode())
def stop(signum, frame):
  say('got ' + signal.Signals(signum).name)
  sys.exit(128 + signum)
for signum in (signal.SIGINT, signal.SIGTERM):
  signal.signal(signum, stop)
say('started')
time.sleep(600)
"""


def _launch(tmp_path, workers):
  """run_tasks in a process of its own, with one stand-in ps and the given
  worker commands (arguments of _TASK); (process, log path)."""
  code = ('import sys; from cifar10_support import local_cluster; '
          'sys.exit(local_cluster.run_tasks(%r, %r, poll_secs=0.1))' % (
              [[sys.executable, '-c', _TASK, 'ps']],
              [[sys.executable, '-c', _TASK] + args for args in workers]))
  log = str(tmp_path / 'log')
  with open(log, 'w') as out:
    return subprocess.Popen([sys.executable, '-c', code], cwd=testutil.ROOT,
                            stdout=out, stderr=subprocess.STDOUT), log


@pytest.mark.slow  # Processes (stand-ins).
@pytest.mark.parametrize('sent,got,status', [
    (signal.SIGINT, 'SIGINT', 130), (signal.SIGTERM, 'SIGTERM', 143),
    (signal.SIGHUP, 'SIGTERM', 143)])
def test_a_signal_goes_to_each_worker_once_then_the_ps_is_stopped(
    tmp_path, sent, got, status):
  # SIGHUP too (the terminal closed): as SIGTERM, so a chief saves.
  launcher, log = _launch(tmp_path, [['w0'], ['w1']])
  try:
    testutil.wait_for('the tasks to start', lambda: open(log).read().count(
        'started') == 3, [log])
    launcher.send_signal(sent)
    assert launcher.wait(60) == status
  finally:
    launcher.kill()
  lines = open(log).read().splitlines()
  assert sorted(line for line in lines if line.startswith('w') and
                ' got ' in line) == [
      'w0 got ' + got, 'w1 got ' + got]
  # The ps, once both workers had ended.
  assert lines[-2:-1] == ['ps got SIGTERM']
  assert lines[-1] == ('--local_cluster: the workers stopped on %s (exit '
                       'status %d); ps task(s) stopped.' % (sent.name, status))


@pytest.mark.slow  # Processes (stand-ins).
def test_a_worker_that_fails_stops_the_others_and_gives_the_status(tmp_path):
  # The chief refused its --train_dir: worker 1 would wait for it.
  launcher, log = _launch(tmp_path, [['w0', 'fail', str(tmp_path / 'log')],
                                     ['w1']])
  try:
    assert launcher.wait(60) == 1
  finally:
    launcher.kill()
  lines = open(log).read().splitlines()
  assert 'w1 got SIGTERM' in lines
  assert lines[-1] == ('--local_cluster: worker 0 failed (exit status 1): the '
                       'others were stopped; ps task(s) stopped.')


def _in_a_network_namespace(code, *before):
  """Runs python `code` in a new network namespace, after the commands
  `before` there; its CompletedProcess."""
  return subprocess.run(
      ['unshare', '--net', 'sh', '-ec', '; '.join(before + (
          'exec "$@"',)), 'sh', sys.executable, '-c', code],
      cwd=testutil.ROOT, capture_output=True, text=True, timeout=60)


_LOOPBACK = """
import socket
from cifar10_support import local_cluster
local_cluster._bring_up_loopback()
print(local_cluster._loopback_only())
socket.create_server(('127.0.0.1', 0)).close()  # Works once lo is up.
print('up')
"""


@pytest.mark.slow  # Processes.
@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith('linux'),
                    reason='root on Linux, as the project machines')
def test_loopback_is_brought_up_only_when_down():
  # In a new namespace lo is down: brought up. In one whose lo is up already,
  # as a container without a network (docker run --network none) has it,
  # nothing is asked of the kernel: such a container grants no NET_ADMIN.
  result = _in_a_network_namespace(_LOOPBACK)
  assert result.stdout == 'True\nup\n', result.stderr
  result = _in_a_network_namespace(
      'import os, sys; os.execv(sys.executable, [sys.executable, "-c", %r])'
      % _LOOPBACK, 'ip link set lo up',
      'set -- setpriv --bounding-set=-net_admin --inh-caps=-net_admin "$@"')
  assert result.stdout == 'True\nup\n', result.stderr
