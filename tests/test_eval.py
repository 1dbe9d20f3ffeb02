"""Tests for cifar10_eval.py: exact counting, averaged weights, follow mode."""

import collections
import glob
import os
import re
import shutil
import signal

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cifar10_classify
import cifar10_eval
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import evaluation
import synthetic
import testutil
from testutil import DATE
from testutil import run_script
from testutil import save_checkpoint
from testutil import session_config

PRECISION_LINE = testutil.PRECISION_LINE
# conftest's learned_train_dir: a trained model's checkpoints 0 and this.
TRAIN_STEPS = testutil.LEARNED_TRAIN_STEPS


@pytest.fixture(scope='module')
def colour_dir(tmp_path_factory):
  """A checkpoint_dir of testutil.colour_checkpoint's model at step 5: a
  model that tells the colours apart, written directly (no training)."""
  directory = str(tmp_path_factory.mktemp('colour_model'))
  testutil.colour_checkpoint(directory, 5)
  return directory


def _labels(data_dir, eval_data='test'):
  """The labels of --eval_data's files, in file order."""
  return np.concatenate([synthetic.read_records(os.path.join(
      data_dir, 'cifar-10-batches-bin', name))[0] for name in (
          [synthetic.TEST_FILE] if eval_data == 'test'
          else synthetic.TRAIN_FILES)])


def _eval_once(checkpoint, data_dir, **kwargs):
  kwargs.setdefault('session_config', session_config())
  return testutil.eval_once(
      checkpoint, evaluation.EvalSettings(data_dir, **kwargs))


def _events(eval_dir):
  """(step, tag) -> list of values (simple_value, or the value's kind)."""
  found = collections.defaultdict(list)
  for path in glob.glob(os.path.join(eval_dir, 'events.out.tfevents.*')):
    for event in tf.train.summary_iterator(path):
      for value in event.summary.value:
        kind = value.WhichOneof('value')
        found[event.step, value.tag].append(
            value.simple_value if kind == 'simple_value' else kind)
  return found


@pytest.mark.slow  # Starts a process; its fixture trains.
def test_script_run_once_after_training(data_dir, learned_train_dir, tmp_path):
  # Its whole console, line by line (docs/console.md): no TensorFlow noise.
  eval_dir = tmp_path / 'eval'
  eval_dir.mkdir()
  (eval_dir / 'keep.txt').write_text('not deleted')

  result = run_script('cifar10_eval.py', [
      '--run_once', '--data_dir=%s' % data_dir,
      '--checkpoint_dir=%s' % learned_train_dir, '--eval_dir=%s' % eval_dir,
      '--num_examples=20', '--batch_size=8'])

  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == ''
  testutil.match_lines(result.stdout, [
      r'Data: %s, 1 file, 20 records \(checked\)\.'
      % re.escape(os.path.join(data_dir, 'cifar-10-batches-bin')),
      DATE + r': evaluating %s/model\.ckpt-%d \(global step %d, float32 '
      r'weights\) on 20 test examples'
      % (re.escape(learned_train_dir), TRAIN_STEPS, TRAIN_STEPS),
      DATE + r': precision @ 1 = [01]\.\d{3}',
      r'class +examples +correct +precision @ 1  most confused with',
  ] + [r'%-12s +2 +[0-2] +[01]\.\d{3}  (\w+ \(\d\)|-)' % name  # 2 a class
       for name in data_files.CLASS_NAMES])
  precision = float(PRECISION_LINE.search(result.stdout).group(1))
  # Well above chance (0.1); the seeded fixture reached 1.0 in every measured
  # run (testutil.learned_train_dir).
  assert precision >= 0.5, result.stdout
  assert (eval_dir / 'keep.txt').exists()
  events = _events(str(eval_dir))
  assert events[TRAIN_STEPS, 'Precision @ 1'] == [
      pytest.approx(precision, abs=5e-4)]
  # The report's summaries (what they hold: test_eval_report.py,
  # test_tensorboard.py) and the eval graph's own, at the checkpoint's step.
  assert {tag for step, tag in events if step == TRAIN_STEPS} >= {
      'Precision @ 1 by class/truck', 'confusion_matrix/image/0',
      'confusion_matrix_counts', 'precision_by_class', 'images/image/0',
      'conv1/conv1/conv1/sparsity'}


