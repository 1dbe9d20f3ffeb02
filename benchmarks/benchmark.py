"""Measures how fast this CIFAR-10 code trains and evaluates, in one run.

    python benchmarks/benchmark.py --data_dir=/tmp/cifar10_data

Each variant (a row) has a graph and session of its own; all are measured in
interleaved rounds. benchmarks/README.md explains the rows and the ratios.
"""

import argparse
import contextlib
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, 'tests'), ROOT]
from cifar10_support import console  # pylint: disable=g-import-not-at-top
console.before_tensorflow(__name__)  # the scripts' kernels, TF quiet

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_classify
import cifar10_eval
import cifar10_multi_gpu_train
from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import evaluation
from cifar10_support import mixed_precision
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import summaries
from cifar10_support import train_dirs
import step_time
import synthetic
import testutil

# Multiply-adds per 24x24 image in each conv and matmul layer of inference().
CONV1_MACS = 24 * 24 * 5 * 5 * 3 * 64
MACS_PER_EXAMPLE = (CONV1_MACS + 12 * 12 * 5 * 5 * 64 * 64  # conv2
                    + 2304 * 384 + 384 * 192 + 192 * 10)
# Training: forward, gradient of the weights, gradient of the inputs (not
# needed for conv1, whose input is the image); 2 FLOP per multiply-add.
TRAIN_FLOP_PER_EXAMPLE = 2 * (3 * MACS_PER_EXAMPLE - CONV1_MACS)
FORWARD_FLOP_PER_EXAMPLE = 2 * MACS_PER_EXAMPLE

MATMUL_WINDOW_S = 0.25  # seconds of a matmul configuration's window

# /proc/cpuinfo flags reported in the machine line.
CPU_FEATURES = (('AVX-512', 'avx512f'), ('AVX512_BF16', 'avx512_bf16'),
                ('AMX', 'amx_tile'))

# Each variant's own ceiling, measured in the same run; the mixed-precision
# rows, and the seeded one, are each against their float32, unseeded row.
BASELINES = {'train': 'bound', 'towers': 'bound', 'towers2': 'bound',
             'eval': 'forward', 'classify': 'forward', 'train --seed': 'train'}
BASELINES.update({'%s_%s' % (name, suffix): name
                  for name in ('train', 'bound', 'eval', 'forward')
                  for suffix in ('bf16', 'fp16')})


def describe_machine(cpuinfo=None, cpu_count=None, usable_cores=None,
                     environ=None, tf_version=None):
  """The 'machine: ...' line; each argument None is this machine's."""
  cpuinfo = mixed_precision.read_cpuinfo() if cpuinfo is None else cpuinfo
  cpu_count = os.cpu_count() if cpu_count is None else cpu_count
  usable_cores = usable_cores or sessions.usable_cores()
  environ = os.environ if environ is None else environ
  model = re.search(r'^model name[ \t]*:[ \t]*(\S.*?)[ \t]*$', cpuinfo, re.M)
  model = (model and model.group(1)) or platform.processor() or 'unknown CPU'
  cores = '%s cores' % ('?' if cpu_count is None else cpu_count)
  if usable_cores != cpu_count:
    cores += ' (%d usable by this process)' % usable_cores
  flags = mixed_precision.cpu_flags(cpuinfo)
  features = ('CPU flags unknown (no flags in /proc/cpuinfo)' if flags is None
              else ', '.join('%s %s' % (name, 'yes' if flag in flags else 'no')
                             for name, flag in CPU_FEATURES))
  # TensorFlow reads the variable as a boolean: 1/true or 0/false.
  setting = environ.get('TF_ENABLE_ONEDNN_OPTS')
  state = {'1': 'on', 'true': 'on', '0': 'off', 'false': 'off'}.get(
      (setting or '').strip().lower())
  onednn = ("TF's default (TF_ENABLE_ONEDNN_OPTS unset)" if setting is None
            else '%s (TF_ENABLE_ONEDNN_OPTS=%s)' % (state, setting) if state
            else 'TF_ENABLE_ONEDNN_OPTS=%r, not a boolean' % setting)
  return 'machine: %s, %s; %s; TensorFlow %s; oneDNN %s' % (
      model, cores, features, tf_version or tf.__version__, onednn)


