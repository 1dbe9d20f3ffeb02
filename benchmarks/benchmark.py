"""Measures how fast this CIFAR-10 code trains and evaluates, in one run.

    python benchmarks/benchmark.py                   # synthetic records
    python benchmarks/benchmark.py --data_dir=/tmp/cifar10_data

Every variant is built once, in its own graph and session, then measured in
interleaved rounds (variant A, B, C, ..., then A, B, C again), so drift in the
machine's speed hits all of them alike. Each figure is the median over the
rounds, after a warm-up, and is printed with its ratio to a baseline measured
in the same run:

  train       cifar10_train.py's graph as users run it: queue input pipeline,
              the script's MonitoredTrainingSession and hooks (stop step, NaN
              check, logger, checkpoints), summaries every 100 steps
  towers      cifar10_multi_gpu_train.py's graph, one tower
  towers2     the same with two towers of batch_size / 2 on two virtual CPU
              devices (the same global batch)
  bound       the same train op fed one constant in-memory batch: no input
              pipeline, no summaries (the ceiling for `train`)
  input       the distorted input pipeline alone, dequeuing batches
  eval        evaluation over the full test set (every example once)
  forward     inference alone on a constant batch, in evaluation's session
              configuration (the ceiling for `eval`)
  classify    cifar10_classify.py's classify() on up to 1,000 test records
              written as PNG files, as a user classifies a folder: reading,
              decoding, the model, and the graph building and checkpoint
              restoring of each call (its ceiling is `forward`)
  train_bf16, bound_bf16, eval_bf16, forward_bf16
              with --mixed_precision=bf16: `train`, `bound`, `eval` and
              `forward` again, the model computing in bfloat16 (float16 on a
              GPU without bfloat16: rows *_fp16), each with its ratio to its
              float32 row (train_bf16 over bound_bf16 is what the pipeline
              and hooks cost in bfloat16). On a CPU without AVX512_BF16 or
              AMX, where the scripts stay float32, the rows still run
              (oneDNN emulates bfloat16) and a line says so: they show why
              the scripts don't
  matmul N xK K independent NxN float32 matrix products side by side in one
              session.run, for N in --matmul_sizes and K in
              --matmul_products, in TF's default session configuration (its
              inter-op pool runs the K products at once; the model's
              sessions run one op at a time on a CPU-only machine). The
              best median GFLOP/s over these configurations is the
              machine's ceiling, against which every FLOP rate is compared

plus the time from `python cifar10_train.py` to its first step and the
process's memory after each round (it must not grow). The output starts
with the machine (CPU model, cores, AVX-512 / AVX512_BF16 / AMX, TensorFlow,
oneDNN) and the thread settings of the `train` and `matmul` sessions.

A single 2048x2048 product, the reference before, leaves cores idle on a
many-core machine: four CPU towers of this model ran at 1.6 times its rate on
a 16-core Xeon. The ceiling is the best of several sizes and of several
products at once, so that it is not below what the machine has shown it can
do.

Where a training step's time goes: after the timed rounds, `train`, `towers`
and `towers2` each run --traced_steps more steps with RunOptions.FULL_TRACE
(tracing slows a step, so these are kept out of the figures above) and
print, for the traced step of median wall time, how its wall time around
`MonitoredSession.run` splits (benchmarks/step_time.py):

  input    only dequeues from the input queue running: the step waiting for
           (or copying out) its batch
  compute  at least one of the step's other ops running, on any device
  host     the rest: hooks, writing summaries and checkpoints, Python, the
           session's feeding, fetching and scheduling, ops waiting for a
           thread; shown as the time before the first op, between ops and
           after the last

Input + compute + host = the step's wall time, each part >= 0. With
--mixed_precision, the same traced step of `train` and of its mixed row is
also split by op: its op time by op type and output dtype, then its
costliest ops by name (conv2's filter gradient apart from its input
gradient, say).
"""

