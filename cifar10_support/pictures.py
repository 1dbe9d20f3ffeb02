"""Pictures of one's own as CIFAR-10 pixels (docs/own_pictures.md): the decoding
cifar10_classify.py (and its SavedModel) and cifar10_make_dataset.py share, and
the reading of picture files around it."""

import tensorflow.compat.v1 as tf

from cifar10_support import data_files

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.gif')
NOT_A_PICTURE = 'not a PNG, JPEG, BMP or GIF picture TensorFlow can read'
_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def _png(encoded):
  """float32 [h, w, 3] in 0-255 of a PNG, its alpha composited on white."""
  # As 16-bit RGBA: an 8-bit v reads as 257 v, so opaque pixels stay exact.
  rgba = tf.cast(tf.io.decode_png(encoded, channels=4, dtype=tf.uint16),
                 tf.float32)
  alpha = rgba[:, :, 3:] / 65535.
  return rgba[:, :, :3] / 257. * alpha + 255. * (1. - alpha)


def _gif_or_bmp(encoded):
  """float32 [h, w, 3] of a GIF's first frame, or a 24- or 32-bit BMP."""
  # TensorFlow would read an 8-bit BMP's palette indices as grey levels.
  is_bmp = tf.equal(tf.strings.substr(encoded, 0, 2), b'BM')
  # The low byte of the header's bits per pixel (padded: GIFs can be short).
  bits = tf.io.decode_raw(tf.strings.substr(
      tf.strings.join([encoded, b'\0' * 29]), 28, 1), tf.uint8)[0]
  check = tf.debugging.Assert(
      tf.logical_or(tf.logical_not(is_bmp), bits >= 24),
      ['a BMP of fewer than 24 bits per pixel (palette or grey), which '
       'TensorFlow cannot read: save it as 24-bit BMP or PNG'])
  with tf.control_dependencies([check]):
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
  return tf.cast(image, tf.float32)


def decode(encoded):
  """uint8 [32, 32, 3] RGB pixels of a string scalar: an encoded PNG, JPEG,
  BMP or GIF file of any size; InvalidArgumentError when run on others."""
  image = tf.cond(
      tf.io.is_jpeg(encoded),
      lambda: tf.cast(tf.io.decode_jpeg(
          encoded, channels=3, dct_method='INTEGER_ACCURATE'), tf.float32),
      lambda: tf.cond(
          tf.equal(tf.strings.substr(encoded, 0, len(_PNG_SIGNATURE)),
                   _PNG_SIGNATURE),
          lambda: _png(encoded), lambda: _gif_or_bmp(encoded)))
  size = [data_files.HEIGHT, data_files.WIDTH]
  image = tf.cond(
      tf.reduce_all(tf.equal(tf.shape(image)[:2], size)),
      lambda: tf.reshape(image, size + [data_files.DEPTH]),
      # TF 2's resize: without antialiasing (v1's) a photo becomes aliasing.
      lambda: tf.compat.v2.image.resize(image, size, antialias=True))
  return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)


def decode_batch(contents):
  """uint8 [N, 32, 32, 3] RGB pixels of string [N] encoded files (`decode`
  each); InvalidArgumentError when run if any is not a picture."""
  return tf.map_fn(decode, contents, fn_output_signature=tf.uint8)


def is_picture_name(name):
  """Whether a file name has a picture's extension (any case)."""
  return name.lower().endswith(IMAGE_EXTENSIONS)


def read(path):
  """(None, the file's bytes), or (a 'path: reason' problem, None)."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    return '%s: cannot be read (%s)' % (path, e.strerror), None
  return (None, data) if data else ('%s: the file is empty' % path, None)


def tf_error_reason(message):
  """The line of a TensorFlow error message that says what was wrong."""
  for line in message.splitlines():
    if line.strip() and not line[0].isspace() and not line.startswith(
        ('Graph execution error', 'Detected at node', 'Node:')):
      return line.strip()
  return message.strip()


def mark_undecodable(paths, outcomes, decode_one):
  """Of a failed batch's `paths` and their `read` outcomes, sets in place the
  outcome of each whose data decode_one(data) fails on (InvalidArgumentError)
  to ('path: NOT_A_PICTURE (reason)', None)."""
  for j, (problem, data) in enumerate(outcomes):
    if problem is None:
      try:
        decode_one(data)
      except tf.errors.InvalidArgumentError as e:
        outcomes[j] = ('%s: %s (%s)' % (paths[j], NOT_A_PICTURE,
                                        tf_error_reason(e.message)), None)
