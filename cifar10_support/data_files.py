"""The data sets' binary files: their layouts, what a data directory holds
(`describe`), and the check of its records, shared by the download, the
scripts and cifar10_input (which describes CIFAR-10's layout where it is
handed no DataSet).

A data set is described by its data, never by constants: its class names
from the names file beside the records (CIFAR-10's names where an old copy
lacks it), its training files as found (`data_batch_1.bin` ... as many as
there are, for CIFAR-10's layout, which cifar10_make_dataset.py writes too).
"""

import collections
import os
import re

import numpy as np
import tensorflow.compat.v1 as tf

LABEL_BYTES = 1
HEIGHT, WIDTH, DEPTH = 32, 32, 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3073

# Threads that read and preprocess, for each input pipeline by default.
NUM_PREPROCESS_THREADS = 16

# CIFAR-10's ten classes, in label order (batches.meta.txt of the download).
CLASS_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
               'horse', 'ship', 'truck')


def train_files(count):
  """The names of CIFAR-10's layout's first `count` training files,
  data_batch_1.bin ... (the download has 5; a converted set as many as it
  needs)."""
  return ['data_batch_%d.bin' % i for i in range(1, count + 1)]


TRAIN_FILES = train_files(5)
TEST_FILES = ['test_batch.bin']

# One label byte, so at most 256 classes in CIFAR-10's layout.
MAX_CLASSES = 256


class Layout(collections.namedtuple('Layout', [
    'dataset', 'title', 'batches_dir', 'train_files', 'test_files',
    'label_limits', 'label_index', 'names_file', 'default_names'])):
  """How one data set's files are laid out in its directory of --data_dir.

  dataset: the --dataset value; title: its name in messages; train_files and
  test_files: the official archive's names (CIFAR-10's layout reads
  data_batch_N.bin, as many as there are); label_limits: for each label byte
  of a record, the classes it may name; label_index: the byte that is the
  label; names_file: the class names, one per line, UTF-8; default_names:
  the names where that file is missing.
  """

  @property
  def label_bytes(self):
    return len(self.label_limits)

  @property
  def record_bytes(self):
    return self.label_bytes + IMAGE_BYTES


CIFAR100_FINE_CLASSES = 100
CIFAR100_COARSE_CLASSES = 20

LAYOUTS = collections.OrderedDict((layout.dataset, layout) for layout in (
    Layout('cifar10', 'CIFAR-10', 'cifar-10-batches-bin', tuple(TRAIN_FILES),
           tuple(TEST_FILES), (MAX_CLASSES,), 0, 'batches.meta.txt',
           CLASS_NAMES),
    Layout('cifar100', 'CIFAR-100', 'cifar-100-binary', ('train.bin',),
           ('test.bin',), (CIFAR100_COARSE_CLASSES, CIFAR100_FINE_CLASSES), 1,
           'fine_label_names.txt',
           tuple('class_%d' % i for i in range(CIFAR100_FINE_CLASSES))),
    Layout('cifar100_coarse', 'CIFAR-100 (coarse labels)', 'cifar-100-binary',
           ('train.bin',), ('test.bin',),
           (CIFAR100_COARSE_CLASSES, CIFAR100_FINE_CLASSES), 0,
           'coarse_label_names.txt',
           tuple('class_%d' % i for i in range(CIFAR100_COARSE_CLASSES)))))
DATASETS = tuple(LAYOUTS)
CIFAR10 = LAYOUTS['cifar10']

# The names train_files gives.
_NUMBERED_TRAIN_FILE = re.compile(r'data_batch_([1-9][0-9]*)\.bin$')


class DataError(ValueError):
  """A data file or the archive is missing or malformed (the message says)."""


