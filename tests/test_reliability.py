"""Bad input and faults during training: each injected, each exact outcome;
signals go to a real cifar10_train.py process."""

import os
import select
import signal
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_train
from cifar10_support import data_files
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import signals
from cifar10_support import train_dirs
import synthetic
import testutil
from testutil import assert_resumed, logged_steps, start_trainer
from testutil import trainer_process, wait_for_trainer


# --- Bad data files -----------------------------------------------------------

BAD_LABEL = ('Data file %s, record 7 (byte offset 21511): label byte is 10, '
             'expected 0-9 (1 records in the file have a bad label)')


def _bad_label(path):
  with open(path, 'r+b') as f:
    f.seek(3073 * 7)
    f.write(bytes([10]))


@pytest.mark.parametrize('damage, problem', [
    (os.remove, 'Failed to find file: %s (expected a CIFAR-10 binary file'),
    (lambda path: os.truncate(path, 0), 'Data file %s is empty (0 bytes)'),
    (lambda path: os.truncate(path, 3073 * 4 + 100),
     'Data file %s has 12392 bytes, which is not a whole number of 3073-byte '
     'records (4 records and 100 bytes left over)'),
    (_bad_label, BAD_LABEL),
], ids=['missing', 'empty', 'truncated', 'bad_label'])
def test_bad_data_file_is_named_with_its_problem(tmp_path, damage, problem):
  root = synthetic.make_data_dir(str(tmp_path))
  paths = [os.path.join(root, 'cifar-10-batches-bin', name)
           for name in synthetic.TRAIN_FILES]
  assert data_files.check_data_files(paths) == 5 * 20  # Whole, they pass.
  damage(paths[1])
  with pytest.raises(data_files.DataError) as e:
    data_files.check_data_files(paths)
  assert isinstance(e.value, ValueError)
  assert str(e.value).startswith(problem % paths[1])


# The one process test of a run error; the others take the same way
# (signals.script_main: the test below), their messages tested by calls.
@pytest.mark.slow  # Starts a process.
def test_script_reports_bad_label_without_traceback(tmp_path):
  root = synthetic.make_data_dir(str(tmp_path / 'data'))
  path = os.path.join(root, 'cifar-10-batches-bin', 'data_batch_3.bin')
  _bad_label(path)
  result = testutil.run_script('cifar10_train.py', [
      '--data_dir=' + root, '--train_dir=' + str(tmp_path / 'train'),
      '--max_steps=2', '--batch_size=8'], timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1].startswith(
      'cifar10_train.py: ' + BAD_LABEL % path)
  assert not testutil.ANY_STEP_LINE.search(result.stdout)


@pytest.mark.parametrize('error', [
    data_files.DataError('Data file /d/data_batch_2.bin is empty (0 bytes)'),
    progress.DivergedError('Model diverged with loss = NaN at step 0')])
def test_a_run_error_ends_the_process_with_its_one_line(monkeypatch, error):
  monkeypatch.setattr(sys, 'argv', ['/home/u/cifar10_train.py',
                                    '--max_steps=20'])
  raised = [error]

  @signals.script_main(train_dirs.RUN_ERRORS)
  def main(unused_argv):
    raise raised[0]

  with pytest.raises(SystemExit) as ended:
    main(['cifar10_train.py'])
  # sys.exit(str): Python writes the line to stderr, exit status 1.
  assert ended.value.code == 'cifar10_train.py: ' + str(error)
  # Anything else is a bug: its traceback is not turned into a line.
  raised[0] = KeyError('a bug')
  with pytest.raises(KeyError):
    main(['cifar10_train.py'])


def test_a_failed_sessions_signal_handlers_are_not_kept_by_the_next():
  # A session that raised never ends its hooks: the next run's StopOnSignal
  # puts back the handlers from before both, not the failed run's.
  before = {signum: signal.getsignal(signum)
            for signum in (signal.SIGINT, signal.SIGTERM)}
  failed, later = signals.StopOnSignal(), signals.StopOnSignal()
  failed.begin()  # ...and its session raised: no end().
  later.begin()
  later.end(None)
  assert {signum: signal.getsignal(signum) for signum in before} == before


