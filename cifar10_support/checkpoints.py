"""Checkpoints: finding them, checking them, opening one for its averaged
weights (evaluation, classify), and resuming from any trainer's.

Every trainer saves the same model state under the original's names (the
weights, their moving averages, the global step) and beside it state of its
own (loss averages named after the tower that computed them). So a
checkpoint resumes in any trainer whose model state it holds, with this
graph's shapes and dtypes; the trainer's own state it lacks starts afresh.
"""

import collections
import os

import tensorflow.compat.v1 as tf

from cifar10_support import data_files

# What tf.train.ExponentialMovingAverage appends to a variable's name.
AVERAGE_SUFFIX = '/ExponentialMovingAverage'
# A variable every checkpoint of the CIFAR-10 model holds: the one looked for.
MODEL_PROBE = 'conv1/weights'
# The last layer's biases: their length is the model's class count.
CLASSES_PROBE = 'softmax_linear/biases'
# The class names of the checkpoints in a directory, as a names file
# (data_files.read_class_names): every trainer writes it beside its
# checkpoints, so that a copied train_dir still names its classes. A file,
# not a variable: the checkpoints keep the original's variables.
CLASSES_FILE = 'class_names.txt'
# Variables no checkpoint holds (a cluster's record of the chief's classes).
NOT_SAVED = 'not_saved'


class CheckpointError(ValueError):
  """A checkpoint that cannot be used: none yet, or the wrong contents."""


class UnusableCheckpointError(CheckpointError):
  """One checkpoint cannot be used, as others of its directory may: what
  evaluation following training skips."""


class CheckpointUnreadableError(UnusableCheckpointError):
  """A listed checkpoint's files are missing, incomplete or damaged, as when
  training pruned it or is still writing it; `problem` says how."""

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


class NoRestorableCheckpointError(ResumeError):
  """Every checkpoint listed is damaged or missing."""


class ClassesMismatchError(CheckpointError, ResumeError):
  """The data's classes are not those a checkpoint was trained on."""


def step_of(path):
  """The global step in a checkpoint's name ('.../model.ckpt-300' -> 300), or
  None when it ends in no '-<digits>'."""
  suffix = path.rsplit('-', 1)[-1] if path and '-' in path else ''
  return int(suffix) if suffix.isdigit() else None


def saved_step(reader):
  """The global step a checkpoint's reader holds, or None."""
  if reader.get_variable_to_shape_map().get('global_step') == []:
    return int(reader.get_tensor('global_step'))
  return None


def verified_reader(checkpoint):
  """(reader, None) once every value of `checkpoint` has read back (which
  verifies its checksums), else (None, a one-line reason)."""
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
  """The checkpoints of a directory, oldest first, as its index lists them
  (one whose file is here is taken from here: an index of absolute paths,
  the original's, names the old place of a moved directory); without a
  readable index, the model.ckpt-N files by N, `report` saying so."""
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
  paths = listed(directory)
  return paths[-1] if paths else None


