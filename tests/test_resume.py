"""A checkpoint of any trainer resumes in any other, and so does a train_dir
that db22c74's trainers (before issue #53's refactor) left. A resumed run
first saves a checkpoint at its step over the one it read: what it restored
(and started fresh) before training changed it."""

import os
import shutil
import socket

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from cifar10_support import checkpoints
from cifar10_support import train_dirs
import testutil
from testutil import BATCH
from testutil import FRESH_LINE
from testutil import TRAINERS
from testutil import checkpoint_values
from testutil import run_chief
from testutil import run_trainer

# The model's weights and biases (float32), each also under its
# ExponentialMovingAverage name, and a trainer's loss averages; literal, not
# from today's model code, so that a renamed variable fails here.
WEIGHTS = [
    ('conv1/weights', [5, 5, 3, 64]), ('conv1/biases', [64]),
    ('conv2/weights', [5, 5, 64, 64]), ('conv2/biases', [64]),
    ('local3/weights', [2304, 384]), ('local3/biases', [384]),
    ('local4/weights', [384, 192]), ('local4/biases', [192]),
    ('softmax_linear/weights', [192, 10]), ('softmax_linear/biases', [10]),
]
LOSS_AVERAGES = ['cross_entropy/avg', 'local3/weight_loss/avg',
                 'local4/weight_loss/avg', 'total_loss/avg']


def _layout(prefix):
  """{name: (shape, dtype)} of a checkpoint whose loss averages are under
  `prefix`."""
  layout = {'global_step': ([], tf.int64)}
  for name, shape in WEIGHTS:
    layout[name] = (shape, tf.float32)
    layout[name + '/ExponentialMovingAverage'] = (shape, tf.float32)
  for name in LOSS_AVERAGES:
    layout[prefix + name] = ([], tf.float32)
  return layout


# What each trainer saves, today and at db22c74: the multi-GPU trainer's
# loss averages under its last tower, a cluster's chief's as one device's,
# which are the original's 25 variables (ours restore in its eval).
LAYOUTS = {
    'single': _layout(''),
    'towers1': _layout('tower_0/'),
    'towers2': _layout('tower_1/'),
}
LAYOUTS['async chief'] = LAYOUTS['sync chief'] = LAYOUTS['single']


def _layout_of(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  dtypes = reader.get_variable_to_dtype_map()
  return {name: (shape, dtypes[name])
          for name, shape in reader.get_variable_to_shape_map().items()}


def _run(reader, data_dir, train_dir, max_steps, tmp_path):
  """What trainer `reader` (a key of LAYOUTS) printed, run to max_steps."""
  if reader.endswith('chief'):
    return run_chief(data_dir, train_dir, max_steps, reader == 'sync chief',
                     tmp_path)
  return run_trainer(reader, data_dir, train_dir, max_steps)


def _check_resumed(stdout, train_dir, saved, step, max_steps, writer, reader):
  """Asserts trainer `reader` resumed `writer`'s checkpoint (keys of
  LAYOUTS) at `step`, whose values were `saved`, and went on to max_steps."""
  testutil.assert_resumed(stdout.splitlines(True), train_dir, step)
  checkpoint = os.path.join(train_dir, 'model.ckpt-%d' % step)
  assert tf.train.latest_checkpoint(train_dir) == os.path.join(
      train_dir, 'model.ckpt-%d' % max_steps)

  restored = checkpoint_values(checkpoint)  # Rewritten by the reader.
  assert _layout_of(checkpoint) == LAYOUTS[reader]
  fresh = sorted(set(LAYOUTS[reader]) - set(LAYOUTS[writer]))
  assert FRESH_LINE.findall(stdout) == (
      [(str(step), ', '.join(fresh))] if fresh else []), stdout
  for name in fresh:
    assert restored[name] == 0.0, name  # Its initial value.
  for name in set(restored) - set(fresh):
    np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
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
    stdout = _run(reader, data_dir, train_dir, step + 4, tmp_path)
    _check_resumed(stdout, train_dir, saved, step, step + 4, writer, reader)


# db22c74's step (even: resumed runs, logging every 2 steps, print it).
OLD_STEP = 4
INDEX = ('model_checkpoint_path: "model.ckpt-{step}"\n'
         'all_model_checkpoint_paths: "model.ckpt-0"\n'
         'all_model_checkpoint_paths: "model.ckpt-{step}"\n')
CLASS_NAMES = (b'airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\n'
               b'ship\ntruck\n')
# No process has this pid: Linux's pid_max is at most 2**22.
LOCK_TEXT = 'pid 4194304 on host %s, started 2026-11-28 07:12:59\n'


def _write_old_train_dir(train_dir, layout):
  """Writes train_dir as db22c74's trainer of `layout` left it (checked
  against real runs): checkpoints 0 and OLD_STEP of random values, its
  index, class names, lock file, graph and events; returns the values of
  the newest (the one a run must restore), by name."""
  os.makedirs(train_dir)
  rng = np.random.RandomState(0)
  with tf.Graph().as_default() as graph:
    variables = {name: tf.get_variable(name, shape, dtype,
                                       tf.zeros_initializer(),
                                       trainable=False)
                 for name, (shape, dtype) in layout.items()}
    saver = tf.train.Saver(variables)
    with tf.Session(config=testutil.session_config()) as sess:
      for step in (0, OLD_STEP):
        values = {name: np.float32(rng.uniform(1, 5)) if name.endswith('/avg')
                  else rng.normal(0, 0.01, shape).astype(np.float32)
                  for name, (shape, _) in layout.items()}
        values['global_step'] = np.int64(step)
        for name, value in values.items():
          variables[name].load(value, sess)
        saver.save(sess, os.path.join(train_dir, 'model.ckpt'),
                   global_step=step, write_state=False)
    tf.io.write_graph(graph, train_dir, 'graph.pbtxt')
    writer = tf.summary.FileWriter(train_dir, graph)
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(
        tag='total_loss_1', simple_value=4.6)]), OLD_STEP)
    writer.close()
  for name, text in (('checkpoint', INDEX.format(step=OLD_STEP)),
                     ('class_names.txt', CLASS_NAMES.decode()),
                     ('.cifar10_train.lock',
                      LOCK_TEXT % socket.gethostname())):
    with open(os.path.join(train_dir, name), 'w') as f:
      f.write(text)
  return values


