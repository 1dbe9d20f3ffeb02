"""Trains on the real data and checks precision @ 1 against our recorded runs.

    python benchmarks/accuracy.py --data_dir=/tmp/cifar10_data --steps=2000
    python benchmarks/accuracy.py --data_dir=/tmp/cifar10_data --steps=5000 \
        --mixed_precision=bf16 --log=/tmp/bf16.json

One process trains the model as `cifar10_train.py` does, with its default
hyper-parameters, from step 0 into a fresh temporary train_dir (or an empty
--train_dir), saving a checkpoint every --eval_every steps. When training
has ended, it evaluates each of those checkpoints on the 10,000 test images
with the moving averages of the weights, in float32, as `cifar10_eval.py
--run_once` does (`cifar10_eval.eval_once`, in this process), and prints

    step  wall time  precision @ 1  recorded  tolerance  result

one row per checkpoint: the wall time from the start of training (graph
building and the queue's filling included) to the checkpoint's save, the
precision measured, the precision our runs recorded at that step, the
tolerance, and OK or REGRESSION. The exit status is 1 if any row is outside
its tolerance, 0 otherwise; a step the record does not hold is printed and
not checked, and so is a whole run on another test set than the record's
(the MD5 of test_batch.bin: a record of our JPEG-rebuilt copy says nothing
of the official pixels), or with another batch size or number of test
images.
--log writes the run (machine, versions, command, rows) as JSON, which
benchmarks/plot_results.py draws.

The record, benchmarks/accuracy_curve.json, holds the precisions of N
independent float32 runs of this script at each recorded step (and their
wall times), the machine, TensorFlow version, date and command; `--record`
makes it from their --log files. The rule, at each recorded step:

    recorded  = the mean of the N runs' precisions there
    tolerance = their range there (max - min)
                + MARGIN_SDS x the pooled run-to-run standard deviation

The pooled standard deviation takes every recorded step's deviations from
its own mean (N - 1 degrees of freedom per step): with N = 5 runs, a
steadier estimate of the spread than any one step's range. The range alone
would fail healthy runs often: a new run falls outside the range of 5
earlier ones, at a given step, once in 3 times whatever their spread. The
margin, 2 standard deviations, was chosen from the record's numbers
(benchmarks/README.md, "Accuracy"): with it a healthy run fails about one
run in 250 (one in 75 with the t distribution of the 16 degrees of
freedom), most of that at the step where the five runs happened to lie
closest together; while a learning rate 2x too high, which moved steps
1000-2000 up by 0.016-0.024 in two runs, fails three rows in each (with 3
deviations one of them would fail a single row), and one 2x too low fails
all four, by 0.040-0.050.
A wrong sign diverges: a NaN loss ends the run with exit status 1.

A higher precision than the band fails too: a model that learns faster
than the record did not run the same maths. A --mixed_precision=bf16 run is
checked against the float32 record: bfloat16 is meant to train to float32's
precision (docs/mixed_precision.md).

Checkpoints: the trainer's saver keeps only its newest five
(tf.train.Saver's default), and a 5000-step run checked every 500 steps
writes eleven. A thread therefore hard-links each checkpoint's files into
<train_dir>/kept/ as soon as the train_dir's index lists it (which it does
once the files are complete), and the evaluation reads the links there.
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
import threading
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
# The tolerance's margin, in pooled run-to-run standard deviations (above).
MARGIN_SDS = 2.0
KEPT = 'kept'
# What a run must share with the record to be checked against it: the same
# test set (the MD5 of test_batch.bin), batch and examples evaluated.
SAME_AS_RECORD = ('test_data_md5', 'batch_size', 'num_examples')
OK = 'OK'
REGRESSION = 'REGRESSION'
NOT_RECORDED = 'not recorded'


def band(precisions, sd):
  """The recorded precision and tolerance at one step (the module's rule).

  Args:
    precisions: floats, the runs' precisions at the step (at least one).
    sd: float, the pooled run-to-run standard deviation (`pooled_sd`).

  Returns:
    (recorded, tolerance), floats: the mean, and the range plus
    MARGIN_SDS x sd.
  """
  recorded = sum(precisions) / len(precisions)
  spread = max(precisions) - min(precisions)
  return recorded, spread + MARGIN_SDS * sd


def pooled_sd(precisions_by_step):
  """The run-to-run standard deviation pooled over steps.

  Args:
    precisions_by_step: lists of floats, the runs' precisions at each step.

  Returns:
    float: the square root of the squared deviations from each step's mean,
    summed over the steps, over their degrees of freedom (runs - 1 each);
    0.0 when no step has two runs.
  """
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
  """OK, REGRESSION, or NOT_RECORDED (expected None) for one row.

  Args:
    measured: float, the precision measured.
    expected: (recorded, tolerance) or None.
  """
  if expected is None:
    return NOT_RECORDED
  recorded, tolerance = expected
  # Rounded: a precision on the band's edge is inside, whatever the float.
  return OK if round(abs(measured - recorded), 9) <= tolerance else REGRESSION


def make_rows(results, expected):
  """The table's rows: each evaluated checkpoint against the record.

  Args:
    results: dicts with 'step' (int), 'wall_s' (float), 'precision'
      (float) and 'true_count' (int), ordered by step.
    expected: {step: (recorded, tolerance)}, from `expected_by_step`.

  Returns:
    The results, each with 'recorded' and 'tolerance' (floats, or None where
    the record has no such step) and 'result' (`judge`'s).
  """
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
  """(exit status, one line): 1 if a row is a REGRESSION, else 0.

  Args:
    rows: from `make_rows`.
    recorded_steps: ints, the steps the record holds (for the line when no
      row was checked).
  """
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


class CheckpointKeeper(object):
  """Hard-links each checkpoint a training run writes into keep_dir.

  Use as a context around the training: a thread looks at train_dir's index
  every `interval` seconds and links the files of each newly listed
  checkpoint (the index lists one once it is written in full); the saver's
  later deletion of the original leaves the link. A last look when the block
  ends takes the final checkpoint. Copies where links fail (another file
  system).

  Attributes:
    kept: {global step (int): path prefix of the kept checkpoint (str)}.
  """

  def __init__(self, train_dir, keep_dir, interval=0.5):
    self._train_dir = train_dir
    self._keep_dir = keep_dir
    self._interval = interval
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._watch, daemon=True)
    self.kept = {}

  def __enter__(self):
    os.makedirs(self._keep_dir, exist_ok=True)
    self._thread.start()
    return self

  def __exit__(self, *unused_exc_info):
    self._stop.set()
    self._thread.join()
    self.look()

  def _watch(self):
    while not self._stop.wait(self._interval):
      self.look()

  def look(self):
    """Keeps every checkpoint the index lists that is not kept yet."""
    # The index only: the files of a checkpoint it does not list yet may
    # still be being written.
    try:
      state = tf.train.get_checkpoint_state(self._train_dir)
    except (tf.errors.OpError, ValueError):
      return  # Unreadable for now: the next look reads it again.
    for path in state.all_model_checkpoint_paths if state else []:
      step = checkpoints.step_of(path)
      if step is None or step in self.kept:
        continue
      prefix = os.path.basename(path)
      names = [name for name in os.listdir(self._train_dir)
               if name.startswith(prefix + '.')]
      # The index last: a kept index means the data is kept too.
      names.sort(key=lambda name: name.endswith('.index'))
      try:
        for name in names:
          source = os.path.join(self._train_dir, name)
          target = os.path.join(self._keep_dir, name)
          if not os.path.exists(target):
            try:
              os.link(source, target)
            except OSError:
              shutil.copy2(source, target)
      except FileNotFoundError:
        continue  # Pruned meanwhile: the run's check reports it missing.
      if prefix + '.index' in names:
        self.kept[step] = os.path.join(self._keep_dir, prefix)


def checked_steps(steps, eval_every):
  """The global steps whose checkpoints are evaluated: every multiple of
  eval_every up to steps, and steps itself (the final checkpoint)."""
  return sorted(set(range(eval_every, steps + 1, eval_every)) | {steps})


def train(settings):
  """Trains as cifar10_train.py does, keeping every checkpoint.

  Args:
    settings: a run_settings.TrainSettings, its train_dir empty.

  Returns:
    (kept, start): {step: kept checkpoint path} (CheckpointKeeper.kept) and
    the time.time() at which training started.

  Raises:
    train_dirs.RUN_ERRORS, as cifar10_train.train.
    SystemExit: a signal stopped training (after its final checkpoint).
  """
  keep_dir = os.path.join(settings.train_dir, KEPT)
  start = time.time()
  with CheckpointKeeper(settings.train_dir, keep_dir) as keeper:
    result = cifar10_train.train(settings)
  signals.exit_if_stopped(result['signal'])
  return keeper.kept, start


def evaluate(kept, steps, start, settings):
  """Evaluates the kept checkpoints of `steps`, printing one line for each.

  Args:
    kept: {step: checkpoint path}, from `train`.
    steps: ints, the steps to evaluate, in order.
    start: float, the time.time() at which training started.
    settings: a cifar10_eval.EvalSettings.

  Returns:
    A list of dicts, one per step: 'step' (int), 'wall_s' (float, seconds
    from the start of training to the checkpoint's save), 'precision'
    (float), 'true_count' and 'num_examples' (ints).

  Raises:
    ValueError: a step has no kept checkpoint.
  """
  missing = [step for step in steps if step not in kept]
  if missing:
    raise ValueError('no checkpoint kept for step%s %s (kept: %s)' % (
        's' if len(missing) > 1 else '', ', '.join(map(str, missing)),
        ', '.join(map(str, sorted(kept)))))
  results = []
  for step in steps:
    path = kept[step]
    began = time.time()
    # eval_once's own lines (the per-class table) would bury the table.
    with contextlib.redirect_stdout(io.StringIO()):
      result = cifar10_eval.eval_once(path, settings)
    print('%s: step %d evaluated: precision @ 1 = %.3f (%.1f s)' % (
        datetime.now(), step, result['precision'], time.time() - began),
          flush=True)
    results.append({
        'step': step,
        'wall_s': os.stat(path + '.index').st_mtime - start,
        'precision': result['precision'],
        'true_count': result['true_count'],
        'num_examples': result['num_examples']})
  return results


def cpu_family_model(cpuinfo):
  """'family F model M' of /proc/cpuinfo's text, or None."""
  family = re.search(r'^cpu family\s*:\s*(\d+)', cpuinfo, re.M)
  model = re.search(r'^model\s*:\s*(\d+)', cpuinfo, re.M)
  if not (family and model):
    return None
  return 'family %s model %s' % (family.group(1), model.group(1))


def machine_info(machine):
  """The log's fields that say where a run was measured.

  Args:
    machine: str, the machine's short name (docs/machines.md), or None.
  """
  try:
    with open('/proc/cpuinfo') as f:
      cpuinfo = f.read()
  except OSError:
    cpuinfo = ''
  line = benchmark.describe_machine(cpuinfo=cpuinfo or None)
  return {'machine': machine,
          'cpu': line[len('machine: '):],
          'cpu_family_model': cpu_family_model(cpuinfo),
          'tensorflow': tf.__version__,
          'python': platform.python_version()}


def curve_from_logs(logs):
  """A record (accuracy_curve.json's content) from the --log of N runs.

  Args:
    logs: the runs' logs (dicts), float32, of the same machine and steps.

  Returns:
    A dict: the runs' 'machine', 'cpu', 'tensorflow', 'date' (their dates,
    ' to ' between the first and last when they differ), 'command' (the
    first run's, without --log), the SAME_AS_RECORD fields, 'runs' (their
    start times, in order) and 'points': for each step, its 'step' and the
    runs' 'precision' and 'wall_s' (lists, one value per run, in order).

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


def load_curve(path):
  """The record at `path` (a dict, see curve_from_logs), or None if absent."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


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
  said in a line.

  Args:
    path: the record's path.
    info: this run's log fields, with the SAME_AS_RECORD ones. Another copy
      of CIFAR-10 (the official pixels, say), batch or number of test images
      gives other precisions: the record says nothing about them.
  """
  curve = load_curve(path)
  if curve is None:
    print('No record at %s: this run is printed, not checked.' % path)
    return None
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
  eval_settings = cifar10_eval.EvalSettings(
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
        args.data_dir, train_dir, max_steps=args.steps,
        batch_size=args.batch_size, log_frequency=args.log_frequency,
        save_checkpoint_steps=args.eval_every, compute_dtype=compute_dtype)
    with train_dirs.run_errors_end_the_process():
      try:
        kept, start = train(settings)
      except train_dirs.DivergedError as e:
        # A NaN loss is the plainest regression: nothing left to evaluate.
        raise train_dirs.DivergedError('%s: %s%s' % (
            REGRESSION, e, '' if args.train_dir else
            ' (This run\'s temporary train_dir is deleted now.)')) from None
    info['train_wall_s'] = round(time.time() - start, 1)
    info['load_average_at_end'] = round(os.getloadavg()[0], 2)
    try:
      results = evaluate(kept, checked_steps(args.steps, args.eval_every),
                         start, eval_settings)
    except ValueError as e:
      sys.exit('accuracy.py: %s' % e)
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
