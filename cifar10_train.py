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
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import mixed_precision
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import summaries
from cifar10_support import train_dirs

FLAGS = flags.FLAGS
# --help lists cifar10.py's and run_flags' flags too: this script reads them.
flags.adopt_module_key_flags(cifar10)
flags.adopt_module_key_flags(run_flags)

flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                    'Directory where to write event logs and checkpoint.')
# The defaults are run_flags.TRAIN_DEFAULTS, the Python API's too.
flags.DEFINE_integer('max_steps', run_flags.TRAIN_DEFAULTS.max_steps,
                     'Number of batches to run.',
                     lower_bound=1)
flags.DEFINE_boolean('log_device_placement',
                     run_flags.TRAIN_DEFAULTS.log_device_placement,
                     'Whether to log device placement.')
flags.DEFINE_integer('log_frequency', run_flags.TRAIN_DEFAULTS.log_frequency,
                     'How often to log results to the console.',
                     lower_bound=1)
flags.DEFINE_boolean('fresh_start', run_flags.TRAIN_DEFAULTS.fresh_start,
                     'Delete what is in --train_dir (checkpoints and '
                     'events) and train from step 0 instead of resuming.')
flags.DEFINE_integer('save_checkpoint_secs',
                     run_flags.TRAIN_DEFAULTS.save_checkpoint_secs,
                     'Seconds between checkpoints (one is also written at '
                     'the start and at the end).', lower_bound=1)
flags.DEFINE_integer('save_summaries_steps',
                     run_flags.TRAIN_DEFAULTS.save_summaries_steps,
                     'Global steps between TensorBoard summaries (one is also '
                     'written after the first step and at the last); 0 '
                     'writes none.', lower_bound=0)
flags.DEFINE_integer('save_checkpoint_steps',
                     run_flags.TRAIN_DEFAULTS.save_checkpoint_steps,
                     'If positive, write a checkpoint every this many steps '
                     'instead of every --save_checkpoint_secs.',
                     lower_bound=0)


def train(settings):
  """Trains up to global step settings.max_steps, resuming from train_dir.

  Args:
    settings: a run_flags.TrainSettings.

  Returns:
    A dict with 'global_step' (int, where training stopped), 'loss' (float,
    the last step's total loss, or None if no step ran), 'examples_per_sec'
    (float of the last logged window, or None) and 'signal' (the number of
    the SIGINT or SIGTERM that stopped training early, after a final
    checkpoint; None otherwise).

  Raises:
    train_dirs.RUN_ERRORS: cifar10_input.DataError (a data file is missing
      or malformed), train_dirs.DivergedError (the loss became NaN; that
      step is not saved), train_dirs.DiskFullError, a busy train_dir, or
      checkpoints.ResumeError (the newest checkpoint is of another model,
      or of other classes than the data's; train_dir is left as it was).
  """
  # The data set as its files describe it: classes, training records.
  data_set = data_files.describe(settings.data_dir, settings.dataset)
  # Lock train_dir and find where training starts: the newest checkpoint that
  # restores, of the data's classes, or step 0 (--fresh_start empties it
  # first).
  with train_dirs.claim(settings.train_dir, settings.fresh_start,
                        data_set) as start:
    if start.nothing_to_train(settings.max_steps):
      return {'global_step': start.step, 'loss': None,
              'examples_per_sec': None, 'signal': None}
    with tf.Graph().as_default(), signals.stop_requests() as stop_signals:
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()

      # Get images and labels for CIFAR-10.
      images, labels = cifar10.distorted_inputs(
          settings.data_dir, settings.batch_size, use_fp16=settings.use_fp16,
          num_threads=settings.input_threads, data_set=data_set)
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
          loss_scaling=mixed_precision.needs_loss_scale(settings.compute_dtype),
          num_examples_per_epoch=data_set.records(data_set.train_files))

      # The checkpoint found above, once it fits this graph, restored by the
      # session's scaffold (whose saver writes this run's checkpoints).
      plan = start.restore_plan()
      scaffold = checkpoints.restoring_scaffold(plan, settings.train_dir)

      logger = progress.StepLogger(loss, settings.batch_size,
                                   settings.log_frequency)
      # Summaries and checkpoints are written after the NaN check, so that
      # a diverged step is never saved.
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               tf.train.NanTensorHook(loss),
               logger,
               summaries.SummaryHook(settings.train_dir,
                                     settings.save_summaries_steps,
                                     settings.max_steps),
               tf.train.CheckpointSaverHook(
                   settings.train_dir, scaffold=scaffold,
                   save_steps=settings.save_checkpoint_steps or None,
                   save_secs=(None if settings.save_checkpoint_steps
                              else settings.save_checkpoint_secs),
                   listeners=[progress.SaveAnnouncer(settings.train_dir,
                                                     settings.max_steps)])]
      config = sessions.training_config(
          settings.threads, log_device_placement=settings.log_device_placement)
      try:
        # Creating the session writes the first checkpoint.
        with train_dirs.stop_on_full_disk(settings.train_dir), \
            tf.train.MonitoredTrainingSession(
                # Its own savers would run before every hook, the NaN check
                # included: off, the hooks above save instead.
                checkpoint_dir=None, save_checkpoint_secs=None,
                save_checkpoint_steps=None, save_summaries_steps=None,
                save_summaries_secs=None,
                # Its step counter writes global_step/sec with the summaries.
                summary_dir=settings.train_dir,
                log_step_count_steps=settings.save_summaries_steps or None,
                scaffold=scaffold, hooks=hooks, config=config) as mon_sess:
          while not mon_sess.should_stop() and not stop_signals:
            mon_sess.run(train_op)
      except tf.train.NanLossDuringTrainingError:
        # That step is not saved: name the checkpoint a new run resumes from.
        raise train_dirs.diverged_error(logger.global_step,
                                        settings.train_dir) from None

  progress.report_end(settings.train_dir, logger.global_step, stop_signals)
  return {'global_step': logger.global_step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec,
          'signal': stop_signals[0] if stop_signals else None}


# Output closed before training (`| head`): exit status 141 at once, quietly;
# during training the step lines stop it, as SIGTERM does (signals.print_line).
@signals.ends_quietly_when_output_closes
def main(argv):
  run_flags.check_no_arguments(argv)
  console.quiet_python_logs()
  run_flags.check_flag_writable_dir('train_dir', FLAGS.train_dir)
  # The model runs on a GPU when one is visible (TensorFlow's placement).
  compute_dtype = mixed_precision.compute_dtype_for_this_machine(
      FLAGS.mixed_precision, sessions.has_gpu(), FLAGS.use_fp16)
  settings = run_flags.from_flags(FLAGS, compute_dtype)
  # A bad data file, a NaN loss, a full disk: one line, exit status 1.
  with train_dirs.run_errors_end_the_process():
    download.prepare(FLAGS.data_dir, FLAGS.data_url, FLAGS.data_md5,
                     FLAGS.dataset)
    result = train(settings)
  # Stopped by Ctrl-C, SIGTERM or a closed output: the final checkpoint is
  # written.
  signals.exit_if_stopped(result['signal'])


if __name__ == '__main__':
  app.run(main)
