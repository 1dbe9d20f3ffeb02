"""Evaluates CIFAR-10 checkpoints: precision @ 1, per class, with the averaged weights.

    python cifar10_eval.py --data_dir=/tmp/cifar10_data --run_once
    python cifar10_eval.py --checkpoint_dir=/tmp/cifar10_train   # follows training

It restores the newest checkpoint in --checkpoint_dir with the moving averages
of the weights in place of the raw weights, runs --num_examples examples of
--eval_data ('test' or 'train_eval') through the model and prints

    <date time>: precision @ 1 = <fraction of examples whose top class is right>

then a per-class table. `Precision @ 1`, per-class scalars and a confusion
matrix (image and table) go to --eval_dir at the checkpoint's global step,
with the eval graph's other summaries.

Unlike the original: each example is counted exactly once, for any batch size
(the original counted 112 test images twice); periodic mode evaluates each
new checkpoint once, keeps waiting for the next and never deletes
--eval_dir; a missing checkpoint or one without moving averages says so.

The original's figure (theirs, not measured here): precision @ 1 of about
0.86 after 100K steps of cifar10_train.py. Ours are in README.md.
"""

from datetime import datetime
import os
import sys
import time

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
from cifar10_support import download
from cifar10_support import eval_report
from cifar10_support import precision
from cifar10_support import run_flags
from cifar10_support import sessions

FLAGS = flags.FLAGS

flags.DEFINE_string('eval_dir', '/tmp/cifar10_eval',
                    'Directory where to write event logs.')
flags.DEFINE_enum('eval_data', 'test', ['test', 'train_eval'],
                  "Either 'test' or 'train_eval'.")
run_flags.define_checkpoint_dir_flag()
flags.DEFINE_integer('eval_interval_secs', 60 * 5, 'How often to run the eval.',
                     lower_bound=1)
flags.DEFINE_integer('num_examples', 10000, 'Number of examples to run.',
                     lower_bound=1)
flags.DEFINE_boolean('run_once', False, 'Whether to run eval only once.')

PRECISION_FORMAT = '%s: precision @ 1 = %.3f'
ERROR_FORMAT = 'cifar10_eval.py: error: %s'

# Raised for a checkpoint that cannot be evaluated (checkpoints.py).
CheckpointError = checkpoints.CheckpointError
CheckpointUnreadableError = checkpoints.CheckpointUnreadableError


def check_eval_args(data_dir, eval_data, num_examples, batch_size):
  """Checks the evaluation settings and data files before any graph is built.

  Returns:
    The number of records in the eval_data files, an int.

  Raises:
    ValueError: naming the setting or file and the expected value.
  """
  filenames = [os.path.join(data_dir, download.BATCHES_DIR, name)
               for name in cifar10_input.eval_files(eval_data)]
  if not isinstance(num_examples, int) or num_examples < 1:
    raise ValueError('num_examples must be a positive integer, got %r'
                     % (num_examples,))
  cifar10_input.check_batch_size(batch_size)
  num_records = cifar10_input.check_data_files(filenames)
  if num_examples > num_records:
    raise ValueError(
        'num_examples=%d is more than the %d records in %s; each example is '
        'counted once, so use num_examples=%d or fewer'
        % (num_examples, num_records, ', '.join(filenames), num_records))
  return num_records


