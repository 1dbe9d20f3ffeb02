"""A cluster worker's sessions: created, lost, re-created, or given up.

MonitoredSession re-creates a worker's session when a ps task restarts or a
connection breaks (AbortedError, UnavailableError). The chief's scaffold
then restores the newest checkpoint (checkpoints.restoring_scaffold); what
this module adds is what TensorFlow leaves unbounded or unsaid:

    LostSessions        why a session was lost, and a bounded wait for the ps
    watch_ps_tasks      ends a worker, with one line, when a ps task stays away
    ChiefSessionCreator the chief's session, through LostSessions
    WorkerSessionCreator another worker's: waits for the chief's variables
    ChiefWatchHook      another worker stops when the chief stays away
    ReleaseTokensHook   no synchronous worker left waiting at the end
    monitored_session   a worker's MonitoredSession, built of the above
    operation_timeout   what a worker says when an operation blocked
    sleep_watching_chief  the evaluator's wait, which stops when the chief
                        stays away

docs/distributed.md ("Faults") says what each fault costs.
"""

import os
import re
import sys
import threading
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import clusters
from cifar10_support import saving
from cifar10_support import sessions

# How MonitoredSession's log line for an error it recovers from begins.
RECOVERED_ERROR_LOG = 'An error was raised'
# How often a waiting worker asks whether the chief is done
# (MonitoredTrainingSession's default waits 30 s between checks).
_READY_POLL_SECS = 1
# Grace period for a closing session's threads. The chief's gradient
# aggregation thread always uses all of it in synchronous training (it is
# blocked on gradients that will never come); the input threads need far less.
_STOP_GRACE_SECS = 3


def _in_error(task):
  """A pattern for how TF's errors name `task` ('/job:ps/task:1' as
  '/job:ps/replica:0/task:1', not task:10)."""
  return re.escape(task.replace('/task:', '/replica:0/task:')) + r'(?!\d)'


class LostSessions(object):
  """Bounds and names what happens when a worker's session is lost.

  MonitoredSession re-creates a worker's session when a ps task restarts or
  a connection breaks (AbortedError, UnavailableError); while a ps task is
  down it retries for ever. A session creator calls `before_session` first:
  from the second session on, it waits for a ps task that is down, up to
  `wait_secs`, and says why the session was lost. (Mostly the task is back
  by then: closing the lost session waits for it. TF's log line for the
  error, given to `note_error`, names the task.)

  Attributes:
    reason: str, why the last session was lost ('ps task 0 at h:2222
      restarted'); None until one is.
  """

  def __init__(self, worker_prefix, ps_tasks, wait_secs):
    """
    Args:
      worker_prefix: str, the start of this worker's lines ('Worker 0').
      ps_tasks: dict from each ps task's name to its 'host:port'.
      wait_secs: number, how long to wait for a lost ps task.
    """
    self._prefix = worker_prefix
    self._ps_tasks = ps_tasks
    self._wait_secs = wait_secs
    self._sessions = 0
    self._error = ''
    self.reason = None

  def note_error(self, message):
    """Takes TF's log line for the error that lost the session."""
    self._error = message

  def created(self):
    """Call once a session has been created."""
    self._sessions += 1

  def before_session(self):
    """Call as a session is being created; True when it replaces a lost one.

    Raises:
      TimeoutError: a lost ps task did not come back in time; the message
        names it.
    """
    if not self._sessions:
      return False
    down = clusters.unreachable(self._ps_tasks)
    if not down:
      # TF's account of the error names the task that went away.
      gone = {name: address for name, address in self._ps_tasks.items()
              if re.search(_in_error(name), self._error)}
      self.reason = ('%s restarted' % clusters.describe(gone) if gone else
                     'a ps task restarted, or a connection to one broke')
      return True
    print('%s: lost %s; waiting up to %d s for it to come back.'
          % (self._prefix, clusters.describe(down), self._wait_secs),
          flush=True)
    try:
      clusters.wait_for_addresses(down, self._wait_secs)
    except TimeoutError:
      raise TimeoutError(gone_for_good(down, self._wait_secs)) from None
    self.reason = '%s restarted' % clusters.describe(down)
    return True