class DataSet(collections.namedtuple('DataSet', [
    'layout', 'directory', 'train_files', 'test_files', 'class_names'])):
  """What a data directory holds (`describe`): its Layout, the `directory`
  of its files, the names of its training and test files, and its class
  names in label order (a tuple of str)."""

  @property
  def num_classes(self):
    return len(self.class_names)

  def paths(self, names):
    return [os.path.join(self.directory, name) for name in names]

  def eval_files(self, eval_data):
    """The file names of 'test' (or True) or 'train_eval' (or False);
    ValueError for anything else, so that a typo never evaluates on the
    training set."""
    if eval_data is True or eval_data == 'test':
      return list(self.test_files)
    if eval_data is False or eval_data == 'train_eval':
      return list(self.train_files)
    raise ValueError("eval_data must be 'test' or 'train_eval', got %r"
                     % (eval_data,))

  def records(self, names):
    """The records in the files `names`, counted from their sizes (0 for a
    missing file); `check` verifies them."""
    total = 0
    for path in self.paths(names):
      if tf.io.gfile.exists(path):
        total += tf.io.gfile.stat(path).length // self.layout.record_bytes
    return total

  def check(self, names, labels=True):
    """The number of records in the files `names`, once each is checked
    (whole records and, with `labels`, every label byte in range);
    DataError naming the file and what was expected otherwise."""
    return check_data_files(self.paths(names), labels, layout=self.layout,
                            num_classes=self.num_classes)

  def describe_classes(self):
    return describe_classes(self.class_names)


def describe_classes(class_names):
  """'3 classes (cat, dog, seven)': the first ten names, for many."""
  names = ', '.join(class_names[:10])
  if len(class_names) > 10:
    names += ', ...'
  return '%d class%s (%s)' % (len(class_names),
                              'es' if len(class_names) != 1 else '', names)


def describe(data_dir, dataset='cifar10'):
  """The DataSet of --dataset `dataset` in `data_dir` (the folder holding
  e.g. cifar-10-batches-bin/), read from its files: nothing is checked but
  the names file (`check` the records); missing files keep the official
  names, so that the check names what is missing."""
  layout = LAYOUTS[dataset]
  return describe_directory(os.path.join(data_dir, layout.batches_dir), layout)


def describe_directory(directory, layout=CIFAR10):
  """The DataSet of `layout`'s files in `directory` itself (see
  `describe`)."""
  found = layout.train_files
  if layout is CIFAR10:
    numbers = []
    if tf.io.gfile.isdir(directory):
      for name in tf.io.gfile.listdir(directory):
        match = _NUMBERED_TRAIN_FILE.match(name)
        if match:
          numbers.append(int(match.group(1)))
    if numbers:
      # A gap leaves its name in, for the check to report it missing.
      found = tuple(train_files(max(numbers)))
  names = read_class_names(os.path.join(directory, layout.names_file))
  return DataSet(layout, directory, found, layout.test_files,
                 names or layout.default_names)


def read_class_names(path):
  """The class names in a names file (one per line, UTF-8, surrounding
  blanks and trailing empty lines ignored), or None if there is no file;
  DataError if it is unreadable or names no class, an empty one, one twice
  or more than MAX_CLASSES."""
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
  names = [line.strip() for line in text.splitlines()]
  while names and not names[-1]:
    names.pop()
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
  """The contents of a names file for `names`: one per line, UTF-8."""
  return ('\n'.join(names) + '\n').encode('utf-8')


def check_data_files(filenames, check_labels=True, layout=CIFAR10,
                     num_classes=len(CLASS_NAMES)):
  """The number of records in `filenames`; DataError naming the file, the
  problem and what was expected unless each holds whole records of `layout`
  (with check_labels, each label byte in range: the label below
  num_classes). Checked before a queue would hang or fail mid-training on
  it, or a bad label surface deep in TF (on a GPU, never)."""
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
  record_bytes = layout.record_bytes
  if '://' in filename:
    with tf.io.gfile.GFile(filename, 'rb') as f:
      records = np.frombuffer(f.read(), dtype=np.uint8)
  else:
    # Mapped rather than read: no copy of the whole file.
    records = np.memmap(filename, dtype=np.uint8, mode='r')
  records = records.reshape(-1, record_bytes)
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
        % (filename, record, record * record_bytes, which, labels[record],
           limit - 1, bad.size, layout.title, limit, hint))
