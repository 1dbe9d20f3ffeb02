"""Reads the CIFAR-10 binary format and builds the queue-based input pipelines.

The binary version of CIFAR-10 stores each example as one fixed-length record:
one label byte (0-9) followed by 3072 pixel bytes, the 1024 red values, then the
1024 green, then the 1024 blue, each plane row-major for a 32x32 image.

Everything here builds TF1 graph ops (`tf.compat.v1`); call it inside a
`tf.Graph().as_default()` block.
"""

import os

import tensorflow.compat.v1 as tf

# Images are cropped from 32x32 to this size; the model is built for it.
IMAGE_SIZE = 24

NUM_CLASSES = 10
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50000
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = 10000

# Record layout of the binary files.
LABEL_BYTES = 1
HEIGHT, WIDTH, DEPTH = 32, 32, 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3073

TRAIN_FILES = ['data_batch_%d.bin' % i for i in range(1, 6)]
TEST_FILES = ['test_batch.bin']

# Threads that run the reader and the preprocessing in parallel.
NUM_PREPROCESS_THREADS = 16
# Part of an epoch kept in the shuffling queue, so batches mix well.
MIN_FRACTION_OF_EXAMPLES_IN_QUEUE = 0.4


class CIFAR10Record(object):
  """What `read_cifar10` returns: one example and its metadata."""

  height = HEIGHT
  width = WIDTH
  depth = DEPTH

  def __init__(self, key, label, uint8image):
    self.key = key
    self.label = label
    self.uint8image = uint8image


def check_data_files(filenames):
  """Checks that each file exists and holds whole CIFAR-10 records.

  Done in Python before any queue is built: a reader queue over a missing or
  truncated file would hang or fail mid-training instead of saying why.

  Args:
    filenames: list of paths to CIFAR-10 binary files.

  Returns:
    The total number of records in the files, an int.

  Raises:
    ValueError: naming the file, its size and what was expected.
  """
  total = 0
  for filename in filenames:
    if not tf.io.gfile.exists(filename):
      raise ValueError('Failed to find file: %s (expected a CIFAR-10 binary file '
                       'of %d-byte records; see README.md, "Data")'
                       % (filename, RECORD_BYTES))
    size = tf.io.gfile.stat(filename).length
    if size == 0:
      raise ValueError('Data file %s is empty (0 bytes); expected a whole number '
                       'of %d-byte records' % (filename, RECORD_BYTES))
    if size % RECORD_BYTES:
      raise ValueError(
          'Data file %s has %d bytes, which is not a whole number of %d-byte '
          'records (%d records and %d bytes left over): the file is truncated '
          'or not CIFAR-10 binary data; delete it and extract it again'
          % (filename, size, RECORD_BYTES, size // RECORD_BYTES,
             size % RECORD_BYTES))
    total += size // RECORD_BYTES
  return total


def read_cifar10(filename_queue):
  """Reads the next example from a queue of CIFAR-10 files.

  Call it N times for N readers running in parallel; each call builds a reader.

  Args:
    filename_queue: a queue of strings with the filenames to read from.

  Returns:
    A `CIFAR10Record` with:
      height, width, depth: Python ints, 32, 32, 3.
      key: scalar string tensor, "<filename>:<record index>".
      label: int32 tensor of shape [1], the class in 0..9.
      uint8image: uint8 tensor of shape [32, 32, 3] (height, width, RGB).
  """
  reader = tf.FixedLengthRecordReader(record_bytes=RECORD_BYTES)
  key, value = reader.read(filename_queue)
  record = tf.io.decode_raw(value, tf.uint8)

  label = tf.cast(tf.strided_slice(record, [0], [LABEL_BYTES]), tf.int32)
  # Stored plane by plane (CHW); the model wants channels last (HWC).
  planes = tf.reshape(tf.strided_slice(record, [LABEL_BYTES], [RECORD_BYTES]),
                      [DEPTH, HEIGHT, WIDTH])
  uint8image = tf.transpose(planes, [1, 2, 0])
  return CIFAR10Record(key, label, uint8image)


def _generate_image_and_label_batch(image, label, min_queue_examples,
                                    batch_size, shuffle, num_threads):
  """Batches single examples through a (shuffling) queue.

  Args:
    image: 3-D float32 tensor of [IMAGE_SIZE, IMAGE_SIZE, 3].
    label: 1-D int32 tensor of [1].
    min_queue_examples: int, examples kept in the queue to draw batches from.
    batch_size: int, images per batch.
    shuffle: bool, whether to shuffle across examples.
    num_threads: int, threads that fill the queue.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].
  """
  capacity = min_queue_examples + 3 * batch_size
  if shuffle:
    images, label_batch = tf.train.shuffle_batch(
        [image, label], batch_size=batch_size, num_threads=num_threads,
        capacity=capacity, min_after_dequeue=min_queue_examples)
  else:
    images, label_batch = tf.train.batch(
        [image, label], batch_size=batch_size, num_threads=num_threads,
        capacity=capacity)
  tf.summary.image('images', images)
  return images, tf.reshape(label_batch, [batch_size])