def test_test_file_alone_is_enough_and_nothing_is_fetched(data_dir, colour_dir,
                                                         tmp_path, capsys):
  only_test = tmp_path / 'data' / 'cifar-10-batches-bin'
  only_test.mkdir(parents=True)
  shutil.copy(os.path.join(data_dir, 'cifar-10-batches-bin', 'test_batch.bin'),
              str(only_test))
  data = str(only_test.parent)
  # Nothing listens there: any download attempt would fail the run.
  url = 'http://127.0.0.1:%d/cifar-10-binary.tar.gz' % testutil.free_ports(1)[0]

  # What the script's main does with --data_url=url, in this process.
  download.maybe_download_and_extract(
      data, url, download.ARCHIVES['cifar10'].md5,
      files=list(data_files.TEST_FILES))
  testutil.evaluate(colour_dir, str(tmp_path / 'e'), evaluation.EvalSettings(
      data, num_examples=20, batch_size=8, run_once=True,
      session_config=session_config()))

  printed = capsys.readouterr().out
  assert len(PRECISION_LINE.findall(printed)) == 1
  assert 'CIFAR-10' not in printed  # No "getting", no "extracting".
  assert os.listdir(str(only_test)) == ['test_batch.bin']
  # (train_eval's files, missing, are fetched: test_download.py's
  # test_only_a_missing_file_that_is_read_is_fetched; named where they
  # cannot be: its test_incomplete_dir_without_archive_names_both_problems.)


def test_untrained_checkpoint_is_near_chance(data_dir, tmp_path):
  # A trainer's first checkpoint: the initial values (seeded, as
  # testutil.train_fixture seeds its runs).
  checkpoint = testutil.model_checkpoint(str(tmp_path), step=0,
                                         seed=testutil.FIXTURE_SEED)
  result = _eval_once(checkpoint, data_dir, eval_data='train_eval',
                      num_examples=100, batch_size=16)

  assert (result['global_step'], result['num_examples']) == (0, 100)
  assert result['precision'] <= 0.3


@pytest.mark.parametrize('eval_data,num_examples,batch_size', [
    ('test', 13, 5), ('test', 20, 8), ('test', 20, 32), ('test', 7, 1),
    ('train_eval', 100, 16)])
def test_counts_exactly_num_examples_and_the_classes_add_up(
    data_dir, colour_dir, capsys, eval_data, num_examples, batch_size):
  result = _eval_once(tf.train.latest_checkpoint(colour_dir), data_dir,
                      eval_data=eval_data, num_examples=num_examples,
                      batch_size=batch_size)

  # The first num_examples records of the files, each once, each right (the
  # colour model): the confusion matrix is their labels' counts, diagonal.
  counts = np.bincount(_labels(data_dir, eval_data)[:num_examples],
                       minlength=10)
  np.testing.assert_array_equal(result['confusion'], np.diag(counts))
  assert result['num_examples'] == result['true_count'] == num_examples
  assert result['precision'] == result['precision_at_5'] == 1.0
  assert result['per_class'] == [
      {'name': name, 'examples': n, 'correct': n,
       'precision': 1.0 if n else None}
      for name, n in zip(data_files.CLASS_NAMES, counts)]
  # CIFAR-10's console as it was: no precision @ 5 line, though it is made.
  printed = capsys.readouterr().out
  assert len(PRECISION_LINE.findall(printed)) == 1
  assert 'precision @ 5' not in printed


# Every image gets the averages' logits: one-hot 7; all equal (one_hot(-1):
# in_top_k alone would call every example right, the argmax, class 0, is
# right for the two airplanes only); or classes 0-3 above the fifth largest,
# 4, 5 and 6 tied at it (in_top_k counts all three: 14 of the 20 records,
# two a class), 7-9 below. (Of float16 weights:
# test_mixed_precision.py's test_eval_with_the_flag_predicts_what_the_...)
@pytest.mark.parametrize('shadow_class,logits,predicted,at_5', [
    (7, None, 7, 1.0), (-1, None, 0, 1.0),
    (None, [5, 4, 3, 2, 1, 1, 1, 0, 0, 0], 0, 0.7)],
                         ids=['one_class', 'tied_logits', 'tied_5th'])
