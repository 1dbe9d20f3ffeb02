"""cifar10_distributed_train.py where a cluster manager starts it: TF_CONFIG
with a chief job ("chief", or "master"), and an evaluator task, listed in
the cluster (Kubeflow) or not (Vertex AI). Every task runs the same command
and learns its role from TF_CONFIG, set exactly as each platform sets it
(the tests' oracle); real processes on 127.0.0.1.
"""

import glob
import json
import os
import re
import shutil
import signal
import threading
import time
import types

import pytest
import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import clusters
import synthetic
import testutil
from testutil import LEARNED_TRAIN_STEPS as TRAIN_STEPS
from testutil import LEARNING_RATE
from testutil import resolve

EVALUATOR_LINE = re.compile(
    r'^Done: (\S+) \(global step (\d+), --until_step=(\d+)\): '
    r'precision @ 1 = (\d\.\d{3})\.$')


class _ManagedCluster(testutil.Tasks):
  """A process per task, each the same command (`flags`), its TF_CONFIG of
  `jobs`, {job: tasks} (the cluster); evaluator: an evaluator outside it
  too; extra: TF_CONFIG's keys beside cluster and task; task_extra: the
  task's beside type and index."""

  def __init__(self, tmp_path, jobs, flags, evaluator=False, extra=None,
               task_extra=None):
    self.jobs, self.flags = jobs, flags
    self.extra, self.task_extra = extra or {}, task_extra or {}
    self.tasks = ['%s%d' % (job, i) for job, n in jobs.items()
                  for i in range(n)] + (['evaluator0'] if evaluator else [])
    super().__init__({task: str(tmp_path / (task + '.log'))
                      for task in self.tasks})
    self.afresh()

  def afresh(self):
    """New addresses; nothing left of an attempt on the old ones."""
    ports = iter(testutil.free_ports(sum(self.jobs.values())))
    self.cluster = {job: ['127.0.0.1:%d' % next(ports) for _ in range(n)]
                    for job, n in self.jobs.items()}
    for flag in self.flags:
      if flag.startswith(('--train_dir=', '--eval_dir=')):
        shutil.rmtree(flag.split('=', 1)[1], ignore_errors=True)

  @staticmethod
  def _job_and_index(task):
    job = task.rstrip('0123456789')
    return job, int(task[len(job):])

  def tf_config(self, task):
    job, index = self._job_and_index(task)
    return json.dumps(dict(self.extra, cluster=self.cluster, task=dict(
        self.task_extra, type=job, index=index)))

  def port(self, task):
    job, index = self._job_and_index(task)
    return int(self.cluster[job][index].rsplit(':', 1)[1])

  def start(self, task):
    self.processes[task] = testutil.start_script(
        'cifar10_distributed_train.py', self.flags, self.logs[task],
        testutil.with_learning_rate(LEARNING_RATE),
        dict(TF_CONFIG=self.tf_config(task)))


TFJOB_MANIFEST = os.path.join(testutil.ROOT, 'docs', 'managed',
                              'kubeflow_tfjob.json')
VERTEX_POOLS = os.path.join(testutil.ROOT, 'docs', 'managed',
                            'vertex_ai_worker_pools.json')


def _tfjob_items():
  return {item['kind']: item for item in json.load(open(TFJOB_MANIFEST))[
      'items']}


def _tfjob_jobs():
  """The shipped TFJob's jobs as the Training Operator (v1.x) lists them in
  every replica's TF_CONFIG (genClusterSpec): each type lower-cased."""
  replicas = _tfjob_items()['TFJob']['spec']['tfReplicaSpecs']
  return {kind.lower(): spec['replicas'] for kind, spec in replicas.items()}


# Each platform's cluster, as _ManagedCluster's arguments (the keys each
# platform's TF_CONFIG carries beside cluster and task).
PLATFORMS = {
    'kubeflow': lambda: dict(jobs=_tfjob_jobs(),
                             extra={'environment': 'cloud'}),
    'vertex_ai': lambda: dict(
        jobs={'chief': 1, 'worker': 1, 'ps': 1}, evaluator=True,
        extra={'environment': 'cloud', 'job': {'worker_pool_specs': []}},
        task_extra={'trial': ''}),
    'master': lambda: dict(jobs={'master': 1, 'ps': 1, 'worker': 1},
                           extra={'environment': 'cloud'}),
    'chief_alone': lambda: dict(jobs={'chief': 1, 'ps': 1}, evaluator=True),
}


