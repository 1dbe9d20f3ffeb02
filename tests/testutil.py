"""Helpers the tests share: bounded sessions, script runs, shared fixtures."""

import contextlib
import fcntl
import glob
import io
import json
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow.compat.v1 as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Any op that blocks longer than this (an empty queue, say) fails the test.
OP_TIMEOUT_MS = 60000


def session_config(num_cpus=1):
  return tf.ConfigProto(operation_timeout_in_ms=OP_TIMEOUT_MS,
                        device_count={'CPU': num_cpus})


def config_threads(config):
  """(intra, inter) of a tf.ConfigProto, as sessions.thread_settings."""
  pools = config.session_inter_op_thread_pool
  inter = pools[0].num_threads if pools else config.inter_op_parallelism_threads
  return config.intra_op_parallelism_threads, inter


def _save(path, step, assigns=(), **saver):
  """Saves the default graph's variables, initialised and `assigns` run, at
  global step `step` (a tuple: at each) to path-step; the last one's path."""
  value = tf.placeholder(tf.int64, [])
  assign = tf.train.get_or_create_global_step().assign(value)
  saver = tf.train.Saver(**saver)
  with tf.Session(config=session_config()) as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(list(assigns))
    for each in step if isinstance(step, tuple) else (step,):
      sess.run(assign, {value: each})
      saved = saver.save(sess, path, global_step=each)
  return saved


def another_models_checkpoint(directory, step=5):
  """The path of a checkpoint at `step` of another model: conv1/weights of
  another shape, its average, the global step; no softmax_linear/biases."""
  with tf.Graph().as_default():
    weights = tf.get_variable('conv1/weights', [3, 3, 3, 8],
                              initializer=tf.zeros_initializer())
    tf.train.ExponentialMovingAverage(0.9).apply([weights])
    return _save(os.path.join(directory, 'model.ckpt'), step)


def resolve(tf_config=None, *flags):
  """clusters.resolve of the cluster flags (job_name, task_index, ps_hosts,
  worker_hosts; default none) and TF_CONFIG (a dict, its text; None unset),
  waits of 120 and 60 s."""
  from cifar10_support import clusters  # pylint: disable=g-import-not-at-top
  with pytest.MonkeyPatch.context() as patch:
    patch.delenv('TF_CONFIG', raising=False)
    if tf_config is not None:
      patch.setenv('TF_CONFIG', tf_config if isinstance(tf_config, str) else
                   json.dumps(tf_config))
    return clusters.resolve(*(flags or (None, 0, '', '')),
                            startup_wait_secs=120, operation_timeout_secs=60)


def script_env(**overrides):
  """A user's shell's environment, plus `overrides` (None: unset); without
  conftest's TF_CPP_MIN_LOG_LEVEL, so a script quiets TensorFlow itself."""
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  env.update(overrides)
  return {name: value for name, value in env.items() if value is not None}


def start_script(script, args=(), output=None, wrapper=(), env=None,
                 **popen):
  """The Popen of a repository script started as a user would (the tests'
  one way): output, stderr too, appended to path `output`, else text in
  proc.stdout; wrapper: a program (and args) run on the script's path and
  args (with_learning_rate); env: over script_env; popen: over Popen's."""
  command = ([sys.executable] + list(wrapper) +
             [os.path.join(ROOT, script)] + list(args))
  popen = dict(dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True), **popen)
  with contextlib.ExitStack() as stack:
    if output is not None:
      popen['stdout'] = stack.enter_context(open(output, 'a'))
    return subprocess.Popen(command, cwd=ROOT, env=script_env(**(env or {})),
                            **popen)


def run_script(script, args, timeout=240, wrapper=(), **env):
  """start_script, stdout and stderr apart, to its end (killed after
  `timeout` seconds); returns the subprocess.CompletedProcess."""
  proc = start_script(script, args, wrapper=wrapper, env=env,
                      stderr=subprocess.PIPE)
  try:
    stdout, stderr = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.communicate()
    raise
  return subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                     stderr)


