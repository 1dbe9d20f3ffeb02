"""Builds the CIFAR-10 network: inputs, inference, loss and the training op.

Summary of the graph builders:

    # Input batches for training, and for evaluation.
    images, labels = distorted_inputs(data_dir, batch_size)
    images, labels = inputs(eval_data, data_dir, batch_size)

    # The model's forward pass: logits for each image.
    logits = inference(images)

    # The loss to minimize: cross-entropy plus weight decay.
    total_loss = loss(logits, labels)

    # One step of training: SGD plus moving averages of the weights.
    train_op = train(total_loss, global_step, batch_size)

Every function takes its settings as arguments; only the scripts' `main`
functions read the flags defined here.
"""

import os
import re

from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata

import cifar10_console
import cifar10_download
import cifar10_input
import cifar10_precision

# The repository's cifar10/ folder, wherever the scripts are started from.
DEFAULT_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                'cifar10')
DATA_URL = cifar10_download.DATA_URL
DATA_MD5 = cifar10_download.DATA_MD5
BATCHES_DIR = cifar10_download.BATCHES_DIR
# A missing, malformed or undownloadable data file or archive; a ValueError.
DataError = cifar10_input.DataError

# Without a GPU, sessions on machines with at most this many usable cores run
# one op at a time (each op on every core). Measured: on 2 cores it gains
# 4-7% (benchmarks/README.md, change 6); on 16 cores it costs 11-28% against
# TensorFlow's default inter-op pool. Between the two it is not measured yet.
ONE_OP_AT_A_TIME_MAX_CORES = 4

# Flags shared by every script. Defined here once (a second definition would
# raise DuplicateFlagError); read only in the scripts' main().
flags.DEFINE_integer('batch_size', 128,
                     'Number of images to process in a batch.')
flags.DEFINE_string('data_dir', DEFAULT_DATA_DIR,
                    'Path to the CIFAR-10 data directory.')
flags.DEFINE_string('data_url', DATA_URL,
                    'Where to get cifar-10-binary.tar.gz when '
                    '<data_dir>/cifar-10-batches-bin is missing or '
                    'incomplete: an http(s) URL of a mirror, or a file:// '
                    'URL or path of a copy you already have.')
flags.DEFINE_string('data_md5', DATA_MD5,
                    'MD5 of the archive at --data_url (default: the official '
                    'archive\'s); empty to skip the check.')
flags.DEFINE_boolean('use_fp16', False, 'Train the model using fp16.')
flags.DEFINE_enum('mixed_precision', 'off', ['off', 'bf16'],
                  'bf16: compute convolutions and matrix products in '
                  'bfloat16, keeping variables, loss, gradients and '
                  'checkpoints float32. Needs a CPU with AVX512_BF16 or AMX '
                  '(elsewhere one line says so and the run stays float32), '
                  'or a GPU: bfloat16 from compute capability 8.0, float16 '
                  'with dynamic loss scaling before it.')
flags.DEFINE_integer('num_intra_threads', None,
                     'Threads each op may use (TensorFlow\'s intra-op pool); '
                     '0 = TensorFlow\'s choice (one per core). Unset: '
                     'TensorFlow\'s choice.', lower_bound=0)
flags.DEFINE_integer('num_inter_threads', None,
                     'Ops that may run at once (the inter-op pool); 0 = '
                     'TensorFlow\'s choice. Unset: 1 (one op at a time) on a '
                     'machine without a GPU and with at most %d usable cores '
                     'and one tower, else TensorFlow\'s choice.'
                     % ONE_OP_AT_A_TIME_MAX_CORES, lower_bound=0)


def define_checkpoint_dir_flag():
  """Defines --checkpoint_dir, for the scripts that read a run's checkpoints.

  cifar10_eval.py and cifar10_classify.py both take it; one process may
  import both (the tests do), and absl refuses a flag defined twice.
  """
  if 'checkpoint_dir' not in flags.FLAGS:
    flags.DEFINE_string('checkpoint_dir', '/tmp/cifar10_train',
                        'Directory where to read model checkpoints: the '
                        'training run\'s --train_dir.')

