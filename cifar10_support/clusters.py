"""The ps/worker cluster of cifar10_distributed_train.py: its spec, from the
flags or TF_CONFIG; its tasks (a dict of tasks maps each name, as TensorFlow
names it, '/job:ps/task:0', to its 'host:port'); and what TensorFlow leaves
unbounded or unsaid when a task goes away: a worker's sessions, lost and
re-created, the ps tasks and the chief it watches (docs/distributed.md,
"Faults")."""

import collections
import json
import os
import re
import socket
import sys
import threading
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import signals

# A chief job ('chief', or 'master' on older platforms) is the chief; without
# one, worker 0 is. An evaluator joins no server: it is never part of the
# training cluster, whether TF_CONFIG lists it (Kubeflow) or not (Vertex AI).
CHIEF_JOBS = ('chief', 'master')
EVALUATOR = 'evaluator'
ONE_EVALUATOR = ('one evaluator follows a run, as TensorFlow allows at most '
                 'one: set the evaluator replicas to 1')


class TFConfigError(ValueError):
  """TF_CONFIG, not a flag, is at fault: one line, no usage text."""


def parse_hosts(value, flag_name, error=ValueError):
  """['h0:2222', 'h1:2222'] from 'h0:2222, h1:2222', or `error` naming
  `flag_name` and the entry at fault."""
  if not value or not value.strip():
    raise error('%s is empty: give a comma-separated list of host:port, '
                'e.g. localhost:2222,localhost:2223' % flag_name)
  hosts = [entry.strip() for entry in value.split(',')]
  for entry in hosts:
    host, _, port = entry.rpartition(':')
    if not entry:
      raise error('%s has an empty entry in %r: remove the extra comma'
                  % (flag_name, value))
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise error('%s entry %r is not host:port with a port in 1..65535 '
                  '(in %r)' % (flag_name, entry, value))
  return hosts


def _tf_config_hosts(cluster, job):
  if not isinstance(cluster.get(job), list):
    raise TFConfigError('TF_CONFIG cluster needs a "%s" list of host:port'
                        % job)
  return parse_hosts(','.join(map(str, cluster[job])),
                     'TF_CONFIG cluster "%s"' % job, TFConfigError)


def _from_tf_config(tf_config):
  try:
    config = json.loads(tf_config)
  except ValueError as e:
    raise TFConfigError('TF_CONFIG is not valid JSON (%s): %r'
                        % (e, tf_config))
  cluster = config.get('cluster') if isinstance(config, dict) else None
  task = config.get('task') if isinstance(config, dict) else None
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise TFConfigError(
        'TF_CONFIG needs a "cluster" and a "task" object, e.g. {"cluster": '
        '{"ps": ["h0:2222"], "worker": ["h1:2222"]}, "task": {"type": '
        '"worker", "index": 0}}; got %r' % tf_config)
  extra = sorted(set(cluster) - {'ps', 'worker', EVALUATOR} - set(CHIEF_JOBS))
  if extra:
    raise TFConfigError('TF_CONFIG cluster has job(s) %s; this script knows '
                        '"ps", "worker", "chief" or "master" (the chief), and '
                        '"evaluator"' % ', '.join(extra))
  evaluators = (_tf_config_hosts(cluster, EVALUATOR)
                if cluster.get(EVALUATOR, []) != [] else [])
  if len(evaluators) > 1:
    raise TFConfigError('TF_CONFIG cluster lists %d "evaluator" tasks; %s'
                        % (len(evaluators), ONE_EVALUATOR))
  chiefs = [job for job in CHIEF_JOBS if job in cluster]
  if len(chiefs) > 1:
    raise TFConfigError('TF_CONFIG cluster has both a "chief" and a "master" '
                        'job: a cluster has one chief, under either name')
  if 'ps' not in cluster:
    raise TFConfigError(
        'TF_CONFIG cluster needs a "ps" list of host:port%s: this script '
        'trains with parameter servers'
        % (' beside its "%s" job' % chiefs[0] if chiefs else ''))
  hosts = {'ps': _tf_config_hosts(cluster, 'ps')}
  for chief in chiefs:
    hosts[chief] = _tf_config_hosts(cluster, chief)
    if len(hosts[chief]) != 1:
      raise TFConfigError('TF_CONFIG cluster "%s" lists %d tasks; a cluster '
                          'has one chief' % (chief, len(hosts[chief])))
  if cluster.get('worker') or not chiefs:  # A chief may train alone.
    hosts['worker'] = _tf_config_hosts(cluster, 'worker')
  job_name, task_index = task.get('type'), task.get('index', 0)
  if job_name == EVALUATOR and task_index != 0:
    raise TFConfigError('TF_CONFIG task %s: %s' % (json.dumps(task),
                                                   ONE_EVALUATOR))
  # JSON's true is a bool, which is an int to Python.
  if job_name != EVALUATOR and (job_name not in hosts or
                                type(task_index) is not int):
    raise TFConfigError(
        'TF_CONFIG task %s is not a task of the cluster, whose jobs are %s: '
        'give {"type": <job>, "index": <int>}, or {"type": "evaluator"}'
        % (json.dumps(task), ', '.join('"%s"' % job for job in sorted(hosts))))
  return hosts, job_name, task_index


