"""The ps/worker cluster of cifar10_distributed_train.py (`resolve`), and what
TensorFlow leaves unbounded when a task goes away (docs/distributed.md).
A dict of tasks maps each name, '/job:ps/task:0', to its 'host:port'."""

import collections
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import app
import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import data_files
from cifar10_support import run_flags
from cifar10_support import signals

CHIEF_JOBS = ('chief', 'master')
POLL_SECS = 2  # How often the watches ask whether a task answers.
ONE_EVALUATOR = ('one evaluator follows a run, as TensorFlow allows at most '
                 'one: set the evaluator replicas to 1')


class Task(collections.namedtuple('Task', [
    'cluster', 'job_name', 'task_index', 'startup_wait_secs',
    'operation_timeout_secs'], defaults=(300, 300))):
  """This task; its cluster maps 'ps', 'worker' and a chief job to lists of
  'host:port' (never 'evaluator'; None for an evaluator from --job_name)."""

  @property
  def chief_job(self):
    return next((job for job in CHIEF_JOBS if job in self.cluster), 'worker')

  @property
  def is_chief(self):
    return (self.job_name, self.task_index) == (self.chief_job, 0)

  @property
  def name(self):
    return '/job:%s/task:%d' % (self.job_name, self.task_index)

  @property
  def device(self):
    return self.name + '/cpu:0'  # Workers place no GPU ops.

  @property
  def label(self):
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
    """The chief first, then any other workers."""
    return dict(self.chief_task, **self.tasks_of('worker'))


def parse_hosts(value, flag_name, error):
  """['h0:2222', 'h1:2222'] from 'h0:2222, h1:2222', else `error` at fault."""
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


def _from_tf_config(tf_config):
  """(cluster, job_name, task_index) from TF_CONFIG, else a ValueError."""
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  try:
    jobs = resolver.cluster_spec().as_dict()
    job_name, task_index = resolver.task_type, resolver.task_id or 0
  except (TypeError, ValueError) as e:  # Bad JSON, or not {"job": [...]}.
    raise ValueError('TF_CONFIG is not %s (%s): %r' % (
        'valid JSON' if isinstance(e, json.JSONDecodeError) else
        'a cluster TensorFlow can read', e, tf_config))
  if not jobs or job_name is None:
    raise ValueError(
        'TF_CONFIG needs a "cluster" and a "task" object, e.g. {"cluster": '
        '{"ps": ["h0:2222"], "worker": ["h1:2222"]}, "task": {"type": '
        '"worker", "index": 0}}; got %r' % tf_config)
  extra = sorted(set(jobs) - {'ps', 'worker', 'evaluator'} - set(CHIEF_JOBS))
  if extra:
    raise ValueError('TF_CONFIG cluster has job(s) %s; this script knows '
                     '"ps", "worker", "chief" or "master" (the chief), and '
                     '"evaluator"' % ', '.join(extra))
  if len(jobs.get('evaluator') or ()) > 1:  # Their addresses are never used.
    raise ValueError('TF_CONFIG cluster lists %d "evaluator" tasks; %s'
                     % (len(jobs['evaluator']), ONE_EVALUATOR))
  chiefs = [job for job in CHIEF_JOBS if job in jobs]
  if len(chiefs) > 1:
    raise ValueError('TF_CONFIG cluster has both a "chief" and a "master" '
                     'job: a cluster has one chief, under either name')
  cluster = {}
  for job in ['ps'] + chiefs + ['worker']:
    tasks = jobs.get(job)
    if job == 'worker' and chiefs and not tasks:
      continue  # A chief may train alone.
    if tasks is None:  # No "ps", or no "worker" and no chief.
      beside = ' beside its "%s" job' % chiefs[0] if chiefs else ''
      raise ValueError('TF_CONFIG cluster needs a "%s" list of host:port%s' % (
          job, beside + ': this script trains with parameter servers'
          if job == 'ps' else ''))
    if isinstance(tasks, dict) and tasks:  # Some indexes only: a sparse map.
      raise ValueError('TF_CONFIG cluster "%s" maps some task indexes only: '
                       'this script needs a list of every task\'s host:port'
                       % job)
    cluster[job] = parse_hosts(','.join(tasks), 'TF_CONFIG cluster "%s"' % job,
                               ValueError)
    if job in chiefs and len(cluster[job]) != 1:
      raise ValueError('TF_CONFIG cluster "%s" lists %d tasks; a cluster has '
                       'one chief' % (job, len(cluster[job])))
  task = json.dumps({'type': job_name, 'index': task_index})
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
  """This Task, from the cluster flags, else from TF_CONFIG; app.UsageError
  names the flag at fault, ValueError (one line) what in TF_CONFIG."""
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


