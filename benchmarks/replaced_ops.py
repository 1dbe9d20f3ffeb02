"""The faster replacements against the TensorFlow ops they replace, in one
training step: the LRN (fast_ops.lrn against tf.nn.lrn) and the training
distortions (fast_ops.distort against tf.image's per-image ops, one image at
a time, as the original distorted them).

    python benchmarks/replaced_ops.py --data_dir=/tmp/cifar10_data --rounds=9

Prints the median ms per step of three training graphs, each with one op
swapped back, in interleaved rounds of 30 steps, and what ours saves.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cifar10_support import console  # pylint: disable=g-import-not-at-top
console.before_tensorflow('__main__')

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow.compat.v1 as tf

import cifar10
from cifar10_support import data_files
from cifar10_support import fast_ops
from cifar10_support import sessions

OURS = fast_ops.lrn, fast_ops.distort


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


def start(name, data_dir, batch_size):
  """A session training variant `name`, warmed up; (session, train op)."""
  fast_ops.lrn, fast_ops.distort = VARIANTS[name]
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    images, labels = cifar10.distorted_inputs(
        data_dir, batch_size, data_set=data_files.describe(data_dir))
    loss = cifar10.loss(cifar10.inference(images), labels)
    train_op = cifar10.train(loss, global_step, batch_size)
    fast_ops.lrn, fast_ops.distort = OURS
    sess = tf.Session(config=sessions.training_config())
    sess.run(tf.global_variables_initializer())
    tf.train.start_queue_runners(sess=sess, coord=tf.train.Coordinator())
  for _ in range(30):
    sess.run(train_op)
  return sess, train_op


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', required=True)
  parser.add_argument('--rounds', type=int, default=9)
  parser.add_argument('--batch_size', type=int, default=128)
  args = parser.parse_args()
  running = {name: start(name, args.data_dir, args.batch_size)
             for name in VARIANTS}
  times = {name: [] for name in VARIANTS}
  for _ in range(args.rounds):
    for name, (sess, train_op) in running.items():
      began = time.time()
      for _ in range(30):
        sess.run(train_op)
      times[name].append((time.time() - began) / 30 * 1000)
  ours = statistics.median(times['ours'])
  for name, ms in times.items():
    median = statistics.median(ms)
    print('%-21s %6.1f ms/step (%.1f-%.1f); ours saves %4.1f%%'
          % (name, median, min(ms), max(ms), 100 * (median - ours) / median))
  os._exit(0)  # The queue runners' threads never end by themselves.


if __name__ == '__main__':
  main()