def _check_batch_size(batch_size):
  if not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError('batch_size must be a positive integer, got %r'
                     % (batch_size,))


def distorted_inputs(data_dir, batch_size, num_threads=NUM_PREPROCESS_THREADS):
  """Training input: randomly distorted, shuffled batches, built on /cpu:0.

  Preprocessing, in this order: random 24x24 crop, random left-right flip,
  random brightness (max delta 63 on the 0-255 scale), random contrast
  (factor 0.2-1.8), per-image standardization.

  Args:
    data_dir: path to the folder holding data_batch_1.bin .. data_batch_5.bin.
    batch_size: int, images per batch.
    num_threads: int, threads that read and preprocess.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].

  Raises:
    ValueError: if a data file is missing or malformed, or batch_size < 1.
  """
  _check_batch_size(batch_size)
  filenames = [os.path.join(data_dir, f) for f in TRAIN_FILES]
  num_records = check_data_files(filenames)

  # The reader and the preprocessing run on the CPU so that an accelerator
  # only ever sees ready batches.
  with tf.device('/cpu:0'):
    filename_queue = tf.train.string_input_producer(filenames)
    with tf.name_scope('data_augmentation'):
      record = read_cifar10(filename_queue)
      image = tf.cast(record.uint8image, tf.float32)
      image = tf.image.random_crop(image, [IMAGE_SIZE, IMAGE_SIZE, DEPTH])
      image = tf.image.random_flip_left_right(image)
      # Standardization below undoes much of these two (tensorflow#1458);
      # they stay because the original tutorial trains with them.
      image = tf.image.random_brightness(image, max_delta=63)
      image = tf.image.random_contrast(image, lower=0.2, upper=1.8)
      image = tf.image.per_image_standardization(image)
      image.set_shape([IMAGE_SIZE, IMAGE_SIZE, DEPTH])
      record.label.set_shape([1])

      # 40% of an epoch (20000 images for the real training set) is kept in
      # the queue so that consecutive batches are well mixed.
      min_queue_examples = int(num_records * MIN_FRACTION_OF_EXAMPLES_IN_QUEUE)
      print('Filling queue with %d CIFAR images before starting to train. '
            'This will take a few minutes.' % min_queue_examples)
    return _generate_image_and_label_batch(
        image, record.label, min_queue_examples, batch_size, shuffle=True,
        num_threads=num_threads)


def eval_files(eval_data):
  """Maps `eval_data` to the files it names.

  Args:
    eval_data: 'test' (or True) for the test set; 'train_eval' (or False) for
      the training set.

  Returns:
    A list of file names inside the data directory.

  Raises:
    ValueError: for any other value, so that a typo never evaluates on the
      training set by accident.
  """
  if eval_data is True or eval_data == 'test':
    return TEST_FILES
  if eval_data is False or eval_data == 'train_eval':
    return TRAIN_FILES
  raise ValueError("eval_data must be 'test' or 'train_eval', got %r"
                   % (eval_data,))


def inputs(eval_data, data_dir, batch_size, num_threads=NUM_PREPROCESS_THREADS):
  """Evaluation input: centrally cropped, standardized, unshuffled batches.

  Args:
    eval_data: 'test' or True for test_batch.bin; 'train_eval' or False for
      the five training files.
    data_dir: path to the folder holding the CIFAR-10 binary files.
    batch_size: int, images per batch.
    num_threads: int, threads that read and preprocess. With more than one the
      order of examples is not deterministic.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].

  Raises:
    ValueError: on a bad eval_data or batch_size, or a missing or malformed
      data file.
  """
  _check_batch_size(batch_size)
  filenames = [os.path.join(data_dir, f) for f in eval_files(eval_data)]
  num_records = check_data_files(filenames)

  with tf.device('/cpu:0'):
    with tf.name_scope('input'):
      filename_queue = tf.train.string_input_producer(filenames)
      record = read_cifar10(filename_queue)
      image = tf.cast(record.uint8image, tf.float32)
      image = tf.image.resize_with_crop_or_pad(image, IMAGE_SIZE, IMAGE_SIZE)
      image = tf.image.per_image_standardization(image)
      image.set_shape([IMAGE_SIZE, IMAGE_SIZE, DEPTH])
      record.label.set_shape([1])
      min_queue_examples = int(num_records * MIN_FRACTION_OF_EXAMPLES_IN_QUEUE)
    return _generate_image_and_label_batch(
        image, record.label, min_queue_examples, batch_size, shuffle=False,
        num_threads=num_threads)
