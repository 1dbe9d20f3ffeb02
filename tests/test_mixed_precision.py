"""--mixed_precision=bf16: the model computes in bfloat16, the rest is float32;
float16's loss scale. The CPU's answer is forced both ways (a driver for the
script run, a monkeypatch for a call), so every machine checks both."""

import os
import re

from absl import app
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_eval
import cifar10_train
from cifar10_support import data_files
from cifar10_support import evaluation
from cifar10_support import mixed_precision
from cifar10_support import train_dirs
import synthetic
from testutil import save_checkpoint
from testutil import session_config
from testutil import step_line
import testutil

# /proc/cpuinfo 'flags' lines, shortened, of the machines the project runs on.
ZEN3 = 'fpu vme sse sse2 avx avx2 fma bmi2 sha_ni vaes vpclmulqdq'
ICE_LAKE = ZEN3 + ' avx512f avx512dq avx512bw avx512vl avx512_vnni'
ZEN4 = ICE_LAKE + ' avx512_bf16 avx512_vbmi2'
SAPPHIRE_RAPIDS = ZEN4 + ' amx_bf16 amx_tile amx_int8'
REDUCED = (tf.bfloat16, tf.float16)


def _cpuinfo(flags, processors=2):
  return ''.join('processor\t: %d\nmodel name\t: A CPU\nflags\t\t: %s\n'
                 'bugs\t\t: spectre_v1 avx512_bf16_typo\n\n' % (i, flags)
                 for i in range(processors))


@pytest.mark.parametrize('cpuinfo, expected', [
    (_cpuinfo(ZEN3), None), (_cpuinfo(ICE_LAKE), None),
    (_cpuinfo(ZEN4), 'avx512_bf16'), (_cpuinfo(SAPPHIRE_RAPIDS), 'amx_bf16'),
    (_cpuinfo(''), None), ('', None),
    ('Features\t: fp asimd bf16 i8mm\n', None)])  # an ARM CPU: not tested
def test_cpu_support_is_read_from_the_flags_line(cpuinfo, expected):
  assert mixed_precision.cpu_bf16_feature(cpuinfo) == expected


def test_choice_and_its_line_for_each_machine(monkeypatch, capsys):
  choose = mixed_precision.choose
  assert choose('off', False, 'avx512_bf16', None) == (None, None)
  assert choose('off', True, None, (9, 0)) == (None, None)

  dtype, line = choose('bf16', False, 'avx512_bf16', None)
  assert dtype == tf.bfloat16
  assert line == ('Mixed precision: bfloat16 on the CPU (avx512_bf16); '
                  'variables, loss, gradients and checkpoints stay float32.')

  # The CPU's answer forced, as _FORCED_CPU does for a script: printed.
  monkeypatch.setattr(mixed_precision, 'cpu_bf16_feature',
                      lambda cpuinfo=None: None)
  assert mixed_precision.compute_dtype_for_this_machine('bf16', False) is None
  assert capsys.readouterr().out == (
      '--mixed_precision=bf16: this CPU has neither AVX512_BF16 nor AMX, so '
      'bfloat16 would be emulated and slower than float32: running in '
      'float32.\n')

  dtype, line = choose('bf16', True, None, (9, 0))
  assert dtype == tf.bfloat16 and 'compute capability 9.0' in line
  for capability in ((7, 0), (7, 5), None):
    dtype, line = choose('bf16', True, 'avx512_bf16', capability)
    assert dtype == tf.float16
    assert 'float16 with dynamic loss scaling' in line


def _types(op):
  """The dtypes of op's 'T' attribute (one, or a list); empty without one."""
  value = op.get_attr('T') if 'T' in op.node_def.attr else []
  return set(value) if isinstance(value, list) else {value}


def _reduced_ops(graph):
  return [op for op in graph.get_operations() if _types(op) & set(REDUCED)]


