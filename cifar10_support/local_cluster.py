"""--local_cluster: every task of a cluster as a child process of one
command, in a network namespace whose only interface is loopback, so that no
other machine reaches their servers (docs/distributed.md#security). Loads no
TensorFlow: `python -m cifar10_support.local_cluster` runs it in the new one."""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

PREFIX = '--local_cluster: '


def _loopback_only():
  """Whether this network namespace has no interface but loopback."""
  return [name for _, name in socket.if_nameindex()] == ['lo']


def _bring_up_loopback():
  """Brings 'lo' up if it is down (which needs CAP_NET_ADMIN here)."""
  import fcntl  # pylint: disable=g-import-not-at-top; Linux only, as unshare.
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    request = struct.pack('16sH22x', b'lo', 0)
    flags = struct.unpack_from('16sH', fcntl.ioctl(sock, 0x8913,  # GET
                                                   request))[1]
    if not flags & 1:  # IFF_UP
      fcntl.ioctl(sock, 0x8914, struct.pack('16sH22x', b'lo', flags | 1))


def _unshare():
  """The unshare command that makes a network namespace here (as root, or
  as a user mapped to root in a user namespace of its own); else exits
  with one line saying what to do."""
  unshare = shutil.which('unshare')
  problem = 'no unshare command (util-linux, Linux only)'
  for command in ([[unshare, '--net'], [unshare, '--net', '--map-root-user']]
                  if unshare else []):
    probe = subprocess.run(command + ['true'], capture_output=True, text=True,
                           check=False)
    if probe.returncode == 0:
      return command
    problem = probe.stderr.strip().rpartition('\n')[2] or 'refused'
  sys.exit(PREFIX + 'cannot make a private network namespace here (%s). Run '
           'this command in a container with no network (docker run '
           '--network none ...), or start each task by hand on a network only '
           'the cluster uses: docs/distributed.md#security.' % problem)


def run(num_ps, num_workers, flag_values, first_port=2222):
  """Runs num_ps ps tasks and num_workers workers of this script, each given
  the flags set in flag_values (less --local_cluster) and its task's, in a
  network namespace of their own (`run_tasks`; made with unshare unless
  this one has loopback alone). Returns run_tasks' exit status."""
  hosts = ['localhost:%d' % (first_port + i)
           for i in range(num_ps + num_workers)]
  # Not at the top: `python -m` of this module loads no TensorFlow.
  from cifar10_support import run_flags  # pylint: disable=g-import-not-at-top
  given = run_flags.given(flag_values)
  given.pop('local_cluster')
  # The interpreter and what ran this script (a wrapper too), less its
  # arguments.
  command = ([sys.executable] +
             sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv) + 1] +
             list(given.values()) +
             ['--ps_hosts=' + ','.join(hosts[:num_ps]),
              '--worker_hosts=' + ','.join(hosts[num_ps:])])
  tasks = [[command + ['--job_name=%s' % job, '--task_index=%d' % index]
            for index in range(count)]
           for job, count in (('ps', num_ps), ('worker', num_workers))]
  if os.environ.pop('TF_CONFIG', None) is not None:
    print(PREFIX + 'ignoring the TF_CONFIG environment variable.')
  print(PREFIX + '%d ps task(s) and %d worker(s) on this machine, in a '
        'network namespace of their own whose only interface is loopback: no '
        'other machine reaches their ports.' % (num_ps, num_workers),
        flush=True)
  if _loopback_only():  # A container without a network, say.
    return run_tasks(*tasks)
  package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  os.environ['PYTHONPATH'] = os.pathsep.join(
      [package_dir] + [p for p in [os.environ.get('PYTHONPATH')] if p])
  unshare = _unshare()
  os.execv(unshare[0], unshare + ['--', sys.executable, '-m', __name__,
                                  json.dumps(tasks)])


def run_tasks(ps_commands, worker_commands, poll_secs=0.5):
  """Starts the commands, each a process in a session of its own; SIGINT
  goes to the workers as SIGINT, SIGTERM and SIGHUP as SIGTERM (a chief then
  writes its final checkpoint). Once a worker fails unasked, the others get
  SIGTERM; the ps tasks get it once every worker has ended. Returns the exit
  status of the first worker that failed (128 + N for signal N), else 0."""
  ps_tasks = [subprocess.Popen(c, start_new_session=True)
              for c in ps_commands]
  workers = [subprocess.Popen(c, start_new_session=True)
             for c in worker_commands]
  failed, signalled = [], []  # The first worker that failed unasked.

  def stop(workers_signal):
    for worker in workers:
      if worker.poll() is None:
        worker.send_signal(workers_signal)

  def forward(signum, unused_frame):
    signalled.append(signal.Signals(signum).name)
    stop(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

  for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, forward)
  while any(worker.poll() is None for worker in workers):
    if not failed and not signalled:
      failed += [i for i, worker in enumerate(workers) if worker.poll()][:1]
      if failed:
        stop(signal.SIGTERM)
    time.sleep(poll_secs)
  for task in ps_tasks:
    task.terminate()
    task.wait()
  codes = [128 - code if code < 0 else code
           for code in (worker.returncode for worker in workers)]
  first = (failed or [i for i, code in enumerate(codes) if code] or [None])[0]
  status = 0 if first is None else codes[first]
  if failed:
    how = 'worker %d failed (exit status %d): the others were stopped' % (
        first, status)
  elif signalled:
    how = 'the workers stopped on %s (exit status %d)' % (signalled[0], status)
  else:
    how = 'the workers are done' + (
        ' (worker %d: exit status %d)' % (first, status) if status else '')
  print(PREFIX + how + '; ps task(s) stopped.', flush=True)
  return status


def main():
  _bring_up_loopback()
  sys.exit(run_tasks(*json.loads(sys.argv[1])))


if __name__ == '__main__':
  main()