@pytest.mark.slow  # Trains, and starts a cluster.
@pytest.mark.parametrize('layout', ['single', 'towers1', 'towers2'])
def test_an_old_train_dir_resumes_in_each_trainer(data_dir, tmp_path, layout):
  old = str(tmp_path / 'old')
  written = _write_old_train_dir(old, LAYOUTS[layout])
  # The two-tower one in a chief too, which then starts its own loss
  # averages fresh, as no other test makes it do.
  for reader in list(TRAINERS) + ['async chief'] * (layout == 'towers2'):
    train_dir = shutil.copytree(old, str(tmp_path / reader.replace(' ', '_')))
    stdout = _run(reader, data_dir, train_dir, OLD_STEP + 2, tmp_path)
    _check_resumed(stdout, train_dir, written, OLD_STEP, OLD_STEP + 2, layout,
                   reader)
    with open(os.path.join(train_dir, 'class_names.txt'), 'rb') as f:
      assert f.read() == CLASS_NAMES


def _listing(directory):
  """{path: (mtime, contents)} of every file under directory (dot files too)
  but the lock file, which a refused run takes too."""
  return {path: (os.stat(path).st_mtime_ns, open(path, 'rb').read())
          for root, _, names in os.walk(directory)
          for path in (os.path.join(root, name) for name in names
                       if name != train_dirs.LOCK_NAME)}


def _refusal(script, data_dir, train_dir):
  """(result, the label its lines start with) of script run on train_dir;
  a chief's stand-in ps only accepts connections: the chief refuses a
  checkpoint before its session reaches one."""
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


def _variables(shapes, averaged=(), dtype=tf.float32):
  """The global step, zero variables of `shapes` and averages of `averaged`."""
  tf.train.get_or_create_global_step()
  for name, shape in shapes.items():
    tf.get_variable(name, shape, dtype, tf.zeros_initializer())
  for name in averaged:
    tf.get_variable(name + checkpoints.AVERAGE_SUFFIX, shapes[name],
                    initializer=tf.zeros_initializer(), trainable=False)


# A refusal ends a trainer with its line, nothing changed: the test above.
@pytest.mark.parametrize('shapes, averaged, dtype, message', [
    ({'conv1/weights': [3, 3, 3, 64]}, [], tf.float32,
     'holds conv1/weights as float32 [5, 5, 3, 64]; this model has it as '
     'float32 [3, 3, 3, 64]. Nothing was changed'),
    # Resumed with another --use_fp16 than the checkpoint was written with.
    ({'conv1/weights': [5, 5, 3, 64]}, [], tf.float16,
     'holds conv1/weights as float32 [5, 5, 3, 64]; this model has it as '
     'float16 [5, 5, 3, 64] (--use_fp16 must be as it was when the '
     'checkpoint was written). Nothing was changed; resume with the settings '
     'it was written with, or train this model in another --train_dir'),
    ({'conv1/weights': [5, 5, 3, 64], 'conv9/weights': [2]}, [], tf.float32,
     'has no conv9/weights, which this model needs (float32 [2]): it was '
     'written by another model. Nothing was changed'),
    ({'conv1/weights': [5, 5, 3, 64]}, ['conv1/weights'], tf.float32,
     'has no conv1/weights/ExponentialMovingAverage, which this model needs '
     '(float32 [5, 5, 3, 64])'),
])
def test_plan_names_the_checkpoint_and_what_differs(tmp_path, shapes, averaged,
                                                    dtype, message):
  with tf.Graph().as_default():
    _variables({'conv1/weights': [5, 5, 3, 64]})
    with tf.Session(config=testutil.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      checkpoint = tf.train.Saver().save(sess, str(tmp_path / 'model.ckpt'),
                                         global_step=7)
  with tf.Graph().as_default(), pytest.raises(
      checkpoints.CheckpointMismatchError) as e:
    _variables(shapes, averaged, dtype)
    checkpoints.plan_restore(checkpoint)
  assert str(e.value).startswith('checkpoint %s ' % checkpoint)
  assert message in str(e.value)


def _tiny_model():
  """(weight, global step, set_values(session, value, step)) of a graph
  plan_restore accepts: one averaged weight and the global step."""
  _variables({'conv1/weights': [2]}, ['conv1/weights'])
  weight, = tf.trainable_variables()
  global_step = tf.train.get_global_step()
  value, step = tf.placeholder(tf.float32, []), tf.placeholder(tf.int64, [])
  assign = [weight.assign([value, value]), global_step.assign(step)]
  return weight, global_step, lambda session, new_value, new_step: (
      session.run(assign, {value: new_value, step: new_step}))


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