# Global constants describing the CIFAR-10 data set.
IMAGE_SIZE = cifar10_input.IMAGE_SIZE
NUM_CLASSES = cifar10_input.NUM_CLASSES
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_EVAL

# Constants describing the training process.
MOVING_AVERAGE_DECAY = 0.9999     # The decay to use for the moving average.
NUM_EPOCHS_PER_DECAY = 350.0      # Epochs after which learning rate decays.
LEARNING_RATE_DECAY_FACTOR = 0.1  # Learning rate decay factor.
INITIAL_LEARNING_RATE = 0.1       # Initial learning rate.

# Multi-tower graphs prefix op names with this; summaries strip it so that
# TensorBoard tags are the same for any number of towers.
TOWER_NAME = 'tower'

# Buckets of every histogram summary; TensorBoard's default.
HISTOGRAM_BUCKETS = 30


def strip_tower_prefix(name):
  """`name` without its tower scope: 'tower_1/conv1/conv1' -> 'conv1/conv1'."""
  return re.sub('%s_[0-9]*/' % TOWER_NAME, '', name)


def histogram_summary(name, values):
  """A histogram summary of `values`, named and tagged as tf.summary.histogram.

  TF's HistogramSummary kernel bins one value at a time into ~1,500
  exponential buckets: 0.2 s for conv1's activations of one 128-image batch,
  more than two training steps (benchmarks/README.md). This bins into
  HISTOGRAM_BUCKETS equal-width buckets with a few whole-tensor ops and
  writes TensorBoard's histogram format (plugin 'histograms', a [k, 3]
  float64 tensor of left edge, right edge, count), the one TensorFlow 2's
  own tf.summary.histogram writes. It shows in the same dashboards.

  Args:
    name: str, the summary's name; its tag, like tf.summary.histogram's, is
      the op name it gets.
    values: float tensor of any shape, non-empty.

  Returns:
    The summary op (a scalar string tensor), added to the SUMMARIES collection.
  """
  with tf.name_scope(name + '_buckets'):
    flat = tf.cast(tf.reshape(values, [-1]), tf.float32)  # no-op for float32
    low = tf.reduce_min(flat)
    # All-equal values (a zero-initialized bias) land in the first bucket.
    width = tf.maximum(tf.reduce_max(flat) - low, 1e-30) / HISTOGRAM_BUCKETS
    index = tf.clip_by_value(tf.cast((flat - low) / width, tf.int32),
                             0, HISTOGRAM_BUCKETS - 1)
    # int32 counts: Bincount has a GPU kernel for them, not for float64.
    counts = tf.raw_ops.Bincount(arr=index, size=HISTOGRAM_BUCKETS,
                                 weights=tf.zeros([0], tf.int32))
    edges = (tf.cast(low, tf.float64) + tf.cast(width, tf.float64)
             * np.arange(HISTOGRAM_BUCKETS + 1))
    buckets = tf.stack([edges[:-1], edges[1:], tf.cast(counts, tf.float64)],
                       axis=1)
  # Summary ops have CPU kernels only; pinned there, a tower's GPU holds none.
  with tf.device('/cpu:0'):
    return tf.summary.tensor_summary(
        name, buckets,
        summary_metadata=histogram_metadata.create_summary_metadata(name, ''))


def _activation_summary(x):
  """Adds a histogram and a sparsity summary of activations `x`."""
  tensor_name = strip_tower_prefix(x.op.name)
  histogram_summary(tensor_name + '/activations', x)
  # The fraction of zeros, as tf.nn.zero_fraction computes it without its
  # tf.cond, whose function setup slowed each new session by ~25 ms.
  sparsity = tf.reduce_mean(tf.cast(tf.equal(x, 0), tf.float32))
  with tf.device('/cpu:0'):  # See histogram_summary.
    tf.summary.scalar(tensor_name + '/sparsity', sparsity)


