"""Trains on the real data and checks precision @ 1 against our recorded runs.

    python benchmarks/accuracy.py --data_dir=/tmp/cifar10_data --steps=2000
    python benchmarks/accuracy.py --data_dir=/tmp/cifar10_data --steps=5000 \
        --mixed_precision=bf16 --log=/tmp/bf16.json

Trains as `cifar10_train.py` does (its default hyper-parameters) from step 0,
in legs (`train_and_evaluate`), evaluates each leg's checkpoint on the test
images with the averaged weights in float32 (`cifar10_eval.eval_once`), and
prints one row per checkpoint against the record, accuracy_curve.json:

    step  wall time  precision @ 1  recorded  tolerance  result

The exit status is 1 if a row is outside its tolerance (`band`), or the loss
became NaN; else 0. A step the record does not hold, or a run the record
cannot judge (`record_to_check`), is printed and not checked. --log writes
the run as JSON, which plot_results.py draws; --record makes the record from
such logs. benchmarks/README.md ("Accuracy") says why the rule is what it is.
"""

import argparse
import contextlib
from datetime import datetime
from datetime import timezone
import io
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)
# The scripts, and benchmark.py beside this file (also when run by a driver).
sys.path[:0] = [ROOT, BENCHMARKS]
from cifar10_support import startup  # pylint: disable=g-import-not-at-top
startup.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow.compat.v1 as tf

import benchmark
import cifar10_eval
import cifar10_train
from cifar10_support import checkpoints
from cifar10_support import console
from cifar10_support import download
from cifar10_support import eval_run
from cifar10_support import precision
from cifar10_support import run_settings
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import train_dirs

CURVE = os.path.join(BENCHMARKS, 'accuracy_curve.json')
# The tolerance's margin, in pooled run-to-run standard deviations.
MARGIN_SDS = 2.0
# What a run must share with the record to be checked against it.
SAME_AS_RECORD = ('test_data_md5', 'batch_size', 'num_examples')
OK = 'OK'
REGRESSION = 'REGRESSION'
NOT_RECORDED = 'not recorded'


def band(precisions, sd):
  """(recorded, tolerance) at one step: the mean of the runs' `precisions`
  (floats, at least one), and their range plus MARGIN_SDS x `sd`, the pooled
  run-to-run standard deviation (`pooled_sd`). A bf16 run is judged by the
  float32 band too: it is meant to train to float32's precision."""
  recorded = sum(precisions) / len(precisions)
  return recorded, max(precisions) - min(precisions) + MARGIN_SDS * sd


def pooled_sd(precisions_by_step):
  """The run-to-run standard deviation pooled over steps (lists of floats,
  the runs' precisions at each step): each step's deviations from its own
  mean, runs - 1 degrees of freedom each; 0.0 when no step has two runs."""
  squares, freedom = 0.0, 0
  for values in precisions_by_step:
    mean = sum(values) / len(values)
    squares += sum((v - mean) ** 2 for v in values)
    freedom += len(values) - 1
  return math.sqrt(squares / freedom) if freedom else 0.0


def expected_by_step(curve):
  """{step (int): (recorded, tolerance)} of a record (accuracy_curve.json)."""
  points = curve['points']
  sd = pooled_sd([p['precision'] for p in points])
  return {p['step']: band(p['precision'], sd) for p in points}


def judge(measured, expected):
  """OK, REGRESSION, or NOT_RECORDED (expected None): a measured precision
  against (recorded, tolerance); above the band fails too, since a model
  that learns faster than the record did not run the same maths."""
  if expected is None:
    return NOT_RECORDED
  recorded, tolerance = expected
  # Rounded: a precision on the band's edge is inside, whatever the float.
  return OK if round(abs(measured - recorded), 9) <= tolerance else REGRESSION


def make_rows(results, expected):
  """The results (dicts with 'step' and 'precision'), each with 'recorded'
  and 'tolerance' (None where `expected`, {step: (recorded, tolerance)}, has
  no such step) and 'result' (`judge`'s) added."""
  rows = []
  for result in results:
    expect = expected.get(result['step'])
    rows.append(dict(result, recorded=expect and expect[0],
                     tolerance=expect and expect[1],
                     result=judge(result['precision'], expect)))
  return rows


def table_lines(rows):
  """The printed table, one str per line: a header and a line per row."""
  lines = ['%6s  %9s  %13s  %8s  %9s  %s' % (
      'step', 'wall time', 'precision @ 1', 'recorded', 'tolerance',
      'result')]
  for row in rows:
    recorded = '-' if row['recorded'] is None else '%.3f' % row['recorded']
    tolerance = ('-' if row['tolerance'] is None
                 else '+/-%.3f' % row['tolerance'])
    lines.append('%6d  %7.0f s  %13.3f  %8s  %9s  %s' % (
        row['step'], row['wall_s'], row['precision'], recorded, tolerance,
        row['result']))
  return lines


