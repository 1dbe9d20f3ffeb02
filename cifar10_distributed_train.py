"""Trains the CIFAR-10 model on several machines: TF's ps/worker runtime.

Between-graph replication over gRPC. Parameter-server (ps) tasks hold the
variables and serve them until they are stopped; every worker task builds the
same model with its variables placed on the ps tasks, reads its own input
pipeline on its own CPU and trains. Worker 0 is the chief: it initialises the
variables (or restores the newest checkpoint in --train_dir) and writes the
checkpoints and summaries, on its own disk, readable by cifar10_eval.py.

One ps and two workers on three machines (start them in any order; each task
gets the full host lists and its own --job_name/--task_index):

    # on ps0.example.com
    python cifar10_distributed_train.py --job_name=ps --task_index=0 \
        --ps_hosts=ps0.example.com:2222 \
        --worker_hosts=w0.example.com:2222,w1.example.com:2222
    # on w0.example.com (the chief) and w1.example.com
    python cifar10_distributed_train.py --job_name=worker --task_index=0 \
        --ps_hosts=... --worker_hosts=... --data_dir=/tmp/cifar10_data
    python cifar10_distributed_train.py --job_name=worker --task_index=1 \
        --ps_hosts=... --worker_hosts=... --data_dir=/tmp/cifar10_data

On one machine, --local_cluster=1,2 starts one ps task and two workers,
in a network namespace that no other machine reaches. Every task's server
listens on every network interface and runs any graph sent to it, without
authentication: run a cluster only where no one else can reach it
(docs/distributed.md#security).

Instead of the four cluster flags, a task may read the standard TF_CONFIG
environment variable, where a cluster manager may add a chief job and an
evaluator task. Updates are asynchronous unless --sync_replicas; training
stops when the global step reaches --max_steps. No task waits forever, and a
killed task can be started again with the same command. All this, and what
each task prints: docs/distributed.md.
"""

import contextlib
import os
import sys
import time
import zlib

from cifar10_support import console
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
from cifar10_support import checkpoints
from cifar10_support import clusters
from cifar10_support import download
from cifar10_support import evaluation
from cifar10_support import local_cluster
from cifar10_support import progress
from cifar10_support import run_flags
from cifar10_support import sessions
from cifar10_support import signals
from cifar10_support import summaries
from cifar10_support import train_dirs

FLAGS = flags.FLAGS
# cifar10_train.py's flags, and cifar10_eval.py's for the evaluator task.
run_flags.define_train_flags()
evaluation.define_eval_flags()
flags.adopt_module_key_flags(cifar10)
flags.adopt_module_key_flags(run_flags)
flags.adopt_module_key_flags(evaluation)

flags.DEFINE_enum('job_name', None, ['ps', 'worker', 'evaluator'],
                  'This task\'s job: "ps", "worker" or "evaluator" (else '
                  'from TF_CONFIG).')
flags.DEFINE_integer('task_index', 0,
                     'Index of this task within its job; worker 0 is the '
                     'chief, unless TF_CONFIG has a chief job.')
flags.DEFINE_string('ps_hosts', '',
                    'Comma-separated host:port list of the ps tasks.')
flags.DEFINE_string('worker_hosts', '',
                    'Comma-separated host:port list of the worker tasks.')
flags.DEFINE_boolean('sync_replicas', False,
                     'Aggregate the gradients of --replicas_to_aggregate '
                     'worker steps into each update (SyncReplicasOptimizer) '
                     'instead of applying every worker\'s step on its own.')
flags.DEFINE_integer('replicas_to_aggregate', -1,
                     'Worker steps averaged into one update with '
                     '--sync_replicas; -1 means the number of workers (with '
                     'a chief job, the chief and the workers).')
flags.register_validator(
    'replicas_to_aggregate', lambda value: value == -1 or value >= 1,
    '--replicas_to_aggregate must be -1 (the number of workers) or at least 1')
flags.register_multi_flags_validator(
    ['replicas_to_aggregate', 'sync_replicas'],
    lambda values: values['replicas_to_aggregate'] == -1 or values[
        'sync_replicas'],
    '--replicas_to_aggregate only applies with --sync_replicas')