def _training_graph(compute_dtype, batch=4):
  """The training graph, its logits and loss, and {variable name: (dtype,
  shape)}."""
  with tf.Graph().as_default() as graph:
    global_step = tf.train.get_or_create_global_step()
    logits = cifar10.inference(tf.zeros([batch, 24, 24, 3]), compute_dtype)
    loss = cifar10.loss(logits, tf.zeros([batch], tf.int32))
    cifar10.train(loss, global_step, batch, compute_dtype)
    return graph, logits, loss, {
        v.op.name: (v.dtype.base_dtype, v.shape.as_list())
        for v in tf.global_variables()}


def test_reduced_precision_ops_appear_only_with_the_flag(data_dir):
  graph, _, _, float32_variables = _training_graph(None)
  assert _reduced_ops(graph) == []
  # The eval graph's convolutions in bfloat16 too (what it predicts:
  # test_eval_with_the_flag_predicts_what_the_weights_say).
  with tf.Graph().as_default() as graph:
    settings = evaluation.EvalSettings(data_dir, batch_size=10,
                                       compute_dtype=tf.bfloat16)
    cifar10_eval.build_eval_graph(settings, testutil.described(settings))
  assert [op.get_attr('T') for op in graph.get_operations()
          if op.type == 'Conv2D'] == [tf.bfloat16] * 2

  for dtype in REDUCED:
    graph, logits, loss, variables = _training_graph(dtype)
    reduced = _reduced_ops(graph)
    types = {op.type for op in reduced}
    assert {'Conv2D', 'Conv2DBackpropFilter', 'Conv2DBackpropInput',
            'MatMul', 'BiasAdd', 'Relu', 'MaxPool'} <= types, types
    assert set().union(*map(_types, reduced)) == {dtype}
    # Forward: 2 convolutions, 3 matrix products, each in the dtype.
    forward = [op for op in reduced if not op.name.startswith('gradients')]
    assert sorted(op.type for op in forward
                  if op.type in ('Conv2D', 'MatMul')) == (
                      ['Conv2D'] * 2 + ['MatMul'] * 3)
    # The LRN, the loss and the update stay float32.
    for op in graph.get_operations():
      if (op.name.startswith(('norm1', 'norm2', 'cross_entropy', 'total_loss',
                              'GradientDescent', 'ExponentialMovingAverage'))
          and _types(op)):
        assert _types(op) == {tf.float32}, op.name
    assert logits.dtype == tf.float32 and loss.dtype == tf.float32
    assert logits.op.name == 'softmax_linear/softmax_linear'
    # The same variables, names, shapes and dtypes: the same checkpoint;
    # beside them float16 saves its loss scale, no other dtype anything.
    assert variables == dict(float32_variables, **(
        {'loss_scale/scale': (tf.float32, []),
         'loss_scale/good_steps': (tf.int64, [])}
        if dtype == tf.float16 else {}))


# Two steps of the float16 optimizer on a weight [1, 1] of gradients
# `grads`, the second after clean steps one short of growing the scale. Each
# step's (weight, scale in first scales, clean steps): a clean step is
# unscaled (1 - 1, 1 + 2), the growth step still by the old scale, which it
# then doubles; an overflowing step is skipped and halves it.
@pytest.mark.parametrize('grads,steps', [
    ([1, -2], [([0, 3], 1, 1), ([-1, 5], 2, 0)]),
    ([np.inf, 1], [([1, 1], 0.5, 0), ([1, 1], 0.25, 0)])],
                         ids=['clean', 'overflow'])
def test_loss_scale_unscales_grows_and_skips_overflowing_steps(grads, steps):
  start = mixed_precision.LOSS_SCALE_START
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    weight = tf.get_variable('w', initializer=tf.ones([2]))
    loss_scale = mixed_precision.optimizer(
        tf.train.GradientDescentOptimizer(1.0), tf.float16)
    loss = tf.reduce_sum(tf.constant(grads, tf.float32) * weight)
    train_op = loss_scale.apply_gradients(
        loss_scale.compute_gradients(loss), global_step)
    with tf.Session(config=session_config()) as sess:
      sess.run([tf.global_variables_initializer(),
                tf.local_variables_initializer()])
      assert sess.run(loss_scale.scale) == start
      for i, (moved, scale, good) in enumerate(steps):
        if i:
          sess.run(loss_scale.good_steps.assign(
              mixed_precision.LOSS_SCALE_GROWTH_STEPS - 1))
        sess.run(train_op)
        np.testing.assert_allclose(sess.run(weight), moved)
        assert sess.run([loss_scale.scale, loss_scale.good_steps]) == [
            scale * start, good]
      assert sess.run(global_step) == 2  # An overflowing step counts too.


