"""Classifies your own pictures with a trained model; exports a SavedModel.

    python cifar10_classify.py cat.jpg holiday/   # newest in /tmp/cifar10_train
    python cifar10_classify.py --export_dir=/tmp/cifar10_model

For each PNG, JPEG, BMP or GIF file (a directory means the pictures in it;
any size; grey, colour or with an alpha channel) it prints one line:

    cat.jpg: cat 0.912, dog 0.051, frog 0.013

Each picture is seen as a test record is: decoded to RGB (alpha dropped, the
first frame of a GIF), resized to 32x32, then evaluation's own preprocessing
(the central 24x24 crop, per-image standardization), and classified with the
moving averages of the weights, as cifar10_eval.py does. A file that cannot
be read gets one line on stderr and the others are still classified; the exit
status is then 1.

--export_dir writes a SavedModel of the same graph, with the averaged
weights, that plain TensorFlow 2 loads (`tf.saved_model.load`) and serves:
signature `serving_default` takes `images`, a batch of encoded files
(string [N]); `pixels` takes uint8 [N, 32, 32, 3]. Both return
`probabilities` (float32 [N, 10]) and `classes` (string [N], the most likely
class's name).
"""

import os
import sys

from cifar10_support import startup
startup.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
from cifar10_support import checkpoints
from cifar10_support import console
from cifar10_support import run_flags
from cifar10_support import sessions

FLAGS = flags.FLAGS

run_flags.define_checkpoint_dir_flag()
flags.DEFINE_string('checkpoint_path', '',
                    'One checkpoint to use instead, e.g. '
                    '/tmp/cifar10_train/model.ckpt-100000.')
flags.DEFINE_integer('top_k', 3, 'Classes printed per picture, most likely '
                     'first.', lower_bound=1, upper_bound=cifar10.NUM_CLASSES)
flags.DEFINE_string('export_dir', '',
                    'Write a SavedModel of the model there (a new directory).')

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.gif')
SIGNATURE_PIXELS = 'pixels'


class ClassifyError(ValueError):
  """A file or checkpoint that cannot be used; the message says which."""


def decode(contents):
  """An encoded picture as CIFAR-10's pixels.

  Args:
    contents: scalar string tensor, a PNG, JPEG, BMP or GIF file's bytes.

  Returns:
    uint8 tensor [32, 32, 3]: RGB, resized with antialiasing (a 32x32
    picture is left as it is).
  """
  image = tf.io.decode_image(contents, channels=3, expand_animations=False)
  size = [cifar10_input.HEIGHT, cifar10_input.WIDTH]
  # The TF 2 resize: the v1 one has no antialiasing, and a photo shrunk to
  # 32x32 without it is mostly aliasing.
  resized = tf.compat.v2.image.resize(image, size, antialias=True)
  pixels = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
  pixels.set_shape(size + [cifar10_input.DEPTH])
  return pixels


def decode_batch(contents):
  """`decode` of each of string [N] encoded files: uint8 [N, 32, 32, 3]."""
  return tf.map_fn(decode, contents, fn_output_signature=tf.uint8)


def model(pixels, dtype=tf.float32):
  """Probabilities and top class of pixels, as evaluation sees them.

  Call it once per graph, or under a reusing variable scope.

  Args:
    pixels: uint8 tensor [N, 32, 32, 3].
    dtype: the checkpoint's weights' dtype.

  Returns:
    (probabilities float32 [N, 10], classes string [N]).
  """
  # As the records hold them; transposed as float32 (the same whole numbers),
  # for which oneDNN has a kernel on every CPU.
  planes = tf.transpose(tf.cast(pixels, tf.float32), [0, 3, 1, 2])
  images = cifar10_input.eval_preprocess(planes)
  logits = cifar10.inference(tf.cast(images, dtype))
  probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
  classes = tf.gather(tf.constant(cifar10_input.CLASS_NAMES),
                      tf.argmax(probabilities, axis=1))
  return probabilities, classes


def _averages_saver():
  """Loads each weight's moving average into the weight, as eval does."""
  averages = tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY)
  return tf.train.Saver(averages.variables_to_restore())


