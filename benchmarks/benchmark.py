"""Measures how fast this CIFAR-10 code trains and evaluates, in one run.

    python benchmarks/benchmark.py                   # synthetic records
    python benchmarks/benchmark.py --data_dir=/tmp/cifar10_data

Every variant (a row; the class or *_variant function that builds it says
what it runs) is built once, in its own graph and session, then measured in
interleaved rounds (A, B, C, ..., then A, B, C again), so that drift in the
machine's speed hits all of them alike. Each figure is the median over the
rounds, after a warm-up, printed with its ratio to its baseline measured in
the same run (BASELINES) and, for a FLOP rate, to the best matrix-product
configuration (the ceiling; for the *_bf16 rows, the best bfloat16 one).
Then come the split of a median traced training step (step_time.py; with
--mixed_precision also by op), the time from `python cifar10_train.py` to its
first step, and the process's memory after each round (it must not grow).
benchmarks/README.md explains the rows and holds the measured figures.
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
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'tests'))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# The same kernels the scripts choose.
from cifar10_support import startup  # pylint: disable=g-import-not-at-top
startup.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_classify
import cifar10_eval
import cifar10_input
import cifar10_multi_gpu_train
from cifar10_support import download
from cifar10_support import eval_run
from cifar10_support import precision
from cifar10_support import progress
from cifar10_support import run_settings
from cifar10_support import saving
from cifar10_support import sessions
from cifar10_support import train_dirs
import step_time
import synthetic

# Multiply-adds per 24x24 image in each conv and matmul layer of inference().
CONV1_MACS = 24 * 24 * 5 * 5 * 3 * 64
MACS_PER_EXAMPLE = (CONV1_MACS + 12 * 12 * 5 * 5 * 64 * 64  # conv2
                    + 2304 * 384 + 384 * 192 + 192 * 10)
# Training: forward, gradient of the weights, gradient of the inputs (not
# needed for conv1, whose input is the image); 2 FLOP per multiply-add.
TRAIN_FLOP_PER_EXAMPLE = 2 * (3 * MACS_PER_EXAMPLE - CONV1_MACS)
FORWARD_FLOP_PER_EXAMPLE = 2 * MACS_PER_EXAMPLE

MATMUL_SIZES = (1024, 2048, 4096)
MATMUL_PRODUCTS = (1, 2, 4)
MATMUL_MAX_GFLOP = 150  # keeps 4096 x1 (137); x2 took 2.6 s a run on 2 cores
# Seconds of one measurement window of a matmul configuration: its number of
# runs is set from its speed in the warm-up (one run at least).
MATMUL_WINDOW_S = 0.25

# /proc/cpuinfo flags reported in the machine line.
CPU_FEATURES = (('AVX-512', 'avx512f'), ('AVX512_BF16', 'avx512_bf16'),
                ('AMX', 'amx_tile'))

# Each variant's own ceiling, measured in the same run; the mixed-precision
# rows are each against their float32 row.
BASELINES = {'train': 'bound', 'towers': 'bound', 'towers2': 'bound',
             'eval': 'forward', 'classify': 'forward'}
BASELINES.update({'%s_%s' % (name, suffix): name
                  for name in ('train', 'bound', 'eval', 'forward')
                  for suffix in ('bf16', 'fp16')})


def describe_machine(cpuinfo=None, cpu_count=None, usable_cores=None,
                     environ=None, tf_version=None):
  """'machine: <CPU>, <n> cores; AVX-512 yes|no, AVX512_BF16 yes|no, AMX
  yes|no; TensorFlow <version>; oneDNN on|off (...)'.

  Each argument None is read from this machine: the text of /proc/cpuinfo
  (its first 'model name', else platform.processor(); its flags),
  os.cpu_count(), the cores this process may use (printed where fewer),
  os.environ (TF_ENABLE_ONEDNN_OPTS) and tf.__version__.
  """
  if cpuinfo is None:
    try:
      with open('/proc/cpuinfo') as f:
        cpuinfo = f.read()
    except OSError:
      cpuinfo = ''
  cpu_count = os.cpu_count() if cpu_count is None else cpu_count
  usable_cores = (sessions.usable_cores() if usable_cores is None
                  else usable_cores)
  environ = os.environ if environ is None else environ
  model = re.search(r'^model name[ \t]*:[ \t]*(\S.*?)[ \t]*$', cpuinfo, re.M)
  model = (model and model.group(1)) or platform.processor() or 'unknown CPU'
  cores = '%s cores' % ('?' if cpu_count is None else cpu_count)
  if usable_cores != cpu_count:
    cores += ' (%d usable by this process)' % usable_cores
  flags = precision.cpu_flags(cpuinfo)
  if flags is None:
    features = 'CPU flags unknown (no flags in /proc/cpuinfo)'
  else:
    features = ', '.join('%s %s' % (name, 'yes' if flag in flags else 'no')
                         for name, flag in CPU_FEATURES)
  # TensorFlow reads the variable as a boolean: 1/true or 0/false.
  setting = environ.get('TF_ENABLE_ONEDNN_OPTS')
  if setting is None:
    onednn = "TF's default (TF_ENABLE_ONEDNN_OPTS unset)"
  elif setting.strip().lower() in ('1', 'true'):
    onednn = 'on (TF_ENABLE_ONEDNN_OPTS=%s)' % setting
  elif setting.strip().lower() in ('0', 'false'):
    onednn = 'off (TF_ENABLE_ONEDNN_OPTS=%s)' % setting
  else:
    onednn = 'TF_ENABLE_ONEDNN_OPTS=%r, not a boolean' % setting
  return 'machine: %s, %s; %s; TensorFlow %s; oneDNN %s' % (
      model, cores, features, tf_version or tf.__version__, onednn)


def describe_threads(config):
  """The thread settings of a session's tf.ConfigProto, in one line: e.g.
  "threads: intra 0 (TF's choice), inter 1 (one op at a time) from
  session_inter_op_thread_pool [1 thread, global 'name']" (a session runs
  its steps in the first such pool, else in the process's inter-op pool)."""
  pools = config.session_inter_op_thread_pool
  intra = config.intra_op_parallelism_threads
  inter = pools[0].num_threads if pools else config.inter_op_parallelism_threads
  if inter < 0:
    inter_text = "%d (ops run in the caller's thread)" % inter
  else:
    inter_text = {0: "0 (TF's choice)", 1: '1 (one op at a time)'}.get(
        inter, '%d' % inter)
  text = 'threads: intra %s, inter %s' % (
      "0 (TF's choice)" if intra == 0 else '%d' % intra, inter_text)
  pools = config.session_inter_op_thread_pool
  if pools:
    described = []
    for pool in pools:
      entry = '%d thread%s' % (pool.num_threads,
                               '' if pool.num_threads == 1 else 's')
      if pool.num_threads == 0:
        entry += " (TF's choice)"
      if pool.global_name:
        entry += ", global '%s'" % pool.global_name
      described.append(entry)
    text += ' from session_inter_op_thread_pool [%s]' % '; '.join(described)
    if len(pools) > 1:
      text += ' (the first runs the session\'s steps)'
  if config.use_per_session_threads:
    text += ', use_per_session_threads'
  return text