def _platform_cluster(platform, data_dir, tmp_path, max_steps, *extra):
  """The platform's _ManagedCluster of a run to max_steps; its train_dir."""
  train_dir = str(tmp_path / 'train')
  return _ManagedCluster(tmp_path, flags=[
      '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
      '--max_steps=%d' % max_steps, '--batch_size=8', '--log_frequency=4',
      '--save_checkpoint_steps=10', '--startup_wait_secs=120',
      '--operation_timeout_secs=120', '--eval_dir=%s' % (tmp_path / 'eval'),
      '--eval_interval_secs=1', '--num_examples=20'] + list(extra),
                         **PLATFORMS[platform]()), train_dir


def _run(cluster, order, meanwhile=lambda: None):
  """Starts the tasks in `order`, calls meanwhile(), waits for all but the
  ps; their logs."""
  try:
    cluster.start_all(order)
    meanwhile()
    codes = cluster.finish()
  finally:
    cluster.stop()
  assert set(codes.values()) == {0}, (codes, cluster.tails())
  outputs = {task: cluster.log(task) for task in cluster.tasks}
  for task, output in outputs.items():
    assert 'Traceback' not in output, '%s:\n%s' % (task, output[-3000:])
    assert 'Exception in thread' not in output, output[-3000:]
    # Every task that serves says where it listens, at each start; the
    # evaluator joins no cluster and serves nothing.
    said = set(testutil.LISTENING.findall(output))
    assert said == (set() if task.startswith('evaluator') else
                    {str(cluster.port(task))}), (task, output[-3000:])
  return outputs


def _check_trained(outputs, train_dir, chief, max_steps):
  """The chief reached max_steps under its own name; every checkpoint of
  train_dir restores; returns the final global step."""
  done = dict((label, int(step)) for output in outputs.values()
              for label, step, _ in testutil.DONE_LINE.findall(output))
  assert done[chief] >= max_steps, done
  # Some task logged its steps (which one ran them is the machine's call).
  assert any(testutil.step_line(r'Chief|Master|Worker \d').search(output)
             for output in outputs.values())
  testutil.check_checkpoints_restore(train_dir, at_least=2)
  return done[chief]


# --- TF_CONFIG of each platform, read ----------------------------------------


_CHIEF_CLUSTER = {'chief': ['c:1'], 'ps': ['p:1'], 'worker': ['w:1', 'w:2']}
_CLUSTER = {'ps': ['p:1'], 'worker': ['w:1', 'w:2']}


def test_a_chief_job_is_the_chief_and_its_workers_count_apart():
  cluster = _CHIEF_CLUSTER
  task = resolve({'cluster': cluster, 'environment': 'cloud',
                  'task': {'type': 'worker', 'index': 1}})
  assert task == (cluster, 'worker', 1, 120, 60)
  assert not clusters.Task(cluster, 'worker', 0).is_chief
  assert clusters.Task(cluster, 'chief', 0).is_chief
  assert list(task.training_tasks) == [
      '/job:chief/task:0', '/job:worker/task:0', '/job:worker/task:1']
  for job, index, label in [('chief', 0, 'Chief'), ('master', 0, 'Master'),
                            ('worker', 1, 'Worker 1')]:
    assert clusters.Task(cluster, job, index).label == label
  assert clusters.describe({'/job:chief/task:0': 'c:1'}, 'chief') == (
      'the chief (chief at c:1)')
  assert clusters.describe({'/job:worker/task:0': 'w:1'}, 'chief') == (
      'worker task 0 at w:1')
  # Without a chief job, worker 0 is the chief, as before.
  plain = clusters.Task({'ps': ['p:1'], 'worker': ['w:1']}, 'worker', 0)
  assert plain.is_chief and plain.chief_job == 'worker'
  assert clusters.describe({'/job:worker/task:0': 'w:1'}) == (
      'the chief (worker 0 at w:1)')


