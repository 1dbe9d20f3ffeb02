"""Checkpoints: find, check, open; resume any trainer's (docs/resuming.md)."""

import collections
import os

import tensorflow.compat.v1 as tf

from cifar10_support import data_files

AVERAGE_SUFFIX = '/ExponentialMovingAverage'
MODEL_PROBE = 'conv1/weights'
CLASSES_PROBE = 'softmax_linear/biases'  # Its length is the class count.
# A file, not a variable: the checkpoints keep the original's variables.
CLASSES_FILE = 'class_names.txt'
NOT_SAVED = 'not_saved'  # The collection of variables no checkpoint holds.


class CheckpointError(ValueError):
  """A checkpoint that cannot be used: none yet, or the wrong contents."""


class UnusableCheckpointError(CheckpointError):
  """One checkpoint cannot be used, as others of its directory may."""


class CheckpointUnreadableError(UnusableCheckpointError):
  """A listed checkpoint's files are missing, incomplete or damaged."""

  def __init__(self, checkpoint, problem, action='read'):
    super().__init__('cannot %s checkpoint %s (pruned by training, not '
                     'completely written, or damaged): %s'
                     % (action, checkpoint, problem))
    self.problem = problem


class ResumeError(ValueError):
  """Training cannot resume from train_dir; the message says why."""


class CheckpointMismatchError(UnusableCheckpointError, ResumeError):
  """The checkpoint holds another model; the message names what differs."""


class NotTheModelError(CheckpointMismatchError):
  """A checkpoint lacks `missing`, a variable of the CIFAR-10 model."""

  def __init__(self, checkpoint, missing):
    super().__init__('checkpoint %s does not hold the CIFAR-10 model (no %s); '
                     'point --checkpoint_dir at a cifar10_train.py --train_dir'
                     % (checkpoint, missing))
    self.missing = missing


class ClassesMismatchError(CheckpointError, ResumeError):
  """The data's classes are not those a checkpoint was trained on."""


def step_of(path):
  """The step in a checkpoint's name ('.../model.ckpt-300': 300), or None."""
  suffix = path.rsplit('-', 1)[-1] if path and '-' in path else ''
  return int(suffix) if suffix.isdigit() else None


def saved_step(reader):
  """The global step a checkpoint's reader holds, or None."""
  if reader.get_variable_to_shape_map().get('global_step') == []:
    return int(reader.get_tensor('global_step'))
  return None


def verified_reader(checkpoint):
  """(reader, None) once every value has read back, else (None, why)."""
  try:
    reader = tf.train.load_checkpoint(checkpoint)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as e:  # pylint: disable=broad-except
    # OpErrors, but also IndexError or ValueError, as the damage goes.
    message = getattr(e, 'message', None) or str(e) or type(e).__name__
    return None, message.strip().splitlines()[0]
  return reader, None


def listed(directory, report=None):
  """A directory's checkpoints, oldest first, as its index lists them (here,
  if moved); without an index, the model.ckpt-N files by N, `report` says."""
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (tf.errors.OpError, ValueError):
    state = None
  if state is not None and state.model_checkpoint_path:
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in paths:
      paths.append(state.model_checkpoint_path)
    here = [os.path.join(directory, os.path.basename(path)) for path in paths]
    return [local if tf.io.gfile.exists(local + '.index') else path
            for path, local in zip(paths, here)]
  prefixes = [name[:-len('.index')] for name in tf.io.gfile.glob(
      os.path.join(directory, 'model.ckpt-*.index'))]
  steps = sorted((step_of(prefix), prefix) for prefix in prefixes
                 if step_of(prefix) is not None)
  if steps and report:
    report('The checkpoint index of %s is missing or unreadable: looking at '
           'the checkpoint files themselves.' % directory)
  return [path for _, path in steps]


def newest(directory):
  """The newest checkpoint of `directory` (see `listed`), or None; not read."""
  return (listed(directory) or [None])[-1]


def newest_restorable(train_dir, report=print):
  """The newest checkpoint of train_dir that reads back, or None; `report`
  gets a line for each skipped. ResumeError if there are only such."""
  paths = listed(train_dir, report)
  if not paths:
    return None
  for checkpoint in reversed(paths):
    if not tf.io.gfile.exists(checkpoint + '.index'):
      report('Checkpoint %s is listed but its files are missing: trying the '
             'one before it.' % checkpoint)
      continue
    problem = verified_reader(checkpoint)[1]
    if problem is None:
      return checkpoint
    report('Checkpoint %s is damaged and left as it is (%s): trying the one '
           'before it.' % (checkpoint, problem))
  raise ResumeError(
      'no checkpoint in --train_dir=%s restores: all %d are damaged or '
      'missing (see the lines above). Nothing was changed; move them away '
      '(or --fresh_start deletes them) to train from step 0, or give another '
      '--train_dir' % (train_dir, len(paths)))


