"""Tests of cifar10_multi_gpu_train.py: towers on real virtual CPU devices."""

import re

from absl import app
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_multi_gpu_train as multi
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import towers
from testutil import OP_TIMEOUT_MS, event_tags, event_values, histogram_tags
from testutil import run_script, step_line
import testutil

BATCH = 8

# Ops that do a tower's real work, forward and backward, under any name
# grappler or oneDNN gives them (_FusedConv2D, _MklMatMul, ...).
COMPUTE_OPS = re.compile('Conv2D|MatMul|Relu|LRN|MaxPool|SoftmaxCrossEntropy')


def _config(num_towers):
  config = sessions.training_config(num_towers=num_towers, tower_device='cpu')
  config.operation_timeout_in_ms = OP_TIMEOUT_MS
  return config


# A fixed batch: random images, labels 0..BATCH-1 (every half-batch differs).
IMAGES = np.random.RandomState(0).normal(size=(BATCH, 24, 24, 3)).astype(
    np.float32)
LABELS = np.arange(BATCH, dtype=np.int32)


def _tower_graph(num_towers, images=IMAGES, labels=LABELS):
  """A graph of `num_towers` CPU towers, each on its slice of the batch."""
  per_tower = len(images) // num_towers
  graph = tf.Graph()
  with graph.as_default():
    global_step = tf.train.get_or_create_global_step()
    batches = [(tf.constant(images[i * per_tower:(i + 1) * per_tower]),
                tf.constant(labels[i * per_tower:(i + 1) * per_tower]))
               for i in range(num_towers)]
    step = multi.build_train_step(batches, global_step, per_tower, 'cpu')
  return graph, step


def _by_name(pairs):
  return {var.op.name: grad for grad, var in pairs}


@pytest.mark.parametrize('num_towers', [2, 4])
def test_tower_average_equals_one_device_on_the_whole_batch(num_towers):
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    loss = cifar10.loss(cifar10.inference(tf.constant(IMAGES)),
                        tf.constant(LABELS))
    variables = tf.trainable_variables()
    grads = dict(zip([v.op.name for v in variables],
                     tf.gradients(loss, variables)))
    train_op = cifar10.train(loss, global_step, BATCH)
    with tf.Session(config=_config(1)) as sess:
      sess.run(tf.global_variables_initializer())
      initial = sess.run({v.op.name: v for v in variables})
      single_loss, single_grads = sess.run([loss, grads])
      sess.run(train_op)
      single_after = sess.run({v.op.name: v for v in variables})

  graph, step = _tower_graph(num_towers)
  with graph.as_default(), tf.Session(config=_config(num_towers)) as sess:
    sess.run(tf.global_variables_initializer())
    for var in tf.trainable_variables():
      var.load(initial[var.op.name], sess)
    multi_loss, averaged, tower_0 = sess.run(
        [step.loss, _by_name(step.grads_and_vars),
         _by_name(step.tower_grads[0])])
    sess.run(step.train_op)
    multi_after = sess.run({v.op.name: v for v in tf.trainable_variables()})

  assert len(averaged) == len(single_grads) == 10
  np.testing.assert_allclose(multi_loss, single_loss, rtol=1e-5)
  for name, grad in single_grads.items():
    np.testing.assert_allclose(averaged[name], grad, rtol=1e-4, atol=1e-6,
                               err_msg=name)
    np.testing.assert_allclose(multi_after[name], single_after[name],
                               rtol=1e-4, atol=1e-6, err_msg=name)
  # Not vacuous: one tower's gradient alone is not the whole batch's, and the
  # step moved the weights.
  assert not np.allclose(tower_0['softmax_linear/biases'],
                         single_grads['softmax_linear/biases'], atol=1e-4)
  assert not np.allclose(multi_after['softmax_linear/biases'],
                         initial['softmax_linear/biases'])


