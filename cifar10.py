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

    # Evaluating: the weights restored from their moving averages.
    saver = tf.train.Saver(moving_averages_to_restore())

Every function takes its settings as arguments; only the scripts' `main`
functions read the flags defined here.
"""

import os
import re

from absl import flags
import tensorflow.compat.v1 as tf

import cifar10_input
from cifar10_support import fast_ops
from cifar10_support import mixed_precision
from cifar10_support import summaries

# The repository's cifar10/ folder, wherever the scripts are started from.
DEFAULT_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                'cifar10')

# Basic model parameters. Defined here once, read only in the scripts' main();
# the flags the scripts share beyond these are cifar10_support.run_flags'.
flags.DEFINE_integer('batch_size', 128,
                     'Number of images to process in a batch.',
                     lower_bound=1)
flags.DEFINE_string('data_dir', DEFAULT_DATA_DIR,
                    'Path to the CIFAR-10 data directory.')
flags.DEFINE_boolean('use_fp16', False,
                     'Train the model using fp16.')

# Global constants describing the CIFAR-10 data set; the scripts take a data
# set's own from its data_files.DataSet.
NUM_CLASSES = cifar10_input.NUM_CLASSES
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN

# Constants describing the training process.
MOVING_AVERAGE_DECAY = 0.9999     # The decay to use for the moving average.
NUM_EPOCHS_PER_DECAY = 350.0      # Epochs after which learning rate decays.
LEARNING_RATE_DECAY_FACTOR = 0.1  # Learning rate decay factor.
INITIAL_LEARNING_RATE = 0.1       # Initial learning rate.

# If a model is trained with multiple GPUs, prefix all Op names with tower_name
# to differentiate the operations. Summaries strip it, so that TensorBoard tags
# are the same for any number of towers.
TOWER_NAME = 'tower'


def strip_tower_prefix(name):
  """`name` without its tower scope: 'tower_1/conv1/conv1' -> 'conv1/conv1'."""
  return re.sub('%s_[0-9]*/' % TOWER_NAME, '', name)


def activation_summary(x):
  """Adds a histogram and a sparsity summary of activations `x`.

  fast_ops.histogram_summary replaces tf.summary.histogram (see there).
  """
  tensor_name = strip_tower_prefix(x.op.name)
  fast_ops.histogram_summary(tensor_name + '/activations', x)
  sparsity = tf.nn.zero_fraction(x)
  # Summary ops have CPU kernels only; pinned there, a tower's GPU holds none.
  with tf.device('/cpu:0'):
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
                     num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
                     data_set=None, seed=None):
  """Distorted training batches read from `<data_dir>/cifar-10-batches-bin`,
  or from the training files of data_set (a data_files.DataSet); seed: see
  cifar10_input.distorted_inputs.

  Returns:
    images: 4-D tensor of [batch_size, 24, 24, 3], float32
      (float16 with use_fp16).
    labels: 1-D tensor of [batch_size], int32 (float16 with use_fp16).

  Raises:
    ValueError: if data_dir is empty or a data file is missing or not whole
      records (their labels are checked where the data is prepared:
      download.prepare).
  """
  if not data_dir:
    raise ValueError('Please supply a data_dir')
  images, labels = cifar10_input.distorted_inputs(
      data_dir=os.path.join(data_dir, 'cifar-10-batches-bin'),
      batch_size=batch_size, num_threads=num_threads, data_set=data_set,
      seed=seed)
  return _maybe_fp16(images, labels, use_fp16)


def inputs(eval_data, data_dir=DEFAULT_DATA_DIR, batch_size=128,
           use_fp16=False, num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
           single_pass=False, data_set=None):
  """Evaluation batches read from `<data_dir>/cifar-10-batches-bin`, or from
  data_set (a data_files.DataSet).

  Args:
    eval_data: 'test' (or True) or 'train_eval' (or False).
    single_pass: read each record once, then end; see cifar10_input.inputs.

  Returns:
    images, labels: as `distorted_inputs`, centrally cropped and unshuffled.
  """
  if not data_dir:
    raise ValueError('Please supply a data_dir')
  images, labels = cifar10_input.inputs(
      eval_data=eval_data,
      data_dir=os.path.join(data_dir, 'cifar-10-batches-bin'),
      batch_size=batch_size, num_threads=num_threads, single_pass=single_pass,
      data_set=data_set)
  return _maybe_fp16(images, labels, use_fp16)


def inference(images, compute_dtype=None, num_classes=NUM_CLASSES):
  """Builds the CIFAR-10 model: two conv layers, two fully connected, linear.

  Variables are created with `tf.get_variable` on /cpu:0, so calling this again
  under a reusing variable scope (one call per tower) shares them.

  Args:
    images: 4-D tensor of [batch, 24, 24, 3], float32 or
      float16; the variables take the same dtype.
    compute_dtype: None computes in the images' dtype. tf.bfloat16 or
      tf.float16 (mixed precision, float32 images): each weight is cast as
      it is read, the layers compute in that dtype except the LRN (float32),
      and the logits come back as float32. The variables stay float32, so
      their gradients arrive as float32 through the casts.
    num_classes: int, the classes of the data set (its DataSet's
      num_classes); the last layer's shape.

  Returns:
    logits: 2-D tensor of [batch, num_classes], unscaled (no softmax), in
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
    activation_summary(conv1)

  pool1 = tf.nn.max_pool(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                         padding='SAME', name='pool1')
  # fast_ops.lrn computes tf.nn.lrn, faster (see there).
  norm1 = fast_ops.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75,
                       name='norm1')

  with tf.variable_scope('conv2') as scope:
    kernel = _variable_with_weight_decay('weights', [5, 5, 64, 64],
                                         stddev=5e-2, wd=None, dtype=dtype)
    conv = tf.nn.conv2d(norm1, read(kernel), [1, 1, 1, 1], padding='SAME')
    biases = _variable_on_cpu('biases', [64], tf.constant_initializer(0.1),
                              dtype)
    conv2 = tf.nn.relu(tf.nn.bias_add(conv, read(biases)), name=scope.name)
    activation_summary(conv2)

  # Unlike the first block, normalization comes before pooling here.
  norm2 = fast_ops.lrn(conv2, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75,
                       name='norm2')
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
    activation_summary(local3)

  with tf.variable_scope('local4') as scope:
    weights = _variable_with_weight_decay('weights', [384, 192], stddev=0.04,
                                          wd=0.004, dtype=dtype)
    biases = _variable_on_cpu('biases', [192], tf.constant_initializer(0.1),
                              dtype)
    local4 = tf.nn.relu(tf.matmul(local3, read(weights)) + read(biases),
                        name=scope.name)
    activation_summary(local4)

  # The softmax itself is left to the loss, which fuses it with the
  # cross-entropy for numerical stability.
  with tf.variable_scope('softmax_linear') as scope:
    weights = _variable_with_weight_decay('weights', [192, num_classes],
                                          stddev=1 / 192.0, wd=None,
                                          dtype=dtype)
    biases = _variable_on_cpu('biases', [num_classes],
                              tf.constant_initializer(0.0), dtype)
    # In mixed precision the cast back takes the original's op name, and so
    # its summary tag.
    softmax_linear = tf.add(tf.matmul(local4, read(weights)), read(biases),
                            name=None if mixed else scope.name)
    if mixed:
      softmax_linear = tf.cast(softmax_linear, dtype, name=scope.name)
    activation_summary(softmax_linear)

  return softmax_linear