def gone_for_good(tasks, wait_secs):
  """What a worker says when ps tasks stay away: it stops, nothing lost."""
  return ('%s did not come back within %d s (--startup_wait_secs): stopping. '
          'The checkpoints are as they were; once the ps tasks run, start the '
          'workers again and the chief resumes from its newest checkpoint.'
          % (clusters.describe(tasks), wait_secs))


def watch_ps_tasks(worker_prefix, ps_tasks, wait_secs, poll_secs=1):
  """Ends this process, with one line and status 1, when a ps task stays away.

  A worker whose ps task went away can block where no timeout reaches it
  (closing the lost session waits for the task to answer), so a thread
  watches the ps addresses and ends the process once one has refused
  connections for `wait_secs`. A task that comes back in time resets it.

  Returns:
    The daemon thread, started.
  """

  def watch():
    away_since = None
    while True:
      time.sleep(poll_secs)
      down = clusters.unreachable(ps_tasks)
      if not down:
        away_since = None
      elif away_since is None:
        away_since = time.time()
      elif time.time() - away_since > wait_secs:
        sys.stdout.flush()
        sys.stderr.write('%s: %s\n' % (worker_prefix,
                                        gone_for_good(down, wait_secs)))
        sys.stderr.flush()
        os._exit(1)  # pylint: disable=protected-access

  thread = threading.Thread(target=watch, name='watch_ps_tasks', daemon=True)
  thread.start()
  return thread


class ChiefSessionCreator(tf.train.ChiefSessionCreator):
  """MonitoredTrainingSession's chief session, bounded when one is lost.

  The scaffold restores the newest checkpoint into each re-created session
  (checkpoints.restoring_scaffold); this waits first, up to a limit, for
  the ps tasks to come back.
  """

  def __init__(self, lost_sessions, **kwargs):
    super(ChiefSessionCreator, self).__init__(**kwargs)
    self._lost_sessions = lost_sessions

  def create_session(self):
    self._lost_sessions.before_session()
    session = super(ChiefSessionCreator, self).create_session()
    self._lost_sessions.created()
    return session


class WorkerSessionCreator(tf.train.SessionCreator):
  """A non-chief worker's session, once the chief has initialised the
  variables (polled every second).

  Like MonitoredTrainingSession's worker session creator, which polls every
  30 s; this one also says whom it is waiting for when it gives up, and
  which global step it rejoined at after a lost session.
  """

  def __init__(self, worker, config, lost_sessions, global_step):
    self._scaffold = tf.train.Scaffold()
    self._master = worker.target
    self._config = config
    self._wait_secs = worker.startup_wait_secs
    self._chief = clusters.describe(clusters.chief_task(worker.cluster),
                                    worker.cluster)
    self._label = clusters.task_label(worker.job_name, worker.task_index)
    self._lost_sessions = lost_sessions
    self._global_step = global_step

  def create_session(self):
    recovering = self._lost_sessions.before_session()
    self._scaffold.finalize()
    manager = tf.train.SessionManager(
        local_init_op=self._scaffold.local_init_op,
        ready_op=self._scaffold.ready_op,
        ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
        graph=tf.get_default_graph(), recovery_wait_secs=_READY_POLL_SECS)
    try:
      session = manager.wait_for_session(self._master, config=self._config,
                                         max_wait_secs=self._wait_secs)
    except tf.errors.DeadlineExceededError:
      raise TimeoutError(
          'The variables were still not initialised after %s s: is %s '
          'running? (--startup_wait_secs sets the wait)'
          % (self._wait_secs, self._chief))
    self._lost_sessions.created()
    if recovering:
      print('%s: session lost (%s): rejoined at global step %d.'
            % (self._label, self._lost_sessions.reason,
               session.run(self._global_step)), flush=True)
    return session


