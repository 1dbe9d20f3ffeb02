"""Reads the CIFAR-10 binary format and builds the queue-based input pipelines.

The binary version of CIFAR-10 stores each example as one fixed-length record:
one label byte (0-9) followed by 3072 pixel bytes, the 1024 red values, then the
1024 green, then the 1024 blue, each plane row-major for a 32x32 image.
CIFAR-100's records have two label bytes (coarse, fine) before the same
pixels; a data set converted from your own pictures has CIFAR-10's layout with
its own classes. Every reader takes the record layout, a data_files.Layout
(CIFAR-10's by default), and the pipelines a data_files.DataSet, which names
the files and the classes as the data directory holds them.

Two readers return the same records (tests/test_input.py):

  read_cifar10        the original's reader, one record per call
                      (tf.FixedLengthRecordReader.read), as a 32x32x3 image;
                      kept, and tested, as the lesson's reader
  read_cifar10_chunk  what both pipelines read with: up to READ_CHUNK records
                      per call (read_up_to), as the colour planes the file
                      stores, so that a queue-runner step preprocesses a
                      chunk, cropping before the only transpose

With a seed (--seed), the training pipeline reads every record into memory
instead, to take them in the seed's order (`_seeded_examples`).

Everything here builds TF1 graph ops (`tf.compat.v1`); call it inside a
`tf.Graph().as_default()` block.
"""

import os

import tensorflow.compat.v1 as tf

from cifar10_support import data_files
from cifar10_support import fast_ops

# Images are cropped from 32x32 to this size; the model is built for it.
IMAGE_SIZE = 24

# CIFAR-10's; a data set's own are its DataSet's (the scripts read those).
NUM_CLASSES = 10
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50000

# Every record's image, in every layout.
HEIGHT, WIDTH, DEPTH = 32, 32, 3

# Threads that run the reader and the preprocessing in parallel.
NUM_PREPROCESS_THREADS = data_files.NUM_PREPROCESS_THREADS  # 16
# Part of an epoch kept in the shuffling queue, so batches mix well.
MIN_FRACTION_OF_EXAMPLES_IN_QUEUE = 0.4
# Records each queue-runner step reads and preprocesses together.
READ_CHUNK = 128


class CIFAR10Record(object):
  """What `read_cifar10` returns: one example and its metadata."""

  height = HEIGHT
  width = WIDTH
  depth = DEPTH

  def __init__(self, key, label, uint8image):
    self.key = key
    self.label = label
    self.uint8image = uint8image


def read_cifar10(filename_queue, layout=data_files.CIFAR10):
  """Reads the next example from a queue of CIFAR-10 files: the original's
  reader, one record per call (the pipelines use `read_cifar10_chunk`).

  Call it N times for N readers running in parallel; each call builds a reader.

  Args:
    filename_queue: a queue of strings with the filenames to read from.
    layout: the files' data_files.Layout.

  Returns:
    A `CIFAR10Record` with:
      height, width, depth: Python ints, 32, 32, 3.
      key: scalar string tensor, "<filename>:<record index>".
      label: int32 tensor of shape [1], the class (0..9 for CIFAR-10).
      uint8image: uint8 tensor of shape [32, 32, 3] (height, width, RGB).
  """
  reader = tf.FixedLengthRecordReader(record_bytes=layout.record_bytes)
  key, value = reader.read(filename_queue)
  labels, planes = _decode(tf.reshape(value, [1]), layout)
  return CIFAR10Record(key, labels[0], tf.transpose(planes[0], [1, 2, 0]))


def _decode(values, layout):
  """Splits 1-D string tensor `values` of `layout`'s records into labels and
  images.

  Returns:
    labels: int32 tensor of [n, 1].
    planes: uint8 tensor of [n, 3, 32, 32], the images as stored: the red,
      green and blue planes, each [row, column].
  """
  return _split(tf.reshape(tf.io.decode_raw(values, tf.uint8),
                           [-1, layout.record_bytes]), layout)


def _split(records, layout):
  """`_decode`'s labels and planes of uint8 records [n, record_bytes]."""
  labels = tf.cast(
      records[:, layout.label_index:layout.label_index + 1], tf.int32)
  planes = tf.reshape(records[:, layout.label_bytes:],
                      [-1, DEPTH, HEIGHT, WIDTH])
  return labels, planes


def read_cifar10_chunk(filename_queue, layout=data_files.CIFAR10):
  """Replaces `read_cifar10` in the pipelines: up to READ_CHUNK records per
  call (tf.FixedLengthRecordReader's read_up_to, not read), as the colour
  planes the files store.

  Args:
    filename_queue: a queue of strings with the filenames to read from.
    layout: the files' data_files.Layout.

  Returns:
    labels: int32 tensor of [n, 1], the classes, n <= READ_CHUNK.
    planes: uint8 tensor of [n, 3, 32, 32], the images as stored: the red,
      green and blue planes, each [row, column].
  """
  reader = tf.FixedLengthRecordReader(record_bytes=layout.record_bytes)
  _, values = reader.read_up_to(filename_queue, READ_CHUNK)
  return _decode(values, layout)