def _readable_checkpoint_steps(train_dir):
  """Reads every tensor of every checkpoint the index lists; their steps."""
  state = tf.train.get_checkpoint_state(train_dir)
  assert state.model_checkpoint_path == state.all_model_checkpoint_paths[-1]
  steps = [int(path.rsplit('-', 1)[1])
           for path in state.all_model_checkpoint_paths]
  for path, step in zip(state.all_model_checkpoint_paths, steps):
    assert testutil.checkpoint_values(path)['global_step'] == step
  return steps


# --- NaN loss -----------------------------------------------------------------

def _nan_from_step(first_bad_step):
  """A cifar10.loss that turns NaN at global step `first_bad_step`."""
  real_loss = cifar10.loss

  def loss(logits, labels, *args, **kwargs):
    total = real_loss(logits, labels, *args, **kwargs)
    diverged = tf.train.get_global_step() >= first_bad_step
    # A factor, not tf.where(diverged, total * nan, total), whose gradient
    # would be NaN (0 * nan) from the first step.
    return total * tf.where(diverged, np.nan, 1.0)
  return loss


@pytest.mark.slow  # Trains.
@pytest.mark.parametrize('summary_steps', [100, 7])
def test_nan_loss_stops_and_keeps_last_good_checkpoint(
    tmp_path, data_dir, monkeypatch, summary_steps):
  # With summaries at step 7 the histograms of NaN values run in the same
  # step as the loss check; the outcome must be the same.
  monkeypatch.setattr(cifar10, 'loss', _nan_from_step(7))
  train_dir = str(tmp_path / 'train')
  with pytest.raises(progress.DivergedError) as e:
    testutil.train(cifar10_train.train, run_flags.TrainSettings(
        data_dir, train_dir, max_steps=20, batch_size=8, log_frequency=1,
        save_checkpoint_steps=1, save_summaries_steps=summary_steps,
        input_threads=2))
  good = os.path.join(train_dir, 'model.ckpt-7')
  assert str(e.value) == (
      'Model diverged with loss = NaN at step 7: training stopped without '
      'saving that step; the last good checkpoint, %s, is left intact and a '
      'new run resumes from it. Lower the learning rate or check the data.'
      % good)
  # Checkpoints 0-7 were written, one a step; the saver keeps the newest 5.
  # A save of the NaN step would have pruned model.ckpt-3.
  assert _readable_checkpoint_steps(train_dir) == [3, 4, 5, 6, 7]
  on_disk = {name.split('.')[1] for name in os.listdir(train_dir)
             if name.startswith('model.ckpt-')}
  assert on_disk == {'ckpt-%d' % step for step in range(3, 8)}
  for name, value in testutil.checkpoint_values(good).items():
    assert np.all(np.isfinite(value)), name


# --- SIGKILL, SIGTERM, SIGINT -------------------------------------------------

@pytest.mark.slow  # Starts a process.
def test_sigkill_then_restart_resumes_and_signals_stop_cleanly(data_dir,
                                                              tmp_path):
  train_dir = str(tmp_path / 'train')
  # SIGKILL as soon as the line of the 3rd checkpoint after step 0 appears:
  # training goes on meanwhile, saving a checkpoint every step.
  saved = 'saved checkpoint %s; ' % os.path.join(train_dir, 'model.ckpt-3')
  proc, lines, _ = start_trainer(data_dir, train_dir,
                                 '--save_checkpoint_steps=1')
  wait_for_trainer(proc, lines, lambda: any(saved in line for line in lines))
  proc.kill()
  proc.wait(30)
  # It leaves the lock file, but not the lock: the next run starts.
  assert os.path.exists(os.path.join(train_dir, train_dirs.LOCK_NAME))
  steps = _readable_checkpoint_steps(train_dir)
  print('SIGKILL on the line %r; the index then listed steps %s'
        % (saved, steps))
  assert steps[-1] >= 3, steps
  resume_from = steps[-1]
  # What a kill inside a save leaves (2 of 10 random kills did).
  partial = os.path.join(train_dir, 'model.ckpt-%d_temp' % (resume_from + 1))
  os.makedirs(partial, exist_ok=True)
  open(os.path.join(partial, 'part-00000-of-00001.data-00000-of-00001'),
       'wb').close()

  # Started again: resumes from there. SIGTERM, then (next run) SIGINT: a
  # final checkpoint at the step reached, from which the next run resumes.
  # Periodic checkpoints are off: the final one is the signal's doing.
  for signum in (signal.SIGTERM, signal.SIGINT):
    proc, lines, reader = start_trainer(data_dir, train_dir,
                                        '--save_checkpoint_secs=3600')
    wait_for_trainer(proc, lines, lambda: len(logged_steps(lines)) >= 3)
    proc.send_signal(signum)
    assert proc.wait(120) == 128 + signum
    reader.join(30)  # Every line, up to the 'Received ...' one.
    assert not reader.is_alive(), 'output not closed 30 s after exit'
    assert_resumed(lines, train_dir, resume_from)
    if signum == signal.SIGTERM:
      assert 'Removing %s, an interrupted save.\n' % partial in lines
      assert not os.path.exists(partial)
    stopped_at = logged_steps(lines)[-1] + 1
    assert stopped_at >= resume_from + 3
    assert ('Received %s: stopped at step %d; final checkpoint %s.\n'
            % (signal.Signals(signum).name, stopped_at,
               os.path.join(train_dir, 'model.ckpt-%d' % stopped_at))
            in lines)
    assert _readable_checkpoint_steps(train_dir)[-1] == stopped_at
    resume_from = stopped_at