def describe_threads(config):
  """The thread settings of a tf.ConfigProto as sessions.set_threads makes
  them (at most one pool, TF's own, or the session's), in one line."""
  intra, inter = testutil.config_threads(config)
  notes = {0: " (TF's choice)", 1: ' (one op at a time)'}
  if inter < 0:
    notes[inter] = " (ops run in the caller's thread)"
  text = 'threads: intra %d%s, inter %d%s' % (
      intra, notes[0] if intra == 0 else '', inter, notes.get(inter, ''))
  for pool in config.session_inter_op_thread_pool:
    text += " from session_inter_op_thread_pool [%d thread%s, global '%s']" % (
        pool.num_threads, '' if pool.num_threads == 1 else 's',
        pool.global_name)
  return text


def row_name(name, compute_dtype):
  """'train' for float32; 'train_bf16' or 'train_fp16' in mixed precision."""
  return name + {None: '', tf.bfloat16: '_bf16', tf.float16: '_fp16'}[
      compute_dtype]


def train_op(images, labels, global_step, batch_size, compute_dtype=None):
  """(train op, loss) as cifar10_train.train builds them, for both rows."""
  loss = cifar10.loss(cifar10.inference(images, compute_dtype), labels)
  return cifar10.train(loss, global_step, batch_size,
                       compute_dtype=compute_dtype), loss


