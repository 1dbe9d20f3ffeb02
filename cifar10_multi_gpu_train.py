"""Trains the CIFAR-10 model on several devices at once, one tower per device.

    python cifar10_multi_gpu_train.py --num_gpus=4
    python cifar10_multi_gpu_train.py --num_gpus=4 --split_gpus   # one GPU
    python cifar10_multi_gpu_train.py --num_gpus=2 --tower_device=cpu

Each tower is a replica of the model on its own device (/gpu:i, or with
--tower_device=cpu /cpu:i of --num_gpus virtual CPU devices, for machines
without GPUs; with --split_gpus, /gpu:i of --num_gpus virtual GPUs made from
the GPUs there are, e.g. four on one card). One input pipeline on /cpu:0
feeds a small prefetch queue; every tower takes its own batch of --batch_size
images from it and computes gradients; the gradients are averaged on the CPU
and applied once to the variables, which live once on /cpu:0. A step
therefore trains on batch_size * num_gpus images, and the learning rate
decays after 1/num_gpus as many steps as with one device.

The other flags (--train_dir, --max_steps, --log_frequency, --fresh_start,
...) are cifar10_train.py's and work as there: training resumes from the
newest checkpoint in --train_dir, whose checkpoints cifar10_eval.py reads.
Every --log_frequency steps it prints

    <date time>: step <global step>, loss = <loss> (<examples/sec>; <sec/batch>)

where loss is the towers' mean total loss (the loss of the whole step's
images), examples/sec counts all towers and sec/batch is the step time over
the towers, as in the original. TensorBoard summaries are the global ones plus
the last tower's, with the same tags as single-device training.
"""

import collections
import re

from cifar10_support import startup
startup.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
import cifar10_train  # its flags, and the training session it runs
from cifar10_support import console
from cifar10_support import gpus
from cifar10_support import precision
from cifar10_support import run_flags
from cifar10_support import sessions

FLAGS = flags.FLAGS

flags.DEFINE_integer('num_gpus', 1, 'How many GPUs to use: one tower on each '
                     '(with --tower_device=cpu, on each of as many virtual CPU '
                     'devices).')
flags.DEFINE_enum('tower_device', 'gpu', ['gpu', 'cpu'],
                  'Where the towers run: gpu puts tower i on /gpu:i, with soft '
                  'placement as in the original; cpu puts it on /cpu:i of '
                  '--num_gpus virtual CPU devices, without soft placement, so '
                  'that towers run (and can be tested) on a machine without '
                  'GPUs.')

flags.DEFINE_boolean('split_gpus', False,
                     'Split the visible GPU(s) into --num_gpus virtual GPUs, '
                     'so that every tower runs on a GPU (e.g. --num_gpus=4 '
                     'on one GPU); towers are spread evenly over the GPUs.')
flags.DEFINE_integer('split_gpu_memory_mb', 0,
                     'With --split_gpus, the memory of each virtual GPU in MB; '
                     '0 shares 90 percent of each card evenly among its '
                     'towers.')

_TOWER_SCOPE = re.compile('^%s_[0-9]+/' % cifar10.TOWER_NAME)

TrainStep = collections.namedtuple(
    'TrainStep', ['train_op', 'loss', 'grads_and_vars', 'tower_grads',
                  'summaries'])
TrainStep.__doc__ = """What `build_train_step` returns.

  train_op: the op to run for each step.
  loss: scalar float tensor, the towers' mean total loss.
  grads_and_vars: list of (averaged gradient, variable), as applied.
  tower_grads: one list of (gradient, variable) per tower.
  summaries: the summary tensors to write (merge them for the summary op).
"""


def prefetch_queue(tensors, capacity):
  """A FIFO queue of whole batches, kept full by one thread on /cpu:0.

  Every tower dequeues its own batch, so one input pipeline serves them all;
  one pipeline per tower filled its shuffling queue once per tower and made
  several GPUs slower than one (tensorflow#4272).

  Args:
    tensors: list of batch tensors with fully defined shapes, e.g. images
      [batch, 24, 24, 3] and labels [batch].
    capacity: int, batches the queue holds.

  Returns:
    The tf.FIFOQueue; `dequeue()` gives tensors like `tensors`.
  """
  with tf.device('/cpu:0'), tf.name_scope('prefetch_queue'):
    queue = tf.FIFOQueue(capacity, dtypes=[t.dtype for t in tensors],
                         shapes=[t.shape for t in tensors])
    tf.train.add_queue_runner(
        tf.train.QueueRunner(queue, [queue.enqueue(tensors)]))
    tf.summary.scalar('fraction_of_%d_full' % capacity,
                      tf.cast(queue.size(), tf.float32) / capacity)
  return queue