def row_name(name, compute_dtype):
  """'train' for float32; 'train_bf16' or 'train_fp16' in mixed precision:
  the rows --mixed_precision=bf16 adds, the model computing in bfloat16 (in
  float16 on a GPU without bfloat16)."""
  if compute_dtype is None:
    return name
  return '%s_%s' % (name, {tf.bfloat16: 'bf16', tf.float16: 'fp16'}[
      compute_dtype])


def _constant_batch(batch_size, seed=0):
  rng = np.random.RandomState(seed)
  images = rng.normal(size=(batch_size, 24, 24, 3)).astype(np.float32)
  labels = rng.randint(0, 10, batch_size).astype(np.int32)
  return tf.constant(images), tf.constant(labels)


def _train_op(images, labels, global_step, batch_size, compute_dtype=None):
  """(train op, loss) as cifar10_train.train builds them from a batch; the
  `train` and `bound` rows share it, so that the bound computes the same."""
  loss = cifar10.loss(cifar10.inference(images, compute_dtype), labels)
  return cifar10.train(
      loss, global_step, batch_size,
      loss_scaling=precision.needs_loss_scale(compute_dtype)), loss


class Variant(object):
  """A graph and session, and how many examples one `step()` processes."""

  def __init__(self, name, steps, examples_per_step, flop_per_example=None):
    self.name = name
    self.steps = steps
    self.examples_per_step = examples_per_step
    self.flop_per_example = flop_per_example
    self.rates = []

  def measure(self):
    start = time.time()
    for _ in range(self.steps):
      self.step()
    self.rates.append(self.steps * self.examples_per_step
                      / (time.time() - start))

  def warm_up(self):
    """Untimed steps: graph optimization, kernel caches, queue filling."""
    for _ in range(max(5, self.steps // 5)):
      self.step()

  def close(self):
    pass


class SessionVariant(Variant):
  """Runs what `build()` returns in a plain session with the queue runners
  started; config None for the training sessions' (sessions'
  training_config)."""

  def __init__(self, name, steps, examples_per_step, build,
               flop_per_example=None, config=None):
    super(SessionVariant, self).__init__(name, steps, examples_per_step,
                                         flop_per_example)
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.fetch = build()
      self.config = (sessions.training_config() if config is None
                     else config)
      self.sess = tf.Session(config=self.config)
      self.sess.run([tf.global_variables_initializer(),
                     tf.local_variables_initializer()])
      self.coord = tf.train.Coordinator()
      self.threads = tf.train.start_queue_runners(self.sess, self.coord)

  def step(self):
    self.sess.run(self.fetch)

  def close(self):
    self.coord.request_stop()
    self.coord.join(self.threads, stop_grace_period_secs=10)
    self.sess.close()


def bound_variant(steps, batch_size, compute_dtype=None, config=None):
  """The `bound` row (`bound_bf16`, `bound_fp16` in mixed precision): the
  train op `train` runs, in the same type and with the same loss scaling,
  on one constant batch."""
  def build():
    global_step = tf.train.get_or_create_global_step()
    images, labels = _constant_batch(batch_size)
    return _train_op(images, labels, global_step, batch_size,
                     compute_dtype)[0]
  return SessionVariant(row_name('bound', compute_dtype), steps, batch_size,
                        build, TRAIN_FLOP_PER_EXAMPLE, config)


def forward_variant(steps, batch_size, config, compute_dtype=None):
  """The `forward` row: inference alone on a constant batch, in evaluation's
  session configuration (`eval`'s ceiling)."""
  def build():
    images, labels = _constant_batch(batch_size)
    logits = cifar10.inference(images, compute_dtype)
    return tf.reduce_sum(tf.cast(
        tf.nn.in_top_k(logits, labels, 1), tf.int32))
  return SessionVariant(row_name('forward', compute_dtype), steps, batch_size,
                        build, FORWARD_FLOP_PER_EXAMPLE, config)


def input_variant(data_dir, batch_size, config):
  """The `input` row: the training input pipeline alone."""
  def build():
    images, labels = cifar10.distorted_inputs(data_dir, batch_size)
    # Fetch one number, not the batch: the copy to numpy is not the pipeline.
    return [tf.reduce_sum(images), labels[0]]
  return SessionVariant('input', 50, batch_size, build, config=config)


class TrainScriptVariant(Variant):
  """cifar10_train.py's graph and session: pipeline, summaries, checkpoints.

  A copy of what cifar10_train.train builds: the same graph, hooks (its
  StepLogger, whose line every 10 steps goes to /dev/null) and
  MonitoredTrainingSession, in a fresh train_dir with no stop step; the loop
  is the benchmark's. config None: the script's own.
  """

  def __init__(self, steps, data_dir, train_dir, batch_size, config=None,
               compute_dtype=None):
    super(TrainScriptVariant, self).__init__(
        row_name('train', compute_dtype), steps, batch_size,
        TRAIN_FLOP_PER_EXAMPLE)
    self.graph = tf.Graph()
    with self.graph.as_default():
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      images, labels = cifar10.distorted_inputs(data_dir, batch_size)
      self.train_op, loss = _train_op(images, labels, global_step, batch_size,
                                      compute_dtype)
      if config is None:
        config = sessions.training_config()
      self._start(train_dir, config, loss,
                  progress.StepLogger(loss, batch_size, 10))

  def _start(self, train_dir, config, loss, step_hook, summary_op=None):
    """Opens the trainer's session with its hooks (step_hook: its logger)
    and the scripts' saving settings."""
    self.config = config
    self._log = open(os.devnull, 'w')
    settings = run_settings.TrainSettings(None, train_dir, max_steps=10 ** 9)
    with self._quiet():
      scaffold, saving_hooks, session_args = saving.restore_then_save(
          train_dirs.StartPoint(train_dir, None), settings, summary_op)
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               tf.train.NanTensorHook(loss), step_hook] + saving_hooks
      self.sess = tf.train.MonitoredTrainingSession(
          scaffold=scaffold, hooks=hooks, config=config, **session_args)

  @contextlib.contextmanager
  def _quiet(self):
    """The logger's lines to /dev/null, in this variant's graph (the
    checkpoint hook builds its save ops there: outside, in eager mode, it
    fails)."""
    with contextlib.redirect_stdout(self._log), self.graph.as_default():
      yield

  def measure(self):
    # Quiet once a window, not once a step: the loop stays as it is.
    with self._quiet():
      super(TrainScriptVariant, self).measure()

  def warm_up(self):
    with self._quiet():
      super(TrainScriptVariant, self).warm_up()

  def step(self):
    self.sess.run(self.train_op)

  def traced_run(self):
    """One step under FULL_TRACE: (its step_stats, start, end), start and end
    in seconds since the epoch around the run call."""
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    with self._quiet():
      start = time.time()
      self.sess.run(self.train_op, options=options, run_metadata=metadata)
      end = time.time()
    return metadata.step_stats, start, end

  def median_traced_step(self, steps):
    """(step_time.Breakdown, step_stats) of the traced step of median wall
    time of `steps` > 0, after one traced step that sets the tracer up. The
    median step, not each part's median, so that its parts add up."""
    self.traced_run()
    runs = []
    for _ in range(steps):
      stats, start, end = self.traced_run()
      runs.append((step_time.split_step(stats, start, end), stats))
    runs.sort(key=lambda run: run[0].step)
    return runs[(len(runs) - 1) // 2]

  def close(self):
    with self.graph.as_default():  # the final checkpoint is saved here
      self.sess.close()
    self._log.close()


class TowersVariant(TrainScriptVariant):
  """cifar10_multi_gpu_train.py's graph, hooks and session: prefetch queue,
  num_towers towers of batch_size on as many virtual CPU devices (`towers2`:
  two of half the batch); each step fetches the mean loss too, as its loop
  does."""

  def __init__(self, name, steps, data_dir, train_dir, batch_size,
               num_towers, threads):
    Variant.__init__(self, name, steps, batch_size * num_towers,
                     TRAIN_FLOP_PER_EXAMPLE)
    self.graph = tf.Graph()
    with self.graph.as_default():
      global_step = tf.train.get_or_create_global_step()
      batches = cifar10_multi_gpu_train.tower_input_batches(
          data_dir, num_towers, batch_size)
      step = cifar10_multi_gpu_train.build_train_step(
          batches, global_step, batch_size, tower_device='cpu')
      self.train_op = [step.train_op, step.loss]
      self._start(train_dir,
                  sessions.training_config(threads, num_towers, 'cpu'),
                  step.loss, progress.StepLogger(
                      step.loss, batch_size, 10, batches_per_step=num_towers),
                  summary_op=tf.summary.merge(step.summaries))


class EvalVariant(Variant):
  """cifar10_eval.py's graph counting the whole test set, each example once.

  The single-pass input ends after the test set, so every measurement builds
  a fresh graph and session (untimed) and times the counting loop.
  """

  def __init__(self, data_dir, batch_size, num_examples, config,
               compute_dtype=None):
    super(EvalVariant, self).__init__(row_name('eval', compute_dtype), 1,
                                      num_examples, FORWARD_FLOP_PER_EXAMPLE)
    self.settings = eval_run.EvalSettings(
        data_dir, batch_size=batch_size, compute_dtype=compute_dtype)
    self.config = config

  def measure(self):
    with tf.Graph().as_default():
      eval_graph = cifar10_eval.build_eval_graph(self.settings)
      with tf.Session(config=self.config) as sess:
        sess.run([tf.global_variables_initializer(),
                  tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        try:
          start = time.time()
          cifar10_eval.count_examples(sess, eval_graph,
                                      self.examples_per_step)
          self.rates.append(self.examples_per_step / (time.time() - start))
        finally:
          coord.request_stop()
          coord.join(threads, stop_grace_period_secs=10)

  def warm_up(self):
    self.measure()
    self.rates.pop()


class ClassifyVariant(Variant):
  """cifar10_classify.py on a folder of PNG files, as a user runs it: each
  step classifies the same files (test records written as PNG) with a
  checkpoint of initial weights."""

  def __init__(self, data_dir, scratch, num_files, batch_size, config):
    super(ClassifyVariant, self).__init__('classify', 1, num_files,
                                          FORWARD_FLOP_PER_EXAMPLE)
    self.batch_size = batch_size
    self.config = config
    pixels = synthetic.read_records(os.path.join(
        data_dir, download.BATCHES_DIR, cifar10_input.eval_files('test')[0]))[1]
    os.makedirs(scratch)
    self.files = []
    for i, picture in enumerate(pixels[:num_files]):
      self.files.append(os.path.join(scratch, 'record_%05d.png' % i))
      with open(self.files[-1], 'wb') as f:
        f.write(tf.io.encode_png(picture).numpy())
    self.examples_per_step = len(self.files)
    with tf.Graph().as_default():
      global_step = tf.train.get_or_create_global_step()
      cifar10.inference(tf.zeros([1, 24, 24, 3]))
      tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY,
                                        global_step).apply(
                                            tf.trainable_variables())
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        self.checkpoint = tf.train.Saver().save(
            sess, os.path.join(scratch, 'model.ckpt'), global_step=0)

  def warm_up(self):
    self.step()

  def step(self):
    list(cifar10_classify.classify(
        self.files, self.checkpoint, batch_size=self.batch_size,
        session_config=self.config))


class MatmulVariant(SessionVariant):
  """`products` independent n x n products in one session.run; its
  "examples" are FLOP. Each has its own operands (Grappler would merge
  identical ones). In bfloat16 oneDNN accumulates in float32, as in the
  model's layers. TF's default tf.ConfigProto() lets the products run side
  by side (the model's sessions run one op at a time on a few-core CPU)."""

  def __init__(self, n, products, window_s=MATMUL_WINDOW_S, dtype=None):
    self.n = n
    self.products = products
    self.window_s = window_s
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
        products * 2 * n ** 3, build, config=tf.ConfigProto())

  def describe(self):
    return '%d independent %dx%d %s product%s in one session.run' % (
        self.products, self.n, self.n, self.dtype.name,
        '' if self.products == 1 else 's')

  def warm_up(self):
    """One run, then runs timed for ~window_s / 2 to set the window's runs."""
    self.step()
    count, start = 0, time.time()
    while count == 0 or time.time() - start < self.window_s / 2:
      self.step()
      count += 1
    per_step = (time.time() - start) / count
    self.steps = max(1, int(round(self.window_s / per_step)))


def matmul_variants(sizes, products, max_gflop, dtype=None):
  """A MatmulVariant for every size and number of products, except those of
  more than max_gflop GFLOP per session.run; dtype None for float32."""
  return [MatmulVariant(n, k, dtype=dtype) for n in sizes for k in products
          if k * 2 * n ** 3 <= max_gflop * 1e9]


def mixed_precision_rows(requested, on_gpu, cpu_feature, capability):
  """The compute dtype of the mixed-precision rows, and the line about them:
  precision.choose's, except that a CPU without native bfloat16 is measured
  in bfloat16 anyway. (None, None) for requested 'off'."""
  dtype, line = precision.choose(requested, on_gpu, cpu_feature, capability)
  if requested != 'off' and dtype is None:
    return tf.bfloat16, (
        'bf16 rows: this CPU has neither AVX512_BF16 nor AMX, so oneDNN '
        'emulates bfloat16 (the scripts stay float32 here).')
  return dtype, line


def bf16_ceiling_note(cpu_feature, on_gpu):
  """What the bf16 ceiling's line says of where its products ran, given
  precision.cpu_bf16_feature()'s answer and whether they ran on a GPU."""
  if on_gpu:
    return '; on the GPU'
  if cpu_feature:
    return '; this CPU computes bfloat16 natively (%s)' % cpu_feature.upper()
  return '; emulated: this CPU has neither AVX512_BF16 nor AMX'


def matmul_ceiling(variants, median, dtype=None):
  """(the MatmulVariant of dtype, None for float32, with the highest
  median[name], its rate in GFLOP/s), or (None, None) when none ran."""
  matmuls = [v for v in variants if isinstance(v, MatmulVariant)
             and v.dtype == (dtype or tf.float32)]
  if not matmuls:
    return None, None
  best = max(matmuls, key=lambda v: median[v.name])
  return best, median[best.name] / 1e9


def table_lines(variants, median, bf16_note=''):
  """The printed table: a row per variant, then the ceilings' lines. Every
  GFLOP/s is given as a ratio of the ceiling only; where bfloat16 products
  ran, those and the *_bf16 rows of the bf16 ceiling (its line ends with
  bf16_note)."""
  tops = {tf.float32: matmul_ceiling(variants, median) + ('ceiling',),
          tf.bfloat16: matmul_ceiling(variants, median, tf.bfloat16)
                       + ('bf16 ceiling',)}
  row = '%-18s %12s %38s %10s   %s'
  lines = [(row % ('variant', 'examples/s', 'ratio', 'GFLOP/s', '')).rstrip()]
  for v in variants:
    if isinstance(v, MatmulVariant):
      best, ceiling, label = tops[v.dtype]
      gflops = median[v.name] / 1e9
      ratio = ('1.00 (%s)' % label if v is best
               else '%.2f of %s' % (gflops / ceiling, label))
      lines.append(row % (v.name, '-', ratio, '%.1f' % gflops,
                          '(rounds: %.1f-%.1f GFLOP/s)' % (
                              min(v.rates) / 1e9, max(v.rates) / 1e9)))
      continue
    ratios = []
    if v.name in BASELINES:
      ratios.append('%.2f of %s' % (median[v.name] / median[BASELINES[v.name]],
                                    BASELINES[v.name]))
    model_gflops = ''
    if v.flop_per_example:
      rate = median[v.name] * v.flop_per_example / 1e9
      model_gflops = '%.1f' % rate
      _, ceiling, label = tops[tf.float32]
      if tops[tf.bfloat16][0] is not None and v.name.endswith('_bf16'):
        _, ceiling, label = tops[tf.bfloat16]
      ratios.append('%.2f of %s' % (rate / ceiling, label))
    lines.append(row % (v.name, '%.1f' % median[v.name], '; '.join(ratios),
                        model_gflops,
                        '(rounds: %.0f-%.0f)' % (min(v.rates), max(v.rates))))
  for dtype, (best, ceiling, label) in tops.items():
    if best is None:
      continue
    count = sum(1 for v in variants
                if isinstance(v, MatmulVariant) and v.dtype == dtype)
    lines.append('%s: %s = %s, %.1f GFLOP/s (the best median of %d '
                 'matmul configuration%s)%s' % (
                     label, best.name, best.describe(), ceiling, count,
                     '' if count == 1 else 's',
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
  proc = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'cifar10_train.py'),
       '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
       '--max_steps=1', '--fresh_start'] + [
           '--%s=%d' % (name, value) for name, value in zip(
               ('num_intra_threads', 'num_inter_threads'), threads)
           if value is not None],
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
  seconds = None
  for line in proc.stdout:
    if ': step 0, loss = ' in line and seconds is None:
      seconds = time.time() - start
  proc.wait(timeout=300)
  return seconds


def _rss_mib():
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 1024.0
  return float('nan')


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', default=None,
                      help='folder holding cifar-10-batches-bin/; default: '
                      'full-size synthetic records in a temp dir')
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--steps', type=int, default=100,
                      help='training steps per window (a multiple of the '
                      '100-step summary interval keeps summaries counted)')
  parser.add_argument('--batch_size', type=int, default=128)
  parser.add_argument('--num_intra_threads', type=int, default=None,
                      help='as the scripts take it (sessions.session_config); '
                      'unset: the rule')
  parser.add_argument('--num_inter_threads', type=int, default=None,
                      help='as the scripts take it; unset: the rule')
  parser.add_argument('--mixed_precision', choices=['off', 'bf16'],
                      default='off',
                      help='bf16: add train, eval and forward rows with the '
                      'model computing in bfloat16, as the scripts\' flag')
  parser.add_argument('--startup_runs', type=int, default=3)
  parser.add_argument('--traced_steps', type=int, default=10,
                      help='traced steps per training variant, after the '
                      'timed rounds, for the split of a step\'s time; 0: none')
  parser.add_argument('--matmul_sizes', type=_sizes,
                      default=list(MATMUL_SIZES),
                      help='matrix sizes N of the ceiling\'s NxN products '
                      '(comma-separated)')
  parser.add_argument('--matmul_products', type=_sizes,
                      default=list(MATMUL_PRODUCTS),
                      help='numbers of products side by side in one '
                      'session.run (comma-separated)')
  parser.add_argument('--matmul_max_gflop', type=float,
                      default=MATMUL_MAX_GFLOP,
                      help='leave out the configurations of more GFLOP per '
                      'session.run (the default keeps 4096 x1 and leaves out '
                      '4096 x2 and x4: seconds a run on 2 cores)')
  args = parser.parse_args()
  if not any(k * 2 * n ** 3 <= args.matmul_max_gflop * 1e9
             for n in args.matmul_sizes for k in args.matmul_products):
    parser.error('no matmul configuration within --matmul_max_gflop')
  return args