def resumed_from(train_dir):
  """The checkpoint a new run in train_dir would resume from, or None."""
  try:
    return newest_restorable(train_dir, report=lambda line: None)
  except ResumeError:
    return None


def open_model_checkpoint(checkpoint, averaged=False, data_set=None):
  """(reader, weights' dtype, global step: saved, else the name's, else 0) of
  a checkpoint that reads back (else CheckpointUnreadableError), holds the
  model's first and last layers (averaged: their averages too; else
  NotTheModelError) and data_set's classes (None: any; see check_classes)."""
  reader, problem = verified_reader(checkpoint)
  if problem:
    raise CheckpointUnreadableError(checkpoint, problem)
  probes = [MODEL_PROBE, CLASSES_PROBE]
  if averaged:
    probes += [probe + AVERAGE_SUFFIX for probe in probes]
  for name in probes:
    if not reader.has_tensor(name):
      raise NotTheModelError(checkpoint, name)
  if data_set is not None:
    check_classes(checkpoint, data_set, reader)
  global_step = saved_step(reader)
  if global_step is None:
    global_step = step_of(checkpoint) or 0
  return reader, reader.get_variable_to_dtype_map()[MODEL_PROBE], global_step


def check_averages_restorable(reader, variables_to_restore, checkpoint):
  """CheckpointMismatchError unless the checkpoint has every variable of
  variables_to_restore (Saver's var_list dict), of the same shape."""
  shapes = reader.get_variable_to_shape_map()
  missing = sorted(key for key in variables_to_restore if key not in shapes)
  if missing:
    if all(variables_to_restore[key].op.name in shapes for key in missing):
      raise CheckpointMismatchError(
          'checkpoint %s has no moving averages of the weights (no %s): '
          'evaluation uses the averaged weights, which cifar10_train.py '
          'saves; this checkpoint was written without them'
          % (checkpoint, missing[0]))
    raise CheckpointMismatchError(
        'checkpoint %s does not match the CIFAR-10 model: missing %s'
        % (checkpoint, ', '.join(missing)))
  for key, var in sorted(variables_to_restore.items()):
    if shapes[key] != var.shape.as_list():
      raise CheckpointMismatchError(
          'checkpoint %s holds %s with shape %s; the model needs %s'
          % (checkpoint, key, shapes[key], var.shape.as_list()))


def checkpoint_classes(checkpoint, reader=None):
  """(count, names) of the classes `checkpoint` (or its open reader) was
  trained on: count from its last layer (else CheckpointMismatchError), names
  from CLASSES_FILE beside it if there and as many, else None."""
  reader = reader or tf.train.load_checkpoint(checkpoint)
  shape = reader.get_variable_to_shape_map().get(CLASSES_PROBE, [])
  if len(shape) != 1:
    raise another_model(checkpoint, CLASSES_PROBE, 'one value per class')
  names = data_files.read_class_names(
      os.path.join(os.path.dirname(checkpoint), CLASSES_FILE))
  return shape[0], names if names and len(names) == shape[0] else None


def class_names_for(count, names):
  """The names to show for checkpoint_classes' (count, names): its names,
  else CIFAR-10's for ten classes, else class_0, class_1, ..."""
  if names:
    return names
  if count == len(data_files.CLASS_NAMES):
    return data_files.CLASS_NAMES
  return tuple('class_%d' % i for i in range(count))


def check_classes(checkpoint, data_set, reader=None):
  """ClassesMismatchError unless data_files.DataSet data_set has the classes
  `checkpoint` was trained on (their count, and names if recorded)."""
  count, names = checkpoint_classes(checkpoint, reader)
  if count == data_set.num_classes and names in (None, data_set.class_names):
    return
  raise ClassesMismatchError(
      'the data in %s has %s, but checkpoint %s was trained on %s: use the '
      'data it was trained on (--data_dir, --dataset), or train this data '
      'in another --train_dir'
      % (data_set.directory, data_set.describe_classes(), checkpoint,
         data_files.describe_classes(names) if names else
         '%d classes' % count))


RestorePlan = collections.namedtuple(
    'RestorePlan', ['checkpoint', 'variables', 'not_in_checkpoint'])


def another_model(checkpoint, name, needed):
  """The CheckpointMismatchError of a checkpoint without `name`."""
  return CheckpointMismatchError(
      'checkpoint %s has no %s, which this model needs (%s): it was written '
      'by another model. Nothing was changed; train this one in another '
      '--train_dir' % (checkpoint, name, needed))