def test_each_tower_runs_on_its_own_device_and_the_variables_on_cpu0():
  graph, step = _tower_graph(3, IMAGES[:6], LABELS[:6])
  with graph.as_default():
    # One set of variables, their averages and (once, the last tower's) the
    # loss averages, on CPU:0; the global step (the test's) an int64.
    names = [v.op.name for v in tf.global_variables()]
    averages = [n for n in names if n.endswith('/ExponentialMovingAverage')]
    assert len(tf.trainable_variables()) == len(averages) == 10
    assert sorted(n for n in names if n.endswith('/avg')) == [
        'tower_2/cross_entropy/avg', 'tower_2/local3/weight_loss/avg',
        'tower_2/local4/weight_loss/avg', 'tower_2/total_loss/avg']
    for var in tf.global_variables():
      device = tf.DeviceSpec.from_string(var.device)
      if var.op.name != 'global_step':  # Made by the test, on no device.
        assert (device.device_type, device.device_index) == ('CPU', 0), var
    assert tf.train.get_global_step().dtype.base_dtype == tf.int64
  config = _config(3)
  assert not config.allow_soft_placement
  assert config.device_count['CPU'] == 3
  with graph.as_default(), tf.Session(config=config) as sess:
    sess.run(tf.global_variables_initializer())
    metadata = tf.RunMetadata()
    sess.run(step.train_op, run_metadata=metadata,
             options=tf.RunOptions(output_partition_graphs=True))

  placed = {node.name: (node.op, node.device)
            for partition in metadata.partition_graphs
            for node in partition.node}
  assert len(metadata.partition_graphs) == 3
  for i in range(3):
    compute = {name: device for name, (op, device) in placed.items()
               if name.startswith('tower_%d/' % i) and COMPUTE_OPS.search(op)}
    # 2 convolutions forward, their filter gradients, and more.
    assert len(compute) >= 10, compute
    assert all(d.endswith('/device:CPU:%d' % i) for d in compute.values()), (
        i, compute)
  update = [d for name, (op, d) in placed.items()
            if op == 'ResourceApplyGradientDescent']
  assert len(update) == 10
  assert all(d.endswith('/device:CPU:0') for d in update)


def _tags(summaries):
  return {tf.compat.as_str(tf.get_static_value(s.op.inputs[0]).item())
          for s in summaries}


def test_summary_tags_match_single_device_training(data_dir):
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    images, labels = cifar10.distorted_inputs(data_dir, BATCH, num_threads=1)
    loss = cifar10.loss(cifar10.inference(images), labels)
    cifar10.train(loss, global_step, BATCH)
    single = _tags(tf.get_collection(tf.GraphKeys.SUMMARIES))

  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    batches = multi.tower_input_batches(data_dir, 2, BATCH, num_threads=1)
    step = multi.build_train_step(batches, global_step, BATCH, 'cpu')
    towers = _tags(step.summaries)

  assert towers == single | {'prefetch_queue/fraction_of_4_full'}
  assert {'total_loss__raw_', 'conv1/conv1/conv1/activations',
          'learning_rate', 'images', 'conv1/weights/gradients'} <= towers


def test_logger_counts_every_tower(monkeypatch, capsys):
  # One step of 2 towers x 8 images in 2 seconds.
  clock = iter([100.0, 102.0, 102.0])
  monkeypatch.setattr(progress, 'time', type('Clock', (), {
      'time': staticmethod(lambda: next(clock))}))
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    logger = progress.StepLogger(tf.constant(1.5), batch_size=8,
                                 log_frequency=1, batches_per_step=2)
    train_op = tf.assign_add(global_step, 1)
    with tf.train.MonitoredSession(hooks=[logger]) as session:
      session.run(train_op)
  assert logger.last_examples_per_sec == 8.0
  assert (logger.last_step, logger.global_step) == (0, 1)
  line = step_line(None, step=0).search(capsys.readouterr().out)
  assert line and (line['loss'], line['examples_per_sec'],
                   line['sec_per_batch']) == ('1.50', '8.0', '1.000')


@pytest.mark.slow  # Trains.
def test_two_towers_train_checkpoint_and_resume(data_dir, tmp_path, capsys):
  # The script's --num_gpus=2 --tower_device=cpu, by a call (its console and
  # its checkpoint in cifar10_eval.py: test_console.py's multi-tower test).
  train_dir = str(tmp_path / 'train')
  testutil.train(multi.train, run_flags.TrainSettings(
      data_dir, train_dir, max_steps=6, batch_size=BATCH, log_frequency=2),
      num_towers=2, tower_device='cpu')
  first = capsys.readouterr().out

  assert [int(m['step']) for m in step_line().finditer(first)] == [0, 2, 4]
  checkpoint = tf.train.latest_checkpoint(train_dir)
  assert checkpoint.endswith('model.ckpt-6')
  tags = event_tags(train_dir)
  histograms = histogram_tags(event_values(train_dir))
  assert {'conv1/conv1/conv1/activations',
          'conv1/weights/gradients'} <= histograms
  assert {'images/image/0', 'learning_rate', 'total_loss__raw_',
          'total_loss_1', 'conv1/conv1/conv1/activations', 'conv1/weights_1',
          'conv1/weights/gradients',
          'prefetch_queue/fraction_of_4_full'} <= tags
  assert not [t for t in tags if t.startswith('tower_')]

  # GPU towers on a machine with fewer GPUs: one line, then soft placement.
  testutil.train(multi.train, run_flags.TrainSettings(
      data_dir, train_dir, max_steps=10, batch_size=BATCH, log_frequency=2),
      num_towers=2, tower_device='gpu')
  second = capsys.readouterr().out

  assert 'Resuming from checkpoint %s at step 6' % checkpoint in second
  if len(tf.config.list_physical_devices('GPU')) < 2:
    assert ('2 GPU towers asked for (--num_gpus) but %d GPU(s) visible'
            % len(tf.config.list_physical_devices('GPU'))) in second
  assert [int(m['step']) for m in step_line().finditer(second)] == [6, 8]
  assert tf.train.latest_checkpoint(train_dir).endswith('model.ckpt-10')