def _refusal(address):
  """The OSError of a TCP connection to 'host:port' now, or None."""
  host, _, port = address.rpartition(':')
  try:
    socket.create_connection((host.strip('[]'), int(port)), timeout=1).close()
  except OSError as e:
    return e
  return None


def unreachable(tasks):
  """Those of `tasks` that refuse or ignore a TCP connection now."""
  return {name: address for name, address in tasks.items()
          if _refusal(address)}


def wait_for_addresses(tasks, wait_secs):
  """Returns once every one of `tasks` accepts TCP connections, or raises
  TimeoutError after `wait_secs` naming each that did not, and why."""
  deadline = time.time() + wait_secs
  while True:
    errors = {name: _refusal(address) for name, address in tasks.items()}
    tasks = {name: tasks[name] for name in tasks if errors[name]}
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


def _gone_for_good_message(tasks, wait_secs):
  return ('%s did not come back within %d s (--startup_wait_secs): stopping. '
          'The checkpoints are as they were; once the ps tasks run, start the '
          'workers again and the chief resumes from its newest checkpoint.'
          % (describe(tasks), wait_secs))


def wait_for_ps_tasks(task):
  """wait_for_addresses for the ps tasks; then a thread ends this process,
  with one line and status 1, once one has been away task.startup_wait_secs:
  closing a lost session waits for it, unbounded."""
  ps_tasks, wait_secs = task.tasks_of('ps'), task.startup_wait_secs
  wait_for_addresses(ps_tasks, wait_secs)

  def watch():
    since = None  # Since when some ps task has not answered.
    while True:
      time.sleep(1)
      down = unreachable(ps_tasks)
      since = (since or time.time()) if down else None
      if down and time.time() - since > wait_secs:
        sys.stdout.flush()
        print('%s: %s' % (task.label, _gone_for_good_message(down, wait_secs)),
              file=sys.stderr, flush=True)
        os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watch, name='watch_ps_tasks', daemon=True).start()


def wait_for_lost_ps_tasks(label, ps_tasks, wait_secs, error):
  """Why a worker's session was lost ('ps task 0 at h:2222 went away and came
  back': restarted, or a connection to it broke), once every ps task
  answers, waiting up to `wait_secs` (else TimeoutError) for any that is
  down; `error`: TF's log line for the error, which may name it."""
  down = unreachable(ps_tasks)
  if not down:
    # TF names '/job:ps/task:1' '/job:ps/replica:0/task:1' (not task:10).
    gone = {name: address for name, address in ps_tasks.items()
            if re.search(re.escape(name.replace('/task:', '/replica:0/task:'))
                         + r'(?!\d)', error)}
    return ('%s went away and came back' % describe(gone) if gone else
            'a ps task restarted, or a connection to one broke')
  print('%s: lost %s; waiting up to %d s for it to come back.'
        % (label, describe(down), wait_secs), flush=True)
  try:
    wait_for_addresses(down, wait_secs)
  except TimeoutError:
    raise TimeoutError(_gone_for_good_message(down, wait_secs)) from None
  return '%s went away and came back' % describe(down)