def plan_restore(checkpoint):
  """The RestorePlan of the graph's saved variables: `variables`, name ->
  variable, from `checkpoint`; `not_in_checkpoint`, the sorted names of the
  others. CheckpointMismatchError if the model state is not all there."""
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  weights = {var.op.name for var in tf.trainable_variables()}
  required = weights | {name + AVERAGE_SUFFIX for name in weights} | {
      'global_step'}
  restore, missing = {}, []
  for var in sorted(saved_variables(), key=lambda v: v.op.name):
    name = var.op.name
    here = '%s %s' % (var.dtype.base_dtype.name, var.shape.as_list())
    if name not in shapes:
      if name in required:
        raise another_model(checkpoint, name, here)
      missing.append(name)
      continue
    there = '%s %s' % (dtypes[name].name, shapes[name])
    if there != here:
      fp16 = {dtypes[name], var.dtype.base_dtype} == {tf.float16, tf.float32}
      hint = (' (--use_fp16 must be as it was when the checkpoint was '
              'written)' if fp16 else '')
      raise CheckpointMismatchError(
          'checkpoint %s holds %s as %s; this model has it as %s%s. Nothing '
          'was changed; resume with the settings it was written with, or train '
          'this model in another --train_dir' % (checkpoint, name, there, here,
                                                 hint))
    restore[name] = var
  return RestorePlan(checkpoint, restore, missing)


def saved_variables():
  """The graph's global variables but those of NOT_SAVED."""
  unsaved = set(tf.get_collection(NOT_SAVED))
  return [var for var in tf.global_variables() if var not in unsaved]


def not_in_checkpoint_message(plan):
  """The line naming what starts fresh (plan.not_in_checkpoint, if any)."""
  return ('Starting fresh (not in %s, which another trainer or precision '
          'wrote): %s.'
          % (os.path.basename(plan.checkpoint),
             ', '.join(plan.not_in_checkpoint)))


def restoring_scaffold(plan, train_dir, on_recovery=None, **kwargs):
  """A Scaffold (**kwargs: its other arguments) whose sessions (with no
  checkpoint_dir) initialise every variable, then restore `plan` (None:
  nothing), or once re-created after a ps task restarted, train_dir's newest
  checkpoint, then call on_recovery with it (or None) and its global step."""
  # Relative paths: a moved train_dir's index still reads.
  if not tf.get_collection(tf.GraphKeys.SAVERS):
    tf.add_to_collection(tf.GraphKeys.SAVERS, tf.train.Saver(
        sharded=True, allow_empty=True, save_relative_paths=True))
  resume_saver = None if plan is None else tf.train.Saver(
      plan.variables, sharded=False, name='resume_saver')
  # Until init_fn sets the global step, the other workers wait (not ready).
  global_step = tf.train.get_global_step()
  init_op = tf.variables_initializer(
      [var for var in tf.global_variables() if var is not global_step],
      name='init_all_but_global_step')
  sessions = [0]  # Sessions initialised so far.

  def init_fn(scaffold, session):
    sessions[0] += 1
    current = plan
    if sessions[0] > 1:
      checkpoint = newest_restorable(train_dir)
      with session.graph.as_default():
        current = checkpoint and plan_restore(checkpoint)
      if current and current.not_in_checkpoint:
        print(not_in_checkpoint_message(current))
    if current is not None:
      saver = scaffold.saver  # Saves, so restores, every variable.
      if plan is not None and set(current.variables) == set(plan.variables):
        saver = resume_saver
      elif current.not_in_checkpoint:
        raise ResumeError(
            'checkpoint %s lacks variables that this run started with (%s): '
            'it cannot be restored into the running session. Run the same '
            'command again to resume from it'
            % (current.checkpoint, ', '.join(current.not_in_checkpoint)))
      saver.restore(session, current.checkpoint)
      # As after its own restore, the saver prunes those up to it here: not a
      # newer (damaged) one, nor the old place of a moved train_dir's.
      directory = os.path.dirname(current.checkpoint)
      paths = [p for p in listed(directory) if os.path.dirname(p) == directory]
      if current.checkpoint in paths:
        paths = paths[:paths.index(current.checkpoint) + 1]
      scaffold.saver.recover_last_checkpoints(paths)
    else:
      session.run(global_step.initializer)
    if sessions[0] > 1 and on_recovery is not None:
      on_recovery(current and current.checkpoint,
                  int(session.run(global_step)))

  return tf.train.Scaffold(init_op=init_op, init_fn=init_fn, **kwargs)