def with_learning_rate(learning_rate):
  """start_script's wrapper of a trainer at another initial learning rate;
  None: the script's own."""
  if learning_rate is None:
    return []
  return [os.path.join(ROOT, 'tests', 'with_learning_rate.py'),
          str(learning_rate)]


# Precision @ 1 on learnable_data_dir's 512 test records (chance 0.1) that
# only a model that learned reaches; a broken update, sign or label ends near
# chance or diverges. docs/reliability.md ("The learning tests") has every
# measured run of each test that uses it, and untrained checkpoints' 0-0.25.
LEARNED = 0.5

# cifar10_eval.py's precision line.
PRECISION_LINE = re.compile(r'^\S+ \S+: precision @ 1 = (\d\.\d{3})$', re.M)
# str(datetime.now()), as the scripts print it: no microseconds when 0.
DATE = r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{6})?'
# Any step line, well formed or not: what a test that wants none looks for.
ANY_STEP_LINE = re.compile(r': step \d+, loss = ')
# A cluster's worker's last line (its label, the global step, its own steps).
DONE_LINE = re.compile(r'^(Chief|Master|Worker \d): stopped at global step '
                       r'(\d+) after (\d+) steps of its own\.$', re.M)


def step_line(label='', step=r'\d+'):
  """The trainers' step line (progress.StepLogger), the tests' one pattern,
  re.M: '[<label>: ]<date>: step N, loss = X.XX (E examples/sec; S sec/batch)'.
  label: a regex of a cluster task's label ('Worker \\d'); '' none; None, a
  task's label or none. step: a regex of N, or an int. Groups: date, step,
  loss, examples_per_sec, sec_per_batch and, unless label is '', label."""
  if label is None:
    head = r'(?:(?P<label>Chief|Master|Worker \d+): )?'
  else:
    head = r'(?P<label>%s): ' % label if label else ''
  return re.compile(
      r'^%s(?P<date>%s): step (?P<step>%s), loss = (?P<loss>\d+\.\d\d) '
      r'\((?P<examples_per_sec>\d+\.\d) examples/sec; '
      r'(?P<sec_per_batch>\d+\.\d{3}) sec/batch\)$' % (head, DATE, step), re.M)


def match_lines(text, patterns):
  lines = text.splitlines()
  assert len(lines) == len(patterns), text
  for line, pattern in zip(lines, patterns):
    assert re.fullmatch(pattern, line), (line, pattern)


def train_console(batches, train_dir):
  """The console of a healthy run of train_args, a pattern a line: each
  once (neither TF's nor absl's handler doubles one)."""
  train_dir = re.escape(train_dir)
  return [
      r'Data: %s, 5 files, 100 records \(checked\)\.' % re.escape(batches),
      r'No checkpoint in %s: training from step 0\.' % train_dir,
      r'Filling queue with 40 CIFAR images before starting to train\. '
      r'This will take a few minutes\.',
      DATE + r': saved checkpoint %s/model\.ckpt-0; step 0 of 20' % train_dir,
      step_line(step=0).pattern,
      step_line(step=5).pattern,
      step_line(step=10).pattern,
      step_line(step=15).pattern,
      DATE + r': saved checkpoint %s/model\.ckpt-20; step 20 of 20'
      % train_dir,
      r'Done: step 20 reached \(--max_steps\); final checkpoint '
      r'%s/model\.ckpt-20\.' % train_dir,
  ]


def train_args(data_dir, train_dir):
  return ['--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
          '--max_steps=20', '--batch_size=8', '--log_frequency=5']


# A resuming trainer's line of what it starts fresh (another's checkpoint).
FRESH_LINE = re.compile(r'^Starting fresh \(not in model\.ckpt-(\d+), which '
                        r'another trainer or precision wrote\): (.*)\.$', re.M)