def resolve_cluster(job_name, task_index, ps_hosts, worker_hosts, tf_config):
  """(cluster, job_name, task_index) from the flags, else from TF_CONFIG.

  The cluster maps 'ps', 'worker' and a chief job to lists of 'host:port',
  never 'evaluator'; it is None for an evaluator from --job_name. Raises
  ValueError naming the flag at fault, or TFConfigError what in TF_CONFIG.
  """
  if job_name or ps_hosts or worker_hosts or not tf_config:
    if not job_name:
      raise ValueError('--job_name is required (ps, worker or evaluator), '
                       'unless the cluster comes from the TF_CONFIG '
                       'environment variable')
    if job_name == EVALUATOR:
      return None, job_name, 0
    cluster = {'ps': parse_hosts(ps_hosts, '--ps_hosts'),
               'worker': parse_hosts(worker_hosts, '--worker_hosts')}
    source, error = '--task_index', ValueError
  else:
    cluster, job_name, task_index = _from_tf_config(tf_config)
    source, error = 'TF_CONFIG task index', TFConfigError
  addresses = [a for hosts in cluster.values() for a in hosts]
  repeated = sorted(set(a for a in addresses if addresses.count(a) > 1))
  if repeated:
    raise error('Address(es) %s listed more than once in the cluster: '
                'every task needs its own host:port' % ', '.join(repeated))
  if job_name == EVALUATOR:
    return cluster, job_name, 0
  num_tasks = len(cluster[job_name])
  if not 0 <= task_index < num_tasks:
    raise error('%s=%d is out of range for job "%s", which has %d '
                'task(s): use 0..%d' % (source, task_index, job_name,
                                        num_tasks, num_tasks - 1))
  return cluster, job_name, task_index


def chief_job(cluster):
  """'chief' or 'master' where the cluster has that job, else 'worker'."""
  return next((job for job in CHIEF_JOBS if job in cluster), 'worker')


def is_chief(cluster, job_name, task_index):
  return job_name == chief_job(cluster) and task_index == 0


def tasks_of(cluster, job):
  return {'/job:%s/task:%d' % (job, i): address
          for i, address in enumerate(cluster[job])}


def chief_task(cluster):
  job = chief_job(cluster)
  return {'/job:%s/task:0' % job: cluster[job][0]}


def training_tasks(cluster):
  """The tasks that train: the chief first, then any other workers."""
  return dict(chief_task(cluster),
              **(tasks_of(cluster, 'worker') if 'worker' in cluster else {}))


def describe(tasks, cluster=None):
  """'ps task 0 at h:2222 and the chief (worker 0 at h:2223)'; worker 0 is
  the chief unless `cluster` has a chief job."""
  worker_chief = cluster is None or chief_job(cluster) == 'worker'
  names = []
  for name, address in sorted(tasks.items()):
    job, index = name.split('/')[1][len('job:'):], name.rsplit(':', 1)[1]
    if job in CHIEF_JOBS:
      names.append('the chief (%s at %s)' % (job, address))
    elif (job, index) == ('worker', '0') and worker_chief:
      names.append('the chief (worker 0 at %s)' % address)
    else:
      names.append('%s task %s at %s' % (job, index, address))
  return ' and '.join(names)


