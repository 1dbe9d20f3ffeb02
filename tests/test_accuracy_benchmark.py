"""benchmarks/accuracy.py: the tolerance rule and the table on hand-set
numbers; the record against the runs measured beside it; the legs on a stub
trainer; one small run, end to end in this process, against a record made to
pass one step and fail the other."""

import json
import math
import os
import sys

import pytest

from cifar10_support import download
from testutil import ROOT

sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import accuracy  # pylint: disable=g-import-not-at-top,wrong-import-position


def _log(steps, precisions, **fields):
  """A --log of a float32 run, as accuracy.py writes it."""
  log = {'machine': 'M', 'cpu': 'cpu', 'cpu_family_model': None,
         'tensorflow': '2.21.0', 'python': '3.11.7', 'date': '2026-11-25',
         'started': '2026-11-25T10:00:00Z', 'test_data_md5': 'abc',
         'batch_size': 128, 'num_examples': 10000,
         'command': 'python benchmarks/accuracy.py --steps=2000 '
                    '--log=/tmp/a.json', 'mixed_precision': 'off',
         'rows': [{'step': s, 'wall_s': 10.0 * s, 'precision': p}
                  for s, p in zip(steps, precisions)]}
  log.update(fields)
  return log


def test_the_band_is_the_mean_and_the_range_plus_the_margin():
  # The sd pooled over the steps, each about its own mean: squared
  # deviations 0.0008 at step 500, 0 at 1000; 2 + 1 degrees of freedom.
  curve = {'points': [{'step': 500, 'precision': [0.70, 0.74, 0.72]},
                      {'step': 1000, 'precision': [0.80, 0.80]}]}
  sd = math.sqrt(0.0008 / 3)

  expected = accuracy.expected_by_step(curve)

  assert expected[500] == pytest.approx((0.72, 0.04 + 2 * sd))  # the rule
  assert expected[1000] == pytest.approx((0.80, 2 * sd))
  assert accuracy.pooled_sd([[0.5], [0.7]]) == 0.0  # single runs


def test_a_row_passes_inside_the_band_and_on_its_edge_only():
  precisions = [0.61, 0.62, 0.58, 0.621, 0.579]  # 0.62 and 0.58: the edge
  results = [{'step': 500, 'precision': p} for p in precisions]

  rows = accuracy.make_rows(results + [{'step': 9, 'precision': 0.61}],
                            {500: (0.60, 0.02)})

  assert [row['result'] for row in rows] == [
      accuracy.OK, accuracy.OK, accuracy.OK, accuracy.REGRESSION,
      accuracy.REGRESSION, accuracy.NOT_RECORDED]


def test_one_row_outside_fails_the_run_and_is_named_none_passes_it():
  results = [{'step': s, 'wall_s': w, 'precision': p, 'true_count': 0}
             for s, w, p in [(500, 25.4, 0.51), (1000, 45.0, 0.50),
                             (1500, 66.0, 0.65)]]
  rows = accuracy.make_rows(results, {500: (0.515, 0.02),
                                      1000: (0.600, 0.02)})

  assert accuracy.verdict(rows, [500, 1000]) == (1, (
      'REGRESSION: 1 of 2 checked steps outside the tolerance (step 1000: '
      '0.500, recorded 0.600 +/- 0.020).'))
  # Every checked row inside: the run passes.
  assert accuracy.verdict(rows[:1], [500]) == (
      0, 'OK: all 1 checked steps within the tolerance.')
  assert accuracy.verdict(rows[:1], []) == (
      0, 'Nothing checked: no record of this test set to compare with.')
  assert accuracy.verdict(accuracy.make_rows(rows, {}), [2000]) == (
      0, 'Nothing checked: the record holds none of these steps, only 2000.')
  lines = accuracy.table_lines(rows)
  assert lines[0].split() == ['step', 'wall', 'time', 'precision', '@', '1',
                              'recorded', 'tolerance', 'result']
  assert lines[1].split() == ['500', '25', 's', '0.510', '0.515', '+/-0.020',
                              'OK']
  assert lines[3].split() == ['1500', '66', 's', '0.650', '-', '-', 'not',
                              'recorded']


