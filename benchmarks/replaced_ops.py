"""The faster replacements against the TensorFlow ops they replace, in one
training step: fast_ops.lrn against tf.nn.lrn, fast_ops.distort against
tf.image's per-image ops, one image at a time as the original distorted.

    python benchmarks/replaced_ops.py --data_dir=/tmp/cifar10_data --rounds=9

Prints the median ms per step of three training graphs, each with one op
swapped back, in interleaved rounds of 30 steps, and what ours saves.
"""

import argparse
import os
import statistics
import sys

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(BENCHMARKS), BENCHMARKS]
from cifar10_support import console  # pylint: disable=g-import-not-at-top
console.before_tensorflow('__main__')

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow.compat.v1 as tf

import benchmark
import cifar10
from cifar10_support import data_files
from cifar10_support import fast_ops
from cifar10_support import sessions

OURS = fast_ops.lrn, fast_ops.distort
STEPS = 30  # Of a window, and of the warm-up.


def tf_distort(planes, offsets, flips, deltas, factors, image_size):
  """fast_ops.distort's arguments, through tf.image one image at a time."""
  images = tf.transpose(tf.cast(planes, tf.float32), [0, 2, 3, 1])

  def one(args):
    image, offset, flip, delta, factor = args
    image = tf.image.crop_to_bounding_box(image, offset[0], offset[1],
                                          image_size, image_size)
    image = tf.cond(flip, lambda: tf.image.flip_left_right(image),
                    lambda: image)
    image = tf.image.adjust_brightness(image, delta)
    image = tf.image.adjust_contrast(image, factor)
    return tf.image.per_image_standardization(image)
  return tf.map_fn(one, (images, offsets, flips, deltas, factors),
                   fn_output_signature=tf.float32)


VARIANTS = {'ours': OURS, 'tf.nn.lrn': (tf.nn.lrn, OURS[1]),
            'tf.image distortions': (OURS[0], tf_distort)}


def variant(name, data_dir, batch_size):
  """A warmed-up benchmark.SessionVariant training with VARIANTS[name]'s."""
  def build():
    fast_ops.lrn, fast_ops.distort = VARIANTS[name]
    images, labels = cifar10.distorted_inputs(
        data_dir, batch_size, data_set=data_files.describe(data_dir))
    train_op = benchmark.train_op(images, labels,
                                  tf.train.get_or_create_global_step(),
                                  batch_size)[0]
    fast_ops.lrn, fast_ops.distort = OURS
    return train_op
  training = benchmark.SessionVariant(name, STEPS, batch_size, build, None,
                                      sessions.training_config())
  for _ in range(STEPS):
    training.step()
  return training


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', required=True)
  parser.add_argument('--rounds', type=int, default=9)
  parser.add_argument('--batch_size', type=int, default=128)
  args = parser.parse_args()
  variants = [variant(name, args.data_dir, args.batch_size)
              for name in VARIANTS]
  for _ in range(args.rounds):
    for v in variants:
      v.measure()
  times = {v.name: [1000 * args.batch_size / rate for rate in v.rates]
           for v in variants}
  ours = statistics.median(times['ours'])
  for name, ms in times.items():
    median = statistics.median(ms)
    print('%-21s %6.1f ms/step (%.1f-%.1f); ours saves %4.1f%%'
          % (name, median, min(ms), max(ms), 100 * (median - ours) / median))
  os._exit(0)  # The queue runners' threads never end by themselves.


if __name__ == '__main__':
  main()
