"""Classifies your own pictures with a trained model; exports a SavedModel.

    python cifar10_classify.py cat.jpg holiday/   # newest in /tmp/cifar10_train
    python cifar10_classify.py --export_dir=/tmp/cifar10_model

Each PNG, JPEG, BMP or GIF file (a directory: the pictures in it) is seen as
a test record is, with the averaged weights, and gets one line, its --top_k
classes (`cat.jpg: cat 0.912, dog 0.051, frog 0.013`); a file that cannot be
read gets one on stderr, and exit status 1. More in docs/classify.md.
"""

import os
import sys

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import pictures
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals

FLAGS = flags.FLAGS

run_flags.define_checkpoint_dir_flag()
flags.DEFINE_string('checkpoint_path', '',
                    'One checkpoint to use instead, e.g. '
                    '/tmp/cifar10_train/model.ckpt-100000.')
flags.DEFINE_integer('top_k', 3, 'Classes printed per picture, most likely '
                     'first (at most the model\'s classes; by default 3, or '
                     'all of them if fewer).', lower_bound=1)
flags.DEFINE_string('export_dir', '',
                    'Write a SavedModel of the model there (a new directory).')

# The picture decoding, which cifar10_make_dataset.py shares, is part of this
# script's API under these names too.
IMAGE_EXTENSIONS = pictures.IMAGE_EXTENSIONS
decode_batch = pictures.decode_batch


class ClassifyError(ValueError):
  """A file or checkpoint that cannot be used; the message says which."""


def model(pixels, dtype=tf.float32, class_names=data_files.CLASS_NAMES):
  """(probabilities float32 [N, C], classes string [N]) of uint8 pixels
  [N, 32, 32, 3], as evaluation sees them; dtype: the checkpoint's weights';
  class_names: its C classes' (UTF-8 in `classes`). Call it once per graph,
  or under a reusing variable scope."""
  # As the records hold them; transposed as float32 (the same whole numbers),
  # for which oneDNN has a kernel on every CPU.
  planes = tf.transpose(tf.cast(pixels, tf.float32), [0, 3, 1, 2])
  images = cifar10_input.eval_preprocess(planes)
  logits = cifar10.inference(tf.cast(images, dtype),
                             num_classes=len(class_names))
  probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
  classes = tf.gather(tf.constant(list(class_names)),
                      tf.argmax(probabilities, axis=1))
  return probabilities, classes


def find_checkpoint(checkpoint_dir, checkpoint_path=''):
  """The checkpoint to use, its weights' dtype and its class names (those
  recorded beside it: see checkpoints.class_names_for); raises ClassifyError
  for none, a damaged one, or one of another model."""
  path = checkpoint_path or checkpoints.newest(checkpoint_dir)
  if not path:
    raise ClassifyError(
        'no checkpoint in --checkpoint_dir=%s: point it at the --train_dir '
        'of a training run, or give --checkpoint_path' % checkpoint_dir)
  # Opened as cifar10_eval.py opens it; the lines are this script's own, as
  # eval's speak of following training in --checkpoint_dir.
  try:
    reader, dtype, _ = checkpoints.open_model_checkpoint(path, averaged=True)
  except checkpoints.CheckpointUnreadableError as e:
    raise ClassifyError('cannot read checkpoint %s: %s' % (path, e.problem))
  except checkpoints.NotTheModelError as e:
    raise ClassifyError('checkpoint %s holds no CIFAR-10 model with moving '
                        'averages (no %s)' % (path, e.missing))
  try:
    class_names = checkpoints.class_names_for(
        *checkpoints.checkpoint_classes(path, reader))
  except ValueError as e:  # The names file beside it is unreadable.
    raise ClassifyError(str(e))
  return path, dtype, class_names


def image_files(arguments):
  """(files, problems) of the paths given: the files in order (a directory's
  pictures sorted by name), and a 'path: reason' string for each missing
  path or directory without pictures."""
  files, problems = [], []
  for argument in arguments:
    if os.path.isdir(argument):
      found = sorted(os.path.join(argument, name)
                     for name in os.listdir(argument)
                     if pictures.is_picture_name(name))
      if not found:
        problems.append('%s: a directory without pictures (%s files)'
                        % (argument, ', '.join(IMAGE_EXTENSIONS)))
      files.extend(found)
    elif os.path.isfile(argument):
      files.append(argument)
    else:
      problems.append('%s: no such file or directory' % argument)
  return files, problems