def _signal_caught(pid, signum):
  """Whether process pid runs a handler of its own on signal signum."""
  with open('/proc/%d/status' % pid) as f:
    caught = next(line for line in f if line.startswith('SigCgt:'))
  return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


def _waits_writing_stdout(pid):
  """Whether the main thread of process pid waits in a system call on its
  file descriptor 1: here, a write to a full pipe."""
  with open('/proc/%d/syscall' % pid) as f:
    fields = f.read().split()
  return fields[0] not in ('running', '-1') and fields[1] == '0x1'


@pytest.mark.slow  # Starts a process.
def test_a_second_signal_stops_at_once_without_a_checkpoint(data_dir,
                                                            tmp_path):
  """The first SIGTERM comes while the trainer waits to write a step line
  to a full pipe nobody reads (a paused pager, say); the second ends it at
  once, without the final checkpoint the first one asked for."""
  train_dir = str(tmp_path / 'train')
  # Periodic checkpoints off: only the start's, model.ckpt-0, is written.
  proc = trainer_process(data_dir, train_dir, '--save_checkpoint_secs=3600')
  output = []
  filler = None
  try:
    # The first step line: the training loop runs, its handlers are set.
    deadline = time.time() + 180
    while not testutil.step_line(None).search(''.join(output)):
      assert proc.poll() is None and time.time() < deadline, ''.join(output)
      if select.select([proc.stdout], [], [], 1)[0]:
        output.append(os.read(proc.stdout.fileno(), 65536).decode())
    # Fill the pipe (through a non-blocking opening of our own, not the
    # trainer's) and read no more: the next step line cannot be written.
    filler = os.open('/proc/self/fd/%d' % proc.stdout.fileno(),
                     os.O_WRONLY | os.O_NONBLOCK)
    for size in (4096, 1):
      try:
        while True:
          os.write(filler, b'.' * size)
      except BlockingIOError:
        pass
    wait_for_trainer(proc, output, lambda: _waits_writing_stdout(proc.pid))
    print('First SIGTERM while the trainer waits to write its output, after '
          '%s' % [m['step'] for m in testutil.step_line(None).finditer(
              ''.join(output))])
    proc.send_signal(signal.SIGTERM)
    # Its handler has run (in the interrupted write) and put back the default.
    wait_for_trainer(proc, output,
                     lambda: not _signal_caught(proc.pid, signal.SIGTERM),
                     timeout=60)
    assert proc.poll() is None  # Still waiting to write: it cannot stop.
    proc.send_signal(signal.SIGTERM)
    # Ended by the signal itself (a shell shows 143), not by sys.exit.
    assert proc.wait(60) == -signal.SIGTERM
  finally:
    if filler is not None:
      os.close(filler)
    proc.kill()
    proc.wait(30)
    proc.stdout.close()
  state = tf.train.get_checkpoint_state(train_dir)
  assert list(state.all_model_checkpoint_paths) == [
      os.path.join(train_dir, 'model.ckpt-0')]
  assert sorted(name for name in os.listdir(train_dir)
                if name.startswith('model.ckpt-')) == [
                    'model.ckpt-0.data-00000-of-00001', 'model.ckpt-0.index',
                    'model.ckpt-0.meta']
