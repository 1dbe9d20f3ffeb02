"""A script whose standard output is closed early (`| head -2`) ends quietly
with exit status 141 (128 + SIGPIPE); a trainer first ends its step and
writes a final checkpoint (cifar10_support/signals.py).

Real processes and pipes, and no race with the scheduler: a trainer is read
until it has printed two step lines and then its pipe is closed while it has
far more to write than a pipe holds (100,000 steps, a line each), so it
cannot have ended first; eval, classify and the converter start with the
reading end already closed, so their first write of output finds no reader
whatever the timing.
"""

import contextlib
import os
import select
import subprocess
import time

import numpy as np
from PIL import Image
import pytest
import tensorflow.compat.v1 as tf

import testutil

# What must not reach stderr: Python's reports of the broken pipe.
NOISE = ('Traceback', 'BrokenPipeError', 'Exception ignored')


def _start(script, args, stderr_path, stdout=subprocess.PIPE):
  """Starts a script as a user's shell would (stdout block-buffered to a
  pipe: no PYTHONUNBUFFERED), stdout a pipe, stderr to a file."""
  with open(stderr_path, 'w') as stderr:
    return testutil.start_script(script, args, env=dict(PYTHONUNBUFFERED=None),
                                 stdout=stdout, stderr=stderr, bufsize=0,
                                 text=False)


def _read_lines_until(proc, enough, timeout=180):
  """Reads proc's whole lines until enough(lines); returns them."""
  fd = proc.stdout.fileno()
  data = b''
  deadline = time.time() + timeout
  while True:
    lines = data.decode(errors='replace').split('\n')[:-1]
    if enough(lines):
      return lines
    ready, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
    chunk = os.read(fd, 65536) if ready else None
    if not chunk:
      proc.kill()
      proc.wait(30)
      pytest.fail('%s before the lines wanted (exit status %s):\n%s' % (
          'output ended' if ready else 'timed out', proc.returncode,
          '\n'.join(lines[-20:])))
    data += chunk


def close_output_early(script, args, tmp_path, enough, timeout=180):
  """Runs script until it has printed enough(lines), closes the reading end
  of its stdout, waits for it to end; returns (exit status, lines, stderr)."""
  stderr_path = str(tmp_path / ('%s.stderr' % script))
  proc = _start(script, args, stderr_path)
  lines = []

  def close():
    lines.extend(_read_lines_until(proc, enough, timeout))
    proc.stdout.close()  # `head` has what it wanted.

  status, stderr = _ended(proc, stderr_path, timeout, close)
  return status, lines, stderr


def _ended(proc, stderr_path, timeout, before=lambda: None):
  """(exit status, stderr) of proc once it ends, after before(); killed if
  it is still running after that or timeout."""
  try:
    before()
    status = proc.wait(timeout)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait(30)
  with open(stderr_path) as f:
    return status, f.read()


def run_with_output_closed(script, args, tmp_path, timeout=180):
  """Runs script with stdout a pipe whose reading end is closed before it
  starts (`script | true`, or a `head` that has already ended): its first
  write of output, whenever it comes, finds no reader. Returns (exit status,
  stderr)."""
  stderr_path = str(tmp_path / ('%s.stderr' % script))
  read_end, write_end = os.pipe()
  os.close(read_end)
  try:
    proc = _start(script, args, stderr_path, stdout=write_end)
  finally:
    os.close(write_end)  # The script's copy is the only one left.
  return _ended(proc, stderr_path, timeout)


def assert_quiet_141(status, stderr):
  assert status == 141, stderr[-3000:]
  for word in NOISE:
    assert word not in stderr, stderr[-3000:]


def _step_lines(count):
  return lambda lines: len(
      [l for l in lines if testutil.step_line(None).search(l)]) >= count


def _checkpoint_step(train_dir):
  """The newest checkpoint's step, as the 'checkpoint' index names it and
  as its global_step holds."""
  state = tf.train.get_checkpoint_state(train_dir)
  assert state, os.listdir(train_dir)
  step = int(state.model_checkpoint_path.rsplit('-', 1)[1])
  reader = tf.train.load_checkpoint(state.model_checkpoint_path)
  assert reader.get_tensor('global_step') == step
  return step


@contextlib.contextmanager
def _cluster_args(script, tmp_path):
  """The flags of a cluster's chief for script, whose ps task runs while
  the block does; none for another script."""
  if script != 'cifar10_distributed_train.py':
    yield []
    return
  ps_port, worker_port = testutil.free_ports(2)
  cluster = ['--ps_hosts=127.0.0.1:%d' % ps_port,
             '--worker_hosts=127.0.0.1:%d' % worker_port]
  ps = testutil.start_script(script, ['--job_name=ps', '--task_index=0'] +
                             cluster, str(tmp_path / 'ps.log'))
  try:
    yield ['--job_name=worker', '--task_index=0'] + cluster
  finally:
    ps.kill()
    ps.wait(30)


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('script,extra', [
    ('cifar10_train.py', []),
    ('cifar10_multi_gpu_train.py', ['--num_gpus=2']),
    ('cifar10_distributed_train.py', []),
])
def test_trainer_stops_with_a_final_checkpoint_when_output_closes(
    data_dir, tmp_path, script, extra):
  train_dir = str(tmp_path / 'train')
  # Periodic checkpoints are off: the last one is the closed output's doing.
  # 100,000 step lines are megabytes: the trainer is mid-run when the pipe
  # closes, whatever the machine's speed.
  args = ['--data_dir=' + data_dir, '--train_dir=' + train_dir,
          '--batch_size=8', '--max_steps=100000', '--log_frequency=1',
          '--save_checkpoint_secs=3600'] + extra
  with _cluster_args(script, tmp_path) as cluster:
    status, lines, stderr = close_output_early(script, args + cluster,
                                               tmp_path, _step_lines(2))
  assert_quiet_141(status, stderr)
  last_read = [int(m['step']) for m in map(testutil.step_line(None).search,
                                           lines) if m][-1]
  # The final checkpoint, past the steps read; the same command resumes
  # from the newest checkpoint (test_train.py, test_resume.py).
  stopped_at = _checkpoint_step(train_dir)
  assert last_read < stopped_at < 100000


def _pictures(folder, count):
  os.makedirs(folder)
  rng = np.random.RandomState(0)
  for i in range(count):
    Image.fromarray(rng.randint(0, 256, (32, 32, 3)).astype(np.uint8)).save(
        os.path.join(folder, '%d.png' % i))


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('script', ['cifar10_eval.py', 'cifar10_classify.py',
                                    'cifar10_make_dataset.py'])
def test_a_script_exits_141_when_output_closes(data_dir, tmp_path, script):
  # An untrained model's checkpoint, as eval and classify read it.
  checkpoint_dir = str(tmp_path / 'train')
  testutil.model_checkpoint(checkpoint_dir)
  for name in ('cat', 'dog'):
    _pictures(str(tmp_path / 'pics' / name), 5)
  args = {
      'cifar10_eval.py': [
          '--run_once', '--data_dir=' + data_dir,
          '--checkpoint_dir=' + checkpoint_dir,
          '--eval_dir=' + str(tmp_path / 'eval')],
      'cifar10_classify.py': ['--checkpoint_dir=' + checkpoint_dir,
                              str(tmp_path / 'pics' / 'cat')],
      'cifar10_make_dataset.py': [str(tmp_path / 'pics'),
                                  '--data_dir=' + str(tmp_path / 'data')],
  }[script]
  assert_quiet_141(*run_with_output_closed(script, args, tmp_path))
