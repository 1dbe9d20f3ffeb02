"""An evaluation run beyond the lesson: its settings, following training.

cifar10_eval.py's main builds one `EvalSettings` from its flags
(`from_flags`); tests and the benchmark build it directly, naming only what
they change:

    eval_run.EvalSettings(data_dir, num_examples=20, batch_size=8)

cifar10_eval.evaluate loops over `new_checkpoints`, which looks in the
training run's directory every interval and yields each new checkpoint once
(the newest only, if several appeared meanwhile), saying on the console what
it waits for; `restore` says in one line that a checkpoint was pruned or is
incomplete when read, which evaluate then skips.
"""

import collections
import contextlib
import os
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import precision
from cifar10_support import run_flags
from cifar10_support import sessions


EvalSettings = collections.namedtuple('EvalSettings', [
    'data_dir', 'eval_data', 'num_examples', 'batch_size', 'run_once',
    'eval_interval_secs', 'session_config', 'input_threads',
    'compute_dtype', 'until_step'],
                                          defaults=('test', 10000, 128, False,
                                                    300, None, 1, None, None))
EvalSettings.__doc__ = """The settings of an evaluation (the flag of the same
name where there is one; the defaults are the flags').

  data_dir: str, the folder holding `cifar-10-batches-bin/`.
  eval_data: 'test' or 'train_eval'.
  num_examples: int, examples to count, at most the records in the files.
  batch_size: int, examples per batch; any value counts the same examples.
  run_once: bool, evaluate the newest checkpoint and return (else follow
    training).
  eval_interval_secs: int, seconds between looks for a new checkpoint.
  session_config: tf.ConfigProto; None for sessions.eval_config(), which
    grows GPU memory as needed.
  input_threads: int, input threads; 1 keeps the file order.
  compute_dtype: None, or tf.bfloat16 / tf.float16 to compute the forward
    pass in (cifar10.inference) from float32 weights; a float16 checkpoint
    computes in float16 whatever this says.
  until_step: int or None; following training, stop once a checkpoint at
    this global step or past it is evaluated (the distributed evaluator:
    --max_steps). None follows for ever.
"""


def from_flags(flag_values):
  """The EvalSettings of cifar10_eval.py's parsed flags, but for
  session_config and compute_dtype: they ask TensorFlow about the machine,
  so main sets them after the data check."""
  return EvalSettings(
      data_dir=flag_values.data_dir, eval_data=flag_values.eval_data,
      num_examples=flag_values.num_examples,
      batch_size=flag_values.batch_size, run_once=flag_values.run_once,
      eval_interval_secs=flag_values.eval_interval_secs)


def from_flags_checked(flag_values):
  """`from_flags`, once the data is there and checked, for this machine.

  Downloads the eval_data files if missing, checks the settings and files
  (`check_settings`), prints the 'Data: ...' line, then sets what asks
  TensorFlow about the machine: compute_dtype (--mixed_precision, on a GPU
  when there is one) and session_config (the thread flags).

  Raises:
    ValueError: naming the flag or file at fault (data_files.DataError for a
      file).
  """
  settings = from_flags(flag_values)
  files = data_files.eval_files(settings.eval_data)
  download.maybe_download_and_extract(
      flag_values.data_dir, flag_values.data_url, flag_values.data_md5,
      files=files)
  records = check_settings(settings)
  print(download.data_check_message(flag_values.data_dir, files, records))
  return settings._replace(
      compute_dtype=precision.compute_dtype_for_this_machine(
          flag_values.mixed_precision, sessions.has_gpu()),
      session_config=sessions.eval_config(run_flags.threads(flag_values)))


