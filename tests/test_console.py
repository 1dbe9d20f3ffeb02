"""What a user sees on the console: the scripts' own lines, no TF noise.

Each healthy run's console is pinned line by line, so that TensorFlow's
start-up lines, deprecation notices or shutdown cancellations cannot creep
back; failures must still show their message.
"""

import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from cifar10_support import console

from testutil import ROOT, run_script, script_env

DATE = r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}'
STEP = DATE + (r': step %d, loss = \d+\.\d\d \(\d+\.\d examples/sec; '
               r'\d+\.\d{3} sec/batch\)')


def _match_lines(text, patterns):
  lines = text.splitlines()
  assert len(lines) == len(patterns), text
  for line, pattern in zip(lines, patterns):
    assert re.fullmatch(pattern, line), (line, pattern)


def _train_console(batches, train_dir):
  train_dir = re.escape(train_dir)
  return [
      r'Data: %s, 5 files, 100 records \(checked\)\.' % re.escape(batches),
      r'No checkpoint in %s: training from step 0\.' % train_dir,
      r'Filling queue with 40 CIFAR images before starting to train\. '
      r'This will take a few minutes\.',
      DATE + r': saved checkpoint %s/model\.ckpt-0; step 0 of 20' % train_dir,
      STEP % 0,
      STEP % 10,
      DATE + r': saved checkpoint %s/model\.ckpt-20; step 20 of 20'
      % train_dir,
      r'Done: step 20 reached \(--max_steps\); final checkpoint '
      r'%s/model\.ckpt-20\.' % train_dir,
  ]


def _train_args(data_dir, train_dir):
  return ['--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
          '--max_steps=20', '--batch_size=8', '--log_frequency=10']


# Unset, and the values users keep in their shells to quiet TensorFlow: none
# of them may make the console longer than unset.
QUIETING_LEVELS = [None, '1', '2', '3']


def _level(level):
  return {} if level is None else {'TF_CPP_MIN_LOG_LEVEL': level}


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('level', QUIETING_LEVELS)
def test_train_and_eval_print_only_their_own_lines(level, data_dir, tmp_path):
  batches = os.path.join(data_dir, 'cifar-10-batches-bin')
  train_dir = str(tmp_path / 'train')
  result = run_script('cifar10_train.py', _train_args(data_dir, train_dir),
                      **_level(level))
  assert result.returncode == 0, result.stderr[-3000:]
  _match_lines(result.stdout, _train_console(batches, train_dir))
  assert result.stderr == ''

  result = run_script('cifar10_eval.py', [
      '--data_dir=%s' % data_dir, '--checkpoint_dir=%s' % train_dir,
      '--eval_dir=%s' % (tmp_path / 'eval'), '--run_once',
      '--num_examples=20', '--batch_size=8'], **_level(level))
  assert result.returncode == 0, result.stderr[-3000:]
  _match_lines(result.stdout, [
      r'Data: %s, 1 file, 20 records \(checked\)\.' % re.escape(batches),
      DATE + r': evaluating %s/model\.ckpt-20 \(global step 20, float32 '
      r'weights\) on 20 test examples' % re.escape(train_dir),
      DATE + r': precision @ 1 = [01]\.\d{3}',
      r'class +examples +correct +precision @ 1  most confused with',
  ] + [r'%-12s +2 +[0-2] +([01]\.\d{3})  (\w+ \(\d\)|-)' % name
       for name in ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog',
                    'frog', 'horse', 'ship', 'truck')])
  assert result.stderr == ''


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('level', [None, '2'])
def test_multi_tower_training_prints_only_its_own_lines(level, data_dir,
                                                        tmp_path):
  batches = os.path.join(data_dir, 'cifar-10-batches-bin')
  train_dir = str(tmp_path / 'train')
  result = run_script('cifar10_multi_gpu_train.py', _train_args(
      data_dir, train_dir) + ['--num_gpus=2', '--tower_device=cpu'],
                      **_level(level))
  assert result.returncode == 0, result.stderr[-3000:]
  _match_lines(result.stdout, _train_console(batches, train_dir))
  assert result.stderr == ''


@pytest.mark.slow  # Starts a process.
def test_tf_cpp_min_log_level_gives_tensorflow_its_output_back(data_dir,
                                                               tmp_path):
  result = run_script('cifar10_train.py', _train_args(
      data_dir, str(tmp_path / 'train')) + ['--max_steps=1'],
                      TF_CPP_MIN_LOG_LEVEL='0')
  assert result.returncode == 0, result.stderr[-3000:]
  # The lines hidden by default: C++ start-up INFO, deprecation notices,
  # the summary-name notices and MonitoredTrainingSession's INFO.
  assert re.search(r'^I\d{4} ', result.stderr, re.M)
  assert 'is deprecated and will be removed' in result.stderr
  assert 'Summary name total_loss (raw) is illegal' in result.stderr
  assert 'INFO:tensorflow:Graph was finalized.' in result.stderr


@pytest.mark.slow  # Starts a process.
def test_a_bad_data_file_still_shows_its_message(data_dir, tmp_path):
  copy = str(tmp_path / 'data')
  shutil.copytree(data_dir, copy)
  bad = os.path.join(copy, 'cifar-10-batches-bin', 'data_batch_2.bin')
  with open(bad, 'r+b') as f:
    f.truncate(1000)
  result = run_script('cifar10_train.py', _train_args(
      copy, str(tmp_path / 'train')) + [
          '--data_url=%s' % (tmp_path / 'no_archive.tar.gz')])
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('cifar10_train.py: ')
  assert 'data_batch_2.bin' in result.stdout + result.stderr
  assert 'no_archive.tar.gz' in last


