"""--seed: the same checkpoints and step lines run after run, beside a busy
process and across a SIGTERM; another seed, another run (docs/training.md)."""

import contextlib
import os
import signal
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10_input
import cifar10_train
from cifar10_support import data_files
from cifar10_support import mixed_precision
from cifar10_support import run_flags
from cifar10_support import train_dirs
import synthetic
import testutil


@contextlib.contextmanager
def busy_cores():
  """A process per usable core keeps it busy while the block runs."""
  spinners = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
              for _ in range(len(os.sched_getaffinity(0)))]
  try:
    yield
  finally:
    for spinner in spinners:
      spinner.kill()
      spinner.wait()


def _args(data_dir, train_dir, *flags):
  """A trainer's flags: a step line every step."""
  return ['--data_dir=' + data_dir, '--train_dir=' + train_dir,
          '--batch_size=8', '--log_frequency=1'] + list(flags)


def run(script, data_dir, train_dir, *flags):
  """Runs a trainer (_args); returns its console."""
  result = testutil.run_script(script, _args(data_dir, train_dir, *flags))
  assert result.returncode == 0, result.stdout + result.stderr
  return result.stdout


def steps_and_losses(console):
  return [(m['step'], m['loss'])
          for m in testutil.step_line(None).finditer(console)]


def assert_same_run(first_dir, first, second_dir, second, steps):
  """Two runs' consoles have the same `steps` step lines, and their newest
  checkpoints the same values, to the bit."""
  assert len(steps_and_losses(first)) == steps
  assert steps_and_losses(first) == steps_and_losses(second)
  a, b = (testutil.checkpoint_values(tf.train.latest_checkpoint(path))
          for path in (first_dir, second_dir))
  assert sorted(a) == sorted(b)
  assert not [name for name in a if a[name].tobytes() != b[name].tobytes()]


SEEDED_STEPS = 30  # Far beyond the step a SIGTERM at step 2 stops at.


@pytest.fixture(scope='module')
def seeded_run(data_dir, tmp_path_factory):
  """(train_dir, console) of a cifar10_train.py run, --seed=3, to step
  SEEDED_STEPS: run once for the tests that compare theirs with it."""
  def build(path):
    console = run('cifar10_train.py', data_dir, os.path.join(path, 'train'),
                  '--seed=3', '--max_steps=%d' % SEEDED_STEPS)
    with open(os.path.join(path, 'console'), 'w') as f:
      f.write(console)
  path = testutil.shared_dir(tmp_path_factory, 'seeded_run', build)
  with open(os.path.join(path, 'console')) as f:
    return os.path.join(path, 'train'), f.read()


@pytest.mark.slow  # Starts processes.
def test_two_seeded_runs_write_the_same_checkpoint_and_step_lines(
    seeded_run, data_dir, tmp_path):
  first_dir, first = seeded_run
  with busy_cores():
    second = run('cifar10_train.py', data_dir, str(tmp_path), '--seed=3',
                 '--max_steps=%d' % SEEDED_STEPS)
  assert 'Seed: 3 (docs/training.md#seed).' in first.splitlines()
  assert_same_run(first_dir, first, str(tmp_path), second, SEEDED_STEPS)


