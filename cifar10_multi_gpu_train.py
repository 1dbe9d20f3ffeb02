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

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
from cifar10_support import download
from cifar10_support import mixed_precision
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import signals
from cifar10_support import summaries
from cifar10_support import towers
from cifar10_support import train_dirs

FLAGS = flags.FLAGS
# cifar10_train.py's flags, which --help lists too.
run_flags.define_train_flags()
flags.adopt_module_key_flags(cifar10)
flags.adopt_module_key_flags(run_flags)

flags.DEFINE_integer('num_gpus', 1, 'How many GPUs to use: one tower on each '
                     '(with --tower_device=cpu, on each of as many virtual CPU '
                     'devices).', lower_bound=1)
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
                     'towers.', lower_bound=0)

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


def average_gradients(tower_grads):
  """Averages each variable's gradient over the towers: the synchronisation.

  Args:
    tower_grads: one list per tower of (gradient, variable) pairs, as from
      `compute_gradients`, all for the same variables in the same order.

  Returns:
    List of (mean gradient, variable) pairs, in that order.
  """
  averaged = []
  for pairs in zip(*tower_grads):
    grads = [grad for grad, _ in pairs]
    mean = grads[0] if len(grads) == 1 else tf.add_n(grads) / len(grads)
    averaged.append((mean, pairs[0][1]))
  return averaged


