"""One value for the settings of a training run: a trainer's main() builds
it from the flags (`from_flags`), tests and the benchmark directly, naming
what they change: run_settings.TrainSettings(data_dir, train_dir, max_steps=20).
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
TrainSettings.__doc__ = """The settings of one training run: the flag of the
same name where there is one (the defaults are the flags'), batch_size per
tower and per worker; save_checkpoint_steps None for none (then
save_checkpoint_secs); threads a sessions.ThreadCounts; input_threads the
input pipeline's; compute_dtype None (float32), tf.bfloat16 or tf.float16
(precision.py)."""


def from_flags(flag_values, compute_dtype=None):
  """The TrainSettings of the training flags every trainer defines, with the
  mixed-precision dtype main chose."""
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