def _random_distort(planes, seed=None):
  """The original's random distortions, drawn independently per image: from
  the op's random state, or with seed (an int64 [2] tensor) as a function of
  the seed and the image's place in planes.

  fast_ops.distort computes what tf.image's per-image ops compute, over the
  whole chunk at once.
  """
  n = tf.shape(planes)[0]
  if seed is None:
    draws = tf.random.uniform([n, 5])
  else:
    draws = tf.random.stateless_uniform([n, 5], seed)
  crops = HEIGHT - IMAGE_SIZE + 1
  # minimum: a draw just below 1 may round up to `crops` in float32.
  offsets = tf.minimum(tf.cast(draws[:, :2] * crops, tf.int32), crops - 1)
  return fast_ops.distort(planes, offsets, flips=draws[:, 2] < 0.5,
                          deltas=draws[:, 3] * 126.0 - 63.0,
                          factors=draws[:, 4] * 1.6 + 0.2,
                          image_size=IMAGE_SIZE)


def _generate_image_and_label_batch(examples, min_queue_examples, batch_size,
                                    shuffle, num_threads,
                                    allow_smaller_final_batch=False):
  """Batches chunks of examples through a (shuffling) queue (the original's
  function, taking a chunk of images and labels).

  Args:
    examples: (images, labels), a chunk: images a 4-D float32 tensor of
      [n, IMAGE_SIZE, IMAGE_SIZE, 3], labels an int32 tensor of [n, 1].
    min_queue_examples: int, examples kept in the queue to draw batches from.
    batch_size: int, images per batch.
    shuffle: bool, whether to shuffle across examples.
    num_threads: int, threads that fill the queue.
    allow_smaller_final_batch: bool, when the input ends, return the
      remaining examples as a last, smaller batch (unshuffled batches only);
      the batch dimension is then None.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].
  """
  capacity = min_queue_examples + 3 * batch_size
  if shuffle:
    image_batch, label_batch = tf.train.shuffle_batch(
        list(examples), batch_size=batch_size, num_threads=num_threads,
        capacity=capacity, min_after_dequeue=min_queue_examples,
        enqueue_many=True)
  else:
    image_batch, label_batch = tf.train.batch(
        list(examples), batch_size=batch_size, num_threads=num_threads,
        capacity=capacity, enqueue_many=True,
        allow_smaller_final_batch=allow_smaller_final_batch)
  tf.summary.image('images', image_batch)
  return image_batch, tf.reshape(
      label_batch, [-1 if allow_smaller_final_batch else batch_size])