def verdict(rows, recorded_steps):
  """(exit status, one line): 1 if a row (`make_rows`) is a REGRESSION,
  else 0; recorded_steps, the record's, are named when none was checked."""
  failed = [row for row in rows if row['result'] == REGRESSION]
  checked = [row for row in rows if row['result'] != NOT_RECORDED]
  if failed:
    return 1, '%s: %d of %d checked steps outside the tolerance (%s).' % (
        REGRESSION, len(failed), len(checked),
        '; '.join('step %d: %.3f, recorded %.3f +/- %.3f' % (
            r['step'], r['precision'], r['recorded'], r['tolerance'])
                  for r in failed))
  if not recorded_steps:
    return 0, 'Nothing checked: no record of this test set to compare with.'
  if not checked:
    return 0, ('Nothing checked: the record holds none of these steps, '
               'only %s.' % ', '.join(map(str, recorded_steps)))
  return 0, '%s: all %d checked steps within the tolerance.' % (
      OK, len(checked))


def checked_steps(steps, eval_every):
  """The global steps whose checkpoints are evaluated: every multiple of
  eval_every up to steps, and steps itself (the final checkpoint)."""
  return sorted(set(range(eval_every, steps + 1, eval_every)) | {steps})


def _saved_at(checkpoint):
  return os.stat(checkpoint + '.index').st_mtime


def train_and_evaluate(settings, steps, eval_settings):
  """Trains to each of `steps` in turn, evaluating each leg's checkpoint.

  Each leg resumes from the last one's checkpoint (cifar10_train.train with
  that max_steps) and its final checkpoint is evaluated before the next leg
  starts, so the trainer's keeping only five never matters.

  Args:
    settings: a run_settings.TrainSettings, its train_dir empty.
    steps: ints, increasing.
    eval_settings: an eval_run.EvalSettings.

  Returns:
    (results, train_wall_s): a dict per step, 'step' (int), 'wall_s',
    'precision' (floats), 'true_count' and 'num_examples' (ints); and the
    training seconds in all. wall_s is training seconds from the start to
    the checkpoint's save: the first leg's graph building and queue filling
    count, as in one continuous run; evaluations and each later leg's graph
    building and restoring do not (its queue refill and first steps do).

  Raises:
    train_dirs.RUN_ERRORS, as cifar10_train.train.
    checkpoints.CheckpointError, as cifar10_eval.eval_once.
    SystemExit: a signal stopped training (after its final checkpoint).
  """
  results, trained, previous = [], 0.0, None
  for step in steps:
    began = time.time()
    outcome = cifar10_train.train(settings._replace(max_steps=step))
    ended = time.time()
    signals.exit_if_stopped(outcome['signal'])
    path = checkpoints.newest(settings.train_dir)
    # A resumed leg's clock starts when its session, built and restored,
    # saves the checkpoint it resumed from again (if it did not, at the call).
    start = max(began, _saved_at(previous)) if previous else began
    wall_s = trained + _saved_at(path) - start
    trained += ended - start
    previous = path
    evaluating = time.time()
    # eval_once's own lines (the per-class table) would bury the table.
    with contextlib.redirect_stdout(io.StringIO()):
      result = cifar10_eval.eval_once(path, eval_settings)
    print('%s: step %d evaluated: precision @ 1 = %.3f (%.1f s)' % (
        datetime.now(), step, result['precision'], time.time() - evaluating),
          flush=True)
    results.append({'step': step, 'wall_s': wall_s,
                    'precision': result['precision'],
                    'true_count': result['true_count'],
                    'num_examples': result['num_examples']})
  return results, trained


def machine_info(machine):
  """The log's fields that say where a run was measured; machine is the
  machine's short name (docs/machines.md), or None."""
  try:
    with open('/proc/cpuinfo') as f:
      cpuinfo = f.read()
  except OSError:
    cpuinfo = ''
  family = re.search(r'^cpu family\s*:\s*(\d+)', cpuinfo, re.M)
  model = re.search(r'^model\s*:\s*(\d+)', cpuinfo, re.M)
  line = benchmark.describe_machine(cpuinfo=cpuinfo or None)
  return {'machine': machine,
          'cpu': line[len('machine: '):],
          'cpu_family_model': 'family %s model %s' % (
              family.group(1), model.group(1)) if family and model else None,
          'tensorflow': tf.__version__,
          'python': platform.python_version()}


