"""The benchmark script runs end to end and prints its whole table.

A small run on the synthetic data, checking the output's shape, not the
speeds (speed is the benchmark's business, never a test's); and the split of
a training step's time into input, compute and host work.
"""

import os
import re
import sys
import time

import pytest

from testutil import ROOT
from testutil import run_script

# benchmark.py and step_time.py, imported by the step-split tests.
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))

VARIANTS = ['train', 'towers', 'towers2', 'bound', 'input', 'eval', 'forward',
            'matmul', 'classify']
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
  for name in ('eval', 'classify'):
    assert re.match(r'\d\.\d\d of forward; \d\.\d\d of matmul$', rows[name])
  assert re.match(r'\d\.\d\d of matmul$', rows['bound'])
  assert rows['matmul'] == '1.00 (peak)'
  assert re.search(r'^start to first step: [\d.]+ s \(median [\d.]+ s\)$',
                   out, re.M), out
  memory = re.search(r'^memory: RSS per round (\d+), (\d+) MiB; peak (\d+) MiB',
                     out, re.M)
  assert memory and all(int(v) > 100 for v in memory.groups()), out
  # The split of a traced step, for each variant that runs the script's
  # session: its parts, rounded to print, add up to the step.
  splits = re.findall(
      r'^(\w+) +step ([\d.]+) ms = input ([\d.]+) ms \(\d+%\) \+ compute '
      r'([\d.]+) ms \(\d+%\) \+ host ([\d.]+) ms \(\d+%: ', out, re.M)
  assert sorted(name for name, *_ in splits) == ['towers', 'towers2',
                                                 'train'], out
  for _, step, *parts in splits:
    assert sum(map(float, parts)) == pytest.approx(float(step), abs=0.2), out


def _node(device, name, op, start, duration, nanos=False):
  """Adds a NodeExecStats to `device`: label 'name = op(...)', times in us."""
  node = device.node_stats.add(node_name=name,
                               timeline_label='%s = %s(x)' % (name, op))
  if nanos:
    node.all_start_nanos = int(start * 1000)
    node.all_end_rel_nanos = int(duration * 1000)
  else:
    node.all_start_micros = start
    node.all_end_rel_micros = duration
  return node


def test_step_split_of_a_hand_built_trace():
  """Overlaps counted once, input only while nothing else runs, host = gaps.

  Times in us after T: the call runs 50 .. 600. CPU:0: _SOURCE 100-105, the
  dequeue 110-150 with a variable read 120-130 beside it, compute 150-300,
  300-400, and 420-500. A GPU's kernel 200-450 is listed by two streams. A
  node named like a dequeue but of another op type is compute. A node
  without a start time is ignored.
  """
  import tensorflow.compat.v1 as tf
  import step_time

  t = 1795432394000000  # microseconds since the epoch, as TF records them
  metadata = tf.RunMetadata()
  cpu = metadata.step_stats.dev_stats.add(
      device='/job:localhost/replica:0/task:0/device:CPU:0')
  _node(cpu, '_SOURCE', 'NoOp', t + 100, 5)
  dequeue = _node(cpu, 'shuffle_batch', 'QueueDequeueManyV2', t + 110, 40)
  dequeue.timeline_label = '[mklcpu 0.8MB 0.8MB] ' + dequeue.timeline_label
  _node(cpu, 'conv1/weights/read', 'Identity', t + 120, 10)
  _node(cpu, 'conv1/Conv2D', '_MklConv2D', t + 150, 150, nanos=True)
  _node(cpu, 'QueueDequeue_like', 'Mul', t + 300, 100)
  _node(cpu, 'train_op', 'NoOp', t + 420, 80)
  cpu.node_stats.add(node_name='never_started')
  for stream in ('/device:GPU:0/stream:all', '/device:GPU:0/stream:7'):
    gpu = metadata.step_stats.dev_stats.add(device=stream)
    gpu.node_stats.add(node_name='conv2/Conv2D', timeline_label='volta_sgemm',
                       all_start_micros=t + 200, all_end_rel_micros=250)

  split = step_time.split_step(metadata.step_stats, (t + 50) / 1e6,
                               (t + 600) / 1e6)

  expected = {'step': 550, 'input': 30, 'compute': 365, 'host': 155,
              'before': 50, 'between': 5, 'after': 100}
  assert split._asdict() == pytest.approx(
      {k: v / 1e6 for k, v in expected.items()}, abs=1e-6)


def test_step_split_of_a_real_cpu_training_step_adds_up(data_dir, tmp_path):
  """cifar10_train's own session, traced: three parts >= 0, sum = wall time."""
  import benchmark
  import step_time
  import testutil

  # The script's session configuration, with a bound on a starved dequeue.
  config = benchmark.cifar10.session_config(
      operation_timeout_in_ms=testutil.OP_TIMEOUT_MS)
  variant = benchmark.TrainScriptVariant(1, data_dir, str(tmp_path), 8,
                                         config)
  try:
    for _ in range(3):
      variant.step()
    splits = []
    for _ in range(3):
      # The test's own clock around the traced run; the split is worked out
      # afterwards, outside it.
      start = time.time()
      stats, run_start, run_end = variant.traced_run()
      wall = time.time() - start
      splits.append((step_time.split_step(stats, run_start, run_end), wall))
  finally:
    variant.close()

  for split, wall in splits:
    # before and after < 0 would mean the trace's clock is not time.time().
    for part in ('input', 'compute', 'host', 'before', 'between', 'after'):
      assert getattr(split, part) >= 0, (part, split)
    total = split.input + split.compute + split.host
    assert abs(total - wall) <= 0.1 * wall, (split, wall)
    # The dequeue was found, and the model, not it, filled the step.
    assert 0 < split.input < split.compute, split
    assert split.host == pytest.approx(
        split.before + split.between + split.after, abs=1e-6)
    line = step_time.describe('train', split)
    assert re.match(r'train +step [\d.]+ ms = input [\d.]+ ms \(\d+%\) \+ '
                    r'compute [\d.]+ ms \(\d+%\) \+ host [\d.]+ ms \(\d+%: ',
                    line), line