class BoundedSessionCreator(tf.train.SessionCreator):
  """A worker's sessions, the waits for the chief's variables and for a lost
  ps task bounded by startup_wait_secs; each new one says what it starts
  from. The chief's `scaffold` restores `start` (a train_dirs.StartPoint),
  then the newest checkpoint; `hooks`: ChiefWatch, or the chief's
  WorkersWatch; a first session checks `classes` (chief_classes_variable,
  DataSet); `lost_session_errors` gets TF's RECOVERED_ERROR_LOG lines."""

  RECOVERED_ERROR_LOG = 'An error was raised'

  def __init__(self, worker, target, config, start, global_step, classes,
               max_steps, token_op=None):
    self._worker, self._target, self._config = worker, target, config
    self._global_step, self._classes = global_step, classes
    self._sessions = 0
    self._reason = None
    self.lost_session_errors = collections.deque(maxlen=1)
    if worker.is_chief:
      # Restores on the chief's CPU, from its own disk, as its saver saves.
      with tf.device(worker.device):
        self.scaffold = start.scaffold(on_recovery=self._restored)
    else:
      self.scaffold = tf.train.Scaffold()
    self.hooks = [WorkersWatch(worker, global_step, max_steps, token_op)
                  if worker.is_chief else ChiefWatch(worker)]

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
    if self._sessions:  # Lost: the deque holds the last error, if any.
      self._reason = wait_for_lost_ps_tasks(
          worker.label, worker.tasks_of('ps'), worker.startup_wait_secs,
          ''.join(self.lost_session_errors))
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
          recovery_wait_secs=1)
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
        variable, data_set = self._classes
        names = tuple(session.run(variable).decode('utf-8').split('\n'))
        if names != data_set.class_names:
          raise checkpoints.ClassesMismatchError(
              'the data in %s has %s, but the chief\'s has %s: every worker '
              'must read the same data set (--data_dir, --dataset)'
              % (data_set.directory, data_set.describe_classes(),
                 data_files.describe_classes(names)))
    self._sessions += 1
    return session


class ChiefWatch(tf.train.SessionRunHook):
  """Raises TimeoutError, naming the chief, once it has been away for
  task.startup_wait_secs: as a non-chief worker's hook (which meanwhile
  trains on, unsaved, and says so), or polled by `run_evaluator`."""

  def __init__(self, task):
    self._chief = describe(task.chief_task, task.chief_job)
    self._task = task
    self._away_since = None
    self._next_poll = time.time() + POLL_SECS

  def poll_chief(self, then):
    """Whether the chief answers; TimeoutError + `then` if away too long."""
    if not unreachable(self._task.chief_task):
      self._away_since = None
      return True
    self._away_since = self._away_since or time.time()
    if time.time() - self._away_since > self._task.startup_wait_secs:
      raise TimeoutError('%s has not answered for %d s (--startup_wait_secs)%s'
                         % (self._chief, self._task.startup_wait_secs, then))
    return False

  def after_run(self, run_context, run_values):
    if time.time() >= self._next_poll:
      self._next_poll = time.time() + POLL_SECS
      was_away, label = self._away_since is not None, self._task.label
      answers = self.poll_chief(': stopping, since nothing is saved without '
                                'it. Start it again, then this worker.')
      if answers and was_away:
        signals.print_line('%s: %s is back.' % (label, self._chief))
      elif not answers and not was_away:
        signals.print_line(
            '%s: %s does not answer: training on, unsaved, for up to %d s '
            'until it is back.' % (label, self._chief,
                                   self._task.startup_wait_secs))


def run_evaluator(task, flag_values, eval_script):
  """Runs eval_script (cifar10_eval.py) with the flags set, following
  --train_dir until --max_steps; returns its exit status (128 + N for
  signal N). By the flags, this process becomes it. From TF_CONFIG, as a
  child whose lines and SIGINT, SIGTERM and SIGHUP are passed on: once it
  waits for a checkpoint and the chief has been away task.startup_wait_secs,
  it is stopped and TimeoutError says why (never while a checkpoint at
  --max_steps waits to be looked at)."""
  given = run_flags.given(flag_values)
  given.pop('use_fp16', None)  # Its note would only puzzle here.
  command = ([sys.executable, eval_script] + list(given.values()) +
             ['--checkpoint_dir=' + flag_values.train_dir,
              '--until_step=%d' % flag_values.max_steps,
              '--undefok=' + ','.join(given)])  # Those it does not take.
  if not task.cluster:
    os.execv(sys.executable, command)
  # Its own session: a signal at the terminal reaches it once, from here.
  evaluator = subprocess.Popen(command, start_new_session=True,
                               stdout=subprocess.PIPE)
  for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(signum) is not signal.SIG_IGN:  # Ignored: it too.
      signal.signal(signum, lambda signum, _: evaluator.send_signal(signum))
  watch, waiting, seen, pending = ChiefWatch(task), False, None, b''
  try:
    while True:
      if select.select([evaluator.stdout], [], [], POLL_SECS)[0]:
        data = os.read(evaluator.stdout.fileno(), 1 << 16)
        if not data:
          code = evaluator.wait()
          return 128 - code if code < 0 else code
        *lines, pending = (pending + data).split(b'\n')
        for line in lines:
          signals.print_line(line.decode(errors='replace'))
        if lines:  # Its lines between looks (evaluation.new_checkpoints').
          waiting = lines[-1].startswith((b'Waiting for a new', b'No check'))
          if waiting:  # What it has looked at, read once per look.
            seen = checkpoints.newest(flag_values.train_dir)
      elif waiting:
        try:
          watch.poll_chief(' and no checkpoint at --max_steps has come: '
                           'stopping. Start the chief again, then this '
                           'evaluator.')
        except TimeoutError:
          last = checkpoints.newest(flag_values.train_dir)
          if (checkpoints.step_of(last) or 0) < flag_values.max_steps or (
              last == seen):  # None there, or it was skipped.
            raise
          waiting = False  # It has yet to look at the last checkpoint.
  finally:
    if evaluator.poll() is None:
      evaluator.terminate()
      evaluator.wait()


