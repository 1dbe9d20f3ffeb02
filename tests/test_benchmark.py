"""benchmarks/benchmark.py: a small run prints its whole table (its shape,
never the speeds: those are the benchmark's business); its lines, ceilings,
sessions and the split of a training step's time, by calls."""

import os
import re
import sys

import pytest
import tensorflow.compat.v1 as tf

from cifar10_support import mixed_precision
from cifar10_support import sessions
import testutil
from testutil import ROOT
from testutil import run_script

sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
# pylint: disable=g-import-not-at-top,wrong-import-position
import benchmark
import step_time

# The test's matrix products: small, so that a round stays short.
MATMULS = ['matmul %d x%d' % (n, k) for n in (256, 512) for k in (1, 2)]
# The same in bfloat16, with --mixed_precision=bf16: the bf16 ceiling.
MATMULS_BF16 = [m.replace('matmul', 'matmul_bf16') for m in MATMULS]
ROW = re.compile(
    r'^(matmul(?:_bf16)? \d+ x\d+|\w+(?: --seed)?) +([\d.]+|-) +(.*?) {2,}'
    r'([\d.]+)?',
    re.M)
# A ceiling's line: its prefix ('' or 'bf16 '), products and dtype filled in.
CEILING = (r'^%sceiling: (%s \d+ x\d+) = \d+ independent \d+x\d+ %s '
           r'products? in one session\.run, ([\d.]+) GFLOP/s \(the best median '
           r'of (\d+) matmul configurations\)(.*)$')
# A trace's time 0: microseconds since the epoch, as TF records them.
T = 1795432394000000


@pytest.mark.slow  # Starts a process.
def test_benchmark_prints_every_variant_with_its_ratio(data_dir):
  result = run_script('benchmarks/benchmark.py', [
      '--data_dir=%s' % data_dir, '--rounds=2', '--steps=3',
      '--batch_size=8', '--startup_runs=1', '--traced_steps=2',
      '--matmul_sizes=256,512', '--matmul_products=1,2',
      '--mixed_precision=bf16'], timeout=600)

  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  # Its own lines only, as the scripts: none of TensorFlow's deprecation
  # notices (queue runners, count_up_to, initializers).
  assert 'deprecated' not in result.stderr + out, result.stderr[-3000:]

  # First this machine, the sessions' threads and the mixed rows' type
  # (bf16, fp16 on a GPU without bfloat16, or emulated), as the functions
  # the tests below pin give them here.
  on_gpu = sessions.visible_gpus() > 0
  dtype, line, note = benchmark.mixed_precision_rows(
      'bf16', on_gpu, mixed_precision.cpu_bf16_feature(),
      mixed_precision.gpu_capability() if on_gpu else None)
  assert out.splitlines()[:4] == [
      benchmark.describe_machine(),
      'train session ' + benchmark.describe_threads(
          sessions.training_config()),
      # The products' sessions may run them side by side.
      "matmul sessions threads: intra 0 (TF's choice), inter 0 (TF's choice)",
      line], out[:2000]
  assert re.search(r'^round 2/2 done, RSS \d+ MiB$', out, re.M), out

  # Each row's ratio: to its own ceiling measured in the same run (the
  # seeded train to the unseeded one; a mixed-precision row, native or
  # emulated, to its float32 row), and to the matrix products' ceiling of
  # its type: bfloat16 rows have their own (float16 ones, on a GPU without
  # bfloat16, are against float32's). The input pipeline has neither.
  bf16 = dtype == tf.bfloat16
  of = r'\d\.\d\d of %s; [\d.]+ of %sceiling$'
  expected = {'train': of % ('bound', ''), 'towers': of % ('bound', ''),
              'towers2': of % ('bound', ''), 'train --seed': of % ('train', ''),
              'eval': of % ('forward', ''), 'classify': of % ('forward', ''),
              'bound': r'[\d.]+ of ceiling$',
              'forward': r'[\d.]+ of ceiling$', 'input': '$'}
  for name in ('train', 'bound', 'eval', 'forward'):
    expected[benchmark.row_name(name, dtype)] = of % (
        name, 'bf16 ' if bf16 else '')
  names = list(expected) + MATMULS + (MATMULS_BF16 if bf16 else [])
  rows = {m.group(1): (m.group(3), m.group(4)) for m in ROW.finditer(out)
          if m.group(1) in names}
  assert sorted(rows) == sorted(names), out
  for name, pattern in expected.items():
    assert re.match(pattern, rows[name][0]), (name, rows[name])
  assert [name for name, (_, gflops) in rows.items() if not gflops] == [
      'input'], out

  # Each ceiling's line, of all its products (which one is the best: the
  # hand-set rates' test below).
  for prefix, products, type_name, end in (
      [('', MATMULS, 'float32', ''),
       ('bf16 ', MATMULS_BF16, 'bfloat16', note)][:1 + bf16]):
    ceiling = re.search(CEILING % (prefix, products[0].split()[0], type_name),
                        out, re.M)
    assert ceiling and ceiling.group(4) == end, out
    assert int(ceiling.group(3)) == len(products)
    assert rows[ceiling.group(1)][0] == '1.00 (%sceiling)' % prefix, out
  assert bf16 or 'bf16 ceiling' not in out, out
  assert re.search(r'^start to first step: [\d.]+ s \(median [\d.]+ s\)$',
                   out, re.M), out
  memory = re.search(r'^memory: RSS per round (\d+), (\d+) MiB; peak (\d+) MiB',
                     out, re.M)
  assert memory and all(int(v) > 100 for v in memory.groups()), out
  # The split of a traced step, for each variant that runs the script's
  # session: its parts, rounded to print, add up to the step.
  train_mixed = benchmark.row_name('train', dtype)
  splits = re.findall(
      r'^(\w+(?: --seed)?) +step ([\d.]+) ms = input ([\d.]+) ms \(\d+%\) \+ '
      r'compute ([\d.]+) ms \(\d+%\) \+ host ([\d.]+) ms \(\d+%: ', out, re.M)
  assert sorted(name for name, *_ in splits) == sorted(
      ['towers', 'towers2', 'train', 'train --seed', train_mixed]), out
  for _, step, *parts in splits:
    assert sum(map(float, parts)) == pytest.approx(float(step), abs=0.2), out
  # The mixed-precision step's ops by type and dtype (their lines' form:
  # test_op_costs_sum_each_op_type_in_each_output_dtype): its convolutions
  # compute in the mixed type; then its costliest ops by name.
  profile = re.search(r'^%s: op time by type and output dtype \(([\d.]+) ms '
                      r'of ops in all\):\n((?:  .*\n)+)' % train_mixed, out,
                      re.M)
  assert profile, out
  assert re.search(r'^  \w*Conv2D\w* +%s ' % dtype.name, profile.group(2),
                   re.M), profile.group(2)
  assert re.search(r'^%s: the costliest ops by name:\n  ' % train_mixed, out,
                   re.M), out