flags.DEFINE_list('local_cluster', None,
                  'NUM_PS,NUM_WORKERS: run a whole cluster on this machine '
                  'instead of one task, every task a child process given '
                  'the other flags, in a network namespace of its own that '
                  'no other machine reaches (Linux); it ends when the '
                  'workers are done.')
flags.register_validator(
    'local_cluster', lambda value: value is None or (
        len(value) == 2 and all(n.isdigit() and int(n) > 0 for n in value)),
    '--local_cluster takes two positive counts: NUM_PS,NUM_WORKERS, e.g. 1,2')
flags.register_multi_flags_validator(
    ['local_cluster', 'job_name', 'ps_hosts', 'worker_hosts'],
    lambda values: not values['local_cluster'] or not (
        values['job_name'] or values['ps_hosts'] or values['worker_hosts']),
    '--local_cluster starts every task itself: drop --job_name, --ps_hosts '
    'and --worker_hosts')
flags.DEFINE_integer('startup_wait_secs', 300,
                     'How long a worker waits for the ps tasks to answer and, '
                     'if not the chief, for the chief to initialise the '
                     'variables; also how long a ps task (or, training '
                     'asynchronously, the chief) may be away mid-run before '
                     'the worker stops.', lower_bound=1)
flags.DEFINE_integer('operation_timeout_secs', 300,
                     'A worker fails when one operation (a dequeue, a '
                     'synchronous update) blocks longer than this.',
                     lower_bound=1)

_CLOSED_QUEUE = ('the synchronous token queue on the ps tasks is closed, as '
                 'the chief leaves it when it stops: either the chief stopped '
                 'early, or the ps tasks are still those of an earlier '
                 'synchronous run (a new synchronous run needs fresh ps '
                 'tasks)')


class ClusterError(RuntimeError):
  """Another task stopped, or left state behind; the message says which."""


class ReleaseTokensHook(tf.train.SessionRunHook):
  """On a clean stop, runs `release_op`, which gives every worker a token of
  the synchronous queue: no update follows max_steps, so a worker that has
  queued its gradients would otherwise wait for one until its operation
  timeout."""

  def __init__(self, release_op):
    self._release_op = release_op

  def end(self, session):
    try:
      session.run(self._release_op)
    except tf.errors.CancelledError:
      pass  # The chief has closed the queue, which ends every wait too.


