"""Turns a folder of your own pictures into a data set the scripts read.

    python cifar10_make_dataset.py ~/pictures --data_dir=/tmp/my_data
    python cifar10_train.py --data_dir=/tmp/my_data

PICTURES holds a folder per class, its pictures at any depth in it
(PICTURES/<class>/...), and the converter holds out --test_fraction of each
class for testing; or PICTURES/train/<class>/... and PICTURES/test/<class>/...,
a split of your own, kept as it is. Classes are the folders' names, labelled
0, 1, ... in sorted order. Each PNG, JPEG, BMP or GIF picture becomes a
32x32 record as cifar10_classify.py sees pictures (cifar10_support/pictures),
and the records are written, shuffled, in CIFAR-10's binary layout:

    DATA_DIR/cifar-10-batches-bin/data_batch_1.bin ...  10,000 records each
    DATA_DIR/cifar-10-batches-bin/test_batch.bin
    DATA_DIR/cifar-10-batches-bin/batches.meta.txt      the class names

The same tree gives the same bytes on every run. Bad input (a missing
folder, an empty class, a file that is not a picture, a data set already
there without --overwrite) gets one line each and exit status 1, and
DATA_DIR is left as it was. More in docs/own_pictures.md.
"""

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
import os
import shutil
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf

from cifar10_support import data_files
from cifar10_support import pictures
from cifar10_support import signals

FLAGS = flags.FLAGS

# cifar10.py's --data_dir where one process imports both (the tests do).
if 'data_dir' not in FLAGS:
  flags.DEFINE_string('data_dir', None,
                      'Write the data set here, as DATA_DIR/cifar-10-batches-'
                      'bin/ (give the trainers the same --data_dir).')
  flags.mark_flag_as_required('data_dir')
flags.DEFINE_float('test_fraction', 0.2,
                   'Without PICTURES/train and PICTURES/test, the share of '
                   'each class held out for the test records (rounded to '
                   'whole pictures), between 0 and 1.')
flags.DEFINE_boolean('skip_bad_files', False,
                     'Leave out files that are not pictures (each is still '
                     'named) instead of stopping.')
flags.DEFINE_boolean('overwrite', False,
                     'Replace a data set already in --data_dir (in one step, '
                     'once the new one is written).')
flags.register_validator('test_fraction', lambda value: 0 < value < 1,
                         message='--test_fraction must be between 0 and 1 '
                         '(both excluded)')

# Shuffling and holding out are seeded: the same tree, the same bytes.
SEED = 20261126
RECORDS_PER_FILE = 10000
DECODE_BATCH = 256  # pictures decoded in one session.run
PROGRESS_SECONDS = 2
LAYOUT = data_files.CIFAR10


class DatasetError(ValueError):
  """Input that cannot be converted, naming the path and what was expected."""


def _visible(names):
  return sorted(name for name in names if not name.startswith('.'))


def find_pictures(folder):
  """(pictures, other files): sorted paths at any depth, hidden ones out."""
  found, others = [], []
  for parent, folders, files in os.walk(folder):
    folders[:] = _visible(folders)  # Pruned: os.walk does not enter them.
    for name in _visible(files):
      path = os.path.join(parent, name)
      (found if pictures.is_picture_name(name) else others).append(path)
  return sorted(found), sorted(others)


def find_classes(folder):
  """(class names, each class's picture paths, the other files)."""
  entries = _visible(os.listdir(folder))
  names = [n for n in entries if os.path.isdir(os.path.join(folder, n))]
  others = [os.path.join(folder, n) for n in entries if n not in names]
  if not names:
    raise DatasetError('%s holds no class folder; expected a folder per '
                       'class, its pictures in it (%s/<class>/...)'
                       % (folder, folder))
  if len(names) > data_files.MAX_CLASSES:
    raise DatasetError('%s holds %d class folders; expected at most %d (a '
                       'record\'s label is one byte)'
                       % (folder, len(names), data_files.MAX_CLASSES))
  per_class = []
  for name in names:
    path = os.path.join(folder, name)
    if name.splitlines() != [name] or name.strip() != name:
      raise DatasetError(
          '%r: a class folder\'s name cannot hold a line break or start or '
          'end with a blank (batches.meta.txt holds one class name a line); '
          'expected a one-line name: rename the folder' % path)
    try:
      name.encode('utf-8')
    except UnicodeEncodeError:
      raise DatasetError('%r: a class folder\'s name must be UTF-8 text (it '
                         'is written to batches.meta.txt); rename the folder'
                         % path) from None
    found, not_pictures = find_pictures(path)
    if not found:
      raise DatasetError('%s holds no picture; expected at least one %s file '
                         'in each class folder (at any depth)'
                         % (path, ', '.join(pictures.IMAGE_EXTENSIONS)))
    per_class.append(found)
    others.extend(not_pictures)
  return names, per_class, others