def test_the_checked_steps_end_with_the_last():
  assert accuracy.checked_steps(2000, 500) == [500, 1000, 1500, 2000]
  assert accuracy.checked_steps(1200, 500) == [500, 1000, 1200]


def test_a_record_holds_each_step_of_every_run_in_order():
  curve = accuracy.curve_from_logs([
      _log([500, 1000], [0.50, 0.60]),
      _log([500, 1000], [0.52, 0.61], date='2026-11-26')])

  assert curve['points'] == [
      {'step': 500, 'precision': [0.50, 0.52], 'wall_s': [5000.0, 5000.0]},
      {'step': 1000, 'precision': [0.60, 0.61],
       'wall_s': [10000.0, 10000.0]}]
  assert curve['command'] == 'python benchmarks/accuracy.py --steps=2000'
  assert curve['date'] == '2026-11-25 to 2026-11-26'
  expected = accuracy.expected_by_step(curve)
  sd = math.sqrt((2 * 0.01 ** 2 + 2 * 0.005 ** 2) / 2)
  assert expected[500] == pytest.approx((0.51, 0.02 + 2 * sd))


def test_a_record_refuses_bf16_runs_and_runs_of_other_steps():
  with pytest.raises(ValueError, match='float32'):
    accuracy.curve_from_logs([_log([500], [0.5]),
                              _log([500], [0.5], mixed_precision='bf16')])
  with pytest.raises(ValueError, match='steps'):
    accuracy.curve_from_logs([_log([500], [0.5]), _log([1000], [0.5])])


def test_a_record_of_another_test_set_or_batch_is_not_used(tmp_path, capsys):
  path = str(tmp_path / 'curve.json')
  accuracy.write_json(path, accuracy.curve_from_logs([_log([500], [0.5])]))
  info = {'test_data_md5': 'abc', 'batch_size': 128, 'num_examples': 10000}

  assert accuracy.record_to_check(path, info)['points'][0]['step'] == 500
  assert accuracy.record_to_check(path, dict(info, batch_size=64)) is None
  assert 'batch_size 128, here 64' in capsys.readouterr().out
  assert accuracy.record_to_check(path, dict(info, test_data_md5='x')) is None
  assert accuracy.record_to_check(str(tmp_path / 'none.json'), info) is None


def test_the_record_passes_our_healthy_runs_and_fails_the_regressions():
  # The record's own runs made it; these are runs made beside it.
  def load(name):
    return accuracy.read_json(os.path.join(ROOT, 'benchmarks', name))
  expected = accuracy.expected_by_step(load('accuracy_curve.json'))
  regressions = load('accuracy_regressions.json')
  healthy = [load(name) for name in regressions['healthy_logs']]

  # The wrong sign's run diverged (NaN) before any checkpoint to check.
  evaluated = [run for run in regressions['runs'] if run['rows']]

  assert len(expected) == 4 and len(healthy) == 2 and len(evaluated) == 3
  for log in healthy:
    rows = accuracy.make_rows(log['rows'], expected)
    assert accuracy.verdict(rows, sorted(expected))[0] == 0, log['command']
  for run in evaluated:
    rows = accuracy.make_rows(run['rows'], expected)
    assert accuracy.verdict(rows, sorted(expected))[0] == 1, run['change']


