"""The data sets' binary files: layouts, a directory's DataSet, their check."""

import collections
import os
import re

import numpy as np
import tensorflow.compat.v1 as tf

HEIGHT, WIDTH, DEPTH = 32, 32, 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
RECORD_BYTES = 1 + IMAGE_BYTES  # CIFAR-10's: one label byte.
MAX_CLASSES = 256  # What one label byte can name.
NUM_PREPROCESS_THREADS = 16  # For each input pipeline, by default.
# CIFAR-10's ten classes, in label order (batches.meta.txt of the download).
CLASS_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
               'horse', 'ship', 'truck')


def train_files(count):
  """CIFAR-10's layout's first `count` training files, data_batch_1.bin ..."""
  return ['data_batch_%d.bin' % i for i in range(1, count + 1)]


TRAIN_FILES = train_files(5)
TEST_FILES = ['test_batch.bin']


class Layout(collections.namedtuple('Layout', [
    'dataset', 'title', 'batches_dir', 'train_files', 'test_files',
    'label_limits', 'label_index', 'names_file', 'default_names'])):
  """One data set's files in its directory of --data_dir: `title` in messages;
  the official archive's file names; `label_limits`, for each label byte of a
  record, the classes it may name; `label_index`, the byte that is the label;
  `names_file` (one name per line, UTF-8), else the `default_names`."""

  @property
  def label_bytes(self):
    return len(self.label_limits)

  @property
  def record_bytes(self):
    return self.label_bytes + IMAGE_BYTES


LAYOUTS = collections.OrderedDict((layout.dataset, layout) for layout in (
    Layout('cifar10', 'CIFAR-10', 'cifar-10-batches-bin', tuple(TRAIN_FILES),
           tuple(TEST_FILES), (MAX_CLASSES,), 0, 'batches.meta.txt',
           CLASS_NAMES),
    Layout('cifar100', 'CIFAR-100', 'cifar-100-binary', ('train.bin',),
           ('test.bin',), (20, 100), 1, 'fine_label_names.txt',
           tuple('class_%d' % i for i in range(100))),
    Layout('cifar100_coarse', 'CIFAR-100 (coarse labels)', 'cifar-100-binary',
           ('train.bin',), ('test.bin',), (20, 100), 0,
           'coarse_label_names.txt', tuple('class_%d' % i for i in range(20)))))
DATASETS = tuple(LAYOUTS)
CIFAR10 = LAYOUTS['cifar10']


class DataError(ValueError):
  """A data file or the archive is missing or malformed (the message says)."""


class DataSet(collections.namedtuple('DataSet', [
    'layout', 'directory', 'train_files', 'test_files', 'class_names'])):
  """What a data directory holds (`describe`): its Layout, `directory`, the
  names of its files, and its class names in label order (a tuple of str)."""

  @property
  def num_classes(self):
    return len(self.class_names)

  def paths(self, names):
    return [os.path.join(self.directory, name) for name in names]

  def eval_files(self, eval_data):
    """The file names of 'test' (or True) or 'train_eval' (or False);
    ValueError otherwise: a typo never evaluates on the training set."""
    if eval_data is True or eval_data == 'test':
      return list(self.test_files)
    if eval_data is False or eval_data == 'train_eval':
      return list(self.train_files)
    raise ValueError("eval_data must be 'test' or 'train_eval', got %r"
                     % (eval_data,))

  def records(self, names):
    """The records in the files `names`, from their sizes (0 if missing)."""
    return sum(tf.io.gfile.stat(path).length // self.layout.record_bytes
               for path in self.paths(names) if tf.io.gfile.exists(path))

  def check(self, names, labels=True):
    """check_data_files of the files `names`, against its classes."""
    return check_data_files(self.paths(names), labels, layout=self.layout,
                            num_classes=self.num_classes)

  def describe_classes(self):
    return describe_classes(self.class_names)


def describe_classes(class_names):
  """'3 classes (cat, dog, seven)': the first ten names, for many."""
  count = len(class_names)
  return '%d class%s (%s%s)' % (count, 'es' if count != 1 else '',
                                ', '.join(class_names[:10]),
                                ', ...' if count > 10 else '')


def describe(data_dir, dataset='cifar10'):
  """The DataSet of --dataset `dataset` in `data_dir`, by its files: its names
  file's classes, and for CIFAR-10's layout data_batch_1.bin up to the highest
  N there. Only the names file is checked: the check names missing files."""
  layout = LAYOUTS[dataset]
  return describe_directory(os.path.join(data_dir, layout.batches_dir), layout)


