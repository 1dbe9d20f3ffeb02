"""A run's step and checkpoint lines, a worker's begun by its label."""

from datetime import datetime
import math
import os
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import signals


class DivergedError(RuntimeError):
  """The loss became NaN; the message names the last good checkpoint."""


def diverged_error(step, train_dir=None):
  """The DivergedError for a NaN loss; train_dir None for a non-chief."""
  if train_dir is None:
    return DivergedError('Model diverged with loss = NaN at global step %d; '
                         'the chief keeps the last good checkpoint.' % step)
  checkpoint = checkpoints.resumed_from(train_dir)
  kept = ('no checkpoint had been written yet' if checkpoint is None else
          'the last good checkpoint, %s, is left intact and a new run '
          'resumes from it' % checkpoint)
  return DivergedError(
      'Model diverged with loss = NaN at step %d: training stopped without '
      'saving that step; %s. Lower the learning rate or check the data.'
      % (step, kept))


class StepLogger(tf.train.SessionRunHook):
  """Prints a step line every `log_frequency` steps (a run: batches_per_step
  batches of batch_size); a NaN loss raises diverged_error before the later
  hooks save that step. step: a worker's int64 tensor, fetched each run
  (None: this process makes every step). Attributes: last_step, global_step
  (after it), last_loss, last_examples_per_sec, own_steps."""

  def __init__(self, loss, batch_size, log_frequency, train_dir=None,
               step=None, batches_per_step=1, label=''):
    self._loss = loss
    self._train_dir = train_dir
    self._batch_size = batch_size
    self._batches_per_step = batches_per_step
    self._log_frequency = log_frequency
    self._step_tensor = step
    self._prefix = label + ': ' if label else ''
    self.last_step = self.global_step = None
    self.last_loss = self.last_examples_per_sec = None
    self.own_steps = 0

  def begin(self):
    self._window_start, self._window_steps = time.time(), 0

  def after_create_session(self, session, coord):
    if self._step_tensor is None:
      step = tf.train.get_global_step(session.graph)
      self.global_step = int(session.run(step))

  def before_run(self, run_context):
    step = [] if self._step_tensor is None else self._step_tensor
    return tf.train.SessionRunArgs([self._loss, step])

  def after_run(self, run_context, run_values):
    self.last_loss, fetched = run_values.results
    if self._step_tensor is None:
      step = self.last_step = self.global_step
      self.global_step += 1
      due = step % self._log_frequency == 0
    else:
      step = self.last_step = int(fetched)
      due = self.own_steps % self._log_frequency == 0
    if math.isnan(self.last_loss):
      raise diverged_error(step, self._train_dir)
    self.own_steps += 1
    self._window_steps += 1
    if not due:
      return
    duration = time.time() - self._window_start
    batches = self._window_steps * self._batches_per_step
    self.last_examples_per_sec = batches * self._batch_size / duration
    signals.print_line(
        '%s%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)' % (
            self._prefix, datetime.now(), step, self.last_loss,
            self.last_examples_per_sec, duration / batches))
    self._window_start, self._window_steps = time.time(), 0

  def end(self, session):
    if self._step_tensor is not None:
      self.global_step = int(session.run(self._step_tensor))


def steps_and_time_left(step, max_steps, steps_per_sec=None):
  """'step 12,000 of 100,000; about 1 h 5 min left' at steps_per_sec (if any,
  and before the end), to the nearest minute, halves up."""
  text = 'step {:,} of {:,}'.format(step, max_steps)
  if not steps_per_sec or step >= max_steps:
    return text
  hours, minutes = divmod(int((max_steps - step) / steps_per_sec / 60 + 0.5),
                          60)
  parts = ((['%d h' % hours] if hours else []) +
           (['%d min' % minutes] if minutes else []))
  left = 'about ' + ' '.join(parts) if parts else 'less than a minute'
  return '%s; %s left' % (text, left)


class SaveAnnouncer(tf.train.CheckpointSaverListener):
  """Prints a line after each save, with the time left at the last speed."""

  def __init__(self, train_dir, max_steps, label=''):
    self._prefix = os.path.join(train_dir, 'model.ckpt')
    self._max_steps = max_steps
    self._label = label + ': ' if label else ''
    self._last = None  # (global step, time) at the last checkpoint.

  def after_save(self, session, global_step_value):
    now, speed = time.time(), None
    if self._last and global_step_value > self._last[0] and now > self._last[1]:
      speed = (global_step_value - self._last[0]) / (now - self._last[1])
    self._last = (global_step_value, now)
    signals.print_line('%s%s: saved checkpoint %s-%d; %s' % (
        self._label, datetime.now(), self._prefix, global_step_value,
        steps_and_time_left(global_step_value, self._max_steps, speed)))


def report_end(train_dir, step, signum=None):
  """Prints how a run ended (signal `signum`, if any) and its checkpoint."""
  how = ('Received %s: stopped at step %d' % (signum.name, step) if signum
         else 'Done: step %d reached (--max_steps)' % step)
  print('%s; final checkpoint %s.' % (how, checkpoints.newest(train_dir)),
        flush=True)