def test_restores_the_moving_averages_not_the_raw_weights(
    data_dir, tmp_path, shadow_class, logits, predicted, at_5):
  save_checkpoint(str(tmp_path / 'model.ckpt'), 5, raw_class=3,
                  shadow_class=shadow_class, shadow_logits=logits)

  result = _eval_once(str(tmp_path / 'model.ckpt-5'), data_dir,
                      num_examples=20, batch_size=8)

  # Every image is predicted as the averages' class, none as the raw 3.
  assert result['global_step'] == 5
  assert list(result['confusion'][:, predicted]) == [2] * 10
  assert result['confusion'][:, 3].sum() == 0
  assert result['true_count'] == 2
  assert result['precision'] == pytest.approx(0.1)
  assert result['precision_at_5'] == pytest.approx(at_5)


def test_precision_at_5_is_printed_above_ten_classes(tmp_path, capsys):
  hundred_dir = synthetic.make_cifar100_dir(str(tmp_path / 'data'))
  hundred = testutil.model_checkpoint(str(tmp_path / 'train'), step=3,
                                      num_classes=100)
  result = _eval_once(hundred, hundred_dir, dataset='cifar100', batch_size=50)
  lines = capsys.readouterr().out.splitlines()

  # The line, in the same format, right after precision @ 1 (none at ten
  # classes: test_counts_exactly_num_examples_and_the_classes_add_up).
  first = [i for i, line in enumerate(lines) if PRECISION_LINE.match(line)]
  assert len(first) == 1
  assert re.fullmatch(DATE + r': precision @ 5 = %.3f'
                      % result['precision_at_5'], lines[first[0] + 1])
  assert sum('precision @ 5' in line for line in lines) == 1


# What eval and classify say of a checkpoint they refuse (%s: its path), by
# what is wrong with it. (A damaged one's lines: test_classify.py's
# test_find_checkpoint_names_a_missing_unreadable_or_averageless_one, and
# test_run_once_on_a_damaged_checkpoint_exits_with_its_skipping_line.)
REFUSALS = {
    'no averages': (
        'checkpoint %s has no moving averages of the weights (no '
        'conv1/biases/ExponentialMovingAverage): evaluation uses the averaged '
        'weights, which cifar10_train.py saves; this checkpoint was written '
        'without them',
        'checkpoint %s holds no CIFAR-10 model with moving averages (no '
        'conv1/weights/ExponentialMovingAverage)'),
    'another model': (
        'checkpoint %s does not hold the CIFAR-10 model (no '
        'softmax_linear/biases); point --checkpoint_dir at a cifar10_train.py '
        '--train_dir',
        'checkpoint %s holds no CIFAR-10 model with moving averages (no '
        'softmax_linear/biases)'),
}


def _unusable_checkpoint(directory, fault):
  """(eval's line, classify's line) of a checkpoint model.ckpt-5 in
  directory that both refuse, for REFUSALS' fault."""
  if fault == 'another model':
    testutil.another_models_checkpoint(directory, 5)
  else:
    save_checkpoint(os.path.join(directory, 'model.ckpt'), 5, raw_class=3,
                    shadow_class=7, with_averages=False)
  return tuple(line % os.path.join(directory, 'model.ckpt-5')
               for line in REFUSALS[fault])