class ChiefWatchHook(tf.train.SessionRunHook):
  """A non-chief worker's check that the chief is still there.

  Nothing is saved while the chief is away, and it puts its checkpoint back
  on the ps tasks when it comes back. An asynchronous worker goes on
  training meanwhile (those steps are lost), says so, and stops, naming the
  chief, when it is away longer than `wait_secs`. (A synchronous worker
  waits for the chief's next update instead, bounded by the operation
  timeout; it runs no step, so this hook does not run.)
  """

  def __init__(self, worker, poll_secs=2):
    self._label = clusters.task_label(worker.job_name, worker.task_index)
    self._chief = clusters.chief_task(worker.cluster)
    self._cluster = worker.cluster
    self._wait_secs = worker.startup_wait_secs
    self._poll_secs = poll_secs
    self._next_poll = time.time() + poll_secs
    self._away_since = None

  def after_run(self, run_context, run_values):
    now = time.time()
    if now < self._next_poll:
      return
    self._next_poll = now + self._poll_secs
    if not clusters.unreachable(self._chief):
      if self._away_since is not None:
        print('%s: %s is back.' % (
            self._label, clusters.describe(self._chief, self._cluster)),
              flush=True)
      self._away_since = None
    elif self._away_since is None:
      self._away_since = now
      print('%s: %s does not answer: training on, '
            'unsaved, for up to %d s until it is back.'
            % (self._label, clusters.describe(self._chief, self._cluster),
               self._wait_secs), flush=True)
    elif now - self._away_since > self._wait_secs:
      raise TimeoutError(
          '%s has not answered for %d s (--startup_wait_secs): '
          'stopping, since nothing is saved without it. Start it again, then '
          'this worker.' % (clusters.describe(self._chief, self._cluster),
                            self._wait_secs))


class ReleaseTokensHook(tf.train.SessionRunHook):
  """On a clean stop, gives every worker a token of the synchronous queue.

  Once the global step reaches max_steps no update follows, so a worker that
  already queued its gradients would wait for a token until its operation
  timeout; with one it finishes its step and sees that training is over.
  When the chief stops it closes the queue, which also ends every wait (as
  the end of the input), and then no token is needed.
  """

  def __init__(self, release_op):
    self._release_op = release_op

  def end(self, session):
    try:
      session.run(self._release_op)
    except tf.errors.CancelledError:
      pass  # The chief has closed the queue.


def monitored_session(settings, worker, hooks, lost_sessions, global_step,
                      start=None):
  """The chief's session (initialises or restores, saves) or another's.

  Either is re-created when a ps task restarts or a connection breaks: the
  chief's restores the newest checkpoint again, another's waits for it.
  Call it inside the worker's graph, once built.

  Args:
    settings: the run's run_settings.TrainSettings (max_steps, the save_*
      settings).
    worker: the clusters.WorkerSettings.
    hooks: the worker's own hooks (stop, log, NaN check, ...).
    lost_sessions: the worker's LostSessions.
    global_step: the global step variable.
    start: the chief's train_dirs.StartPoint (where it restores from and
      saves to); None for another worker.

  Returns:
    A tf.train.MonitoredSession, not yet entered.
  """
  config = sessions.worker_config(clusters.own_task(worker),
                                  worker.operation_timeout_secs,
                                  settings.log_device_placement)
  if clusters.is_chief_worker(worker):
    return _chief_session(settings, worker, hooks, lost_sessions, config,
                          start)
  print('%s: waiting up to %d s for %s to initialise the variables.'
        % (clusters.task_label(worker.job_name, worker.task_index),
           worker.startup_wait_secs,
           clusters.describe(clusters.chief_task(worker.cluster),
                             worker.cluster)), flush=True)
  hooks = hooks + [ChiefWatchHook(worker)]
  return tf.train.MonitoredSession(
      session_creator=WorkerSessionCreator(worker, config, lost_sessions,
                                           global_step),
      hooks=hooks, stop_grace_period_secs=_STOP_GRACE_SECS)