def _build_eval_graph(eval_data, data_dir, batch_size, use_fp16, num_threads,
                      compute_dtype=None):
  """Builds the input, the model, the counting ops and the averaged-weights saver.

  Call inside a `tf.Graph().as_default()` block.

  Returns:
    A dict of:
      correct: 1-D bool tensor [batch]; the label is the top-1 prediction.
      predictions: 1-D int32 tensor [batch], the top-1 class.
      labels: 1-D int32 tensor [batch].
      summary_op: the merged summaries of the eval graph.
      var_map: dict, checkpoint key -> variable, the moving averages.
      confusion_summaries: the image and text summaries of the confusion
        matrix and the per-class table, computed from the placeholders
      confusion_input: uint8 [1, height, width, 3], the rendered matrix,
      confusion_text: string [], the matrix as a markdown table, and
      per_class_text: string [], the per-class table as markdown.
  """
  # The input is read once, in file order, so no example counts twice.
  images, labels = cifar10.inputs(eval_data, data_dir, batch_size,
                                  use_fp16=use_fp16, num_threads=num_threads,
                                  single_pass=True)
  logits = cifar10.inference(images, compute_dtype)
  # in_top_k takes float32 logits only, and the v1 argument order
  # (predictions, targets); --use_fp16 labels arrive as float16.
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  top_k = tf.nn.in_top_k(logits, labels, 1, name='top_k')
  predictions = tf.argmax(logits, axis=1, output_type=tf.int32)
  # in_top_k also counts a label tied with the top logit; requiring the
  # argmax too counts a tie once, as the confusion matrix does.
  correct = tf.logical_and(top_k, tf.equal(predictions, labels))
  summary_op = tf.summary.merge_all()

  # Each variable is loaded from its moving average ("shadow") in the
  # checkpoint, which predicts better than the last raw weights.
  averages = tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY)
  var_map = averages.variables_to_restore()

  # Fed after counting; kept out of summary_op, which runs with the input.
  confusion_input = tf.placeholder(tf.uint8, [1, None, None, 3])
  confusion_text = tf.placeholder(tf.string, [])
  per_class_text = tf.placeholder(tf.string, [])
  confusion_summaries = tf.summary.merge(
      [tf.summary.image('confusion_matrix', confusion_input, collections=[]),
       tf.summary.text('confusion_matrix_counts', confusion_text,
                       collections=[]),
       tf.summary.text('precision_by_class', per_class_text,
                       collections=[])])
  return {'correct': correct, 'predictions': predictions, 'labels': labels,
          'summary_op': summary_op, 'var_map': var_map,
          'confusion_input': confusion_input,
          'confusion_text': confusion_text,
          'per_class_text': per_class_text,
          'confusion_summaries': confusion_summaries}


def _count(sess, graph_ops, num_examples):
  """Runs batches until exactly num_examples examples are counted.

  Returns:
    (correct [num_examples] bool, predictions [num_examples] int,
     labels [num_examples] int, the serialized summaries of the first batch).
  """
  fetches = {k: graph_ops[k] for k in ('correct', 'predictions', 'labels')}
  # The eval graph's summaries come with the first batch: the input ends
  # after the last one, so there would be no batch left to run them on.
  first = dict(fetches, summary=graph_ops['summary_op'])
  parts = {k: [] for k in fetches}
  counted = 0
  summary = None
  while counted < num_examples:
    try:
      values = sess.run(first if summary is None else fetches)
    except tf.errors.OutOfRangeError:
      raise ValueError('the input ended after %d of num_examples=%d examples'
                       % (counted, num_examples))
    summary = values.pop('summary', summary)
    # Only the first examples of the last batch may be needed.
    take = min(len(values['labels']), num_examples - counted)
    for k in parts:
      parts[k].append(values[k][:take])
    counted += take
  return tuple(np.concatenate(parts[k]) for k in fetches) + (summary,)


def _write_summaries(writer, result, graph_summary, sess, graph_ops):
  summary = tf.Summary()
  summary.ParseFromString(graph_summary)
  summary.value.add(tag='Precision @ 1', simple_value=result['precision'])
  for row in result['per_class']:
    if row['precision'] is not None:
      summary.value.add(tag='Precision @ 1 by class/' + row['name'],
                        simple_value=row['precision'])
  writer.add_summary(summary, result['global_step'])
  writer.add_summary(sess.run(graph_ops['confusion_summaries'], {
      graph_ops['confusion_input']: eval_report.confusion_image(
          result['confusion']),
      graph_ops['confusion_text']: eval_report.confusion_markdown(
          result['confusion']),
      graph_ops['per_class_text']: eval_report.per_class_markdown(
          result['per_class'], result['confusion'])}),
                     result['global_step'])
  writer.flush()


