"""A train_dir written at db22c74 (before issue #53's refactor) by each
trainer resumes in each trainer.

What db22c74's trainers left after a few steps (checked against real runs
with tf.train.list_variables) is written from the literal lists below, not
from today's model code, so that a renamed variable fails here: checkpoints
0 and N with the `checkpoint` index (relative paths), the model's 21
variables and 4 loss averages (`cross_entropy/avg`, ...; the multi-GPU
trainer's under its last tower, `tower_0/` or `tower_1/`; the cluster's
chief's as the single trainer's), class_names.txt, the left-behind lock
file, graph.pbtxt and an events file. Random values, model.ckpt-0's other
than model.ckpt-N's: the run must restore the newest.

Each layout resumes in each trainer in this process (testutil.run_trainer),
and the two-tower one in a cluster's chief (testutil.run_chief), which then
starts its own loss averages fresh, as no other test makes it do.
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
