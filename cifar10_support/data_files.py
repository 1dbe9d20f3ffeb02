"""The CIFAR-10 binary data files' names, record layout and check, shared by
the download and cifar10_input (which keeps these names and describes them)."""

import numpy as np
import tensorflow.compat.v1 as tf

LABEL_BYTES = 1
HEIGHT, WIDTH, DEPTH = 32, 32, 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3073

# The ten classes, in label order (batches.meta.txt of the download).
CLASS_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
               'horse', 'ship', 'truck')

# Threads that read and preprocess, for each input pipeline by default.
NUM_PREPROCESS_THREADS = 16

TRAIN_FILES = ['data_batch_%d.bin' % i for i in range(1, 6)]
TEST_FILES = ['test_batch.bin']


class DataError(ValueError):
  """A data file or the archive is missing or malformed (the message says)."""


def check_data_files(filenames, check_labels=True):
  """The number of records in `filenames`; DataError naming the file, the
  problem and what was expected unless each holds whole CIFAR-10 records (of
  label 0-9, with check_labels). Checked before a queue would hang or fail
  mid-training on it, or a bad label surface deep in TF (on a GPU, never)."""
  total = 0
  for filename in filenames:
    if not tf.io.gfile.exists(filename):
      raise DataError('Failed to find file: %s (expected a CIFAR-10 binary '
                      'file of %d-byte records; see README.md, "Data")'
                      % (filename, RECORD_BYTES))
    size = tf.io.gfile.stat(filename).length
    if size == 0:
      raise DataError('Data file %s is empty (0 bytes); expected a whole '
                      'number of %d-byte records' % (filename, RECORD_BYTES))
    if size % RECORD_BYTES:
      raise DataError(
          'Data file %s has %d bytes, which is not a whole number of %d-byte '
          'records (%d records and %d bytes left over): the file is truncated '
          'or not CIFAR-10 binary data; delete it and extract it again'
          % (filename, size, RECORD_BYTES, size // RECORD_BYTES,
             size % RECORD_BYTES))
    total += size // RECORD_BYTES
    if not check_labels:
      continue
    if '://' in filename:
      with tf.io.gfile.GFile(filename, 'rb') as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8)[::RECORD_BYTES]
    else:
      # Mapped rather than read: ten times faster (no copy of the whole file).
      mapped = np.memmap(filename, dtype=np.uint8, mode='r')
      labels = np.array(mapped[::RECORD_BYTES])
      del mapped
    bad = np.flatnonzero(labels >= len(CLASS_NAMES))
    if bad.size:
      record = int(bad[0])
      raise DataError(
          'Data file %s, record %d (byte offset %d): label byte is %d, '
          'expected 0-%d (%d records in the file have a bad label): the file '
          'is corrupt or not CIFAR-10 binary data (CIFAR-100 has two label '
          'bytes)' % (filename, record, record * RECORD_BYTES, labels[record],
                      len(CLASS_NAMES) - 1, bad.size))
  return total


def check_batch_size(batch_size):
  """Raises ValueError unless batch_size is a positive int."""
  if not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError('batch_size must be a positive integer, got %r'
                     % (batch_size,))


def eval_files(eval_data):
  """The files of 'test' (or True) or 'train_eval' (or False); ValueError for
  anything else, so that a typo never evaluates on the training set."""
  if eval_data is True or eval_data == 'test':
    return TEST_FILES
  if eval_data is False or eval_data == 'train_eval':
    return TRAIN_FILES
  raise ValueError("eval_data must be 'test' or 'train_eval', got %r"
                   % (eval_data,))