def _connect_errors(tasks, timeout_secs):
  """{name: OSError} for those of `tasks` that refuse a TCP connection now."""
  errors = {}
  for name, address in tasks.items():
    host, _, port = address.rpartition(':')
    try:
      socket.create_connection((host.strip('[]'), int(port)),
                               timeout=timeout_secs).close()
    except OSError as e:
      errors[name] = e
  return errors


def unreachable(tasks, timeout_secs=1):
  """Those of `tasks` that refuse or ignore a TCP connection now."""
  return {name: tasks[name] for name in _connect_errors(tasks, timeout_secs)}


def wait_for_addresses(tasks, wait_secs, poll_secs=0.5):
  """Returns once every one of `tasks` accepts TCP connections, or raises
  TimeoutError after `wait_secs` naming each that did not, and why."""
  deadline = time.time() + wait_secs
  while True:
    errors = _connect_errors(tasks, max(poll_secs, 1))
    tasks = {name: tasks[name] for name in errors}
    if not tasks:
      return
    if time.time() >= deadline:
      raise TimeoutError(
          'No answer after %s s from %s. Is that task started, with this '
          'address in its --ps_hosts/--worker_hosts, and is the port open? '
          '(--startup_wait_secs sets the wait)' % (wait_secs, '; '.join(
              '%s at %s (%s)' % (name, tasks[name], errors[name])
              for name in sorted(tasks))))
    time.sleep(poll_secs)


class WorkerSettings(collections.namedtuple('WorkerSettings', [
    'target', 'cluster', 'task_index', 'sync_replicas',
    'replicas_to_aggregate', 'startup_wait_secs', 'operation_timeout_secs',
    'job_name'], defaults=(False, None, 300, 300, 'worker'))):
  """A training task's settings beside run_flags.TrainSettings, mostly
  its flags: target is its server's ('grpc://host:port'); job_name 'worker'
  or the chief job; replicas_to_aggregate None for one per training task."""
  __slots__ = ()

  @property
  def is_chief(self):
    return is_chief(self.cluster, self.job_name, self.task_index)

  @property
  def task(self):
    return '/job:%s/task:%d' % (self.job_name, self.task_index)

  @property
  def device(self):
    """Where this task's own ops run: its CPU (workers place no GPU ops)."""
    return self.task + '/cpu:0'

  @property
  def label(self):
    """How the task's console lines begin: 'Worker 1', 'Chief', 'Master'."""
    if self.job_name in CHIEF_JOBS:
      return self.job_name.capitalize()
    return 'Worker %d' % self.task_index




# How MonitoredSession's log line for an error it recovers from begins.
RECOVERED_ERROR_LOG = 'An error was raised'


def _describe_chief(cluster):
  return describe(chief_task(cluster), cluster)


class Absence(object):
  """Polls some tasks for how long any has refused TCP connections."""

  def __init__(self, tasks, wait_secs):
    self._tasks = tasks
    self._wait_secs = wait_secs
    self._since = None
    self.down = {}

  def poll(self):
    """'away' as a task stops answering, 'back' once all answer again,
    'gone' while one has been away longer than `wait_secs`, else None;
    `down` is then the tasks that do not answer."""
    self.down = unreachable(self._tasks)
    if not self.down:
      was_away, self._since = self._since is not None, None
      return 'back' if was_away else None
    if self._since is None:
      self._since = time.time()
      return 'away'
    return 'gone' if time.time() - self._since > self._wait_secs else None


def _gone_for_good_message(tasks, wait_secs):
  return ('%s did not come back within %d s (--startup_wait_secs): stopping. '
          'The checkpoints are as they were; once the ps tasks run, start the '
          'workers again and the chief resumes from its newest checkpoint.'
          % (describe(tasks), wait_secs))


def exit_when_a_ps_task_stays_away(label, ps_tasks, wait_secs):
  """Starts a thread that ends this process, with one line and status 1,
  once a ps task has been away for `wait_secs`: closing a lost session waits
  for the task to answer, where no timeout reaches."""

  def watch():
    absence = Absence(ps_tasks, wait_secs)
    while True:
      time.sleep(1)
      if absence.poll() == 'gone':
        sys.stdout.flush()
        print('%s: %s' % (label, _gone_for_good_message(absence.down,
                                                         wait_secs)),
              file=sys.stderr, flush=True)
        os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watch, name='watch_ps_tasks', daemon=True).start()


