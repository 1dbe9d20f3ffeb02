"""The ps/worker cluster of cifar10_distributed_train.py: flags or TF_CONFIG.

    cluster, job_name, task_index = resolve_cluster(
        FLAGS.job_name, FLAGS.task_index, FLAGS.ps_hosts, FLAGS.worker_hosts,
        os.environ.get('TF_CONFIG'))
    wait_for_addresses({'/job:ps/task:0': 'h0:2222'}, wait_secs=300)

Every malformed list, repeated address or out-of-range index is a ValueError
naming the flag at fault, or a TFConfigError naming what in TF_CONFIG is;
no task waits forever.
"""

import collections
import json
import socket
import time


def parse_hosts(value, flag_name):
  """Splits a comma-separated 'host:port' list.

  Args:
    value: str, e.g. 'ps0.example.com:2222,10.0.0.2:2222'.
    flag_name: str, where the list came from (for the error message).

  Returns:
    A list of 'host:port' strings, spaces stripped.

  Raises:
    ValueError: naming the flag and the bad entry, for an empty list, an
      empty entry, a missing host, or a port that is not in 1..65535.
  """
  if not value or not value.strip():
    raise ValueError('%s is empty: give a comma-separated list of host:port, '
                     'e.g. localhost:2222,localhost:2223' % flag_name)
  hosts = [entry.strip() for entry in value.split(',')]
  for entry in hosts:
    host, _, port = entry.rpartition(':')
    if not entry:
      raise ValueError('%s has an empty entry in %r: remove the extra comma'
                       % (flag_name, value))
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise ValueError('%s entry %r is not host:port with a port in 1..65535 '
                       '(in %r)' % (flag_name, entry, value))
  return hosts


# The jobs a cluster may have. A chief job ('chief', or 'master' on older
# platforms) is the chief, and its workers are counted apart from it;
# without one, worker 0 is the chief. An 'evaluator' (TF_CONFIG's task type,
# or --job_name) is never part of the training cluster: Kubeflow lists it in
# TF_CONFIG's cluster, Vertex AI does not, and either way it joins no server.
CHIEF_JOBS = ('chief', 'master')
TRAINING_JOBS = CHIEF_JOBS + ('worker',)
EVALUATOR = 'evaluator'
ONE_EVALUATOR = ('one evaluator follows a run, as TensorFlow allows at most '
                 'one: set the evaluator replicas to 1')


class TFConfigError(ValueError):
  """TF_CONFIG, not a flag, is at fault: one line, no usage text."""


def _tf_config_hosts(cluster, job):
  if not isinstance(cluster.get(job), list):
    raise TFConfigError('TF_CONFIG cluster needs a "%s" list of host:port'
                        % job)
  try:
    return parse_hosts(','.join(map(str, cluster[job])),
                       'TF_CONFIG cluster "%s"' % job)
  except ValueError as e:
    raise TFConfigError(str(e))


def cluster_from_tf_config(tf_config):
  """Reads the cluster and this task from a TF_CONFIG JSON string.

  The cluster has a "ps" job, a "worker" job, a chief job ("chief" or
  "master", of one task), or both of the last two, and may list one
  "evaluator" task (as Kubeflow does); the task is one of them, or
  {"type": "evaluator"}, listed or not.

  Returns:
    (cluster, job_name, task_index): cluster a dict from each training job
    ("ps", "worker", a chief job; never "evaluator") to its list of
    'host:port'; job_name one of its jobs or 'evaluator'.

  Raises:
    TFConfigError: one line naming what is wrong: malformed JSON, a missing,
      unknown or repeated job, more than one chief or evaluator task, or a
      task that is not in the cluster.
  """
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
  extra = sorted(set(cluster) - {'ps', EVALUATOR} - set(TRAINING_JOBS))
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
  if chiefs:
    hosts[chiefs[0]] = _tf_config_hosts(cluster, chiefs[0])
    if len(hosts[chiefs[0]]) != 1:
      raise TFConfigError('TF_CONFIG cluster "%s" lists %d tasks; a cluster '
                          'has one chief' % (chiefs[0], len(hosts[chiefs[0]])))
  if cluster.get('worker') or not chiefs:  # A chief may train alone.
    hosts['worker'] = _tf_config_hosts(cluster, 'worker')
  job_name, task_index = task.get('type'), task.get('index', 0)
  if job_name == EVALUATOR:
    if task_index != 0:
      raise TFConfigError('TF_CONFIG task %s: %s' % (json.dumps(task),
                                                     ONE_EVALUATOR))
    return hosts, job_name, 0
  if (job_name not in hosts or not isinstance(task_index, int) or
      isinstance(task_index, bool)):
    raise TFConfigError(
        'TF_CONFIG task %s is not a task of the cluster, whose jobs are %s: '
        'give {"type": <job>, "index": <int>}, or {"type": "evaluator"}'
        % (json.dumps(task), ', '.join('"%s"' % job for job in sorted(hosts))))
  return hosts, job_name, task_index


def resolve_cluster(job_name, task_index, ps_hosts, worker_hosts, tf_config):
  """Picks the cluster from the flags, else from TF_CONFIG, and checks it.

  Args:
    job_name: 'ps', 'worker', 'evaluator' or None (the --job_name flag).
    task_index: int (the --task_index flag).
    ps_hosts, worker_hosts: str, comma-separated host:port lists (flags).
    tf_config: str or None, the TF_CONFIG environment variable.

  Returns:
    (cluster, job_name, task_index): cluster is a dict {'ps': [host:port...],
    'worker': [host:port...]} and, from TF_CONFIG, maybe a chief job
    ('chief' or 'master': [host:port]); None for an evaluator given by the
    flags, which needs no cluster.

  Raises:
    ValueError: naming the flag at fault: no cluster given, a malformed
      host list, an address listed twice, or a task index out of range;
      TFConfigError (a ValueError) where TF_CONFIG is at fault.
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
    cluster, job_name, task_index = cluster_from_tf_config(tf_config)
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
  """The cluster's chief job, 'chief' or 'master', or 'worker' without one
  (worker 0 is then the chief)."""
  for job in CHIEF_JOBS:
    if job in cluster:
      return job
  return 'worker'


def is_chief(cluster, job_name, task_index):
  """Whether task `task_index` of `job_name` is the cluster's chief."""
  return job_name == chief_job(cluster) and task_index == 0


