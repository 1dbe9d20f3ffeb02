"""cifar10_train.py run as a user runs it, its console pinned line by line;
resuming and the progress lines by calls."""

import glob
import importlib
import os
import re

import pytest
import tensorflow.compat.v1 as tf

import cifar10_train
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import train_dirs
from testutil import event_values, histogram_tags, match_lines, run_script
from testutil import step_line, train_args, train_console
import testutil

# The original's summary tags, as TF names them (see README, TensorBoard).
ORIGINAL_TAGS = {
    'images/image/0', 'learning_rate',
    'total_loss_1', 'total_loss__raw_',
    'cross_entropy_1', 'cross_entropy__raw_',
    'local3/weight_loss_1', 'local3/weight_loss__raw_',
    'local4/weight_loss_1', 'local4/weight_loss__raw_',
    'conv1/conv1/conv1/activations', 'conv1/conv1/conv1/sparsity',
    'conv2/conv2/conv2/activations', 'local3/local3/local3/activations',
    'local4/local4/local4/sparsity',
    'softmax_linear/softmax_linear/softmax_linear/activations',
    'conv1/weights_1', 'softmax_linear/biases_1',
    'conv1/weights/gradients', 'softmax_linear/biases/gradients',
    'input_producer/fraction_of_32_full',
}


def _train_here(capsys, data_dir, train_dir, **kwargs):
  """cifar10_train.train, as the script calls it; its output."""
  testutil.train(cifar10_train.train, run_flags.TrainSettings(
      data_dir, train_dir, batch_size=8, log_frequency=5, **kwargs))
  return capsys.readouterr().out


def _steps(stdout):
  return [int(m['step']) for m in step_line().finditer(stdout)]


def _checkpoint_steps(train_dir):
  paths = glob.glob(os.path.join(train_dir, 'model.ckpt-*.index'))
  return sorted(int(re.search(r'-(\d+)\.index$', p).group(1)) for p in paths)


@pytest.mark.slow  # Starts a process, and trains.
def test_train_logs_checkpoints_summarizes_and_resumes(data_dir, tmp_path,
                                                       capsys):
  train_dir = str(tmp_path / 'train')

  # The script as a user runs it, TF_CPP_MIN_LOG_LEVEL unset: its whole
  # console, line by line (step lines every 5 steps, each line once),
  # nothing on stderr.
  first = run_script('cifar10_train.py', train_args(data_dir, train_dir))
  assert first.returncode == 0, first.stderr[-3000:]
  match_lines(first.stdout, train_console(
      os.path.join(data_dir, 'cifar-10-batches-bin'), train_dir))
  assert first.stderr == ''
  for match in step_line().finditer(first.stdout):
    assert float(match['loss']) > 0 and float(match['examples_per_sec']) > 0
  assert _checkpoint_steps(train_dir) == [0, 20]
  values = event_values(train_dir)
  assert ORIGINAL_TAGS <= set(values)
  # 10 weights, 10 gradients, 5 activations; none in TF1's slow format.
  assert len(histogram_tags(values)) == 25
  assert 'conv1/conv1/conv1/activations' in histogram_tags(values)
  assert not [tag for tag, value in values.items() if value.HasField('histo')]
  assert os.path.exists(os.path.join(train_dir, 'graph.pbtxt'))

  second = _train_here(capsys, data_dir, train_dir, max_steps=30)

  assert ('Resuming from checkpoint %s/model.ckpt-20 at step 20'
          % train_dir) in second
  assert _steps(second) == [20, 25]
  assert _checkpoint_steps(train_dir) == [0, 20, 30]
  assert tf.train.latest_checkpoint(train_dir).endswith('model.ckpt-30')

  third = _train_here(capsys, data_dir, train_dir, max_steps=30)
  assert 'already at --max_steps=30: nothing to train' in third
  assert _checkpoint_steps(train_dir) == [0, 20, 30]

  # Anything else goes too, but the lock file: the same file, or a trainer
  # waiting on it would lock another than the one in use.
  os.mkdir(os.path.join(train_dir, 'old'))
  lock = os.path.join(train_dir, train_dirs.LOCK_NAME)
  lock_inode = os.stat(lock).st_ino
  fresh = _train_here(capsys, data_dir, train_dir, max_steps=5,
                      fresh_start=True)
  assert '--fresh_start: deleting the contents of %s' % train_dir in fresh
  assert 'old' not in os.listdir(train_dir)
  assert os.stat(lock).st_ino == lock_inode
  assert _steps(fresh) == [0]
  assert _checkpoint_steps(train_dir) == [0, 5]