def wait_for_lost_ps_tasks(label, ps_tasks, wait_secs, error):
  """Says why a worker's session was lost ('ps task 0 at h:2222 restarted')
  once every ps task answers: any that is down is waited for, saying so, up
  to `wait_secs`, or a TimeoutError names it. `error` is TF's log line for
  the error that lost the session, which may name the task."""
  down = unreachable(ps_tasks)
  if not down:
    # TF names '/job:ps/task:1' '/job:ps/replica:0/task:1' (not task:10).
    gone = {name: address for name, address in ps_tasks.items()
            if re.search(re.escape(name.replace('/task:', '/replica:0/task:'))
                         + r'(?!\d)', error)}
    return ('%s restarted' % describe(gone) if gone else
            'a ps task restarted, or a connection to one broke')
  print('%s: lost %s; waiting up to %d s for it to come back.'
        % (label, describe(down), wait_secs), flush=True)
  try:
    wait_for_addresses(down, wait_secs)
  except TimeoutError:
    raise TimeoutError(_gone_for_good_message(down, wait_secs)) from None
  return '%s restarted' % describe(down)


class BoundedSessionCreator(tf.train.SessionCreator):
  """A worker's sessions, for its tf.train.MonitoredSession, with the waits
  TensorFlow leaves unbounded bounded by worker.startup_wait_secs: for the
  chief to initialise the variables, and, when MonitoredSession re-creates
  a lost session, for a ps task that is down (`wait_for_lost_ps_tasks`).
  Each new session says what it starts from.

  Attributes:
    scaffold: the chief's restores train_dirs.StartPoint `start`, then, in
      a re-created session, the newest checkpoint; its saver is the one to
      save with.
    hooks: what the session needs beside the caller's: the other workers'
      ChiefWatch (none for the chief).
  """

  def __init__(self, worker, config, start, errors, global_step, classes):
    """worker: a WorkerSettings; config: its session's tf.ConfigProto; start:
    the chief's train_dirs.StartPoint (None elsewhere); errors: the deque
    that gets TF's RECOVERED_ERROR_LOG lines; global_step: the graph's;
    classes: (chief_classes_variable, this worker's data_files.DataSet),
    checked as a worker other than the chief joins."""
    self._worker = worker
    self._config = config
    self._errors = errors
    self._global_step = global_step
    self._classes = classes
    self._sessions = 0
    self._reason = None
    if worker.is_chief:
      # Restores on the chief's CPU, from its own disk, as its saver saves.
      with tf.device(worker.device):
        self.scaffold = checkpoints.restoring_scaffold(
            start.restore_plan(), start.train_dir, self._restored)
      self.hooks = []
    else:
      self.scaffold = tf.train.Scaffold()
      self.hooks = [ChiefWatch(worker.cluster, worker.startup_wait_secs,
                               worker.label)]

  def _say_lost(self, how):
    signals.print_line('%s: session lost (%s): %s.' % (
        self._worker.label, self._reason, how))

  def _restored(self, checkpoint, step):
    self._say_lost('no checkpoint yet, so from step 0 again' if checkpoint is
                   None else 'restored %s, global step %d; steps since then '
                   'are lost' % (os.path.basename(checkpoint), step))

  def create_session(self):
    worker = self._worker
    if self._sessions:
      self._reason = wait_for_lost_ps_tasks(
          worker.label, tasks_of(worker.cluster, 'ps'),
          worker.startup_wait_secs, self._errors[-1] if self._errors else '')
    if worker.is_chief:
      session = tf.train.ChiefSessionCreator(
          self.scaffold, worker.target, self._config).create_session()
    else:
      if not self._sessions:
        signals.print_line(
            '%s: waiting up to %d s for %s to initialise the variables.'
            % (worker.label, worker.startup_wait_secs,
               _describe_chief(worker.cluster)))
      # As tf.train.WorkerSessionCreator, but asking every second, not
      # every 30, whether the chief has initialised the variables.
      self.scaffold.finalize()
      manager = tf.train.SessionManager(
          local_init_op=self.scaffold.local_init_op,
          ready_op=self.scaffold.ready_op,
          ready_for_local_init_op=self.scaffold.ready_for_local_init_op,
          graph=tf.get_default_graph(), recovery_wait_secs=1)
      try:
        session = manager.wait_for_session(
            worker.target, config=self._config,
            max_wait_secs=worker.startup_wait_secs)
      except tf.errors.DeadlineExceededError:
        raise TimeoutError(
            'The variables were still not initialised after %s s: is %s '
            'running? (--startup_wait_secs sets the wait)'
            % (worker.startup_wait_secs, _describe_chief(worker.cluster)))
      if self._sessions:
        self._say_lost('rejoined at global step %d'
                       % session.run(self._global_step))
      else:
        check_chief_classes(session, *self._classes)
    self._sessions += 1
    return session


