"""The ps/worker cluster of cifar10_distributed_train.py: this task and its
cluster (`resolve`: the flags, or TF_CONFIG as TensorFlow's own
TFConfigClusterResolver reads it, checked as docs/distributed.md promises),
and what TensorFlow leaves unbounded or unsaid when a task goes away: the
wait for the ps tasks, a worker's sessions, lost and re-created, the chief
it watches (docs/distributed.md, "Faults"). A dict of tasks maps each name,
as TensorFlow names it, '/job:ps/task:0', to its 'host:port'."""

import collections
import json
import os
import re
import socket
import sys
import threading
import time

from absl import app
import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import signals

# A chief job ('chief', or 'master' on older platforms) is the chief; without
# one, worker 0 is. An evaluator joins no server: it is never part of the
# training cluster, whether TF_CONFIG lists it (Kubeflow) or not (Vertex AI).
CHIEF_JOBS = ('chief', 'master')
ONE_EVALUATOR = ('one evaluator follows a run, as TensorFlow allows at most '
                 'one: set the evaluator replicas to 1')


class Task(collections.namedtuple('Task', [
    'cluster', 'job_name', 'task_index', 'startup_wait_secs',
    'operation_timeout_secs'], defaults=(300, 300))):
  """This task of its cluster, which maps 'ps', 'worker' and a chief job to
  lists of 'host:port' (never 'evaluator'; None for an evaluator from
  --job_name), and how long it waits on the other tasks."""
  __slots__ = ()

  @property
  def chief_job(self):
    """'chief' or 'master' where the cluster has that job, else 'worker'."""
    return next((job for job in CHIEF_JOBS if job in self.cluster), 'worker')

  @property
  def is_chief(self):
    return (self.job_name, self.task_index) == (self.chief_job, 0)

  @property
  def name(self):
    return '/job:%s/task:%d' % (self.job_name, self.task_index)

  @property
  def device(self):
    """Where this task's own ops run: its CPU (workers place no GPU ops)."""
    return self.name + '/cpu:0'

  @property
  def label(self):
    """How the task's console lines begin: 'Worker 1', 'Chief', 'Master'."""
    return (self.job_name.capitalize() if self.job_name in CHIEF_JOBS else
            'Worker %d' % self.task_index)

  def tasks_of(self, job):
    return {'/job:%s/task:%d' % (job, i): address
            for i, address in enumerate(self.cluster.get(job, []))}

  @property
  def chief_task(self):
    return {'/job:%s/task:0' % self.chief_job: self.cluster[self.chief_job][0]}

  @property
  def training_tasks(self):
    """The tasks that train: the chief first, then any other workers."""
    return dict(self.chief_task, **self.tasks_of('worker'))


def parse_hosts(value, flag_name, error):
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


def _tf_config_hosts(jobs, job):
  tasks = jobs.get(job)
  if tasks is None:
    raise ValueError('TF_CONFIG cluster needs a "%s" list of host:port' % job)
  if isinstance(tasks, dict) and tasks:  # Some indexes only: a sparse map.
    raise ValueError('TF_CONFIG cluster "%s" maps some task indexes only: '
                     'this script needs a list of every task\'s host:port'
                     % job)
  return parse_hosts(','.join(tasks), 'TF_CONFIG cluster "%s"' % job,
                     ValueError)


