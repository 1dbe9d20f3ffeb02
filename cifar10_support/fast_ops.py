"""Drop-in replacements for standard ops, each equal to the op it replaces
(the tests compare them), where the original calls TensorFlow's own; each
docstring begins with that op. Each is faster on the CPU (what each gained:
docs/performance.md); `histogram_summary` also takes NaN values, on which
TF1's histogram op fails a step before the NaN check could name it.
"""

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.plugins.histogram import metadata as histogram_metadata

# Buckets of every histogram summary; TensorBoard's default.
HISTOGRAM_BUCKETS = 30

# The LRN's gradient, registered once for the whole process: a
# tf.custom_gradient registers a function per LRN built, in TensorFlow's
# global registry, holding tensors of its graph, so no graph that built one
# could be freed (TensorFlow issue #27492), and cifar10_eval.py, which builds
# a graph per checkpoint, grew with each evaluation.
_LRN_GRADIENT = 'Cifar10Lrn075Gradient'


@tf.RegisterGradient(_LRN_GRADIENT)
def _lrn_075_gradient(op, dy, *unused_grads):
  """The gradient of `_lrn_075`, from the tensors its IdentityN passes on.

  d out_i / d x_k = [i == k] * scale_k
                    - 1.5 * alpha * x_k * y_i / u_i * [|i - k| <= r];
  the band is symmetric, so the sum over i is again a band product.
  """
  out, x, u, scale, grad_band = op.inputs
  channels = u.shape.as_list()[-1]
  dy = tf.reshape(dy, [-1, channels])
  y = tf.reshape(out, [-1, channels])
  flat = tf.reshape(x, [-1, channels])
  spread = tf.matmul(dy * y / u, grad_band)
  dx = tf.reshape(dy * scale + flat * spread, tf.shape(x))
  # Only x has a gradient: the forward ops are not differentiated.
  return [None, dx, None, None, None]


def _lrn_075(x, name, depth_radius, bias, alpha, out_name):
  """`lrn` in x's dtype, its ops in name scope `name`_window; the output op
  is `out_name`."""
  channels = x.shape.as_list()[-1]
  index = np.arange(channels)
  band = (np.abs(index[:, None] - index[None, :]) <= depth_radius)
  dtype = x.dtype.base_dtype

  with tf.name_scope(name + '_window'):
    flat = tf.reshape(x, [-1, channels])
    # u = bias + alpha * window sum of squares; its bias_add fuses into the
    # matmul.
    u = tf.nn.bias_add(
        tf.matmul(tf.square(flat), tf.constant(alpha * band, dtype)),
        tf.constant(np.full(channels, bias), dtype))
    r = tf.math.rsqrt(u)
    scale = r * tf.sqrt(r)  # u ** -0.75
    y = tf.reshape(flat * scale, tf.shape(x))
    # The IdentityN hands the gradient what it needs; its gradient is
    # _lrn_075_gradient instead of the forward ops' own.
    with tf.get_default_graph().gradient_override_map(
        {'IdentityN': _LRN_GRADIENT}):
      out = tf.identity_n(
          [y, x, u, scale, tf.constant(-1.5 * alpha * band, dtype)])[0]
  return tf.identity(out, name=out_name)


def lrn(x, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None):
  """Replaces `tf.nn.lrn` (same arguments; beta 0.75 only), in float32.

  out = x / (bias + alpha * sum of x**2 over the 2 * depth_radius + 1
  neighbouring channels) ** 0.75.

  The window sum is a product with a band matrix (alpha and bias folded
  into one fused matmul), the power is rsqrt(u) * sqrt(rsqrt(u)), and the
  gradient is written out instead of differentiating those ops one by one.
  Equal to tf.nn.lrn and its
  gradient to 1e-5.

  x: 4-D [batch, height, width, channels], any float dtype; the result has
  its shape and dtype, but is computed in float32: in bfloat16 (8
  significant bits) the denominator, 1 + alpha * a sum of squares with alpha
  about 1e-4, would move in steps of 1/128 near 1, coarser than the
  normalization itself. `name` names the output op.
  """
  if beta != 0.75:
    raise ValueError('fast_ops.lrn computes beta=0.75 only, got %r' % beta)
  dtype = x.dtype.base_dtype
  if dtype == tf.float32:
    return _lrn_075(x, name, depth_radius, bias, alpha, name)
  out = _lrn_075(tf.cast(x, tf.float32), name, depth_radius, bias, alpha,
                 name + '_float32')
  return tf.cast(out, dtype, name=name)


def histogram_summary(name, values):
  """Replaces `tf.summary.histogram`: the same tag, TensorBoard's format.

  TF1's HistogramSummary kernel bins one value at a time into ~1,500
  exponential buckets. This bins into HISTOGRAM_BUCKETS equal-width buckets
  with a few whole-tensor ops and writes
  the histogram format TensorFlow 2's own tf.summary.histogram writes
  (plugin 'histograms', a [k, 3] float64 tensor of left edge, right edge,
  count), so it shows in the same dashboards.

  Its tag is the op name `name` gets; values is a non-empty float tensor.
  Returns the summary op, added to the SUMMARIES collection.
  """
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
  random_brightness, random_contrast and per_image_standardization.

  The same arithmetic as those ops applied one image at a time, with their
  random draws given, over a whole chunk in a few ops, on colour planes, as
  the records store them, making
  the finished float32 crop channels-last only at the end.

  Args:
    planes: uint8 or float32 tensor of [n, 3, 32, 32], values 0-255: each
      image's red, green and blue planes, as the records store them.
    offsets: int32 tensor of [n, 2], each crop's top-left corner (row,
      column), in 0..32 - image_size.
    flips: bool tensor of [n], True to mirror the crop left-right.
    deltas: float32 tensor of [n], brightness added to every pixel.
    factors: float32 tensor of [n], contrast factor: each channel's
      deviations from its mean are scaled by it.
    image_size: int, the crop's height and width.

  Returns:
    float32 tensor of [n, image_size, image_size, 3] (height, width, RGB),
    each image with mean 0 and standard deviation 1.
  """
  steps = tf.range(image_size)
  rows = offsets[:, :1] + steps
  cols = offsets[:, 1:] + tf.where_v2(flips[:, None], steps[::-1], steps)
  # Rows are gathered as whole 32-pixel lines, before the cast (a quarter of
  # the bytes). Columns are gathered as lines too, after swapping the last
  # two axes: picking single pixels is several times slower. The brightness
  # is added before that swap: Grappler swaps a transpose with a cast just
  # before it, and would transpose uint8, several times slower than float32.
  crops = tf.cast(tf.gather(planes, rows, axis=2, batch_dims=1), tf.float32)
  crops += deltas[:, None, None, None]
  crops = tf.gather(tf.transpose(crops, [0, 1, 3, 2]), cols, axis=2,
                    batch_dims=1)  # [n, 3, column, row]
  means = tf.reduce_mean(crops, axis=[2, 3], keepdims=True)
  crops = (crops - means) * factors[:, None, None, None] + means
  crops = tf.image.per_image_standardization(crops)  # layout-agnostic
  return tf.transpose(crops, [0, 3, 2, 1])