@pytest.mark.parametrize('platform', sorted(PLATFORMS))
def test_every_platforms_tf_config_is_read_as_the_platform_wrote_it(
    platform, tmp_path):
  # The oracle: each platform's TF_CONFIG, as written. Kubeflow lists the
  # evaluator among every replica's jobs, but no server may wait for it, so
  # none is told of it; Vertex AI leaves it out; a chief may be alone.
  setup = PLATFORMS[platform]()
  cluster = _ManagedCluster(tmp_path, flags=[], **setup)
  for task in cluster.tasks:
    written = json.loads(cluster.tf_config(task))
    training = {job: addresses for job, addresses in
                written['cluster'].items() if job != 'evaluator'}
    assert ('evaluator' in written['cluster']) == ('evaluator' in
                                                   setup['jobs'])
    assert resolve(written)[:3] == (training, written['task']['type'],
                                    written['task']['index']), written


def test_tf_config_is_read_as_tensorflow_reads_it():
  # As TensorFlow's TFConfigClusterResolver reads them: the cluster, the
  # task type and its index (an int, or a string of one); "environment",
  # "rpc_layer" (the tasks speak gRPC) and any other key change nothing.
  assert resolve({'cluster': _CLUSTER, 'rpc_layer': 'grpc',
                  'environment': 'google', 'task': {'type': 'worker',
                                                    'index': '1'}})[:3] == (
                                                        _CLUSTER, 'worker', 1)
  # A map of every task's index is the same cluster as its list.
  assert resolve({'cluster': {'ps': {'0': 'p:1'}, 'worker': {
      '1': 'w:2', '0': 'w:1'}}, 'task': {'type': 'ps'}})[:3] == (
          _CLUSTER, 'ps', 0)


# Bad TF_CONFIGs and the one line each ends a task with, whole.
BAD_TF_CONFIG_LINES = [
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'boss': ['b:1']},
      'task': {'type': 'chief', 'index': 0}},
     'TF_CONFIG cluster has job(s) boss; this script knows "ps", "worker", '
     '"chief" or "master" (the chief), and "evaluator"'),
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'worker': ['w:1']},
      'task': {'type': 'worker', 'index': 1}},
     'TF_CONFIG task index=1 is out of range for job "worker", which has 1 '
     'task(s): use 0..0'),
    ({'cluster': {'chief': ['c:1'], 'master': ['m:1'], 'ps': ['p:1']},
      'task': {'type': 'ps', 'index': 0}},
     'TF_CONFIG cluster has both a "chief" and a "master" job: a cluster has '
     'one chief, under either name'),
]


@pytest.mark.parametrize('tf_config,message', [
    ({'cluster': {'chief': ['c:1', 'c:2'], 'ps': ['p:1']},
      'task': {'type': 'chief', 'index': 0}},
     r'cluster "chief" lists 2 tasks; a cluster has one chief'),
    ({'cluster': {'chief': ['c:1'], 'worker': ['w:1']},
      'task': {'type': 'chief', 'index': 0}},
     r'needs a "ps" list of host:port beside its "chief" job'),
    # TensorFlow allows one evaluator; a second would write the same
    # summaries to the same --eval_dir. Every task refuses such a cluster.
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1'],
                  'evaluator': ['e:1', 'e:2']},
      'task': {'type': 'chief', 'index': 0}},
     r'cluster lists 2 "evaluator" tasks; one evaluator follows a run'),
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1']},
      'task': {'type': 'evaluator', 'index': 1}},
     r'task \{"type": "evaluator", "index": 1\}: one evaluator follows a '
     r'run, as TensorFlow allows at most one'),
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'evaluator': None},
      'task': {'type': 'evaluator', 'index': 0}},
     r'^TF_CONFIG is not a cluster TensorFlow can read \(The tasks for job '
     r'\'evaluator\' must be a list or a dictionary from integers to '
     r'strings\.\): \'\{"cluster": '),
    # Kubeflow's enableDynamicWorker: each worker sees itself alone.
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1'], 'worker': {'1': 'w:2'}},
      'task': {'type': 'worker', 'index': 1}},
     r'^TF_CONFIG cluster "worker" maps some task indexes only: this script '
     r'needs a list of every task\'s host:port$'),
    ({'cluster': {'chief': ['c:1'], 'ps': ['p:1']},
      'task': {'type': 'worker', 'index': 0}},
     r'task \{"type": "worker", "index": 0\} is not a task of the cluster, '
     r'whose jobs are "chief", "ps"'),
    ({'cluster': {'master': ['m:1'], 'ps': ['p:1'], 'worker': ['w:1']},
      'task': {'type': 'master', 'index': 1}},
     r'TF_CONFIG task index=1 is out of range for job "master"'),
] + [(tf_config, '^%s$' % re.escape(line))  # Whole.
     for tf_config, line in BAD_TF_CONFIG_LINES] + [
    # As text.
    ('{"cluster": ', r'TF_CONFIG is not valid JSON'),
    ('{"task": {"type": "ps"}}', r'TF_CONFIG needs a "cluster" and a "task"'),
    ('[1]', r'TF_CONFIG needs a "cluster" and a "task"'),
    ('5', r"^TF_CONFIG is not a cluster TensorFlow can read \(.+\): '5'$"),
    ('{"cluster": {"ps": ["h0:1"], "worker": [1]}, "task": {"type": "ps"}}',
     r'TensorFlow can read \(Task address 1 must be bytes or unicode\)'),
    ('{"cluster": {"ps": ["h0:1"], "worker": ["h1:1"]}, '
     '"task": {"type": "ps", "index": "first"}}',
     r"TensorFlow can read \(invalid literal for int\(\) with base 10: "
     r"'first'\)"),
    ('{"cluster": {"worker": ["h1:1"]}, "task": {"type": "worker"}}',
     r'needs a "ps" list'),
    ('{"cluster": {"ps": ["h0"], "worker": ["h1:1"]}, "task": {"type": "ps"}}',
     r'TF_CONFIG cluster "ps" entry \'h0\' is not host:port'),
])
def test_bad_tf_config_is_named(tf_config, message):
  with pytest.raises(ValueError, match=message):
    resolve(tf_config)