def average_gradients(tower_grads):
  """Averages each variable's gradient over the towers: the synchronisation.

  Args:
    tower_grads: one list per tower of (gradient, variable) pairs, as from
      `compute_gradients`, all for the same variables in the same order.

  Returns:
    List of (mean gradient, variable) pairs, in that order.

  Raises:
    ValueError: naming the tower and variable, if a tower's variables differ
      from tower 0's or a gradient is None.
  """
  if not tower_grads:
    raise ValueError('average_gradients needs at least one tower')
  names = [var.op.name for _, var in tower_grads[0]]
  for i, grads_and_vars in enumerate(tower_grads):
    tower_names = [var.op.name for _, var in grads_and_vars]
    if tower_names != names:
      missing = sorted(set(names) - set(tower_names))
      extra = sorted(set(tower_names) - set(names))
      raise ValueError(
          'Tower %d has gradients for other variables than tower 0: missing '
          '%s, extra %s%s' % (i, missing, extra,
                              '' if missing or extra else ' (order differs)'))
    for grad, var in grads_and_vars:
      if grad is None:
        raise ValueError('Tower %d has no gradient for variable %s: its loss '
                         'does not depend on it' % (i, var.op.name))
  averaged = []
  for pairs in zip(*tower_grads):
    grads = [grad for grad, _ in pairs]
    mean = grads[0] if len(grads) == 1 else tf.add_n(grads) / len(grads)
    averaged.append((mean, pairs[0][1]))
  return averaged


def _read_in_one_scope(getter, *args, **kwargs):
  """A variable getter: the variable's value, read in scope variable_reads/.

  Each tower still reads each variable once, as before, but the read ops
  sit in one name scope instead of the tower's: in TensorBoard's graph a
  tower then has 2 inputs (variable_reads, prefetch_queue) rather than 6 (one
  per layer's variable scope plus its batch), which its graph plugin took for
  a high-degree node and moved the towers to "Auxiliary Nodes".
  """
  var = getter(*args, **kwargs)
  with tf.name_scope('variable_reads/'):
    return var.value()


def build_towers(opt, tower_batches, tower_device, compute_dtype=None,
                 loss_scale=None):
  """Builds one model replica per batch, each on its own device.

  Args:
    opt: the optimizer whose `compute_gradients` each tower calls.
    tower_batches: one (images, labels) pair per tower: float images
      [batch, 24, 24, 3] and labels [batch].
    tower_device: 'gpu' or 'cpu'; tower i runs on /<tower_device>:i.
    compute_dtype: None, or cifar10.inference's mixed-precision dtype.
    loss_scale: a precision.LossScale for float16, or None; the
      towers' gradients are then of the scaled loss.

  Returns:
    tower_grads: one list of (gradient, variable) per tower.
    tower_losses: one scalar total loss per tower, of its own terms only.
    scope: the last tower's name scope, e.g. 'tower_1/'.
  """
  tower_grads, tower_losses = [], []
  # The reuse switched on below ends with this block, so the variables made
  # afterwards (moving averages, optimizer) are created rather than looked up:
  # the original's "Variable tower_1/... does not exist" crash.
  with tf.variable_scope(tf.get_variable_scope(),
                         custom_getter=_read_in_one_scope):
    for i, (images, labels) in enumerate(tower_batches):
      with tf.device('/%s:%d' % (tower_device, i)), \
          tf.name_scope('%s_%d' % (cifar10.TOWER_NAME, i)) as scope:
        logits = cifar10.inference(images, compute_dtype)
        tower_losses.append(cifar10.loss(logits, labels, scope=scope))
        tf.get_variable_scope().reuse_variables()
        tower_grads.append(precision.compute_gradients(
            opt, tower_losses[-1], loss_scale))
  return tower_grads, tower_losses, scope