def test_describe_machine_reports_cpu_cores_features_tf_and_onednn(monkeypatch):
  monkeypatch.setattr(benchmark.platform, 'processor', lambda: 'x86_64')
  xeon = ('processor\t: 0\nvendor_id\t: GenuineIntel\n'
          'model name\t: Intel(R) Xeon(R) Platinum 8480+\n'
          'flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\n'
          'processor\t: 1\nmodel name\t: Another CPU\nflags\t\t: fpu\n')
  lines = [benchmark.describe_machine(*args) for args in (
      (xeon, 16, 4, {'TF_ENABLE_ONEDNN_OPTS': '1'}, '2.99.0'),
      # AVX2 only, every core usable, oneDNN off; no model name: the fallback.
      ('processor\t: 0\nflags\t\t: fpu avx2 fma\n', 2, 2,
       {'TF_ENABLE_ONEDNN_OPTS': '0'}, '2.21.0'),
      ('', 8, 8, {}, '2.21.0'))]
  assert lines == [
      'machine: Intel(R) Xeon(R) Platinum 8480+, 16 cores (4 usable by this '
      'process); AVX-512 yes, AVX512_BF16 yes, AMX yes; TensorFlow 2.99.0; '
      'oneDNN on (TF_ENABLE_ONEDNN_OPTS=1)',
      'machine: x86_64, 2 cores; AVX-512 no, AVX512_BF16 no, AMX no; '
      'TensorFlow 2.21.0; oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)',
      "machine: x86_64, 8 cores; CPU flags unknown (no flags in "
      "/proc/cpuinfo); TensorFlow 2.21.0; oneDNN TF's default "
      "(TF_ENABLE_ONEDNN_OPTS unset)"]

  # Each argument None: this machine's.
  assert benchmark.describe_machine() == benchmark.describe_machine(
      mixed_precision.read_cpuinfo(), os.cpu_count(),
      sessions.usable_cores(), os.environ, tf.__version__)