@pytest.mark.slow  # A process.
def test_a_task_given_bad_tf_config_prints_one_line_and_exits_1():
  # A bad TF_CONFIG ends the task with its line alone, no usage text; each
  # line is test_bad_tf_config_is_named's.
  tf_config, line = BAD_TF_CONFIG_LINES[0]
  result = testutil.run_script('cifar10_distributed_train.py', [],
                               TF_CONFIG=json.dumps(tf_config))
  assert (result.returncode, result.stdout, result.stderr) == (1, '',
                                                               line + '\n')


# --- Each platform's cluster, for real ----------------------------------------


def _check_evaluated(outputs, train_dir, tmp_path, max_steps):
  """The evaluator joined no cluster, evaluated the chief's checkpoints as
  cifar10_eval.py does and ended with the first it saw at or past
  --max_steps: that one's precision."""
  evaluated = outputs['evaluator0']
  assert 'This task' not in evaluated
  last = EVALUATOR_LINE.fullmatch(evaluated.strip().splitlines()[-1])
  assert last, evaluated[-2000:]
  assert int(last.group(2)) >= max_steps
  assert last.group(1) in checkpoints.listed(train_dir)
  assert last.group(4) == testutil.PRECISION_LINE.findall(evaluated)[-1]
  assert glob.glob(str(tmp_path / 'eval' / 'events.out.tfevents.*'))


@pytest.mark.slow  # Clusters of processes.
def test_kubeflow_tfjob_trains_its_restarted_chief_resumes_its_evaluator_follows(
    data_dir, tmp_path):
  # The shipped TFJob, asynchronous, TF_CONFIG as the operator sets it (the
  # evaluator in the cluster). The chief, killed and started again with the
  # same command as a restarted pod, resumes from its newest checkpoint.
  max_steps = 200
  cluster, train_dir = _platform_cluster('kubeflow', data_dir, tmp_path,
                                         max_steps)
  assert 'evaluator' in json.loads(cluster.tf_config('chief0'))['cluster']

  def restart_the_chief():
    cluster.wait_for('a checkpoint at step 20', lambda: len(
        checkpoints.listed(train_dir)) >= 3)
    before = checkpoints.step_of(checkpoints.newest(train_dir))
    cluster.kill('chief0')
    offset = len(cluster.log('chief0'))
    cluster.restart('chief0')
    resumed = cluster.wait_for('the chief to resume', lambda: re.search(
        r'^Resuming from checkpoint \S+model\.ckpt-(\d+) at step',
        cluster.log('chief0', offset), re.M))
    assert int(resumed.group(1)) >= before

  outputs = _run(cluster, ['ps0', 'evaluator0', 'worker0', 'worker1',
                           'chief0'], meanwhile=restart_the_chief)
  _check_trained(outputs, train_dir, 'Chief', max_steps)
  assert 'Chief host is: %s' % cluster.cluster['chief'][0] in outputs['chief0']
  assert 'waiting up to 120 s for the chief (chief at %s)' % (
      cluster.cluster['chief'][0]) in outputs['worker1']
  _check_evaluated(outputs, train_dir, tmp_path, max_steps)