import argparse
import contextlib
import os
import platform
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
startup.choose_cpu_kernels()

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_classify
import cifar10_eval
import cifar10_input
import cifar10_multi_gpu_train
import cifar10_train
from cifar10_support import download
from cifar10_support import precision
from cifar10_support import run_settings
from cifar10_support import saving
from cifar10_support import sessions
from cifar10_support import towers
import step_time
import synthetic

# Multiply-adds per 24x24 image in each conv and matmul layer of inference().
MACS_PER_EXAMPLE = (24 * 24 * 5 * 5 * 3 * 64      # conv1
                    + 12 * 12 * 5 * 5 * 64 * 64   # conv2
                    + 2304 * 384 + 384 * 192 + 192 * 10)
# Training: forward, gradient of the weights, gradient of the inputs (not
# needed for conv1, whose input is the image); 2 FLOP per multiply-add.
CONV1_MACS = 24 * 24 * 5 * 5 * 3 * 64
TRAIN_FLOP_PER_EXAMPLE = 2 * (3 * MACS_PER_EXAMPLE - CONV1_MACS)
FORWARD_FLOP_PER_EXAMPLE = 2 * MACS_PER_EXAMPLE

# The matrix-product ceiling: every size with every number of products side
# by side, except those of more FLOP per session.run than --matmul_max_gflop.
MATMUL_SIZES = (1024, 2048, 4096)
MATMUL_PRODUCTS = (1, 2, 4)
MATMUL_MAX_GFLOP = 150  # keeps 4096 x1 (137); x2 took 2.6 s a run on 2 cores
# Seconds of one measurement window of a matmul configuration: its number of
# runs is set from its speed in the warm-up (one run at least).
MATMUL_WINDOW_S = 0.25

# /proc/cpuinfo flags reported in the machine line.
CPU_FEATURES = (('AVX-512', 'avx512f'), ('AVX512_BF16', 'avx512_bf16'),
                ('AMX', 'amx_tile'))


def _read_text(path):
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return ''


def describe_machine(cpuinfo=None, cpu_count=None, usable_cores=None,
                 environ=None, tf_version=None):
  """One line describing the machine the benchmark runs on.

  Args (each None: read from this machine and process):
    cpuinfo: the text of /proc/cpuinfo; its first 'model name' is the CPU
      (else platform.processor()), its 'flags' lines the features
      (precision.cpu_flags).
    cpu_count: os.cpu_count().
    usable_cores: the cores this process may run on
      (len(os.sched_getaffinity(0))); printed when not cpu_count.
    environ: the environment, for TF_ENABLE_ONEDNN_OPTS.
    tf_version: tf.__version__.

  Returns:
    'machine: <CPU>, <n> cores; AVX-512 yes|no, AVX512_BF16 yes|no, AMX yes|no;
    TensorFlow <version>; oneDNN on|off (...)'.
  """
  if cpuinfo is None:
    cpuinfo = _read_text('/proc/cpuinfo')
  if cpu_count is None:
    cpu_count = os.cpu_count()
  if usable_cores is None and hasattr(os, 'sched_getaffinity'):
    usable_cores = len(os.sched_getaffinity(0))
  if environ is None:
    environ = os.environ
  if tf_version is None:
    tf_version = tf.__version__

  model = None
  for line in cpuinfo.splitlines():
    key, _, value = line.partition(':')
    if key.strip() == 'model name' and value.strip():
      model = value.strip()
      break
  model = model or platform.processor() or 'unknown CPU'
  flags = precision.cpu_flags(cpuinfo)

  cores = '%s cores' % ('?' if cpu_count is None else cpu_count)
  if usable_cores is not None and usable_cores != cpu_count:
    cores += ' (%d usable by this process)' % usable_cores
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
      model, cores, features, tf_version, onednn)


def _inter_op_text(num_threads):
  if num_threads == 0:
    return "0 (TF's choice)"
  if num_threads == 1:
    return '1 (one op at a time)'
  if num_threads < 0:
    return "%d (ops run in the caller's thread)" % num_threads
  return '%d' % num_threads