class WorkersWatch(tf.train.SessionRunHook):
  """The chief's: a thread says when another training task that answered
  stops answering, once, and when it is back; synchronous, it then runs
  token_op (the worker may have taken the token the next update waits for).
  Silent once the global step reaches max_steps or this task ends."""

  def __init__(self, task, global_step, max_steps, token_op):
    self._task, self._global_step = task, global_step
    self._max_steps, self._token_op = max_steps, token_op
    self._others = {name: address for name, address
                    in task.training_tasks.items() if name != task.name}
    self._answered, self._away = set(), set()  # Whatever the session.
    self._ended = False

  def after_create_session(self, session, coord):
    # Not after_run: the chief may be blocked in a run, on that token.
    thread = threading.Thread(target=self._watch, args=(session, coord),
                              name='watch_workers', daemon=True)
    coord.register_thread(thread)  # Joined as the session closes.
    thread.start()

  def end(self, session):
    self._ended = True

  def _say(self, name, what):
    try:  # One write: the main thread prints too.
      sys.stdout.write('%s: %s %s\n' % (self._task.label, describe(
          {name: self._others[name]}, self._task.chief_job), what))
      sys.stdout.flush()
    except (OSError, ValueError):
      pass  # A closed output: the main thread's next line stops the run.

  def _watch(self, session, coord):
    while not coord.wait_for_stop(POLL_SECS):
      down = unreachable(self._others)
      for name in sorted(self._others):
        if coord.should_stop() or self._ended:
          return
        if name not in down:
          self._answered.add(name)
          if name in self._away:
            self._away.discard(name)
            self._say(name, 'is back.')
          continue
        if name not in self._answered or name in self._away:
          continue
        try:
          if session.run(self._global_step) >= self._max_steps:
            continue
          self._away.add(name)
          self._say(name, 'does not answer: training on without it until '
                    'it is back%s.' % (', the workers still here making up '
                                       'its share of each update' if
                                       self._token_op is not None else ''))
          if self._token_op is not None:
            session.run(self._token_op)
        except (tf.errors.OpError, RuntimeError):
          pass  # Lost or closed; a new session's hook hands out tokens.


def wait_for_queue_runners():
  """Waits up to 10 s for the queue runners' threads a closed session left:
  TensorFlow aborts the process if Python exits under one."""
  deadline = time.time() + 10
  for thread in threading.enumerate():
    if thread.name.endswith(('(_run)', '(_close_on_stop)')):
      thread.join(max(0.0, deadline - time.time()))


def chief_classes_variable(data_set):
  """The chief's class names, one string of a name a line, never saved;
  build it under the worker graph's replica device setter (the ps tasks)."""
  return tf.get_variable(
      'chief_class_names', trainable=False,
      initializer=tf.constant('\n'.join(data_set.class_names)),
      collections=[tf.GraphKeys.GLOBAL_VARIABLES, checkpoints.NOT_SAVED])


def operation_timeout_error(worker, global_step):
  """The TimeoutError for `worker`'s operation that blocked past its timeout
  after `global_step`, naming the other tasks that do not answer now."""
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