def trainer_process(data_dir, train_dir, *flags):
  """cifar10_train.py started, a step line every step; output in proc.stdout."""
  return start_script('cifar10_train.py', [
      '--data_dir=' + data_dir, '--train_dir=' + train_dir, '--batch_size=8',
      '--max_steps=100000', '--log_frequency=1'] + list(flags),
                      env=dict(TF_CPP_MIN_LOG_LEVEL='2'))


def start_trainer(data_dir, train_dir, *flags):
  """trainer_process, its output lines and their reader thread (join it:
  it ends with the output)."""
  proc = trainer_process(data_dir, train_dir, *flags)
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(proc.stdout),
                            daemon=True)
  reader.start()
  return proc, lines, reader


def wait_for_trainer(proc, lines, condition, timeout=180):
  """Polls condition() until true; once proc ended or after timeout, kills
  it and fails the test, showing the last of its `lines`."""
  deadline = time.time() + timeout
  while not condition():
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      pytest.fail('training exited or timed out (code %s):\n%s'
                  % (proc.poll(), ''.join(lines[-30:])))
    time.sleep(0.02)


def logged_steps(lines):
  return [int(m['step']) for m in map(step_line(None).search, list(lines))
          if m]


def assert_resumed(lines, train_dir, step):
  text = ''.join(lines)
  assert ('Resuming from checkpoint %s at step %d'
          % (os.path.join(train_dir, 'model.ckpt-%d' % step), step)) in text
  assert logged_steps(lines)[0] == step


def eval_precision(data_dir, train_dir, eval_dir):
  """The precision @ 1 (3 decimals) `cifar10_eval.py --run_once` prints for
  train_dir's newest checkpoint on learnable_data_dir's 512 test records
  (evaluate, bounded session; summaries in eval_dir)."""
  from cifar10_support import evaluation  # pylint: disable=g-import-not-at-top
  results = evaluate(train_dir, eval_dir, evaluation.EvalSettings(
      data_dir, num_examples=512, run_once=True,
      session_config=session_config()))
  assert len(results) == 1 and results[0]['num_examples'] == 512, results
  return float('%.3f' % results[0]['precision'])


@contextlib.contextmanager
def as_script(script, args=(), flag_values=None):
  """Within the block sys.argv is [script] + args (a main's errors begin
  with its name), parsed into flag_values (absl FLAGS); both restored after,
  and the 'tensorflow' logger a main quiets."""
  from absl.testing import flagsaver  # pylint: disable=g-import-not-at-top
  argv = [script] + list(args)
  saved_argv = sys.argv
  was_parsed = flag_values is not None and flag_values.is_parsed()
  tf_logger = logging.getLogger('tensorflow')
  saved_logger = (tf_logger.propagate, tf_logger.level,
                  list(tf_logger.filters))
  try:
    sys.argv = argv
    if flag_values is None:
      yield
    else:
      with flagsaver.flagsaver():
        flag_values(argv)
        yield
  finally:
    sys.argv = saved_argv
    if flag_values is not None and not was_parsed:
      flag_values.unparse_flags()  # As other tests expect them.
    tf_logger.propagate, level, tf_logger.filters[:] = saved_logger
    tf_logger.setLevel(level)


def exit_line(function, script, args=(), flag_values=None):
  """The line `function()` ends the process with (sys.exit(line): status 1)
  when run as `script` (as_script); fails the test if it returns."""
  with as_script(script, args, flag_values):
    with pytest.raises(SystemExit) as ended:
      function()
  assert isinstance(ended.value.code, str), ended.value.code
  return ended.value.code


def train(train_function, settings, **kwargs):
  """train_function(settings, the data set its main hands it)."""
  return train_function(settings, described(settings), **kwargs)


def described(settings):
  """The data_files.DataSet of a TrainSettings' or EvalSettings' data, as
  the mains hand it down."""
  from cifar10_support import data_files  # pylint: disable=g-import-not-at-top
  return data_files.describe(settings.data_dir, settings.dataset)


