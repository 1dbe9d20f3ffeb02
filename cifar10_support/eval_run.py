"""An evaluation's settings, checked, and the checkpoints it follows and opens.

    eval_run.EvalSettings(data_dir, num_examples=20, batch_size=8)
"""

import collections
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import mixed_precision
from cifar10_support import run_flags
from cifar10_support import sessions


EvalSettings = collections.namedtuple(
    'EvalSettings',
    ['data_dir', 'eval_data', 'num_examples', 'batch_size', 'run_once',
     'eval_interval_secs', 'session_config', 'input_threads', 'compute_dtype',
     'until_step', 'dataset'],
    defaults=('test', None, 128, False, 300, None, 1, None, None, 'cifar10'))
EvalSettings.__doc__ = """An evaluation's settings: cifar10_eval.py's flags
of the same names, with their defaults (num_examples None: every record of
eval_data); session_config (None:
sessions.eval_config()); input_threads (1 reads the records in file order);
compute_dtype (None, or the forward pass's dtype from float32 weights);
until_step (following training, stop once a checkpoint at or past it is
evaluated; None follows for ever)."""


def from_flags_checked(flag_values):
  """The EvalSettings of cifar10_eval.py's flags, its data fetched if
  missing, checked and said ('Data: ...') before TensorFlow is asked about
  the machine; ValueError (DataError for a file) names what is at fault."""
  settings = EvalSettings(
      data_dir=flag_values.data_dir, eval_data=flag_values.eval_data,
      num_examples=flag_values.num_examples,
      batch_size=flag_values.batch_size, run_once=flag_values.run_once,
      eval_interval_secs=flag_values.eval_interval_secs,
      dataset=flag_values.dataset)
  download.prepare(flag_values.data_dir, flag_values.data_url,
                   flag_values.data_md5, settings.dataset,
                   split=settings.eval_data)
  check_settings(settings)
  return settings._replace(
      compute_dtype=mixed_precision.compute_dtype_for_this_machine(
          flag_values.mixed_precision, sessions.has_gpu()),
      session_config=sessions.eval_config(run_flags.threads(flag_values)))


def check_settings(settings):
  """The records' count of an EvalSettings' data files, once they and the
  settings are checked; ValueError (DataError for a file) names the setting
  or file at fault and what it should be."""
  data_set = data_files.describe(settings.data_dir, settings.dataset)
  names = data_set.eval_files(settings.eval_data)
  filenames = data_set.paths(names)
  num_examples = settings.num_examples
  if num_examples is not None and (not isinstance(num_examples, int) or
                                   num_examples < 1):
    raise ValueError('num_examples must be a positive integer, got %r'
                     % (num_examples,))
  data_files.check_batch_size(settings.batch_size)
  num_records = data_set.check(names)
  if num_examples is not None and num_examples > num_records:
    raise ValueError(
        'num_examples=%d is more than the %d records in %s; each example is '
        'counted once, so use num_examples=%d or fewer'
        % (num_examples, num_records, ', '.join(filenames), num_records))
  if settings.eval_interval_secs < 0:
    raise ValueError('eval_interval_secs must be >= 0, got %r'
                     % (settings.eval_interval_secs,))
  return num_records


def open_model(checkpoint):
  """(reader, the weights' dtype, global step: saved, else in the name, else
  0) of a checkpoint of the CIFAR-10 model, every value read back.

  Raises:
    checkpoints.CheckpointUnreadableError: its files are missing, incomplete
      or damaged.
    checkpoints.CheckpointError: it holds no CIFAR-10 model.
  """
  reader, problem = checkpoints.verified_reader(checkpoint)
  if problem:
    raise checkpoints.CheckpointUnreadableError(
        'cannot read checkpoint %s (pruned by training, not completely '
        'written, or damaged): %s' % (checkpoint, problem))
  missing = checkpoints.missing_model(reader)
  if missing:
    raise checkpoints.CheckpointError(
        'checkpoint %s does not hold the CIFAR-10 model (no %s); point '
        '--checkpoint_dir at a cifar10_train.py --train_dir'
        % (checkpoint, missing))
  dtypes = reader.get_variable_to_dtype_map()
  if reader.has_tensor('global_step'):
    global_step = int(reader.get_tensor('global_step'))
  else:  # Not saved by a training script: take it from the name, if there.
    global_step = checkpoints.step_of(checkpoint) or 0
  return reader, dtypes[checkpoints.MODEL_PROBE], global_step


def check_averages_restorable(reader, var_map, checkpoint):
  """Raises checkpoints.CheckpointError, naming what is missing or of the
  wrong shape, unless a checkpoint has every moving average of var_map
  (key -> variable, as ExponentialMovingAverage.variables_to_restore())."""
  shapes = reader.get_variable_to_shape_map()
  missing = sorted(key for key in var_map if key not in shapes)
  if missing:
    raw_names = [var_map[key].op.name for key in missing]
    if all(name in shapes for name in raw_names):
      raise checkpoints.CheckpointError(
          'checkpoint %s has no moving averages of the weights (no %s): '
          'evaluation uses the averaged weights, which cifar10_train.py '
          'saves; this checkpoint was written without them'
          % (checkpoint, missing[0]))
    raise checkpoints.CheckpointError(
        'checkpoint %s does not match the CIFAR-10 model: missing %s'
        % (checkpoint, ', '.join(missing)))
  for key, var in sorted(var_map.items()):
    if shapes[key] != var.shape.as_list():
      raise checkpoints.CheckpointError(
          'checkpoint %s holds %s with shape %s; the model needs %s'
          % (checkpoint, key, shapes[key], var.shape.as_list()))


def new_checkpoints(checkpoint_dir, run_once, interval_secs,
                    sleep=time.sleep):
  """Yields the newest checkpoint in checkpoint_dir: once with run_once (no
  checkpoint: checkpoints.CheckpointError), else each time a new one appears
  (rewritten under the same name too; the newest only, if several did
  meanwhile), looking every interval_secs and saying what it waits for."""
  last_seen = None
  waiting = False
  while True:
    path = checkpoints.newest(checkpoint_dir)
    if path is None and run_once:
      raise checkpoints.CheckpointError(
          "No checkpoint file found in checkpoint_dir %s (no 'checkpoint' "
          'file listing one): point --checkpoint_dir at the --train_dir of a '
          'training run that has saved a checkpoint' % checkpoint_dir)
    if path is None and not waiting:
      print('No checkpoint file found in %s; waiting for training to write '
            'one (looking every %s s).' % (checkpoint_dir, interval_secs),
            flush=True)
      waiting = True
    elif path is not None:
      try:
        seen = path, tf.io.gfile.stat(path + '.index').mtime_nsec
      except tf.errors.OpError:  # Pruned meanwhile: evaluating it says so.
        seen = path, None
      if seen != last_seen:
        last_seen = seen
        yield path
        print('Waiting for a new checkpoint in %s (looking every %s s).'
              % (checkpoint_dir, interval_secs), flush=True)
        waiting = True
    sleep(interval_secs)