def _from_tf_config(tf_config):
  """(cluster, job_name, task_index) from TF_CONFIG, the evaluator job left
  out of the cluster, or a ValueError saying what is wrong with it."""
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  try:
    jobs = resolver.cluster_spec().as_dict()
    job_name, task_index = resolver.task_type, resolver.task_id
  except json.JSONDecodeError as e:
    raise ValueError('TF_CONFIG is not valid JSON (%s): %r' % (e, tf_config))
  except (TypeError, ValueError) as e:  # Not {"job": ["host:port", ...]}.
    raise ValueError('TF_CONFIG is not a cluster TensorFlow can read (%s): '
                     '%r' % (e, tf_config))
  if not jobs or job_name is None:
    raise ValueError(
        'TF_CONFIG needs a "cluster" and a "task" object, e.g. {"cluster": '
        '{"ps": ["h0:2222"], "worker": ["h1:2222"]}, "task": {"type": '
        '"worker", "index": 0}}; got %r' % tf_config)
  task_index = task_index or 0  # A task without an index is task 0.
  task = json.dumps({'type': job_name, 'index': task_index})
  extra = sorted(set(jobs) - {'ps', 'worker', 'evaluator'} - set(CHIEF_JOBS))
  if extra:
    raise ValueError('TF_CONFIG cluster has job(s) %s; this script knows '
                     '"ps", "worker", "chief" or "master" (the chief), and '
                     '"evaluator"' % ', '.join(extra))
  # The evaluator's address is never used: only their number counts.
  if len(jobs.get('evaluator') or ()) > 1:
    raise ValueError('TF_CONFIG cluster lists %d "evaluator" tasks; %s'
                     % (len(jobs['evaluator']), ONE_EVALUATOR))
  chiefs = [job for job in CHIEF_JOBS if job in jobs]
  if len(chiefs) > 1:
    raise ValueError('TF_CONFIG cluster has both a "chief" and a "master" '
                     'job: a cluster has one chief, under either name')
  if 'ps' not in jobs:
    raise ValueError(
        'TF_CONFIG cluster needs a "ps" list of host:port%s: this script '
        'trains with parameter servers'
        % (' beside its "%s" job' % chiefs[0] if chiefs else ''))
  cluster = {job: _tf_config_hosts(jobs, job) for job in ['ps'] + chiefs}
  for chief in chiefs:
    if len(cluster[chief]) != 1:
      raise ValueError('TF_CONFIG cluster "%s" lists %d tasks; a cluster has '
                       'one chief' % (chief, len(cluster[chief])))
  if jobs.get('worker') or not chiefs:  # A chief may train alone.
    cluster['worker'] = _tf_config_hosts(jobs, 'worker')
  if job_name == 'evaluator' and task_index != 0:
    raise ValueError('TF_CONFIG task %s: %s' % (task, ONE_EVALUATOR))
  if job_name != 'evaluator' and job_name not in cluster:
    raise ValueError(
        'TF_CONFIG task %s is not a task of the cluster, whose jobs are %s: '
        'give {"type": <job>, "index": <int>}, or {"type": "evaluator"}'
        % (task, ', '.join('"%s"' % job for job in sorted(cluster))))
  return cluster, job_name, task_index


def resolve(job_name, task_index, ps_hosts, worker_hosts, startup_wait_secs,
            operation_timeout_secs):
  """This Task, from the cluster flags, else from the TF_CONFIG environment
  variable (saying that it is ignored when both are given).

  Raises app.UsageError naming the flag at fault, or ValueError what in
  TF_CONFIG (one line, no usage text).
  """
  tf_config = os.environ.get('TF_CONFIG')
  flags_given = job_name or ps_hosts or worker_hosts
  if flags_given or not tf_config:
    if not job_name:
      raise app.UsageError('--job_name is required (ps, worker or evaluator), '
                           'unless the cluster comes from the TF_CONFIG '
                           'environment variable')
    cluster = None if job_name == 'evaluator' else {
        'ps': parse_hosts(ps_hosts, '--ps_hosts', app.UsageError),
        'worker': parse_hosts(worker_hosts, '--worker_hosts', app.UsageError)}
    source, error = '--task_index', app.UsageError
  else:
    cluster, job_name, task_index = _from_tf_config(tf_config)
    source, error = 'TF_CONFIG task index', ValueError
  addresses = [a for hosts in (cluster or {}).values() for a in hosts]
  repeated = sorted(set(a for a in addresses if addresses.count(a) > 1))
  if repeated:
    raise error('Address(es) %s listed more than once in the cluster: '
                'every task needs its own host:port' % ', '.join(repeated))
  if job_name == 'evaluator':
    task_index = 0
  elif not 0 <= task_index < len(cluster[job_name]):
    num_tasks = len(cluster[job_name])
    raise error('%s=%d is out of range for job "%s", which has %d task(s): '
                'use 0..%d' % (source, task_index, job_name, num_tasks,
                               num_tasks - 1))
  if tf_config and flags_given:
    print('Cluster flags given: ignoring the TF_CONFIG environment variable.')
  return Task(cluster, job_name, task_index, startup_wait_secs,
              operation_timeout_secs)


