"""A checkpoint of any trainer resumes in any other (cifar10_support.checkpoints).

The trainers run one after the other on one train_dir, in this process
(their train functions, as their scripts call them; a cluster's tasks are
processes). A resumed run saves a checkpoint at the step it resumed from before its
first step, overwriting the one it read: that file shows what the run
restored (and what it started fresh) before training changed it.
"""

import hashlib
import os
import shutil
import socket

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
import cifar10_multi_gpu_train
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import run_flags
from cifar10_support import train_dirs
import testutil
from testutil import BATCH
from testutil import FRESH_LINE
from testutil import checkpoint_values
from testutil import run_chief
from testutil import run_trainer

# The loss terms whose averages every trainer keeps, under its tower's scope.
LOSS_TERMS = ('cross_entropy', 'local3/weight_loss', 'local4/weight_loss',
              'total_loss')
# The names of each trainer's own state: its loss averages.
OWN_STATE = {
    'single': ['%s/avg' % term for term in LOSS_TERMS],
    'towers1': ['tower_0/%s/avg' % term for term in LOSS_TERMS],
    'towers2': ['tower_1/%s/avg' % term for term in LOSS_TERMS],
}
OWN_STATE['async chief'] = OWN_STATE['sync chief'] = OWN_STATE['single']


def _check_resumed(stdout, train_dir, saved, step, max_steps, writer, reader):
  """Asserts a run resumed the model at `step` and kept going to max_steps.

  Args:
    stdout: the resuming run's output.
    saved: the values of the checkpoint it resumed from, read before it ran.
    writer, reader: the trainers that wrote and read it (keys of OWN_STATE).
  """
  checkpoint = os.path.join(train_dir, 'model.ckpt-%d' % step)
  assert ('Resuming from checkpoint %s at step %d' % (checkpoint, step)
          in stdout), stdout
  assert [int(m['step'])
          for m in testutil.step_line().finditer(stdout)][0] == step
  assert tf.train.latest_checkpoint(train_dir).endswith(
      'model.ckpt-%d' % max_steps)

  restored = checkpoint_values(checkpoint)  # Rewritten by the reader at its start.
  assert set(OWN_STATE[reader]) <= set(restored)
  fresh = sorted(set(OWN_STATE[reader]) - set(OWN_STATE[writer]))
  lines = FRESH_LINE.findall(stdout)
  if fresh:
    assert lines == [(str(step), ', '.join(fresh))], stdout
  else:
    assert not lines, stdout
  for name in fresh:
    assert restored[name] == 0.0, name  # Its initial value.
  carried = [name for name in restored if name not in fresh]
  # The 21 of the model (weights, averages, step) and the shared averages.
  assert len(carried) == 21 + len(OWN_STATE[reader]) - len(fresh)
  for name in carried:
    np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
  assert restored['global_step'] == step
  # Training went on from there: the final weights moved.
  final = checkpoint_values(tf.train.latest_checkpoint(train_dir))
  assert final['global_step'] == max_steps
  assert not np.array_equal(final['local4/weights'], saved['local4/weights'])


@pytest.mark.slow  # Trains, and starts a cluster.
def test_each_trainer_resumes_the_others_checkpoints(data_dir, tmp_path):
  train_dir = str(tmp_path / 'train')
  chain = ['single', 'towers2', 'towers1', 'towers2', 'single', 'async chief',
           'sync chief', 'towers2']
  run_trainer(chain[0], data_dir, train_dir, 4)
  for i, (writer, reader) in enumerate(zip(chain, chain[1:])):
    step = 4 * (i + 1)
    saved = checkpoint_values(tf.train.latest_checkpoint(train_dir))
    assert saved['global_step'] == step
    if reader.endswith('chief'):
      stdout = run_chief(data_dir, train_dir, step + 4,
                         reader == 'sync chief', tmp_path)
    else:
      stdout = run_trainer(reader, data_dir, train_dir, step + 4)
    _check_resumed(stdout, train_dir, saved, step, step + 4, writer, reader)


def _listing(directory):
  """Every file under directory (dot files too) with its size, mtime and
  content hash; not the lock file, which a refused run takes too."""
  listing = {}
  for root, _, names in os.walk(directory):
    for name in names:
      if name == train_dirs.LOCK_NAME:
        continue
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        digest = hashlib.md5(f.read()).hexdigest()
      listing[path] = (os.path.getsize(path), os.stat(path).st_mtime_ns,
                       digest)
  return listing


