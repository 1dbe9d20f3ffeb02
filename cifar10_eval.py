"""Evaluates CIFAR-10 checkpoints: precision @ 1, per class, averaged weights.

    python cifar10_eval.py --data_dir=/tmp/cifar10_data --run_once
    python cifar10_eval.py --checkpoint_dir=/tmp/cifar10_train   # follows training

It restores the newest checkpoint in --checkpoint_dir with the moving averages
of the weights, counts the first --num_examples examples of --eval_data, each
once, and prints their precision @ 1 (@ 5 too above 10 classes) and a per-class
table, with summaries in --eval_dir; following training, each new checkpoint
once (docs/evaluation.md).
"""

import collections
from datetime import datetime
import os
import sys
import time

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
from cifar10_support import checkpoints
from cifar10_support import evaluation
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals

FLAGS = flags.FLAGS

# --eval_dir, --eval_data, --eval_interval_secs, --num_examples, --run_once
# (the distributed trainer's evaluator task takes them too).
evaluation.define_eval_flags()
run_flags.define_checkpoint_dir_flag()
# --help lists cifar10.py's, run_flags' and evaluation's flags: this script
# reads them.
flags.adopt_module_key_flags(cifar10)
flags.adopt_module_key_flags(run_flags)
flags.adopt_module_key_flags(evaluation)
flags.DEFINE_integer('until_step', None,
                     'Following training, stop once a checkpoint at or past '
                     'this global step (the trainer\'s --max_steps) is '
                     'evaluated; unset: follow on.', lower_bound=0)
flags.register_multi_flags_validator(
    ['until_step', 'run_once'],
    lambda values: values['until_step'] is None or not values['run_once'],
    '--until_step applies to following training, not to --run_once')

EvalGraph = collections.namedtuple('EvalGraph', [
    'correct', 'in_top_5', 'predictions', 'labels', 'summary_op',
    'variables_to_restore'])
EvalGraph.__doc__ = """`build_eval_graph`'s tensors [batch] `correct` (bool:
the label is the top prediction), `in_top_5` (bool: in_top_k's k=5),
`predictions` and `labels` (int32), its merged `summary_op`, and
`variables_to_restore`: checkpoint key -> variable, restored from its moving
average."""


def build_eval_graph(settings, data_set, use_fp16=False):
  """The EvalGraph of an evaluation.EvalSettings, in the default graph, for
  data_files.DataSet data_set, whose class count the model takes; use_fp16:
  the checkpoint holds float16 weights."""
  # The input is read once, in file order, so no example counts twice.
  images, labels = cifar10.inputs(settings.eval_data, settings.data_dir,
                                  settings.batch_size, use_fp16=use_fp16,
                                  num_threads=settings.input_threads,
                                  single_pass=True, data_set=data_set)
  logits = cifar10.inference(images, settings.compute_dtype,
                             data_set.num_classes)
  # in_top_k takes float32 logits only; --use_fp16 labels arrive as float16.
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  top_k = tf.nn.in_top_k(logits, labels, 1, name='top_k')
  predictions = tf.argmax(logits, axis=1, output_type=tf.int32)
  # in_top_k also counts a label tied with the top logit; requiring the
  # argmax too counts a tie once, as the confusion matrix does.
  correct = tf.logical_and(top_k, tf.equal(predictions, labels))
  return EvalGraph(correct=correct, in_top_5=tf.nn.in_top_k(logits, labels, 5),
                   predictions=predictions, labels=labels,
                   summary_op=tf.summary.merge_all(),
                   variables_to_restore=cifar10.moving_averages_to_restore())


def count_examples(sess, eval_graph, num_examples):
  """Returns (correct, in_top_5, predictions, labels), arrays [num_examples],
  and the first batch's serialized summaries (bytes), running batches in sess
  (its input started); raises ValueError if the input ends first."""
  fetches = {k: getattr(eval_graph, k)
             for k in ('correct', 'in_top_5', 'predictions', 'labels')}
  # The summaries come with the first batch: the input ends after the last
  # one, so there would be no batch left to run them on.
  first = dict(fetches, summary=eval_graph.summary_op)
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
    take = min(len(values['labels']), num_examples - counted)
    for k in parts:
      parts[k].append(values[k][:take])
    counted += take
  return tuple(np.concatenate(parts[k]) for k in fetches) + (summary,)


