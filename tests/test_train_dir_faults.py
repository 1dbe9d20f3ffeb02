"""Faults of the train_dir itself, each made for real: a second trainer, a
full disk (a tmpfs where this machine may mount one), damaged checkpoints."""

import errno
import glob
import os
import shutil
import signal
import socket
import subprocess

import pytest
import tensorflow.compat.v1 as tf

import cifar10_multi_gpu_train
import cifar10_train
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import evaluation
from cifar10_support import locks
from cifar10_support import run_flags
from cifar10_support import train_dirs
import testutil
from testutil import assert_resumed, logged_steps, start_trainer
from testutil import wait_for_trainer

BATCH = 8


def _args(data_dir, train_dir, *extra):
  return ['--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
          '--batch_size=%d' % BATCH, '--log_frequency=1'] + list(extra)


# --- One trainer per train_dir ------------------------------------------------

@pytest.mark.slow  # Starts processes.
def test_second_trainer_stops_and_eval_runs_beside_it(
    data_dir, tmp_path, capsys):
  train_dir = str(tmp_path / 'train')
  first, lines, _ = start_trainer(data_dir, train_dir,
                                  '--save_checkpoint_steps=2')
  try:
    wait_for_trainer(first, lines, lambda: len(logged_steps(lines)) >= 3)
    # Paused: it holds the lock and cannot end (diverge) meanwhile.
    os.kill(first.pid, signal.SIGSTOP)
    holder = 'pid %d on host %s' % (first.pid, socket.gethostname())

    settings = run_flags.TrainSettings(data_dir, train_dir, batch_size=BATCH,
                                       max_steps=100000, log_frequency=1)
    for script, train, kwargs in (
        ('cifar10_train.py', cifar10_train.train, {}),
        ('cifar10_multi_gpu_train.py', cifar10_multi_gpu_train.train,
         {'num_towers': 2, 'tower_device': 'cpu'})):
      capsys.readouterr()
      line = testutil.trainer_line(script, train, settings, **kwargs)
      assert line.startswith(
          '%s: --train_dir=%s is in use by another trainer: %s, started '
          % (script, train_dir, holder)), line
      assert '\n' not in line
      printed = capsys.readouterr().out
      assert 'Resuming' not in printed
      assert not testutil.ANY_STEP_LINE.search(printed), printed[-3000:]

    # A cluster's chief too: it only checks that its ps answers first.
    with socket.socket() as ps:
      ps.bind(('127.0.0.1', 0))
      ps.listen()
      worker_port, = testutil.free_ports(1)
      chief = testutil.run_script('cifar10_distributed_train.py', [
          '--job_name=worker', '--task_index=0', '--startup_wait_secs=30',
          '--ps_hosts=127.0.0.1:%d' % ps.getsockname()[1],
          '--worker_hosts=127.0.0.1:%d' % worker_port,
          '--max_steps=4'] + _args(data_dir, train_dir), timeout=120)
    assert chief.returncode == 1
    assert 'Traceback' not in chief.stderr, chief.stderr[-3000:]
    assert chief.stderr.strip().splitlines()[-1].startswith(
        'Worker 0: --train_dir=%s is in use by another trainer: %s, started '
        % (train_dir, holder))

    # Evaluation takes no lock: it runs beside the trainer.
    capsys.readouterr()
    testutil.evaluate(train_dir, str(tmp_path / 'e'), evaluation.EvalSettings(
        data_dir, num_examples=20, batch_size=10, run_once=True,
        session_config=testutil.session_config()))
    assert 'precision @ 1 = ' in capsys.readouterr().out
    assert first.poll() is None  # Still there, still holding the lock.
  finally:
    first.kill()
    first.wait(30)


# --- A full disk --------------------------------------------------------------

def _mount_tmpfs(path, megabytes):
  """Mounts a tmpfs of that size at path; False where this is not allowed."""
  os.makedirs(path, exist_ok=True)
  try:
    result = subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', 'size=%dm' % megabytes, 'tmpfs', path],
        capture_output=True, timeout=30)
  except OSError:
    return False
  return result.returncode == 0


