"""A cluster worker's sessions, lost and re-created, and the tasks it
watches: what TensorFlow leaves unbounded or unsaid when a ps task or the
chief goes away (docs/distributed.md, "Faults")."""

import os
import re
import sys
import threading
import time

import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import clusters
from cifar10_support import data_files
from cifar10_support import progress
from cifar10_support import sessions
from cifar10_support import summaries
from cifar10_support import train_dirs

# How MonitoredSession's log line for an error it recovers from begins.
RECOVERED_ERROR_LOG = 'An error was raised'


def _chief(cluster):
  return clusters.describe(clusters.chief_task(cluster), cluster)


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
    self.down = clusters.unreachable(self._tasks)
    if not self.down:
      was_away, self._since = self._since is not None, None
      return 'back' if was_away else None
    if self._since is None:
      self._since = time.time()
      return 'away'
    return 'gone' if time.time() - self._since > self._wait_secs else None


def gone_for_good(tasks, wait_secs):
  return ('%s did not come back within %d s (--startup_wait_secs): stopping. '
          'The checkpoints are as they were; once the ps tasks run, start the '
          'workers again and the chief resumes from its newest checkpoint.'
          % (clusters.describe(tasks), wait_secs))


def watch_ps_tasks(worker_prefix, ps_tasks, wait_secs):
  """Ends this process, with one line and status 1, once a ps task has been
  away for `wait_secs`: closing a lost session waits for the task to answer,
  where no timeout reaches."""

  def watch():
    absence = Absence(ps_tasks, wait_secs)
    while True:
      time.sleep(1)
      if absence.poll() == 'gone':
        sys.stdout.flush()
        print('%s: %s' % (worker_prefix, gone_for_good(absence.down,
                                                       wait_secs)),
              file=sys.stderr, flush=True)
        os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watch, name='watch_ps_tasks', daemon=True).start()


def why_lost(label, ps_tasks, wait_secs, error):
  """Why a worker's session was lost ('ps task 0 at h:2222 restarted'),
  once every ps task answers: any that is down is waited for, up to
  `wait_secs`, or a TimeoutError names it. `error` is TF's log line for the
  error that lost the session, which may name the task."""
  down = clusters.unreachable(ps_tasks)
  if not down:
    # TF names '/job:ps/task:1' '/job:ps/replica:0/task:1' (not task:10).
    gone = {name: address for name, address in ps_tasks.items()
            if re.search(re.escape(name.replace('/task:', '/replica:0/task:'))
                         + r'(?!\d)', error)}
    return ('%s restarted' % clusters.describe(gone) if gone else
            'a ps task restarted, or a connection to one broke')
  print('%s: lost %s; waiting up to %d s for it to come back.'
        % (label, clusters.describe(down), wait_secs), flush=True)
  try:
    clusters.wait_for_addresses(down, wait_secs)
  except TimeoutError:
    raise TimeoutError(gone_for_good(down, wait_secs)) from None
  return '%s restarted' % clusters.describe(down)


class _SessionCreator(tf.train.SessionCreator):
  """A worker's sessions: MonitoredSession re-creates a lost one, retrying
  for ever while a ps task is down; this bounds that wait (why_lost) and
  says what the new session starts from."""

  def __init__(self, worker, config, start, global_step, errors, classes):
    self._worker = worker
    self._classes = classes
    self._config = config
    self._global_step = global_step
    self._errors = errors
    self._sessions = 0
    self._reason = None
    if worker.is_chief:
      # Restores on the chief's CPU, from its own disk, as its saver saves.
      with tf.device(worker.device):
        self.scaffold = checkpoints.restoring_scaffold(
            start.restore_plan(), start.train_dir, self._restored)
      train_dirs.remove_interrupted_saves(start.train_dir)
    else:
      self.scaffold = tf.train.Scaffold()

  def _say_lost(self, how):
    print('%s: session lost (%s): %s.' % (self._worker.label, self._reason,
                                          how), flush=True)

  def _restored(self, checkpoint, step):
    self._say_lost('no checkpoint yet, so from step 0 again' if checkpoint is
                   None else 'restored %s, global step %d; steps since then '
                   'are lost' % (os.path.basename(checkpoint), step))

  def create_session(self):
    worker = self._worker
    if self._sessions:
      self._reason = why_lost(
          worker.label, clusters.tasks_of(worker.cluster, 'ps'),
          worker.startup_wait_secs, self._errors[-1] if self._errors else '')
    if worker.is_chief:
      session = tf.train.ChiefSessionCreator(
          self.scaffold, worker.target, self._config).create_session()
    else:
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
            % (worker.startup_wait_secs, _chief(worker.cluster)))
      if not self._sessions:
        check_chief_classes(session, *self._classes)
      if self._sessions:
        self._say_lost('rejoined at global step %d'
                       % session.run(self._global_step))
    self._sessions += 1
    return session