def newest_restorable(train_dir, report=print):
  """The newest checkpoint of train_dir that restores, or None if it has
  none; `report` gets one line for each checkpoint skipped.

  Raises:
    NoRestorableCheckpointError: every checkpoint is damaged or missing.
  """
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
  raise NoRestorableCheckpointError(
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
  """(reader, the weights' dtype, global step: saved, else in the name, else
  0) of a checkpoint of the CIFAR-10 model, every value read back; its first
  and last layers (averaged: their moving averages too) are looked for
  before a graph is built (`check_averages_restorable` checks all, after),
  and its classes are data_set's (a data_files.DataSet; None: any).

  Raises:
    CheckpointUnreadableError: its files are missing, incomplete or damaged.
    NotTheModelError: it lacks the model (or, averaged, its moving averages).
    ClassesMismatchError: as check_classes.
  """
  reader, problem = verified_reader(checkpoint)
  if problem:
    raise CheckpointUnreadableError(checkpoint, problem)
  probes = [MODEL_PROBE, CLASSES_PROBE]
  for name in probes + ([probe + AVERAGE_SUFFIX for probe in probes]
                        if averaged else []):
    if not reader.has_tensor(name):
      raise NotTheModelError(checkpoint, name)
  if data_set is not None:
    check_classes(checkpoint, data_set, reader)
  global_step = saved_step(reader)
  if global_step is None:  # Not a training script's: the name's, if there.
    global_step = step_of(checkpoint) or 0
  return (reader, reader.get_variable_to_dtype_map()[MODEL_PROBE],
          global_step)


def check_averages_restorable(reader, variables_to_restore, checkpoint):
  """Raises CheckpointMismatchError, naming what is missing or of the wrong
  shape,
  unless a checkpoint has every moving average of variables_to_restore (key
  -> variable, cifar10.moving_averages_to_restore())."""
  shapes = reader.get_variable_to_shape_map()
  missing = sorted(key for key in variables_to_restore if key not in shapes)
  if missing:
    raw_names = [variables_to_restore[key].op.name for key in missing]
    if all(name in shapes for name in raw_names):
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
  """(count, names) of the classes `checkpoint` was trained on: count from
  its last layer, names from CLASSES_FILE beside it (None without one, or
  one of another count); CheckpointMismatchError without a last layer.
  reader: its tf.train.load_checkpoint, if open."""
  reader = reader or tf.train.load_checkpoint(checkpoint)
  shape = reader.get_variable_to_shape_map().get(CLASSES_PROBE)
  if shape is None or len(shape) != 1:
    raise another_model(checkpoint, CLASSES_PROBE, 'one value per class')
  count = shape[0]
  names = data_files.read_class_names(
      os.path.join(os.path.dirname(checkpoint), CLASSES_FILE))
  return count, names if names and len(names) == count else None


def class_names_for(count, names):
  """The names to show for a checkpoint's classes (`checkpoint_classes`):
  its own, else CIFAR-10's for a checkpoint of ten classes written without
  them (the original's, or before the file), else class_0, class_1, ..."""
  if names:
    return names
  if count == len(data_files.CLASS_NAMES):
    return data_files.CLASS_NAMES
  return tuple('class_%d' % i for i in range(count))


def check_classes(checkpoint, data_set, reader=None):
  """Raises ClassesMismatchError, one message naming both, unless data_set
  (a data_files.DataSet) has the classes `checkpoint` was trained on: their
  count, and their names where the checkpoint records them."""
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


def record_classes(directory, data_set):
  """Writes data_set's class names to CLASSES_FILE in `directory` unless it
  holds them already (a refused resume leaves train_dir as it was); the
  file is replaced whole, never half-written."""
  path = os.path.join(directory, CLASSES_FILE)
  try:
    if data_files.read_class_names(path) == data_set.class_names:
      return
  except data_files.DataError:
    pass  # Unreadable: written anew.
  partial = path + '.tmp'
  with tf.io.gfile.GFile(partial, 'wb') as f:
    f.write(data_files.class_names_text(data_set.class_names))
  tf.io.gfile.rename(partial, path, overwrite=True)


# What `plan_restore` returns: the checkpoint's path prefix; a dict,
# checkpoint name -> variable of this graph to restore; the sorted names of
# this graph's variables that the checkpoint lacks (trainer-only state, which
# keeps its initial values).
RestorePlan = collections.namedtuple('RestorePlan',
                                     ['checkpoint', 'variables',
                                      'not_in_checkpoint'])


def _describe(shape, dtype):
  return '%s %s' % (tf.as_dtype(dtype).name, list(shape))


def another_model(checkpoint, name, needed):
  """The CheckpointMismatchError of a checkpoint to resume from without
  `name`, which this model needs (as `needed`)."""
  return CheckpointMismatchError(
      'checkpoint %s has no %s, which this model needs (%s): it was written '
      'by another model. Nothing was changed; train this one in another '
      '--train_dir' % (checkpoint, name, needed))


def plan_restore(checkpoint):
  """The `RestorePlan` of the default graph's variables from `checkpoint`:
  the model state must be there, the other variables where it has them.

  Raises:
    CheckpointMismatchError: naming the variable of the model state that is
      missing, or that differs in shape or dtype.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  weights = {var.op.name for var in tf.trainable_variables()}
  required = weights | {name + AVERAGE_SUFFIX for name in weights} | {
      'global_step'}
  restore, missing = {}, []
  for var in sorted(saved_variables(), key=lambda v: v.op.name):
    name = var.op.name
    here = _describe(var.shape.as_list(), var.dtype.base_dtype)
    if name not in shapes:
      if name in required:
        raise another_model(checkpoint, name, here)
      missing.append(name)
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
  return RestorePlan(checkpoint, restore, missing)


def saved_variables():
  """The default graph's global variables that checkpoints hold: all but
  those of the NOT_SAVED collection."""
  unsaved = set(tf.get_collection(NOT_SAVED))
  return [var for var in tf.global_variables() if var not in unsaved]


def not_in_checkpoint_message(plan):
  """The line saying what starts fresh, or None if everything was restored."""
  if not plan.not_in_checkpoint:
    return None
  return ('Starting fresh (not in %s, which another trainer wrote): %s.'
          % (os.path.basename(plan.checkpoint),
             ', '.join(plan.not_in_checkpoint)))


def restoring_scaffold(plan, train_dir, on_recovery=None, **kwargs):
  """A Scaffold whose sessions initialise every variable, then restore.

  Build it in the training graph, after its global step; its session must
  not restore on its own (no checkpoint_dir). The first session restores
  `plan` (None: only initialises). A session re-created after one was lost
  (a ps task restarted, its variables gone) restores instead the newest
  checkpoint of train_dir that restores then, as the start-up one may have
  been pruned since; on_recovery, if given, is then called with it (or None)
  and its global step. **kwargs: other tf.train.Scaffold arguments.
  """
  # Savers are graph ops, made now: the graph is final once sessions start.
  # The start-up plan's restores its variables from any checkpoint holding
  # them; the scaffold's own saver restores the checkpoints this run writes.
  # Its index names them relative to train_dir, so a moved one still reads.
  if not tf.get_collection(tf.GraphKeys.SAVERS):
    tf.add_to_collection(tf.GraphKeys.SAVERS, tf.train.Saver(
        sharded=True, allow_empty=True, save_relative_paths=True))
  plan_savers = {}
  if plan is not None:
    plan_savers[frozenset(plan.variables)] = tf.train.Saver(
        plan.variables, sharded=False, name='resume_saver')
  # The global step is set only by init_fn, restored or initialised: until
  # then the model is not ready, so other workers of a cluster wait for the
  # restore instead of training on freshly initialised weights.
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
      current = None
      if checkpoint:
        with session.graph.as_default():
          current = plan_restore(checkpoint)
        if not_in_checkpoint_message(current):
          print(not_in_checkpoint_message(current))
    if current is not None:
      saver = plan_savers.get(frozenset(current.variables))
      if saver is None and not current.not_in_checkpoint:
        saver = scaffold.saver  # Saves, so restores, every variable.
      if saver is None:
        raise ResumeError(
            'checkpoint %s lacks variables that this run started with '
            '(%s): it cannot be restored into the running session. Run the '
            'same command again to resume from it'
            % (current.checkpoint, ', '.join(current.not_in_checkpoint)))
      saver.restore(session, current.checkpoint)
      _take_over_pruning(scaffold.saver, current.checkpoint)
    else:
      session.run(global_step.initializer)
    if sessions[0] > 1 and on_recovery is not None:
      on_recovery(current and current.checkpoint,
                  int(session.run(global_step)))

  return tf.train.Scaffold(init_op=init_op, init_fn=init_fn, **kwargs)


def _take_over_pruning(saver, checkpoint):
  """Hands `saver` the pruning of the checkpoints up to `checkpoint`, as a
  session that restores by itself does: never a newer (damaged) one, and
  only those of its directory (an old index of a moved train_dir names the
  old place, whose checkpoints are not this run's to delete)."""
  directory = os.path.dirname(checkpoint)
  paths = [path for path in listed(directory)
           if os.path.dirname(path) == directory]
  if checkpoint in paths:
    paths = paths[:paths.index(checkpoint) + 1]
  saver.recover_last_checkpoints(paths)