def _seeded_examples(data_set, count, batch_size, seed):
  """Step n's batch of a seeded run, as a function of the seed and n alone:
  the examples n * batch_size onwards of the records in a seeded stateless
  permutation per epoch, distorted by draws from (seed, n). n starts at the
  global step when a session starts, so a run resumed from any step sees what
  the unstopped run saw."""
  # All the training records, read when a session starts (a local variable,
  # never saved), so that any of them can be gathered in the seed's order.
  records = tf.Variable(
      tf.concat([tf.reshape(tf.io.decode_raw(tf.io.read_file(path), tf.uint8),
                            [-1, data_set.layout.record_bytes])
                 for path in data_set.paths(data_set.train_files)], 0),
      trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES],
      name='records')
  # Local too, so set from the global step the session restored, at each
  # session's start.
  input_step = tf.Variable(tf.train.get_global_step().read_value(),
                           trainable=False, name='input_step',
                           collections=[tf.GraphKeys.LOCAL_VARIABLES])
  step = input_step.assign_add(1) - 1  # This run's step; the next one's next.
  # count, the records' number, is the caller's check's, not tf.shape(records),
  # which would read (copy) every record each step.
  position = step * batch_size + tf.range(batch_size, dtype=tf.int64)
  # A seed (the run's, the epoch, 0) per position, as a batch may straddle
  # two epochs: tf.random.experimental.index_shuffle's op, whose wrapper
  # pads an [n, 2] seed the wrong way.
  epoch_seeds = tf.stack([tf.fill([batch_size], tf.cast(seed, tf.int64)),
                          position // count, tf.zeros_like(position)], axis=1)
  order = tf.raw_ops.RandomIndexShuffle(index=position % count,
                                        seed=epoch_seeds, max_index=count - 1)
  labels, planes = _split(tf.gather(records, order), data_set.layout)
  draws_seed = tf.stack([tf.cast(seed, tf.int64), step])
  return _random_distort(planes, draws_seed), labels


def distorted_inputs(data_dir, batch_size, num_threads=NUM_PREPROCESS_THREADS,
                     data_set=None, seed=None):
  """Training input: randomly distorted, shuffled batches, built on /cpu:0.

  Preprocessing, in this order: random 24x24 crop, random left-right flip,
  random brightness (max delta 63 on the 0-255 scale), random contrast
  (factor 0.2-1.8), per-image standardization.

  Args:
    data_dir: path to the folder holding data_batch_1.bin .. data_batch_5.bin
      (ignored with data_set).
    batch_size: int, images per batch.
    num_threads: int, threads that read and preprocess.
    data_set: the data_files.DataSet to read its training files; None for
      the CIFAR-10 layout in data_dir.
    seed: None, or an int that makes the batch of global step n a function
      of the seed and n alone (`_seeded_examples`; the records are held in
      memory; num_threads does not apply). Needs the global step, created
      before.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].

  Raises:
    ValueError: if a data file is missing or not whole records (their
      labels are checked where the data is prepared: download.prepare).
  """
  data_set = data_set or data_files.describe_directory(data_dir)
  filenames = data_set.paths(data_set.train_files)
  num_records = data_set.check(data_set.train_files, labels=False)

  # The reader and the preprocessing run on the CPU so that an accelerator
  # only ever sees ready batches.
  with tf.device('/cpu:0'):
    if seed is not None:
      # One thread and a first-in first-out queue: the batches leave in step
      # order, the next ones ready while this step trains.
      with tf.name_scope('data_augmentation'):
        images, labels = _seeded_examples(data_set, num_records,
                                          batch_size, seed)
      return _generate_image_and_label_batch(
          (images, labels), 2 * batch_size, batch_size, shuffle=False,
          num_threads=1)
    filename_queue = tf.train.string_input_producer(filenames)
    with tf.name_scope('data_augmentation'):
      labels, planes = read_cifar10_chunk(filename_queue, data_set.layout)
      # Standardization undoes much of the brightness and contrast changes
      # (tensorflow#1458); they stay because the original trains with them.
      images = _random_distort(planes)
      images.set_shape([None, IMAGE_SIZE, IMAGE_SIZE, DEPTH])

      # 40% of an epoch (20000 images for the real training set) is kept in
      # the queue so that consecutive batches are well mixed.
      min_queue_examples = int(num_records * MIN_FRACTION_OF_EXAMPLES_IN_QUEUE)
      print('Filling queue with %d CIFAR images before starting to train. '
            'This will take a few minutes.' % min_queue_examples)
    return _generate_image_and_label_batch(
        (images, labels), min_queue_examples, batch_size, shuffle=True,
        num_threads=num_threads)


def eval_preprocess(planes):
  """Evaluation's preprocessing: the central crop, standardized.

  Shared by `inputs` and by cifar10_classify.py, so that a picture of one's
  own is seen exactly as a test record is.

  Args:
    planes: uint8 tensor [N, 3, 32, 32], colour planes as the records hold
      them (or float32 holding the same whole numbers).

  Returns:
    float32 tensor [N, IMAGE_SIZE, IMAGE_SIZE, 3].
  """
  # The central 24x24 window, as resize_with_crop_or_pad takes it.
  border = (HEIGHT - IMAGE_SIZE) // 2
  crops = tf.cast(planes[:, :, border:border + IMAGE_SIZE,
                         border:border + IMAGE_SIZE], tf.float32)
  images = tf.transpose(tf.image.per_image_standardization(crops),
                        [0, 2, 3, 1])
  images.set_shape([None, IMAGE_SIZE, IMAGE_SIZE, DEPTH])
  return images


def inputs(eval_data, data_dir, batch_size, num_threads=NUM_PREPROCESS_THREADS,
           single_pass=False, data_set=None):
  """Evaluation input: centrally cropped, standardized, unshuffled batches.

  Args:
    eval_data: 'test' or True for test_batch.bin; 'train_eval' or False for
      the training files.
    data_dir: path to the folder holding the CIFAR-10 binary files (ignored
      with data_set).
    batch_size: int, images per batch.
    num_threads: int, threads that read and preprocess. With more than one the
      order of examples is not deterministic.
    single_pass: bool. False (the original) cycles through the files forever.
      True reads every record exactly once, files in the listed order, then
      raises OutOfRangeError; the last batch holds the remainder, so the
      batch dimension is None. This counts each example once when
      evaluating, and needs tf.local_variables_initializer() (the epoch
      counter is a local variable).
    data_set: the data_files.DataSet to read; None for the CIFAR-10 layout
      in data_dir.

  Returns:
    images: 4-D float32 tensor of [batch_size, IMAGE_SIZE, IMAGE_SIZE, 3].
    labels: 1-D int32 tensor of [batch_size].

  Raises:
    ValueError: on a bad eval_data, or a data file that is missing or not
      whole records (see distorted_inputs).
  """
  data_set = data_set or data_files.describe_directory(data_dir)
  names = data_set.eval_files(eval_data)
  filenames = data_set.paths(names)
  num_records = data_set.check(names, labels=False)

  with tf.device('/cpu:0'):
    with tf.name_scope('input'):
      filename_queue = tf.train.string_input_producer(
          filenames, num_epochs=1 if single_pass else None,
          shuffle=not single_pass)
      labels, planes = read_cifar10_chunk(filename_queue, data_set.layout)
      images = eval_preprocess(planes)
      min_queue_examples = int(num_records * MIN_FRACTION_OF_EXAMPLES_IN_QUEUE)
    return _generate_image_and_label_batch(
        (images, labels), min_queue_examples, batch_size, shuffle=False,
        num_threads=num_threads, allow_smaller_final_batch=single_pass)