class ChiefWatch(tf.train.SessionRunHook):
  """Raises TimeoutError, naming the chief, once it has been away for
  `wait_secs`: as a non-chief worker's hook (meanwhile it trains on, unsaved,
  and says so; a synchronous one waits for the chief's next update, bounded
  by the operation timeout), or as the evaluator's time.sleep."""

  def __init__(self, cluster, wait_secs, label=None, poll_secs=2):
    self._absence = Absence(clusters.chief_task(cluster), wait_secs)
    self._chief = _chief(cluster)
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
      print('%s: %s is back.' % (self._label, self._chief), flush=True)
    elif change == 'away':
      print('%s: %s does not answer: training on, unsaved, for up to %d s '
            'until it is back.' % (self._label, self._chief, self._wait_secs),
            flush=True)

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


def monitored_session(settings, worker, hooks, errors, global_step,
                      classes, start=None):
  """A worker's tf.train.MonitoredSession, not yet entered, in its graph
  once built: the chief's (`start` is its train_dirs.StartPoint) saves too.
  `errors` gets TF's log lines for the errors that lose sessions; classes:
  (chief_classes_variable, this worker's data_files.DataSet), checked by
  the other workers as they join."""
  config = sessions.worker_config(worker.task, worker.operation_timeout_secs,
                                  settings.log_device_placement)
  creator = _SessionCreator(worker, config, start, global_step, errors,
                            classes)
  if worker.is_chief:
    steps = settings.save_checkpoint_steps
    hooks = hooks + [
        summaries.SummaryHook(start.train_dir, settings.save_summaries_steps,
                              settings.max_steps, own_steps=False),
        tf.train.CheckpointSaverHook(
            start.train_dir, scaffold=creator.scaffold,
            save_steps=steps or None,
            save_secs=None if steps else settings.save_checkpoint_secs,
            listeners=[progress.SaveAnnouncer(start.train_dir,
                                              settings.max_steps,
                                              worker.label)])]
    if settings.save_summaries_steps:
      hooks.append(tf.train.StepCounterHook(
          every_n_steps=settings.save_summaries_steps,
          output_dir=start.train_dir))
  else:
    print('%s: waiting up to %d s for %s to initialise the variables.'
          % (worker.label, worker.startup_wait_secs, _chief(worker.cluster)),
          flush=True)
    hooks = hooks + [ChiefWatch(worker.cluster, worker.startup_wait_secs,
                                worker.label)]
  # The chief's gradient aggregation thread uses all of the 3 s grace period
  # in synchronous training (blocked on gradients that will never come).
  return tf.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                   stop_grace_period_secs=3)


def operation_timeout(worker, global_step):
  """The TimeoutError for an operation that blocked past the operation
  timeout after `global_step`, naming the tasks that no longer answer."""
  others = dict(clusters.tasks_of(worker.cluster, 'ps'),
                **clusters.training_tasks(worker.cluster))
  del others[worker.task]
  gone = clusters.unreachable(others)
  return TimeoutError(
      'an operation blocked for more than %s s (--operation_timeout_secs) '
      'after global step %s: %s'
      % (worker.operation_timeout_secs, global_step,
         '%s does not answer' % clusters.describe(gone, worker.cluster)
         if gone else
         'did another task stop, or is the input queue still filling?'))

