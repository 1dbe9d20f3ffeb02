"""The ps/worker cluster of cifar10_distributed_train.py: flags or TF_CONFIG.

    cluster, job_name, task_index = resolve_cluster(
        FLAGS.job_name, FLAGS.task_index, FLAGS.ps_hosts, FLAGS.worker_hosts,
        os.environ.get('TF_CONFIG'))
    wait_for_addresses({'/job:ps/task:0': 'h0:2222'}, wait_secs=300)

Every malformed list, repeated address or out-of-range index is a ValueError
naming the flag (or TF_CONFIG) at fault; no task waits forever.
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


def cluster_from_tf_config(tf_config):
  """Reads the cluster and this task from a TF_CONFIG JSON string.

  Returns:
    (ps_hosts, worker_hosts, job_name, task_index): two lists of 'host:port',
    'ps' or 'worker', and an int.

  Raises:
    ValueError: for malformed JSON, missing or unsupported jobs, or a bad task.
  """
  try:
    config = json.loads(tf_config)
  except ValueError as e:
    raise ValueError('TF_CONFIG is not valid JSON (%s): %r' % (e, tf_config))
  cluster = config.get('cluster') if isinstance(config, dict) else None
  task = config.get('task') if isinstance(config, dict) else None
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise ValueError('TF_CONFIG needs a "cluster" and a "task" object, e.g. '
                     '{"cluster": {"ps": ["h0:2222"], "worker": ["h1:2222"]}, '
                     '"task": {"type": "worker", "index": 0}}; got %r'
                     % tf_config)
  extra = sorted(set(cluster) - {'ps', 'worker'})
  if extra:
    raise ValueError('TF_CONFIG cluster has job(s) %s; this script knows only '
                     '"ps" and "worker" (worker 0 is the chief: list a chief '
                     'as the first worker)' % ', '.join(extra))
  hosts = {}
  for job in ('ps', 'worker'):
    if not isinstance(cluster.get(job), list):
      raise ValueError('TF_CONFIG cluster needs a "%s" list of host:port' % job)
    hosts[job] = parse_hosts(','.join(map(str, cluster[job])),
                             'TF_CONFIG cluster "%s"' % job)
  job_name, task_index = task.get('type'), task.get('index', 0)
  if job_name not in ('ps', 'worker') or not isinstance(task_index, int):
    raise ValueError('TF_CONFIG task must be {"type": "ps" or "worker", '
                     '"index": <int>}; got %r' % (task,))
  return hosts['ps'], hosts['worker'], job_name, task_index


def resolve_cluster(job_name, task_index, ps_hosts, worker_hosts, tf_config):
  """Picks the cluster from the flags, else from TF_CONFIG, and checks it.

  Args:
    job_name: 'ps', 'worker' or None (the --job_name flag).
    task_index: int (the --task_index flag).
    ps_hosts, worker_hosts: str, comma-separated host:port lists (flags).
    tf_config: str or None, the TF_CONFIG environment variable.

  Returns:
    (cluster, job_name, task_index): cluster is a dict {'ps': [host:port...],
    'worker': [host:port...]}.

  Raises:
    ValueError: naming the flag or variable at fault: no cluster given, a
      malformed host list, an address listed twice, or a task index out of
      range.
  """
  if job_name or ps_hosts or worker_hosts or not tf_config:
    if not job_name:
      raise ValueError('--job_name is required (ps or worker), unless the '
                       'cluster comes from the TF_CONFIG environment variable')
    cluster = {'ps': parse_hosts(ps_hosts, '--ps_hosts'),
               'worker': parse_hosts(worker_hosts, '--worker_hosts')}
    source = '--task_index'
  else:
    ps, workers, job_name, task_index = cluster_from_tf_config(tf_config)
    cluster = {'ps': ps, 'worker': workers}
    source = 'TF_CONFIG task index'
  addresses = cluster['ps'] + cluster['worker']
  repeated = sorted(set(a for a in addresses if addresses.count(a) > 1))
  if repeated:
    raise ValueError('Address(es) %s listed more than once in the cluster: '
                     'every task needs its own host:port' % ', '.join(repeated))
  num_tasks = len(cluster[job_name])
  if not 0 <= task_index < num_tasks:
    raise ValueError('%s=%d is out of range for job "%s", which has %d '
                     'task(s): use 0..%d' % (source, task_index, job_name,
                                             num_tasks, num_tasks - 1))
  return cluster, job_name, task_index


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


def describe(tasks):
  """'ps task 0 at h:2222' for {'/job:ps/task:0': 'h:2222'}, joined by 'and';
  worker 0 is 'the chief (worker 0 at h:2222)'."""
  names = []
  for name, address in sorted(tasks.items()):
    job, index = name.split('/')[1][len('job:'):], name.rsplit(':', 1)[1]
    if (job, index) == ('worker', '0'):
      names.append('the chief (worker 0 at %s)' % address)
    else:
      names.append('%s task %s at %s' % (job, index, address))
  return ' and '.join(names)


WorkerSettings = collections.namedtuple('WorkerSettings', [
    'target', 'cluster', 'task_index', 'sync_replicas',
    'replicas_to_aggregate', 'startup_wait_secs', 'operation_timeout_secs'],
                                        defaults=(False, None, 300, 300))
WorkerSettings.__doc__ = """A cluster worker's own settings, beside the run's
run_settings.TrainSettings (flags of the same name where there is one).

  target: str, this worker's server target ('grpc://host:port').
  cluster: dict {'ps': [host:port...], 'worker': [host:port...]}.
  task_index: int, this worker's index; worker 0 is the chief.
  sync_replicas: bool, aggregate gradients with SyncReplicasOptimizer.
  replicas_to_aggregate: int, worker steps per synchronous update; None for
    one per worker.
  startup_wait_secs: number, how long to wait for the ps tasks and, if not
    the chief, for the chief; also how long either may be away mid-run.
  operation_timeout_secs: number, the longest any op may block.
"""


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
