"""Resuming training from a checkpoint that any trainer wrote.

Every trainer saves the same model state under the original's names: the
weights, their moving averages ('.../ExponentialMovingAverage') and the
global step. Beside it each saves state that is its own: the loss averages
are named after the tower that computed them ('cross_entropy/avg' on one
device, 'tower_1/cross_entropy/avg' with two towers). So a checkpoint resumes
in any trainer when its model state fits the graph: each such variable must
be there, with this graph's shape and dtype. The trainer's own state that
the checkpoint lacks starts from its initial value, and what the checkpoint
holds that this graph lacks is not read.

    plan = plan_restore(checkpoint)      # inside the built training graph
    scaffold = restoring_scaffold(plan)  # initialises, then restores
"""

import collections
import os

import tensorflow.compat.v1 as tf

# What tf.train.ExponentialMovingAverage appends to a variable's name.
AVERAGE_SUFFIX = '/ExponentialMovingAverage'


class ResumeError(ValueError):
  """Training cannot resume from train_dir; the message says why."""


class CheckpointMismatchError(ResumeError):
  """The checkpoint holds another model; the message names what differs."""


class NoRestorableCheckpointError(ResumeError):
  """Every checkpoint the index lists is damaged or missing."""


def verified_reader(checkpoint):
  """A reader of `checkpoint` once every value has read back, or why not.

  Reads the index and every tensor, whose checksums TensorFlow verifies: a
  truncated or corrupted .index or .data file is found here, before any
  session (4 MB for this model: milliseconds).

  Args:
    checkpoint: str, a checkpoint's path prefix.

  Returns:
    (reader, None), or (None, a one-line reason: TensorFlow's first line).
  """
  try:
    reader = tf.train.load_checkpoint(checkpoint)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as e:  # pylint: disable=broad-except
    # The reader raises OpErrors, but also IndexError ('Read less bytes than
    # requested') or ValueError, as the damage goes.
    message = getattr(e, 'message', None) or str(e) or type(e).__name__
    return None, message.strip().splitlines()[0]
  return reader, None


def checkpoint_problem(checkpoint):
  """Why `checkpoint` cannot be restored, or None if every value reads back."""
  return verified_reader(checkpoint)[1]


def _listed_checkpoints(train_dir, report):
  """The checkpoints of train_dir, oldest first, as its index lists them.

  A listed checkpoint whose file name is in train_dir is taken from there,
  wherever the index says it is: the index holds absolute paths, which a
  moved or copied train_dir would otherwise take from the old place.
  Without a readable index, the model.ckpt-N files there, by N.
  """
  try:
    state = tf.train.get_checkpoint_state(train_dir)
  except (tf.errors.OpError, ValueError):
    state = None
  if state is not None and state.model_checkpoint_path:
    listed = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in listed:
      listed.append(state.model_checkpoint_path)
    here = [os.path.join(train_dir, os.path.basename(path)) for path in listed]
    return [local if tf.io.gfile.exists(local + '.index') else path
            for path, local in zip(listed, here)]
  found = tf.io.gfile.glob(os.path.join(train_dir, 'model.ckpt-*.index'))
  steps = sorted((int(name[:-len('.index')].rsplit('-', 1)[1]),
                  name[:-len('.index')]) for name in found
                 if name[:-len('.index')].rsplit('-', 1)[1].isdigit())
  if steps:
    report('The checkpoint index of %s is missing or unreadable: looking at '
           'the checkpoint files themselves.' % train_dir)
  return [path for _, path in steps]


def newest_restorable(train_dir, report=print):
  """The newest checkpoint of train_dir that restores.

  Args:
    train_dir: the training directory.
    report: called with one line for each checkpoint skipped.

  Returns:
    The checkpoint's path prefix, or None if train_dir has none.

  Raises:
    NoRestorableCheckpointError: if every checkpoint is damaged or missing.
  """
  listed = _listed_checkpoints(train_dir, report)
  if not listed:
    return None
  for checkpoint in reversed(listed):
    if not tf.io.gfile.exists(checkpoint + '.index'):
      report('Checkpoint %s is listed but its files are missing: trying the '
             'one before it.' % checkpoint)
      continue
    problem = checkpoint_problem(checkpoint)
    if problem is None:
      return checkpoint
    report('Checkpoint %s is damaged and left as it is (%s): trying the one '
           'before it.' % (checkpoint, problem))
  raise NoRestorableCheckpointError(
      'no checkpoint in --train_dir=%s restores: all %d are damaged or '
      'missing (see the lines above). Nothing was changed; move them away '
      '(or --fresh_start deletes them) to train from step 0, or give another '
      '--train_dir' % (train_dir, len(listed)))