def eval_once(checkpoint, settings, **kwargs):
  """cifar10_eval.eval_once of settings' data, as its main hands it down."""
  import cifar10_eval  # pylint: disable=g-import-not-at-top
  return cifar10_eval.eval_once(checkpoint, settings, described(settings),
                                **kwargs)


def evaluate(checkpoint_dir, eval_dir, settings, **kwargs):
  """cifar10_eval.evaluate of settings' data, as its main hands it down."""
  import cifar10_eval  # pylint: disable=g-import-not-at-top
  return cifar10_eval.evaluate(checkpoint_dir, eval_dir, settings,
                               described(settings), **kwargs)


def trainer_line(script, train_function, settings, **kwargs):
  """exit_line of `script`'s main decorator around a train that raises one
  of train_dirs.RUN_ERRORS."""
  # pylint: disable=g-import-not-at-top
  from cifar10_support import signals
  from cifar10_support import train_dirs

  @signals.script_main(train_dirs.RUN_ERRORS)
  def main(unused_argv):
    train(train_function, settings, **kwargs)
  return exit_line(lambda: main([script]), script)


def model_checkpoint(directory, step=1, num_classes=10, dtype=tf.float32,
                     seed=None, trainer_state=False):
  """The path of a checkpoint in directory of an untrained model of
  num_classes (as a trainer's first: averages, global step, relative
  paths). step: a tuple writes one at each, returns the last; seed: the
  graph's; trainer_state: with one device's trainer's loss averages too."""
  import cifar10  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  with tf.Graph().as_default():
    if seed is not None:
      tf.set_random_seed(seed)
    tf.train.get_or_create_global_step()  # First, as a trainer's.
    cifar10.inference(tf.zeros([1, 24, 24, 3], dtype),
                      num_classes=num_classes)
    tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY).apply(
        tf.trainable_variables())
    if trainer_state:
      for name in ('cross_entropy', 'local3/weight_loss', 'local4/weight_loss',
                   'total_loss'):
        tf.get_variable(name + '/avg', [], dtype, tf.zeros_initializer(),
                        trainable=False)
    return _save(os.path.join(directory, 'model.ckpt'), step,
                 save_relative_paths=True)


def colour_checkpoint(directory, step=1):
  """The path of a checkpoint at `step` of an untrained model that tells
  synthetic.py's colours apart: its moving averages (what eval and classify
  restore) make logit c how close each pixel is to colour c (precision
  1.000 on data_dir and learnable_data_dir); its raw weights, which nothing
  that uses the averages may read, say class c + 1 (precision 0.000)."""
  import cifar10  # pylint: disable=g-import-not-at-top
  import synthetic  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  classes = 10
  directions = synthetic.class_colors(classes) - 128  # zero-sum RGB
  directions /= np.linalg.norm(directions, axis=1, keepdims=True)

  def weights(shapes, order):
    """conv1's filter c is colour order[c]'s direction; channel c carried
    through conv2's centre tap, local3's 6x6 mean and local4: 10 x logit c."""
    values = {name: np.zeros(shape, np.float32)
              for name, shape in shapes.items()}
    c = np.arange(classes)
    values['conv1/weights'][:, :, :, :classes] = directions[order].T / 25
    values['conv2/weights'][2, 2, c, c] = 1
    values['local3/weights'].reshape(36, 64, 384)[:, c, c] = 1 / 36
    values['local4/weights'][c, c] = 1
    values['softmax_linear/weights'][c, c] = 10
    return values

  with tf.Graph().as_default():
    cifar10.inference(tf.zeros([1, 24, 24, 3]))
    variables = {v.op.name: v for v in tf.trainable_variables()}
    averages = tf.train.ExponentialMovingAverage(cifar10.MOVING_AVERAGE_DECAY)
    averages.apply(list(variables.values()))
    shapes = {name: v.shape.as_list() for name, v in variables.items()}
    averaged = weights(shapes, np.arange(classes))
    raw = weights(shapes, (np.arange(classes) - 1) % classes)
    return _save(os.path.join(directory, 'model.ckpt'), step, sum((
        [v.assign(raw[name]), averages.average(v).assign(averaged[name])]
        for name, v in variables.items()), []))