def _retag(summary, tag):
  """A copy of a scalar or histogram summary that writes under `tag`."""
  values = summary.op.inputs[1]
  if summary.op.type == 'ScalarSummary':
    return tf.raw_ops.ScalarSummary(tags=tag, values=values)
  if summary.op.type == 'TensorSummaryV2':  # fast_ops.histogram_summary
    return tf.raw_ops.TensorSummaryV2(
        tag=tag, tensor=values,
        serialized_summary_metadata=summary.op.inputs[2])
  raise ValueError('Cannot retag summary %s of type %s'
                   % (summary.op.name, summary.op.type))


def _summaries_to_write(last_scope):
  """The global summaries plus the last tower's, tagged as on one device.

  A summary's tag is its op's name scope, so the last tower's come out as
  'tower_1/conv1/...'; copies without that prefix let TensorBoard overlay
  single- and multi-tower runs.
  """
  summaries = []
  for summary in tf.get_collection(tf.GraphKeys.SUMMARIES):
    if summary.op.name.startswith(last_scope):
      tag = tf.compat.as_str(tf.get_static_value(summary.op.inputs[0]).item())
      summaries.append(_retag(summary, cifar10.strip_tower_prefix(tag)))
    elif not _TOWER_SCOPE.match(summary.op.name):
      summaries.append(summary)
  return summaries


def tower_input_batches(data_dir, num_towers, batch_size, use_fp16=False,
                        num_threads=cifar10_input.NUM_PREPROCESS_THREADS):
  """One training input pipeline on /cpu:0 and a batch for each tower.

  Args:
    data_dir: folder holding `cifar-10-batches-bin/`.
    num_towers: int, towers to feed.
    batch_size: int, images in each tower's batch.
    use_fp16: bool, float16 images (and labels, as `cifar10.distorted_inputs`).
    num_threads: int, input preprocessing threads.

  Returns:
    A list of num_towers (images, labels) pairs: images [batch_size, 24, 24,
    3] float32 (float16 with use_fp16), labels [batch_size] int32 (float16),
    each pair a different batch.
  """
  images, labels = cifar10.distorted_inputs(
      data_dir, batch_size, use_fp16=use_fp16, num_threads=num_threads)
  # Two batches per tower: the next step's batches are ready while this
  # step's gradients are computed.
  queue = prefetch_queue([images, labels], capacity=2 * num_towers)
  # In the queue's name scope (a name ending in '/' re-enters it): one node
  # in TensorBoard's graph rather than one per tower.
  with tf.device('/cpu:0'), tf.name_scope('prefetch_queue/'):
    return [tuple(queue.dequeue()) for _ in range(num_towers)]


def build_train_step(tower_batches, global_step, batch_size,
                     tower_device='gpu', compute_dtype=None):
  """Builds the towers and one synchronous update of the shared variables.

  Args:
    tower_batches: one (images, labels) pair per tower, as `build_towers`.
    global_step: the int64 global step variable.
    batch_size: int, images per tower batch (sets the learning-rate decay).
    tower_device: 'gpu' or 'cpu'; tower i runs on /<tower_device>:i.
    compute_dtype: None, or cifar10.inference's mixed-precision dtype
      (float16 adds a loss scale); the averaging is float32 either way.

  Returns:
    A `TrainStep`.
  """
  num_towers = len(tower_batches)
  lr = cifar10.learning_rate(global_step, batch_size, num_towers)
  opt = tf.train.GradientDescentOptimizer(lr)
  loss_scale = (precision.dynamic_loss_scale()
                if precision.needs_loss_scale(compute_dtype) else None)
  tower_grads, tower_losses, last_scope = build_towers(
      opt, tower_batches, tower_device, compute_dtype, loss_scale)

  with tf.device('/cpu:0'):
    # Built once, outside the reused variable scope, for the last tower; in
    # its name scope so that the tags match single-device training's.
    with tf.name_scope(last_scope):
      loss_averages_op = cifar10.add_loss_summaries(
          tower_losses[-1], tf.get_collection('losses', last_scope))
    # Name scopes only group ops for TensorBoard's graph (the top level held
    # 20 AddN/truediv, 10 cond and 11 VarIsInitializedOp nodes); variable
    # names come from variable scopes and summary tags are set before this.
    with tf.name_scope('average_gradients'):
      grads = average_gradients(tower_grads)
    apply_gradient_op, grads = precision.apply_gradients(
        opt, grads, global_step, loss_scale)
    cifar10.add_weight_and_gradient_summaries(grads)
    with tf.name_scope('moving_averages'):
      train_op = cifar10.apply_moving_averages(
          global_step, after=[apply_gradient_op, loss_averages_op])
    with tf.name_scope('mean_total_loss'):
      loss = tf.reduce_mean(tf.stack(tower_losses), name='mean_total_loss')
    # The retagged copies carry their tags explicitly: in the last tower's
    # scope they draw as part of it.
    with tf.name_scope(last_scope):
      summaries = _summaries_to_write(last_scope)
  return TrainStep(train_op, loss, grads, tower_grads, summaries)