@pytest.mark.parametrize('fault', sorted(REFUSALS))
def test_eval_and_classify_open_a_checkpoint_through_one_function(
    data_dir, tmp_path, monkeypatch, fault):
  eval_line, classify_line = _unusable_checkpoint(str(tmp_path), fault)
  path = str(tmp_path / 'model.ckpt-5')
  opened = []
  open_model_checkpoint = checkpoints.open_model_checkpoint

  def spy(checkpoint, averaged=False, data_set=None):
    opened.append(checkpoint)
    return open_model_checkpoint(checkpoint, averaged, data_set)

  monkeypatch.setattr(checkpoints, 'open_model_checkpoint', spy)
  with pytest.raises(checkpoints.CheckpointError) as refused:
    _eval_once(path, data_dir, num_examples=20, batch_size=8)
  assert str(refused.value) == eval_line
  with pytest.raises(cifar10_classify.ClassifyError) as refused:
    cifar10_classify.find_checkpoint('', checkpoint_path=path)
  assert str(refused.value) == classify_line
  assert opened == [path, path]


@pytest.mark.slow  # Starts a process.
def test_scripts_refuse_a_checkpoint_they_cannot_use_each_in_its_line(
    data_dir, tmp_path):
  # Each script's process test of an error: its one line, exit status 1.
  # Every other checkpoint each refuses, and its line, is a call:
  # test_eval_and_classify_open_a_checkpoint_through_one_function.
  eval_line, classify_line = _unusable_checkpoint(str(tmp_path),
                                                  'another model')
  refusals = [
      run_script('cifar10_eval.py', [
          '--data_dir=%s' % data_dir, '--checkpoint_dir=%s' % tmp_path,
          '--eval_dir=%s' % (tmp_path / 'eval'), '--run_once']),
      run_script('cifar10_classify.py', [
          '--checkpoint_path=%s' % (tmp_path / 'model.ckpt-5'),
          str(tmp_path)])]
  assert [(r.returncode, r.stderr.strip().splitlines()[-1])
          for r in refusals] == [
              (1, 'cifar10_eval.py: error: ' + eval_line),
              (1, 'cifar10_classify.py: ' + classify_line)]
  assert not any('Traceback' in r.stderr for r in refusals)
  assert 'evaluating' not in refusals[0].stdout