def save_checkpoint(path, step, raw_class, shadow_class, dtype=tf.float32,
                    with_averages=True, shadow_logits=None):
  """Saves a model whose raw weights say raw_class for every image and whose
  averages shadow_class (or give every image the 10 shadow_logits)."""
  import cifar10  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default():
    cifar10.inference(tf.zeros([1, 24, 24, 3], dtype))
    variables = {v.op.name: v for v in tf.trainable_variables()}
    assigns = [variables['softmax_linear/weights'].assign(
                   tf.zeros([192, 10], dtype)),
               variables['softmax_linear/biases'].assign(
                   tf.one_hot(raw_class, 10, 10.0, dtype=dtype))]
    if with_averages:
      averages = tf.train.ExponentialMovingAverage(
          cifar10.MOVING_AVERAGE_DECAY)
      averages.apply(list(variables.values()))
      assigns += [averages.average(variables['softmax_linear/weights']).assign(
                      tf.zeros([192, 10], dtype)),
                  averages.average(variables['softmax_linear/biases']).assign(
                      tf.one_hot(shadow_class, 10, 10.0, dtype=dtype)
                      if shadow_logits is None else
                      tf.constant(shadow_logits, dtype))]
    _save(path, step, assigns)


def checkpoint_values(checkpoint):
  """Every tensor of a checkpoint, by name."""
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def check_checkpoints_restore(train_dir, at_least=1):
  """Every checkpoint in train_dir (at least `at_least`) restores."""
  from cifar10_support import checkpoints  # pylint: disable=g-import-not-at-top
  indexes = glob.glob(os.path.join(train_dir, 'model.ckpt-*.index'))
  assert len(indexes) >= at_least, indexes
  for index in indexes:
    assert checkpoints.verified_reader(index[:-len('.index')])[1] is None


def event_values(train_dir):
  """tag -> the first summary value written under it (with its metadata)."""
  values = {}
  for path in sorted(glob.glob(os.path.join(train_dir,
                                            'events.out.tfevents.*'))):
    for event in tf.train.summary_iterator(path):
      for value in event.summary.value:
        values.setdefault(value.tag, value)
  return values


def event_tags(train_dir):
  return set(event_values(train_dir))


def histogram_tags(values):
  """The tags written in TensorBoard's histogram format, 30 buckets each."""
  tags = set()
  for tag, value in values.items():
    if value.metadata.plugin_data.plugin_name == 'histograms':
      assert tf.make_ndarray(value.tensor).shape == (30, 3), tag
      tags.add(tag)
  return tags


# The batch size of run_trainer's and run_chief's runs.
BATCH = 8
# run_trainer's trainers by name: (module, its train function's kwargs).
TRAINERS = {
    'single': ('cifar10_train', {}),
    'towers1': ('cifar10_multi_gpu_train',
                {'num_towers': 1, 'tower_device': 'cpu'}),
    'towers2': ('cifar10_multi_gpu_train',
                {'num_towers': 2, 'tower_device': 'cpu'}),
}


def run_trainer(trainer, data_dir, train_dir, max_steps):
  """Trains with one trainer's train function; returns what it printed."""
  import importlib  # pylint: disable=g-import-not-at-top
  from cifar10_support import run_flags  # pylint: disable=g-import-not-at-top
  module, kwargs = TRAINERS[trainer]
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    train(importlib.import_module(module).train, run_flags.TrainSettings(
        data_dir, train_dir, batch_size=BATCH, log_frequency=2,
        max_steps=max_steps), **kwargs)
  return printed.getvalue()