def eval_once(checkpoint_path, settings, data_set, eval_dir=None):
  """Evaluates one checkpoint on the first settings.num_examples examples.

  Args:
    checkpoint_path: checkpoint prefix, e.g. '/tmp/cifar10_train/model.ckpt-0';
      the model takes the dtype of its weights (--use_fp16 ones too).
    settings: an evaluation.EvalSettings.
    data_set: the data_files.DataSet of settings.data_dir, whose files it
      reads (evaluation.fetch_data_then_settings').
    eval_dir: where summaries go; None writes none.

  Returns:
    A dict: 'checkpoint', 'global_step', 'num_examples', 'true_count',
    'precision' (true_count / num_examples), 'precision_at_5', and the
    evaluation.EvalReport's 'per_class' and 'confusion'.

  Raises:
    checkpoints.CheckpointMismatchError: it lacks a variable of the model
      (NotTheModelError) or of its moving averages, or holds one of another
      shape.
    checkpoints.ClassesMismatchError: it was trained on other classes than
      the data's.
    checkpoints.CheckpointUnreadableError: its files are missing or
      incomplete.
  """
  num_examples = settings.num_examples or data_set.records(
      data_set.eval_files(settings.eval_data))
  reader, dtype, global_step = checkpoints.open_model_checkpoint(
      checkpoint_path, data_set=data_set)
  # --mixed_precision does not apply to float16 weights.
  fp16_note = dtype != tf.float32 and settings.compute_dtype is not None
  if fp16_note:
    settings = settings._replace(compute_dtype=None)
  with tf.Graph().as_default() as graph:
    eval_graph = build_eval_graph(settings, data_set,
                                  use_fp16=dtype == tf.float16)
    checkpoints.check_averages_restorable(
        reader, eval_graph.variables_to_restore, checkpoint_path)
    print('%s: evaluating %s (global step %d, %s weights) on %d %s examples'
          % (datetime.now(), checkpoint_path, global_step, dtype.name,
             num_examples, settings.eval_data), flush=True)
    if fp16_note:
      print('Note: %s holds %s weights (--use_fp16): --mixed_precision does '
            'not apply, the model computes in %s.'
            % (checkpoint_path, dtype.name, dtype.name), flush=True)
    saver = tf.train.Saver(eval_graph.variables_to_restore)
    # The epoch counter of the single-pass input is a local variable.
    init_local = tf.local_variables_initializer()
    writer = tf.summary.FileWriterCache.get(eval_dir) if eval_dir else None
    graph.finalize()

    config = settings.session_config or sessions.eval_config()
    with tf.Session(config=config) as sess:
      try:
        saver.restore(sess, checkpoint_path)
      except tf.errors.OpError as e:  # Pruned or rewritten since it was read.
        raise checkpoints.CheckpointUnreadableError(
            checkpoint_path, e.message.splitlines()[0], action='restore')
      sess.run(init_local)
      coord = tf.train.Coordinator()
      threads = tf.train.start_queue_runners(sess=sess, coord=coord)
      try:
        correct, in_top_5, predictions, labels, graph_summary = count_examples(
            sess, eval_graph, num_examples)
      finally:
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)

  true_count = int(correct.sum())
  precision = true_count / num_examples
  precision_at_5 = int(in_top_5.sum()) / num_examples
  print('%s: precision @ 1 = %.3f' % (datetime.now(), precision))
  if data_set.num_classes > 10:  # CIFAR-100's measure.
    print('%s: precision @ 5 = %.3f' % (datetime.now(), precision_at_5))
  report = evaluation.EvalReport(data_set.class_names, correct,
                                  predictions, labels)
  print(report.table(), flush=True)
  if writer:
    summary = tf.Summary.FromString(graph_summary)
    summary.value.add(tag='Precision @ 1', simple_value=precision)
    summary.value.add(tag='Precision @ 5', simple_value=precision_at_5)
    report.write_summaries(writer, summary, global_step)
  return {'checkpoint': checkpoint_path, 'global_step': global_step,
          'num_examples': num_examples, 'true_count': true_count,
          'precision': precision, 'precision_at_5': precision_at_5,
          'per_class': report.per_class, 'confusion': report.confusion}


def evaluate(checkpoint_dir, eval_dir, settings, data_set,
             max_evaluations=None, sleep=time.sleep):
  """Evaluates the newest checkpoint in checkpoint_dir once (run_once), or
  each new one as training writes them (until one at settings.until_step, if
  set), skipping, with a line, one that was pruned or half written when read
  or holds another model; returns the list of `eval_once` results.

  Args:
    eval_dir: where summaries go; created if missing, never deleted.
    settings, data_set: as eval_once's.
    max_evaluations: int or None; following training, return after this many.
    sleep: called with settings.eval_interval_secs to wait.

  Raises:
    checkpoints.CheckpointError: no checkpoint with run_once, or one without
      the model or its moving averages; following, one of other classes.
  """
  tf.io.gfile.makedirs(eval_dir)
  results = []
  for path in evaluation.new_checkpoints(
      checkpoint_dir, settings.run_once, settings.eval_interval_secs, sleep):
    try:
      results.append(eval_once(path, settings, data_set, eval_dir))
    except checkpoints.UnusableCheckpointError as e:
      if settings.run_once:
        raise
      print('Skipping: %s.' % e, flush=True)
    if (settings.run_once or len(results) == max_evaluations or
        (settings.until_step is not None and results and
         results[-1]['global_step'] >= settings.until_step)):
      return results


def evaluate_as_flagged(flag_values, checkpoint_dir):
  """`evaluate` with the flags checked (data fetched) once. A bad flag, data
  file or checkpoint ends the process with one line, '<script>: error:
  <message>', and exit status 1."""
  def fail(message):
    sys.exit('%s: error: %s' % (os.path.basename(sys.argv[0]), message))

  run_flags.check_flag_writable_dir('eval_dir', flag_values.eval_dir)
  if flag_values.use_fp16:
    print('Note: --use_fp16 is not needed here; the model takes the dtype '
          'of the weights in each checkpoint.')
  try:
    settings, data_set = evaluation.fetch_data_then_settings(flag_values)
  except ValueError as e:  # data_files.DataError is one too
    fail(str(e).replace('num_examples=', '--num_examples='))
  try:
    return evaluate(checkpoint_dir, flag_values.eval_dir, settings, data_set)
  except ValueError as e:  # CheckpointError; DataError: a names file.
    fail(e)


# Output closed early (`| head`): exit status 141 at once, quietly.
@signals.script_main()
def main(argv):
  del argv  # Flags only.
  results = evaluate_as_flagged(FLAGS, FLAGS.checkpoint_dir)
  if FLAGS.until_step is not None:
    print('Done: %s (global step %d, --until_step=%d): precision @ 1 = %.3f.'
          % (results[-1]['checkpoint'], results[-1]['global_step'],
             FLAGS.until_step, results[-1]['precision']), flush=True)


if __name__ == '__main__':
  app.run(main)