def test_float16_checkpoint_is_refused_and_left_as_it_was(data_dir, tmp_path,
                                                         capsys):
  train_dir = str(tmp_path / 'train')
  # What a `cifar10_train.py --use_fp16` run leaves, written directly: its
  # checkpoint (the model, its moving averages and its loss averages, all
  # float16) and the class names beside it.
  testutil.model_checkpoint(train_dir, step=2, dtype=tf.float16,
                            trainer_state=True)
  with open(os.path.join(train_dir, checkpoints.CLASSES_FILE), 'wb') as f:
    f.write(data_files.class_names_text(data_files.CLASS_NAMES))
  before = _listing(train_dir)

  # The refusal is the script's line (printed by its process, exit status
  # 1: test_a_checkpoint_of_another_model_is_refused_in_one_line_and_left).
  line = testutil.trainer_line(
      'cifar10_multi_gpu_train.py', cifar10_multi_gpu_train.train,
      run_flags.TrainSettings(data_dir, train_dir, batch_size=BATCH,
                              max_steps=4),
      num_towers=2, tower_device='cpu')

  assert line == (
      'cifar10_multi_gpu_train.py: checkpoint %s/model.ckpt-2 holds '
      'conv1/biases as float16 [64]; this model has it as float32 [64] '
      '(--use_fp16 must be as it was when the checkpoint was written). '
      'Nothing was changed; resume with the settings it was written with, or '
      'train this model in another --train_dir' % train_dir)
  assert 'Resuming' not in capsys.readouterr().out
  assert _listing(train_dir) == before


def _refusal(script, data_dir, train_dir):
  """(result, the label its lines start with) of script run on train_dir
  as a user runs it; a cluster's chief with a stand-in ps task that only
  accepts connections, as the chief refuses a checkpoint before its session
  reaches one."""
  args = ['--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
          '--batch_size=%d' % BATCH, '--max_steps=10']
  if script != 'cifar10_distributed_train.py':
    return testutil.run_script(script, args, timeout=120), script

  def run():
    worker_port, = testutil.free_ports(1)
    result = testutil.run_script(script, args + [
        '--job_name=worker', '--task_index=0',
        '--ps_hosts=127.0.0.1:%d' % ps.getsockname()[1],
        '--worker_hosts=127.0.0.1:%d' % worker_port,
        '--startup_wait_secs=30'], timeout=120)
    if result.returncode == 1 and testutil.PORT_TAKEN in result.stderr:
      raise testutil.PortTaken()
    return result

  with socket.socket() as ps:
    ps.bind(('127.0.0.1', 0))
    ps.listen()
    return testutil.retry_port_taken(run), 'Worker 0'


@pytest.mark.slow  # Starts a process.
@pytest.mark.parametrize('script', ['cifar10_train.py',
                                    'cifar10_multi_gpu_train.py',
                                    'cifar10_distributed_train.py'])
def test_a_checkpoint_of_another_model_is_refused_in_one_line_and_left(
    data_dir, tmp_path, script):
  train_dir = str(tmp_path / 'train')
  os.makedirs(train_dir)
  checkpoint = testutil.another_models_checkpoint(train_dir)
  before = _listing(train_dir)

  result, label = _refusal(script, data_dir, train_dir)

  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.rstrip().splitlines()[-1] == (
      '%s: checkpoint %s has no softmax_linear/biases, which this model needs '
      '(one value per class): it was written by another model. Nothing was '
      'changed; train this one in another --train_dir' % (label, checkpoint))
  assert 'Resuming' not in result.stdout
  assert _listing(train_dir) == before


def _variables(shapes, averaged=()):
  """In the default graph: the global step, float32 zero variables of the
  given shapes and the averages of those named."""
  tf.train.get_or_create_global_step()
  for name, shape in shapes.items():
    tf.get_variable(name, shape, initializer=tf.zeros_initializer())
  for name in averaged:
    tf.get_variable(name + checkpoints.AVERAGE_SUFFIX, shapes[name],
                    initializer=tf.zeros_initializer(), trainable=False)


