"""What a training run prints as it goes: step lines and checkpoint lines,
which a cluster's workers begin with their label ('Worker 1: ', 'Chief: ')."""

from datetime import datetime
import math
import os
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import signals

# The original's step line.
LOG_FORMAT = '%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)'


class DivergedError(RuntimeError):
  """The loss became NaN; the message names the last good checkpoint."""


def diverged_error(step, train_dir=None):
  """The DivergedError for a NaN loss at global step `step`: it names the
  checkpoint of train_dir a new run resumes from; without train_dir (a
  cluster worker that is not the chief), that the chief keeps it."""
  if train_dir is None:
    return DivergedError('Model diverged with loss = NaN at global step %d; '
                         'the chief keeps the last good checkpoint.' % step)
  checkpoint = checkpoints.resumed_from(train_dir)
  if checkpoint is None:
    kept = 'no checkpoint had been written yet'
  else:
    kept = ('the last good checkpoint, %s, is left intact and a new run '
            'resumes from it' % checkpoint)
  return DivergedError(
      'Model diverged with loss = NaN at step %d: training stopped without '
      'saving that step; %s. Lower the learning rate or check the data.'
      % (step, kept))


class StepLogger(tf.train.SessionRunHook):
  """Prints LOG_FORMAT every `log_frequency` steps (the original's _LoggerHook)
  and, as the original's NanTensorHook did, stops training at a NaN loss:
  it raises diverged_error(step, train_dir) before the hooks after it in the
  list write that step's summaries and checkpoint.

  examples/sec and sec/batch are averaged since the previous line (the first
  window counts session start-up and the queue filling, as in the original)
  over batches_per_step batches of batch_size a run (towers); a NaN loss is
  never printed. With step None this process makes every step: the global
  step is read when a session is created, then counted, and printed at its
  multiples of log_frequency. A cluster worker passes the int64 tensor to
  print instead, fetched each run, at its own steps 1, log_frequency + 1...

  Attributes:
    last_step: int, the global step of this process's last run (the one its
      step line shows; fetched: read before its update), None before one.
    global_step: int, where training stands after the last run (counted:
      last_step + 1; fetched: read again when the session ends, None
      before).
    own_steps, last_loss, last_examples_per_sec: this process's runs, the
      last loss, examples/sec of the last line (None before one).
  """

  def __init__(self, loss, batch_size, log_frequency, train_dir=None,
               step=None, batches_per_step=1, label=''):
    self._loss = loss
    self._train_dir = train_dir
    self._examples_per_step = batch_size * batches_per_step
    self._batches_per_step = batches_per_step
    self._log_frequency = log_frequency
    self._step_tensor = step
    self._prefix = label + ': ' if label else ''
    self.last_step = self.global_step = None
    self.own_steps = 0
    self.last_loss = None
    self.last_examples_per_sec = None

  def begin(self):
    if self._step_tensor is None:
      self._global_step = tf.train.get_global_step()
    self._window_start, self._window_steps = time.time(), 0

  def after_create_session(self, session, coord):
    if self._step_tensor is None:
      self.global_step = int(session.run(self._global_step))

  def before_run(self, run_context):
    step = [] if self._step_tensor is None else self._step_tensor
    return tf.train.SessionRunArgs([self._loss, step])

  def after_run(self, run_context, run_values):
    self.last_loss, fetched = run_values.results
    if self._step_tensor is None:
      step = self.last_step = self.global_step
      self.global_step += 1  # This process makes every step.
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
    self.last_examples_per_sec = (
        self._window_steps * self._examples_per_step / duration)
    # A closed output stops training after this step (signals.print_line).
    signals.print_line(self._prefix + LOG_FORMAT % (
        datetime.now(), step, self.last_loss, self.last_examples_per_sec,
        duration / batches))
    self._window_start, self._window_steps = time.time(), 0

  def end(self, session):
    if self._step_tensor is not None:
      self.global_step = int(session.run(self._step_tensor))


def time_left(secs):
  """'about 1 h 5 min', 'about 2 h', 'about 12 min' or 'less than a minute':
  secs, to the nearest minute (halves up)."""
  minutes = int(secs / 60.0 + 0.5)
  if minutes < 1:
    return 'less than a minute'
  if minutes < 60:
    return 'about %d min' % minutes
  if minutes % 60 == 0:
    return 'about %d h' % (minutes // 60)
  return 'about %d h %d min' % divmod(minutes, 60)


def steps_and_time_left(step, max_steps, steps_per_sec=None):
  """'step 12,000 of 100,000; about 1 h 5 min left' at steps_per_sec (the
  time left out where it is None or 0, and at the end)."""
  text = 'step {:,} of {:,}'.format(step, max_steps)
  if steps_per_sec and step < max_steps:
    text += '; %s left' % time_left((max_steps - step) / steps_per_sec)
  return text


class SaveAnnouncer(tf.train.CheckpointSaverListener):
  """Prints a line after each save (TensorFlow's own is INFO):
  '<date time>: saved checkpoint <train_dir>/model.ckpt-12000; step 12,000 of
  100,000; about 1 h 5 min left', at the speed since the previous save."""

  def __init__(self, train_dir, max_steps, label=''):
    self._prefix = os.path.join(train_dir, 'model.ckpt')
    self._max_steps = max_steps
    self._label = label + ': ' if label else ''
    self._last = None  # (global step, time) at the last checkpoint.

  def after_save(self, session, global_step_value):
    now = time.time()
    speed = None
    if self._last and global_step_value > self._last[0] and now > self._last[1]:
      speed = (global_step_value - self._last[0]) / (now - self._last[1])
    self._last = (global_step_value, now)
    signals.print_line('%s%s: saved checkpoint %s-%d; %s' % (
        self._label, datetime.now(), self._prefix, global_step_value,
        steps_and_time_left(global_step_value, self._max_steps, speed)))


def report_end(train_dir, step, signum=None):
  """Prints how a run ended at global step `step` (stopped by signal
  `signum`, if not None), and train_dir's final checkpoint."""
  final = checkpoints.newest(train_dir)
  if signum:
    print('Received %s: stopped at step %d; final checkpoint %s.'
          % (signum.name, step, final), flush=True)
  else:
    print('Done: step %d reached (--max_steps); final checkpoint %s.'
          % (step, final), flush=True)