def describe(tasks, chief_job='worker'):
  """'ps task 0 at h:2222 and the chief (worker 0 at h:2223)'; task 0 of
  `chief_job` is the chief."""
  names = []
  for name, address in sorted(tasks.items()):
    job, index = re.fullmatch(r'/job:(\w+)/task:(\d+)', name).groups()
    if (job, index) == (chief_job, '0'):
      names.append('the chief (%s at %s)' % (
          job if job in CHIEF_JOBS else 'worker 0', address))
    else:
      names.append('%s task %s at %s' % (job, index, address))
  return ' and '.join(names)


def _connect_errors(tasks):
  """{name: OSError} for those of `tasks` that refuse a TCP connection now."""
  errors = {}
  for name, address in tasks.items():
    host, _, port = address.rpartition(':')
    try:
      socket.create_connection((host.strip('[]'), int(port)),
                               timeout=1).close()
    except OSError as e:
      errors[name] = e
  return errors


def unreachable(tasks):
  """Those of `tasks` that refuse or ignore a TCP connection now."""
  return {name: tasks[name] for name in _connect_errors(tasks)}


def wait_for_addresses(tasks, wait_secs):
  """Returns once every one of `tasks` accepts TCP connections, or raises
  TimeoutError after `wait_secs` naming each that did not, and why."""
  deadline = time.time() + wait_secs
  while True:
    errors = _connect_errors(tasks)
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
    time.sleep(0.5)


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