def describe_threads(config):
  """The thread settings of a session's tf.ConfigProto, in one line.

  A session with session_inter_op_thread_pool entries runs its steps in the
  first entry's pool (RunOptions.inter_op_thread_pool picks another);
  without entries, in the process's inter-op pool of
  inter_op_parallelism_threads. 0 threads: TF picks, one a core.

  Returns:
    e.g. "threads: intra 0 (TF's choice), inter 0 (TF's choice)", or for a
    pool of one thread "threads: intra 0 (TF's choice), inter 1 (one op at a
    time) from session_inter_op_thread_pool [1 thread, global 'name']".
  """
  intra, inter = sessions.config_threads(config)
  text = 'threads: intra %s, inter %s' % (
      "0 (TF's choice)" if intra == 0 else '%d' % intra, _inter_op_text(inter))
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


def _random_data_dir(root, seed=0):
  """Full-size synthetic CIFAR-10 files: 5 x 10000 train, 10000 test."""
  rng = np.random.RandomState(seed)
  batches = os.path.join(root, download.BATCHES_DIR)
  os.makedirs(batches, exist_ok=True)
  for name in synthetic.TRAIN_FILES + [synthetic.TEST_FILE]:
    labels = rng.randint(0, 10, 10000)
    images = rng.randint(0, 256, (10000, 32, 32, 3), dtype=np.uint8)
    synthetic.write_records(os.path.join(batches, name), labels, images)
  return root


def _constant_batch(batch_size, seed=0):
  rng = np.random.RandomState(seed)
  images = rng.normal(size=(batch_size, 24, 24, 3)).astype(np.float32)
  labels = rng.randint(0, 10, batch_size).astype(np.int32)
  return tf.constant(images), tf.constant(labels)


class Variant(object):
  """A graph and session, and how many examples one `step()` processes."""

  matmul = False  # True for the matrix products the ceiling is taken from

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

  def step(self):
    raise NotImplementedError


class SessionVariant(Variant):
  """Runs `fetch` in a plain session with the queue runners started."""

  def __init__(self, name, steps, examples_per_step, build,
               flop_per_example=None, config=None):
    super(SessionVariant, self).__init__(name, steps, examples_per_step,
                                         flop_per_example)
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.fetch = build()
      # Default: the configuration cifar10_train.py runs with.
      self.config = model_config() if config is None else config
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