def run_chief(data_dir, train_dir, max_steps, sync, tmp_path):
  """Runs a cluster of one ps and its chief to max_steps."""
  ps_port, worker_port = free_ports(2)
  cluster = ['--ps_hosts=127.0.0.1:%d' % ps_port,
             '--worker_hosts=127.0.0.1:%d' % worker_port]
  ps = start_script('cifar10_distributed_train.py', ['--job_name=ps'] +
                    cluster, str(tmp_path / ('ps-%d.log' % max_steps)))
  try:
    result = run_script('cifar10_distributed_train.py', [
        '--job_name=worker', '--task_index=0', '--data_dir=%s' % data_dir,
        '--train_dir=%s' % train_dir, '--batch_size=%d' % BATCH,
        '--log_frequency=2', '--max_steps=%d' % max_steps,
        '--operation_timeout_secs=60', '--startup_wait_secs=60'] + cluster +
                        (['--sync_replicas'] if sync else []))
  finally:
    stop([ps])
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  # The chief's lines carry its index; the resume check reads plain ones.
  return result.stdout.replace('Worker 0: ', '')


# The fixtures' short runs on the synthetic colours learn at this rate every
# time (the original's 0.1 on 100 records diverged in 1 of 28 measured runs).
FIXTURE_LEARNING_RATE = 0.05
FIXTURE_SEED = 1


def train_fixture(data_dir, train_dir, max_steps, batch_size, **kwargs):
  """cifar10_train.train (kwargs: TrainSettings fields) as deterministic as
  can be (graph seed, one input thread, FIXTURE_LEARNING_RATE): for
  fixtures that need a model that learned, not for tests of training."""
  import cifar10  # pylint: disable=g-import-not-at-top
  import cifar10_train  # pylint: disable=g-import-not-at-top
  from cifar10_support import run_flags  # pylint: disable=g-import-not-at-top

  real_inputs = cifar10.distorted_inputs

  def seeded_inputs(*args, **inputs_kwargs):
    tf.set_random_seed(FIXTURE_SEED)  # Before the graph's first random op.
    return real_inputs(*args, **inputs_kwargs)

  kwargs.setdefault('log_frequency', 100)
  original = cifar10.INITIAL_LEARNING_RATE
  cifar10.INITIAL_LEARNING_RATE = FIXTURE_LEARNING_RATE
  cifar10.distorted_inputs = seeded_inputs
  try:
    return train(cifar10_train.train, run_flags.TrainSettings(
        data_dir, train_dir, max_steps=max_steps, batch_size=batch_size,
        input_threads=1, **kwargs))
  finally:
    cifar10.INITIAL_LEARNING_RATE = original
    cifar10.distorted_inputs = real_inputs