def test_describe_threads_describes_a_session_config():
  configs = [
      tf.ConfigProto(),
      tf.ConfigProto(intra_op_parallelism_threads=4,
                     inter_op_parallelism_threads=1),
      tf.ConfigProto(inter_op_parallelism_threads=-1),
      # The session's own pool, as sessions.set_threads adds it.
      sessions.session_config(threads=sessions.ThreadCounts(2, 1)),
      sessions.session_config(threads=sessions.ThreadCounts(None, 3))]
  assert [benchmark.describe_threads(config) for config in configs] == [
      "threads: intra 0 (TF's choice), inter 0 (TF's choice)",
      'threads: intra 4, inter 1 (one op at a time)',
      "threads: intra 0 (TF's choice), inter -1 (ops run in the caller's "
      "thread)",
      "threads: intra 2, inter 1 (one op at a time) from "
      "session_inter_op_thread_pool [1 thread, global 'cifar10_inter_op_1']",
      "threads: intra 0 (TF's choice), inter 3 from "
      "session_inter_op_thread_pool [3 threads, global 'cifar10_inter_op_3']"]


def test_each_ceiling_is_the_best_median_and_ratios_are_against_their_own():
  """Hand-set rates: a ceiling is the matmul configuration of its type of
  the highest median (not the one with the single fastest round, nor the
  first), and each ratio is to it: the bf16 one for the bfloat16 rows."""
  matmuls = [benchmark.MatmulVariant(n, k, dtype) for n, k, dtype in (
      (8, 1, None), (8, 2, None), (16, 4, None), (8, 1, tf.bfloat16),
      (8, 2, tf.bfloat16))]
  variants = [benchmark.Variant(name, 1, 128, benchmark.TRAIN_FLOP_PER_EXAMPLE)
              for name in ('train', 'bound', 'train_bf16')]
  variants.insert(2, benchmark.Variant('input', 1, 128))
  variants += matmuls
  for v, rates in zip(variants, [
      [900.0, 950.0, 1000.0], [1000.0], [5000.0], [1900.0],
      [100e9, 900e9, 110e9],  # one fast round: median 110
      [210e9, 200e9, 190e9],  # the best median: 200
      [150e9, 160e9, 170e9], [500e9], [800e9]]):
    v.close()
    v.rates = rates
  median = {v.name: float(benchmark.np.median(v.rates)) for v in variants}

  lines = benchmark.table_lines(variants, median, '; emulated')
  rows = {m.group(1): (m.group(3), m.group(4))
          for m in ROW.finditer('\n'.join(lines))}
  assert rows == {
      'train': ('0.95 of bound; 0.50 of ceiling', '100.0'),
      'bound': ('0.53 of ceiling', '105.3'),
      'input': ('', None),
      'train_bf16': ('2.00 of train; 0.25 of bf16 ceiling', '200.1'),
      'matmul 8 x1': ('0.55 of ceiling', '110.0'),
      'matmul 8 x2': ('1.00 (ceiling)', '200.0'),
      'matmul 16 x4': ('0.80 of ceiling', '160.0'),
      'matmul_bf16 8 x1': ('0.62 of bf16 ceiling', '500.0'),
      'matmul_bf16 8 x2': ('1.00 (bf16 ceiling)', '800.0')}
  assert '(rounds: 100.0-900.0 GFLOP/s)' in lines[5]
  assert lines[-2:] == [
      'ceiling: matmul 8 x2 = 2 independent 8x8 float32 products in one '
      'session.run, 200.0 GFLOP/s (the best median of 3 matmul '
      'configurations)',
      'bf16 ceiling: matmul_bf16 8 x2 = 2 independent 8x8 bfloat16 products '
      'in one session.run, 800.0 GFLOP/s (the best median of 2 matmul '
      'configurations); emulated']


def test_matmul_products_run_side_by_side():
  """What the benchmark does to let two products overlap: its session runs
  on TF's inter-op pool of one thread a core (the model's sessions on a CPU
  with few cores run one op at a time), and in the graph that runs (after
  Grappler) neither product waits for the other."""
  variant = benchmark.MatmulVariant(512, 2)
  try:
    metadata = tf.RunMetadata()
    variant.sess.run(variant.fetch, run_metadata=metadata,
                     options=tf.RunOptions(output_partition_graphs=True))
  finally:
    variant.close()

  assert benchmark.describe_threads(variant.config) == (
      "threads: intra 0 (TF's choice), inter 0 (TF's choice)")
  assert not variant.config.use_per_session_threads
  graph = tf.GraphDef()
  for partition in metadata.partition_graphs:
    graph.node.extend(partition.node)
  products = [n.name for n in graph.node if re.match(r'\w*MatMul\w*$', n.op)]
  assert len(products) == 2, products
  for a, b in (products, products[::-1]):
    # Every node a waits for, by data and control inputs alike.
    waits_for = tf.graph_util.extract_sub_graph(graph, [a]).node
    assert b not in {node.name for node in waits_for}, graph


