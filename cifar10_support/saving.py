"""A training session's restoring scaffold and saving hooks, built as one.

    saving = start.restore_then_save(settings)   # train_dirs.StartPoint
    hooks = [tf.train.StopAtStepHook(...), tf.train.NanTensorHook(loss),
             logger] + saving.hooks
    with tf.train.MonitoredTrainingSession(
        scaffold=saving.scaffold, hooks=hooks, config=config,
        **saving.session_args) as mon_sess:

The scaffold restores the newest checkpoint that fits (from any trainer of
this model), also into a session re-created after an error; the hooks write
summaries and checkpoints after the NaN check, so that a diverged step is
never saved; `session_args` turn MonitoredTrainingSession's own savers off,
which would run before every other hook.
"""

import collections
from datetime import datetime
import os
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import summaries

Saving = collections.namedtuple('Saving', ['scaffold', 'hooks',
                                           'session_args'])
Saving.__doc__ = """What `restore_then_save` returns.

  scaffold: the tf.train.Scaffold that restores
    (checkpoints.restoring_scaffold).
  hooks: the summary and checkpoint hooks, to put after the NaN check.
  session_args: dict of MonitoredTrainingSession's keyword arguments that
    leave summaries and checkpoints to these hooks.
"""


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


def progress(step, max_steps, steps_per_sec=None):
  """Where a run stands: 'step 12,000 of 100,000; about 1 h 5 min left' at
  steps_per_sec (the time left out where it is None or 0, and at the end)."""
  text = 'step {:,} of {:,}'.format(step, max_steps)
  if steps_per_sec and step < max_steps:
    text += '; %s left' % time_left((max_steps - step) / steps_per_sec)
  return text


class SaveAnnouncer(tf.train.CheckpointSaverListener):
  """Prints a line after each checkpoint is written (TF's own is INFO), with
  where the run stands, the time left at the speed since the last one:

      <date time>: saved checkpoint <train_dir>/model.ckpt-<step>; step
      12,000 of 100,000; about 1 h 5 min left
  """

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
    print('%s%s: saved checkpoint %s-%d; %s' % (
        self._label, datetime.now(), self._prefix, global_step_value,
        progress(global_step_value, self._max_steps, speed)), flush=True)


def restore_then_save(plan, train_dir, settings, summary_op=None):
  """The restoring scaffold and saving hooks of a run in train_dir.

  Call it inside the training graph, once built.

  Args:
    plan: the checkpoints.RestorePlan to resume from, or None to start from
      the initial values.
    train_dir: str, where the checkpoints and summaries go.
    settings: the run's run_settings.TrainSettings (max_steps and the save_*
      settings).
    summary_op: the summaries to write, or None for every one in the graph.

  Returns:
    A `Saving`.
  """
  scaffold = checkpoints.restoring_scaffold(plan, train_dir,
                                            summary_op=summary_op)
  hooks = saving_hooks(scaffold, train_dir, settings, summary_op)
  # No checkpoint_dir: the scaffold restores, from any trainer's checkpoint.
  # The session's step counter writes global_step/sec with the summaries.
  session_args = dict(
      checkpoint_dir=None, summary_dir=train_dir, save_checkpoint_secs=None,
      save_checkpoint_steps=None, save_summaries_steps=None,
      save_summaries_secs=None,
      log_step_count_steps=settings.save_summaries_steps or None)
  return Saving(scaffold, hooks, session_args)


def saving_hooks(scaffold, train_dir, settings, summary_op=None,
                 own_steps=True, label=''):
  """The summary and checkpoint hooks of a run in train_dir, to put after
  the NaN check.

  Args:
    scaffold: the session's scaffold (its saver writes the checkpoints).
    train_dir: str, where the checkpoints and summaries go.
    settings: the run's run_settings.TrainSettings (max_steps and the save_*
      settings).
    summary_op: the summaries to write, or None for every one in the graph.
    own_steps: False where other processes move the global step too
      (summaries.SummaryHook re-reads it each run).
    label: what the checkpoint lines (SaveAnnouncer) begin with, e.g.
      'Chief'; none by default.

  Returns:
    [summaries.SummaryHook, tf.train.CheckpointSaverHook].
  """
  steps = settings.save_checkpoint_steps
  return [
      summaries.SummaryHook(train_dir, settings.save_summaries_steps,
                            settings.max_steps, summary_op,
                            own_steps=own_steps),
      tf.train.CheckpointSaverHook(
          train_dir, scaffold=scaffold, save_steps=steps or None,
          save_secs=None if steps else settings.save_checkpoint_secs,
          listeners=[SaveAnnouncer(train_dir, settings.max_steps, label)])]