def check_settings(settings):
  """Checks an EvalSettings and its data files before any graph is built.

  Returns:
    The number of records in the eval_data files, an int.

  Raises:
    ValueError: naming the setting or file and the expected value
      (data_files.DataError for a file).
  """
  filenames = [os.path.join(settings.data_dir, download.BATCHES_DIR, name)
               for name in data_files.eval_files(settings.eval_data)]
  num_examples = settings.num_examples
  if not isinstance(num_examples, int) or num_examples < 1:
    raise ValueError('num_examples must be a positive integer, got %r'
                     % (num_examples,))
  data_files.check_batch_size(settings.batch_size)
  num_records = data_files.check_data_files(filenames)
  if num_examples > num_records:
    raise ValueError(
        'num_examples=%d is more than the %d records in %s; each example is '
        'counted once, so use num_examples=%d or fewer'
        % (num_examples, num_records, ', '.join(filenames), num_records))
  if settings.eval_interval_secs < 0:
    raise ValueError('eval_interval_secs must be >= 0, got %r'
                     % (settings.eval_interval_secs,))
  return num_records


def for_weights(settings, checkpoint_path, weights_dtype):
  """The settings to evaluate a checkpoint with: compute_dtype None, with a
  note, when its weights are not float32 (a --use_fp16 checkpoint computes
  in float16 whatever --mixed_precision says)."""
  if settings.compute_dtype is None or weights_dtype == tf.float32:
    return settings
  print('Note: %s holds %s weights (--use_fp16): --mixed_precision does '
        'not apply, the model computes in %s.'
        % (checkpoint_path, weights_dtype.name, weights_dtype.name),
        flush=True)
  return settings._replace(compute_dtype=None)


@contextlib.contextmanager
def queue_runners(sess):
  """Runs the graph's queue runners (its input) for the block, then stops
  them and waits for their threads."""
  coord = tf.train.Coordinator()
  threads = tf.train.start_queue_runners(sess=sess, coord=coord)
  try:
    yield
  finally:
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=10)


def restore(saver, sess, checkpoint_path):
  """saver.restore, with a checkpoint that cannot be read said in one line.

  Raises:
    checkpoints.CheckpointUnreadableError: the checkpoint was pruned by
      training, is not completely written, or is damaged.
  """
  try:
    saver.restore(sess, checkpoint_path)
  except tf.errors.OpError as e:
    raise checkpoints.CheckpointUnreadableError(
        'cannot restore checkpoint %s (pruned by training, not '
        'completely written, or damaged): %s'
        % (checkpoint_path, e.message.splitlines()[0]))


def newest_checkpoint(checkpoint_dir):
  """The newest checkpoint in checkpoint_dir, and what identifies it.

  Returns:
    (path, identity), or (None, None) when there is none. The identity
    includes the index file's modification time, so a checkpoint rewritten
    under the same name (training restarted) counts as new.
  """
  path = checkpoints.newest(checkpoint_dir)
  if path is None:
    return None, None
  try:
    mtime = tf.io.gfile.stat(path + '.index').mtime_nsec
  except tf.errors.OpError:
    mtime = None
  return path, (path, mtime)


def new_checkpoints(checkpoint_dir, run_once, interval_secs,
                    sleep=time.sleep):
  """Yields the newest checkpoint's path, once or each time a new one appears.

  Looks in checkpoint_dir every interval_secs and says on the console what
  it waits for; a checkpoint rewritten under the same name (training
  restarted) counts as new. The caller evaluates each path it is given and
  stops when it has what it wants (with run_once, after the first).

  Args:
    checkpoint_dir: the training run's train_dir.
    run_once: bool, yield the newest checkpoint only; none there is an error.
    interval_secs: seconds between looks at checkpoint_dir.
    sleep: called with interval_secs to wait (tests replace it).

  Raises:
    checkpoints.CheckpointError: no checkpoint with run_once.
  """
  last_identity = None
  waiting = False
  while True:
    path, identity = newest_checkpoint(checkpoint_dir)
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
    elif path is not None and identity != last_identity:
      last_identity = identity
      yield path
      print('Waiting for a new checkpoint in %s (looking every %s s).'
            % (checkpoint_dir, interval_secs), flush=True)
      waiting = True
    sleep(interval_secs)