def build_worker_graph(settings, data_set, worker, replicas=None):
  """Builds one worker's training graph in the default graph.

  Variables go round-robin to the ps tasks (float32 whatever
  settings.compute_dtype); every other op, the checkpoint saver included, to
  this worker's CPU, so the chief saves on its own disk. worker: its
  clusters.Task; replicas: the worker steps averaged into each update
  (SyncReplicasOptimizer), None for asynchronous updates; data_set: the
  data_files.DataSet this worker reads.

  Returns:
    A dict of 'global_step', 'chief_classes' (the chief's class names, that
    the other workers check theirs against), 'step_before_update' (int64
    scalar, the global step read before this worker's gradients are
    computed), 'loss',
    'train_op', and, when synchronous (else None), 'sync_optimizer',
    'release_op' (hands a token to every worker, so none stays blocked at the
    end) and 'token_op' (hands out the token a worker that stopped answering
    may have taken with it, without which the next update never comes).
  """
  num_workers = len(worker.training_tasks)
  if settings.seed is not None:
    # Each worker its own seed, drawn from --seed and the task; what that
    # does not make reproducible: docs/distributed.md#seed.
    tf.set_random_seed(zlib.crc32(b'%d %s' % (settings.seed,
                                              worker.name.encode())))
  setter = tf.train.replica_device_setter(
      worker_device=worker.device,
      cluster=tf.train.ClusterSpec(worker.cluster))
  # tf.device rejects device functions in TF 2; the v1 form takes them.
  with tf.compat.v1.device(setter):
    global_step = tf.train.get_or_create_global_step()
    chief_classes = clusters.chief_classes_variable(data_set)
    images, labels = cifar10.distorted_inputs(
        settings.data_dir, settings.batch_size, use_fp16=settings.use_fp16,
        num_threads=settings.input_threads, data_set=data_set)
    loss = cifar10.loss(cifar10.inference(images, settings.compute_dtype,
                                          data_set.num_classes), labels)
    num_examples_per_epoch = data_set.records(data_set.train_files)
    # The step the logger prints: read in the same run as the update, but
    # ordered before it, so that the read never sees this worker's own update
    # (other workers' may land in between; they show in the next line).
    step_before_update = global_step.read_value()
    sync_optimizer = release_op = token_op = None
    if replicas:
      # cifar10.train's step, the gradients of `replicas` worker steps
      # averaged into each update. The chief applies the moving averages
      # after each update, under cifar10.train's names (cifar10_eval.py
      # restores them).
      lr = cifar10.learning_rate(global_step, settings.batch_size,
                                 num_towers=replicas,
                                 num_examples_per_epoch=num_examples_per_epoch)
      loss_averages_op = cifar10.add_loss_summaries(loss)
      sync_optimizer = tf.train.SyncReplicasOptimizer(
          tf.train.GradientDescentOptimizer(lr),
          replicas_to_aggregate=replicas, total_num_replicas=num_workers,
          variable_averages=tf.train.ExponentialMovingAverage(
              cifar10.MOVING_AVERAGE_DECAY, global_step),
          variables_to_average=tf.trainable_variables())
      with tf.control_dependencies([loss_averages_op, step_before_update]):
        grads = sync_optimizer.compute_gradients(loss)
      train_op = sync_optimizer.apply_gradients(grads, global_step=global_step)
      cifar10.add_weight_and_gradient_summaries(grads)
      release_op = sync_optimizer.get_init_tokens_op(
          num_tokens=max(replicas, num_workers))
      # One token, as a worker holds at most one; TF's op refuses fewer than
      # its first update needs (replicas less the workers). A token too many
      # only lets one worker step more in, dropped as stale or averaged in.
      token_op = sync_optimizer.get_init_tokens_op(
          num_tokens=max(1, replicas - num_workers))
      # At the end the chief's aggregation thread waits for gradients that
      # will not come, until closing the session cancels it: a normal end,
      # not an error to print from a dying thread.
      sync_optimizer.get_chief_queue_runner()._queue_closed_exception_types = (  # pylint: disable=protected-access
          tf.errors.OutOfRangeError, tf.errors.CancelledError)
    else:
      with tf.control_dependencies([step_before_update]):
        train_op = cifar10.train(
            loss, global_step, settings.batch_size,
            num_examples_per_epoch=num_examples_per_epoch)
  with tf.device(worker.device):
    tf.add_to_collection(tf.GraphKeys.SAVERS,
                         tf.train.Saver(checkpoints.saved_variables(),
                                        sharded=False, allow_empty=True,
                                        save_relative_paths=True))
  return {'global_step': global_step, 'chief_classes': chief_classes,
          'step_before_update': step_before_update, 'loss': loss,
          'train_op': train_op,
          'sync_optimizer': sync_optimizer, 'release_op': release_op,
          'token_op': token_op}


def step_hooks(logger, max_steps):
  """Every worker's hooks: stop at max_steps, log (the logger stops on a NaN
  loss, before the chief's hooks write that step)."""
  return [tf.train.StopAtStepHook(last_step=max_steps), logger]