def describe_directory(directory, layout=CIFAR10):
  """The DataSet of `layout`'s files in `directory` itself."""
  found = layout.train_files
  if layout is CIFAR10 and tf.io.gfile.isdir(directory):
    matches = [re.match(r'data_batch_([1-9][0-9]*)\.bin$', name)
               for name in tf.io.gfile.listdir(directory)]
    numbers = [int(match.group(1)) for match in matches if match]
    if numbers:  # A gap stays in, for the check to report it missing.
      found = tuple(train_files(max(numbers)))
  names = read_class_names(os.path.join(directory, layout.names_file))
  return DataSet(layout, directory, found, layout.test_files,
                 names or layout.default_names)


def read_class_names(path):
  """The class names in a names file (surrounding blanks and trailing empty
  lines ignored), or None if there is no file; DataError if it is
  unreadable or names no class, an empty one, one twice or too many."""
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, 'rb') as f:
      text = f.read().decode('utf-8-sig')
  except UnicodeDecodeError as e:
    raise DataError('Class names file %s is not UTF-8 text (%s); expected '
                    'one class name per line' % (path, e.reason))
  except tf.errors.OpError as e:
    raise DataError('Cannot read class names file %s: %s' % (path, e.message))
  names = [line.strip() for line in text.rstrip().splitlines()]
  if not names:
    raise DataError('Class names file %s names no class; expected one class '
                    'name per line, in label order' % path)
  if '' in names:
    raise DataError('Class names file %s has an empty line %d among its '
                    'names; expected one class name per line, in label '
                    'order' % (path, names.index('') + 1))
  repeated = sorted(set(n for n in names if names.count(n) > 1))
  if repeated:
    raise DataError('Class names file %s names %r more than once; each class '
                    'needs a name of its own' % (path, repeated[0]))
  if len(names) > MAX_CLASSES:
    raise DataError('Class names file %s names %d classes; a label byte '
                    'holds at most %d' % (path, len(names), MAX_CLASSES))
  return tuple(names)


def class_names_text(names):
  """The contents of a names file for `names`."""
  return ('\n'.join(names) + '\n').encode('utf-8')


def check_data_files(filenames, check_labels=True, layout=CIFAR10,
                     num_classes=len(CLASS_NAMES)):
  """The number of records in `filenames`; DataError naming the file, the
  problem and what was expected unless each holds whole records of `layout`
  (with check_labels, each label byte in range, the label below
  num_classes): a queue would hang on it, a GPU never name a bad label."""
  record_bytes = layout.record_bytes
  total = 0
  for filename in filenames:
    if not tf.io.gfile.exists(filename):
      raise DataError('Failed to find file: %s (expected a %s binary file of '
                      '%d-byte records; see README.md, "Data")'
                      % (filename, layout.title, record_bytes))
    size = tf.io.gfile.stat(filename).length
    if size == 0:
      raise DataError('Data file %s is empty (0 bytes); expected a whole '
                      'number of %d-byte records' % (filename, record_bytes))
    if size % record_bytes:
      raise DataError(
          'Data file %s has %d bytes, which is not a whole number of %d-byte '
          'records (%d records and %d bytes left over): the file is truncated '
          'or not %s binary data; delete it and extract it again'
          % (filename, size, record_bytes, size // record_bytes,
             size % record_bytes, layout.title))
    total += size // record_bytes
    if check_labels:
      _check_labels(filename, layout, num_classes)
  return total


def _check_labels(filename, layout, num_classes):
  if '://' in filename:
    with tf.io.gfile.GFile(filename, 'rb') as f:
      records = np.frombuffer(f.read(), dtype=np.uint8)
  else:  # Mapped rather than read: no copy of the whole file.
    records = np.memmap(filename, dtype=np.uint8, mode='r')
  records = records.reshape(-1, layout.record_bytes)
  for index, limit in enumerate(layout.label_limits):
    if index == layout.label_index:
      limit = num_classes
    labels = np.array(records[:, index])
    bad = np.flatnonzero(labels >= limit)
    if not bad.size:
      continue
    record = int(bad[0])
    which = ('label byte' if layout.label_bytes == 1 else
             '%s label byte' % ('coarse', 'fine')[index])
    hint = (' (CIFAR-100 has two label bytes: --dataset=cifar100)'
            if layout is CIFAR10 and limit == len(CLASS_NAMES) else '')
    raise DataError(
        'Data file %s, record %d (byte offset %d): %s is %d, expected 0-%d '
        '(%d records in the file have a bad label): the file is corrupt, or '
        'not %s binary data of %d classes%s'
        % (filename, record, record * layout.record_bytes, which,
           labels[record], limit - 1, bad.size, layout.title, limit, hint))