@pytest.mark.slow  # Trains.
def test_full_disk_stops_with_one_message_and_the_next_run_resumes(
    data_dir, tmp_path, monkeypatch, capsys):
  """Elsewhere than a tmpfs the third save gets the error TensorFlow raised
  for the tmpfs's full disk, after leaving what a save cut short leaves."""
  mount_point = str(tmp_path / 'small_disk')
  train_dir = os.path.join(mount_point, 'train')
  # A checkpoint of this model takes 9 MB, the graph and events 3 MB: 24 MB
  # hold the first two checkpoints and not the third.
  real_disk = _mount_tmpfs(mount_point, 24)
  if not real_disk:
    real_save = tf.train.Saver.save
    saves = []

    def save(self, sess, save_path, *args, **kwargs):
      saves.append(save_path)
      if len(saves) == 3:
        os.makedirs(save_path + '-4_temp')  # What a save cut short leaves.
        raise tf.errors.ResourceExhaustedError(
            None, None, '%s-4_temp/part-00000; No space left on device'
            % save_path)
      return real_save(self, sess, save_path, *args, **kwargs)

    monkeypatch.setattr(tf.train.Saver, 'save', save)
  try:
    line = testutil.trainer_line(
        'cifar10_train.py', cifar10_train.train, run_flags.TrainSettings(
            data_dir, train_dir, max_steps=40, batch_size=BATCH,
            log_frequency=1, save_checkpoint_steps=2, input_threads=2))
    state = tf.train.get_checkpoint_state(train_dir)
    for path in state.all_model_checkpoint_paths:
      assert checkpoints.verified_reader(path)[1] is None, path
    newest = state.model_checkpoint_path
    assert line == (
        'cifar10_train.py: the disk of --train_dir=%s is full (no space left '
        'on device while writing to it): training stopped; the newest '
        'complete checkpoint, %s, is intact and a new run resumes from it. '
        'Free some space, then run the same command again.'
        % (train_dir, newest))
    assert not glob.glob(os.path.join(train_dir, '*_temp'))

    # Space again.
    if real_disk:
      subprocess.run(['mount', '-o', 'remount,size=64m', mount_point],
                     check=True, timeout=30)
    else:
      monkeypatch.undo()
    step = checkpoints.step_of(newest)
    capsys.readouterr()
    testutil.train(cifar10_train.train, run_flags.TrainSettings(
        data_dir, train_dir, max_steps=step + 2, batch_size=BATCH,
        log_frequency=1, input_threads=2))
    assert_resumed(capsys.readouterr().out.splitlines(True), train_dir, step)
  finally:
    if real_disk:
      subprocess.run(['umount', '-l', mount_point], timeout=30)


# --- A damaged newest checkpoint ---------------------------------------------

def _data_file(checkpoint):
  return max(glob.glob(checkpoint + '.data-*'), key=os.path.getsize)