def find_checkpoint(checkpoint_dir, checkpoint_path=''):
  """The checkpoint to use and its weights' dtype.

  Raises:
    ClassifyError: no checkpoint, a damaged one, or one of another model.
  """
  path = checkpoint_path or checkpoints.newest(checkpoint_dir)
  if not path:
    raise ClassifyError(
        'no checkpoint in --checkpoint_dir=%s: point it at the --train_dir '
        'of a training run, or give --checkpoint_path' % checkpoint_dir)
  reader, problem = checkpoints.verified_reader(path)
  if problem:
    raise ClassifyError('cannot read checkpoint %s: %s' % (path, problem))
  missing = checkpoints.missing_model(reader, averaged=True)
  if missing:
    raise ClassifyError('checkpoint %s holds no CIFAR-10 model with moving '
                        'averages (no %s)' % (path, missing))
  return path, reader.get_variable_to_dtype_map()[checkpoints.MODEL_PROBE]


def image_files(arguments):
  """The files to classify, and a message for each argument that gives none.

  Args:
    arguments: paths of files or directories, as typed.

  Returns:
    (files, problems): files in order (a directory's sorted by name); one
    'path: reason' string per missing path or directory without pictures.
  """
  files, problems = [], []
  for argument in arguments:
    if os.path.isdir(argument):
      found = sorted(os.path.join(argument, name)
                     for name in os.listdir(argument)
                     if name.lower().endswith(IMAGE_EXTENSIONS))
      if not found:
        problems.append('%s: a directory without pictures (%s files)'
                        % (argument, ', '.join(IMAGE_EXTENSIONS)))
      files.extend(found)
    elif os.path.isfile(argument):
      files.append(argument)
    else:
      problems.append('%s: no such file or directory' % argument)
  return files, problems


def _tf_error_reason(message):
  """The line of a TensorFlow error message that says what was wrong."""
  for line in message.splitlines():
    if line.strip() and not line[0].isspace() and not line.startswith(
        ('Graph execution error', 'Detected at node', 'Node:')):
      return line.strip()
  return message.strip()


def classify(files, checkpoint, dtype=tf.float32, batch_size=128,
             session_config=None):
  """Classifies picture files with a checkpoint's averaged weights.

  A generator: each batch of batch_size files is read and classified when
  the caller asks for its first result, so lines can be printed as the
  pictures are classified.

  Args:
    files: list of paths.
    checkpoint: a checkpoint path prefix (see `find_checkpoint`).
    dtype: its weights' dtype.
    batch_size: int, pictures per run of the model.
    session_config: tf.ConfigProto or None.

  Yields:
    (path, probabilities, problem) for each file, in order: probabilities
    float32 [10] and problem None for a picture; probabilities None and
    problem a 'path: reason' string for a file that is not one.
  """
  with tf.Graph().as_default() as graph:
    encoded_file = tf.placeholder(tf.string, [])
    decoded_file = decode(encoded_file)
    encoded_batch = tf.placeholder(tf.string, [None])
    # A batch decodes in the same run as the model; fed instead when one of
    # its files does not decode and the others are decoded one by one.
    pixels = tf.placeholder_with_default(decode_batch(encoded_batch),
                                         [None, 32, 32, 3])
    probabilities, _ = model(pixels, dtype)
    saver = _averages_saver()
    graph.finalize()
  # Yields outside any `with`: the caller's default graph stays its own
  # between results, and two generators may be open at once.
  sess = tf.Session(graph=graph, config=session_config)
  try:
    with graph.as_default():  # A Saver restores eagerly outside a graph.
      saver.restore(sess, checkpoint)
    for i in range(0, len(files), batch_size):
      outcomes = [_read(path) for path in files[i:i + batch_size]]
      readable = [j for j, (_, data) in enumerate(outcomes) if data]
      try:
        scores = sess.run(probabilities, {encoded_batch: [
            outcomes[j][1] for j in readable]}) if readable else []
      except tf.errors.InvalidArgumentError:
        scores, decoded = [], {}
        for j in readable:
          try:
            decoded[j] = sess.run(decoded_file,
                                  {encoded_file: outcomes[j][1]})
          except tf.errors.InvalidArgumentError as e:
            outcomes[j] = ('%s: not a PNG, JPEG, BMP or GIF picture '
                           'TensorFlow can read (%s)' % (
                               files[i + j], _tf_error_reason(e.message)),
                           None)
        readable = sorted(decoded)
        if readable:
          scores = sess.run(probabilities, {pixels: np.stack(
              [decoded[j] for j in readable])})
      scored = dict(zip(readable, scores))
      for j, (problem, _) in enumerate(outcomes):
        yield files[i + j], scored.get(j), problem
  finally:
    sess.close()


