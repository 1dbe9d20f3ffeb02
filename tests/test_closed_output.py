"""A script whose standard output is closed early (`| head -2`) ends quietly
with exit status 141 (128 + SIGPIPE); a trainer first ends its step and
writes a final checkpoint (cifar10_support/signals.py). Real pipes, and no
race with the scheduler: a trainer's closes after two step lines, 100,000
steps (a line each) before its end; the other scripts start with the
reading end closed already, so their first write finds no reader.
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


def _start(script, args, tmp_path, stdout=subprocess.PIPE):
  """Starts a script as a user's shell would (stdout block-buffered to a
  pipe: no PYTHONUNBUFFERED), its stderr to a file."""
  with open(str(tmp_path / (script + '.stderr')), 'w') as stderr:
    return testutil.start_script(script, args, env=dict(PYTHONUNBUFFERED=None),
                                 stdout=stdout, stderr=stderr, bufsize=0,
                                 text=False)


def _assert_quiet_141(proc, script, tmp_path, timeout=180):
  """Waits for proc (killed after timeout): exit status 141, and nothing of
  the broken pipe on its stderr."""
  try:
    status = proc.wait(timeout)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait(30)
  with open(str(tmp_path / (script + '.stderr'))) as f:
    stderr = f.read()
  assert status == 141, stderr[-3000:]
  for word in NOISE:
    assert word not in stderr, stderr[-3000:]


def _last_of_step_lines(proc, count, timeout=180):
  """The step of proc's `count`th step line, read from its stdout as it
  comes; kills proc and fails if its output ends first or after timeout."""
  fd, data, deadline = proc.stdout.fileno(), b'', time.time() + timeout
  while True:
    steps = [int(m['step']) for m in testutil.step_line(None).finditer(
        data.decode(errors='replace'))]
    if len(steps) >= count:
      return steps[count - 1]
    ready, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
    chunk = os.read(fd, 65536) if ready else None
    if not chunk:
      proc.kill()
      proc.wait(30)
      pytest.fail('%s before %d step lines (exit status %s):\n%s' % (
          'output ended' if ready else 'timed out', count, proc.returncode,
          data.decode(errors='replace')[-3000:]))
    data += chunk


@contextlib.contextmanager
def _ps_task(tmp_path):
  """A cluster's ps task, running while the block does; yields the flags of
  its chief."""
  ps_port, worker_port = testutil.free_ports(2)
  cluster = ['--ps_hosts=127.0.0.1:%d' % ps_port,
             '--worker_hosts=127.0.0.1:%d' % worker_port]
  ps = testutil.start_script('cifar10_distributed_train.py',
                             ['--job_name=ps', '--task_index=0'] + cluster,
                             str(tmp_path / 'ps.log'))
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
  args = ['--data_dir=' + data_dir, '--train_dir=' + train_dir,
          '--batch_size=8', '--max_steps=100000', '--log_frequency=1',
          '--save_checkpoint_secs=3600'] + extra
  with (_ps_task(tmp_path) if script == 'cifar10_distributed_train.py'
        else contextlib.nullcontext([])) as cluster:
    proc = _start(script, args + cluster, tmp_path)
    last_read = _last_of_step_lines(proc, 2)
    proc.stdout.close()  # `head` has what it wanted.
    _assert_quiet_141(proc, script, tmp_path)
  # The final checkpoint, past the steps read; the same command resumes
  # from the newest checkpoint (test_train.py, test_resume.py).
  checkpoint = tf.train.latest_checkpoint(train_dir)
  stopped_at = int(checkpoint.rsplit('-', 1)[1])
  assert tf.train.load_checkpoint(checkpoint).get_tensor('global_step') == (
      stopped_at)
  assert last_read < stopped_at < 100000


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('script', ['cifar10_eval.py', 'cifar10_classify.py',
                                    'cifar10_make_dataset.py'])
def test_a_script_exits_141_when_output_closes(data_dir, tmp_path, script):
  # An untrained model's checkpoint, as eval and classify read it.
  checkpoint_dir = str(tmp_path / 'train')
  testutil.model_checkpoint(checkpoint_dir)
  rng = np.random.RandomState(0)
  for name in ('cat', 'dog'):
    os.makedirs(str(tmp_path / 'pics' / name))
    for i in range(5):
      Image.fromarray(rng.randint(0, 256, (32, 32, 3)).astype(np.uint8)).save(
          str(tmp_path / 'pics' / name / ('%d.png' % i)))
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
  read_end, write_end = os.pipe()
  os.close(read_end)  # `script | true`: no reader, whenever it writes.
  try:
    proc = _start(script, args, tmp_path, stdout=write_end)
  finally:
    os.close(write_end)  # The script's copy is the only one left.
  _assert_quiet_141(proc, script, tmp_path)
