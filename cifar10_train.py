"""Trains the CIFAR-10 model on one device, resuming from its last checkpoint.

    python cifar10_train.py --data_dir=/tmp/cifar10_data --max_steps=2000

Every --log_frequency steps it prints

    <date time>: step <global step>, loss = <loss> (<examples/sec>; <sec/batch>)

and it writes checkpoints and TensorBoard summaries to --train_dir. Unlike
the original tutorial, a second run resumes from the newest checkpoint in
--train_dir instead of deleting it; --fresh_start deletes it on purpose.

The original's figures (theirs, not measured here): ~86% precision @ 1 after
100K steps, 0.25-0.35 sec/batch on a Tesla K40m. Ours are in README.md.
"""

from datetime import datetime
import os
import time

from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input

FLAGS = flags.FLAGS

flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                    'Directory where to write event logs and checkpoint.')
flags.DEFINE_integer('max_steps', 100000, 'Number of batches to run.')
flags.DEFINE_boolean('log_device_placement', False,
                     'Whether to log device placement.')
flags.DEFINE_integer('log_frequency', 10,
                     'How often to log results to the console.')
flags.DEFINE_boolean('fresh_start', False,
                     'Delete --train_dir (checkpoints and events) and train '
                     'from step 0 instead of resuming.')

LOG_FORMAT = '%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)'


class _LoggerHook(tf.train.SessionRunHook):
  """Prints the loss and the speed every `log_frequency` global steps."""

  def __init__(self, loss, global_step, batch_size, log_frequency):
    self._loss = loss
    self._global_step = global_step
    self._batch_size = batch_size
    self._log_frequency = log_frequency
    self.last_loss = None
    self.last_examples_per_sec = None

  def begin(self):
    # The first window also counts session start-up and the queue filling,
    # as in the original.
    self._window_start = time.time()
    self._window_steps = 0

  def after_create_session(self, session, coord):
    self.step = session.run(self._global_step)

  def before_run(self, run_context):
    return tf.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    # The step just run; global_step already counts it.
    step = self.step
    self.step += 1
    self._window_steps += 1
    self.last_loss = run_values.results
    if step % self._log_frequency:
      return
    duration = time.time() - self._window_start
    self.last_examples_per_sec = self._window_steps * self._batch_size / duration
    print(LOG_FORMAT % (datetime.now(), step, self.last_loss,
                        self.last_examples_per_sec,
                        duration / self._window_steps), flush=True)
    self._window_start = time.time()
    self._window_steps = 0


def _prepare_train_dir(train_dir, fresh_start):
  """Deletes train_dir if asked to, and says where training starts from.

  Returns:
    The global step of the newest checkpoint in train_dir, or 0.
  """
  if fresh_start and tf.io.gfile.exists(train_dir):
    print('--fresh_start: deleting %s' % train_dir)
    tf.io.gfile.rmtree(train_dir)
  tf.io.gfile.makedirs(train_dir)
  checkpoint = tf.train.latest_checkpoint(train_dir)
  if checkpoint is None:
    print('No checkpoint in %s: training from step 0.' % train_dir)
    return 0
  step = int(checkpoint.rsplit('-', 1)[-1])
  print('Resuming from checkpoint %s at step %d (--fresh_start trains from '
        'scratch).' % (checkpoint, step))
  return step


def train(data_dir, train_dir, max_steps=100000, batch_size=128,
          use_fp16=False, log_frequency=10, log_device_placement=False,
          fresh_start=False, save_checkpoint_secs=600,
          save_summaries_steps=100,
          num_threads=cifar10_input.NUM_PREPROCESS_THREADS):
  """Trains up to global step `max_steps`, resuming from `train_dir`.

  Args:
    data_dir: folder holding `cifar-10-batches-bin/`.
    train_dir: where checkpoints and summaries go (and are resumed from).
    max_steps: int, global step at which training stops.
    batch_size: int, images per step.
    use_fp16: bool, float16 variables and activations.
    log_frequency: int, steps between console lines.
    log_device_placement: bool, log where each op runs.
    fresh_start: bool, delete train_dir first instead of resuming.
    save_checkpoint_secs: int, seconds between checkpoints.
    save_summaries_steps: int, steps between summary writes.
    num_threads: int, input preprocessing threads.

  Returns:
    A dict with 'global_step' (int, where training stopped), 'loss' (float,
    the last step's total loss, or None if no step ran) and
    'examples_per_sec' (float of the last logged window, or None).
  """
  start_step = _prepare_train_dir(train_dir, fresh_start)
  if start_step >= max_steps:
    print('Checkpoint step %d is already at --max_steps=%d: nothing to train.'
          % (start_step, max_steps))
    return {'global_step': start_step, 'loss': None, 'examples_per_sec': None}

  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    images, labels = cifar10.distorted_inputs(
        data_dir, batch_size, use_fp16=use_fp16, num_threads=num_threads)
    logits = cifar10.inference(images)
    loss = cifar10.loss(logits, labels)
    train_op = cifar10.train(loss, global_step, batch_size)

    logger = _LoggerHook(loss, global_step, batch_size, log_frequency)
    hooks = [tf.train.StopAtStepHook(last_step=max_steps),
             tf.train.NanTensorHook(loss),
             logger]
    config = tf.ConfigProto(log_device_placement=log_device_placement)
    with tf.train.MonitoredTrainingSession(
        checkpoint_dir=train_dir, hooks=hooks, config=config,
        save_checkpoint_secs=save_checkpoint_secs,
        save_summaries_steps=save_summaries_steps) as mon_sess:
      while not mon_sess.should_stop():
        mon_sess.run(train_op)
  return {'global_step': logger.step, 'loss': logger.last_loss,
          'examples_per_sec': logger.last_examples_per_sec}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError('Unexpected arguments: %s' % ' '.join(argv[1:]))
  cifar10.configure_logging()
  for name in ('max_steps', 'batch_size', 'log_frequency'):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError('--%s must be at least 1, got %d'
                           % (name, getattr(FLAGS, name)))
  cifar10.maybe_download_and_extract(FLAGS.data_dir)
  train(data_dir=FLAGS.data_dir, train_dir=FLAGS.train_dir,
        max_steps=FLAGS.max_steps, batch_size=FLAGS.batch_size,
        use_fp16=FLAGS.use_fp16, log_frequency=FLAGS.log_frequency,
        log_device_placement=FLAGS.log_device_placement,
        fresh_start=FLAGS.fresh_start)


if __name__ == '__main__':
  app.run(main)