# --- --split_gpus: virtual GPUs, checked here without a GPU -------------------

@pytest.mark.parametrize('args, limits', [
    # One 80 GB card, four towers: 90% of it shared evenly.
    ((4, 1, 81559), [[18350.0] * 4]),
    # Two cards, three towers: the first card takes the extra one.
    ((3, 2, 16000), [[7200.0] * 2, [7200.0]]),
    ((8, 3, 16000), [[4800.0] * 3, [4800.0] * 3, [4800.0] * 2]),
    # A size given for each: as given, card memory unknown or not.
    ((4, 1, None, 2048), [[2048.0] * 4]),
])
def test_split_config_gives_every_tower_a_virtual_gpu(args, limits):
  config = towers.split_config(*args)
  assert [list(card.memory_limit_mb) for card in
          config.gpu_options.experimental.virtual_devices] == limits
  assert config.allow_soft_placement


@pytest.mark.parametrize('args, message', [
    ((1, 2, 16000), '--split_gpus with --num_gpus=1 and 2 GPUs visible: there '
                    'is nothing to split'),
    ((64, 1, 16000), '--num_gpus=64 --split_gpus puts 64 towers on a GPU of '
                     '16000 MB, 225 MB each: each needs at least 512 MB'),
    ((4, 1, 16000, 5000), '--num_gpus=4 --split_gpus puts 4 towers on a GPU '
                          'of 16000 MB, 5000 MB each: together more than the '
                          '14400 MB usable (90%)'),
    ((4, 1, None), '--split_gpus could not read the GPUs\' memory (no '
                   'NVIDIA management library): give each virtual GPU\'s '
                   'memory with --split_gpu_memory_mb'),
])
def test_split_that_cannot_work_is_one_usage_line(args, message):
  with pytest.raises(app.UsageError) as e:
    towers.split_config(*args)
  assert str(e.value).startswith(message)


def test_gpu_fallback_message_names_the_flag_that_helps(monkeypatch, capsys):
  for visible, towers_asked, remedy in (
      (1, 4, '--split_gpus splits the GPU(s) into 4 virtual GPUs, one per '
             'tower.'),
      (0, 2, '--tower_device=cpu gives each tower its own CPU device.')):
    monkeypatch.setattr(sessions, 'visible_gpus', lambda v=visible: v)
    towers.session_config(towers_asked, 'gpu')
    assert capsys.readouterr().out == (
        '%d GPU towers asked for (--num_gpus) but %d GPU(s) visible: towers '
        'without a GPU run on the CPU (soft placement), as in the original; '
        '%s\n' % (towers_asked, visible, remedy))


def test_split_gpus_config_refuses_a_machine_without_gpus(monkeypatch):
  # --split_gpus with CPU towers: test_split_gpus_script_refuses_with_one_line.
  monkeypatch.setattr(sessions, 'visible_gpus', lambda: 0)
  with pytest.raises(app.UsageError) as e:
    towers.session_config(4, 'gpu', split_gpus=True)
  assert str(e.value) == (
      '--split_gpus needs a GPU, and TensorFlow sees none; without one, '
      '--tower_device=cpu gives each tower its own CPU device')


@pytest.mark.slow  # Starts a process.
def test_split_gpus_script_refuses_with_one_line(tmp_path):
  result = run_script('cifar10_multi_gpu_train.py', [
      '--num_gpus=4', '--split_gpus', '--tower_device=cpu',
      '--train_dir=%s' % (tmp_path / 't'),
      '--data_dir=%s' % (tmp_path / 'no_data')], timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      '--split_gpus splits GPUs and --tower_device=cpu puts the towers on CPU '
      'devices: drop one of the two')
  assert not (tmp_path / 'no_data').exists()  # Refused before any download.


@pytest.mark.slow  # Starts a process, which trains on GPUs.
@pytest.mark.skipif(not tf.config.list_physical_devices('GPU'),
                    reason='needs a GPU to split')
def test_split_gpus_trains_every_tower_on_a_gpu(data_dir, tmp_path):
  result = run_script('cifar10_multi_gpu_train.py', [
      '--num_gpus=4', '--split_gpus', '--data_dir=%s' % data_dir,
      '--train_dir=%s' % (tmp_path / 't'), '--batch_size=%d' % BATCH,
      '--max_steps=2', '--log_device_placement'])
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'virtual GPUs of' in result.stdout
  for i in range(4):
    assert re.search(r'tower_%d/conv1/Conv2D\S*: \(\S+\): '
                     r'/job:localhost/replica:0/task:0/device:GPU:%d' % (i, i),
                     result.stderr), i
