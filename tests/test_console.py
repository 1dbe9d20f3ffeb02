"""What a user sees on the console: the scripts' own lines, no TF noise.

Healthy runs' consoles are pinned line by line (here the two towers';
cifar10_train.py's in test_train.py, cifar10_eval.py's in test_eval.py);
what each TF_CPP_MIN_LOG_LEVEL a user may set loads TensorFlow with is
tested by calls. Each run here has it unset, as a user's shell has it.
"""

import logging
import os
import re
import subprocess
import sys
import textwrap
import types

import pytest

from cifar10_support import console

from testutil import ROOT, match_lines, run_script
from testutil import train_args, train_console


@pytest.mark.slow  # Starts a process.
def test_multi_tower_training_prints_only_its_own_lines(data_dir, tmp_path):
  train_dir = str(tmp_path / 'train')
  result = run_script('cifar10_multi_gpu_train.py', train_args(
      data_dir, train_dir) + ['--num_gpus=2', '--tower_device=cpu'])
  assert result.returncode == 0, result.stderr[-3000:]
  match_lines(result.stdout, train_console(
      os.path.join(data_dir, 'cifar-10-batches-bin'), train_dir))
  assert result.stderr == ''


@pytest.mark.slow  # Starts a process.
def test_tf_cpp_min_log_level_gives_tensorflow_its_output_back(data_dir,
                                                               tmp_path):
  result = run_script('cifar10_train.py', train_args(
      data_dir, str(tmp_path / 'train')) + ['--max_steps=1'],
                      TF_CPP_MIN_LOG_LEVEL='0')
  assert result.returncode == 0, result.stderr[-3000:]
  # The lines hidden by default: C++ start-up INFO, deprecation notices,
  # the summary-name notices and MonitoredTrainingSession's INFO.
  assert re.search(r'^I\d{4} ', result.stderr, re.M)
  assert 'is deprecated and will be removed' in result.stderr
  assert 'Summary name total_loss (raw) is illegal' in result.stderr
  assert 'INFO:tensorflow:Graph was finalized.' in result.stderr


# Not a script: a few lines of Python that load no TensorFlow. A process of
# its own, because the promise is about its file descriptor 2, which this
# test process shares with pytest's capture.
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


def _at_a_scripts_start(monkeypatch, driver):
  """console as at a script's start, on a machine with an NVIDIA driver or
  without one: no TensorFlow in its sys.modules (its own `import tensorflow`
  then finds this process's: it loads nothing). Returns the list of the
  libraries it asks ctypes to load."""
  asked = []

  def cdll(name):
    asked.append(name)
    if not driver:
      raise OSError(name + ': cannot open shared object file')

  monkeypatch.setattr(console, 'ctypes', types.SimpleNamespace(CDLL=cdll))
  monkeypatch.setattr(console, 'sys',
                      types.SimpleNamespace(modules={}, stderr=sys.stderr))
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '1')  # Restored afterwards.
  return asked


def _users_level(monkeypatch, level):
  if level is None:
    monkeypatch.delenv('TF_CPP_MIN_LOG_LEVEL', raising=False)
  else:
    monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', level)


# The user's TF_CPP_MIN_LOG_LEVEL (None: unset) -> the one TensorFlow loads
# with (docs/console.md), with an NVIDIA driver and without (as here: each
# run once by hand): the default, 2 or 3, or the user's where it hides more;
# 0 or less asks for everything and is left alone.
LOADED_WITH = {
    None: ('2', '3'), '': ('2', '3'), '1': ('2', '3'), '2': ('2', '3'),
    'junk': ('2', '3'), '3': ('3', '3'), '0': ('0', '0'), '-1': ('-1', '-1')}


@pytest.mark.parametrize('driver', [True, False])
def test_a_users_level_is_raised_to_the_default_only_at_a_scripts_start(
    monkeypatch, driver):
  asked = _at_a_scripts_start(monkeypatch, driver)
  for level, loaded_with in LOADED_WITH.items():
    _users_level(monkeypatch, level)
    console.before_tensorflow('cifar10_train')  # Imported, as tests do.
    assert (os.environ.get('TF_CPP_MIN_LOG_LEVEL'), asked) == (level, [])
    console.before_tensorflow('__main__')
    assert os.environ.get('TF_CPP_MIN_LOG_LEVEL') == loaded_with[
        0 if driver else 1], level
    # A quiet start looks for the driver as TensorFlow does; 0 does not.
    assert asked == ([] if level in ('0', '-1') else ['libcuda.so.1']), level
    del asked[:]
  # TensorFlow loaded already: too late to set a level, so none is set.
  monkeypatch.setattr(console, 'sys', sys)
  _users_level(monkeypatch, '1')
  console.before_tensorflow('__main__')
  assert (os.environ.get('TF_CPP_MIN_LOG_LEVEL'), asked) == ('1', [])


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