def curve_from_logs(logs):
  """A record (accuracy_curve.json's content) from the --log of N runs.

  Returns:
    A dict: the first log's machine and versions, 'date' (first to last),
    'command' (without --log), the SAME_AS_RECORD fields, 'runs' (their
    start times) and 'points': each step's 'step', and 'precision' and
    'wall_s' (lists, one value per run, in the logs' order).

  Raises:
    ValueError: the logs differ in machine, TensorFlow version, steps or
      SAME_AS_RECORD, or one is not float32.
  """
  first = logs[0]
  for log in logs:
    if log['mixed_precision'] != 'off':
      raise ValueError('the record is of float32 runs; a log has '
                       '--mixed_precision=%s' % log['mixed_precision'])
    for key in ('machine', 'tensorflow') + SAME_AS_RECORD:
      if log[key] != first[key]:
        raise ValueError('the logs differ in %s: %r and %r'
                         % (key, first[key], log[key]))
    if [r['step'] for r in log['rows']] != [r['step'] for r in first['rows']]:
      raise ValueError('the logs differ in their steps')
  dates = sorted(log['date'] for log in logs)
  command = ' '.join(arg for arg in first['command'].split()
                     if not arg.startswith('--log='))
  return {
      'what': 'precision @ 1 on the 10,000 test images of N independent '
              'float32 runs of benchmarks/accuracy.py, per step',
      'machine': first['machine'], 'cpu': first['cpu'],
      'cpu_family_model': first['cpu_family_model'],
      'tensorflow': first['tensorflow'], 'python': first['python'],
      'date': dates[0] if dates[0] == dates[-1] else ' to '.join(
          (dates[0], dates[-1])),
      'command': command,
      'test_data_md5': first['test_data_md5'],
      'batch_size': first['batch_size'],
      'num_examples': first['num_examples'],
      'runs': [log['started'] for log in logs],
      'points': [
          {'step': row['step'],
           'precision': [log['rows'][i]['precision'] for log in logs],
           'wall_s': [round(log['rows'][i]['wall_s'], 1) for log in logs]}
          for i, row in enumerate(first['rows'])]}


def write_json(path, value):
  """Writes `value` as indented JSON, each list of numbers on one line."""
  text = re.sub(r'\[([^\[\]{}"]*)\]',
                lambda match: '[%s]' % ' '.join(match.group(1).split()),
                json.dumps(value, indent=1))
  with open(path, 'w') as f:
    f.write(text + '\n')


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', default=None,
                      help='folder holding cifar-10-batches-bin/ (downloaded '
                      'there if missing, as the scripts do)')
  parser.add_argument('--steps', type=int, default=2000,
                      help='training steps (the record holds steps up to '
                      '2000)')
  parser.add_argument('--eval_every', type=int, default=500,
                      help='steps between the checkpoints evaluated')
  parser.add_argument('--mixed_precision', choices=['off', 'bf16'],
                      default='off',
                      help='bf16: train as cifar10_train.py '
                      '--mixed_precision=bf16 does; evaluation stays float32')
  parser.add_argument('--train_dir', default=None,
                      help='an empty or new directory to train into, kept '
                      'afterwards; default: a temporary one, deleted')
  parser.add_argument('--log', default=None,
                      help='write the run and its rows to this JSON file')
  parser.add_argument('--curve', default=CURVE,
                      help='the record to compare with')
  parser.add_argument('--machine', default=None,
                      help='the machine\'s short name for the log '
                      '(docs/machines.md)')
  parser.add_argument('--record', default=None, metavar='LOG,LOG,...',
                      help='instead of training: write --curve from these '
                      '--log files of float32 runs')
  parser.add_argument('--log_frequency', type=int, default=100,
                      help='steps between the training\'s step lines')
  parser.add_argument('--batch_size', type=int, default=128,
                      help='the default is the script\'s; the record holds '
                      '128 only')
  parser.add_argument('--num_examples', type=int, default=10000,
                      help='test images per evaluation; the record holds '
                      '10000 only')
  args = parser.parse_args(argv)
  for name in ('steps', 'eval_every', 'log_frequency', 'batch_size',
               'num_examples'):
    if getattr(args, name) < 1:
      parser.error('--%s must be at least 1' % name)
  if args.record is None and args.data_dir is None:
    parser.error('--data_dir is required (the real data: the record is of '
                 'the real test set)')
  return args


def record(args):
  """--record: writes --curve from the given logs."""
  logs = []
  for path in args.record.split(','):
    with open(path) as f:
      logs.append(json.load(f))
  curve = curve_from_logs(logs)
  write_json(args.curve, curve)
  expected = expected_by_step(curve)
  print('%s: %d runs; pooled standard deviation %.4f' % (
      args.curve, len(logs),
      pooled_sd([p['precision'] for p in curve['points']])))
  for step in sorted(expected):
    print('step %d: recorded %.4f, tolerance %.4f' % ((step,) +
                                                       expected[step]))
  return 0


