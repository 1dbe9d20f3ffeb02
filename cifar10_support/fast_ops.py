"""Drop-in replacements, faster on the CPU (docs/performance.md), for the ops
each docstring names first, and equal to them (the tests compare them)."""

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata

HISTOGRAM_BUCKETS = 30  # TensorBoard's default.

# Registered once per process: tf.custom_gradient registers one per LRN, which
# keeps its graph (cifar10_eval.py builds one per checkpoint) from being freed.
_LRN_GRADIENT = 'Cifar10Lrn075Gradient'


@tf.RegisterGradient(_LRN_GRADIENT)
def _lrn_075_gradient(op, dy, *unused_grads):
  """The gradient of `lrn`, from the tensors its IdentityN passes on.

  d out_i / d x_k = [i == k] * scale_k
                    - 1.5 * alpha * x_k * y_i / u_i * [|i - k| <= r];
  the band is symmetric, so the sum over i is again a band product.
  """
  out, x, u, scale, grad_band = op.inputs
  channels = u.shape.as_list()[-1]
  dy, y, flat = [tf.reshape(t, [-1, channels]) for t in (dy, out, x)]
  spread = tf.matmul(dy * y / u, grad_band)
  dx = tf.reshape(dy * scale + flat * spread, tf.shape(x))
  return [None, dx, None, None, None]


def lrn(x, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None):
  """Replaces `tf.nn.lrn` (same arguments; beta 0.75 only), equal to it and
  its gradient to 1e-5, on 4-D x of any float dtype, computed in float32 (in
  bfloat16 the denominator, near 1, moves in steps of 1/128)."""
  dtype = x.dtype.base_dtype
  x = tf.cast(x, tf.float32)
  channels = x.shape.as_list()[-1]
  index = np.arange(channels)
  band = np.abs(index[:, None] - index[None, :]) <= depth_radius
  with tf.name_scope(name + '_window'):
    flat = tf.reshape(x, [-1, channels])
    # u = bias + alpha * the window's sum of squares, as one fused matmul.
    u = tf.nn.bias_add(
        tf.matmul(tf.square(flat), tf.constant(alpha * band, tf.float32)),
        tf.constant(np.full(channels, bias), tf.float32))
    r = tf.math.rsqrt(u)
    scale = r * tf.sqrt(r)  # u ** -0.75
    y = tf.reshape(flat * scale, tf.shape(x))
    # The IdentityN hands _lrn_075_gradient what it needs.
    with tf.get_default_graph().gradient_override_map(
        {'IdentityN': _LRN_GRADIENT}):
      out = tf.identity_n(
          [y, x, u, scale, tf.constant(-1.5 * alpha * band, tf.float32)])[0]
  out_name = name if dtype == tf.float32 else name + '_float32'
  # For float32, the cast returns the identity itself.
  return tf.cast(tf.identity(out, name=out_name), dtype, name=name)


def histogram_summary(name, values):
  """Replaces `tf.summary.histogram` (the same tag; takes NaN values):
  HISTOGRAM_BUCKETS equal-width buckets of non-empty float `values`, in TF 2's
  format (plugin 'histograms', [k, 3] float64: left edge, right edge, count)."""
  with tf.name_scope(name + '_buckets'):
    flat = tf.cast(tf.reshape(values, [-1]), tf.float32)  # no-op for float32
    low = tf.reduce_min(flat)
    # All-equal values (a zero-initialized bias) land in the first bucket.
    width = tf.maximum(tf.reduce_max(flat) - low, 1e-30) / HISTOGRAM_BUCKETS
    index = tf.clip_by_value(tf.cast((flat - low) / width, tf.int32),
                             0, HISTOGRAM_BUCKETS - 1)
    # int32 counts: Bincount has a GPU kernel for them, not for float64.
    counts = tf.raw_ops.Bincount(arr=index, size=HISTOGRAM_BUCKETS,
                                 weights=tf.zeros([0], tf.int32))
    edges = (tf.cast(low, tf.float64) + tf.cast(width, tf.float64)
             * np.arange(HISTOGRAM_BUCKETS + 1))
    buckets = tf.stack([edges[:-1], edges[1:], tf.cast(counts, tf.float64)],
                       axis=1)
  # Summary ops have CPU kernels only; pinned there, a tower's GPU holds none.
  with tf.device('/cpu:0'):
    return tf.summary.tensor_summary(
        name, buckets,
        summary_metadata=histogram_metadata.create_summary_metadata(name, ''))


def distort(planes, offsets, flips, deltas, factors, image_size):
  """Replaces tf.image's random_crop, random_flip_left_right,
  random_brightness, random_contrast and per_image_standardization, their
  random draws given, over a whole chunk at once:
  planes: uint8 or float32 [n, 3, 32, 32], 0-255, the records' RGB planes;
  offsets: int32 [n, 2], each crop's top-left (row, column); flips: bool [n],
  True mirrors the crop; deltas: float32 [n], brightness added; factors:
  float32 [n], contrast factor; image_size: the crop's height and width.
  Returns float32 [n, image_size, image_size, 3], standardized images."""
  steps = tf.range(image_size)
  rows = offsets[:, :1] + steps
  cols = offsets[:, 1:] + tf.where_v2(flips[:, None], steps[::-1], steps)
  # Rows and columns are gathered as whole lines (single pixels are slower),
  # rows before the cast (fewer bytes). The brightness is added before the
  # swap, else Grappler would transpose uint8, slower than float32.
  crops = tf.cast(tf.gather(planes, rows, axis=2, batch_dims=1), tf.float32)
  crops += deltas[:, None, None, None]
  crops = tf.gather(tf.transpose(crops, [0, 1, 3, 2]), cols, axis=2,
                    batch_dims=1)  # [n, 3, column, row]
  means = tf.reduce_mean(crops, axis=[2, 3], keepdims=True)
  crops = (crops - means) * factors[:, None, None, None] + means
  crops = tf.image.per_image_standardization(crops)  # layout-agnostic
  return tf.transpose(crops, [0, 3, 2, 1])