def _save(path, shapes, averaged=()):
  """Writes a checkpoint at step 7 of _variables(shapes, averaged)."""
  with tf.Graph().as_default():
    _variables(shapes, averaged)
    with tf.Session(config=testutil.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      return tf.train.Saver().save(sess, path, global_step=7)


def _plan(checkpoint, shapes, averaged=()):
  """plan_restore in a graph of _variables(shapes, averaged)."""
  with tf.Graph().as_default():
    _variables(shapes, averaged)
    return checkpoints.plan_restore(checkpoint)


@pytest.mark.parametrize('shapes, averaged, message', [
    ({'conv1/weights': [3, 3, 3, 64]}, [],
     'holds conv1/weights as float32 [5, 5, 3, 64]; this model has it as '
     'float32 [3, 3, 3, 64]. Nothing was changed'),
    ({'conv1/weights': [5, 5, 3, 64], 'conv9/weights': [2]}, [],
     'has no conv9/weights, which this model needs (float32 [2]): it was '
     'written by another model. Nothing was changed'),
    ({'conv1/weights': [5, 5, 3, 64]}, ['conv1/weights'],
     'has no conv1/weights/ExponentialMovingAverage, which this model needs '
     '(float32 [5, 5, 3, 64])'),
])
def test_plan_names_the_checkpoint_and_what_differs(tmp_path, shapes, averaged,
                                                    message):
  checkpoint = _save(str(tmp_path / 'model.ckpt'),
                     {'conv1/weights': [5, 5, 3, 64]})
  with pytest.raises(checkpoints.CheckpointMismatchError) as e:
    _plan(checkpoint, shapes, averaged)
  assert str(e.value).startswith('checkpoint %s ' % checkpoint)
  assert message in str(e.value)


def _tiny_model():
  """One averaged weight and the global step: a graph plan_restore accepts.

  Returns:
    (weight variable, global step variable, set): set(session, value, step)
    gives the weight and the step those values.
  """
  global_step = tf.train.get_or_create_global_step()
  weight = tf.get_variable('conv1/weights', [2],
                           initializer=tf.zeros_initializer())
  tf.train.ExponentialMovingAverage(0.9).apply([weight])
  value = tf.placeholder(tf.float32, [])
  step = tf.placeholder(tf.int64, [])
  assign = [weight.assign([value, value]), global_step.assign(step)]

  def set_values(session, new_value, new_step):
    session.run(assign, {value: new_value, step: new_step})

  return weight, global_step, set_values


@pytest.mark.parametrize('resumed', [True, False],
                         ids=['resumed_run', 'fresh_run'])
def test_a_recreated_session_restores_the_newest_checkpoint(tmp_path, resumed):
  # What MonitoredSession does after a ps task restarts: a new session, the
  # scaffold's init_op, then its init_fn. The start-up checkpoint has been
  # pruned since, and the newest one is damaged.
  train_dir = str(tmp_path)
  prefix = os.path.join(train_dir, 'model.ckpt')
  recoveries = []
  with tf.Graph().as_default():
    weight, global_step, set_values = _tiny_model()
    plan = None
    if resumed:
      with tf.Session(config=testutil.session_config()) as session:
        session.run(tf.global_variables_initializer())
        set_values(session, 1.0, 10)
        first = tf.train.Saver().save(session, prefix, global_step=10)
      plan = checkpoints.plan_restore(first)
    scaffold = checkpoints.restoring_scaffold(
        plan, train_dir, lambda *args: recoveries.append(args))
    scaffold.finalize()
    with tf.Session(config=testutil.session_config()) as session:
      session.run(scaffold.init_op)
      scaffold.init_fn(session)
      assert session.run(weight).tolist() == ([1.0, 1.0] if resumed
                                              else [0.0, 0.0])
      assert recoveries == []
      # This run trains on and saves twice; the second save is then damaged.
      set_values(session, 2.0, 20)
      good = scaffold.saver.save(session, prefix, global_step=20)
      set_values(session, 3.0, 30)
      damaged = scaffold.saver.save(session, prefix, global_step=30)
    with open(damaged + '.data-00000-of-00001', 'r+b') as f:
      f.truncate(4)
    if resumed:
      for path in tf.io.gfile.glob(first + '.*'):
        tf.io.gfile.remove(path)
    with tf.Session(config=testutil.session_config()) as session:
      session.run(scaffold.init_op)
      scaffold.init_fn(session)
      assert session.run(weight).tolist() == [2.0, 2.0]
      assert session.run(global_step) == 20
  assert recoveries == [(good, 20)]
  # The damaged newer checkpoint is left for the user, not pruned or deleted.
  assert tf.io.gfile.exists(damaged + '.index')


def test_a_copied_train_dir_never_prunes_the_originals_checkpoints(tmp_path):
  # The index holds absolute paths: a run resumed in a copy of a train_dir
  # used to prune the original's checkpoints, in the old place.
  original, copy = str(tmp_path / 'original'), str(tmp_path / 'copy')
  with tf.Graph().as_default():
    weight, _, set_values = _tiny_model()
    saver = tf.train.Saver()
    with tf.Session(config=testutil.session_config()) as session:
      session.run(tf.global_variables_initializer())
      for step in (10, 20, 30):
        set_values(session, float(step), step)
        saver.save(session, os.path.join(original, 'model.ckpt'),
                   global_step=step)
    before = sorted(os.listdir(original))
    shutil.copytree(original, copy)
    newest = checkpoints.newest_restorable(copy)
    assert newest == os.path.join(copy, 'model.ckpt-30')
    scaffold = checkpoints.restoring_scaffold(checkpoints.plan_restore(newest),
                                              copy)
    scaffold.finalize()
    with tf.Session(config=testutil.session_config()) as session:
      session.run(scaffold.init_op)
      scaffold.init_fn(session)
      assert session.run(weight).tolist() == [30.0, 30.0]
      for step in range(40, 100, 10):  # Six saves: past max_to_keep (5).
        scaffold.saver.save(session, os.path.join(copy, 'model.ckpt'),
                            global_step=step)
  assert sorted(os.listdir(original)) == before
  # The copy's own old checkpoints are pruned as usual.
  assert [checkpoints.step_of(path) for path in checkpoints.listed(copy)] == [
      50, 60, 70, 80, 90]
  assert not tf.io.gfile.exists(os.path.join(copy, 'model.ckpt-10.index'))