def train(settings, data_set, worker, target, replicas=None):
  """Runs one worker (a clusters.Task; target: its server's) until the
  global step reaches settings.max_steps, synchronously when `replicas` (see
  build_worker_graph), on data_files.DataSet data_set (download.prepare's);
  only the chief touches settings.train_dir.

  Returns:
    The SIGINT or SIGTERM that stopped this worker early, or None.

  Raises:
    TimeoutError: another task is away, or an op blocked past the
      operation timeout.
    ClusterError: synchronous training found its token queue closed.
    train_dirs.RUN_ERRORS: a NaN loss; on the chief, what cifar10_train.py
      stops on (a checkpoint of another model, a busy train_dir, a full
      disk).
  """
  label, is_chief = worker.label, worker.is_chief
  start = None
  with contextlib.ExitStack() as claimed:
    if is_chief:  # Only the chief reads and writes train_dir.
      start = claimed.enter_context(
          train_dirs.claim(settings.train_dir, settings.fresh_start,
                           data_set, settings.seed))
    with tf.Graph().as_default():
      graph = build_worker_graph(settings, data_set, worker, replicas)
      logger = progress.StepLogger(graph['loss'], settings.batch_size,
                                   settings.log_frequency,
                                   settings.train_dir if is_chief else None,
                                   step=graph['step_before_update'],
                                   label=label)
      config = sessions.worker_config(worker.name,
                                      worker.operation_timeout_secs,
                                      settings.log_device_placement)
      # Bounds what TensorFlow leaves unbounded when a task goes away; the
      # chief's sessions restore train_dir's newest checkpoint (its
      # scaffold). Its hooks: the other workers watch the chief; the chief
      # watches them, handing out their token when one is lost.
      creator = clusters.BoundedSessionCreator(
          worker, target, config, start, global_step=graph['global_step'],
          classes=(graph['chief_classes'], data_set),
          max_steps=settings.max_steps, token_op=graph['token_op'])
      hooks = step_hooks(logger, settings.max_steps)
      if replicas:
        hooks += [graph['sync_optimizer'].make_session_run_hook(is_chief),
                  ReleaseTokensHook(graph['release_op'])]
      hooks += creator.hooks
      if is_chief:
        # After the NaN check, so that a diverged step is never saved.
        steps = settings.save_checkpoint_steps
        hooks += [
            summaries.SummaryHook(settings.train_dir,
                                  settings.save_summaries_steps,
                                  settings.max_steps, own_steps=False),
            train_dirs.CheckpointSaverHook(
                settings.train_dir, creator.scaffold, settings.max_steps,
                save_steps=steps, save_secs=settings.save_checkpoint_secs,
                label=label)]
      # Last: the signals are caught until the final checkpoint is written.
      stop = signals.StopOnSignal()
      hooks.append(stop)
      try:
        # A short grace period: at a synchronous run's end the chief's
        # gradient aggregation thread, blocked on gradients that will never
        # come, holds the stop for all of it.
        with console.on_tensorflow_log(
            creator.RECOVERED_ERROR_LOG, creator.lost_session_errors.append
        ), tf.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                     stop_grace_period_secs=3) as mon_sess:
          while not mon_sess.should_stop():
            mon_sess.run(graph['train_op'])
        clusters.wait_for_queue_runners()
      except tf.errors.DeadlineExceededError:
        raise clusters.operation_timeout_error(worker, logger.last_step)
      except tf.errors.CancelledError as e:
        if 'sync_token_q' not in e.message:
          raise
        raise ClusterError(_CLOSED_QUEUE) from None
  if (replicas and not stop.signal and
      logger.global_step < settings.max_steps):
    # A closed token queue ends a worker's wait like the end of its input.
    raise ClusterError('stopped at global step %d, before --max_steps=%d: %s'
                       % (logger.global_step, settings.max_steps, _CLOSED_QUEUE))
  if stop.signal:
    print('%s: received %s: stopped at global step %d.'
          % (label, stop.signal.name, logger.global_step), flush=True)
  print('%s: stopped at global step %d after %d steps of its own.'
        % (label, logger.global_step, logger.own_steps), flush=True)
  return stop.signal