def shared_dir(tmp_path_factory, name, build):
  """The path of directory `name`, filled by build(path) once a run, under
  a lock, by the first pytest-xdist worker that asks (a session fixture
  is built once per worker); the others wait for it."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent  # The run's directory, above every worker's.
  path = os.path.join(str(root), name)
  with open(path + '.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(path + '.done'):
      shutil.rmtree(path, ignore_errors=True)  # A build that failed.
      os.makedirs(path)
      build(path)
      open(path + '.done', 'w').close()
  return path


# The steps of learned_train_dir's training run.
LEARNED_TRAIN_STEPS = 250


def learned_train_dir(data_dir, tmp_path_factory):
  """The one trained run the tests share (shared_dir), only read: checkpoints
  0 and LEARNED_TRAIN_STEPS on data_dir; it learns every time (6 of 6)."""
  return shared_dir(
      tmp_path_factory, 'eval_train',
      lambda path: train_fixture(data_dir, path, LEARNED_TRAIN_STEPS,
                                 batch_size=24))


# Below Linux's ephemeral range (32768-60999 by default), from which the
# kernel picks the source port of every outgoing connection: a cluster's own
# gRPC channels could otherwise take a port before its task binds it.
TASK_PORTS = range(20000, 32768)

# What the script prints when its server cannot bind its port.
PORT_TAKEN = 'Could not start the server of'
# What every task prints once its server listens.
LISTENING = re.compile(r'^This task listens on port (\d+) of every network '
                       r'interface;', re.M)
# The original's 0.1 diverged in some asynchronous runs of a few hundred steps
# on the synthetic records; this one trains them without.
LEARNING_RATE = 0.02


def own_ports():
  """This pytest-xdist worker's share of TASK_PORTS, none another's (TF's
  servers refuse SO_REUSEPORT: a picked port cannot be held for them); two
  runs at once, retry_port_taken covers."""
  worker = os.environ.get('PYTEST_XDIST_WORKER', 'gw0')
  count = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
  return TASK_PORTS[int(worker[len('gw'):])::count]


@contextlib.contextmanager
def refused_ports(count):
  """`count` ports of own_ports() on 127.0.0.1, bound, not listening, in the
  block: a connection is refused, no other process can listen there."""
  share, sockets = own_ports(), []
  try:
    for port in random.sample(share, min(200, len(share))):
      s = socket.socket()
      try:
        s.bind(('127.0.0.1', port))
      except OSError:
        s.close()
        continue
      sockets.append(s)
      if len(sockets) == count:
        break
    else:
      raise RuntimeError('no %d free ports in %s' % (count, share))
    yield [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def free_ports(count):
  """`count` ports of own_ports() that nothing listens on now."""
  with refused_ports(count) as ports:
    return ports


class PortTaken(Exception):
  """Another process took a task's port between free_ports and its bind."""


def retry_port_taken(run, attempts=3):
  """run(), again while it raises PortTaken; the last attempt's fails."""
  for attempt in range(attempts):
    try:
      return run()
    except PortTaken:
      if attempt == attempts - 1:
        raise


def port_bindable(port):
  """Whether a server could listen on `port` now, bound as TF's gRPC servers
  bind: every interface, SO_REUSEADDR (TIME_WAIT does not hold it)."""
  try:
    s, address = socket.socket(socket.AF_INET6), '::'  # IPv4 too.
  except OSError:  # No IPv6 here.
    s, address = socket.socket(), '0.0.0.0'
  with s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind((address, port))
    except OSError:
      return False
  return True


def stop(processes):
  """SIGTERM to the processes still running; SIGKILL 30 s later."""
  for p in processes:
    if p.poll() is None:
      p.terminate()
  for p in processes:
    try:
      p.wait(timeout=30)
    except subprocess.TimeoutExpired:
      p.kill()
      p.wait()


# How long a watched process may print nothing before it is a hang that fails
# with its output (within pytest.ini's timeout): a healthy task's longest
# silence, importing TensorFlow, took 4 to 25 s at loads of 10 to 20.
QUIET_SECS = 180


def wait_for(what, condition, logs, failed=lambda: None, secs=None,
             quiet_secs=QUIET_SECS, poll_secs=0.2):
  """Polls condition() until it returns something true; returns that. Fails
  the test, showing the end of each of `logs` (paths), once none has grown
  for quiet_secs, once failed() returns something true, or after `secs` if
  given (no wall-clock budget otherwise: load could use it up)."""
  def written():
    return sum(os.path.getsize(path) for path in logs if os.path.exists(path))

  size, since = written(), time.monotonic()
  deadline = since + secs if secs else None
  while True:
    found = condition()
    if found:
      return found
    failure = failed()
    now = written()
    if now != size:
      size, since = now, time.monotonic()
    if deadline and time.monotonic() > deadline:
      failure = failure or 'not within %d s' % secs
    if failure or time.monotonic() - since > quiet_secs:
      found = condition()  # Come true as a process ended, say.
      if found:
        return found
      pytest.fail('waiting for %s: %s\n%s' % (
          what, failure or 'nothing printed for %d s' % quiet_secs,
          '\n'.join('--- %s\n%s' % (path, _tail(path)) for path in logs)))
    time.sleep(poll_secs)