def plan(root, test_fraction):
  """(names, train, test, others, own_split): (path, label)s, in write order."""
  if not os.path.isdir(root):
    raise DatasetError('%s: no such folder; expected a folder of class '
                       'folders (%s/<class>/...)' % (root, root))
  rng = np.random.RandomState(SEED)
  top = _visible(os.listdir(root))
  own_split = 'train' in top and 'test' in top and all(
      os.path.isdir(os.path.join(root, n)) for n in ('train', 'test'))
  if own_split:
    if top != ['test', 'train']:
      raise DatasetError(
          '%s holds train/ and test/ beside %s; expected either train/ and '
          'test/ alone (a split of your own) or only class folders'
          % (root, ', '.join(n for n in top if n not in ('train', 'test'))))
    splits = [find_classes(os.path.join(root, n)) for n in ('train', 'test')]
    if splits[0][0] != splits[1][0]:
      only = [sorted(set(a[0]) - set(b[0])) for a, b in (splits, splits[::-1])]
      raise DatasetError(
          '%s/train and %s/test hold different class folders (only in '
          'train/: %s; only in test/: %s); expected the same classes in both'
          % (root, root, ', '.join(only[0]) or 'none',
             ', '.join(only[1]) or 'none'))
    names = splits[0][0]
    train, test = [[(path, label) for label, paths in enumerate(per_class)
                    for path in paths] for _, per_class, _ in splits]
    others = splits[0][2] + splits[1][2]
  else:
    names, per_class, others = find_classes(root)
    train, test = [], []
    for label, (paths, name) in enumerate(zip(per_class, names)):
      count = int(len(paths) * test_fraction + 0.5)  # rounded
      if count in (0, len(paths)):
        raise DatasetError(
            '%s: %s of its %d pictures would be held out for testing at '
            '--test_fraction=%g; expected a class with enough pictures for '
            'both splits (add pictures, or change --test_fraction)'
            % (os.path.join(root, name), 'none' if count == 0 else 'all',
               len(paths), test_fraction))
      order = rng.permutation(len(paths))
      test.extend((paths[i], label) for i in order[:count])
      train.extend((paths[i], label) for i in order[count:])
  return (names, [train[i] for i in rng.permutation(len(train))],
          [test[i] for i in rng.permutation(len(test))], others, own_split)


def decoded_records(items, decode_run, progress):
  """Yields uint8 [n, 3073] records (label, R, G and B planes) of (path,
  label) `items`; progress(n, ['path: reason' of each non-picture]) after."""
  for start in range(0, len(items), DECODE_BATCH):
    batch = items[start:start + DECODE_BATCH]
    outcomes = [pictures.read(path) for path, _ in batch]
    try:
      planes = decode_run([data for problem, data in outcomes if not problem])
    except tf.errors.InvalidArgumentError:
      # A file does not decode: decoding each alone finds which.
      pictures.mark_undecodable([path for path, _ in batch], outcomes,
                                lambda data: decode_run([data]))
      planes = decode_run([data for problem, data in outcomes if not problem])
    labels = [label for (_, label), (problem, _) in zip(batch, outcomes)
              if not problem]
    progress(len(batch), [problem for problem, _ in outcomes if problem])
    yield np.concatenate([np.array(labels, np.uint8)[:, None], planes], 1)


def write_records(record_arrays, directory, file_names, per_file):
  """Writes per_file records a file; returns the int64 [256] count per label."""
  per_label, names, f = np.zeros(256, np.int64), iter(file_names), None
  try:
    for records in record_arrays:
      per_label += np.bincount(records[:, 0], minlength=256)
      while len(records):
        if f is None or f.tell() == per_file * LAYOUT.record_bytes:
          if f:
            f.close()
          f = open(os.path.join(directory, next(names)), 'wb')
        room = per_file - f.tell() // LAYOUT.record_bytes
        f.write(records[:room].tobytes())
        records = records[room:]
  finally:
    if f:
      f.close()
  return per_label


def _print(line, bad=False):
  print('%s: %s' % (os.path.basename(sys.argv[0]), line) if bad else line,
        file=sys.stderr if bad else sys.stdout, flush=True)


