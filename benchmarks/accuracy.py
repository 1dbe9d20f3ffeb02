"""Trains on the real data and checks precision @ 1 against our recorded runs.

    python benchmarks/accuracy.py --data_dir=/tmp/cifar10_data --steps=2000

benchmarks/README.md ("Accuracy") says what a run prints, how the record
(accuracy_curve.json) was made and why the tolerance rule is what it is.
Exit status 1 if a row is outside its tolerance or the loss became NaN.
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
from cifar10_support import console  # pylint: disable=g-import-not-at-top
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow.compat.v1 as tf

import benchmark
import cifar10_eval
import cifar10_train
from cifar10_support import checkpoints
from cifar10_support import download
from cifar10_support import evaluation
from cifar10_support import mixed_precision
from cifar10_support import progress
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import train_dirs
from cifar10_support import run_flags

CURVE = os.path.join(BENCHMARKS, 'accuracy_curve.json')
# The tolerance's margin, in pooled run-to-run standard deviations.
MARGIN_SDS = 2.0
# What a run must share with the record to be checked against it.
SAME_AS_RECORD = ('test_data_md5', 'batch_size', 'num_examples')
OK, REGRESSION, NOT_RECORDED = 'OK', 'REGRESSION', 'not recorded'


def pooled_sd(precisions_by_step):
  """The run-to-run standard deviation pooled over steps (a list of the runs'
  precisions per step), each step about its own mean; 0.0 for single runs."""
  squares, freedom = 0.0, 0
  for values in precisions_by_step:
    mean = sum(values) / len(values)
    squares += sum((v - mean) ** 2 for v in values)
    freedom += len(values) - 1
  return math.sqrt(squares / freedom) if freedom else 0.0


def expected_by_step(curve):
  """{step (int): (recorded, tolerance)} of a record: the mean of its runs'
  precisions, and their range plus MARGIN_SDS pooled standard deviations."""
  sd = pooled_sd([p['precision'] for p in curve['points']])
  return {p['step']: (sum(p['precision']) / len(p['precision']),
                      max(p['precision']) - min(p['precision'])
                      + MARGIN_SDS * sd)
          for p in curve['points']}


def make_rows(results, expected):
  """The results (dicts of 'step', 'precision'), each with the 'recorded'
  and 'tolerance' of `expected` ({step: (recorded, tolerance)}, else None)
  and 'result': OK, REGRESSION (above the band too) or NOT_RECORDED."""
  rows = []
  for result in results:
    recorded, tolerance = expected.get(result['step'], (None, None))
    # Rounded: a precision on the band's edge is inside, whatever the float.
    outcome = (NOT_RECORDED if recorded is None else
               OK if round(abs(result['precision'] - recorded), 9) <= tolerance
               else REGRESSION)
    rows.append(dict(result, recorded=recorded, tolerance=tolerance,
                     result=outcome))
  return rows


def table_lines(rows):
  """The printed table's lines: a header and a line per row."""
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
  """(exit status, line): 1 if a row (`make_rows`) is a REGRESSION, else 0;
  the line names recorded_steps (the record's) when none was checked."""
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
  """The steps evaluated: every multiple of eval_every, and the last."""
  return sorted(set(range(eval_every, steps + 1, eval_every)) | {steps})


def train_and_evaluate(settings, steps, eval_settings, data_set):
  """Trains to each of `steps` in turn, each leg resuming from the last one's
  checkpoint, evaluated before the next (the trainer keeps five). Returns (a
  dict per step: 'step', 'wall_s' (the README's training time), 'precision',
  'true_count', 'num_examples'; the training seconds in all)."""
  results, trained, previous = [], 0.0, None
  for step in steps:
    began = time.time()
    outcome = cifar10_train.train(settings._replace(max_steps=step),
                                  data_set)
    ended = time.time()
    signals.exit_if_stopped(outcome['signal'])
    path = checkpoints.newest(settings.train_dir)
    # A resumed leg's clock starts when its session, built and restored,
    # saves the checkpoint it resumed from again (if it did not, at the call).
    start = (max(began, os.path.getmtime(previous + '.index')) if previous
             else began)
    wall_s = trained + os.path.getmtime(path + '.index') - start
    trained += ended - start
    previous = path
    evaluating = time.time()
    # eval_once's own lines (the per-class table) would bury the table.
    with contextlib.redirect_stdout(io.StringIO()):
      result = cifar10_eval.eval_once(path, eval_settings, data_set)
    print('%s: step %d evaluated: precision @ 1 = %.3f (%.1f s)' % (
        datetime.now(), step, result['precision'], time.time() - evaluating),
          flush=True)
    results.append(dict(step=step, wall_s=wall_s, **{
        key: result[key] for key in ('precision', 'true_count',
                                     'num_examples')}))
  return results, trained


def machine_info(machine):
  """The log's fields saying where a run was measured; machine: its name."""
  cpuinfo = mixed_precision.read_cpuinfo()
  family = re.search(r'^cpu family\s*:\s*(\d+)', cpuinfo, re.M)
  model = re.search(r'^model\s*:\s*(\d+)', cpuinfo, re.M)
  return {'machine': machine,
          'cpu': benchmark.describe_machine(cpuinfo)[len('machine: '):],
          'cpu_family_model': 'family %s model %s' % (
              family.group(1), model.group(1)) if family and model else None,
          'tensorflow': tf.__version__,
          'python': platform.python_version()}