def chief_task(cluster):
  """{'/job:chief/task:0': 'h:2222'}: the chief, named as TF names it."""
  job = chief_job(cluster)
  return {'/job:%s/task:0' % job: cluster[job][0]}


def training_tasks(cluster):
  """Every task that trains, the chief first: {'/job:...': 'host:port'}."""
  tasks = dict(chief_task(cluster))
  tasks.update(tasks_of(cluster, 'worker') if 'worker' in cluster else {})
  return tasks


def task_label(job_name, task_index):
  """How a task's console lines begin: 'Worker 1', 'Chief', 'Master'."""
  if job_name in CHIEF_JOBS:
    return job_name.capitalize()
  return '%s %d' % (job_name.capitalize(), task_index)


def _connect_error(address, timeout_secs):
  """None if 'host:port' accepts a TCP connection now, else the OSError."""
  host, _, port = address.rpartition(':')
  try:
    socket.create_connection((host.strip('[]'), int(port)),
                             timeout=timeout_secs).close()
  except OSError as e:
    return e
  return None


def wait_for_addresses(tasks, wait_secs, poll_secs=0.5):
  """Waits until every task's address accepts TCP connections.

  Args:
    tasks: dict from a task name ('/job:ps/task:0') to its 'host:port'.
    wait_secs: number, how long to keep trying.
    poll_secs: number, pause between attempts.

  Raises:
    TimeoutError: naming each task and address that did not answer in time.
  """
  deadline = time.time() + wait_secs
  pending = dict(tasks)
  errors = {}
  while True:
    for name, address in sorted(pending.items()):
      error = _connect_error(address, max(poll_secs, 1))
      if error is None:
        del pending[name]
      else:
        errors[name] = error
    if not pending:
      return
    if time.time() >= deadline:
      raise TimeoutError(
          'No answer after %s s from %s. Is that task started, with this '
          'address in its --ps_hosts/--worker_hosts, and is the port open? '
          '(--startup_wait_secs sets the wait)' % (wait_secs, '; '.join(
              '%s at %s (%s)' % (name, pending[name], errors[name])
              for name in sorted(pending))))
    time.sleep(poll_secs)


def tasks_of(cluster, job):
  """{'/job:ps/task:0': 'h0:2222', ...}: the named tasks of one job."""
  return {'/job:%s/task:%d' % (job, i): address
          for i, address in enumerate(cluster[job])}


def unreachable(tasks, timeout_secs=1):
  """The tasks whose address refuses or ignores a TCP connection now.

  Args:
    tasks: dict from a task name ('/job:ps/task:0') to its 'host:port'.

  Returns:
    A dict of those of `tasks` that did not answer.
  """
  return {name: address for name, address in tasks.items()
          if _connect_error(address, timeout_secs) is not None}


def describe(tasks, cluster=None):
  """'ps task 0 at h:2222' for {'/job:ps/task:0': 'h:2222'}, joined by 'and';
  the chief is 'the chief (chief at h:2222)' (or master), or, in a cluster
  without a chief job, 'the chief (worker 0 at h:2222)'."""
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


WorkerSettings = collections.namedtuple('WorkerSettings', [
    'target', 'cluster', 'task_index', 'sync_replicas',
    'replicas_to_aggregate', 'startup_wait_secs', 'operation_timeout_secs',
    'job_name'], defaults=(False, None, 300, 300, 'worker'))
WorkerSettings.__doc__ = """A cluster worker's own settings, beside the run's
run_settings.TrainSettings (flags of the same name where there is one).

  target: str, this worker's server target ('grpc://host:port').
  cluster: dict {'ps': [host:port...], 'worker': [host:port...]}.
  task_index: int, this task's index in its job.
  sync_replicas: bool, aggregate gradients with SyncReplicasOptimizer.
  replicas_to_aggregate: int, worker steps per synchronous update; None for
    one per worker.
  startup_wait_secs: number, how long to wait for the ps tasks and, if not
    the chief, for the chief; also how long either may be away mid-run.
  operation_timeout_secs: number, the longest any op may block.
  job_name: 'worker', or the cluster's chief job ('chief' or 'master').
"""


def is_chief_worker(worker):
  """Whether a WorkerSettings is the chief's."""
  return is_chief(worker.cluster, worker.job_name, worker.task_index)


def own_task(worker):
  """'/job:worker/task:1': a WorkerSettings' task, named as TF names it."""
  return '/job:%s/task:%d' % (worker.job_name, worker.task_index)


def worker_device(worker):
  """Where a worker's own ops run: its CPU (no GPUs are placed here)."""
  return own_task(worker) + '/cpu:0'


def serve_until_interrupted(task_index, address):
  """A ps task's life once its server runs: serve until Ctrl-C (SIGINT).

  The server runs in its own threads. Python cannot interrupt
  server.join(), but it can interrupt a sleep.
  """
  print('ps task %d serving at %s; stop it (Ctrl-C) when the workers are '
        'done.' % (task_index, address), flush=True)
  try:
    while True:
      time.sleep(3600)
  except KeyboardInterrupt:
    print('ps task %d stopped.' % task_index, flush=True)
