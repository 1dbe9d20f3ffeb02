"""A train_dir written at db22c74 by each trainer resumes in each trainer.

db22c74 is the code before issue #53's refactor. What its trainers left in a
train_dir after a few steps (each run for 3 steps on tests/synthetic.py's
data, batch 8, checkpoints listed with tf.train.list_variables) is written
here from the literal lists below, not from today's model code, so that a
change to today's names fails this test instead of moving it along:

* the checkpoints model.ckpt-0 and model.ckpt-N (.index, .data-00000-of-00001,
  .meta), and the `checkpoint` index naming both by relative path;
* the 21 variables of the model (10 weights and biases, float32, their 10
  moving averages, the int64 global step) and 4 float32 loss averages. The
  averages are the trainer's own: cifar10_train.py and
  cifar10_distributed_train.py (with or without --sync_replicas, whose
  accumulators and local step are not saved) name them `cross_entropy/avg`,
  ...; cifar10_multi_gpu_train.py names them after its last tower,
  `tower_0/...` with one tower, `tower_1/...` with two. The single and the
  distributed trainers' train_dirs are alike in every file, so the `single`
  layout stands for both;
* class_names.txt (CIFAR-10's ten names, one a line), the lock file
  .cifar10_train.lock (left behind, naming the process that held it),
  graph.pbtxt and an events file (here of the small graph that writes the
  checkpoints, as are the .meta files: no trainer reads them).

The checkpoints' values are random (the model has none of its own here) and
model.ckpt-0's differ from model.ckpt-N's: the run must restore the newest.
Nothing binary is committed: each test writes its train_dir.

Each layout is resumed for two steps by each trainer in this process
(testutil's `run_trainer`: the single trainer, one tower, two towers: nine
pairings, bounded by pytest.ini's timeout), and the two-tower layout once by
a cluster's chief (testutil's `run_chief`: one ps and one worker, the
only processes this file starts, the worker bounded by run_script's
timeout). The chief gets the layout whose loss averages it lacks: it
restores the model onto the ps and starts its own averages fresh, which no
other test makes it do (test_resume's chief resumes checkpoints of its own
names only). The chief's resume of its own names is test_resume's (single
-> chief); every resumed run's checkpoint is checked here to be db22c74's
layout of its trainer, so that test holds for db22c74's train_dirs too.
"""

import os
import shutil
import socket

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import testutil
from testutil import FRESH_LINE
from testutil import TRAINERS
from testutil import run_trainer
from testutil import run_chief
from testutil import checkpoint_values

# The step db22c74's run had reached (even: the resumed runs, logging
# every 2 steps, print their first step); they train two more.
STEP = 4
# The model's weights and biases, as db22c74 saved them (float32); each also
# under its ExponentialMovingAverage name.
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
  """{name: (shape, dtype)} of a db22c74 checkpoint whose loss averages are
  under `prefix`."""
  layout = {'global_step': ([], tf.int64)}
  for name, shape in WEIGHTS:
    layout[name] = (shape, tf.float32)
    layout[name + '/ExponentialMovingAverage'] = (shape, tf.float32)
  for name in LOSS_AVERAGES:
    layout[prefix + name] = ([], tf.float32)
  return layout


# Each of db22c74's trainers' checkpoints, by the keys of test_resume's
# TRAINERS (and 'distributed', alike 'single').
LAYOUTS = {
    'single': _layout(''),
    'towers1': _layout('tower_0/'),
    'towers2': _layout('tower_1/'),
}
LAYOUTS['distributed'] = LAYOUTS['single']

INDEX = ('model_checkpoint_path: "model.ckpt-{step}"\n'
         'all_model_checkpoint_paths: "model.ckpt-0"\n'
         'all_model_checkpoint_paths: "model.ckpt-{step}"\n')
CLASSES_FILE = 'class_names.txt'
CLASS_NAMES = (b'airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\n'
               b'ship\ntruck\n')
LOCK_FILE = '.cifar10_train.lock'
# No process has this pid: Linux's pid_max is at most 2**22.
LOCK_TEXT = 'pid 4194304 on host %s, started 2026-11-28 07:12:59\n'


def _random_values(layout, step, seed):
  rng = np.random.RandomState(seed)
  values = {}
  for name, (shape, dtype) in sorted(layout.items()):
    if name == 'global_step':
      values[name] = np.int64(step)
    elif name.endswith('/avg'):
      values[name] = np.float32(rng.uniform(1, 5))
    else:
      values[name] = rng.normal(0, 0.01, shape).astype(np.float32)
  return values


