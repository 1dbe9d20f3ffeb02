"""Small CIFAR-10 and CIFAR-100 binary files, and archives of the official
shape, for tests and benchmarks: the real reader runs on them."""

import os
import tarfile

import numpy as np

TRAIN_FILES = ['data_batch_%d.bin' % i for i in range(1, 6)]
TEST_FILE = 'test_batch.bin'
CIFAR100_DIR = 'cifar-100-binary'


def write_records(path, labels, images):
  """Writes CIFAR records of `labels` [N] (or CIFAR-100's coarse and fine,
  [N, 2]) and uint8 HWC `images` [N,32,32,3]."""
  images = np.asarray(images, dtype=np.uint8)
  labels = np.asarray(labels, dtype=np.uint8).reshape(len(images), -1)
  planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # HWC -> CHW
  with open(path, 'wb') as f:
    f.write(np.concatenate([labels, planes], axis=1).tobytes())


def read_records(path, label_bytes=1):
  """Labels uint8 [N] (or [N, label_bytes]) and HWC images uint8
  [N,32,32,3] of a CIFAR-10 (or, label_bytes=2, a CIFAR-100) file."""
  records = np.fromfile(path, np.uint8).reshape(-1, label_bytes + 3072)
  labels = records[:, 0] if label_bytes == 1 else records[:, :label_bytes]
  return labels, records[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(
      0, 2, 3, 1)


def class_colors(num_classes=10):
  """num_classes RGB colours that survive per-image standardization (unlike
  grey levels): angles around the zero-sum directions."""
  e1 = np.array([1.0, -1.0, 0.0]) / np.sqrt(2.0)
  e2 = np.array([1.0, 1.0, -2.0]) / np.sqrt(6.0)
  angles = 2 * np.pi * np.arange(num_classes) / num_classes
  return 128 + 100 * (np.outer(np.cos(angles), e1) +
                      np.outer(np.sin(angles), e2))


def visible_label_images(labels, rng, noise=12, num_classes=10):
  """uint8 [N,32,32,3] images whose colour tells their label."""
  colors = class_colors(num_classes)[np.asarray(labels)]
  images = colors[:, None, None, :] + rng.normal(
      0, noise, (len(labels), 32, 32, 3))
  return np.clip(np.round(images), 0, 255).astype(np.uint8)


def make_own_data_dir(root, class_names=None, train_records=(40, 20),
                      test_records=30, seed=0):
  """Writes root/cifar-10-batches-bin/ (returns root, a data_dir): a
  data_batch_N.bin per train_records entry and test_batch.bin, labels
  cycling (shuffled per file), each class's images a colour; given
  class_names (at most 10), a batches.meta.txt as cifar10_make_dataset.py
  writes, else CIFAR-10's classes."""
  rng = np.random.RandomState(seed)
  batches = os.path.join(root, 'cifar-10-batches-bin')
  os.makedirs(batches, exist_ok=True)
  n = len(class_names or range(10))
  files = ['data_batch_%d.bin' % (i + 1) for i in range(len(train_records))]
  for name, records in zip(files + [TEST_FILE],
                           list(train_records) + [test_records]):
    labels = rng.permutation(np.arange(records) % n)
    write_records(os.path.join(batches, name), labels,
                  visible_label_images(labels * (10 // n), rng))
  if class_names:
    with open(os.path.join(batches, 'batches.meta.txt'), 'w',
              encoding='utf-8') as f:
      f.write('\n'.join(class_names) + '\n')
  return root


def make_data_dir(root, records_per_file=20, seed=0):
  """make_own_data_dir of CIFAR-10's six files, records_per_file each."""
  return make_own_data_dir(root, None, (records_per_file,) * 5,
                           records_per_file, seed)


def make_cifar100_dir(root, records=100, seed=0, test_records=None):
  """Writes root/cifar-100-binary/{train,test}.bin (`records`, `test_records`
  or `records`) and its label names; returns root. Fine labels cycle
  (shuffled per file), each told by a colour; coarse is fine // 5."""
  rng = np.random.RandomState(seed)
  directory = os.path.join(root, CIFAR100_DIR)
  os.makedirs(directory, exist_ok=True)
  for name, count in (('train.bin', records),
                      ('test.bin', test_records or records)):
    fine = rng.permutation(np.arange(count) % 100)
    write_records(os.path.join(directory, name),
                  np.stack([fine // 5, fine], axis=1),
                  visible_label_images(fine, rng, num_classes=100))
  for prefix, count in (('fine', 100), ('coarse', 20)):
    with open(os.path.join(directory, prefix + '_label_names.txt'), 'w') as f:
      f.write(''.join('%s_%d\n' % (prefix, i) for i in range(count)))
  return root


def make_archive(path, root, directory):
  """Writes `path`, a .tar.gz of root/directory as `directory`/."""
  with tarfile.open(path, 'w:gz') as tar:
    tar.add(os.path.join(root, directory), arcname=directory)
  return path


def make_cifar100_archive(root, records=20, seed=0):
  """make_cifar100_dir, and the path of its archive beside it."""
  make_cifar100_dir(root, records=records, seed=seed)
  return make_archive(os.path.join(root, 'cifar-100-binary.tar.gz'), root,
                      CIFAR100_DIR)


def make_cifar10_archive(root, records_per_file=20, seed=0):
  """make_data_dir, and the path of its archive beside it."""
  make_data_dir(root, records_per_file=records_per_file, seed=seed)
  return make_archive(os.path.join(root, 'cifar-10-binary.tar.gz'), root,
                      'cifar-10-batches-bin')