RestorePlan = collections.namedtuple('RestorePlan',
                                     ['checkpoint', 'variables', 'fresh'])
RestorePlan.__doc__ = """What `plan_restore` returns.

  checkpoint: str, the checkpoint's path prefix.
  variables: dict, checkpoint name -> variable of this graph, to restore.
  fresh: sorted list of the names of this graph's variables that the
    checkpoint lacks (trainer-only state): they keep their initial values.
"""


def model_state_names(trainable_names):
  """The names that a checkpoint must hold to resume the model.

  Args:
    trainable_names: the trainable variables' names ('conv1/weights', ...).

  Returns:
    A set: those names, their moving averages' names and 'global_step'.
  """
  names = set(trainable_names)
  return names | {name + AVERAGE_SUFFIX for name in names} | {'global_step'}


def _describe(shape, dtype):
  return '%s %s' % (tf.as_dtype(dtype).name, list(shape))


def plan_restore(checkpoint, variables=None, trainable=None):
  """Decides which of the graph's variables come from `checkpoint`.

  Args:
    checkpoint: str, path prefix of a checkpoint ('.../model.ckpt-1000').
    variables: the variables a training session saves; None for the default
      graph's global variables.
    trainable: the model's weights; None for the default graph's trainable
      variables.

  Returns:
    A `RestorePlan`.

  Raises:
    CheckpointMismatchError: naming the checkpoint and the variable, when a
      variable of the model state is missing, or any variable the checkpoint
      and the graph share differs in shape or dtype.
  """
  if variables is None:
    variables = tf.global_variables()
  if trainable is None:
    trainable = tf.trainable_variables()
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  required = model_state_names(var.op.name for var in trainable)
  restore, fresh = {}, []
  for var in sorted(variables, key=lambda v: v.op.name):
    name = var.op.name
    here = _describe(var.shape.as_list(), var.dtype.base_dtype)
    if name not in shapes:
      if name in required:
        raise CheckpointMismatchError(
            'checkpoint %s has no %s, which this model needs (%s): it was '
            'written by another model. Nothing was changed; train this one in '
            'another --train_dir' % (checkpoint, name, here))
      fresh.append(name)
      continue
    there = _describe(shapes[name], dtypes[name])
    if there != here:
      hint = ''
      if {dtypes[name], var.dtype.base_dtype} == {tf.float16, tf.float32}:
        hint = (' (--use_fp16 must be as it was when the checkpoint was '
                'written)')
      raise CheckpointMismatchError(
          'checkpoint %s holds %s as %s; this model has it as %s%s. Nothing '
          'was changed; resume with the settings it was written with, or train '
          'this model in another --train_dir' % (checkpoint, name, there, here,
                                                 hint))
    restore[name] = var
  return RestorePlan(checkpoint, restore, fresh)


def fresh_line(plan):
  """The line saying what starts fresh, or None if everything was restored."""
  if not plan.fresh:
    return None
  return ('Starting fresh (not in %s, which another trainer wrote): %s.'
          % (os.path.basename(plan.checkpoint), ', '.join(plan.fresh)))


def restoring_scaffold(plan, **kwargs):
  """A Scaffold whose session initialises every variable, then restores.

  Build it inside the training graph, under the device its saver should run
  on (the chief's CPU in distributed training). The session it is given to
  must not restore on its own (no checkpoint_dir): the variables of `plan`
  come from its checkpoint, the others keep their initial values.

  Args:
    plan: a `RestorePlan`, or None to only initialise.
    **kwargs: other tf.train.Scaffold arguments (summary_op, ...).

  Returns:
    A tf.train.Scaffold.
  """
  if plan is None:
    return tf.train.Scaffold(**kwargs)
  saver = tf.train.Saver(plan.variables, sharded=False, name='resume_saver')

  def init_fn(scaffold, session):
    saver.restore(session, plan.checkpoint)
    # As a session that restores by itself does: the scaffold's saver, which
    # writes the new checkpoints, takes over the pruning of the old ones;
    # only up to this one, so that newer damaged ones are never pruned.
    state = tf.train.get_checkpoint_state(os.path.dirname(plan.checkpoint))
    if state is not None:
      listed = list(state.all_model_checkpoint_paths)
      if plan.checkpoint in listed:
        listed = listed[:listed.index(plan.checkpoint) + 1]
      scaffold.saver.recover_last_checkpoints(listed)

  return tf.train.Scaffold(init_fn=init_fn, **kwargs)