# Runs a script as a user does, but stops itself (SIGSTOP) just after it
# prints the line of step 2: the SIGTERM the test sends then lands in step
# 2, whatever the machine's speed.
_STOPS_AT_STEP_2 = """
import os, runpy, signal, sys
sys.path.insert(0, os.getcwd())
from cifar10_support import console
console.before_tensorflow('__main__')
from cifar10_support import signals
print_line = signals.print_line
def print_then_stop(text):
  print_line(text)
  if ': step 2, ' in text:
    os.kill(os.getpid(), signal.SIGSTOP)
signals.print_line = print_then_stop
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.mark.slow  # Starts processes.
def test_a_sigterm_mid_run_then_resuming_ends_as_the_unstopped_run(
    seeded_run, data_dir, tmp_path):
  stopped, log = str(tmp_path / 'train'), str(tmp_path / 'first.log')
  # Only the step-0 checkpoint and the one SIGTERM writes.
  proc = testutil.start_script('cifar10_train.py', _args(
      data_dir, stopped, '--seed=3', '--max_steps=%d' % SEEDED_STEPS,
      '--save_checkpoint_secs=3600'), log, ['-c', _STOPS_AT_STEP_2])
  try:
    def state():
      with open('/proc/%d/stat' % proc.pid) as f:
        return f.read().rpartition(')')[2].split()[0]

    testutil.wait_for('the run to stop itself after step 2',
                      lambda: state() == 'T', [log],
                      failed=lambda: proc.poll() is not None and 'it ended')
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    assert proc.wait(120) == 128 + signal.SIGTERM
  finally:
    proc.kill()
  first = open(log).read()
  # Step 2's update done, the run stops: a final checkpoint at step 3.
  assert ('Received SIGTERM: stopped at step 3; final checkpoint %s/'
          'model.ckpt-3.' % stopped) in first.splitlines(), first
  second = run('cifar10_train.py', data_dir, stopped, '--seed=3',
               '--max_steps=%d' % SEEDED_STEPS)
  assert ('Resuming from checkpoint %s/model.ckpt-3 at step 3 ' % stopped
          in second), second
  # Each step once, as unstopped: 0 to 2 before the stop, 3 on after it.
  assert_same_run(*seeded_run, stopped, first + second, SEEDED_STEPS)


@pytest.mark.slow  # Trains.
def test_another_seed_trains_otherwise(data_dir, tmp_path):
  values = []
  for seed in (3, 4):
    settings = run_flags.TrainSettings(
        data_dir, str(tmp_path / str(seed)), max_steps=2, batch_size=8,
        save_checkpoint_secs=3600, seed=seed)
    testutil.train(cifar10_train.train, settings)
    values.append(testutil.checkpoint_values(
        tf.train.latest_checkpoint(settings.train_dir)))
  assert all(values[0][name].tobytes() != values[1][name].tobytes()
             for name in ('conv1/weights', 'softmax_linear/biases'))


@pytest.mark.slow  # Starts processes.
def test_towers_on_two_cpu_devices_repeat_beside_a_busy_process(data_dir,
                                                                tmp_path):
  flags = ('--seed=7', '--max_steps=4', '--num_gpus=2', '--tower_device=cpu')
  first = run('cifar10_multi_gpu_train.py', data_dir, str(tmp_path / 'a'),
              *flags)
  with busy_cores():
    second = run('cifar10_multi_gpu_train.py', data_dir, str(tmp_path / 'b'),
                 *flags)
  assert_same_run(str(tmp_path / 'a'), first, str(tmp_path / 'b'), second, 4)


def test_the_seed_is_said_kept_beside_the_checkpoints_and_a_change_noted(
    data_dir, tmp_path, capsys):
  train_dir = str(tmp_path)
  data_set = data_files.describe(data_dir)

  def lines_of_a_start(seed):
    with train_dirs.claim(train_dir, False, data_set, seed) as start:
      with tf.Graph().as_default():
        tf.train.get_or_create_global_step()
        start.scaffold()
    return capsys.readouterr().out.splitlines()

  def kept():
    with open(os.path.join(train_dir, train_dirs.SEED_FILE)) as f:
      return f.read()

  assert 'Seed: 3 (docs/training.md#seed).' in lines_of_a_start(3)
  assert kept() == '3\n'
  testutil.model_checkpoint(train_dir, step=4)
  assert not [line for line in lines_of_a_start(3) if 'Note' in line]
  assert ('Note: steps up to 4 were trained with --seed=3; the steps from '
          'here on are not reproducible.') in lines_of_a_start(None)
  assert kept() == 'none\n'
  assert ('Note: steps up to 4 were trained with no --seed; the steps from '
          'here on are --seed=5\'s.') in lines_of_a_start(5)
  assert kept() == '5\n'


@pytest.mark.slow  # Trains.
def test_beside_a_gpu_the_seed_asks_for_deterministic_kernels(
    data_dir, tmp_path, monkeypatch):
  # No GPU here: the script is told of one, and asks for TensorFlow's
  # deterministic kernels, which then apply to the GPU's ops.
  asked = []
  listed = tf.config.list_physical_devices
  monkeypatch.setattr(tf.config, 'list_physical_devices', lambda kind=None: (
      ['/physical_device:GPU:0'] if kind == 'GPU' else listed(kind)))
  monkeypatch.setattr(tf.compat.v2.config.experimental,
                      'enable_op_determinism', lambda: asked.append(True))
  monkeypatch.setattr(mixed_precision, 'gpu_capability', lambda: None)
  args = ['--data_dir=' + data_dir, '--train_dir=' + str(tmp_path),
          '--max_steps=1', '--batch_size=8', '--seed=3']
  with testutil.as_script('cifar10_train.py', args, flags.FLAGS):
    cifar10_train.main(['cifar10_train.py'])
  assert asked == [True]


def _seeded_batches(data_set, start_step, count, seed=3, batch_size=10):
  """`count` seeded batches (images, labels) from a session whose global
  step starts at start_step."""
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    images, labels = cifar10_input.distorted_inputs(
        None, batch_size, data_set=data_set, seed=seed)
    with tf.Session(config=testutil.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(global_step.assign(start_step))
      sess.run(tf.local_variables_initializer())
      coord = tf.train.Coordinator()
      threads = tf.train.start_queue_runners(sess=sess, coord=coord)
      try:
        return [sess.run([images, labels]) for _ in range(count)]
      finally:
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)


@pytest.fixture(scope='module')
def numbered_records(tmp_path_factory):
  """(DataSet, seed 3's batches of steps 0 to 19) of 100 records of one
  picture, numbered by their labels: the labels show the order, the images
  the distortions alone."""
  path = tmp_path_factory.mktemp('numbered')
  batches_dir = path / 'cifar-10-batches-bin'
  batches_dir.mkdir()
  picture = np.random.RandomState(0).randint(0, 256, (1, 32, 32, 3))
  for i, name in enumerate(data_files.TRAIN_FILES):
    synthetic.write_records(str(batches_dir / name),
                            np.arange(20 * i, 20 * i + 20),
                            np.repeat(picture, 20, axis=0))
  data_set = data_files.describe(str(path))
  return data_set, _seeded_batches(data_set, 0, 20)


def _all_differ(images, others):
  """Whether every image differs from the other batch's at its place."""
  return all(a.tobytes() != b.tobytes() for a, b in zip(images, others))


def test_the_seeded_input_takes_each_record_once_an_epoch_from_any_step(
    numbered_records):
  data_set, straight = numbered_records
  epochs = [np.concatenate([labels for _, labels in straight[:10]]),
            np.concatenate([labels for _, labels in straight[10:]])]
  for order in epochs:
    assert sorted(order) == list(range(100))
  assert not (epochs[0] == epochs[1]).all()
  assert not (epochs[0] == np.arange(100)).all()
  # A session started at step 7 gives steps 7 to 11 as the straight one did.
  for (images, labels), (want_images, want_labels) in zip(
      _seeded_batches(data_set, 7, 5), straight[7:12]):
    assert (labels == want_labels).all()
    assert images.tobytes() == want_images.tobytes()


def test_another_seed_and_every_step_draw_other_distortions(
    numbered_records):
  data_set, straight = numbered_records
  (images, labels), = _seeded_batches(data_set, 0, 1, seed=4)
  assert not (labels == straight[0][1]).all()  # Another order too.
  assert _all_differ(images, straight[0][0])
  for (images, _), (next_images, _) in zip(straight, straight[1:]):
    assert _all_differ(images, next_images)