def eval_once(checkpoint_path, data_dir, eval_dir=None, eval_data='test',
              num_examples=10000, batch_size=128, session_config=None,
              num_threads=1, compute_dtype=None):
  """Evaluates one checkpoint on exactly `num_examples` examples.

  The first `num_examples` records of the eval_data files, in file order,
  each counted once. The model's dtype follows the checkpoint, so --use_fp16
  checkpoints evaluate too.

  Args:
    checkpoint_path: checkpoint prefix, e.g. '/tmp/cifar10_train/model.ckpt-0'.
    data_dir: folder holding `cifar-10-batches-bin/`.
    eval_dir: where summaries go; None writes none.
    eval_data: 'test' or 'train_eval'.
    num_examples: int, examples to count, at most the records in the files.
    batch_size: int, examples per batch; any value counts the same examples.
    session_config: tf.ConfigProto; None grows GPU memory as needed.
    num_threads: int, input threads; 1 keeps the file order.
    compute_dtype: None, or tf.bfloat16 / tf.float16 to compute the forward
      pass in (cifar10.inference) from float32 weights; a float16
      checkpoint computes in float16 whatever this says.

  Returns:
    A dict with 'checkpoint' (str), 'global_step' (int), 'num_examples'
    (int), 'true_count' (int), 'precision' (float, true_count /
    num_examples), 'per_class' (list of dicts: 'name', 'examples',
    'correct', 'precision') and 'confusion' (int64 array [10, 10], rows
    true classes, columns predicted).

  Raises:
    ValueError: bad settings or data files (before any graph is built).
    CheckpointError: the checkpoint lacks the model or its moving averages.
    CheckpointUnreadableError: its files are missing or incomplete.
  """
  check_eval_args(data_dir, eval_data, num_examples, batch_size)
  reader, dtype, global_step = checkpoints.open_model(checkpoint_path)
  print('%s: evaluating %s (global step %d, %s weights) on %d %s examples'
        % (datetime.now(), checkpoint_path, global_step, dtype.name,
           num_examples, eval_data), flush=True)

  if compute_dtype is not None and dtype != tf.float32:
    print('Note: %s holds %s weights (--use_fp16): --mixed_precision does '
          'not apply, the model computes in %s.'
          % (checkpoint_path, dtype.name, dtype.name), flush=True)
    compute_dtype = None
  with tf.Graph().as_default() as graph:
    graph_ops = _build_eval_graph(eval_data, data_dir, batch_size,
                                  dtype == tf.float16, num_threads,
                                  compute_dtype)
    checkpoints.check_averages_restorable(reader, graph_ops['var_map'],
                                          checkpoint_path)
    saver = tf.train.Saver(graph_ops['var_map'])
    # The epoch counter of the single-pass input is a local variable.
    init_local = tf.local_variables_initializer()
    writer = tf.summary.FileWriterCache.get(eval_dir) if eval_dir else None
    graph.finalize()

    with tf.Session(config=session_config or sessions.eval_config()) as sess:
      try:
        saver.restore(sess, checkpoint_path)
      except tf.errors.OpError as e:
        raise CheckpointUnreadableError(
            'cannot restore checkpoint %s (pruned by training, not '
            'completely written, or damaged): %s'
            % (checkpoint_path, e.message.splitlines()[0]))
      sess.run(init_local)
      coord = tf.train.Coordinator()
      threads = tf.train.start_queue_runners(sess=sess, coord=coord)
      try:
        correct, predictions, labels, graph_summary = _count(
            sess, graph_ops, num_examples)
      finally:
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)

      true_count = int(correct.sum())
      per_class, confusion = eval_report.count_per_class(correct, predictions,
                                                         labels)
      result = {'checkpoint': checkpoint_path, 'global_step': global_step,
                'num_examples': num_examples, 'true_count': true_count,
                'precision': true_count / num_examples,
                'per_class': per_class, 'confusion': confusion}
      print(PRECISION_FORMAT % (datetime.now(), result['precision']))
      print(eval_report.format_table(per_class, confusion), flush=True)
      if writer:
        _write_summaries(writer, result, graph_summary, sess, graph_ops)
  return result


def _newest_checkpoint(checkpoint_dir):
  """The newest checkpoint in checkpoint_dir, and what identifies it.

  Returns:
    (path, identity), or (None, None) when there is none. The identity
    includes the index file's modification time, so a checkpoint rewritten
    under the same name (training restarted) counts as new.
  """
  path = checkpoints.newest(checkpoint_dir)
  if path is None:
    return None, None
  try:
    mtime = tf.io.gfile.stat(path + '.index').mtime_nsec
  except tf.errors.OpError:
    mtime = None
  return path, (path, mtime)