class Variant(object):
  """A row: `step()` processes examples_per_step examples; `rates` holds
  the examples/sec of each measured window."""

  def __init__(self, name, steps, examples_per_step, flop_per_example=None):
    self.name = name
    self.steps = steps
    self.examples_per_step = examples_per_step
    self.flop_per_example = flop_per_example
    self.rates = []

  def _quiet(self):  # around a window's steps and the warm-up's
    return contextlib.nullcontext()

  def measure(self):
    with self._quiet():
      start = time.time()
      for _ in range(self.steps):
        self.step()
      self.rates.append(self.steps * self.examples_per_step
                        / (time.time() - start))

  def warm_up(self):
    """Untimed steps: graph optimization, kernel caches, queue filling."""
    with self._quiet():
      for _ in range(max(5, self.steps // 5)):
        self.step()

  def close(self):
    pass


class SessionVariant(Variant):
  """Runs what `build()` returns in a plain session of its own graph, the
  queue runners started."""

  def __init__(self, name, steps, examples_per_step, build, flop_per_example,
               config):
    super(SessionVariant, self).__init__(name, steps, examples_per_step,
                                         flop_per_example)
    self.config = config
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.fetch = build()
      self.sess = tf.Session(config=config)
      self.sess.run([tf.global_variables_initializer(),
                     tf.local_variables_initializer()])
      self.coord = tf.train.Coordinator()
      self.threads = []
      if tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS):  # else it warns
        self.threads = tf.train.start_queue_runners(self.sess, self.coord)

  def step(self):
    self.sess.run(self.fetch)

  def close(self):
    self.coord.request_stop()
    self.coord.join(self.threads, stop_grace_period_secs=10)
    self.sess.close()


def bound_variant(steps, batch_size, config, compute_dtype=None,
                  forward=False):
  """`bound`: the train op of `train`, in the same type and with the same
  loss scaling, on one constant batch; `forward`, given forward: inference
  alone on it (`eval`'s ceiling)."""
  def build():
    rng = np.random.RandomState(0)
    images = tf.constant(rng.normal(size=(batch_size, 24, 24, 3)), tf.float32)
    labels = tf.constant(rng.randint(0, 10, batch_size), tf.int32)
    if not forward:
      return train_op(images, labels, tf.train.get_or_create_global_step(),
                      batch_size, compute_dtype)[0]
    top_1 = tf.nn.in_top_k(cifar10.inference(images, compute_dtype), labels, 1)
    return tf.reduce_sum(tf.cast(top_1, tf.int32))
  return SessionVariant(
      row_name('forward' if forward else 'bound', compute_dtype), steps,
      batch_size, build,
      FORWARD_FLOP_PER_EXAMPLE if forward else TRAIN_FLOP_PER_EXAMPLE, config)


def input_variant(data_dir, batch_size, config):
  """`input`: the training input pipeline alone."""
  def build():
    images, labels = cifar10.distorted_inputs(data_dir, batch_size)
    # Fetch one number, not the batch: the copy to numpy is not the pipeline.
    return [tf.reduce_sum(images), labels[0]]
  return SessionVariant('input', 50, batch_size, build, None, config)


class TrainScriptVariant(Variant):
  """`train`: cifar10_train.train's graph, hooks (the logger's lines to
  /dev/null) and MonitoredTrainingSession in a fresh train_dir, no stop step.
  `train --seed`: with a seed. `towers`, `towers2`: cifar10_multi_gpu_train's
  num_towers towers on as many virtual CPUs; a step fetches its loss too."""

  def __init__(self, steps, data_dir, train_dir, batch_size, config,
               compute_dtype=None, seed=None, num_towers=0):
    name = row_name('train', compute_dtype)
    if num_towers:
      name = 'towers%s' % (num_towers if num_towers > 1 else '')
    super(TrainScriptVariant, self).__init__(
        name + ('' if seed is None else ' --seed'), steps,
        batch_size * max(1, num_towers), TRAIN_FLOP_PER_EXAMPLE)
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.set_random_seed(seed)
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      summary_op = None
      if num_towers:
        batches = cifar10_multi_gpu_train.tower_input_batches(
            data_dir, num_towers, batch_size)
        step = cifar10_multi_gpu_train.build_train_step(
            batches, global_step, batch_size, tower_device='cpu')
        self.train_op, loss = [step.train_op, step.loss], step.loss
        summary_op = tf.summary.merge(step.summaries)
      else:
        images, labels = cifar10.distorted_inputs(data_dir, batch_size,
                                                  seed=seed)
        self.train_op, loss = train_op(images, labels, global_step,
                                       batch_size, compute_dtype)
    self._log = open(os.devnull, 'w')
    with self._quiet():
      settings = run_flags.TrainSettings(None, train_dir, max_steps=10 ** 9)
      scaffold = checkpoints.restoring_scaffold(None, train_dir,
                                                summary_op=summary_op)
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               progress.StepLogger(loss, batch_size, 10,
                                   batches_per_step=max(1, num_towers)),
               summaries.SummaryHook(train_dir, settings.save_summaries_steps,
                                     settings.max_steps, summary_op),
               train_dirs.CheckpointSaverHook(
                   train_dir, scaffold, settings.max_steps,
                   save_secs=settings.save_checkpoint_secs)]
      self.sess = tf.train.MonitoredTrainingSession(
          scaffold=scaffold, hooks=hooks, config=config)

  @contextlib.contextmanager
  def _quiet(self):
    """The logger's lines to /dev/null, in this variant's graph (the
    checkpoint hook builds its save ops there: in eager mode it fails)."""
    with contextlib.redirect_stdout(self._log), self.graph.as_default():
      yield

  def step(self):
    self.sess.run(self.train_op)

  def median_traced_step(self, steps):
    """(step_time.Breakdown, step_stats) of the median of `steps` traced
    steps (not each part's median: its parts add up), after a first one."""
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    runs = []
    for _ in range(steps + 1):
      metadata = tf.RunMetadata()
      with self._quiet():
        start = time.time()
        self.sess.run(self.train_op, options=options, run_metadata=metadata)
        end = time.time()
      runs.append((step_time.split_step(metadata.step_stats, start, end),
                   metadata.step_stats))
    runs = sorted(runs[1:], key=lambda run: run[0].step)
    return runs[(len(runs) - 1) // 2]

  def close(self):
    with self.graph.as_default():  # the final checkpoint is saved here
      self.sess.close()
    self._log.close()


class EvalVariant(Variant):
  """`eval`: cifar10_eval.py's graph counting num_examples test examples.
  The single-pass input ends after them, so each window builds a fresh
  graph and session, untimed, and times the counting."""

  def __init__(self, data_dir, batch_size, num_examples, config,
               compute_dtype=None):
    super(EvalVariant, self).__init__(row_name('eval', compute_dtype), 1,
                                      num_examples, FORWARD_FLOP_PER_EXAMPLE)
    self.settings = evaluation.EvalSettings(
        data_dir, batch_size=batch_size, compute_dtype=compute_dtype)
    self.config = config

  def measure(self):
    counting = SessionVariant(
        self.name, 1, self.examples_per_step,
        lambda: cifar10_eval.build_eval_graph(
            self.settings, data_files.describe(self.settings.data_dir)),
        FORWARD_FLOP_PER_EXAMPLE, self.config)
    try:
      start = time.time()
      cifar10_eval.count_examples(counting.sess, counting.fetch,
                                  self.examples_per_step)
      self.rates.append(self.examples_per_step / (time.time() - start))
    finally:
      counting.close()

  def warm_up(self):
    self.measure()
    self.rates.pop()


class ClassifyVariant(Variant):
  """`classify`: cifar10_classify.py as a user runs it, on a folder of PNG
  files (test records), with a checkpoint of initial weights."""

  def __init__(self, data_dir, scratch, num_files, batch_size, config):
    pixels = synthetic.read_records(os.path.join(
        data_dir, download.BATCHES_DIR, data_files.TEST_FILES[0]))[1]
    self.files = [os.path.join(scratch, 'record_%05d.png' % i)
                  for i in range(num_files)]
    for path, picture in zip(self.files, pixels):
      tf.io.write_file(path, tf.io.encode_png(picture))
    super(ClassifyVariant, self).__init__('classify', 1, len(self.files),
                                          FORWARD_FLOP_PER_EXAMPLE)
    self.batch_size = batch_size
    self.config = config
    self.checkpoint = testutil.model_checkpoint(scratch, step=0)

  def warm_up(self):
    self.step()

  def step(self):
    list(cifar10_classify.classify(
        self.files, self.checkpoint, batch_size=self.batch_size,
        session_config=self.config))


class MatmulVariant(SessionVariant):
  """`products` independent n x n products in one session.run; its
  "examples" are FLOP. Each has its own operands (Grappler would merge
  identical ones). TF's default tf.ConfigProto() lets the products run side
  by side (the model's sessions run one op at a time on a few-core CPU)."""

  def __init__(self, n, products, dtype=None):
    self.n = n
    self.products = products
    self.dtype = dtype or tf.float32

    def build():
      sums = []
      for i in range(products):
        a, b = [tf.Variable(tf.cast(tf.random.normal([n, n], seed=seed),
                                    self.dtype))
                for seed in (2 * i + 1, 2 * i + 2)]
        sums.append(tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
      return sums

    super(MatmulVariant, self).__init__(
        '%s %d x%d' % (row_name('matmul', dtype), n, products), 1,
        products * 2 * n ** 3, build, None, tf.ConfigProto())

  def warm_up(self):
    """Sets the window's runs (one at least) to last ~MATMUL_WINDOW_S."""
    self.step()
    count, start = 0, time.time()
    while count == 0 or time.time() - start < MATMUL_WINDOW_S / 2:
      self.step()
      count += 1
    per_step = (time.time() - start) / count
    self.steps = max(1, int(round(MATMUL_WINDOW_S / per_step)))


def mixed_precision_rows(requested, on_gpu, cpu_feature, capability):
  """(compute dtype, line, the bf16 ceiling line's end) of the mixed rows:
  mixed_precision.choose's, but bfloat16 also where a CPU emulates it."""
  dtype, line = mixed_precision.choose(requested, on_gpu, cpu_feature,
                                       capability)
  if requested != 'off' and dtype is None:
    dtype, line = tf.bfloat16, (
        'bf16 rows: this CPU has neither AVX512_BF16 nor AMX, so oneDNN '
        'emulates bfloat16 (the scripts stay float32 here).')
  if dtype != tf.bfloat16:
    return dtype, line, ''
  if on_gpu:
    return dtype, line, '; on the GPU'
  if cpu_feature:
    return dtype, line, ('; this CPU computes bfloat16 natively (%s)'
                         % cpu_feature.upper())
  return dtype, line, '; emulated: this CPU has neither AVX512_BF16 nor AMX'


def table_lines(variants, median, bf16_note=''):
  """The table's lines: a row per variant, then the ceilings': of each type,
  its matrix product of the highest median. A GFLOP/s is a ratio of its own
  ceiling: the bf16 one for bfloat16 products and rows."""
  tops = {}  # dtype: (best, its GFLOP/s, label, how many ran)
  for dtype, label in ((tf.float32, 'ceiling'), (tf.bfloat16, 'bf16 ceiling')):
    matmuls = [v for v in variants
               if isinstance(v, MatmulVariant) and v.dtype == dtype]
    best = max(matmuls, key=lambda v: median[v.name], default=None)
    tops[dtype] = (best, best and median[best.name] / 1e9, label,
                   len(matmuls))
  row = '%-18s %12s %38s %10s   %s'
  lines = [(row % ('variant', 'examples/s', 'ratio', 'GFLOP/s', '')).rstrip()]
  for v in variants:
    if isinstance(v, MatmulVariant):
      best, ceiling, label, _ = tops[v.dtype]
      gflops = median[v.name] / 1e9
      ratio = ('1.00 (%s)' % label if v is best
               else '%.2f of %s' % (gflops / ceiling, label))
      lines.append(row % (v.name, '-', ratio, '%.1f' % gflops,
                          '(rounds: %.1f-%.1f GFLOP/s)' % (
                              min(v.rates) / 1e9, max(v.rates) / 1e9)))
      continue
    ratios, model_gflops = [], ''
    if v.name in BASELINES:
      ratios.append('%.2f of %s' % (median[v.name] / median[BASELINES[v.name]],
                                    BASELINES[v.name]))
    if v.flop_per_example:
      rate = median[v.name] * v.flop_per_example / 1e9
      model_gflops = '%.1f' % rate
      bf16 = tops[tf.bfloat16][0] is not None and v.name.endswith('_bf16')
      _, ceiling, label, _ = tops[tf.bfloat16 if bf16 else tf.float32]
      ratios.append('%.2f of %s' % (rate / ceiling, label))
    lines.append(row % (v.name, '%.1f' % median[v.name], '; '.join(ratios),
                        model_gflops,
                        '(rounds: %.0f-%.0f)' % (min(v.rates), max(v.rates))))
  for dtype, (best, ceiling, label, count) in tops.items():
    if best is not None:
      lines.append(
          '%s: %s = %d independent %dx%d %s product%s in one session.run, '
          '%.1f GFLOP/s (the best median of %d matmul configuration%s)%s' % (
              label, best.name, best.products, best.n, best.n,
              best.dtype.name, '' if best.products == 1 else 's', ceiling,
              count, '' if count == 1 else 's',
              bf16_note if dtype == tf.bfloat16 else ''))
  return lines


def _sizes(text):
  values = [int(v) for v in text.split(',') if v.strip()]
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError('a comma-separated list of integers >= 1')
  return sorted(set(values))  # each configuration once: names are keys


def _startup_seconds(data_dir, train_dir, threads):
  """Wall time from starting cifar10_train.py to its first step line."""
  start = time.time()
  proc = testutil.start_script('cifar10_train.py', [
      '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
      '--max_steps=1', '--fresh_start'] + [
          '--num_%s_threads=%d' % item for item in threads._asdict().items()
          if item[1] is not None], stderr=subprocess.DEVNULL)
  seconds = next((time.time() - start for line in proc.stdout
                  if ': step 0, loss = ' in line), None)
  proc.communicate(timeout=300)
  return seconds


def _rss_mib():
  with open('/proc/self/statm') as f:  # resident pages second
    return int(f.read().split()[1]) * resource.getpagesize() / 2.0 ** 20


def parse_args():
  """The flags; args.matmuls: the (size, products) within the GFLOP cap."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  # (flag, type or choices, default, help)
  for flag, kind, default, text in (
      ('data_dir', None, None, 'folder holding cifar-10-batches-bin/; '
       'default: full-size synthetic records in a temp dir'),
      ('rounds', int, 5, None),
      ('steps', int, 100, 'training steps per window (a multiple of the '
       '100-step summary interval keeps summaries counted)'),
      ('batch_size', int, 128, None),
      ('num_intra_threads', int, None, 'as the scripts take it '
       '(sessions.session_config); unset: the rule'),
      ('num_inter_threads', int, None,
       'as the scripts take it; unset: the rule'),
      ('mixed_precision', ['off', 'bf16'], 'off', 'bf16: add train, eval '
       'and forward rows with the model computing in bfloat16, as the '
       'scripts\' flag'),
      ('startup_runs', int, 3, None),
      ('traced_steps', int, 10, 'traced steps per training variant, after '
       'the timed rounds, for the split of a step\'s time; 0: none'),
      ('matmul_sizes', _sizes, [1024, 2048, 4096], 'matrix sizes N of the '
       'ceiling\'s NxN products (comma-separated)'),
      ('matmul_products', _sizes, [1, 2, 4], 'numbers of '
       'products side by side in one session.run (comma-separated)'),
      ('matmul_max_gflop', float, 150, 'leave out the '
       'configurations of more GFLOP per session.run (the default keeps '
       '4096 x1 and leaves out 4096 x2 and x4: seconds a run on 2 cores)')):
    choices = kind if isinstance(kind, list) else None
    parser.add_argument('--' + flag, type=None if choices else kind,
                        choices=choices, default=default, help=text)
  args = parser.parse_args()
  args.matmuls = [(n, k) for n in args.matmul_sizes
                  for k in args.matmul_products
                  if k * 2 * n ** 3 <= args.matmul_max_gflop * 1e9]
  if not args.matmuls:
    parser.error('no matmul configuration within --matmul_max_gflop')
  return args


def main():
  args = parse_args()
  # Its own lines only, as the scripts print (TF_CPP_MIN_LOG_LEVEL=0: all).
  console.quiet_python_logs()
  scratch = tempfile.mkdtemp(prefix='cifar10_bench_')
  data_dir = args.data_dir or synthetic.make_data_dir(
      os.path.join(scratch, 'data'), records_per_file=10000)
  batch = args.batch_size
  # 10,000 in the real test set; fewer in a small data dir (the test's).
  num_test = data_files.check_data_files([os.path.join(
      data_dir, download.BATCHES_DIR, data_files.TEST_FILES[0])])
  eval_batches = -(-num_test // batch)

  threads = sessions.ThreadCounts(args.num_intra_threads,
                                  args.num_inter_threads)
  train_config = sessions.training_config(threads)
  eval_config = sessions.eval_config(threads)
  print(describe_machine())
  print('train session %s' % describe_threads(train_config))
  print('matmul sessions %s' % describe_threads(tf.ConfigProto()))
  on_gpu = sessions.visible_gpus() > 0
  mixed, mixed_line, bf16_note = mixed_precision_rows(
      args.mixed_precision, on_gpu, mixed_precision.cpu_bf16_feature(),
      mixed_precision.gpu_capability() if on_gpu else None)
  if mixed_line:
    print(mixed_line)
  print('data: %s' % (args.data_dir or 'synthetic'), flush=True)
  startup_s = [_startup_seconds(data_dir, os.path.join(scratch, 'start'),
                                threads) for _ in range(args.startup_runs)]

  def train_row(subdir, config=train_config, batch_size=batch, **kwargs):
    return TrainScriptVariant(args.steps, data_dir, os.path.join(
        scratch, subdir), batch_size, config, **kwargs)

  variants = [
      train_row('train'),
      train_row('train_seed', seed=1),
      train_row('towers', sessions.training_config(threads, 1, 'cpu'),
                num_towers=1),
      train_row('towers2', sessions.training_config(threads, 2, 'cpu'),
                batch // 2, num_towers=2),
      bound_variant(args.steps, batch, train_config),
      input_variant(data_dir, batch, train_config),
      EvalVariant(data_dir, batch, num_test, eval_config),
      bound_variant(eval_batches, batch, eval_config, forward=True),
      ClassifyVariant(data_dir, os.path.join(scratch, 'classify'),
                      min(num_test, 1000), batch, eval_config),
  ]
  if mixed:
    variants += [
        train_row('train_mixed', compute_dtype=mixed),
        bound_variant(args.steps, batch, train_config, mixed),
        EvalVariant(data_dir, batch, num_test, eval_config, mixed),
        bound_variant(eval_batches, batch, eval_config, mixed, True),
    ]
  for dtype in [None] + ([tf.bfloat16] if mixed == tf.bfloat16 else []):
    variants += [MatmulVariant(n, k, dtype) for n, k in args.matmuls]
  for variant in variants:
    variant.warm_up()
  rss = []
  for round_index in range(args.rounds):
    for variant in variants:
      variant.measure()
    rss.append(_rss_mib())
    print('round %d/%d done, RSS %.0f MiB' % (round_index + 1, args.rounds,
                                             rss[-1]), flush=True)
  splits = {v.name: v.median_traced_step(args.traced_steps) for v in variants
            if isinstance(v, TrainScriptVariant) and args.traced_steps > 0}
  for variant in variants:
    variant.close()

  median = {v.name: float(np.median(v.rates)) for v in variants}
  print('\n' + '\n'.join(table_lines(variants, median, bf16_note)))
  if splits:
    print('\nwhere a training step\'s time goes (traced step of median length '
          'of %d; tracing adds to it):' % args.traced_steps)
    for v in variants:
      if v.name in splits:
        print(step_time.describe(v.name, splits[v.name][0],
                                 v.examples_per_step / median[v.name]))
  if splits and mixed:
    for name in ('train', row_name('train', mixed)):
      print('\n' + '\n'.join(step_time.cost_lines(name, splits[name][1])))
  print('\nstart to first step: %s s (median %.1f s)' % (
      ', '.join('%.1f' % s for s in startup_s), float(np.median(startup_s))))
  print('memory: RSS per round %s MiB; peak %.0f MiB' % (
      ', '.join('%.0f' % r for r in rss),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
  print('model FLOP per example: train %.1f M, forward %.1f M '
        '(conv and matmul layers)' % (TRAIN_FLOP_PER_EXAMPLE / 1e6,
                                       FORWARD_FLOP_PER_EXAMPLE / 1e6))


if __name__ == '__main__':
  main()