def _variable_on_cpu(name, shape, initializer, dtype=tf.float32):
  """Creates (or, under a reusing scope, fetches) a variable on /cpu:0.

  Keeping the one copy of each weight on the CPU lets every tower share it.
  """
  with tf.device('/cpu:0'):
    return tf.get_variable(name, shape, initializer=initializer, dtype=dtype)


def _variable_with_weight_decay(name, shape, stddev, wd, dtype=tf.float32):
  """Creates a truncated-normal variable, with L2 weight decay if `wd`.

  Args:
    name: name of the variable.
    shape: list of ints.
    stddev: standard deviation of the truncated normal initializer.
    wd: L2 loss multiplier added to the 'losses' collection; None for none.
    dtype: tf.float32 or tf.float16.

  Returns:
    The variable.
  """
  var = _variable_on_cpu(
      name, shape,
      tf.truncated_normal_initializer(stddev=stddev, dtype=dtype), dtype)
  if wd is not None:
    weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name='weight_loss')
    tf.add_to_collection('losses', weight_decay)
  return var


def _maybe_fp16(images, labels, use_fp16):
  if use_fp16:
    images = tf.cast(images, tf.float16)
    labels = tf.cast(labels, tf.float16)
  return images, labels


def distorted_inputs(data_dir=DEFAULT_DATA_DIR, batch_size=128, use_fp16=False,
                     num_threads=cifar10_input.NUM_PREPROCESS_THREADS):
  """Distorted training batches read from `<data_dir>/cifar-10-batches-bin`.

  Returns:
    images: 4-D tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3], float32
      (float16 with use_fp16).
    labels: 1-D tensor of [batch_size], int32 (float16 with use_fp16).

  Raises:
    ValueError: if data_dir is empty or a data file is missing or malformed.
  """
  if not data_dir:
    raise ValueError('Please supply a data_dir')
  images, labels = cifar10_input.distorted_inputs(
      data_dir=os.path.join(data_dir, BATCHES_DIR), batch_size=batch_size,
      num_threads=num_threads)
  return _maybe_fp16(images, labels, use_fp16)


def inputs(eval_data, data_dir=DEFAULT_DATA_DIR, batch_size=128,
           use_fp16=False, num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
           single_pass=False):
  """Evaluation batches read from `<data_dir>/cifar-10-batches-bin`.

  Args:
    eval_data: 'test' (or True) or 'train_eval' (or False).
    single_pass: read each record once, then end; see cifar10_input.inputs.

  Returns:
    images, labels: as `distorted_inputs`, centrally cropped and unshuffled.
  """
  if not data_dir:
    raise ValueError('Please supply a data_dir')
  images, labels = cifar10_input.inputs(
      eval_data=eval_data, data_dir=os.path.join(data_dir, BATCHES_DIR),
      batch_size=batch_size, num_threads=num_threads, single_pass=single_pass)
  return _maybe_fp16(images, labels, use_fp16)