@pytest.mark.slow  # Clusters of processes.
def test_vertex_ai_chief_ps_workers_train_synchronously(data_dir, tmp_path):
  # Worker pools 0 to 3: the chief, the workers, the ps, an evaluator out
  # of the cluster. (That synchronous training learns: test_distributed_
  # train.py's test_sync_cluster_trains_to_the_global_step_and_learns.)
  max_steps = 24
  cluster, train_dir = _platform_cluster('vertex_ai', data_dir, tmp_path,
                                         max_steps, '--sync_replicas')
  outputs = _run(cluster, ['ps0', 'evaluator0', 'worker0', 'chief0'])
  for task in ('chief0', 'worker0'):
    assert ('SyncReplicas enabled: replicas_to_aggregate=2; '
            'total_num_replicas=2') in outputs[task]
  final = _check_trained(outputs, train_dir, 'Chief', max_steps)
  # Synchronous training stops on the global step, which counts updates.
  assert max_steps <= final <= max_steps + 1
  _check_evaluated(outputs, train_dir, tmp_path, max_steps)


@pytest.mark.slow  # Clusters of processes.
def test_a_master_cluster_trains_and_every_task_reads_the_data_set_flag(
    tmp_path):
  # Older platforms (AI Platform's runtime 1.x) name the chief "master".
  # --dataset through TF_CONFIG as in cifar10_train.py: every task reads it.
  data_dir = synthetic.make_cifar100_dir(str(tmp_path / 'data'), records=64,
                                         test_records=16)
  max_steps = 24
  cluster, train_dir = _platform_cluster('master', data_dir, tmp_path,
                                         max_steps, '--dataset=cifar100')
  outputs = _run(cluster, ['ps0', 'worker0', 'master0'])
  _check_trained(outputs, train_dir, 'Master', max_steps)
  assert 'This task: /job:master/task:0' in outputs['master0']
  for task in ('master0', 'worker0'):
    assert ('Classes: 100 classes (fine_0, fine_1, ' in outputs[task]), (
        outputs[task][-3000:])
  checkpoint = tf.train.latest_checkpoint(train_dir)
  assert tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()[
      'softmax_linear/biases'] == [100]
  assert checkpoints.checkpoint_classes(checkpoint) == (
      100, tuple('fine_%d' % i for i in range(100)))


@pytest.fixture
def evaluator_flags(data_dir, learned_train_dir, tmp_path):
  """An evaluator's flags, but --max_steps, on the shared finished run."""
  return ['--data_dir=%s' % data_dir, '--train_dir=%s' % learned_train_dir,
          '--eval_dir=%s' % (tmp_path / 'eval'), '--num_examples=20',
          '--batch_size=8']


@pytest.mark.slow  # A process.
def test_an_evaluator_from_the_flags_evaluates_up_to_max_steps(
    evaluator_flags, learned_train_dir):
  # --job_name=evaluator: no cluster, only a --train_dir (a finished run).
  result = testutil.run_script('cifar10_distributed_train.py', [
      '--job_name=evaluator', '--max_steps=%d' % TRAIN_STEPS] +
                               evaluator_flags)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == ''
  last = EVALUATOR_LINE.fullmatch(result.stdout.strip().splitlines()[-1])
  assert last, result.stdout[-2000:]
  assert last.group(1) == checkpoints.newest(learned_train_dir)
  assert int(last.group(2)) == TRAIN_STEPS


def _evaluator_tf_config(chief, ps):
  return json.dumps({'cluster': {'chief': [chief], 'ps': [ps]},
                     'task': {'type': 'evaluator', 'index': 0}})


