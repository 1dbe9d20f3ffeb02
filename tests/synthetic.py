"""Writes small CIFAR-10 binary files for tests and benchmarks.

The real reader then runs on them exactly as on the download, without one.
"""

import os

import numpy as np

TRAIN_FILES = ['data_batch_%d.bin' % i for i in range(1, 6)]
TEST_FILE = 'test_batch.bin'


def encode_records(labels, images):
  """CIFAR-10 binary bytes for `labels` [N] and uint8 HWC `images` [N,32,32,3]."""
  labels = np.asarray(labels, dtype=np.uint8).reshape(-1, 1)
  images = np.asarray(images, dtype=np.uint8)
  planes = images.transpose(0, 3, 1, 2).reshape(len(labels), -1)  # HWC -> CHW
  return np.concatenate([labels, planes], axis=1).tobytes()


def read_records(path):
  """Labels uint8 [N] and HWC images uint8 [N,32,32,3] of a CIFAR-10 file."""
  records = np.fromfile(path, np.uint8).reshape(-1, 3073)
  return records[:, 0], records[:, 1:].reshape(-1, 3, 32, 32).transpose(
      0, 2, 3, 1)


def write_records(path, labels, images):
  with open(path, 'wb') as f:
    f.write(encode_records(labels, images))


def class_colors():
  """Ten RGB colours whose channel profiles survive per-image standardization.

  Standardization removes an image's mean and scale, so grey levels would all
  look alike; these colours differ in the *shape* of their (R, G, B) profile:
  ten angles around the circle of zero-sum directions.
  """
  e1 = np.array([1.0, -1.0, 0.0]) / np.sqrt(2.0)
  e2 = np.array([1.0, 1.0, -2.0]) / np.sqrt(6.0)
  angles = 2 * np.pi * np.arange(10) / 10
  return 128 + 100 * (np.outer(np.cos(angles), e1) + np.outer(np.sin(angles), e2))


def visible_label_images(labels, rng, noise=12):
  """uint8 [N,32,32,3] images whose colour tells their label."""
  colors = class_colors()[np.asarray(labels)]
  images = colors[:, None, None, :] + rng.normal(0, noise, (len(labels), 32, 32, 3))
  return np.clip(np.round(images), 0, 255).astype(np.uint8)


def make_own_data_dir(root, class_names, train_records=(40, 20),
                      test_records=30, seed=0):
  """Writes a data set of one's own in CIFAR-10's layout, as
  cifar10_make_dataset.py does: root/cifar-10-batches-bin/ with one
  data_batch_N.bin per entry of train_records, test_batch.bin and
  batches.meta.txt naming class_names (at most 10: each class's images take
  a colour of class_colors that tells it).

  Returns:
    root, the data_dir to pass to the scripts.
  """
  rng = np.random.RandomState(seed)
  batches = os.path.join(root, 'cifar-10-batches-bin')
  os.makedirs(batches, exist_ok=True)
  n = len(class_names)
  files = ['data_batch_%d.bin' % (i + 1) for i in range(len(train_records))]
  for name, records in zip(files + [TEST_FILE],
                           list(train_records) + [test_records]):
    labels = rng.permutation(np.arange(records) % n)
    write_records(os.path.join(batches, name), labels,
                  visible_label_images(labels * (10 // n), rng))
  with open(os.path.join(batches, 'batches.meta.txt'), 'w',
            encoding='utf-8') as f:
    f.write('\n'.join(class_names) + '\n')
  return root


def make_data_dir(root, records_per_file=20, seed=0):
  """Writes root/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin.

  Labels cycle through 0..9 (shuffled per file); each image's colour shows its
  label, so a model can learn them in a few dozen steps.

  Returns:
    root, the data_dir to pass to the scripts.
  """
  rng = np.random.RandomState(seed)
  batches = os.path.join(root, 'cifar-10-batches-bin')
  os.makedirs(batches, exist_ok=True)
  for name in TRAIN_FILES + [TEST_FILE]:
    labels = rng.permutation(np.arange(records_per_file) % 10)
    write_records(os.path.join(batches, name), labels,
                  visible_label_images(labels, rng))
  return root