def _lrn(x, name, depth_radius=4, bias=1.0, alpha=0.001 / 9.0):
  """Local response normalization with beta 0.75, as `tf.nn.lrn` computes it.

  out = x / (bias + alpha * sum of x**2 over the 2 * depth_radius + 1
  neighbouring channels) ** 0.75.

  TF's own LRN gradient kernel took about a sixth of each CPU training step.
  Here the window sum is a product with a band matrix (alpha and bias folded
  into one fused matmul), the power is rsqrt(u) * sqrt(rsqrt(u)), and the
  gradient is written out (below) instead of differentiating those ops one
  by one: the same arithmetic in fewer passes over the activations
  (benchmarks/README.md has the measurements).

  Args:
    x: 4-D tensor of [batch, height, width, channels].
    name: name of the output op.

  Returns:
    A tensor of the shape and dtype of `x`.
  """
  channels = x.shape.as_list()[-1]
  index = np.arange(channels)
  band = (np.abs(index[:, None] - index[None, :]) <= depth_radius)
  dtype = x.dtype.base_dtype

  @tf.custom_gradient
  def normalize(x):
    flat = tf.reshape(x, [-1, channels])
    # u = bias + alpha * window sum of squares; its bias_add fuses into the
    # matmul.
    u = tf.nn.bias_add(
        tf.matmul(tf.square(flat), tf.constant(alpha * band, dtype)),
        tf.constant(np.full(channels, bias), dtype))
    r = tf.math.rsqrt(u)
    scale = r * tf.sqrt(r)  # u ** -0.75
    y = flat * scale

    def grad(dy):
      # d out_i / d x_k = [i == k] * scale_k
      #                   - 1.5 * alpha * x_k * y_i / u_i * [|i - k| <= r];
      # the band is symmetric, so the sum over i is again a band product.
      dy = tf.reshape(dy, [-1, channels])
      spread = tf.matmul(dy * y / u, tf.constant(-1.5 * alpha * band, dtype))
      return tf.reshape(dy * scale + flat * spread, tf.shape(x))

    return tf.reshape(y, tf.shape(x)), grad

  with tf.name_scope(name + '_window'):
    out = normalize(x)
  return tf.identity(out, name=name)


def _lrn_float32(x, name):
  """`_lrn` computed in float32 whatever x's dtype, returned in x's dtype.

  In bfloat16 (8 significant bits) its denominator, 1 + alpha * a sum of
  squares with alpha about 1e-4, would move in steps of 1/128 near 1: coarser
  than the normalization itself for most activations, whose alpha * sum is
  under 1%.
  """
  if x.dtype.base_dtype == tf.float32:
    return _lrn(x, name)
  return tf.cast(_lrn(tf.cast(x, tf.float32), name), x.dtype.base_dtype)