class ChiefWatch(tf.train.SessionRunHook):
  """Raises TimeoutError, naming the chief, once it has been away for
  `wait_secs`: as a non-chief worker's hook (meanwhile it trains on, unsaved,
  and says so; a synchronous one waits for the chief's next update, bounded
  by the operation timeout), or as the evaluator's time.sleep."""

  def __init__(self, cluster, wait_secs, label=None, poll_secs=2):
    self._absence = Absence(chief_task(cluster), wait_secs)
    self._chief = _describe_chief(cluster)
    self._wait_secs = wait_secs
    self._label = label
    self._poll_secs = poll_secs
    self._next_poll = time.time() + poll_secs

  def _poll(self, then):
    change = self._absence.poll()
    if change == 'gone':
      raise TimeoutError('%s has not answered for %d s (--startup_wait_secs)%s'
                         % (self._chief, self._wait_secs, then))
    return change

  def after_run(self, run_context, run_values):
    if time.time() < self._next_poll:
      return
    self._next_poll = time.time() + self._poll_secs
    change = self._poll(': stopping, since nothing is saved without it. '
                        'Start it again, then this worker.')
    if change == 'back':
      signals.print_line('%s: %s is back.' % (self._label, self._chief))
    elif change == 'away':
      signals.print_line(
          '%s: %s does not answer: training on, unsaved, for up to %d s '
          'until it is back.' % (self._label, self._chief, self._wait_secs))

  def sleep(self, secs):
    time.sleep(secs)
    self._poll(' and no checkpoint at --max_steps has come: stopping. Start '
               'the chief again, then this evaluator.')


def chief_classes_variable(data_set):
  """A variable on the ps tasks that the chief initialises with its data's
  class names (one string, a name a line); never saved (the checkpoints
  keep the original's variables). Build it in the worker graph, under its
  replica device setter."""
  return tf.get_variable(
      'chief_class_names', trainable=False,
      initializer=tf.constant('\n'.join(data_set.class_names)),
      collections=[tf.GraphKeys.GLOBAL_VARIABLES, checkpoints.NOT_SAVED])


def check_chief_classes(session, variable, data_set):
  """Raises checkpoints.ClassesMismatchError, naming both, unless the
  chief's class names (`chief_classes_variable`, read in `session`) are
  data_set's."""
  chief = tuple(session.run(variable).decode('utf-8').split('\n'))
  if chief != data_set.class_names:
    raise checkpoints.ClassesMismatchError(
        'the data in %s has %s, but the chief\'s has %s: every worker must '
        'read the same data set (--data_dir, --dataset)'
        % (data_set.directory, data_set.describe_classes(),
           data_files.describe_classes(chief)))


def operation_timeout_error(worker, global_step):
  """The TimeoutError for an operation that blocked past the operation
  timeout after `global_step`, naming the tasks that no longer answer (it
  tries each now)."""
  others = dict(tasks_of(worker.cluster, 'ps'),
                **training_tasks(worker.cluster))
  del others[worker.task]
  gone = unreachable(others)
  return TimeoutError(
      'an operation blocked for more than %s s (--operation_timeout_secs) '
      'after global step %s: %s'
      % (worker.operation_timeout_secs, global_step,
         '%s does not answer' % describe(gone, worker.cluster)
         if gone else
         'did another task stop, or is the input queue still filling?'))