@pytest.mark.slow  # Processes and a signal.
def test_an_evaluator_stopped_by_sigterm_stops_its_cifar10_eval(
    evaluator_flags, tmp_path):
  # From TF_CONFIG the task runs cifar10_eval.py as a child: SIGTERM to the
  # task (a pod stopped) reaches it; the task ends with its status, leaving
  # none.
  log = str(tmp_path / 'evaluator.log')
  with testutil.refused_ports(2) as ports:
    task = testutil.start_script('cifar10_distributed_train.py', [
        '--max_steps=%d' % (TRAIN_STEPS + 100), '--startup_wait_secs=600'] +
                                 evaluator_flags + ['--train_dir=%s' % (
                                     tmp_path / 'empty')], log, env=dict(
                                     TF_CONFIG=_evaluator_tf_config(*[
                                         '127.0.0.1:%d' % p for p in ports])))
    try:
      testutil.wait_for('the evaluator to wait', lambda: 'No checkpoint file '
                        'found' in (tmp_path / 'evaluator.log').read_text(),
                        [log], lambda: task.poll() is not None and 'it ended')
      with open('/proc/%d/task/%d/children' % (task.pid, task.pid)) as f:
        [evaluator] = map(int, f.read().split())
      task.send_signal(signal.SIGTERM)
      assert task.wait(timeout=60) == 128 + signal.SIGTERM
      assert not os.path.exists('/proc/%d' % evaluator)
    finally:
      testutil.stop([task])


@pytest.mark.slow  # A process.
def test_an_evaluator_stops_when_the_chief_stays_away(evaluator_flags):
  # The chief stopped before --max_steps (nobody listens at its address):
  # the evaluator evaluates what there is, then stops with one line.
  with testutil.refused_ports(2) as ports:
    chief, ps = ['127.0.0.1:%d' % port for port in ports]
    result = testutil.run_script('cifar10_distributed_train.py', [
        '--max_steps=%d' % (TRAIN_STEPS + 100), '--startup_wait_secs=2',
        '--eval_interval_secs=1'] + evaluator_flags,
                                 TF_CONFIG=_evaluator_tf_config(chief, ps))
  assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'Traceback' not in result.stderr
  # It evaluated what there was.
  assert testutil.PRECISION_LINE.search(result.stdout)
  assert result.stderr.strip().splitlines()[-1] == (
      'Evaluator: the chief (chief at %s) has not answered for 2 s '
      '(--startup_wait_secs) and no checkpoint at --max_steps has come: '
      'stopping. Start the chief again, then this evaluator.' % chief)


# A stand-in cifar10_eval.py, without TensorFlow: prints and sleeps as told.
_STAND_IN_EVAL = """
import sys, time
for what, arg in %r:
  if what == 'print':
    sys.stdout.write(arg)
    sys.stdout.flush()
  else:
    time.sleep(arg)
"""


@pytest.mark.slow  # A process (the stand-in).
@pytest.mark.parametrize('last,steps,stops', [
    # Its lines in one write: the task still sees it wait, and stops it.
    (None, [('print', 'Evaluating\nWaiting for a new checkpoint\n'),
            ('sleep', 60)], True),
    # The checkpoint at --max_steps was there as it began to wait (it was
    # skipped: unreadable): stopped.
    ('before', [('print', 'Skipping: x\nWaiting for a new checkpoint\n'),
                ('sleep', 60)], True),
    # It came after: the stand-in's next look ends it (exit 0), not the task.
    ('after', [('sleep', 0.5), ('print', 'No checkpoint file found\n'),
               ('sleep', 8)], False)],
                         ids=['one_write', 'skipped_last', 'last_after'])