def record_to_check(path, info):
  """The record at `path` if this run can be checked against it, else None,
  said in a line. info: this run's log fields, with the SAME_AS_RECORD ones
  (another copy of CIFAR-10, batch or number of test images gives other
  precisions: the record says nothing about them)."""
  if not os.path.exists(path):
    print('No record at %s: this run is printed, not checked.' % path)
    return None
  with open(path) as f:
    curve = json.load(f)
  differ = ['%s %s, here %s' % (key, curve.get(key), info[key])
            for key in SAME_AS_RECORD if curve.get(key) != info[key]]
  if differ:
    print('The record %s was measured otherwise (%s): this run is printed, '
          'not checked. Record float32 runs of this kind (--log, then '
          '--record) to check it.' % (path, '; '.join(differ)))
    return None
  return curve


def run(args, argv):
  """Trains, evaluates, prints the table; returns the exit status."""
  if args.train_dir and os.path.isdir(args.train_dir) and os.listdir(
      args.train_dir):
    sys.exit('accuracy.py: error: --train_dir=%s is not empty: the run '
             'must start from step 0' % args.train_dir)
  eval_settings = eval_run.EvalSettings(
      args.data_dir, num_examples=args.num_examples, run_once=True,
      session_config=sessions.eval_config())
  try:
    download.prepare(args.data_dir, download.DATA_URL, download.DATA_MD5,
                     download.ALL_FILES)
    eval_run.check_settings(eval_settings)
  except ValueError as e:  # A bad data file (DataError) or --num_examples.
    sys.exit('accuracy.py: error: %s' % e)
  info = machine_info(args.machine)
  print('%s; %s' % (info['cpu'], info['cpu_family_model']))
  compute_dtype = precision.compute_dtype_for_this_machine(
      args.mixed_precision, sessions.has_gpu())
  info.update(
      date=datetime.now(timezone.utc).strftime('%Y-%m-%d'),
      started=datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
      command=' '.join(['python', 'benchmarks/accuracy.py'] + argv),
      data_dir=args.data_dir,
      test_data_md5=download.file_md5(os.path.join(
          args.data_dir, download.BATCHES_DIR, 'test_batch.bin')),
      mixed_precision=args.mixed_precision,
      compute_dtype=(compute_dtype or tf.float32).name,
      steps=args.steps, eval_every=args.eval_every,
      batch_size=args.batch_size, num_examples=args.num_examples,
      # Other work on the machine slows the wall times: say how much ran.
      load_average_at_start=round(os.getloadavg()[0], 2))
  curve = record_to_check(args.curve, info)
  expected = expected_by_step(curve) if curve else {}

  train_dir = args.train_dir or tempfile.mkdtemp(prefix='cifar10_accuracy_')
  try:
    settings = run_settings.TrainSettings(
        args.data_dir, train_dir, batch_size=args.batch_size,
        log_frequency=args.log_frequency, compute_dtype=compute_dtype)
    with train_dirs.run_errors_end_the_process():
      try:
        results, train_wall_s = train_and_evaluate(
            settings, checked_steps(args.steps, args.eval_every),
            eval_settings)
      except train_dirs.DivergedError as e:
        # A NaN loss is the plainest regression: nothing left to evaluate.
        raise train_dirs.DivergedError('%s: %s%s' % (
            REGRESSION, e, '' if args.train_dir else
            ' (This run\'s temporary train_dir is deleted now.)')) from None
      except checkpoints.CheckpointError as e:
        sys.exit('accuracy.py: %s' % e)
    info['train_wall_s'] = round(train_wall_s, 1)
    info['load_average_at_end'] = round(os.getloadavg()[0], 2)
  finally:
    if not args.train_dir:
      shutil.rmtree(train_dir, ignore_errors=True)

  rows = make_rows(results, expected)
  status, line = verdict(rows, sorted(expected))
  print()
  if curve:
    print('recorded: the mean of %d float32 runs on %s, TensorFlow %s, %s '
          '(%s); tolerance: their range + %g x their pooled standard '
          'deviation' % (len(curve['runs']), curve['machine'],
                         curve['tensorflow'], curve['date'],
                         os.path.relpath(args.curve), MARGIN_SDS))
  for table_line in table_lines(rows):
    print(table_line)
  print(line)
  if args.log:
    info['rows'] = [dict(row, wall_s=round(row['wall_s'], 1)) for row in rows]
    write_json(args.log, info)
    print('Log: %s' % args.log)
  return status


def main(argv=None):
  """The command line; returns the exit status."""
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  if args.record:
    return record(args)
  console.quiet_python_logs()
  return run(args, argv)


if __name__ == '__main__':
  sys.exit(main())