def _chief_session(settings, worker, hooks, lost_sessions, config, start):
  """The chief's part of `monitored_session`."""

  def on_recovery(checkpoint, step):
    if checkpoint is None:
      restored = 'no checkpoint yet, so from step 0 again'
    else:
      restored = 'restored %s, global step %d; steps since then are lost' % (
          os.path.basename(checkpoint), step)
    print('%s: session lost (%s): %s.' % (
        clusters.task_label(worker.job_name, worker.task_index),
        lost_sessions.reason, restored), flush=True)

  train_dir = start.train_dir
  plan = start.restore_plan()
  # Restores on the chief's CPU, from its own disk, as its saver saves.
  with tf.device(clusters.worker_device(worker)):
    scaffold = checkpoints.restoring_scaffold(plan, train_dir, on_recovery)
  # After the NaN check, as in cifar10_train, so a diverged step is never
  # saved. The global step moves with every worker's updates: re-read each
  # run.
  hooks = hooks + saving.saving_hooks(
      scaffold, train_dir, settings, own_steps=False,
      label=clusters.task_label(worker.job_name, worker.task_index))
  if settings.save_summaries_steps:
    hooks.append(tf.train.StepCounterHook(
        every_n_steps=settings.save_summaries_steps, output_dir=train_dir))
  # As tf.train.MonitoredTrainingSession(is_chief=True) with no
  # checkpoint_dir (the scaffold restores, from any trainer's checkpoint),
  # and a session creator that bounds the wait for a lost ps task.
  return tf.train.MonitoredSession(
      session_creator=ChiefSessionCreator(
          lost_sessions, scaffold=scaffold, master=worker.target,
          config=config),
      hooks=hooks, stop_grace_period_secs=_STOP_GRACE_SECS)


def operation_timeout(worker, global_step):
  """The TimeoutError for an operation that blocked past the worker's
  operation timeout after `global_step`, naming the tasks that no longer
  answer."""
  others = dict(clusters.tasks_of(worker.cluster, 'ps'),
                **clusters.training_tasks(worker.cluster))
  del others[clusters.own_task(worker)]
  gone = clusters.unreachable(others)
  return TimeoutError(
      'an operation blocked for more than %s s (--operation_timeout_secs) '
      'after global step %s: %s'
      % (worker.operation_timeout_secs, global_step,
         '%s does not answer' % clusters.describe(gone, worker.cluster)
         if gone else
         'did another task stop, or is the input queue still filling?'))


def sleep_watching_chief(cluster, wait_secs):
  """A sleep for the evaluator's checkpoint loop that watches the chief too.

  The evaluator waits for checkpoints up to --max_steps; if the chief stops
  before writing one (a signal, a NaN loss, a full disk), none comes. Once
  the chief has refused connections for `wait_secs`, the sleep raises
  TimeoutError naming it, and the evaluator stops, as the workers do.

  Args:
    cluster: the cluster dict from TF_CONFIG (the chief's address).
    wait_secs: number, --startup_wait_secs.

  Returns:
    function(secs), a drop-in for time.sleep.
  """
  chief = clusters.chief_task(cluster)
  away_since = []

  def sleep(secs):
    time.sleep(secs)
    if not clusters.unreachable(chief):
      del away_since[:]
    elif not away_since:
      away_since.append(time.time())
    elif time.time() - away_since[0] > wait_secs:
      raise TimeoutError(
          '%s has not answered for %d s (--startup_wait_secs) and no '
          'checkpoint at --max_steps has come: stopping. Start the chief '
          'again, then this evaluator.' % (clusters.describe(chief, cluster),
                                           wait_secs))
  return sleep
