"""One value for the settings of a training run, built from the flags once.

Every trainer's main() builds it from its parsed flags,

    settings = run_settings.from_flags(FLAGS, compute_dtype=...)

and hands it to the script's `train`, which reads what it needs from it;
tests and the benchmark build it directly, naming only what they change:

    run_settings.TrainSettings(data_dir, train_dir, max_steps=20)
"""

import collections

from cifar10_support import data_files
from cifar10_support import run_flags
from cifar10_support import sessions

TrainSettings = collections.namedtuple('TrainSettings', [
    'data_dir', 'train_dir', 'max_steps', 'batch_size', 'use_fp16',
    'log_frequency', 'log_device_placement', 'fresh_start',
    'save_checkpoint_secs', 'save_checkpoint_steps', 'save_summaries_steps',
    'threads', 'input_threads', 'compute_dtype'], defaults=(
        100000, 128, False, 10, False, False, 600, None, 100,
        sessions.BY_RULE, data_files.NUM_PREPROCESS_THREADS, None))
TrainSettings.__doc__ = """The settings of one training run (the flag of the
same name where there is one; the defaults are the flags').

  data_dir: str, the folder holding `cifar-10-batches-bin/`.
  train_dir: str, where checkpoints and summaries go, and are resumed from.
  max_steps: int, the global step at which training stops.
  batch_size: int, images per step (per tower, per worker).
  use_fp16: bool, float16 variables and activations (the original's flag).
  log_frequency: int, steps between console lines.
  log_device_placement: bool, log where each op runs.
  fresh_start: bool, delete train_dir's contents first instead of resuming.
  save_checkpoint_secs: int, seconds between checkpoints.
  save_checkpoint_steps: int or None, steps between checkpoints; when set,
    instead of save_checkpoint_secs.
  save_summaries_steps: int, steps between summary writes; 0 for none.
  threads: sessions.ThreadCounts, the sessions' thread counts.
  input_threads: int, the input pipeline's preprocessing threads
    (NUM_PREPROCESS_THREADS by default).
  compute_dtype: None (float32), or tf.bfloat16 or tf.float16 for mixed
    precision (cifar10_support.precision); checkpoints are float32 either way.
"""


def from_flags(flag_values, compute_dtype=None):
  """The TrainSettings the training flags every trainer defines give.

  Args:
    flag_values: the parsed absl flags (in a script's main).
    compute_dtype: the mixed-precision dtype main chose for this machine.
  """
  return TrainSettings(
      data_dir=flag_values.data_dir, train_dir=flag_values.train_dir,
      max_steps=flag_values.max_steps, batch_size=flag_values.batch_size,
      use_fp16=flag_values.use_fp16, log_frequency=flag_values.log_frequency,
      log_device_placement=flag_values.log_device_placement,
      fresh_start=flag_values.fresh_start,
      save_checkpoint_secs=flag_values.save_checkpoint_secs,
      save_checkpoint_steps=flag_values.save_checkpoint_steps or None,
      save_summaries_steps=flag_values.save_summaries_steps,
      threads=run_flags.threads(flag_values),
      compute_dtype=compute_dtype)