@pytest.mark.parametrize('step,max_steps,steps_per_sec,text', [
    (0, 100000, None, 'step 0 of 100,000'),
    (12000, 100000, 22.5, 'step 12,000 of 100,000; about 1 h 5 min left'),
    (99000, 100000, 20.0, 'step 99,000 of 100,000; about 1 min left'),
    (99990, 100000, 20.0, 'step 99,990 of 100,000; less than a minute left'),
    (2000, 5000, 10.0, 'step 2,000 of 5,000; about 5 min left'),
    (4850, 5000, 1.0, 'step 4,850 of 5,000; about 3 min left'),  # 2.5 min
    (1400, 5000, 1.0, 'step 1,400 of 5,000; about 1 h left'),
    (100000, 100000, 20.0, 'step 100,000 of 100,000'),
])
def test_progress_says_where_a_run_stands(step, max_steps, steps_per_sec,
                                          text):
  assert progress.steps_and_time_left(step, max_steps, steps_per_sec) == text


def test_each_checkpoint_line_has_the_time_left_at_the_recent_speed(
    monkeypatch, capsys):
  clock = iter([1000.0, 1600.0, 1700.0])
  monkeypatch.setattr(progress, 'time', type('Clock', (), {
      'time': staticmethod(lambda: next(clock))}))
  announcer = progress.SaveAnnouncer('/runs/a', 100000, label='Chief')
  for step in (10000, 22000, 23000):
    announcer.after_save(None, step)
  # The first line knows no speed yet; then 12,000 steps in 10 min, and
  # 1,000 in 100 s: the most recent speed counts.
  match_lines(capsys.readouterr().out, [
      'Chief: %s: saved checkpoint /runs/a/%s' % (testutil.DATE,
                                                  re.escape(tail))
      for tail in [
          'model.ckpt-10000; step 10,000 of 100,000',
          'model.ckpt-22000; step 22,000 of 100,000; about 1 h 5 min left',
          'model.ckpt-23000; step 23,000 of 100,000; about 2 h 8 min left']])


class _SessionAsked(Exception):
  """The stand-in MonitoredTrainingSession's: its arguments are enough."""


def _writes(hook):
  """Whether a session hook can write a checkpoint or summary."""
  return isinstance(hook, (tf.train.CheckpointSaverHook,
                           tf.train.SummarySaverHook,
                           tf.train.StepCounterHook)) or (
                               type(hook).__name__ == 'SummaryHook')


@pytest.mark.parametrize('trainer', ['cifar10_train',
                                     'cifar10_multi_gpu_train'])
def test_no_hook_saves_a_step_before_the_nan_check_has_seen_it(
    data_dir, tmp_path, monkeypatch, trainer):
  module = importlib.import_module(trainer)
  asked = {}

  def session(**kwargs):
    asked.update(kwargs)
    raise _SessionAsked()

  monkeypatch.setattr(tf.train, 'MonitoredTrainingSession', session)
  settings = run_flags.TrainSettings(data_dir, str(tmp_path), batch_size=8,
                                     input_threads=1)
  with pytest.raises(_SessionAsked):
    testutil.train(module.train, settings,
                   **({'tower_device': 'cpu'}
                      if trainer != 'cifar10_train' else {}))
  # The session's own savers and summaries, which would run before every
  # hook, are off: no directory to write them to.
  assert not {'checkpoint_dir', 'summary_dir'} & set(asked), asked
  hooks = asked['hooks']
  # The step logger stops training at a NaN loss.
  nan_check = [i for i, hook in enumerate(hooks)
               if isinstance(hook, progress.StepLogger)]
  writers = [i for i, hook in enumerate(hooks) if _writes(hook)]
  assert len(nan_check) == 1 and writers
  assert nan_check[0] < min(writers), [type(h).__name__ for h in hooks]
  # The summaries and checkpoints go to train_dir, at the flags' cadence.
  # pylint: disable=protected-access
  saver = [h for h in hooks if isinstance(h, tf.train.CheckpointSaverHook)]
  assert len(saver) == 1 and saver[0]._checkpoint_dir == str(tmp_path)
  assert saver[0]._timer._every_secs == settings.save_checkpoint_secs