def main():
  args = parse_args()
  scratch = tempfile.mkdtemp(prefix='cifar10_bench_')
  # Default: full-size synthetic files, 5 x 10000 train and 10000 test.
  data_dir = args.data_dir or synthetic.make_data_dir(
      os.path.join(scratch, 'data'), records_per_file=10000)
  batch = args.batch_size
  # 10,000 in the real test set; fewer in a small data dir (the test's).
  num_test = cifar10_input.check_data_files([os.path.join(
      data_dir, download.BATCHES_DIR, cifar10_input.eval_files('test')[0])])
  eval_batches = -(-num_test // batch)

  threads = sessions.ThreadCounts(args.num_intra_threads,
                                  args.num_inter_threads)
  train_config = sessions.training_config(threads)
  eval_config = sessions.eval_config(threads)
  print(describe_machine())
  print('train session %s' % describe_threads(train_config))
  print('matmul sessions %s' % describe_threads(tf.ConfigProto()))
  on_gpu = sessions.has_gpu()
  cpu_feature = precision.cpu_bf16_feature()
  capability = precision.gpu_capability() if on_gpu else None
  mixed, mixed_line = mixed_precision_rows(args.mixed_precision, on_gpu,
                                           cpu_feature, capability)
  if mixed_line:
    print(mixed_line)
  print('data: %s' % (args.data_dir or 'synthetic'), flush=True)
  startup_s = [_startup_seconds(data_dir, os.path.join(scratch, 'start'),
                                threads) for _ in range(args.startup_runs)]

  def train_dir(name):
    return os.path.join(scratch, name)

  variants = [
      TrainScriptVariant(args.steps, data_dir, train_dir('train'), batch,
                         train_config),
      TowersVariant('towers', args.steps, data_dir, train_dir('towers'),
                    batch, 1, threads),
      TowersVariant('towers2', args.steps, data_dir, train_dir('towers2'),
                    batch // 2, 2, threads),
      bound_variant(args.steps, batch, config=train_config),
      input_variant(data_dir, batch, train_config),
      EvalVariant(data_dir, batch, num_test, eval_config),
      forward_variant(eval_batches, batch, eval_config),
      ClassifyVariant(data_dir, train_dir('classify'), min(num_test, 1000),
                      batch, eval_config),
  ]
  if mixed:
    variants += [
        TrainScriptVariant(args.steps, data_dir, train_dir('train_mixed'),
                           batch, train_config, mixed),
        bound_variant(args.steps, batch, mixed, train_config),
        EvalVariant(data_dir, batch, num_test, eval_config, mixed),
        forward_variant(eval_batches, batch, eval_config, mixed),
    ]
  variants += matmul_variants(args.matmul_sizes, args.matmul_products,
                              args.matmul_max_gflop)
  bf16_note = ''
  if mixed == tf.bfloat16:
    variants += matmul_variants(args.matmul_sizes, args.matmul_products,
                                args.matmul_max_gflop, tf.bfloat16)
    bf16_note = bf16_ceiling_note(cpu_feature, on_gpu)
  for variant in variants:
    variant.warm_up()
  rss = []
  for round_index in range(args.rounds):
    for variant in variants:
      variant.measure()
    rss.append(_rss_mib())
    print('round %d/%d done, RSS %.0f MiB' % (round_index + 1, args.rounds,
                                             rss[-1]), flush=True)
  splits = {}
  if args.traced_steps > 0:
    splits = {v.name: v.median_traced_step(args.traced_steps)
              for v in variants if isinstance(v, TrainScriptVariant)}
  for variant in variants:
    variant.close()

  median = {v.name: float(np.median(v.rates)) for v in variants}
  print()
  for line in table_lines(variants, median, bf16_note):
    print(line.rstrip())
  if splits:
    print()
    print('where a training step\'s time goes (traced step of median length '
          'of %d; tracing adds to it):' % args.traced_steps)
    for v in variants:
      if v.name in splits:
        print(step_time.describe(v.name, splits[v.name][0],
                                 v.examples_per_step / median[v.name]))
  if splits and mixed:
    # Which ops of a mixed-precision step run in which type, at what cost.
    for name in ('train', row_name('train', mixed)):
      stats = splits[name][1]
      print()
      for line in step_time.describe_op_costs(name,
                                              step_time.op_costs(stats)):
        print(line)
      for line in step_time.describe_node_costs(name,
                                                step_time.node_costs(stats)):
        print(line)
  print()
  print('start to first step: %s s (median %.1f s)' % (
      ', '.join('%.1f' % s for s in startup_s), float(np.median(startup_s))))
  print('memory: RSS per round %s MiB; peak %.0f MiB' % (
      ', '.join('%.0f' % r for r in rss),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
  print('model FLOP per example: train %.1f M, forward %.1f M '
        '(conv and matmul layers)' % (TRAIN_FLOP_PER_EXAMPLE / 1e6,
                                       FORWARD_FLOP_PER_EXAMPLE / 1e6))


if __name__ == '__main__':
  main()