def test_the_evaluator_stops_its_eval_only_when_that_waits_for_nothing(
    tmp_path, monkeypatch, last, steps, stops):
  train_dir, script = tmp_path / 'train', tmp_path / 'stand_in_eval.py'
  train_dir.mkdir()
  script.write_text(_STAND_IN_EVAL % steps)
  checkpoint = train_dir / 'model.ckpt-20.index'
  if last == 'before':
    checkpoint.write_text('')
  elif last == 'after':
    threading.Timer(1.5, checkpoint.write_text, ['']).start()
  monkeypatch.setattr(clusters.run_flags, 'given', lambda _: {})
  monkeypatch.setattr(clusters.signal, 'signal', lambda *args: None)
  flag_values = types.SimpleNamespace(train_dir=str(train_dir), max_steps=20)
  with testutil.refused_ports(2) as ports:
    task = clusters.Task({'chief': ['127.0.0.1:%d' % ports[0]],
                          'ps': ['127.0.0.1:%d' % ports[1]]}, 'evaluator', 0,
                         startup_wait_secs=1)
    start = time.monotonic()
    if stops:
      with pytest.raises(TimeoutError, match='has not answered for 1 s'):
        clusters.run_evaluator(task, flag_values, str(script))
      assert time.monotonic() - start < 30  # Not the stand-in's 60 s.
    else:
      assert clusters.run_evaluator(task, flag_values, str(script)) == 0


# --- The documented manifests -------------------------------------------------


IMAGE = 'YOUR_REGISTRY/cifar10-tutorial:tf2.21'


def _check_runs_in_the_image(container, working_dir):
  """A manifest container's command runs this script as written in the
  Dockerfile's image: the repository copied to its WORKDIR, the script
  there, the requirements installed, no data copied in; the command."""
  command = container['command'] + container.get('args', [])
  with open(os.path.join(testutil.ROOT, 'Dockerfile')) as f:
    steps = [tuple(line.strip().split(None, 1)) for line in f
             if line.strip() and not line.lstrip().startswith('#')]
  assert steps[0][0] == 'FROM' and steps[0][1].startswith('python:')
  assert steps[0][1].endswith('-slim')  # An official Python slim base.
  workdir, = [args for op, args in steps if op == 'WORKDIR']
  assert working_dir in (None, workdir)
  # The requirements, then the repository, both into WORKDIR.
  assert steps.index(('WORKDIR', workdir)) < steps.index(
      ('COPY', 'requirements.txt .')) < steps.index(
          ('RUN', 'pip install --no-cache-dir -r requirements.txt')) < (
              steps.index(('COPY', '. .')))
  assert command[:2] == ['python', 'cifar10_distributed_train.py']
  assert os.path.isfile(os.path.join(testutil.ROOT, command[1]))
  with open(os.path.join(testutil.ROOT, '.dockerignore')) as f:
    ignored = f.read().split()
  assert 'cifar10/*' in ignored  # A user's downloaded data stays out.
  assert not any(pattern.startswith(('cifar10_', '*.py')) for pattern in
                 ignored)
  return command


def test_the_tfjob_manifest_runs_this_script_on_a_shared_train_dir():
  items = _tfjob_items()
  claim_spec = items['PersistentVolumeClaim']['spec']
  assert claim_spec['accessModes'] == ['ReadWriteMany']
  # Where the user names a ReadWriteMany class (docs/distributed.md).
  assert claim_spec['storageClassName'] == 'YOUR_READWRITEMANY_CLASS'
  claim = items['PersistentVolumeClaim']['metadata']['name']
  tfjob = items['TFJob']
  assert tfjob['apiVersion'] == 'kubeflow.org/v1'  # Training Operator v1.x
  replicas = tfjob['spec']['tfReplicaSpecs']
  assert {kind: spec['replicas'] for kind, spec in replicas.items()} == {
      'Chief': 1, 'PS': 1, 'Worker': 2, 'Evaluator': 1}
  commands = set()
  for kind, spec in replicas.items():
    template = spec['template']
    # Istio's sidecar, injected in Kubeflow's profile namespaces, breaks
    # the tasks' gRPC; every pod opts out.
    assert template['metadata']['annotations'] == {
        'sidecar.istio.io/inject': 'false'}, kind
    pod = template['spec']
    container, = pod['containers']
    assert container['image'] == IMAGE
    command = _check_runs_in_the_image(container, container['workingDir'])
    commands.add(tuple(command))
    if kind in ('Chief', 'Evaluator'):
      # The chief writes --train_dir; the evaluator reads it: one volume.
      train_dir, = [a.split('=', 1)[1] for a in command
                    if a.startswith('--train_dir=')]
      mount, = container['volumeMounts']
      assert train_dir.startswith(mount['mountPath'] + '/')
      volume, = [v for v in pod['volumes'] if v['name'] == mount['name']]
      assert volume['persistentVolumeClaim']['claimName'] == claim
  assert len(commands) == 1  # The same command on every replica.