def _checkpoint_contents(checkpoint):
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: (reader.get_variable_to_dtype_map()[name], shape)
          for name, shape in reader.get_variable_to_shape_map().items()}


@pytest.mark.parametrize('dtype', [tf.float32, tf.float16])
def test_eval_with_the_flag_predicts_what_the_weights_say(data_dir, tmp_path,
                                                          capsys, dtype):
  # Averaged weights that predict class 3 for every image: 2 of the 20 test
  # records are 3s.
  path = str(tmp_path / 'model.ckpt')
  save_checkpoint(path, 7, raw_class=5, shadow_class=3, dtype=dtype)
  result = testutil.eval_once(path + '-7', evaluation.EvalSettings(
      data_dir, num_examples=20, batch_size=10,
      session_config=session_config(), compute_dtype=tf.bfloat16))
  assert result['true_count'] == 2
  assert result['confusion'][:, 3].sum() == 20
  note = ('Note: %s-7 holds float16 weights (--use_fp16): --mixed_precision '
          'does not apply, the model computes in float16.' % path)
  assert (note in capsys.readouterr().out) == (dtype == tf.float16)


def _start(train_dir, data_set, dtype, scale=None):
  """A training session of dtype on train_dir's newest checkpoint, started
  as the trainers start one; returns its (global step, loss scale, clean
  steps) as started, None for a graph without a loss scale. With `scale`
  (scale, clean steps), then sets those and saves them at step 7."""
  with train_dirs.claim(train_dir, False, data_set) as start:
    with tf.Graph().as_default():
      global_step = tf.train.get_or_create_global_step()
      loss = cifar10.loss(cifar10.inference(tf.zeros([2, 24, 24, 3]), dtype),
                          tf.zeros([2], tf.int32))
      cifar10.train(loss, global_step, 2, dtype)
      state = [global_step] + [v for v in tf.global_variables()
                               if v.op.name.startswith('loss_scale/')]
      setters = [var.assign(value)
                 for var, value in zip(state, (7,) + (scale or ()))]
      scaffold = start.scaffold()
      with tf.train.MonitoredSession(tf.train.ChiefSessionCreator(
          scaffold, config=session_config())) as sess:
        values = sess.run(state)
        if scale is not None:
          sess.run(setters)
          scaffold.saver.save(sess._tf_sess(),  # pylint: disable=protected-access
                              os.path.join(train_dir, 'model.ckpt'),
                              global_step=7)
  return tuple(values) if dtype == tf.float16 else (values[0], None, None)


@pytest.mark.slow  # Sessions of the training graph.
def test_float16_saves_its_loss_scale_and_resumes_from_float32_and_back(
    data_dir, tmp_path, capsys):
  # The loss scale's state goes with float16's checkpoint, so that a resumed
  # run goes on with the scale the unstopped one had; float32 checkpoints
  # keep the original's 25 variables, as bfloat16's (the same checkpoint:
  # either evaluates either way), and each resumes the others'.
  train_dir, data_set = str(tmp_path), data_files.describe(data_dir)
  start = mixed_precision.LOSS_SCALE_START
  assert _start(train_dir, data_set, tf.float16, scale=(256.0, 5)) == (
      0, start, 0)
  checkpoint = tf.train.latest_checkpoint(train_dir)
  assert checkpoint.endswith('model.ckpt-7')
  contents = _checkpoint_contents(checkpoint)
  assert _start(train_dir, data_set, tf.float16) == (7, 256.0, 5)
  # Evaluation reads it, the loss scale ignored.
  assert testutil.eval_once(checkpoint, evaluation.EvalSettings(
      data_dir, num_examples=20, batch_size=10,
      session_config=session_config()))['global_step'] == 7
  # A float32 run resumes from it, and saves the 25 alone; a bfloat16 run
  # resumes that and saves the same, which float32 resumes.
  saved = []
  for dtype in (None, tf.bfloat16, None):
    assert _start(train_dir, data_set, dtype, scale=()) == (7, None, None)
    saved.append(_checkpoint_contents(tf.train.latest_checkpoint(train_dir)))
  assert saved[0] == saved[1] == saved[2] and len(saved[0]) == 25
  assert {dtype for dtype, _ in saved[0].values()} == {tf.float32, tf.int64}
  assert contents == dict(saved[0], **{'loss_scale/scale': (tf.float32, []),
                                       'loss_scale/good_steps': (tf.int64, [])})
  # A float16 run resumes from that one, its loss scale started afresh.
  assert 'Starting fresh' not in capsys.readouterr().out
  assert _start(train_dir, data_set, tf.float16) == (7, start, 0)
  assert ('Starting fresh (not in model.ckpt-7, which another trainer or '
          'precision wrote): '
          'loss_scale/good_steps, loss_scale/scale.') in capsys.readouterr().out