class TrainScriptVariant(Variant):
  """cifar10_train.py's graph and session: pipeline, summaries, checkpoints.

  A copy of what cifar10_train.train builds: the same graph, hooks (its
  LoggerHook, whose line every 10 steps goes to /dev/null) and
  MonitoredTrainingSession; the loop is the benchmark's.
  """

  def __init__(self, steps, data_dir, train_dir, batch_size, config=None,
               compute_dtype=None):
    super(TrainScriptVariant, self).__init__(
        row_name('train', compute_dtype), steps, batch_size,
        TRAIN_FLOP_PER_EXAMPLE)
    self.graph = tf.Graph()
    with self.graph.as_default():
      # cifar10_train.train's graph.
      with tf.device('/cpu:0'):
        global_step = tf.train.get_or_create_global_step()
      images, labels = cifar10.distorted_inputs(data_dir, batch_size)
      self.train_op, loss = _train_op(images, labels, global_step, batch_size,
                                      compute_dtype)
      # config: the script's own unless a test bounds its ops' time.
      self._start(train_dir, model_config() if config is None else config,
                  loss, step_hook=cifar10_train.LoggerHook(
                      loss, global_step, batch_size, 10))

  def _start(self, train_dir, config, loss, step_hook, summary_op=None):
    """Opens the trainer's session, with its hooks (step_hook: its logger or
    step counter; a logger's lines go to /dev/null), in a fresh train_dir,
    with the scripts' saving settings and no stop step."""
    self.config = config  # the session's, as given to it
    self._log = open(os.devnull, 'w')
    # Only train_dir, max_steps and the save_* settings are read here.
    settings = run_settings.TrainSettings(None, train_dir, max_steps=10 ** 9)
    with self._quiet():
      scaffold, saving_hooks, session_args = saving.restore_then_save(
          None, settings.train_dir, settings, summary_op)
      hooks = [tf.train.StopAtStepHook(last_step=settings.max_steps),
               tf.train.NanTensorHook(loss), step_hook] + saving_hooks
      self.sess = tf.train.MonitoredTrainingSession(
          scaffold=scaffold, hooks=hooks, config=config, **session_args)

  @contextlib.contextmanager
  def _quiet(self):
    """The logger's lines to /dev/null, in this variant's graph (the
    script's checkpoint hook saves every 10 minutes, and its saver builds its
    save ops there: outside, in eager mode, it fails)."""
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
    """One step under FULL_TRACE: (its step_stats, start, end), end and start
    in seconds since the epoch around the run call."""
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    with self._quiet():
      start = time.time()
      self.sess.run(self.train_op, options=options, run_metadata=metadata)
      end = time.time()
    return metadata.step_stats, start, end

  def median_traced_step(self, steps):
    """The traced step of median wall time, of `steps` > 0: (its
    step_time.Breakdown, its step_stats).

    A first traced step, which sets the tracer up, is left out. The median
    step, not each part's median, so that its parts add up.
    """
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
  """cifar10_multi_gpu_train.py's graph: prefetch queue, towers on CPUs.

  A copy of what its train builds, hooks and session; each step fetches the
  mean loss too, as its loop does.
  """

  def __init__(self, name, steps, data_dir, train_dir, batch_size,
               num_towers):
    Variant.__init__(self, name, steps, batch_size * num_towers,
                     TRAIN_FLOP_PER_EXAMPLE)
    self.graph = tf.Graph()
    with self.graph.as_default():
      global_step = tf.train.get_or_create_global_step()
      batches = cifar10_multi_gpu_train.tower_input_batches(
          data_dir, num_towers, batch_size)
      step = cifar10_multi_gpu_train.build_train_step(
          batches, global_step, batch_size, tower_device='cpu')
      # Its loop fetches the loss for the step line.
      self.train_op = [step.train_op, step.loss]
      self._start(train_dir,
                  sessions.training_config(THREADS['model'], num_towers,
                                           'cpu'), step.loss,
                  towers.StepCounter(global_step),
                  summary_op=tf.summary.merge(step.summaries))


def bound_variant(steps, batch_size, compute_dtype=None):
  """The `bound` row (`bound_bf16`, `bound_fp16` in mixed precision): the
  train op `train` runs, in the same type and with the same loss scaling,
  on one constant batch."""
  return SessionVariant(row_name('bound', compute_dtype), steps, batch_size,
                        _build_bound(batch_size, compute_dtype),
                        TRAIN_FLOP_PER_EXAMPLE)


def _train_op(images, labels, global_step, batch_size, compute_dtype=None):
  """(train op, loss) as cifar10_train.train builds them from a batch; the
  `train` and `bound` rows share it, so that the bound computes the same."""
  loss = cifar10.loss(cifar10.inference(images, compute_dtype), labels)
  return cifar10.train(
      loss, global_step, batch_size,
      loss_scaling=precision.needs_loss_scale(compute_dtype)), loss


def _build_bound(batch_size, compute_dtype=None):
  def build():
    global_step = tf.train.get_or_create_global_step()
    images, labels = _constant_batch(batch_size)
    return _train_op(images, labels, global_step, batch_size,
                     compute_dtype)[0]
  return build


def _build_forward(batch_size, compute_dtype=None):
  def build():
    images, labels = _constant_batch(batch_size)
    logits = cifar10.inference(images, compute_dtype)
    return tf.reduce_sum(tf.cast(
        tf.nn.in_top_k(logits, labels, 1), tf.int32))
  return build