def fallback_line(num_towers, visible):
  """What GPU towers without a GPU of their own do, and how to change it."""
  if visible:
    remedy = ('--split_gpus splits the GPU(s) into %d virtual GPUs, one per '
              'tower.' % num_towers)
  else:
    remedy = '--tower_device=cpu gives each tower its own CPU device.'
  return ('%d GPU towers asked for (--num_gpus) but %d GPU(s) visible: towers '
          'without a GPU run on the CPU (soft placement), as in the original; '
          '%s' % (num_towers, visible, remedy))


def train(data_dir, train_dir, num_towers=1, tower_device='gpu',
          max_steps=100000, batch_size=128, use_fp16=False, log_frequency=10,
          log_device_placement=False, fresh_start=False,
          save_checkpoint_secs=600, save_summaries_steps=100,
          num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
          save_checkpoint_steps=None, config=None, threads=(None, None),
          compute_dtype=None):
  """Trains with `num_towers` towers up to global step `max_steps`.

  Args:
    num_towers: int, model replicas, one per device.
    tower_device: 'gpu' or 'cpu', see sessions.training_config.
    batch_size: int, images per tower per step.
    config: the session's tf.ConfigProto, e.g. gpus.split_config's
      (its thread counts are set from `threads`); None for
      sessions.training_config's.
    threads: (intra-op, inter-op) thread counts, see
      sessions.training_config.
    others: as for `cifar10_train.train`.

  Returns:
    A dict as `cifar10_train.train`'s; 'loss' is the towers' mean and
    'examples_per_sec' counts all towers.

  Raises:
    As `cifar10_train.train`.
  """
  if tower_device == 'gpu' and config is None:
    visible = len(tf.config.list_physical_devices('GPU'))
    if visible < num_towers:
      print(fallback_line(num_towers, visible))

  def build(global_step):
    tower_batches = tower_input_batches(data_dir, num_towers, batch_size,
                                        use_fp16, num_threads)
    step = build_train_step(tower_batches, global_step, batch_size,
                            tower_device, compute_dtype)
    return step.train_op, step.loss, tf.summary.merge(step.summaries)

  return cifar10_train.run_training(
      build, train_dir, max_steps, batch_size, log_frequency, fresh_start,
      (sessions.set_threads(config, threads, num_towers) if config else
       sessions.training_config(threads, num_towers, tower_device,
                                log_device_placement)),
      save_checkpoint_secs, save_summaries_steps, num_towers,
      save_checkpoint_steps=save_checkpoint_steps)


def main(argv):
  run_flags.check_no_arguments(argv)
  console.quiet_python_logs()
  run_flags.check_flag_range('num_gpus', FLAGS.num_gpus, minimum=1)
  run_flags.check_flag_range('split_gpu_memory_mb', FLAGS.split_gpu_memory_mb,
                             minimum=0)
  config = None
  if FLAGS.split_gpus:
    config = gpus.split_gpus_config(FLAGS.num_gpus, FLAGS.tower_device,
                                    FLAGS.split_gpu_memory_mb,
                                    FLAGS.log_device_placement)
  cifar10_train.check_flags(FLAGS)
  # --tower_device=cpu keeps the towers on CPU devices even beside a GPU.
  on_gpu = FLAGS.tower_device == 'gpu' and sessions.has_gpu()
  compute_dtype = precision.compute_dtype_here(
      FLAGS.mixed_precision, on_gpu, FLAGS.use_fp16)
  cifar10_train.run_or_exit(train, FLAGS, num_towers=FLAGS.num_gpus,
                            tower_device=FLAGS.tower_device, config=config,
                            compute_dtype=compute_dtype)


if __name__ == '__main__':
  app.run(main)