def test_run_once_on_a_damaged_checkpoint_exits_with_its_skipping_line(
    data_dir, tmp_path, capsys):
  checkpoint_dir = str(tmp_path / 'train')
  damaged = testutil.model_checkpoint(checkpoint_dir, step=(0, 5))
  data_file = damaged + '.data-00000-of-00001'
  os.truncate(data_file, os.path.getsize(data_file) // 2)

  # What the script's main runs with these flags (its errors' process test:
  # test_scripts_refuse_a_checkpoint_they_cannot_use_each_in_its_line).
  last = testutil.exit_line(
      lambda: cifar10_eval.evaluate_as_flagged(cifar10_eval.FLAGS,
                                               checkpoint_dir),
      'cifar10_eval.py', [
          '--run_once', '--data_dir=%s' % data_dir,
          '--eval_dir=%s' % (tmp_path / 'eval'), '--num_examples=20'],
      cifar10_eval.FLAGS)

  # The line that skips it when following training, here the error, with
  # TensorFlow's reason after the colon; the checkpoint before is not
  # evaluated either.
  prefix = ('cifar10_eval.py: error: cannot read checkpoint %s (pruned by '
            'training, not completely written, or damaged): ' % damaged)
  assert last.startswith(prefix) and len(last) > len(prefix), last
  assert '\n' not in last
  printed = capsys.readouterr().out
  assert 'evaluating' not in printed
  assert not PRECISION_LINE.search(printed)


def test_follows_training_each_checkpoint_once(data_dir, tmp_path, capsys):
  checkpoint_dir, eval_dir = tmp_path / 'train', tmp_path / 'eval'
  checkpoint_dir.mkdir()

  # What training does while the evaluator sleeps between looks. (A damaged
  # checkpoint is skipped too: test_train_dir_faults.py's
  # test_damaged_newest_checkpoint_falls_back_and_is_skipped_by_eval.)
  actions = [
      lambda: save_checkpoint(str(checkpoint_dir / 'model.ckpt'), 1, 0, 1),
      lambda: None,  # No new checkpoint: nothing is evaluated.
      lambda: tf.train.update_checkpoint_state(  # Listed, then pruned.
          str(checkpoint_dir), str(checkpoint_dir / 'model.ckpt-9')),
      lambda: testutil.another_models_checkpoint(str(checkpoint_dir), 11),
      lambda: save_checkpoint(str(checkpoint_dir / 'model.ckpt'), 12, 0, 2),
  ]
  sleeps = []

  def sleep(secs):
    sleeps.append(secs)
    actions[len(sleeps) - 1]()

  results = testutil.evaluate(
      str(checkpoint_dir), str(eval_dir), evaluation.EvalSettings(
          data_dir, num_examples=20, batch_size=8, eval_interval_secs=3,
          session_config=session_config()),
      max_evaluations=2, sleep=sleep)

  output = capsys.readouterr().out
  assert [r['global_step'] for r in results] == [1, 12]
  assert [r['confusion'][:, c].sum() for r, c in zip(results, (1, 2))] == [
      20, 20]
  assert sleeps == [3] * 5
  assert 'No checkpoint file found in %s; waiting' % checkpoint_dir in output
  assert 'Skipping: cannot read checkpoint %s' % (
      checkpoint_dir / 'model.ckpt-9') in output
  assert ('Skipping: checkpoint %s does not hold the CIFAR-10 model (no '
          'softmax_linear/biases)' % (checkpoint_dir / 'model.ckpt-11')
          in output)
  assert output.count('precision @ 1 =') == 2
  assert {key: value for key, value in _events(str(eval_dir)).items()
          if key[1] == 'Precision @ 1'} == {
              (1, 'Precision @ 1'): [pytest.approx(0.1)],
              (12, 'Precision @ 1'): [pytest.approx(0.1)]}


def test_bad_flags_are_refused_before_any_graph(data_dir):
  # absl stops the script at parse time with these messages (the one
  # process test of such a stop: test_flag_rules.py's). --eval_data is an
  # enum; --until_step follows training: with --run_once, a rule.
  with pytest.raises(flags.IllegalFlagValueError,
                     match=r'should be one of <test\|train_eval>'):
    cifar10_eval.FLAGS['eval_data'].parse('train')
  with pytest.raises(flags.IllegalFlagValueError) as e:
    with testutil.as_script('cifar10_eval.py', ['--run_once',
                                                '--until_step=5'],
                            cifar10_eval.FLAGS):
      pass
  assert str(e.value) == (
      'flags until_step=5, run_once=True: --until_step applies to following '
      'training, not to --run_once')
  # Then, with the data (fetch_data_then_settings; the test file's count:
  # test_download.py's test_eval_flags_prepare_their_dataset).
  for eval_data, num_examples, message in [
      ('train', 20, "eval_data must be 'test' or 'train_eval'"),
      ('train_eval', 101, 'num_examples=101 is more than the 100 records')]:
    with pytest.raises(ValueError, match=message):
      evaluation.check_num_examples(num_examples,
                                    data_files.describe(data_dir), eval_data)


# SIGINT as a terminal delivers it: the test process may have left it
# ignored (a signal test in it), and a child inherits that.
_WITH_SIGINT = ('import runpy, signal, sys; '
                'signal.signal(signal.SIGINT, signal.default_int_handler); '
                'sys.argv = sys.argv[1:]; '
                'runpy.run_path(sys.argv[0], run_name="__main__")')


@pytest.mark.slow  # A process and a signal.
def test_ctrl_c_while_following_ends_quietly_with_130(data_dir, tmp_path):
  log = tmp_path / 'eval.log'
  proc = testutil.start_script('cifar10_eval.py', [
      '--data_dir=' + data_dir, '--checkpoint_dir=%s' % (tmp_path / 'none'),
      '--eval_dir=%s' % (tmp_path / 'eval')], str(log),
                               ['-c', _WITH_SIGINT])
  try:
    testutil.wait_for('eval to wait', lambda: 'No checkpoint file found' in
                      log.read_text(), [str(log)],
                      lambda: proc.poll() is not None and 'it ended')
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT
  finally:
    testutil.stop([proc])
  assert 'Traceback' not in log.read_text()