def curve_from_logs(logs):
  """A record (accuracy_curve.json's content) of N runs' --log files, each
  point's 'precision' and 'wall_s' in the logs' order; ValueError if the logs
  differ in machine, TensorFlow, steps or SAME_AS_RECORD, or one is bf16."""
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
      **{key: first[key] for key in ('machine', 'cpu', 'cpu_family_model',
                                     'tensorflow', 'python')},
      'date': dates[0] if dates[0] == dates[-1] else ' to '.join(
          (dates[0], dates[-1])),
      'command': command,
      **{key: first[key] for key in SAME_AS_RECORD},
      'runs': [log['started'] for log in logs],
      'points': [
          {'step': row['step'],
           'precision': [log['rows'][i]['precision'] for log in logs],
           'wall_s': [round(log['rows'][i]['wall_s'], 1) for log in logs]}
          for i, row in enumerate(first['rows'])]}


def read_json(path):
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
  # (flag, default, help); a flag with an int default is an int >= 1.
  flags = (
      ('data_dir', None, 'folder holding cifar-10-batches-bin/ (downloaded '
       'there if missing, as the scripts do)'),
      ('steps', 2000, 'training steps (the record holds steps up to 2000)'),
      ('eval_every', 500, 'steps between the checkpoints evaluated'),
      ('mixed_precision', 'off', 'bf16: train as cifar10_train.py '
       '--mixed_precision=bf16 does; evaluation stays float32'),
      ('train_dir', None, 'an empty or new directory to train into, kept '
       'afterwards; default: a temporary one, deleted'),
      ('log', None, 'write the run and its rows to this JSON file'),
      ('curve', CURVE, 'the record to compare with'),
      ('machine', None, 'the machine\'s short name for the log '
       '(docs/machines.md)'),
      ('record', None, 'instead of training: write --curve from these --log '
       'files of float32 runs'),
      ('log_frequency', 100, 'steps between the training\'s step lines'),
      ('batch_size', 128, 'the default is the script\'s; the record holds '
       '128 only'),
      ('num_examples', 10000, 'test images per evaluation; the record holds '
       '10000 only'))
  extras = {'mixed_precision': {'choices': ['off', 'bf16']},
            'record': {'metavar': 'LOG,LOG,...'}}
  for name, default, text in flags:
    parser.add_argument('--' + name, default=default, help=text,
                        type=int if isinstance(default, int) else None,
                        **extras.get(name, {}))
  args = parser.parse_args(argv)
  for name, default, _ in flags:
    if isinstance(default, int) and getattr(args, name) < 1:
      parser.error('--%s must be at least 1' % name)
  if args.record is None and args.data_dir is None:
    parser.error('--data_dir is required (the real data: the record is of '
                 'the real test set)')
  return args


def record(args):
  """--record: writes --curve from the given logs."""
  logs = [read_json(path) for path in args.record.split(',')]
  curve = curve_from_logs(logs)
  write_json(args.curve, curve)
  expected = expected_by_step(curve)
  print('%s: %d runs; pooled standard deviation %.4f' % (
      args.curve, len(logs),
      pooled_sd([p['precision'] for p in curve['points']])))
  for step in sorted(expected):
    print('step %d: recorded %.4f, tolerance %.4f' % (step, *expected[step]))
  return 0


def record_to_check(path, info):
  """The record at `path` if this run (info: its log fields) can be checked
  against it: same SAME_AS_RECORD fields; else None, said in a line."""
  if not os.path.exists(path):
    print('No record at %s: this run is printed, not checked.' % path)
    return None
  curve = read_json(path)
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
  eval_settings = evaluation.EvalSettings(
      args.data_dir, num_examples=args.num_examples, run_once=True,
      session_config=sessions.eval_config())
  try:
    data_set = download.prepare(args.data_dir)
    evaluation.check_num_examples(eval_settings.num_examples, data_set,
                                  eval_settings.eval_data)
  except ValueError as e:  # A bad data file (DataError) or --num_examples.
    sys.exit('accuracy.py: error: %s' % e)
  info = machine_info(args.machine)
  print('%s; %s' % (info['cpu'], info['cpu_family_model']))
  compute_dtype = mixed_precision.compute_dtype_for_this_machine(
      args.mixed_precision, sessions.visible_gpus())
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
    settings = run_flags.TrainSettings(
        args.data_dir, train_dir, batch_size=args.batch_size,
        log_frequency=args.log_frequency, compute_dtype=compute_dtype)
    try:
      results, train_wall_s = train_and_evaluate(
          settings, checked_steps(args.steps, args.eval_every),
          eval_settings, data_set)
    except progress.DivergedError as e:
      # A NaN loss is the plainest regression: nothing left to evaluate.
      sys.exit('accuracy.py: %s: %s%s' % (
          REGRESSION, e, '' if args.train_dir else
          ' (This run\'s temporary train_dir is deleted now.)'))
    except (checkpoints.CheckpointError,) + train_dirs.RUN_ERRORS as e:
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
  print('\n'.join(table_lines(rows) + [line]))
  if args.log:
    info['rows'] = [dict(row, wall_s=round(row['wall_s'], 1)) for row in rows]
    write_json(args.log, info)
    print('Log: %s' % args.log)
  return status


def main():
  """The command line; returns the exit status."""
  args = parse_args(sys.argv[1:])
  if args.record:
    return record(args)
  console.quiet_python_logs()
  return run(args, sys.argv[1:])


if __name__ == '__main__':
  sys.exit(main())
