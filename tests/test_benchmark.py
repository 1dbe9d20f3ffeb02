"""The benchmark script runs end to end and prints its whole table.

A small run on the synthetic data, checking the output's shape, not the
speeds (speed is the benchmark's business, never a test's).
"""

import re

from testutil import run_script

VARIANTS = ['train', 'towers', 'towers2', 'bound', 'input', 'eval', 'forward',
            'matmul']
ROW = re.compile(r'^(\w+) +([\d.]+|-) +(.*?) {2,}([\d.]+)?', re.M)


def test_benchmark_prints_every_variant_with_its_ratio(data_dir):
  result = run_script('benchmarks/benchmark.py', [
      '--data_dir=%s' % data_dir, '--rounds=2', '--steps=3',
      '--batch_size=8', '--startup_runs=1'], timeout=600)

  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert re.search(r'^round 2/2 done, RSS \d+ MiB$', out, re.M), out
  rows = {m.group(1): m.group(3) for m in ROW.finditer(out)
          if m.group(1) in VARIANTS}
  assert sorted(rows) == sorted(VARIANTS), out
  for name in ('train', 'towers', 'towers2'):
    assert re.match(r'\d\.\d\d of bound; \d\.\d\d of matmul$', rows[name])
  assert re.match(r'\d\.\d\d of forward; \d\.\d\d of matmul$', rows['eval'])
  assert re.match(r'\d\.\d\d of matmul$', rows['bound'])
  assert rows['matmul'] == '1.00 (peak)'
  assert re.search(r'^start to first step: [\d.]+ s \(median [\d.]+ s\)$',
                   out, re.M), out
  memory = re.search(r'^memory: RSS per round (\d+), (\d+) MiB; peak (\d+) MiB',
                     out, re.M)
  assert memory and all(int(v) > 100 for v in memory.groups()), out