def write_old_train_dir(train_dir, layout, step=STEP):
  """Writes train_dir as db22c74's trainer of `layout` (a LAYOUTS value) left
  it at `step`; returns the values of model.ckpt-<step>, by name."""
  os.makedirs(train_dir)
  with tf.Graph().as_default() as graph:
    variables = {name: tf.get_variable(name, shape, dtype,
                                       tf.zeros_initializer(),
                                       trainable=False)
                 for name, (shape, dtype) in layout.items()}
    feeds = {name: tf.placeholder(v.dtype.base_dtype, v.shape)
             for name, v in variables.items()}
    assign = [v.assign(feeds[name]) for name, v in variables.items()]
    saver = tf.train.Saver(variables)
    with tf.Session(config=testutil.session_config()) as sess:
      for each, seed in ((0, 1), (step, 2)):
        values = _random_values(layout, each, seed)
        sess.run(assign, {feeds[name]: values[name] for name in values})
        saver.save(sess, os.path.join(train_dir, 'model.ckpt'),
                   global_step=each, write_state=False)
    tf.io.write_graph(graph, train_dir, 'graph.pbtxt')
    writer = tf.summary.FileWriter(train_dir, graph)
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(
        tag='total_loss_1', simple_value=4.6)]), step)
    writer.close()
  with open(os.path.join(train_dir, 'checkpoint'), 'w') as f:
    f.write(INDEX.format(step=step))
  with open(os.path.join(train_dir, CLASSES_FILE), 'wb') as f:
    f.write(CLASS_NAMES)
  with open(os.path.join(train_dir, LOCK_FILE), 'w') as f:
    f.write(LOCK_TEXT % socket.gethostname())
  return values


def _layout_of(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  dtypes = reader.get_variable_to_dtype_map()
  return {name: (shape, dtypes[name])
          for name, shape in reader.get_variable_to_shape_map().items()}


def check_resumed(stdout, train_dir, written, layout, reader, max_steps):
  """Asserts the run of trainer `reader` (a key of LAYOUTS) resumed train_dir,
  written as `layout` with values `written` at STEP, and trained on to
  max_steps."""
  checkpoint = os.path.join(train_dir, 'model.ckpt-%d' % STEP)
  assert ('Resuming from checkpoint %s at step %d' % (checkpoint, STEP)
          in stdout), stdout
  assert [int(m['step'])
          for m in testutil.step_line().finditer(stdout)][0] == STEP, stdout
  assert tf.train.latest_checkpoint(train_dir) == os.path.join(
      train_dir, 'model.ckpt-%d' % max_steps)

  # The run saved at STEP before its first step, over the checkpoint it
  # read: what it restored. It is db22c74's checkpoint of that trainer.
  restored = checkpoint_values(checkpoint)
  assert _layout_of(checkpoint) == LAYOUTS[reader]
  fresh = sorted(set(LAYOUTS[reader]) - set(layout))
  assert FRESH_LINE.findall(stdout) == (
      [(str(STEP), ', '.join(fresh))] if fresh else []), stdout
  for name in fresh:
    assert restored[name] == 0.0, name  # Its initial value.
  for name in set(LAYOUTS[reader]) - set(fresh):
    np.testing.assert_array_equal(restored[name], written[name],
                                  err_msg=name)
  final = checkpoint_values(tf.train.latest_checkpoint(train_dir))
  assert final['global_step'] == max_steps
  assert not np.array_equal(final['local4/weights'], written['local4/weights'])
  with open(os.path.join(train_dir, CLASSES_FILE), 'rb') as f:
    assert f.read() == CLASS_NAMES


@pytest.mark.slow  # Trains.
@pytest.mark.parametrize('layout', ['single', 'towers1', 'towers2'])
def test_an_old_train_dir_resumes_in_each_trainer(data_dir, tmp_path, layout):
  old = str(tmp_path / 'old')
  written = write_old_train_dir(old, LAYOUTS[layout])
  for reader in TRAINERS:
    train_dir = str(tmp_path / reader)
    shutil.copytree(old, train_dir)
    stdout = run_trainer(reader, data_dir, train_dir, STEP + 2)
    check_resumed(stdout, train_dir, written, LAYOUTS[layout], reader,
                  STEP + 2)


@pytest.mark.slow  # Starts a cluster.
def test_an_old_tower_train_dir_resumes_in_a_clusters_chief(data_dir,
                                                            tmp_path):
  train_dir = str(tmp_path / 'train')
  written = write_old_train_dir(train_dir, LAYOUTS['towers2'])
  stdout = run_chief(data_dir, train_dir, STEP + 2, False, tmp_path)
  check_resumed(stdout, train_dir, written, LAYOUTS['towers2'],
                'distributed', STEP + 2)