def inference(images, compute_dtype=None):
  """Builds the CIFAR-10 model: two conv layers, two fully connected, linear.

  Variables are created with `tf.get_variable` on /cpu:0, so calling this again
  under a reusing variable scope (one call per tower) shares them.

  Args:
    images: 4-D tensor of [batch, IMAGE_SIZE, IMAGE_SIZE, 3], float32 or
      float16; the variables take the same dtype.
    compute_dtype: None computes in the images' dtype. tf.bfloat16 or
      tf.float16 (mixed precision, float32 images): each weight is cast as
      it is read, the layers compute in that dtype except the LRN (float32),
      and the logits come back as float32. The variables stay float32, so
      their gradients arrive as float32 through the casts.

  Returns:
    logits: 2-D tensor of [batch, NUM_CLASSES], unscaled (no softmax), in
      the images' dtype.
  """
  dtype = images.dtype.base_dtype
  compute = compute_dtype or dtype
  mixed = compute != dtype
  if mixed and dtype != tf.float32:
    raise ValueError('mixed precision (compute_dtype %s) takes float32 '
                     'images, got %s' % (compute.name, dtype.name))

  def read(var):
    return tf.cast(var, compute) if mixed else var

  if mixed:
    images = tf.cast(images, compute)

  with tf.variable_scope('conv1') as scope:
    kernel = _variable_with_weight_decay('weights', [5, 5, 3, 64], stddev=5e-2,
                                         wd=None, dtype=dtype)
    conv = tf.nn.conv2d(images, read(kernel), [1, 1, 1, 1], padding='SAME')
    biases = _variable_on_cpu('biases', [64], tf.constant_initializer(0.0),
                              dtype)
    conv1 = tf.nn.relu(tf.nn.bias_add(conv, read(biases)), name=scope.name)
    _activation_summary(conv1)

  pool1 = tf.nn.max_pool(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                         padding='SAME', name='pool1')
  norm1 = _lrn_float32(pool1, name='norm1')

  with tf.variable_scope('conv2') as scope:
    kernel = _variable_with_weight_decay('weights', [5, 5, 64, 64],
                                         stddev=5e-2, wd=None, dtype=dtype)
    conv = tf.nn.conv2d(norm1, read(kernel), [1, 1, 1, 1], padding='SAME')
    biases = _variable_on_cpu('biases', [64], tf.constant_initializer(0.1),
                              dtype)
    conv2 = tf.nn.relu(tf.nn.bias_add(conv, read(biases)), name=scope.name)
    _activation_summary(conv2)

  # Unlike the first block, normalization comes before pooling here.
  norm2 = _lrn_float32(conv2, name='norm2')
  pool2 = tf.nn.max_pool(norm2, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                         padding='SAME', name='pool2')

  with tf.variable_scope('local3') as scope:
    # Flatten each image to one vector; -1 keeps any batch size.
    dim = 1
    for d in pool2.get_shape().as_list()[1:]:
      dim *= d
    reshape = tf.reshape(pool2, [-1, dim])
    weights = _variable_with_weight_decay('weights', [dim, 384], stddev=0.04,
                                          wd=0.004, dtype=dtype)
    biases = _variable_on_cpu('biases', [384], tf.constant_initializer(0.1),
                              dtype)
    local3 = tf.nn.relu(tf.matmul(reshape, read(weights)) + read(biases),
                        name=scope.name)
    _activation_summary(local3)

  with tf.variable_scope('local4') as scope:
    weights = _variable_with_weight_decay('weights', [384, 192], stddev=0.04,
                                          wd=0.004, dtype=dtype)
    biases = _variable_on_cpu('biases', [192], tf.constant_initializer(0.1),
                              dtype)
    local4 = tf.nn.relu(tf.matmul(local3, read(weights)) + read(biases),
                        name=scope.name)
    _activation_summary(local4)

  # The softmax itself is left to the loss, which fuses it with the
  # cross-entropy for numerical stability.
  with tf.variable_scope('softmax_linear') as scope:
    weights = _variable_with_weight_decay('weights', [192, NUM_CLASSES],
                                          stddev=1 / 192.0, wd=None,
                                          dtype=dtype)
    biases = _variable_on_cpu('biases', [NUM_CLASSES],
                              tf.constant_initializer(0.0), dtype)
    # In mixed precision the cast back takes the original's op name, and so
    # its summary tag.
    softmax_linear = tf.add(tf.matmul(local4, read(weights)), read(biases),
                            name=None if mixed else scope.name)
    if mixed:
      softmax_linear = tf.cast(softmax_linear, dtype, name=scope.name)
    _activation_summary(softmax_linear)

  return softmax_linear


def loss(logits, labels, scope=None):
  """Cross-entropy of `logits` against `labels`, plus all weight decay terms.

  Args:
    logits: 2-D tensor of [batch, NUM_CLASSES] from `inference`.
    labels: 1-D tensor of [batch], integer classes (any numeric dtype).
    scope: name scope (e.g. 'tower_1/') whose loss terms alone are summed;
      None sums the whole 'losses' collection. Each tower of a multi-tower
      graph passes its own, or it would add the other towers' terms.

  Returns:
    Scalar tensor `total_loss`: the sum of the 'losses' collection.
  """
  labels = tf.cast(labels, tf.int64)
  cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits, name='cross_entropy_per_example')
  cross_entropy_mean = tf.reduce_mean(cross_entropy, name='cross_entropy')
  tf.add_to_collection('losses', cross_entropy_mean)
  return tf.add_n(tf.get_collection('losses', scope), name='total_loss')


# Decay of the loss averages that TensorBoard shows beside the raw losses.
LOSS_AVERAGE_DECAY = 0.9