def convert(root, data_dir, test_fraction=0.2, skip_bad_files=False,
            overwrite=False, log=_print):
  """Writes root's pictures as a data set in data_dir; returns its DataSet.

  log(line) gets the start, progress and left-out lines; log(line, bad=True)
  each file that is not a picture. DatasetError, data_dir left as it was,
  for input that cannot be converted (bad files too, unless skip_bad_files).
  """
  target = os.path.join(data_dir, LAYOUT.batches_dir)
  if os.path.exists(target) and not overwrite:
    raise DatasetError('%s exists already (a data set); expected a new '
                       '--data_dir, or --overwrite to replace it' % target)
  names, train, test, others, own_split = plan(root, test_fraction)
  total, done, last, bad = len(train) + len(test), 0, time.time(), []
  log('Converting %d pictures in %s (%s; %s) into %s.' % (
      total, root, data_files.describe_classes(names),
      'train/ and test/ as given' if own_split else
      '%g of each class held out for testing' % test_fraction, target))
  if others:
    log('Left out %d file%s that %s not a picture in a class folder (no %s '
        'extension), e.g. %s' % (
            len(others), 's' if len(others) > 1 else '',
            'are' if len(others) > 1 else 'is',
            ', '.join(pictures.IMAGE_EXTENSIONS), others[0]))

  def progress(count, problems):
    nonlocal done, last
    done += count
    for problem in problems:
      bad.append(problem)
      log(('skipped %s' if skip_bad_files else '%s') % problem, bad=True)
    if time.time() - last >= PROGRESS_SECONDS and done < total:
      last = time.time()
      log('Converted %d of %d pictures.' % (done, total))

  os.makedirs(data_dir, exist_ok=True)
  partial = tempfile.mkdtemp(prefix='.%s.partial-' % LAYOUT.batches_dir,
                             dir=data_dir)
  try:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(partial, 0o777 & ~umask)  # mkdtemp's 0700 is for its own use.
    with tf.Graph().as_default() as graph:
      encoded = tf.placeholder(tf.string, [None])
      planes = tf.reshape(
          tf.transpose(pictures.decode_batch(encoded), [0, 3, 1, 2]),
          [-1, data_files.IMAGE_BYTES])
    with tf.Session(graph=graph) as sess:
      decode_run = sess.make_callable(planes, [encoded])
      for split, items, file_names, per_file in (
          ('training', train, data_files.train_files(
              len(train) // RECORDS_PER_FILE + 1), RECORDS_PER_FILE),
          ('test', test, LAYOUT.test_files, len(test))):
        per_label = write_records(decoded_records(items, decode_run, progress),
                                  partial, file_names, per_file)
        empty = [n for n, count in zip(names, per_label) if not count]
        if empty and not (bad and not skip_bad_files):
          raise DatasetError('class %s has no picture that TensorFlow can '
                             'read in the %s split; expected at least one'
                             % (empty[0], split))
    if bad and not skip_bad_files:
      raise DatasetError(
          '%d file%s above %s not a picture TensorFlow can read; nothing '
          'written to %s (expected PNG, JPEG, BMP or GIF pictures; '
          '--skip_bad_files leaves such files out)'
          % (len(bad), 's' if len(bad) > 1 else '',
             'are' if len(bad) > 1 else 'is', data_dir))
    with open(os.path.join(partial, LAYOUT.names_file), 'wb') as f:
      f.write(data_files.class_names_text(names))
    replacing = os.path.exists(target)
    if replacing:  # Aside just before: a kill between leaves it whole.
      os.rename(target, partial + '.old')
    os.rename(partial, target)  # Fails if one appeared since (not empty).
    if replacing:
      shutil.rmtree(partial + '.old')
  finally:
    shutil.rmtree(partial, ignore_errors=True)
  return data_files.describe(data_dir)


@signals.script_main(arguments=True)
def main(argv):
  if len(argv) != 2:
    raise app.UsageError('Give one folder of pictures: cifar10_make_dataset.py '
                         'PICTURES --data_dir=DIR')
  try:
    dataset = convert(argv[1], FLAGS.data_dir, FLAGS.test_fraction,
                      FLAGS.skip_bad_files, overwrite=FLAGS.overwrite)
  except BrokenPipeError:
    raise  # Output closed: main's wrapper ends the process quietly.
  except (DatasetError, OSError) as e:
    sys.exit('%s: %s' % (os.path.basename(sys.argv[0]), e))
  print('Wrote %s: %s; %d training records in %d file%s, %d test records.' % (
      dataset.directory, dataset.describe_classes(),
      dataset.records(dataset.train_files), len(dataset.train_files),
      's' if len(dataset.train_files) > 1 else '',
      dataset.records(dataset.test_files)), flush=True)


if __name__ == '__main__':
  app.run(main)