def _truncate(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _flip(path, offset):
  with open(path, 'r+b') as f:
    f.seek(offset)
    chunk = f.read(64)
    f.seek(offset)
    f.write(bytes(b ^ 0xff for b in chunk))


DAMAGE = {
    'truncated .data': lambda c: _truncate(_data_file(c)),
    'corrupted .data': lambda c: _flip(_data_file(c), 1000),
    'truncated .index': lambda c: _truncate(c + '.index'),
    'corrupted .index': lambda c: _flip(c + '.index', 100),
}


@pytest.fixture(scope='module')
def two_checkpoints(tmp_path_factory):
  """Checkpoints 0 and 4 as cifar10_train.py leaves them; tests copy it."""
  return testutil.shared_dir(
      tmp_path_factory, 'two_checkpoints',
      lambda train_dir: testutil.model_checkpoint(train_dir, (0, 4),
                                                  trainer_state=True))


def _damaged_copy(two_checkpoints, to, damage):
  """(a copy with model.ckpt-4 damaged, that checkpoint, _contents of it)."""
  train_dir = shutil.copytree(two_checkpoints, to)
  damaged = os.path.join(train_dir, 'model.ckpt-4')
  DAMAGE[damage](damaged)
  return train_dir, damaged, _contents(damaged + '.*')


def _contents(pattern):
  """{path: bytes} of the files that match pattern."""
  return {path: open(path, 'rb').read() for path in glob.glob(pattern)}


@pytest.mark.parametrize('damage', sorted(DAMAGE))
def test_damaged_checkpoints_are_skipped_and_none_left_is_one_line(
    data_dir, two_checkpoints, tmp_path, capsys, damage):
  train_dir, damaged, files = _damaged_copy(
      two_checkpoints, str(tmp_path / 'train'), damage)

  # Evaluation that follows training skips it.
  def stop(_):
    raise KeyboardInterrupt
  with pytest.raises(KeyboardInterrupt):
    testutil.evaluate(train_dir, str(tmp_path / 'eval'),
                      evaluation.EvalSettings(
                          data_dir, num_examples=20, batch_size=10,
                          session_config=testutil.session_config()),
                      sleep=stop)
  assert ('Skipping: cannot read checkpoint %s (pruned by training, not '
          'completely written, or damaged): ' % damaged
          in capsys.readouterr().out)

  # Every trainer claims its train_dir so: the one before is resumed.
  with train_dirs.claim(train_dir, False, data_files.describe(data_dir)) as (
      start):
    assert (start.checkpoint, start.step) == (
        os.path.join(train_dir, 'model.ckpt-0'), 0)
  assert 'Checkpoint %s is damaged and left as it is (' % damaged in (
      capsys.readouterr().out)
  assert _contents(damaged + '.*') == files

  # That one damaged too: no checkpoint restores, and nothing is changed.
  DAMAGE[damage](start.checkpoint)
  files = _contents(os.path.join(train_dir, 'model.ckpt-*'))
  line = testutil.trainer_line(
      'cifar10_train.py', cifar10_train.train,
      run_flags.TrainSettings(data_dir, train_dir, max_steps=6,
                              batch_size=BATCH))
  printed = capsys.readouterr().out
  for path in (start.checkpoint, damaged):
    assert 'Checkpoint %s is damaged and left as it is (' % path in printed
  assert line == (
      'cifar10_train.py: no checkpoint in --train_dir=%s restores: all 2 are '
      'damaged or missing (see the lines above). Nothing was changed; move '
      'them away (or --fresh_start deletes them) to train from step 0, or give '
      'another --train_dir' % train_dir)
  assert _contents(os.path.join(train_dir, 'model.ckpt-*')) == files


@pytest.mark.slow  # Trains.
def test_training_resumes_the_checkpoint_before_a_damaged_one(
    data_dir, two_checkpoints, tmp_path, capsys):
  train_dir, damaged, files = _damaged_copy(
      two_checkpoints, str(tmp_path / 'train'), 'truncated .data')

  testutil.train(cifar10_train.train, run_flags.TrainSettings(
      data_dir, train_dir, max_steps=6, batch_size=BATCH, log_frequency=1,
      input_threads=2))
  printed = capsys.readouterr().out

  assert 'Checkpoint %s is damaged and left as it is (' % damaged in printed
  assert_resumed(printed.splitlines(True), train_dir, 0)
  assert tf.train.latest_checkpoint(train_dir).endswith('model.ckpt-6')
  # The trainer's index is relative: test_checkpoints_are_found_after_...
  with open(os.path.join(train_dir, 'checkpoint')) as f:
    assert f.readline() == 'model_checkpoint_path: "model.ckpt-6"\n'
  # Skipped, never deleted nor listed again.
  assert _contents(damaged + '.*') == files
  assert damaged not in tf.train.get_checkpoint_state(
      train_dir).all_model_checkpoint_paths


@pytest.mark.parametrize('gone, newest, line', [
    ('model.ckpt-4.*', 'model.ckpt-0', 'Checkpoint %s/model.ckpt-4 is listed '
     'but its files are missing: trying the one before it.'),
    ('checkpoint', 'model.ckpt-4', 'The checkpoint index of %s is missing or '
     'unreadable: looking at the checkpoint files themselves.'),
], ids=['listed_files', 'index'])
def test_checkpoints_are_found_after_a_move_without_the_index_or_files(
    two_checkpoints, tmp_path, gone, newest, line):
  # Its index is relative, as a trainer's, so TensorFlow's own lookup (the
  # original's eval) finds a moved train_dir's checkpoints too.
  moved = shutil.copytree(two_checkpoints, str(tmp_path / 'moved'))
  assert tf.train.latest_checkpoint(moved) == os.path.join(moved,
                                                           'model.ckpt-4')
  for path in glob.glob(os.path.join(moved, gone)):
    os.remove(path)
  lines = []  # What every trainer's claim prints.
  assert checkpoints.newest_restorable(moved, lines.append) == os.path.join(
      moved, newest)
  assert lines == [line % moved]


@pytest.mark.slow  # Trains.
def test_a_file_system_that_cannot_lock_is_named_and_training_goes_on(
    data_dir, tmp_path, monkeypatch, capsys):
  def no_locks(file, operation):
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
  monkeypatch.setattr(locks.fcntl, 'flock', no_locks)
  train_dir = str(tmp_path / 'train')
  os.makedirs(train_dir)
  with train_dirs.train_dir_lock(train_dir) as held:
    assert held is None
  assert capsys.readouterr().out == (
      'Warning: the file system of --train_dir=%s cannot lock files (%s): '
      'nothing stops a second trainer on it.\n'
      % (train_dir, os.strerror(errno.ENOLCK)))
  result = testutil.train_fixture(data_dir, train_dir, max_steps=2,
                                  batch_size=8)
  assert result['global_step'] == 2
  assert tf.train.latest_checkpoint(train_dir).endswith('model.ckpt-2')
  assert 'cannot lock files' in capsys.readouterr().out


FULL = 'is the disk full? Free some space'


def _lock_error(action, lock, reason, advice=FULL):
  return ('cannot %s the lock file %s (%s): training stopped before reading '
          'or writing anything else; %s, then run the same command again'
          % (action, lock, reason, advice))


@pytest.mark.parametrize('code, advice', [
    (errno.EACCES, 'give this user write permission there'),
    (errno.EROFS, 'give a --train_dir on a writable file system'),
    (errno.EIO, 'fix that'), (errno.ENOSPC, FULL),
    # There, but not a file to write (root cannot either): no injection.
    (errno.EISDIR, 'a directory has its name; move that away')])
def test_lock_file_that_cannot_be_made_or_opened_is_one_message(
    tmp_path, monkeypatch, code, advice):
  lock = os.path.join(str(tmp_path), train_dirs.LOCK_NAME)
  if code == errno.EISDIR:
    os.mkdir(lock)
  else:
    def open_lock(*args):
      raise OSError(code, os.strerror(code))
    monkeypatch.setattr(locks, 'open', open_lock, raising=False)
  with pytest.raises(train_dirs.TrainDirLockError) as refusal:
    with train_dirs.train_dir_lock(str(tmp_path)):
      pass
  assert str(refusal.value) == _lock_error('create', lock, os.strerror(code),
                                           advice)


# Runs a script (argv: a limit in bytes, the script, its flags) with that
# limit on every file it writes once TensorFlow, which writes files, loaded.
_WITH_FILE_SIZE_LIMIT = """
import resource, runpy, sys
from cifar10_support import console
console.before_tensorflow('__main__')
resource.setrlimit(resource.RLIMIT_FSIZE, (
    int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.mark.slow  # Starts a process.
def test_lock_file_that_cannot_be_written_stops_the_script_with_one_line(
    data_dir, tmp_path):
  train_dir = tmp_path / 'train'
  train_dir.mkdir()
  lock = train_dir / train_dirs.LOCK_NAME
  lock.write_text('pid 1 on host old, started 2026-01-01 00:00:00\n')
  # The lock's line (45 bytes at least) is cut at 32 with EFBIG, as a full
  # disk cuts it with ENOSPC. No .pyc is written (it would be cut too).
  result = testutil.run_script(
      'cifar10_train.py', _args(data_dir, train_dir, '--max_steps=2'),
      wrapper=['-c', _WITH_FILE_SIZE_LIMIT, '32'], PYTHONDONTWRITEBYTECODE='1')
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      'cifar10_train.py: ' + _lock_error('write', lock, os.strerror(
          errno.EFBIG))]
  # Nothing else written, nothing read from train_dir.
  assert os.listdir(str(train_dir)) == [train_dirs.LOCK_NAME]
  assert 'checkpoint' not in result.stdout
