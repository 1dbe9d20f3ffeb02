"""Tests for cifar10.py: inference, loss and one training step."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10
from cifar10_support import fast_ops
from cifar10_support import sessions
from testutil import session_config

EXPECTED_SHAPES = {
    'conv1/weights': [5, 5, 3, 64], 'conv1/biases': [64],
    'conv2/weights': [5, 5, 64, 64], 'conv2/biases': [64],
    'local3/weights': [2304, 384], 'local3/biases': [384],
    'local4/weights': [384, 192], 'local4/biases': [192],
    'softmax_linear/weights': [192, 10], 'softmax_linear/biases': [10],
}


@pytest.mark.parametrize('dtype', [tf.float32, tf.float16])
def test_inference_shapes_names_count_and_placement(dtype):
  with tf.Graph().as_default():
    images = tf.zeros([6, 24, 24, 3], dtype)
    logits = cifar10.inference(images)

    assert logits.shape.as_list() == [6, 10]
    assert logits.dtype == dtype
    assert logits.op.name == 'softmax_linear/softmax_linear'
    variables = tf.trainable_variables()
    assert {v.op.name: v.shape.as_list() for v in variables} == EXPECTED_SHAPES
    assert sum(int(np.prod(v.shape.as_list())) for v in variables) == 1068298
    assert all(v.dtype.base_dtype == dtype for v in variables)
    assert {v.device for v in variables} == {'/device:CPU:0'}


def test_initial_values_follow_the_original_initializers():
  with tf.Graph().as_default():
    cifar10.inference(tf.zeros([1, 24, 24, 3]))
    variables = {v.op.name: v for v in tf.trainable_variables()}
    with tf.Session(config=session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run(variables)
  assert np.all(values['conv1/biases'] == 0.0)
  assert np.allclose(values['conv2/biases'], 0.1)
  assert np.allclose(values['local3/biases'], 0.1)
  assert np.all(values['softmax_linear/biases'] == 0.0)
  # Truncated normals: within two standard deviations, and about that spread.
  for name, stddev in [('conv2/weights', 5e-2), ('local3/weights', 0.04),
                       ('softmax_linear/weights', 1 / 192.0)]:
    assert np.abs(values[name]).max() <= 2 * stddev
    assert 0.7 * stddev < values[name].std() < 0.95 * stddev


def test_loss_is_the_cross_entropy_plus_the_weight_decay_terms():
  with tf.Graph().as_default():
    cifar10.inference(tf.zeros([2, 24, 24, 3]))  # Its weight decay terms.
    # Logits 0 everywhere but ln(9) for the right class: p = 9 / 18 = 0.5.
    logits = np.zeros([2, 10], np.float32)
    logits[0, 3] = logits[1, 7] = np.log(9.0)
    total = cifar10.loss(tf.constant(logits), tf.constant([3, 7]))
    losses = tf.get_collection('losses')
    weights = {v.op.name: v for v in tf.trainable_variables()}
    with tf.Session(config=session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      total_value, loss_values, w3, w4 = sess.run(
          [total, losses, weights['local3/weights'], weights['local4/weights']])
  assert [l.op.name for l in losses] == [
      'local3/weight_loss', 'local4/weight_loss', 'cross_entropy']
  assert total.op.name == 'total_loss'
  assert loss_values[0] == pytest.approx(0.004 * (w3 ** 2).sum() / 2, rel=1e-4)
  assert loss_values[1] == pytest.approx(0.004 * (w4 ** 2).sum() / 2, rel=1e-4)
  assert loss_values[2] == pytest.approx(np.log(2.0), rel=1e-6)
  assert total_value == pytest.approx(sum(loss_values), rel=1e-6)


def test_one_train_step_updates_weights_step_and_averages():
  rng = np.random.RandomState(0)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    global_step = tf.train.get_or_create_global_step()
    images = tf.constant(rng.normal(size=(8, 24, 24, 3)).astype(np.float32))
    labels = tf.constant(rng.randint(0, 10, 8).astype(np.int32))
    total = cifar10.loss(cifar10.inference(images), labels)
    train_op = cifar10.train(total, global_step, batch_size=8)

    weights = {v.op.name: v for v in tf.trainable_variables()}
    # The names cifar10_eval.py restores the averaged weights from.
    everything = {v.op.name: v for v in tf.global_variables()}
    shadows = {name: everything[name + '/ExponentialMovingAverage']
               for name in weights}
    grads = dict(zip(weights, tf.gradients(total, list(weights.values()))))
    with tf.Session(config=session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      before, grad_values = sess.run([weights, grads])
      sess.run(train_op)
      after, shadow_values, step = sess.run([weights, shadows, global_step])

  assert step == 1
  # The moving average's decay warms up with the step: min(0.9999, 2 / 11).
  decay = 2.0 / 11.0
  for name in weights:
    # Plain SGD at the initial learning rate 0.1.
    np.testing.assert_allclose(after[name],
                               before[name] - 0.1 * grad_values[name],
                               rtol=1e-4, atol=1e-6)
    # The shadows averaged the *updated* weights: the update ran first.
    np.testing.assert_allclose(shadow_values[name],
                               decay * before[name] + (1 - decay) * after[name],
                               rtol=1e-4, atol=1e-6)
  assert not np.allclose(after['local3/weights'], before['local3/weights'])


@pytest.mark.parametrize('dtype, tolerance', [(tf.float32, 1e-5),
                                              (tf.float16, 2e-2)])
def test_lrn_matches_tf_nn_lrn_and_its_gradient(dtype, tolerance):
  rng = np.random.RandomState(0)
  x_value = (rng.normal(size=(4, 6, 6, 64)) * 20).astype(np.float32)
  weights = rng.normal(size=x_value.shape).astype(np.float32)
  with tf.Graph().as_default():
    x = tf.constant(x_value)
    ours = fast_ops.lrn(tf.cast(x, dtype), 4, bias=1.0, alpha=0.001 / 9.0,
                        beta=0.75, name='norm')
    reference = tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
    grads = [tf.gradients(tf.reduce_sum(tf.cast(y, tf.float32) * weights), x)[0]
             for y in (ours, reference)]
    with tf.Session(config=session_config()) as sess:
      out, ref, grad, ref_grad = sess.run([ours, reference] + grads)
  assert ours.op.name == 'norm'
  assert out.dtype == dtype.as_numpy_dtype
  # Large inputs, so the normalization really divides (not just ~x).
  assert np.abs(ref / x_value).min() < 0.6
  np.testing.assert_allclose(out, ref, rtol=tolerance, atol=tolerance)
  np.testing.assert_allclose(grad, ref_grad, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize('compute_dtype', [None, tf.bfloat16])
def test_a_graph_that_built_a_training_step_can_be_freed(compute_dtype):
  # cifar10_eval.py builds a graph for each checkpoint it evaluates; nothing
  # the model registers may keep the old ones alive (tf.custom_gradient
  # does: TensorFlow's registry held every graph that built an LRN).
  import gc
  import weakref

  def build():
    with tf.Graph().as_default() as graph:
      global_step = tf.train.get_or_create_global_step()
      logits = cifar10.inference(tf.zeros([2, 24, 24, 3]), compute_dtype)
      total_loss = cifar10.loss(logits, tf.zeros([2], tf.int32))
      cifar10.train(total_loss, global_step, batch_size=2)
    return weakref.ref(graph)

  graph = build()
  gc.collect()
  assert graph() is None


def test_histogram_summary_buckets_tag_and_format():
  # 40 zeros, one value inside each of buckets 1-29, and the maximum.
  values = np.concatenate([np.zeros(40), np.arange(1, 30) * 0.1 + 0.05, [3.0]])
  with tf.Graph().as_default():
    tf.constant(0.0, name='conv1/weights')  # the name the tag must dodge
    summary = fast_ops.histogram_summary('conv1/weights', tf.constant(values))
    flat = fast_ops.histogram_summary('biases', tf.fill([7], 0.1))
    with tf.Session(config=session_config()) as sess:
      parsed = [tf.Summary.FromString(s) for s in sess.run([summary, flat])]
  # Tagged and named like tf.summary.histogram: the op's unique name.
  assert summary.op.name == 'conv1/weights_1'
  assert [v.tag for v in parsed[0].value] == ['conv1/weights_1']
  value = parsed[0].value[0]
  assert value.metadata.plugin_data.plugin_name == 'histograms'
  buckets = tf.make_ndarray(value.tensor)
  assert buckets.shape == (fast_ops.HISTOGRAM_BUCKETS, 3)
  # Equal-width buckets from the minimum to the maximum, all values counted.
  np.testing.assert_allclose(buckets[:, 0], np.arange(30) * 0.1)
  np.testing.assert_allclose(buckets[:, 1], np.arange(1, 31) * 0.1)
  np.testing.assert_array_equal(buckets[:, 2], [40] + [1] * 28 + [2])
  # All-equal values: one bucket holds them all, edges at the value.
  same = tf.make_ndarray(parsed[1].value[0].tensor)
  assert same[0, 2] == 7 and same[:, 2].sum() == 7
  np.testing.assert_allclose(same[:, :2], 0.1, rtol=1e-6)


def test_session_config_follows_the_thread_rule_and_skips_rewrites():
  config = sessions.session_config(log_device_placement=True,
                                  operation_timeout_in_ms=5)
  assert config.log_device_placement
  assert config.operation_timeout_in_ms == 5
  short = sessions.session_config(optimize_graph=False)
  if tf.config.list_physical_devices('GPU'):
    assert not config.session_inter_op_thread_pool
    assert not short.graph_options.rewrite_options.disable_meta_optimizer
  else:  # Its threads: test_threads.py.
    assert not config.graph_options.rewrite_options.disable_meta_optimizer
    assert short.graph_options.rewrite_options.disable_meta_optimizer
    assert short.session_inter_op_thread_pool == config.session_inter_op_thread_pool


def test_activation_summary_sparsity_is_the_fraction_of_zeros():
  with tf.Graph().as_default():
    x = tf.constant([[0.0, 1.5, 0.0, 2.0], [0.0, 0.0, 3.0, 0.0]], name='act')
    cifar10.activation_summary(x)
    with tf.Session(config=session_config()) as sess:
      summary = tf.Summary.FromString(sess.run(tf.summary.merge_all()))
  values = {v.tag: v for v in summary.value}
  assert values['act/sparsity'].simple_value == 0.625
  counts = tf.make_ndarray(values['act/activations'].tensor)[:, 2]
  assert counts[0] == 5 and counts[-1] == 1 and counts.sum() == 8
