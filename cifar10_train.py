"""Trains the CIFAR-10 model on one device, resuming from its last checkpoint.

    python cifar10_train.py --data_dir=/tmp/cifar10_data --max_steps=2000

Every --log_frequency steps it prints

    <date time>: step <global step>, loss = <loss> (<examples/sec>; <sec/batch>)

and it writes checkpoints and TensorBoard summaries to --train_dir. Unlike
the original tutorial, a second run resumes from the newest checkpoint in
--train_dir instead of deleting it; --fresh_start deletes it on purpose.

The original's figures (theirs, not measured here): about 86 percent
precision @ 1 after 100K steps, 0.25-0.35 sec/batch on a Tesla K40m. Ours
are in README.md.
"""

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
from cifar10_support import download
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import summaries
from cifar10_support import train_dirs

FLAGS = flags.FLAGS
# --train_dir, --max_steps, --log_frequency, --log_device_placement (the
# original's), --fresh_start and when to save; cifar10.py defines
# --batch_size, --data_dir and --use_fp16, run_flags --dataset and the rest.
# --help lists them all: this script reads them.
run_flags.define_train_flags()
flags.adopt_module_key_flags(cifar10)
flags.adopt_module_key_flags(run_flags)


def train(settings, data_set):
  """Trains up to global step settings.max_steps, resuming from train_dir.

  Args:
    settings: a run_flags.TrainSettings.
    data_set: the data_files.DataSet of settings.data_dir, whose training
      files it reads (download.prepare's).

  Returns:
    A dict with 'global_step' (int, where training stopped), 'loss' (float,
    the last step's total loss, or None if no step ran), 'examples_per_sec'
    (float of the last logged window, or None) and 'signal' (the number of
    the SIGINT or SIGTERM that stopped training early, after a final
    checkpoint; None otherwise).

  Raises:
    train_dirs.RUN_ERRORS: data_files.DataError (a data file is missing
      or malformed), progress.DivergedError (the loss became NaN; that step
      is not saved), train_dirs.DiskFullError, a busy train_dir, or
      checkpoints.ResumeError (the newest checkpoint is of another model,
      or of other classes than the data's; train_dir is left as it was).
  """
  # Lock train_dir and find where training starts: the newest checkpoint that
  # restores, of the data's classes, or step 0 (--fresh_start empties it
  # first).
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

      # Get images and labels for CIFAR-10.
      images, labels = cifar10.distorted_inputs(
          settings.data_dir, settings.batch_size, use_fp16=settings.use_fp16,
          num_threads=settings.input_threads, data_set=data_set,
          seed=settings.seed)
      # Build a Graph that computes the logits predictions from the
      # inference model.
      logits = cifar10.inference(images, settings.compute_dtype,
                                 num_classes=data_set.num_classes)
      # Calculate loss.
      loss = cifar10.loss(logits, labels)
      # Build a Graph that trains the model with one batch of examples and
      # updates the model parameters.
      train_op = cifar10.train(
          loss, global_step, settings.batch_size,
          compute_dtype=settings.compute_dtype,
          num_examples_per_epoch=data_set.records(data_set.train_files))

      # Its sessions restore the checkpoint found above, once it fits this
      # graph; its saver writes this run's checkpoints.
      scaffold = start.scaffold()

      logger = progress.StepLogger(loss, settings.batch_size,
                                   settings.log_frequency, settings.train_dir)
      stop = signals.StopOnSignal()
      # In this order: a NaN loss (the logger) stops training before its
      # step's summaries and checkpoint are written; the signals are caught
      # until the last hook, the final checkpoint, has ended.
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               logger,
               summaries.SummaryHook(settings.train_dir,
                                     settings.save_summaries_steps,
                                     settings.max_steps),
               train_dirs.CheckpointSaverHook(
                   settings.train_dir, scaffold, settings.max_steps,
                   save_steps=settings.save_checkpoint_steps,
                   save_secs=settings.save_checkpoint_secs),
               stop]
      config = sessions.training_config(
          settings.threads, log_device_placement=settings.log_device_placement)
      # No checkpoint_dir: the session's own savers, which would write before
      # the hooks above run, are off. Creating it writes the first checkpoint.
      with tf.train.MonitoredTrainingSession(
          scaffold=scaffold, hooks=hooks, config=config) as mon_sess:
        while not mon_sess.should_stop():
          mon_sess.run(train_op)

  progress.report_end(settings.train_dir, logger.global_step, stop.signal)
  return {'global_step': logger.global_step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec,
          'signal': stop.signal}


# A bad data file, a NaN loss, a full disk, a busy or foreign train_dir: one
# line, exit status 1. A closed output (`| head`) stops training as SIGTERM
# does (signals.print_line), before training ends the process at once.
@signals.script_main(train_dirs.RUN_ERRORS)
def main(argv):
  del argv  # Flags only.
  settings = run_flags.from_flags(FLAGS)
  if FLAGS.seed is not None and tf.config.list_physical_devices('GPU'):
    # A GPU's deterministic kernels, for this process (the CPU's already
    # are): docs/training.md#seed.
    tf.compat.v2.config.experimental.enable_op_determinism()
  data_set = download.prepare(FLAGS.data_dir, FLAGS.data_url, FLAGS.data_md5,
                              FLAGS.dataset)
  result = train(settings, data_set)
  # Stopped by Ctrl-C, SIGTERM or a closed output: the final checkpoint is
  # written.
  signals.exit_if_stopped(result['signal'])


if __name__ == '__main__':
  app.run(main)