@pytest.mark.slow  # Starts a process.
def test_a_nan_loss_still_shows_its_message(data_dir, tmp_path):
  train_dir = str(tmp_path / 'train')
  # cifar10_train.py's own main, run as the script runs it, with a loss that
  # is NaN from the first step.
  driver = textwrap.dedent('''
      import sys
      sys.path.insert(0, %r)
      from cifar10_support import console
      console.before_tensorflow('__main__')
      from absl import app
      import cifar10
      import cifar10_train
      real_loss = cifar10.loss
      cifar10.loss = lambda *a, **k: real_loss(*a, **k) * float('nan')
      sys.argv[0] = 'cifar10_train.py'
      app.run(cifar10_train.main)
      ''' % ROOT)
  result = subprocess.run(
      [sys.executable, '-c', driver] + _train_args(data_dir, train_dir),
      cwd=ROOT, env=script_env(), capture_output=True, text=True, timeout=240)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1].startswith(
      'cifar10_train.py: Model diverged with loss = NaN at step 0')
  assert 'is deprecated' not in result.stdout + result.stderr


@pytest.mark.slow  # Starts a process.
def test_only_known_noise_is_dropped_from_the_import():
  # Written to file descriptor 2 directly, as absl's C++ logging does.
  driver = textwrap.dedent('''
      import os, sys
      sys.path.insert(0, %r)
      from cifar10_support import console
      with console.filtered_stderr(console.IMPORT_NOISE):
        os.write(2, b'WARNING: All log messages before absl::InitializeLog() '
                    b'is called are written to STDERR\\n')
        os.write(2, b'I0000 00:00:17.1 1 port.cc:153] oneDNN custom ops\\n')
        os.write(2, b'W0000 00:00:17.1 1 x.cc:1] a warning\\n')
        os.write(2, b'To enable the following instructions: AVX2 FMA\\n')
        os.write(2, b'E0000 00:00:17.1 1 y.cc:2] a real error\\n')
        print('from Python', file=sys.stderr)
      print('after', file=sys.stderr)
      ''' % ROOT)
  result = subprocess.run([sys.executable, '-c', driver], capture_output=True,
                          text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert result.stderr.splitlines() == [
      'E0000 00:00:17.1 1 y.cc:2] a real error', 'from Python', 'after']


def test_a_users_level_asks_for_everything_only_at_0():
  assert console.asks_for_everything('0')
  assert console.asks_for_everything('-1')
  for level in (None, '', '1', '2', '3', 'quiet'):
    assert not console.asks_for_everything(level), level


def test_a_users_quieting_level_never_hides_less_than_the_default():
  for driver, default in ((True, '2'), (False, '3')):
    assert console.quiet_cpp_level(None, driver) == default
    assert console.quiet_cpp_level('1', driver) == default
    assert console.quiet_cpp_level('3', driver) == '3'
    assert console.quiet_cpp_level('junk', driver) == default
  assert console.quiet_cpp_level('2', True) == '2'
  assert console.quiet_cpp_level('2', False) == '3'


def test_python_filter_drops_known_notices_and_keeps_real_warnings():
  def kept(message):
    record = logging.LogRecord('tensorflow', logging.WARNING, 'x.py', 1,
                               message, None, None)
    return console.not_noise(record)

  assert not kept('From x.py:297: string_input_producer (from tensorflow.'
                  'python.training.input) is deprecated and will be removed '
                  'in a future version.\nInstructions for updating:\nUse tf.data')
  assert not kept('Summary name total_loss (raw) is illegal; using '
                  'total_loss__raw_ instead.')
  assert not kept('It seems that global step (tf.train.get_global_step) has '
                  'not been increased. Current value (could be stable): 5 vs '
                  'previous value: 5.')
  # A cluster worker prints its own line for a lost session.
  assert not kept('An error occurred when attempting to close the session. '
                  'This may be due to a preemption in a connected worker or '
                  'parameter server. Error: From /job:ps/replica:0/task:0:')
  assert kept('Issue encountered when serializing global_step.')
  assert kept('Summary name total_loss is fine, but something else failed.')


def test_on_tensorflow_log_hears_hidden_lines_and_hides_them_still():
  tf_logger = logging.getLogger('tensorflow')
  level, filters = tf_logger.level, list(tf_logger.filters)
  tf_logger.setLevel(logging.WARNING)  # As quiet_python_logs leaves it.
  records, heard = [], []
  handler = logging.Handler()
  handler.emit = records.append
  tf_logger.addHandler(handler)
  try:
    with console.on_tensorflow_log('An error was raised', heard.append):
      tf_logger.info('An error was raised. %s', 'From /job:ps/task:0')
      tf_logger.info('Graph was finalized.')
      tf_logger.warning('An error was raised, as a warning')
    tf_logger.info('An error was raised after the block')
  finally:
    tf_logger.removeHandler(handler)
    restored = (tf_logger.level, list(tf_logger.filters))
    tf_logger.setLevel(level)
  assert heard == ['An error was raised. From /job:ps/task:0',
                   'An error was raised, as a warning']
  # What is shown is what the level showed before: the warning only.
  assert [r.getMessage() for r in records] == [
      'An error was raised, as a warning']
  assert restored == (logging.WARNING, filters)