def _colour_steps(dtype, steps, start=None):
  """`steps` plain SGD steps (cifar10.train's, with its loss scale for
  float16) of the model in dtype on one batch of 32 cropped, normalized
  synthetic colour images, from the weights `start` (None: graph seed 0's).
  Returns the weights before and after, each step's cross-entropy, the
  loss scale's state ([] but for float16) and the logits after."""
  labels = np.arange(32) % 10
  images = synthetic.visible_label_images(
      labels, np.random.RandomState(0))[:, 4:28, 4:28]
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(0)
    global_step = tf.train.get_or_create_global_step()
    logits = cifar10.inference(tf.constant(
        (images - images.mean()) / images.std(), tf.float32), dtype)
    train_op = cifar10.train(cifar10.loss(logits, tf.constant(labels)),
                             global_step, 32, compute_dtype=dtype)
    cross_entropy = graph.get_tensor_by_name('cross_entropy:0')
    weights = {v.op.name: v for v in tf.trainable_variables()}
    scale = [v for v in tf.global_variables()
             if v.op.name.startswith('loss_scale/')]
    with tf.Session(config=session_config()) as sess:
      sess.run([tf.global_variables_initializer(),
                tf.local_variables_initializer()])
      if start is not None:
        sess.run([var.assign(start[name]) for name, var in weights.items()])
      before = sess.run(weights)
      losses = [sess.run([train_op, cross_entropy])[1] for _ in range(steps)]
      return before, sess.run(weights), losses, sess.run(scale), sess.run(
          logits)


def test_float16_step_scales_the_loss_and_moves_the_weights_as_float32():
  start, exact = _colour_steps(None, 1)[:2]
  _, reduced, _, scale, _ = _colour_steps(tf.float16, 1, start)
  # Unscaled: each variable moved as in float32, to float16's precision (a
  # missing scale would leave the gradients 32,768 times too small, a
  # missing unscaling as many times too large: a relative error near 1 or
  # far above it). Compared as whole vectors, not element by element: a
  # ReLU input near zero can round to the other side in float16, and on
  # some CPUs does, which changes that unit's gradients outright.
  for name, value in exact.items():
    delta = value - start[name]
    assert np.abs(delta).max() > 0, name
    error = np.linalg.norm(reduced[name] - value)
    assert error < 0.1 * np.linalg.norm(delta), name
  assert scale == [mixed_precision.LOSS_SCALE_START, 1]


def test_bfloat16_learns_a_batch_as_float32_does_computing_close_to_it():
  # 60 steps at the original's learning rate (which makes the loss jump
  # about); the cross-entropy starts at ln(10) = 2.30.
  for dtype in (tf.bfloat16, None):  # float32's weights and logits last.
    _, weights, losses, _, exact = _colour_steps(dtype, 60)
    assert losses[0] == pytest.approx(np.log(10), abs=0.05)
    assert np.mean(losses[-20:]) < 0.75 * np.log(10), (dtype, losses)
  # float32's trained weights (their logits far from the initial ones' 0) in
  # bfloat16: about 3 significant digits, close and not identical.
  reduced = _colour_steps(tf.bfloat16, 0, weights)[4]
  assert np.abs(exact).max() > 1
  assert np.abs(reduced - exact).max() < 0.05 * np.abs(exact).max()
  assert not np.array_equal(reduced, exact)