def classify(files, checkpoint, dtype=tf.float32, batch_size=128,
             session_config=None, class_names=data_files.CLASS_NAMES):
  """Classifies files with a checkpoint's averaged weights (dtype: its
  weights'; class_names: its classes'), batch_size at a time, each batch
  when its result is asked for.

  Yields:
    (path, probabilities, problem) for each file, in order: probabilities
    float32 [number of classes] and problem None for a picture;
    probabilities None and problem a 'path: reason' string for a file that
    is not one.
  """
  with tf.Graph().as_default() as graph:
    encoded = tf.placeholder(tf.string, [None])
    pixels = decode_batch(encoded)
    probabilities, _ = model(pixels, dtype, class_names)
    saver = tf.train.Saver(cifar10.moving_averages_to_restore())
    graph.finalize()
  # Yields outside any `with`: the caller's default graph stays its own
  # between results, and two generators may be open at once.
  sess = tf.Session(graph=graph, config=session_config)

  def scores(outcomes):
    pictures = [data for problem, data in outcomes if problem is None]
    return iter(sess.run(probabilities, {encoded: pictures}) if pictures
                else [])

  try:
    with graph.as_default():  # A Saver restores eagerly outside a graph.
      saver.restore(sess, checkpoint)
    for start in range(0, len(files), batch_size):
      paths = files[start:start + batch_size]
      outcomes = [pictures.read(path) for path in paths]
      try:
        batch_scores = scores(outcomes)
      except tf.errors.InvalidArgumentError:
        # A file does not decode: decoding each alone finds which.
        pictures.mark_undecodable(
            paths, outcomes, lambda data: sess.run(pixels, {encoded: [data]}))
        batch_scores = scores(outcomes)
      for path, (problem, _) in zip(paths, outcomes):
        yield path, None if problem else next(batch_scores), problem
  finally:
    sess.close()


def format_top_classes(path, probabilities, top_k=3,
                       class_names=data_files.CLASS_NAMES):
  """The line printed for a picture: its top_k classes, most likely first."""
  best = np.argsort(-probabilities, kind='stable')[:top_k]
  return '%s: %s' % (path, ', '.join(
      '%s %.3f' % (class_names[c], probabilities[c]) for c in best))


def export(checkpoint, export_dir, dtype=tf.float32,
           class_names=data_files.CLASS_NAMES):
  """Writes a SavedModel of the averaged weights, with the signatures
  docs/classify.md describes (`classes` names class_names), to export_dir:
  a new directory, else ClassifyError."""
  if tf.io.gfile.exists(export_dir):
    raise ClassifyError('--export_dir=%s exists already: give a new directory '
                        '(a SavedModel is never written over another)'
                        % export_dir)
  with tf.Graph().as_default():
    images = tf.placeholder(tf.string, [None], name='images')
    pixels = tf.placeholder(tf.uint8, [None, 32, 32, 3], name='pixels')
    signatures = {}
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
      for key, name, tensor, source in (
          ('serving_default', 'images', images, decode_batch(images)),
          ('pixels', 'pixels', pixels, pixels)):
        probabilities, classes = model(source, dtype, class_names)
        signatures[key] = (
            tf.saved_model.signature_def_utils.predict_signature_def(
                inputs={name: tensor},
                outputs={'probabilities': probabilities, 'classes': classes}))
    saver = tf.train.Saver(cifar10.moving_averages_to_restore())
    with tf.Session() as sess:
      saver.restore(sess, checkpoint)
      builder = tf.saved_model.Builder(export_dir)
      builder.add_meta_graph_and_variables(
          sess, [tf.saved_model.tag_constants.SERVING],
          signature_def_map=signatures, strip_default_attrs=True)
      builder.save()


def checked_top_k(top_k, given, class_names, checkpoint):
  """How many classes to print per picture: top_k, at most the model's class
  count (by default; given on the command line, more is a ClassifyError)."""
  if top_k > len(class_names):
    if given:
      raise ClassifyError(
          '--top_k=%d is more than the %d classes of checkpoint %s; give '
          '--top_k=%d or fewer' % (top_k, len(class_names), checkpoint,
                                   len(class_names)))
    return len(class_names)
  return top_k


# Output closed early (`| head`): exit status 141 at once, quietly.
@signals.script_main(arguments=True)
def main(argv):
  if len(argv) < 2 and not FLAGS.export_dir:
    raise app.UsageError('Give the pictures to classify (files or '
                         'directories), or --export_dir')
  name = os.path.basename(sys.argv[0])
  try:
    checkpoint, dtype, class_names = find_checkpoint(FLAGS.checkpoint_dir,
                                                     FLAGS.checkpoint_path)
    top_k = checked_top_k(FLAGS.top_k, FLAGS['top_k'].present, class_names,
                          checkpoint)
    if FLAGS.export_dir:
      export(checkpoint, FLAGS.export_dir, dtype, class_names)
      print('Wrote a SavedModel of %s to %s (signatures serving_default: '
            'images, pixels: pixels).' % (checkpoint, FLAGS.export_dir),
            flush=True)
  except ClassifyError as e:
    sys.exit('%s: %s' % (name, e))
  files, problems = image_files(argv[1:])
  for problem in problems:
    print('%s: %s' % (name, problem), file=sys.stderr, flush=True)
  if files:
    for path, probabilities, problem in classify(
        files, checkpoint, dtype=dtype, batch_size=FLAGS.batch_size,
        session_config=sessions.session_config(
            optimize_graph=False, threads=run_flags.threads(FLAGS)),
        class_names=class_names):
      if problem:
        problems.append(problem)
        print('%s: %s' % (name, problem), file=sys.stderr, flush=True)
      else:
        print(format_top_classes(path, probabilities, top_k, class_names),
              flush=True)
  if problems:
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