NETWORK_POLICY = os.path.join(testutil.ROOT, 'docs', 'managed',
                              'kubeflow_networkpolicy.json')
# The Training Operator's (kubeflow/training-operator, v1.4.0 to v1.9.0)
# labels of every pod of a TFJob: the job's name (JobNameLabel in
# pkg/apis/kubeflow.org/v1/common_types.go), its replica type, lower-cased
# (ReplicaTypeLabel, same file).
TFJOB_NAME_LABEL = 'training.kubeflow.org/job-name'
TFJOB_REPLICA_LABEL = 'training.kubeflow.org/replica-type'
# The servers' port: the containerPort named "tfjob-port" of the container
# "tensorflow", else 2222 (pkg/apis/kubeflow.org/v1/tensorflow_types.go;
# GetPortFromTFJob writes it into TF_CONFIG).
TFJOB_CONTAINER, TFJOB_PORT_NAME, TFJOB_DEFAULT_PORT = (
    'tensorflow', 'tfjob-port', 2222)


def test_the_network_policy_admits_only_the_tfjobs_own_pods_to_its_port():
  # The tasks' servers run any graph sent to them: the policy applied beside
  # the TFJob selects the job's pods by the operator's label and admits
  # ingress to the servers' port from those pods alone.
  tfjob = _tfjob_items()['TFJob']
  policy = json.load(open(NETWORK_POLICY))
  assert (policy['apiVersion'], policy['kind']) == ('networking.k8s.io/v1',
                                                    'NetworkPolicy')
  # The same namespace: both name none (kubectl's current one), or the same.
  assert policy['metadata'].get('namespace') == tfjob['metadata'].get(
      'namespace')
  the_job = {'matchLabels': {TFJOB_NAME_LABEL: tfjob['metadata']['name']}}
  spec = policy['spec']
  # The job's pods that serve: every replica type but the evaluator's.
  servers = sorted(kind.lower() for kind in tfjob['spec']['tfReplicaSpecs']
                   if kind != 'Evaluator')
  assert spec['podSelector'] == dict(the_job, matchExpressions=[{
      'key': TFJOB_REPLICA_LABEL, 'operator': 'In', 'values': servers}])
  # Ingress alone: Egress listed with no egress rule would cut every pod off.
  assert spec['policyTypes'] == ['Ingress']
  rule, = spec['ingress']
  # The job's pods in the policy's namespace (the evaluator's too: it
  # watches the chief's port), and no other source.
  assert rule.get('from') == [{'podSelector': the_job}]
  ports = set()
  for replica in tfjob['spec']['tfReplicaSpecs'].values():
    container, = [c for c in replica['template']['spec']['containers']
                  if c['name'] == TFJOB_CONTAINER]
    named = [p['containerPort'] for p in container.get('ports', [])
             if p.get('name') == TFJOB_PORT_NAME]
    ports.add(named[0] if named else TFJOB_DEFAULT_PORT)
  assert [(p.get('protocol', 'TCP'), p['port']) for p in rule['ports']] == [
      ('TCP', port) for port in sorted(ports)]


def test_the_vertex_ai_worker_pools_run_this_script_on_cloud_storage():
  pools = json.load(open(VERTEX_POOLS))['workerPoolSpecs']
  # Pool 0 is the chief (one replica), 1 the workers, 2 the ps.
  assert [pool['replicaCount'] for pool in pools][:1] == [1]
  assert len(pools) == 3
  for pool in pools:
    assert pool['containerSpec']['imageUri'] == IMAGE
    command = _check_runs_in_the_image(pool['containerSpec'], None)
    assert '--train_dir=/gcs/' in ' '.join(command)


def test_the_docs_build_and_push_the_image_the_manifests_run():
  with open(os.path.join(testutil.ROOT, 'docs', 'distributed.md')) as f:
    doc = f.read()
  image = IMAGE.replace('YOUR_REGISTRY', '$REGISTRY')
  assert 'docker build -t %s .' % image in doc
  assert 'docker push %s' % image in doc
  # The same name, put into both manifests.
  assert ('sed -i "s#YOUR_REGISTRY#$REGISTRY#" '
          'docs/managed/kubeflow_tfjob.json '
          'docs/managed/vertex_ai_worker_pools.json') in doc