def loss(logits, labels, scope=None):
  """Cross-entropy of `logits` against `labels`, plus all weight decay terms.

  Args:
    logits: 2-D tensor of [batch, num_classes] from `inference`.
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


def add_loss_summaries(total_loss, losses=None):
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
    # The original's ExponentialMovingAverage(0.9), starting at the first
    # loss instead of 0.
    updates.append(summaries.loss_average(l))
    with tf.device('/cpu:0'):  # See activation_summary.
      tf.summary.scalar(name + ' (raw)', l)
      # The average after this step's update: the first point is the first
      # loss.
      tf.summary.scalar(name, updates[-1])
  return tf.group(*updates)


def learning_rate(global_step, batch_size, num_towers=1,
                  num_examples_per_epoch=NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN):
  """The staircase exponential-decay learning rate, with its summary.

  Args:
    global_step: int64 scalar variable, counting optimizer updates.
    batch_size: int, images per batch per tower.
    num_towers: int, towers whose batches each update averages; one update
      then covers num_towers batches, so the decay comes that many updates
      sooner.
    num_examples_per_epoch: int, the training records of the data set.

  Returns:
    Scalar float32 tensor `learning_rate`.
  """
  num_batches_per_epoch = num_examples_per_epoch / batch_size
  # At least one step: a tiny data set would otherwise divide by zero.
  decay_steps = max(
      1, int(num_batches_per_epoch / num_towers * NUM_EPOCHS_PER_DECAY))
  lr = tf.train.exponential_decay(INITIAL_LEARNING_RATE, global_step,
                                  decay_steps, LEARNING_RATE_DECAY_FACTOR,
                                  staircase=True)
  tf.summary.scalar('learning_rate', lr)
  return lr


def add_weight_and_gradient_summaries(grads_and_vars):
  """Histograms of every trainable variable and of each non-None gradient."""
  for var in tf.trainable_variables():
    fast_ops.histogram_summary(var.op.name, var)
  for grad, var in grads_and_vars:
    if grad is not None:
      fast_ops.histogram_summary(var.op.name + '/gradients', grad)


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


def moving_averages_to_restore():
  """Checkpoint name -> variable of the default graph's model, each weight
  read from its moving average, which predicts better than the last raw
  weights: for a tf.train.Saver that evaluates or classifies."""
  variable_averages = tf.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY)
  return variable_averages.variables_to_restore()


def train(total_loss, global_step, batch_size=128, compute_dtype=None,
          num_examples_per_epoch=NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN):
  """Builds one training step: SGD on `total_loss`, then weight averages.

  Args:
    total_loss: scalar loss from `loss()`.
    global_step: int64 scalar variable counting training steps.
    batch_size: int, images per batch (sets the learning-rate schedule).
    compute_dtype: inference's; float16 scales the loss, lest small
      gradients become 0 (mixed_precision.optimizer).
    num_examples_per_epoch: int, the training records (sets the schedule).

  Returns:
    The op to run for each training step.
  """
  lr = learning_rate(global_step, batch_size,
                     num_examples_per_epoch=num_examples_per_epoch)
  loss_averages_op = add_loss_summaries(total_loss)

  opt = mixed_precision.optimizer(tf.train.GradientDescentOptimizer(lr),
                                  compute_dtype)
  with tf.control_dependencies([loss_averages_op]):
    grads = opt.compute_gradients(total_loss)
  apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)

  add_weight_and_gradient_summaries(grads)
  return apply_moving_averages(global_step, after=[apply_gradient_op])