# Runs a script (argv[2:]) with the CPU's bfloat16 support forced to argv[1].
_FORCED_CPU = """
import runpy, sys
from cifar10_support import console
console.before_tensorflow('__main__')
from cifar10_support import mixed_precision
feature, sys.argv = sys.argv[1], sys.argv[2:]
mixed_precision.cpu_bf16_feature = lambda cpuinfo=None: feature
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.mark.slow  # Starts a process.
def test_training_script_with_the_flag_says_how_first_and_trains(data_dir,
                                                                 tmp_path):
  # The console: the line before anything else, nothing on stderr; the
  # 25 float32 variables (test_float16_saves_its_loss_scale_and_...).
  train_dir = str(tmp_path / 'train')
  # The CPU's answer decides only where no GPU is visible.
  result = testutil.run_script('cifar10_train.py', [
      '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
      '--batch_size=8', '--log_frequency=5', '--max_steps=10',
      '--mixed_precision=bf16'], wrapper=['-c', _FORCED_CPU, 'avx512_bf16'],
      CUDA_VISIBLE_DEVICES='')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines()[0] == (
      'Mixed precision: bfloat16 on the CPU (avx512_bf16); variables, loss, '
      'gradients and checkpoints stay float32.')
  assert len(step_line().findall(result.stdout)) == 2, result.stdout
  assert re.search(r'^Done: step 10 reached', result.stdout, re.M)
  assert result.stderr == ''
  contents = _checkpoint_contents(tf.train.latest_checkpoint(train_dir))
  assert len(contents) == 25
  assert {dtype for dtype, _ in contents.values()} == {tf.float32, tf.int64}


def test_this_machine_prints_its_own_answer(data_dir, tmp_path, capsys):
  # cifar10_eval.py's flags as a user gives them, on this machine's real
  # detection; no checkpoint there: its error, after the line, names
  # the directory.
  line = testutil.exit_line(
      lambda: cifar10_eval.evaluate_as_flagged(cifar10_eval.FLAGS,
                                               str(tmp_path)),
      'cifar10_eval.py', ['--data_dir=%s' % data_dir, '--run_once',
                          '--eval_dir=%s' % (tmp_path / 'eval'),
                          '--num_examples=20', '--mixed_precision=bf16'],
      cifar10_eval.FLAGS)
  assert line.startswith('cifar10_eval.py: error: No checkpoint file found '
                         'in checkpoint_dir %s' % tmp_path), line
  out = capsys.readouterr().out
  if tf.config.list_physical_devices('GPU'):
    # A GPU's line depends on its compute capability (tested above).
    assert 'Mixed precision: ' in out, out
    return
  # Read here from /proc/cpuinfo, not by the code under test.
  with open('/proc/cpuinfo') as f:
    flag_set = set(re.findall(r'^flags\s*: (.*)$', f.read(), re.M)[0].split())
  feature = ([f for f in ('amx_bf16', 'avx512_bf16') if f in flag_set] +
             [None])[0]
  assert mixed_precision.choose('bf16', False, feature, None)[1] in (
      out.splitlines()), out


def test_use_fp16_and_mixed_precision_together_is_a_usage_error(data_dir,
                                                                tmp_path):
  # The script's main, by a call: a UsageError is its one line and exit
  # status 1 (test_flag_rules.py's process test of --train_dir).
  with testutil.as_script('cifar10_train.py', [
      '--data_dir=%s' % data_dir, '--train_dir=%s' % tmp_path, '--use_fp16',
      '--mixed_precision=bf16'], cifar10_train.FLAGS):
    with pytest.raises(app.UsageError) as e:
      cifar10_train.main(['cifar10_train.py'])
  assert str(e.value) == ('--use_fp16 stores the variables in float16, '
                          '--mixed_precision=bf16 keeps them float32: drop one '
                          'of the two')
  assert os.listdir(tmp_path) == []