def test_each_leg_is_evaluated_before_the_next_and_timed_as_training(
    tmp_path, monkeypatch):
  # A stub trainer and evaluator on a fake clock: each leg takes 5 s to
  # build and restore, 1 s a step, 1 s to close; an evaluation 50 s.
  clock = [100.0]
  events = []
  train_dir = str(tmp_path)

  def train(settings, unused_data_set):
    step = settings.max_steps
    events.append(('train', step))
    done = max([0] + [e[1] for e in events if e[0] == 'eval'])
    clock[0] += 5
    if done:  # A resumed session saves the checkpoint it starts from again.
      os.utime(os.path.join(train_dir, 'model.ckpt-%d.index' % done),
               (clock[0], clock[0]))
    clock[0] += step - done
    path = os.path.join(train_dir, 'model.ckpt-%d.index' % step)
    open(path, 'w').close()
    os.utime(path, (clock[0], clock[0]))
    clock[0] += 1
    return {'signal': None}

  def eval_once(path, unused_settings, unused_data_set):
    events.append(('eval', accuracy.checkpoints.step_of(path)))
    clock[0] += 50
    return {'precision': 0.5, 'true_count': 5, 'num_examples': 10}

  monkeypatch.setattr(accuracy.time, 'time', lambda: clock[0])
  monkeypatch.setattr(accuracy.cifar10_train, 'train', train)
  monkeypatch.setattr(accuracy.cifar10_eval, 'eval_once', eval_once)
  settings = accuracy.run_flags.TrainSettings(None, train_dir)

  results, trained = accuracy.train_and_evaluate(settings, [10, 20, 25], None,
                                                None)

  assert events == [('train', 10), ('eval', 10), ('train', 20), ('eval', 20),
                    ('train', 25), ('eval', 25)]
  # The first leg from its call (graph building counts, as in one run); a
  # resumed one from its session's first save: no evaluation, no rebuild.
  assert [r['wall_s'] for r in results] == [15, 15 + 1 + 10, 26 + 1 + 5]
  assert trained == 33
  assert results[0] == {'step': 10, 'wall_s': 15, 'precision': 0.5,
                        'true_count': 5, 'num_examples': 10}


def test_a_train_dir_with_files_is_refused(tmp_path):
  (tmp_path / 'model.ckpt-5.index').write_text('')
  args = accuracy.parse_args(['--data_dir=/nonexistent',
                              '--train_dir=%s' % tmp_path])

  with pytest.raises(SystemExit, match='is not empty'):
    accuracy.run(args, [])


@pytest.mark.slow
def test_a_small_run_evaluates_each_checkpoint_against_the_record(
    data_dir, tmp_path, capsys):
  # A record of this test set that step 10 passes whatever it measures, and
  # step 20 cannot.
  md5 = download.file_md5(os.path.join(data_dir, 'cifar-10-batches-bin',
                                       'test_batch.bin'))
  same = dict(test_data_md5=md5, batch_size=8, num_examples=20)
  curve = accuracy.curve_from_logs([_log([10, 20], [0.0, 5.0], **same),
                                    _log([10, 20], [1.0, 5.0], **same)])
  curve_path = str(tmp_path / 'curve.json')
  log_path = str(tmp_path / 'log.json')
  accuracy.write_json(curve_path, curve)
  argv = ['--data_dir=%s' % data_dir, '--steps=20', '--eval_every=10',
          '--batch_size=8', '--num_examples=20', '--curve=%s' % curve_path,
          '--log=%s' % log_path, '--train_dir=%s' % (tmp_path / 'train')]

  status = accuracy.run(accuracy.parse_args(argv), argv)

  assert status == 1
  out = capsys.readouterr().out
  with open(log_path) as f:
    log = json.load(f)
  assert [r['step'] for r in log['rows']] == [10, 20]
  assert [r['result'] for r in log['rows']] == ['OK', 'REGRESSION']
  for row in log['rows']:
    assert row['precision'] == row['true_count'] / 20
    assert '%6d' % row['step'] in out
  assert 0 < log['rows'][0]['wall_s'] <= log['rows'][1]['wall_s']
  assert log['compute_dtype'] == 'float32'
  assert 'REGRESSION: 1 of 2 checked steps outside the tolerance' in out
  assert os.path.exists(tmp_path / 'train' / 'model.ckpt-20.index')
