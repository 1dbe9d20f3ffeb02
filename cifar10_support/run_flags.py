"""The flags every script has beyond the original's (cifar10.py's), checks
absl cannot make (app.UsageError), and the settings of a training run."""

import collections

from absl import app
from absl import flags

from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import mixed_precision
from cifar10_support import sessions

TrainSettings = collections.namedtuple('TrainSettings', [
    'data_dir', 'train_dir', 'max_steps', 'batch_size', 'use_fp16',
    'log_frequency', 'log_device_placement', 'fresh_start',
    'save_checkpoint_secs', 'save_checkpoint_steps', 'save_summaries_steps',
    'threads', 'input_threads', 'compute_dtype', 'dataset', 'seed'],
    defaults=(100000, 128, False, 10, False, False, 600, 0, 100,
              sessions.BY_RULE, data_files.NUM_PREPROCESS_THREADS, None,
              'cifar10', None))
TrainSettings.__doc__ = """The settings of one training run: the flag of the
same name where there is one; batch_size per tower and per worker;
save_checkpoint_steps None as 0; threads a sessions.ThreadCounts;
compute_dtype None (float32), tf.bfloat16 or tf.float16."""

TRAIN_DEFAULTS = TrainSettings(data_dir=None, train_dir=None)


flags.DEFINE_enum('dataset', TRAIN_DEFAULTS.dataset, list(data_files.DATASETS),
                  'The data set in --data_dir: cifar10 (its layout, '
                  'cifar-10-batches-bin/, also holds your own pictures as '
                  'cifar10_make_dataset.py writes them), cifar100 (the 100 '
                  'fine labels of cifar-100-binary/) or cifar100_coarse (its '
                  '20 superclasses).')


def _official(field):
  """'<cifar10's> for cifar10, <cifar100's> for cifar100 and cifar100_coarse'
  of a download.ARCHIVES field."""
  datasets = {}
  for dataset, archive in download.ARCHIVES.items():
    datasets.setdefault(getattr(archive, field), []).append(dataset)
  return ', '.join('%s for %s' % (value, ' and '.join(names))
                   for value, names in datasets.items())


flags.DEFINE_string('data_url', None,
                    'Where to get --dataset\'s archive when a file it reads '
                    'in --data_dir is missing or incomplete: an http(s) URL '
                    'of a mirror, or a file:// URL or path of a copy you '
                    'already have. Default: the official archive of '
                    '--dataset: %s.' % _official('url'))
flags.DEFINE_string('data_md5', None,
                    'MD5 of the archive at --data_url; empty (--data_md5=) '
                    'to skip the check. Default: the official archive\'s of '
                    '--dataset: %s.' % _official('md5'))
flags.DEFINE_enum('mixed_precision', 'off', ['off', 'bf16'],
                  'bf16: compute convolutions and matrix products in '
                  'bfloat16, keeping variables, loss, gradients and '
                  'checkpoints float32. Needs a CPU with AVX512_BF16 or AMX '
                  '(elsewhere one line says so and the run stays float32), '
                  'or a GPU: bfloat16 from compute capability 8.0, float16 '
                  'with dynamic loss scaling before it.')
flags.DEFINE_integer('num_intra_threads', None,
                     'Threads each op may use (TensorFlow\'s intra-op pool); '
                     '0 = TensorFlow\'s choice (one per core). Unset: '
                     'TensorFlow\'s choice.', lower_bound=0)
flags.DEFINE_integer('num_inter_threads', None,
                     'Ops that may run at once (the inter-op pool); 0 = '
                     'TensorFlow\'s choice. Unset: 1 (one op at a time) on a '
                     'machine without a GPU and with at most %d usable cores '
                     'and one tower, else TensorFlow\'s choice.'
                     % sessions.ONE_OP_AT_A_TIME_MAX_CORES, lower_bound=0)


def define_train_flags():
  """Defines the flags every trainer takes beyond cifar10.py's, once, though
  one process may import several trainers."""
  if 'train_dir' in flags.FLAGS:
    return
  default = TRAIN_DEFAULTS
  flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                      'Directory where to write event logs and checkpoint.')
  flags.DEFINE_integer('max_steps', default.max_steps,
                       'Number of batches to run.', lower_bound=1)
  flags.DEFINE_boolean('log_device_placement', default.log_device_placement,
                       'Whether to log device placement.')
  flags.DEFINE_integer('log_frequency', default.log_frequency,
                       'How often to log results to the console.',
                       lower_bound=1)
  flags.DEFINE_boolean('fresh_start', default.fresh_start,
                       'Delete what is in --train_dir (checkpoints and '
                       'events) and train from step 0 instead of resuming.')
  flags.DEFINE_integer('save_checkpoint_secs', default.save_checkpoint_secs,
                       'Seconds between checkpoints (one is also written at '
                       'the start and at the end).', lower_bound=1)
  flags.DEFINE_integer('save_summaries_steps', default.save_summaries_steps,
                       'Global steps between TensorBoard summaries (one is '
                       'also written after the first step and at the last); 0 '
                       'writes none.', lower_bound=0)
  flags.DEFINE_integer('save_checkpoint_steps', default.save_checkpoint_steps,
                       'If positive, write a checkpoint every this many steps '
                       'instead of every --save_checkpoint_secs.',
                       lower_bound=0)
  flags.DEFINE_integer('seed', None,
                       'If set, the initial weights and every step\'s batch '
                       'are this seed\'s: the same flags, data and machine '
                       'write the same checkpoints, run after run and across '
                       'a stop (docs/training.md#seed).', lower_bound=0,
                       upper_bound=2**63 - 1)


def define_checkpoint_dir_flag():
  """Defines --checkpoint_dir once; the eval and classify scripts share it."""
  if 'checkpoint_dir' not in flags.FLAGS:
    flags.DEFINE_string('checkpoint_dir', '/tmp/cifar10_train',
                        'Directory where to read model checkpoints: the '
                        'training run\'s --train_dir.')


def given(flag_values):
  """{name: '--name=value'} of the flags the command line set."""
  return {flag_values[name].name: flag_values[name].serialize()
          for name in flag_values if flag_values[name].present}


def threads(flag_values):
  """The sessions.ThreadCounts of parsed flag values."""
  return sessions.ThreadCounts(flag_values.num_intra_threads,
                               flag_values.num_inter_threads)


def check_flag_writable_dir(name, path):
  """Creates directory `path`, flag --`name`, if needed; app.UsageError if
  it is unwritable. Remote paths ('gs://...') are left to TensorFlow."""
  if not path:
    raise app.UsageError('--%s must name a directory' % name)
  problem = None if '://' in path else download.writable_dir_problem(path)
  if problem:
    raise app.UsageError('--%s=%s is not a writable directory: %s'
                         % (name, path, problem))


def from_flags(flag_values, gpu=True, check_train_dir=True):
  """The TrainSettings of a trainer's parsed flags, once --train_dir is known
  writable; gpu False: the model runs on the CPU even beside a GPU."""
  if check_train_dir:
    check_flag_writable_dir('train_dir', flag_values.train_dir)
  compute_dtype = mixed_precision.compute_dtype_for_this_machine(
      flag_values.mixed_precision, gpu and sessions.visible_gpus(),
      flag_values.use_fp16)
  fields = {name: getattr(flag_values, name) for name in TrainSettings._fields
            if name in flag_values}
  return TrainSettings(threads=threads(flag_values),
                       compute_dtype=compute_dtype, **fields)