def _read(path):
  """(None, the file's bytes), or (a 'path: reason' problem, None)."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    return '%s: cannot be read (%s)' % (path, e.strerror), None
  return (None, data) if data else ('%s: the file is empty' % path, None)


def format_top_classes(path, probabilities, top_k=3):
  """The line printed for a picture (see the module's docstring): its top_k
  classes, most likely first."""
  best = np.argsort(-probabilities, kind='stable')[:top_k]
  return '%s: %s' % (path, ', '.join(
      '%s %.3f' % (cifar10_input.CLASS_NAMES[c], probabilities[c])
      for c in best))


def export(checkpoint, export_dir, dtype=tf.float32):
  """Writes a SavedModel of the averaged weights, with the signatures the
  module's docstring describes, to export_dir.

  Raises:
    ClassifyError: if export_dir exists already.
  """
  if tf.io.gfile.exists(export_dir):
    raise ClassifyError('--export_dir=%s exists already: give a new directory '
                        '(a SavedModel is never written over another)'
                        % export_dir)
  with tf.Graph().as_default():
    images = tf.placeholder(tf.string, [None], name='images')
    pixels = tf.placeholder(tf.uint8, [None, 32, 32, 3], name='pixels')
    decoded = decode_batch(images)
    signatures = {}
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
      for key, name, tensor, source in (
          ('serving_default', 'images', images, decoded),
          (SIGNATURE_PIXELS, 'pixels', pixels, pixels)):
        probabilities, classes = model(source, dtype)
        signatures[key] = (
            tf.saved_model.signature_def_utils.predict_signature_def(
                inputs={name: tensor},
                outputs={'probabilities': probabilities, 'classes': classes}))
    saver = _averages_saver()
    with tf.Session() as sess:
      saver.restore(sess, checkpoint)
      builder = tf.saved_model.Builder(export_dir)
      builder.add_meta_graph_and_variables(
          sess, [tf.saved_model.tag_constants.SERVING],
          signature_def_map=signatures, strip_default_attrs=True)
      builder.save()


def main(argv):
  console.quiet_python_logs()
  if len(argv) < 2 and not FLAGS.export_dir:
    raise app.UsageError('Give the pictures to classify (files or '
                         'directories), or --export_dir')
  name = os.path.basename(sys.argv[0])
  try:
    checkpoint, dtype = find_checkpoint(FLAGS.checkpoint_dir,
                                        FLAGS.checkpoint_path)
    if FLAGS.export_dir:
      export(checkpoint, FLAGS.export_dir, dtype)
      print('Wrote a SavedModel of %s to %s (signatures serving_default: '
            'images, %s: pixels).' % (checkpoint, FLAGS.export_dir,
                                      SIGNATURE_PIXELS), flush=True)
  except ClassifyError as e:
    sys.exit('%s: %s' % (name, e))
  files, problems = image_files(argv[1:])
  for problem in problems:
    print('%s: %s' % (name, problem), file=sys.stderr, flush=True)
  if files:
    for path, probabilities, problem in classify(
        files, checkpoint, dtype=dtype, batch_size=FLAGS.batch_size,
        session_config=sessions.session_config(
            optimize_graph=False, threads=run_flags.threads(FLAGS))):
      if problem:
        problems.append(problem)
        print('%s: %s' % (name, problem), file=sys.stderr, flush=True)
      else:
        print(format_top_classes(path, probabilities, FLAGS.top_k),
              flush=True)
  if problems:
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
