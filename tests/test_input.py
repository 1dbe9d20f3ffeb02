"""Tests for cifar10_input: the reader, both pipelines and the file checks."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10_input
from cifar10_support import data_files
from cifar10_support import fast_ops
from cifar10_support import sessions
import synthetic
from testutil import session_config


def test_both_readers_return_exact_records(tmp_path):
  # One record by hand: label 7, red plane all 10, green 20, blue 30, but
  # pixel (row 1, col 2) whose red is 99; then random pixels, by
  # synthetic.py: a wrong CHW->HWC transpose cannot go unnoticed.
  raw = bytearray([7]) + bytearray([10] * 1024 + [20] * 1024 + [30] * 1024)
  raw[1 + 1 * 32 + 2] = 99
  labels = [9, 3, 0]
  images = np.random.RandomState(1).randint(0, 256, (3, 32, 32, 3))
  filename = str(tmp_path / 'cifar')
  synthetic.write_records(filename, labels, images)
  with open(filename, 'rb') as f:
    records = f.read()
  with open(filename, 'wb') as f:
    f.write(bytes(raw) + records)

  with tf.Graph().as_default():
    queues = [tf.FIFOQueue(10, [tf.string], shapes=()) for _ in range(2)]
    record = cifar10_input.read_cifar10(queues[0])
    # The pipelines' reader: the same records, as stored planes.
    chunk = cifar10_input.read_cifar10_chunk(queues[1])
    with tf.Session(config=session_config()) as sess:
      for queue in queues:
        sess.run(queue.enqueue([filename]))
        sess.run(queue.close())
      results = [sess.run([record.key, record.label, record.uint8image])
                 for _ in range(4)]
      with pytest.raises(tf.errors.OutOfRangeError):
        sess.run(record.key)
      chunk_labels, planes = sess.run(chunk)

  assert (record.height, record.width, record.depth) == (32, 32, 3)
  assert (record.label.dtype, record.uint8image.dtype) == (tf.int32, tf.uint8)
  assert record.uint8image.shape.as_list() == [32, 32, 3]
  (_, label, image), results = results[0], results[1:]
  assert label.tolist() == [7]
  assert image[1, 2].tolist() == [99, 20, 30]
  assert image[0, 0].tolist() == [10, 20, 30]
  for i, (key, label, image) in enumerate(results):
    assert tf.compat.as_text(key) == '%s:%d' % (filename, i + 1)
    assert label.tolist() == [labels[i]]
    np.testing.assert_array_equal(image, images[i])
  assert chunk[0].dtype == tf.int32 and chunk[1].dtype == tf.uint8
  assert chunk_labels.tolist() == [[7]] + [[label] for label in labels]
  np.testing.assert_array_equal(planes[0].reshape(-1), raw[1:])
  np.testing.assert_array_equal(planes[1:], images.transpose(0, 3, 1, 2))


@pytest.fixture(scope='module')
def same_image(tmp_path_factory):
  """(image, batches): every record of every file one 32x32 image of random
  pixels, any window of which is unlike any other."""
  image = np.random.RandomState(3).randint(0, 256, (32, 32, 3)).astype(np.uint8)
  batches = str(tmp_path_factory.mktemp('same_image') / 'cifar-10-batches-bin')
  os.makedirs(batches)
  for name in synthetic.TRAIN_FILES + [synthetic.TEST_FILE]:
    synthetic.write_records(os.path.join(batches, name), np.arange(10),
                            np.repeat(image[None], 10, axis=0))
  return image, batches


def _run_batches(build, num_batches):
  with tf.Graph().as_default():
    images, labels = build()
    with tf.Session(config=session_config()) as sess:
      coord = tf.train.Coordinator()
      threads = tf.train.start_queue_runners(sess=sess, coord=coord)
      try:
        out = [sess.run([images, labels]) for _ in range(num_batches)]
      finally:
        # Each queue runner closes its queue when the coordinator stops.
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
  return images, labels, out


def test_eval_inputs_are_the_standardized_central_crop(same_image):
  image, batches = same_image

  images, labels, out = _run_batches(
      lambda: cifar10_input.inputs('test', batches, batch_size=5), 2)

  assert (images.shape.as_list(), labels.shape.as_list()) == ([5, 24, 24, 3],
                                                              [5])
  assert (images.dtype, labels.dtype) == (tf.float32, tf.int32)
  crop = image[4:28, 4:28].astype(np.float64)
  expected = (crop - crop.mean()) / max(crop.std(), 1 / np.sqrt(crop.size))
  for batch_images, batch_labels in out:
    assert set(batch_labels.tolist()) <= set(range(10))
    for got in batch_images:
      np.testing.assert_allclose(got, expected, atol=1e-4)


def _window_matches(got, image):
  """(row offset, col offset, flipped) of every crop `got` is affine in.

  Brightness, contrast and standardization change each channel by the same
  positive scale plus a per-channel shift, so the red channel of `got`
  correlates perfectly with the red channel of exactly one window.
  """
  matches = []
  red = image[..., 0].astype(np.float64)
  for oy in range(9):
    for ox in range(9):
      window = red[oy:oy + 24, ox:ox + 24]
      for flipped in (False, True):
        candidate = window[:, ::-1] if flipped else window
        corr = np.corrcoef(candidate.ravel(), got[..., 0].ravel())[0, 1]
        if corr > 0.9999:
          matches.append((oy, ox, flipped))
  return matches


def test_distorted_inputs_crop_flip_and_standardize(same_image):
  image, batches = same_image

  images, labels, out = _run_batches(
      lambda: cifar10_input.distorted_inputs(batches, batch_size=32), 2)

  assert images.shape.as_list() == [32, 24, 24, 3]
  assert images.dtype == tf.float32
  assert labels.shape.as_list() == [32]
  windows = []
  for batch_images, _ in out:
    for got in batch_images:
      # Per-image standardization: mean 0, standard deviation 1.
      assert abs(got.mean()) < 1e-4
      assert abs(got.std() - 1.0) < 1e-3
      matches = _window_matches(got, image)
      assert len(matches) == 1, matches
      windows.append(matches[0])
  # 64 random crops and flips: both flip states and many offsets occur.
  assert {flipped for _, _, flipped in windows} == {False, True}
  assert len({(oy, ox) for oy, ox, _ in windows}) > 10


def test_distorted_inputs_mixes_labels_from_all_files(data_dir):
  batches = os.path.join(data_dir, 'cifar-10-batches-bin')
  _, _, out = _run_batches(
      lambda: cifar10_input.distorted_inputs(batches, batch_size=50), 2)
  labels = np.concatenate([batch_labels for _, batch_labels in out])
  assert labels.dtype == np.int32
  assert set(labels.tolist()) == set(range(10))


def test_malformed_data_file_is_a_fast_clear_error(tmp_path):
  # Each problem's message: test_reliability.py's
  # test_bad_data_file_is_named_with_its_problem (check_data_files).
  batches = os.path.join(synthetic.make_data_dir(str(tmp_path), 3),
                         'cifar-10-batches-bin')
  path = os.path.join(batches, 'data_batch_3.bin')
  os.truncate(path, 3 * 3073 - 100)
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match='Data file %s has 9119 bytes, which '
                       'is not a whole number of 3073-byte records' % path):
      cifar10_input.distorted_inputs(batches, batch_size=4)
    # Nothing was built: no queue that could hang.
    assert not tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS)


# The official layout's files (the directory plays no part).
CIFAR10_FILES = data_files.describe('')


@pytest.mark.parametrize('eval_data, files', [
    ('test', ['test_batch.bin']), (True, ['test_batch.bin']),
    ('train_eval', data_files.TRAIN_FILES),
    (False, data_files.TRAIN_FILES),
    # A typo is an error, not the training set.
    ('tset', "eval_data must be 'test' or 'train_eval', got 'tset'")])
def test_eval_files(eval_data, files):
  if isinstance(files, str):
    with pytest.raises(ValueError, match=files):
      CIFAR10_FILES.eval_files(eval_data)
  else:
    assert CIFAR10_FILES.eval_files(eval_data) == files


@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_distort_matches_tf_image_ops_one_image_at_a_time(dtype):
  rng = np.random.RandomState(5)
  images = rng.randint(0, 256, (6, 32, 32, 3)).astype(dtype)
  offsets = rng.randint(0, 9, (6, 2)).astype(np.int32)
  flips = np.array([True, False, True, False, False, True])
  deltas = rng.uniform(-63, 63, 6).astype(np.float32)
  factors = rng.uniform(0.2, 1.8, 6).astype(np.float32)
  with tf.Graph().as_default():
    planes = np.transpose(images, [0, 3, 1, 2])  # as the records store them
    batched = fast_ops.distort(tf.constant(planes), tf.constant(offsets),
                               tf.constant(flips), tf.constant(deltas),
                               tf.constant(factors), cifar10_input.IMAGE_SIZE)
    one_by_one = []
    for i in range(6):
      image = tf.image.crop_to_bounding_box(images[i].astype(np.float32),
                                            offsets[i, 0], offsets[i, 1], 24, 24)
      if flips[i]:
        image = tf.image.flip_left_right(image)
      image = tf.image.adjust_brightness(image, deltas[i])
      image = tf.image.adjust_contrast(image, factors[i])
      one_by_one.append(tf.image.per_image_standardization(image))
    with tf.Session(config=session_config()) as sess:
      got, expected = sess.run([batched, tf.stack(one_by_one)])
  assert got.shape == (6, 24, 24, 3)
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('pipeline', ['train', 'eval'])
def test_pipelines_transpose_floats_only_after_grappler(same_image, pipeline):
  # A uint8 transpose is several times slower than a float32 one of the crop
  # (benchmarks/README.md, change 16), and Grappler would move a transpose
  # to the uint8 side of a bare cast. The graph that actually runs, in the
  # scripts' session configuration, must transpose float32 only.
  batches = same_image[1]
  with tf.Graph().as_default():
    if pipeline == 'train':
      images, _ = cifar10_input.distorted_inputs(batches, 4, num_threads=1)
    else:
      images, _ = cifar10_input.inputs('test', batches, 4, num_threads=1)
    filenames, batcher = tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS)
    options = tf.RunOptions(output_partition_graphs=True, timeout_in_ms=30000)
    metadata = tf.RunMetadata()
    with tf.Session(config=sessions.session_config()) as sess:
      sess.run(tf.local_variables_initializer())
      coord = tf.train.Coordinator()
      # Only the file names are fed: one chunk is read, preprocessed and
      # enqueued by hand, into a queue with room for it.
      threads = filenames.create_threads(sess, coord, start=True)
      sess.run(batcher.enqueue_ops[0], options=options,
               run_metadata=metadata)
      coord.request_stop()
      coord.join(threads)
  transposes = [node.attr['T'].type
                for graph in metadata.partition_graphs for node in graph.node
                if node.op.endswith('Transpose')]
  assert images.shape.as_list() == [4, 24, 24, 3]
  assert transposes and set(transposes) == {tf.float32.as_datatype_enum}