def _loss_average(value, decay=LOSS_AVERAGE_DECAY):
  """A 0.9 moving average of a scalar loss that starts at its first value.

  The variable is the one the original's ExponentialMovingAverage(0.9,
  name='avg') made, '<loss op name>/avg' starting at 0, so checkpoints keep
  its name both ways. That average starts at 0, which made every loss chart
  begin with a drop to 0; here an average that is still exactly 0 (never
  updated: a loss is never exactly 0) takes the loss itself instead.

  Args:
    value: scalar float tensor, one loss term.
    decay: float, weight of the old average at each update.

  Returns:
    The updated average, a scalar tensor of value's dtype; evaluating it
    updates the variable (once per session.run).
  """
  # A trailing '/' makes a scope absolute: the name does not nest under a
  # tower's scope, which the loss's own op name already carries.
  with tf.device('/cpu:0'):
    with tf.name_scope(value.op.name + '/'):
      average = tf.Variable(lambda: tf.zeros([], value.dtype),
                            trainable=False, name='avg')
    with tf.name_scope(average.op.name + '/'):
      started = tf.not_equal(average, 0)
      new = tf.where(started, average - (1 - decay) * (average - value),
                     value)
      return tf.assign(average, new)


def _add_loss_summaries(total_loss, losses=None):
  """Adds raw and 0.9-moving-average scalar summaries of every loss term.

  Args:
    total_loss: scalar tensor from `loss()`.
    losses: the loss terms to summarize; None for the whole 'losses'
      collection (a multi-tower graph passes one tower's). Summary names drop
      the tower scope.

  Returns:
    The op that updates the moving averages of the losses.
  """
  if losses is None:
    losses = tf.get_collection('losses')
  updates = []
  for l in losses + [total_loss]:
    name = strip_tower_prefix(l.op.name)
    updates.append(_loss_average(l))
    with tf.device('/cpu:0'):  # See histogram_summary.
      tf.summary.scalar(name + ' (raw)', l)
      # The average after this step's update: the first point is the first
      # loss.
      tf.summary.scalar(name, updates[-1])
  return tf.group(*updates)


def learning_rate(global_step, batch_size, num_towers=1):
  """The staircase exponential-decay learning rate, with its summary.

  Args:
    global_step: int64 scalar variable, counting optimizer updates.
    batch_size: int, images per batch per tower.
    num_towers: int, towers whose batches each update averages; one update
      then covers num_towers batches, so the decay comes that many updates
      sooner.

  Returns:
    Scalar float32 tensor `learning_rate`.
  """
  num_batches_per_epoch = NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN / batch_size
  decay_steps = int(num_batches_per_epoch / num_towers * NUM_EPOCHS_PER_DECAY)
  lr = tf.train.exponential_decay(INITIAL_LEARNING_RATE, global_step,
                                  decay_steps, LEARNING_RATE_DECAY_FACTOR,
                                  staircase=True)
  tf.summary.scalar('learning_rate', lr)
  return lr


def add_weight_and_gradient_summaries(grads_and_vars):
  """Histograms of every trainable variable and of each non-None gradient."""
  for var in tf.trainable_variables():
    histogram_summary(var.op.name, var)
  for grad, var in grads_and_vars:
    if grad is not None:
      histogram_summary(var.op.name + '/gradients', grad)


def apply_moving_averages(global_step, after):
  """Updates the 0.9999 moving averages of all trainable variables.

  Args:
    global_step: the global step, which warms the decay up early in training.
    after: ops that must run first (the gradient update), so that the
      averages see this step's new weights.

  Returns:
    The averaging op; running it runs `after` too.
  """
  variable_averages = tf.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY,
                                                        global_step)
  with tf.control_dependencies(after):
    return variable_averages.apply(tf.trainable_variables())