# Output closed before training (`| head`): exit status 141 at once, quietly;
# during training the step lines stop it, as SIGTERM does (signals.print_line).
@signals.script_main()
def main(argv):
  del argv  # Flags only.
  if FLAGS.local_cluster:
    try:
      # First: the tasks' network will be loopback alone.
      download.prepare(FLAGS.data_dir, FLAGS.data_url, FLAGS.data_md5,
                       FLAGS.dataset)
    except train_dirs.RUN_ERRORS as e:
      sys.exit(str(e))
    num_ps, num_workers = map(int, FLAGS.local_cluster)
    sys.exit(local_cluster.run(num_ps, num_workers, FLAGS))
  try:
    # This task and its cluster: the flags (a bad one is a usage error),
    # else TF_CONFIG.
    task = clusters.resolve(
        FLAGS.job_name, FLAGS.task_index, FLAGS.ps_hosts, FLAGS.worker_hosts,
        startup_wait_secs=FLAGS.startup_wait_secs,
        operation_timeout_secs=FLAGS.operation_timeout_secs)
  except ValueError as e:
    sys.exit(str(e))  # TF_CONFIG at fault: one line, without the usage text.
  if task.job_name == 'evaluator':
    if FLAGS.run_once:
      raise app.UsageError('--run_once does not apply to the evaluator task, '
                           'which follows training until --max_steps')
    # Joins no cluster: cifar10_eval.py, given this task's flags, follows the
    # chief's checkpoints in --train_dir until the one at --max_steps; from
    # TF_CONFIG, this task stops it if the chief stays away.
    try:
      sys.exit(clusters.run_evaluator(task, FLAGS, os.path.join(
          os.path.dirname(os.path.abspath(__file__)), 'cifar10_eval.py')))
    except TimeoutError as e:
      sys.exit('Evaluator: %s' % e)
  # Workers compute on their CPUs (clusters.Task.device): float16 never
  # arises. Only the chief writes --train_dir.
  settings = run_flags.from_flags(FLAGS, gpu=False,
                                  check_train_dir=task.is_chief)
  cluster, job_name, task_index = task.cluster, task.job_name, task.task_index
  print('PS hosts are: %s' % ','.join(cluster['ps']))
  if task.chief_job != 'worker':
    print('Chief host is: %s' % cluster[task.chief_job][0])
  print('Worker hosts are: %s' % ','.join(cluster.get('worker', [])))
  print('This task: %s' % task.name, flush=True)

  port = cluster[job_name][task_index].rpartition(':')[2]
  try:
    server = tf.train.Server(
        tf.train.ClusterSpec(cluster), job_name=job_name,
        task_index=task_index,
        config=sessions.server_config(run_flags.threads(FLAGS)))
  except tf.errors.OpError as e:
    sys.exit('Could not start the server of %s on port %s (is the port in '
             'use?): %s' % (task.name, port, e.message))
  # TensorFlow's server binds its port on every interface, whatever host
  # the cluster names, and has no authentication.
  print('This task listens on port %s of every network interface; '
        'TensorFlow\'s server runs any graph sent to it, without '
        'authentication: docs/distributed.md#security.' % port, flush=True)
  if job_name == 'ps':
    print('ps task %d serving; stop it (Ctrl-C) when the workers are done.'
          % task_index, flush=True)
    try:
      while True:  # Python cannot interrupt server.join(), but a sleep.
        time.sleep(3600)
    except KeyboardInterrupt:
      print('ps task %d stopped.' % task_index, flush=True)
    return

  replicas = None
  if FLAGS.sync_replicas:
    # The chief trains too: one replica per training task.
    num_replicas = len(task.training_tasks)
    replicas = (num_replicas if FLAGS.replicas_to_aggregate == -1
                else FLAGS.replicas_to_aggregate)
    print('SyncReplicas enabled: replicas_to_aggregate=%d; '
          'total_num_replicas=%d' % (replicas, num_replicas))
  label = task.label
  print('%s: waiting up to %d s for the ps tasks.'
        % (label, FLAGS.startup_wait_secs), flush=True)
  try:
    # From then on, a ps task away that long ends this task.
    clusters.wait_for_ps_tasks(task)
    data_set = download.prepare(FLAGS.data_dir, FLAGS.data_url,
                                FLAGS.data_md5, FLAGS.dataset)
    stop_signal = train(settings, data_set, task, server.target,
                        replicas=replicas)
  except (TimeoutError, ClusterError) + train_dirs.RUN_ERRORS as e:
    sys.exit('%s: %s' % (label, e))
  signals.exit_if_stopped(stop_signal)


if __name__ == '__main__':
  app.run(main)