def _node(device, name, op, start, duration):
  """Adds a NodeExecStats to `device`: label 'name = op(...)', times in us
  after T."""
  return device.node_stats.add(node_name=name,
                               timeline_label='%s = %s(x)' % (name, op),
                               all_start_micros=T + start,
                               all_end_rel_micros=duration)


def test_step_split_of_a_hand_built_trace():
  """Overlaps counted once, input only while nothing else runs, host = gaps.

  Times in us after T: the call runs 50 .. 600. CPU:0: _SOURCE 100-105, the
  dequeue 110-150 with a variable read 120-130 beside it, compute 150-300,
  300-400, and 420-500. A GPU's kernel 200-450 is listed by two streams. A
  node named like a dequeue but of another op type is compute. A node
  without a start time is ignored."""
  metadata = tf.RunMetadata()
  cpu = metadata.step_stats.dev_stats.add(
      device='/job:localhost/replica:0/task:0/device:CPU:0')
  _node(cpu, '_SOURCE', 'NoOp', 100, 5)
  dequeue = _node(cpu, 'shuffle_batch', 'QueueDequeueManyV2', 110, 40)
  dequeue.timeline_label = '[mklcpu 0.8MB 0.8MB] ' + dequeue.timeline_label
  _node(cpu, 'conv1/weights/read', 'Identity', 120, 10)
  cpu.node_stats.add(node_name='conv1/Conv2D',  # Its times in nanoseconds.
                     timeline_label='conv1/Conv2D = _MklConv2D(x)',
                     all_start_nanos=(T + 150) * 1000, all_end_rel_nanos=150000)
  _node(cpu, 'QueueDequeue_like', 'Mul', 300, 100)
  _node(cpu, 'train_op', 'NoOp', 420, 80)
  cpu.node_stats.add(node_name='never_started')
  for stream in ('/device:GPU:0/stream:all', '/device:GPU:0/stream:7'):
    gpu = metadata.step_stats.dev_stats.add(device=stream)
    gpu.node_stats.add(node_name='conv2/Conv2D', timeline_label='volta_sgemm',
                       all_start_micros=T + 200, all_end_rel_micros=250)

  split = step_time.split_step(metadata.step_stats, (T + 50) / 1e6,
                               (T + 600) / 1e6)

  expected = {'step': 550, 'input': 30, 'compute': 365, 'host': 155,
              'before': 50, 'between': 5, 'after': 100}
  assert split._asdict() == pytest.approx(
      {k: v / 1e6 for k, v in expected.items()}, abs=1e-6)


def test_op_costs_sum_each_op_type_in_each_output_dtype():
  """Op time by (type, first output's dtype), costliest first; a GPU's stream
  entries, which repeat its ops, and labels without an op type left out."""
  metadata = tf.RunMetadata()
  cpu = metadata.step_stats.dev_stats.add(device='/device:CPU:0')
  for name, kind, start, length, dtype in (
      ('conv1/Conv2D', 'Conv2D', 100, 300, tf.bfloat16),
      ('conv2/Conv2D', 'Conv2D', 400, 200, tf.bfloat16),
      ('cast', 'Cast', 600, 50, tf.float32),
      ('cast_1', 'Cast', 650, 30, tf.bfloat16),
      ('train_op', 'NoOp', 700, 5, None)):
    node = _node(cpu, name, kind, start, length)
    if dtype is not None:
      node.output.add().tensor_description.dtype = dtype.as_datatype_enum
  cpu.node_stats.add(node_name='no_label', all_start_micros=T,
                     all_end_rel_micros=1000)
  stream = metadata.step_stats.dev_stats.add(device='/device:GPU:0/stream:7')
  _node(stream, 'conv1/Conv2D', 'Conv2D', 100, 300)

  assert step_time.cost_lines('train_bf16', metadata.step_stats) == [
      'train_bf16: op time by type and output dtype (0.6 ms of ops in all):',
      '  Conv2D                       bfloat16     2 ops     0.50 ms  85.5%',
      '  Cast                         float32      1 ops     0.05 ms   8.5%',
      '  Cast                         bfloat16     1 ops     0.03 ms   5.1%',
      '  NoOp                                      1 ops     0.01 ms   0.9%',
      'train_bf16: the costliest ops by name:',
      '      0.30 ms  51.3%  bfloat16  conv1/Conv2D (Conv2D)',
      '      0.20 ms  34.2%  bfloat16  conv2/Conv2D (Conv2D)',
      '      0.05 ms   8.5%  float32   cast (Cast)',
      '      0.03 ms   5.1%  bfloat16  cast_1 (Cast)',
      '      0.01 ms   0.9%            train_op (NoOp)']
  lines = step_time.cost_lines('train_bf16', metadata.step_stats, top_types=2,
                               top_ops=2)
  assert lines[3:] == ['  2 other op types     0.04 ms   6.0%',
                       'train_bf16: the costliest ops by name:',
                       '      0.30 ms  51.3%  bfloat16  conv1/Conv2D (Conv2D)',
                       '      0.20 ms  34.2%  bfloat16  conv2/Conv2D (Conv2D)']