def _build_input(data_dir, batch_size):
  def build():
    images, labels = cifar10.distorted_inputs(data_dir, batch_size)
    # Fetch one number, not the batch: the copy to numpy is not the pipeline.
    return [tf.reduce_sum(images), labels[0]]
  return build


class EvalVariant(Variant):
  """cifar10_eval.py's graph counting the whole test set, each example once.

  The single-pass input ends after the test set, so every measurement builds
  a fresh graph and session (untimed) and times the counting loop.
  """

  def __init__(self, data_dir, batch_size, num_examples, compute_dtype=None):
    super(EvalVariant, self).__init__(row_name('eval', compute_dtype), 1,
                                      num_examples, FORWARD_FLOP_PER_EXAMPLE)
    self.data_dir = data_dir
    self.batch_size = batch_size
    self.compute_dtype = compute_dtype

  def measure(self):
    with tf.Graph().as_default():
      eval_graph = cifar10_eval.build_eval_graph(cifar10_eval.EvalSettings(
          self.data_dir, batch_size=self.batch_size,
          compute_dtype=self.compute_dtype))
      with tf.Session(config=eval_config()) as sess:
        sess.run([tf.global_variables_initializer(),
                  tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        start = time.time()
        cifar10_eval.count_examples(sess, eval_graph, self.examples_per_step)
        self.rates.append(self.examples_per_step / (time.time() - start))
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)

  def warm_up(self):
    self.measure()
    self.rates.pop()

  def close(self):
    pass


class ClassifyVariant(Variant):
  """cifar10_classify.py on a folder of PNG files, as a user runs it.

  Each step classifies the same files (test records written as PNG):
  reading, decoding, the model, and the graph building and checkpoint
  restoring that every call of the script does once.
  """

  def __init__(self, data_dir, scratch, num_files, batch_size):
    super(ClassifyVariant, self).__init__('classify', 1, num_files,
                                          FORWARD_FLOP_PER_EXAMPLE)
    self.batch_size = batch_size
    path = os.path.join(data_dir, download.BATCHES_DIR,
                        cifar10_input.TEST_FILES[0])
    pixels = synthetic.read_records(path)[1][:num_files]
    os.makedirs(scratch)
    with tf.Graph().as_default():
      image = tf.placeholder(tf.uint8, [32, 32, 3])
      encoded = tf.io.encode_png(image)
      global_step = tf.train.get_or_create_global_step()
      cifar10.inference(tf.zeros([1, 24, 24, 3]))
      tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY,
                                        global_step).apply(
                                            tf.trainable_variables())
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        self.checkpoint = tf.train.Saver().save(
            sess, os.path.join(scratch, 'model.ckpt'), global_step=0)
        self.files = []
        for i, picture in enumerate(pixels):
          self.files.append(os.path.join(scratch, 'record_%05d.png' % i))
          with open(self.files[-1], 'wb') as f:
            f.write(sess.run(encoded, {image: picture}))
    self.examples_per_step = len(self.files)

  def warm_up(self):
    self.step()

  def step(self):
    list(cifar10_classify.classify(
        self.files, self.checkpoint, batch_size=self.batch_size,
        session_config=eval_config()))

  def close(self):
    pass


# --num_intra_threads and --num_inter_threads, for the model's sessions (as
# the scripts take them); set once, in main.
THREADS = {'model': sessions.BY_RULE}


def model_config():
  """The training sessions' tf.ConfigProto, as cifar10_train.py makes it."""
  return sessions.training_config(THREADS['model'])


def eval_config():
  """The evaluation sessions' tf.ConfigProto, as cifar10_eval.py makes it."""
  return sessions.eval_config(THREADS['model'])


def matmul_session_config():
  """TF's default tf.ConfigProto: the process's inter-op pool, one thread a
  core, so that independent products run side by side (not
  sessions.training_config's one op at a time)."""
  return tf.ConfigProto()