def wait_for_ps_tasks(task):
  """Returns once every ps task accepts TCP connections (or raises
  TimeoutError after task.startup_wait_secs, naming each that did not);
  from then on a thread ends this process, with one line and status 1, once
  a ps task has been away that long: closing a lost session waits for the
  task to answer, where no timeout reaches."""
  ps_tasks, wait_secs = task.tasks_of('ps'), task.startup_wait_secs
  wait_for_addresses(ps_tasks, wait_secs)

  def watch():
    absence = Absence(ps_tasks, wait_secs)
    while True:
      time.sleep(1)
      if absence.poll() == 'gone':
        sys.stdout.flush()
        print('%s: %s' % (task.label, _gone_for_good_message(absence.down,
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
    lost_session_errors: gets TensorFlow's log lines that begin with
      RECOVERED_ERROR_LOG (an error MonitoredSession recovers from); the
      last names what lost a session.
  """

  RECOVERED_ERROR_LOG = 'An error was raised'

  def __init__(self, worker, target, config, start, global_step, classes):
    """worker: this Task; target: its server's ('grpc://host:port'); config:
    its session's tf.ConfigProto; start: the chief's train_dirs.StartPoint
    (None elsewhere); global_step: the graph's; classes:
    (chief_classes_variable, this worker's data_files.DataSet), checked as
    a worker other than the chief joins."""
    self._worker = worker
    self._target = target
    self._config = config
    self._global_step = global_step
    self._classes = classes
    self._sessions = 0
    self._reason = None
    self.lost_session_errors = collections.deque(maxlen=1)
    if worker.is_chief:
      # Restores on the chief's CPU, from its own disk, as its saver saves.
      with tf.device(worker.device):
        self.scaffold = start.scaffold(on_recovery=self._restored)
      self.hooks = []
    else:
      self.scaffold = tf.train.Scaffold()
      self.hooks = [ChiefWatch(worker)]

  def _say_lost(self, how):
    signals.print_line('%s: session lost (%s): %s.' % (
        self._worker.label, self._reason, how))

  def _restored(self, checkpoint, step):
    self._say_lost('no checkpoint yet, so from step 0 again' if checkpoint is
                   None else 'restored %s, global step %d; steps since then '
                   'are lost' % (os.path.basename(checkpoint), step))

  def create_session(self):
    worker = self._worker
    chief = describe(worker.chief_task, worker.chief_job)
    if self._sessions:
      errors = self.lost_session_errors
      self._reason = wait_for_lost_ps_tasks(
          worker.label, worker.tasks_of('ps'), worker.startup_wait_secs,
          errors[-1] if errors else '')
    if worker.is_chief:
      session = tf.train.ChiefSessionCreator(
          self.scaffold, self._target, self._config).create_session()
    else:
      if not self._sessions:
        signals.print_line(
            '%s: waiting up to %d s for %s to initialise the variables.'
            % (worker.label, worker.startup_wait_secs, chief))
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
            self._target, config=self._config,
            max_wait_secs=worker.startup_wait_secs)
      except tf.errors.DeadlineExceededError:
        raise TimeoutError(
            'The variables were still not initialised after %s s: is %s '
            'running? (--startup_wait_secs sets the wait)'
            % (worker.startup_wait_secs, chief))
      if self._sessions:
        self._say_lost('rejoined at global step %d'
                       % session.run(self._global_step))
      else:
        _check_chief_classes(session, *self._classes)
    self._sessions += 1
    return session


class ChiefWatch(tf.train.SessionRunHook):
  """Raises TimeoutError, naming the chief, once it has been away for
  task.startup_wait_secs: as a non-chief worker's hook (meanwhile it trains
  on, unsaved, and says so; a synchronous one waits for the chief's next
  update, bounded by the operation timeout), or as the evaluator's
  time.sleep."""

  POLL_SECS = 2

  def __init__(self, task):
    self._absence = Absence(task.chief_task, task.startup_wait_secs)
    self._chief = describe(task.chief_task, task.chief_job)
    self._task = task
    self._next_poll = time.time() + self.POLL_SECS

  def _poll(self, then):
    change = self._absence.poll()
    if change == 'gone':
      raise TimeoutError('%s has not answered for %d s (--startup_wait_secs)%s'
                         % (self._chief, self._task.startup_wait_secs, then))
    return change

  def after_run(self, run_context, run_values):
    if time.time() < self._next_poll:
      return
    self._next_poll = time.time() + self.POLL_SECS
    change = self._poll(': stopping, since nothing is saved without it. '
                        'Start it again, then this worker.')
    if change == 'back':
      signals.print_line('%s: %s is back.' % (self._task.label, self._chief))
    elif change == 'away':
      signals.print_line(
          '%s: %s does not answer: training on, unsaved, for up to %d s '
          'until it is back.' % (self._task.label, self._chief,
                                 self._task.startup_wait_secs))

  def sleep(self, secs):
    time.sleep(secs)
    self._poll(' and no checkpoint at --max_steps has come: stopping. Start '
               'the chief again, then this evaluator.')


def wait_for_queue_runners(secs=10):
  """Waits up to secs for the queue runners' threads a closed session left
  (named by Python after their targets): the synchronous chief's, blocked
  on gradients that never come, returns once the session is closed, and
  TensorFlow aborts the process if the interpreter exits under it."""
  deadline = time.time() + secs
  for thread in threading.enumerate():
    if thread.name.endswith(('(_run)', '(_close_on_stop)')):
      thread.join(max(0.0, deadline - time.time()))


def chief_classes_variable(data_set):
  """A variable on the ps tasks that the chief initialises with its data's
  class names (one string, a name a line); never saved (the checkpoints
  keep the original's variables). Build it in the worker graph, under its
  replica device setter."""
  return tf.get_variable(
      'chief_class_names', trainable=False,
      initializer=tf.constant('\n'.join(data_set.class_names)),
      collections=[tf.GraphKeys.GLOBAL_VARIABLES, checkpoints.NOT_SAVED])


def _check_chief_classes(session, variable, data_set):
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
  """The TimeoutError for an operation of `worker` (a Task) that blocked
  past its operation timeout after `global_step`, naming the tasks that no
  longer answer (it tries each now)."""
  others = dict(worker.tasks_of('ps'), **worker.training_tasks)
  del others[worker.name]
  gone = unreachable(others)
  return TimeoutError(
      'an operation blocked for more than %s s (--operation_timeout_secs) '
      'after global step %s: %s'
      % (worker.operation_timeout_secs, global_step,
         '%s does not answer' % describe(gone, worker.chief_job)
         if gone else
         'did another task stop, or is the input queue still filling?'))
