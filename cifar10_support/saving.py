"""A training session's restoring scaffold and saving hooks, built as one:
the hooks write summaries and checkpoints after the NaN check, so that a
diverged step is never saved, and MonitoredTrainingSession's own savers,
which would run before every other hook, are off."""

import collections

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import progress
from cifar10_support import summaries

# The Scaffold, the summary and checkpoint hooks (to put after the NaN check)
# and the MonitoredTrainingSession keyword arguments that leave saving to them.
Saving = collections.namedtuple('Saving', ['scaffold', 'hooks',
                                           'session_args'])


def restore_then_save(start, settings, summary_op=None):
  """The `Saving` of a run from train_dirs.StartPoint `start`, with the
  run_flags.TrainSettings `settings`, writing summary_op (None: every
  summary in the graph). Call it in the training graph, once built: it
  checks that the checkpoint fits it.

  Raises:
    checkpoints.CheckpointMismatchError: the checkpoint is of another model.
  """
  scaffold = checkpoints.restoring_scaffold(
      start.restore_plan(), start.train_dir, summary_op=summary_op)
  # The session's step counter writes global_step/sec with the summaries.
  session_args = dict(
      checkpoint_dir=None, summary_dir=start.train_dir,
      save_checkpoint_secs=None, save_checkpoint_steps=None,
      save_summaries_steps=None, save_summaries_secs=None,
      log_step_count_steps=settings.save_summaries_steps or None)
  return Saving(scaffold, saving_hooks(scaffold, start.train_dir, settings,
                                       summary_op), session_args)


def saving_hooks(scaffold, train_dir, settings, summary_op=None,
                 own_steps=True, label=''):
  """[summaries.SummaryHook, tf.train.CheckpointSaverHook] of a run in
  train_dir, to put after the NaN check: the scaffold's saver writes the
  checkpoints; own_steps False where other processes move the global step
  too; label begins the checkpoint lines ('Chief')."""
  steps = settings.save_checkpoint_steps
  return [
      summaries.SummaryHook(train_dir, settings.save_summaries_steps,
                            settings.max_steps, summary_op,
                            own_steps=own_steps),
      tf.train.CheckpointSaverHook(
          train_dir, scaffold=scaffold, save_steps=steps or None,
          save_secs=None if steps else settings.save_checkpoint_secs,
          listeners=[progress.SaveAnnouncer(train_dir, settings.max_steps,
                                            label)])]