@pytest.mark.slow  # Trains.
def test_step_split_of_a_real_cpu_training_step_adds_up(data_dir, tmp_path):
  """cifar10_train's own session, traced: three parts >= 0, sum = step (the
  lines that print them: test_benchmark_prints_every_variant_with_its_ratio)."""
  # The script's session configuration, with a bound on a starved dequeue.
  config = sessions.session_config(
      operation_timeout_in_ms=testutil.OP_TIMEOUT_MS)
  variant = benchmark.TrainScriptVariant(1, data_dir, str(tmp_path), 8,
                                         config)
  try:
    variant.warm_up()
    splits = [variant.median_traced_step(1)[0] for _ in range(3)]
  finally:
    variant.close()

  for split in splits:
    # before and after < 0 would mean the trace's clock is not time.time().
    assert split.step > 0 and min(split) >= 0, split
    assert split.input + split.compute + split.host == pytest.approx(
        split.step, abs=1e-6), split
    assert split.host == pytest.approx(
        split.before + split.between + split.after, abs=1e-6)
    # The dequeue was found, and the model, not it, filled the step.
    assert 0 < split.input < split.compute, split


def test_mixed_precision_rows_follow_the_scripts_except_emulation():
  rows = benchmark.mixed_precision_rows

  assert rows('off', False, 'amx_bf16', None) == (None, None, '')
  dtype, line, note = rows('bf16', False, 'amx_bf16', None)
  assert dtype == tf.bfloat16 and line.startswith('Mixed precision: bfloat16')
  assert note == '; this CPU computes bfloat16 natively (AMX_BF16)'
  # Where the scripts stay float32, the rows measure the emulation.
  dtype, line, note = rows('bf16', False, None, None)
  assert dtype == tf.bfloat16 and 'emulates bfloat16' in line
  assert note == '; emulated: this CPU has neither AVX512_BF16 nor AMX'
  # float16 on an older GPU: no bfloat16 products, no bf16 ceiling.
  assert rows('bf16', True, None, (7, 0))[::2] == (tf.float16, '')
  # A GPU with bfloat16 beside a CPU without it (this crashed once).
  for cpu_feature in (None, 'avx512_bf16'):
    assert rows('bf16', True, cpu_feature, (8, 0))[2] == '; on the GPU'
  assert benchmark.row_name('train', tf.float16) == 'train_fp16'
  assert benchmark.row_name('eval', None) == 'eval'


@pytest.mark.parametrize('dtype_name', ['float32', 'bfloat16', 'float16'])
def test_bound_rows_build_the_train_op_of_their_type(dtype_name):
  # bound_bf16 (bound_fp16 on an older GPU) is train_bf16's ceiling only if
  # it computes in the same type, with the same loss scaling.
  dtype = None if dtype_name == 'float32' else tf.as_dtype(dtype_name)
  bound = benchmark.bound_variant(1, 8, sessions.training_config(),
                                  dtype)
  bound.close()
  assert bound.name == benchmark.row_name('bound', dtype)
  graph = bound.graph
  convs = [op.get_attr('T') for op in graph.get_operations()
           if op.type == 'Conv2D']
  assert convs == [dtype or tf.float32] * 2
  scaled = [op.name for op in graph.get_operations()
            if op.type == 'VarHandleOp' and op.name.startswith('loss_scale/')]
  assert bool(scaled) == (dtype_name == 'float16'), scaled