def evaluate(data_dir, checkpoint_dir, eval_dir, eval_data='test',
             num_examples=10000, batch_size=128, run_once=False,
             eval_interval_secs=300, max_evaluations=None,
             session_config=None, num_threads=1, sleep=time.sleep,
             compute_dtype=None):
  """Evaluates the newest checkpoint, once or each new one as training runs.

  Periodic mode checks checkpoint_dir every eval_interval_secs and evaluates
  each checkpoint once, the newest only if several appeared meanwhile. A
  checkpoint that is pruned or incomplete when read is skipped.

  Args:
    data_dir, eval_data, num_examples, batch_size, session_config,
      num_threads, compute_dtype: as `eval_once`.
    checkpoint_dir: the training run's train_dir.
    eval_dir: where summaries go; created if missing, never deleted.
    run_once: bool, evaluate the newest checkpoint and return.
    eval_interval_secs: seconds between looks at checkpoint_dir.
    max_evaluations: int or None; periodic mode returns after this many.
    sleep: called with eval_interval_secs to wait (tests replace it).

  Returns:
    The list of `eval_once` results, in order.

  Raises:
    ValueError: bad settings or data files, before any graph is built.
    CheckpointError: no checkpoint with run_once, or a checkpoint that lacks
      the model or its moving averages.
  """
  check_eval_args(data_dir, eval_data, num_examples, batch_size)
  if eval_interval_secs < 0:
    raise ValueError('eval_interval_secs must be >= 0, got %r'
                     % (eval_interval_secs,))
  tf.io.gfile.makedirs(eval_dir)
  results = []
  last_identity = None
  waiting = False
  while True:
    path, identity = _newest_checkpoint(checkpoint_dir)
    if path is None and run_once:
      raise CheckpointError(
          "No checkpoint file found in checkpoint_dir %s (no 'checkpoint' "
          'file listing one): point --checkpoint_dir at the --train_dir of a '
          'training run that has saved a checkpoint' % checkpoint_dir)
    if path is None and not waiting:
      print('No checkpoint file found in %s; waiting for training to write '
            'one (looking every %s s).' % (checkpoint_dir, eval_interval_secs),
            flush=True)
      waiting = True
    elif path is not None and identity != last_identity:
      last_identity = identity
      try:
        results.append(eval_once(path, data_dir, eval_dir, eval_data,
                                 num_examples, batch_size, session_config,
                                 num_threads, compute_dtype))
      except CheckpointUnreadableError as e:
        if run_once:
          raise
        print('Skipping: %s.' % e, flush=True)
      if run_once or len(results) == max_evaluations:
        return results
      print('Waiting for a new checkpoint in %s (looking every %s s).'
            % (checkpoint_dir, eval_interval_secs), flush=True)
      waiting = True
    sleep(eval_interval_secs)


def main(argv):
  run_flags.check_no_arguments(argv)
  console.quiet_python_logs()
  run_flags.check_flag_range('batch_size', FLAGS.batch_size, minimum=1)
  run_flags.check_flag_writable_dir('eval_dir', FLAGS.eval_dir)
  if FLAGS.use_fp16:
    print('Note: --use_fp16 is not needed here; the model takes the dtype '
          'of the weights in each checkpoint.')
  files = cifar10_input.eval_files(FLAGS.eval_data)
  try:
    download.maybe_download_and_extract(FLAGS.data_dir, FLAGS.data_url,
                                        FLAGS.data_md5, files=files)
    records = check_eval_args(FLAGS.data_dir, FLAGS.eval_data,
                              FLAGS.num_examples, FLAGS.batch_size)
    print(download.data_line(FLAGS.data_dir, files, records))
  except ValueError as e:  # cifar10_input.DataError is one too
    sys.exit(ERROR_FORMAT % str(e).replace('num_examples=', '--num_examples='))
  # Eval runs where TensorFlow places it: on a GPU when there is one.
  compute_dtype = precision.compute_dtype_here(FLAGS.mixed_precision,
                                               sessions.has_gpu())
  try:
    evaluate(data_dir=FLAGS.data_dir, checkpoint_dir=FLAGS.checkpoint_dir,
             eval_dir=FLAGS.eval_dir, eval_data=FLAGS.eval_data,
             num_examples=FLAGS.num_examples, batch_size=FLAGS.batch_size,
             run_once=FLAGS.run_once,
             eval_interval_secs=FLAGS.eval_interval_secs,
             session_config=sessions.eval_config(run_flags.threads(FLAGS)),
             compute_dtype=compute_dtype)
  except CheckpointError as e:
    sys.exit(ERROR_FORMAT % e)


if __name__ == '__main__':
  app.run(main)
