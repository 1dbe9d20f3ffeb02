"""The ps/worker cluster of cifar10_distributed_train.py, from its flags or
TF_CONFIG, and its tasks: a dict of tasks maps each name, as TensorFlow names
it ('/job:ps/task:0'), to its 'host:port'."""

import collections
import json
import socket
import time

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