def build_towers(opt, tower_batches, tower_device, compute_dtype=None,
                 num_classes=cifar10.NUM_CLASSES):
  """Builds one model replica per batch, each on its own device.

  Args:
    opt: the optimizer whose `compute_gradients` each tower calls (for
      float16 compute_dtype, mixed_precision.optimizer's, scaling the loss).
    tower_batches: one (images, labels) pair per tower: float images
      [batch, 24, 24, 3] and labels [batch].
    tower_device: 'gpu' or 'cpu'; tower i runs on /<tower_device>:i.
    compute_dtype: None, or cifar10.inference's mixed-precision dtype.
    num_classes: int, the data set's classes.

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
                         custom_getter=towers.read_in_one_scope):
    for i, (images, labels) in enumerate(tower_batches):
      with tf.device('/%s:%d' % (tower_device, i)), \
          tf.name_scope('%s_%d' % (cifar10.TOWER_NAME, i)) as scope:
        logits = cifar10.inference(images, compute_dtype, num_classes)
        tower_losses.append(cifar10.loss(logits, labels, scope=scope))
        tf.get_variable_scope().reuse_variables()
        tower_grads.append(opt.compute_gradients(tower_losses[-1]))
  return tower_grads, tower_losses, scope


def tower_input_batches(data_dir, num_towers, batch_size, use_fp16=False,
                        num_threads=cifar10_input.NUM_PREPROCESS_THREADS,
                        data_set=None):
  """One training input pipeline on /cpu:0 and a batch for each tower.

  Args:
    data_dir: folder holding `cifar-10-batches-bin/`.
    num_towers: int, towers to feed.
    batch_size: int, images in each tower's batch.
    use_fp16: bool, float16 images (and labels, as `cifar10.distorted_inputs`).
    num_threads: int, input preprocessing threads.
    data_set: the data_files.DataSet to read (None: CIFAR-10's in data_dir).

  Returns:
    A list of num_towers (images, labels) pairs: images [batch_size, 24, 24,
    3] float32 (float16 with use_fp16), labels [batch_size] int32 (float16),
    each pair a different batch.
  """
  images, labels = cifar10.distorted_inputs(
      data_dir, batch_size, use_fp16=use_fp16, num_threads=num_threads,
      data_set=data_set)
  # Two batches per tower: the next step's batches are ready while this
  # step's gradients are computed.
  queue = towers.prefetch_queue([images, labels], capacity=2 * num_towers)
  # In the queue's name scope (a name ending in '/' re-enters it): one node
  # in TensorBoard's graph rather than one per tower.
  with tf.device('/cpu:0'), tf.name_scope('prefetch_queue/'):
    return [tuple(queue.dequeue()) for _ in range(num_towers)]


def build_train_step(tower_batches, global_step, batch_size,
                     tower_device='gpu', compute_dtype=None, data_set=None):
  """Builds the towers and one synchronous update of the shared variables.

  Args:
    tower_batches: one (images, labels) pair per tower, as `build_towers`.
    global_step: the int64 global step variable.
    batch_size: int, images per tower batch (sets the learning-rate decay).
    tower_device: 'gpu' or 'cpu'; tower i runs on /<tower_device>:i.
    compute_dtype: None, or cifar10.inference's mixed-precision dtype
      (float16 adds a loss scale); the averaging is float32 either way.
    data_set: the data_files.DataSet trained on, whose classes and
      training records shape the model and its learning rate (None:
      CIFAR-10's).

  Returns:
    A `TrainStep`.
  """
  num_towers = len(tower_batches)
  num_classes, num_examples_per_epoch = cifar10.NUM_CLASSES, (
      cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN)
  if data_set:
    num_classes = data_set.num_classes
    num_examples_per_epoch = data_set.records(data_set.train_files)
  lr = cifar10.learning_rate(global_step, batch_size, num_towers,
                            num_examples_per_epoch)
  opt = mixed_precision.optimizer(tf.train.GradientDescentOptimizer(lr),
                                  compute_dtype)
  tower_grads, tower_losses, last_scope = build_towers(
      opt, tower_batches, tower_device, compute_dtype=compute_dtype,
      num_classes=num_classes)

  with tf.device('/cpu:0'):
    # Built once, outside the reused variable scope, for the last tower; in
    # its name scope so that the tags match single-device training's.
    with tf.name_scope(last_scope):
      loss_averages_op = cifar10.add_loss_summaries(
          tower_losses[-1], tf.get_collection('losses', last_scope))
    # Name scopes only group ops for TensorBoard's graph; variable names come
    # from variable scopes and summary tags are set before this.
    with tf.name_scope('average_gradients'):
      grads = average_gradients(tower_grads)
    apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)
    cifar10.add_weight_and_gradient_summaries(grads)
    with tf.name_scope('moving_averages'):
      train_op = cifar10.apply_moving_averages(
          global_step, after=[apply_gradient_op, loss_averages_op])
    with tf.name_scope('mean_total_loss'):
      loss = tf.reduce_mean(tf.stack(tower_losses), name='mean_total_loss')
    # The retagged copies carry their tags explicitly: in the last tower's
    # scope they draw as part of it.
    with tf.name_scope(last_scope):
      tower_summaries = summaries.global_and_last_tower(
          last_scope, cifar10.strip_tower_prefix)
  return TrainStep(train_op, loss, grads_and_vars=grads,
                   tower_grads=tower_grads, summaries=tower_summaries)


def train(settings, data_set, num_towers=1, tower_device='gpu', config=None):
  """Trains with `num_towers` towers up to global step settings.max_steps.

  Args:
    settings: a run_flags.TrainSettings; batch_size is per tower.
    data_set: as `cifar10_train.train`'s.
    num_towers: int, model replicas, one per device.
    tower_device: 'gpu' or 'cpu', see sessions.training_config.
    config: the session's tf.ConfigProto (towers.session_config's); None
      for one made here.

  Returns:
    A dict as `cifar10_train.train`'s; 'loss' is the towers' mean and
    'examples_per_sec' counts all towers.

  Raises:
    As `cifar10_train.train`.
  """
  if config is None:
    config = towers.session_config(
        num_towers, tower_device, settings.threads,
        log_device_placement=settings.log_device_placement)
  with train_dirs.claim(settings.train_dir, settings.fresh_start, data_set,
                        settings.seed) as start:
    if start.nothing_to_train(settings.max_steps):
      return {'global_step': start.step, 'loss': None,
              'examples_per_sec': None, 'signal': None}
    with tf.Graph().as_default():
      # With --seed, the initial weights and every batch are the seed's (None:
      # unseeded, as in the original).
      tf.set_random_seed(settings.seed)
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      if settings.seed is None:
        tower_batches = tower_input_batches(
            settings.data_dir, num_towers, settings.batch_size,
            use_fp16=settings.use_fp16, num_threads=settings.input_threads,
            data_set=data_set)
      else:
        # The seed's batch for all towers, split in tower order: what each
        # tower sees does not depend on which tower runs first.
        images, labels = cifar10.distorted_inputs(
            settings.data_dir, settings.batch_size * num_towers,
            use_fp16=settings.use_fp16, data_set=data_set, seed=settings.seed)
        with tf.device('/cpu:0'):
          tower_batches = list(zip(tf.split(images, num_towers),
                                   tf.split(labels, num_towers)))
      step = build_train_step(
          tower_batches, global_step, settings.batch_size,
          tower_device=tower_device, compute_dtype=settings.compute_dtype,
          data_set=data_set)

      # Its sessions restore the checkpoint found above, once it fits this
      # graph; its saver writes this run's checkpoints. The summaries are the
      # global ones and the last tower's.
      summary_op = tf.summary.merge(step.summaries)
      scaffold = start.scaffold(summary_op=summary_op)

      # examples/sec counts every tower; sec/batch is per tower batch, as in
      # the original.
      logger = progress.StepLogger(step.loss, settings.batch_size,
                                   settings.log_frequency, settings.train_dir,
                                   batches_per_step=num_towers)
      stop = signals.StopOnSignal()
      # In this order: a NaN loss (the logger) stops training before its
      # step's summaries and checkpoint are written; the signals are caught
      # until the last hook, the final checkpoint, has ended.
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               logger,
               summaries.SummaryHook(settings.train_dir,
                                     settings.save_summaries_steps,
                                     settings.max_steps, summary_op),
               train_dirs.CheckpointSaverHook(
                   settings.train_dir, scaffold, settings.max_steps,
                   save_steps=settings.save_checkpoint_steps,
                   save_secs=settings.save_checkpoint_secs),
               stop]
      # No checkpoint_dir: the session's own savers, which would write before
      # the hooks above run, are off. Creating it writes the first checkpoint.
      with tf.train.MonitoredTrainingSession(
          scaffold=scaffold, hooks=hooks, config=config) as mon_sess:
        while not mon_sess.should_stop():
          mon_sess.run(step.train_op)

  progress.report_end(settings.train_dir, logger.global_step, stop.signal)
  return {'global_step': logger.global_step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec,
          'signal': stop.signal}


# As cifar10_train.py's: one line and exit status 1 for these errors.
@signals.script_main(train_dirs.RUN_ERRORS)
def main(argv):
  del argv  # Flags only.
  # --tower_device=cpu keeps the towers on CPU devices even beside a GPU.
  settings = run_flags.from_flags(FLAGS, gpu=FLAGS.tower_device == 'gpu')
  if FLAGS.seed is not None and tf.config.list_physical_devices('GPU'):
    # A GPU's deterministic kernels, for this process (the CPU's already
    # are): docs/training.md#seed.
    tf.compat.v2.config.experimental.enable_op_determinism()
  config = towers.session_config(
      FLAGS.num_gpus, FLAGS.tower_device, settings.threads,
      split_gpus=FLAGS.split_gpus,
      split_gpu_memory_mb=FLAGS.split_gpu_memory_mb,
      log_device_placement=FLAGS.log_device_placement)
  data_set = download.prepare(FLAGS.data_dir, FLAGS.data_url, FLAGS.data_md5,
                              FLAGS.dataset)
  result = train(settings, data_set, FLAGS.num_gpus, FLAGS.tower_device,
                 config=config)
  signals.exit_if_stopped(result['signal'])


if __name__ == '__main__':
  app.run(main)