def train(total_loss, global_step, batch_size=128, loss_scaling=False):
  """Builds one training step: SGD on `total_loss`, then weight averages.

  Args:
    total_loss: scalar loss from `loss()`.
    global_step: int64 scalar variable counting training steps.
    batch_size: int, images per batch (sets the learning-rate schedule).
    loss_scaling: bool, scale the loss for float16 gradients (see
      cifar10_precision.apply_gradients).

  Returns:
    The op to run for each training step.
  """
  lr = learning_rate(global_step, batch_size)
  loss_averages_op = _add_loss_summaries(total_loss)
  loss_scale = (cifar10_precision.dynamic_loss_scale() if loss_scaling
                else None)

  with tf.control_dependencies([loss_averages_op]):
    opt = tf.train.GradientDescentOptimizer(lr)
    grads = cifar10_precision.compute_gradients(opt, total_loss, loss_scale)
  apply_gradient_op, grads = cifar10_precision.apply_gradients(
      opt, grads, global_step, loss_scale)

  add_weight_and_gradient_summaries(grads)
  return apply_moving_averages(global_step, after=[apply_gradient_op])


def usable_cores():
  """The cores this process may run on (its affinity mask), an int."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


def thread_settings(num_cores, has_gpu, num_towers=1, intra=None, inter=None,
                    cluster_task=False):
  """How many threads a session's ops get: the rule, in one place.

  Args:
    num_cores: int, usable cores.
    has_gpu: bool, a GPU is visible. There the CPU's inter-op threads launch
      kernels and feed the input, so TensorFlow's defaults stay.
    num_towers: int, model replicas that should run side by side (CPU
      towers); more than one keeps TensorFlow's inter-op pool.
    intra, inter: --num_intra_threads and --num_inter_threads as given;
      None for the rule, 0 for TensorFlow's choice.
    cluster_task: bool, the process is a task of a TensorFlow cluster, whose
      inter-op pool also runs what the other tasks ask of it: TensorFlow's
      default stays (one op at a time there is not measured).

  Returns:
    (intra, inter), ints: threads each op may use, and ops that may run at
    once; 0 leaves the choice to TensorFlow (one per core).
  """
  if inter is None:
    one_at_a_time = (not has_gpu and num_towers == 1 and not cluster_task
                     and num_cores <= ONE_OP_AT_A_TIME_MAX_CORES)
    inter = 1 if one_at_a_time else 0
  return (0 if intra is None else intra), inter


def session_config(optimize_graph=True, threads=(None, None), num_towers=1,
                   **kwargs):
  """`tf.ConfigProto(**kwargs)` for a session that runs one model.

  Its thread counts come from `thread_settings`: on a machine without a GPU
  and with few cores, one op at a time (a private inter-op pool of one
  thread), each op using every core through its own intra-op threads.
  oneDNN's convolutions already keep a few cores busy; two of them side by
  side, TF's default, made a 2-core training step 4-7% slower
  (benchmarks/README.md), while on 16 cores the single pool cost 11-28%.

  Args:
    optimize_graph: False skips Grappler's graph rewrites on a machine
      without a GPU. Meant for short sessions (one evaluation each): the
      rewrites cost about 0.1 s per new session and made this model's forward
      pass no faster on the CPU. With a GPU they stay (its layout rewrites
      matter there).
    threads: (--num_intra_threads, --num_inter_threads); None in either
      place for the rule.
    num_towers: int, CPU towers meant to run side by side.
    **kwargs: fields of tf.ConfigProto.

  Returns:
    A tf.ConfigProto.
  """
  config = set_threads(tf.ConfigProto(**kwargs), threads, num_towers)
  if not optimize_graph and not tf.config.list_physical_devices('GPU'):
    config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


def threads_here(threads=(None, None), num_towers=1, cluster_task=False):
  """`thread_settings` for this process: its usable cores, whether a GPU is
  visible, and the flags (threads: (intra, inter), None for the rule)."""
  return thread_settings(usable_cores(),
                         bool(tf.config.list_physical_devices('GPU')),
                         num_towers, *threads, cluster_task=cluster_task)


def set_threads(config, threads=(None, None), num_towers=1):
  """Sets a tf.ConfigProto's thread counts by `thread_settings`; returns it.

  Args:
    config: the tf.ConfigProto to change.
    threads, num_towers: as for `session_config`.
  """
  intra, inter = threads_here(threads, num_towers)
  config.intra_op_parallelism_threads = intra
  if inter:
    # A named pool of the session's own: the global inter-op pool is sized
    # once per process, by the first session that uses it.
    pool = config.session_inter_op_thread_pool.add()
    pool.num_threads = inter
    pool.global_name = 'cifar10_inter_op_%d' % inter
  return config


def config_threads(config):
  """(intra, inter) of a tf.ConfigProto, as `thread_settings` gives them."""
  pools = config.session_inter_op_thread_pool
  inter = pools[0].num_threads if pools else config.inter_op_parallelism_threads
  return config.intra_op_parallelism_threads, inter


def configure_logging():
  """Prints each TensorFlow log line once, without its known noise.

  For a script's main(), before any graph is built; see cifar10_console.
  """
  cifar10_console.quiet_python_logs()


def maybe_download_and_extract(data_dir=DEFAULT_DATA_DIR, data_url=DATA_URL,
                               data_md5=DATA_MD5, **kwargs):
  """Makes `<data_dir>/cifar-10-batches-bin` usable, downloading if needed.

  Downloads to a temporary name, checks the length and MD5, retries, and
  extracts into a temporary directory renamed into place; see
  cifar10_download.maybe_download_and_extract (which takes **kwargs).

  Args:
    data_dir: where the archive is kept and extracted.
    data_url: http(s) URL, or file:// URL or path of a local copy.
    data_md5: expected MD5 of the archive; '' for no check.
    **kwargs: e.g. files=cifar10_input.TRAIN_FILES, the data files the
      caller reads (all six by default): only a missing one of those is
      fetched.

  Raises:
    DataError: with one message saying what is wrong and how to fix it.
  """
  cifar10_download.maybe_download_and_extract(data_dir, data_url, data_md5,
                                              **kwargs)


def data_line(data_dir, files, records=None):
  """The line a script prints once its data files are checked.

  Args:
    data_dir: folder holding `cifar-10-batches-bin/`.
    files: the names of the data files the script reads.
    records: int, their records as a check already counted them; None
      checks the files here.

  Returns:
    str, e.g. 'Data: /d/cifar-10-batches-bin, 5 files, 50000 records (checked).'

  Raises:
    DataError: a file is missing or malformed.
  """
  batches_dir = os.path.join(data_dir, BATCHES_DIR)
  if records is None:
    records = cifar10_input.check_data_files(
        [os.path.join(batches_dir, name) for name in files])
  return 'Data: %s, %d file%s, %d records (checked).' % (
      batches_dir, len(files), 's' if len(files) > 1 else '', records)


def check_flag_range(name, value, minimum=None, maximum=None):
  """Raises app.UsageError unless minimum <= value <= maximum.

  For a script's main(), before any graph is built. Example:
  check_flag_range('batch_size', FLAGS.batch_size, minimum=1).

  Args:
    name: the flag's name, without dashes.
    value: its value.
    minimum, maximum: inclusive bounds; None for none.
  """
  if minimum is not None and maximum is not None:
    expected = 'between %s and %s' % (minimum, maximum)
  elif minimum is not None:
    expected = 'at least %s' % minimum
  else:
    expected = 'at most %s' % maximum
  if ((minimum is not None and value < minimum) or
      (maximum is not None and value > maximum)):
    raise app.UsageError('--%s must be %s, got %s' % (name, expected, value))


def check_flag_writable_dir(name, path):
  """Creates directory `path` if needed; raises app.UsageError if unwritable.

  Remote paths ('gs://...') are left to TensorFlow's file system.

  Args:
    name: the flag's name, without dashes.
    path: the directory it gives.
  """
  if not path:
    raise app.UsageError('--%s must name a directory' % name)
  if '://' in path:
    return
  problem = cifar10_download.writable_dir_problem(path)
  if problem:
    raise app.UsageError('--%s=%s is not a writable directory: %s'
                         % (name, path, problem))