class MatmulVariant(SessionVariant):
  """`products` independent n x n products in one session.run.

  Its "examples" are FLOP: its rates are FLOP/s. Each product has its own
  operands (identical products would be merged by Grappler). In bfloat16
  (dtype tf.bfloat16) the operands and the product are bfloat16 and oneDNN
  accumulates in float32, as in the model's bfloat16 layers.
  """

  matmul = True

  def __init__(self, n, products, window_s=MATMUL_WINDOW_S, dtype=None):
    self.n = n
    self.products = products
    self.window_s = window_s
    self.dtype = dtype or tf.float32

    def build():
      sums = []
      for i in range(products):
        a = tf.Variable(tf.cast(tf.random.normal([n, n], seed=2 * i + 1),
                                self.dtype))
        b = tf.Variable(tf.cast(tf.random.normal([n, n], seed=2 * i + 2),
                                self.dtype))
        sums.append(tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
      return sums

    super(MatmulVariant, self).__init__(
        '%s %d x%d' % (row_name('matmul', dtype), n, products), 1,
        products * 2 * n ** 3, build, config=matmul_session_config())

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


# Each variant's own ceiling, measured in the same run.
BASELINES = {'train': 'bound', 'towers': 'bound', 'towers2': 'bound',
             'eval': 'forward', 'classify': 'forward'}
# The mixed-precision rows, each against its float32 row.
BASELINES.update({'%s_%s' % (name, suffix): name
                  for name in ('train', 'bound', 'eval', 'forward')
                  for suffix in ('bf16', 'fp16')})


def row_name(name, compute_dtype):
  """'train' for float32; 'train_bf16' or 'train_fp16' in mixed precision."""
  if compute_dtype is None:
    return name
  return '%s_%s' % (name, {tf.bfloat16: 'bf16', tf.float16: 'fp16'}[
      compute_dtype])


def mixed_precision_rows(requested, on_gpu, cpu_feature, capability):
  """The compute dtype of the mixed-precision rows, and the line about them.

  As the scripts choose (precision.choose), except that a CPU
  without native bfloat16 is measured in bfloat16 anyway.

  Args:
    requested: --mixed_precision, 'off' or 'bf16'.
    on_gpu: bool, the variants run on a GPU.
    cpu_feature, capability: as for precision.choose.

  Returns:
    (dtype, line): (None, None) for --mixed_precision=off.
  """
  dtype, line = precision.choose(requested, on_gpu, cpu_feature,
                                         capability)
  if requested != 'off' and dtype is None:
    return tf.bfloat16, (
        'bf16 rows: this CPU has neither AVX512_BF16 nor AMX, so oneDNN '
        'emulates bfloat16 (the scripts stay float32 here).')
  return dtype, line


def bf16_ceiling_note(cpu_feature, on_gpu):
  """What the bf16 ceiling's line says of where its products ran.

  Args:
    cpu_feature: precision.cpu_bf16_feature()'s answer for this CPU.
    on_gpu: bool, the products ran on a GPU.
  """
  if on_gpu:
    return '; on the GPU'
  if cpu_feature:
    return '; this CPU computes bfloat16 natively (%s)' % cpu_feature.upper()
  return '; emulated: this CPU has neither AVX512_BF16 nor AMX'


def matmul_ceiling(variants, median, dtype=None):
  """The matmul variant of the highest median rate, and that rate in GFLOP/s.

  Args:
    variants: the measured variants (those with `matmul` True count).
    median: {variant name: median rate over the rounds}.
    dtype: the products' type, None for float32 (the ceiling) or
      tf.bfloat16 (the bf16 ceiling).

  Returns:
    (variant, GFLOP/s), or (None, None) when no product of that type ran.
  """
  matmuls = [v for v in variants
             if v.matmul and v.dtype == (dtype or tf.float32)]
  if not matmuls:
    return None, None
  best = max(matmuls, key=lambda v: median[v.name])
  return best, median[best.name] / 1e9


def table_lines(variants, median, bf16_note=''):
  """The printed table: a row per variant, then the ceilings' lines.

  Every GFLOP/s, the model's and each matrix product's, is given as a
  ratio of the ceiling (matmul_ceiling), and nothing else; where bfloat16
  products ran, those and the *_bf16 rows as a ratio of the bf16 ceiling.

  Args:
    bf16_note: what the bf16 ceiling's line says of this CPU's bfloat16
      (native, or emulated).
  """
  best, ceiling = matmul_ceiling(variants, median)
  best16, ceiling16 = matmul_ceiling(variants, median, tf.bfloat16)
  row = '%-18s %12s %38s %10s   %s'
  lines = [(row % ('variant', 'examples/s', 'ratio', 'GFLOP/s', '')).rstrip()]
  for v in variants:
    if v.matmul:
      gflops = median[v.name] / 1e9
      if v.dtype == tf.bfloat16:
        ratio = ('1.00 (bf16 ceiling)' if v is best16
                 else '%.2f of bf16 ceiling' % (gflops / ceiling16))
      else:
        ratio = ('1.00 (ceiling)' if v is best
                 else '%.2f of ceiling' % (gflops / ceiling))
      lines.append(row % (v.name, '-', ratio, '%.1f' % gflops,
                          '(rounds: %.1f-%.1f GFLOP/s)' % (
                              min(v.rates) / 1e9, max(v.rates) / 1e9)))
      continue
    ratio = ''
    if v.name in BASELINES:
      ratio = '%.2f of %s' % (median[v.name] / median[BASELINES[v.name]],
                              BASELINES[v.name])
    model_gflops = ''
    if v.flop_per_example:
      rate = median[v.name] * v.flop_per_example / 1e9
      model_gflops = '%.1f' % rate
      if best16 is not None and v.name.endswith('_bf16'):
        ratio += '; %.2f of bf16 ceiling' % (rate / ceiling16)
      else:
        ratio += '%s%.2f of ceiling' % ('; ' if ratio else '', rate / ceiling)
    lines.append(row % (v.name, '%.1f' % median[v.name], ratio, model_gflops,
                        '(rounds: %.0f-%.0f)' % (min(v.rates), max(v.rates))))
  for top, value, dtype, label in ((best, ceiling, tf.float32, 'ceiling'),
                                   (best16, ceiling16, tf.bfloat16,
                                    'bf16 ceiling')):
    if top is None:
      continue
    count = sum(1 for v in variants if v.matmul and v.dtype == dtype)
    lines.append('%s: %s = %s, %.1f GFLOP/s (the best median of %d '
                 'matmul configuration%s)%s' % (
                     label, top.name, top.describe(), value, count,
                     '' if count == 1 else 's',
                     bf16_note if dtype == tf.bfloat16 else ''))
  return lines


def _sizes(text):
  values = [int(v) for v in text.split(',') if v.strip()]
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError('a comma-separated list of integers >= 1')
  return sorted(set(values))  # each configuration once: names are keys


def _startup_seconds(data_dir, train_dir):
  """Wall time from starting cifar10_train.py to its first step line."""
  start = time.time()
  proc = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'cifar10_train.py'),
       '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
       '--max_steps=1', '--fresh_start'] + [
           '--%s=%d' % (name, value) for name, value in zip(
               ('num_intra_threads', 'num_inter_threads'), THREADS['model'])
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


def main():
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

  scratch = tempfile.mkdtemp(prefix='cifar10_bench_')
  data_dir = args.data_dir or _random_data_dir(os.path.join(scratch, 'data'))
  batch = args.batch_size
  # 10,000 in the real test set; fewer in a small data dir (the test's).
  num_test = cifar10_input.check_data_files([os.path.join(
      data_dir, download.BATCHES_DIR, cifar10_input.TEST_FILES[0])])
  eval_batches = -(-num_test // batch)

  # The configuration the `train` variant's session is given, below.
  THREADS['model'] = sessions.ThreadCounts(args.num_intra_threads,
                                           args.num_inter_threads)
  train_config = model_config()
  print(describe_machine())
  print('train session %s' % describe_threads(train_config))
  print('matmul sessions %s' % describe_threads(matmul_session_config()))
  on_gpu = bool(tf.config.list_physical_devices('GPU'))
  cpu_feature, capability = precision.this_machine(on_gpu)
  mixed, mixed_line = mixed_precision_rows(args.mixed_precision, on_gpu,
                                           cpu_feature, capability)
  if mixed_line:
    print(mixed_line)
  print('data: %s' % (args.data_dir or 'synthetic'), flush=True)
  startup = [_startup_seconds(data_dir, os.path.join(scratch, 'start'))
             for _ in range(args.startup_runs)]

  variants = [
      TrainScriptVariant(args.steps, data_dir, os.path.join(scratch, 'train'),
                         batch, train_config),
      TowersVariant('towers', args.steps, data_dir,
                    os.path.join(scratch, 'towers'), batch, 1),
      TowersVariant('towers2', args.steps, data_dir,
                    os.path.join(scratch, 'towers2'), batch // 2, 2),
      bound_variant(args.steps, batch),
      SessionVariant('input', 50, batch, _build_input(data_dir, batch)),
      EvalVariant(data_dir, batch, num_test),
      # Evaluation's ceiling, in evaluation's session configuration.
      SessionVariant('forward', eval_batches, batch, _build_forward(batch),
                     FORWARD_FLOP_PER_EXAMPLE,
                     eval_config()),
      ClassifyVariant(data_dir, os.path.join(scratch, 'classify'),
                      min(num_test, 1000), batch),
  ]
  if mixed:
    variants += [
        TrainScriptVariant(args.steps, data_dir,
                           os.path.join(scratch, 'train_mixed'), batch,
                           model_config(), mixed),
        bound_variant(args.steps, batch, mixed),
        EvalVariant(data_dir, batch, num_test, mixed),
        SessionVariant(row_name('forward', mixed), eval_batches, batch,
                       _build_forward(batch, mixed),
                       FORWARD_FLOP_PER_EXAMPLE, eval_config()),
    ]
  variants += matmul_variants(args.matmul_sizes, args.matmul_products,
                              args.matmul_max_gflop)
  bf16_note = ''
  if mixed == tf.bfloat16:
    # The bf16 rows' own ceiling: the same products in bfloat16.
    variants += matmul_variants(args.matmul_sizes, args.matmul_products,
                                args.matmul_max_gflop, tf.bfloat16)
    bf16_note = bf16_ceiling_note(cpu_feature, on_gpu)
  assert variants[0].config is train_config
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
    for variant in variants:
      if isinstance(variant, TrainScriptVariant):
        splits[variant.name] = variant.median_traced_step(
            args.traced_steps)
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
    if mixed:
      # Which ops of a mixed-precision step run in which type, at what cost.
      for name in ('train', row_name('train', mixed)):
        if name in splits:
          stats = splits[name][1]
          print()
          for line in step_time.describe_op_costs(
              name, step_time.op_costs(stats)):
            print(line)
          for line in step_time.describe_node_costs(
              name, step_time.node_costs(stats)):
            print(line)
  print()
  print('start to first step: %s s (median %.1f s)' % (
      ', '.join('%.1f' % s for s in startup), float(np.median(startup))))
  print('memory: RSS per round %s MiB; peak %.0f MiB' % (
      ', '.join('%.0f' % r for r in rss),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
  print('model FLOP per example: train %.1f M, forward %.1f M '
        '(conv and matmul layers)' % (TRAIN_FLOP_PER_EXAMPLE / 1e6,
                                       FORWARD_FLOP_PER_EXAMPLE / 1e6))


if __name__ == '__main__':
  main()