def _tail(path, chars=2500):
  if not os.path.exists(path):
    return ''
  with open(path) as f:
    return f.read()[-chars:]


class Tasks(object):
  """A test cluster's processes on 127.0.0.1, a task's output appended to
  self.logs[task]; 'ps...' tasks serve until stopped. A subclass gives
  start(task) (into self.processes), port(task) and afresh() (new ports,
  what the tasks wrote deleted)."""

  def __init__(self, logs):
    self.logs = logs
    self.processes = {}

  def start_listening(self, tasks):
    """Starts `tasks`, waits until every server (not an evaluator) listens;
    where a port was taken, stops all, deletes the logs, afresh(), raises
    PortTaken."""
    for task in tasks:
      self.start(task)
    servers = [task for task in tasks if not task.startswith('evaluator')]

    def ended_before_listening():
      return [task for task in servers
              if self.processes[task].poll() is not None and
              not LISTENING.search(self.log(task))]

    ended = self.wait_for('%s to listen' % ', '.join(servers), lambda: (
        ended_before_listening() or all(
            LISTENING.search(self.log(task)) for task in servers)))
    if ended is True:
      return
    self.stop()
    if not any(PORT_TAKEN in self.log(task) for task in ended):
      pytest.fail('%s ended before listening:\n%s' % (ended, self.tails()))
    for path in self.logs.values():
      if os.path.exists(path):
        os.remove(path)
    self.processes = {}
    self.afresh()
    raise PortTaken()

  def start_all(self, order):
    """start_listening(order), again afresh while a port was taken."""
    retry_port_taken(lambda: self.start_listening(order))

  def log(self, task, offset=0):
    """The task's output, from `offset` on."""
    with open(self.logs[task]) as f:
      return f.read()[offset:]

  def tails(self):
    return '\n'.join('--- %s\n%s' % (task, _tail(path))
                     for task, path in self.logs.items())

  def _failed(self, restarting):
    return ', '.join('%s ended with exit status %d' % (task, p.returncode)
                     for task, p in sorted(self.processes.items())
                     if not task.startswith('ps') and task != restarting and
                     p.poll() not in (None, 0))

  def wait_for(self, what, condition, restarting=None, secs=None):
    """wait_for on every log, failing once a task but a ps (or `restarting`)
    ended with an error."""
    return wait_for(what, condition, list(self.logs.values()),
                    lambda: self._failed(restarting), secs=secs)

  def finish(self, tasks=None):
    """{task: exit status} of `tasks` (default: all but ps), once ended."""
    tasks = tasks or [task for task in self.processes
                      if not task.startswith('ps')]
    wait_for('%s to end' % ', '.join(tasks), lambda: all(
        self.processes[task].poll() is not None for task in tasks),
             list(self.logs.values()))
    return {task: self.processes[task].returncode for task in tasks}

  def kill(self, task):
    """SIGKILL, as a crash or a lost machine; returns once it has ended."""
    self.processes[task].kill()
    self.processes[task].wait(timeout=60)

  def restart(self, task):
    """Starts `task` again on its own port once that can be bound, until it
    listens; again while another process bound it first."""
    port = self.port(task)

    def start():
      self.wait_for('port %d to be free' % port,
                    lambda: port_bindable(port), restarting=task, secs=60)
      offset = len(self.log(task))
      self.start(task)
      process = self.processes[task]
      self.wait_for('%s to listen on port %d' % (task, port), lambda: (
          LISTENING.search(self.log(task, offset)) or
          process.poll() is not None), restarting=task)
      output = self.log(task, offset)
      if not LISTENING.search(output):
        if PORT_TAKEN in output:
          raise PortTaken()
        pytest.fail('%s ended before it listened:\n%s' % (task, self.tails()))

    retry_port_taken(start)

  def stop(self):
    for process in self.processes.values():
      if process.poll() is None:
        process.kill()
      process.wait()
