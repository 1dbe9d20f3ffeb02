"""Session configurations: thread counts by one rule, one config per use.

threads is a `ThreadCounts` (--num_intra_threads, --num_inter_threads), None
in either place for the rule of `thread_settings`; BY_RULE is None in both."""

import collections
import os

import tensorflow.compat.v1 as tf

# Without a GPU, sessions on machines with at most this many usable cores run
# one op at a time, each op on every core (why: docs/performance.md).
ONE_OP_AT_A_TIME_MAX_CORES = 4

ThreadCounts = collections.namedtuple('ThreadCounts', ['intra', 'inter'])
BY_RULE = ThreadCounts(None, None)


def usable_cores():
  """The cores this process may run on (its affinity mask), an int."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


def visible_gpus():
  """How many GPUs TensorFlow sees in this process."""
  return len(tf.config.list_physical_devices('GPU'))


def has_gpu():
  """Whether TensorFlow sees a GPU in this process."""
  return visible_gpus() > 0


def thread_settings(num_cores, gpu, num_towers=1, intra=None, inter=None,
                    cluster_task=False):
  """(intra, inter) op threads, ints, 0 leaving the choice to TensorFlow.

  intra and inter are the flags as given, None for the rule: one op at a time
  (inter 1) only without a GPU (whose kernels the inter-op threads launch),
  with one tower (towers should overlap), outside a cluster (a task's pool
  also serves the other tasks) and on at most ONE_OP_AT_A_TIME_MAX_CORES
  cores; else TensorFlow's choice.
  """
  if inter is None:
    one_at_a_time = (not gpu and num_towers == 1 and not cluster_task
                     and num_cores <= ONE_OP_AT_A_TIME_MAX_CORES)
    inter = 1 if one_at_a_time else 0
  return (0 if intra is None else intra), inter


def set_threads(config, threads=BY_RULE, num_towers=1):
  """Sets a tf.ConfigProto's thread counts by `thread_settings`; returns it."""
  intra, inter = thread_settings(usable_cores(), has_gpu(), num_towers,
                                 *threads)
  config.intra_op_parallelism_threads = intra
  if inter:
    # A named pool of the session's own: the global inter-op pool is sized
    # once per process, by the first session that uses it.
    pool = config.session_inter_op_thread_pool.add()
    pool.num_threads = inter
    pool.global_name = 'cifar10_inter_op_%d' % inter
  return config


def session_config(optimize_graph=True, threads=BY_RULE, num_towers=1,
                   **kwargs):
  """`tf.ConfigProto(**kwargs)` with `set_threads`' thread counts;
  optimize_graph=False skips Grappler's rewrites without a GPU, for short
  sessions such as evaluation's, whose start-up they would lengthen."""
  config = set_threads(tf.ConfigProto(**kwargs), threads, num_towers)
  if not optimize_graph and not has_gpu():
    config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


def training_config(threads=BY_RULE, num_towers=1, tower_device=None,
                    log_device_placement=False):
  """The training session's config; tower_device None for one device.

  'cpu' gives the session num_towers CPU devices and no soft placement, so
  that each tower really runs on its own device and a misplaced op is an
  error, not a silent fold onto CPU:0. 'gpu' keeps soft placement: queue and
  string ops have no GPU kernels, and towers on missing GPUs use the CPU.
  """
  kwargs = {'log_device_placement': log_device_placement}
  if tower_device == 'cpu':
    kwargs.update(device_count={'CPU': num_towers}, allow_soft_placement=False)
  elif tower_device == 'gpu':
    kwargs.update(allow_soft_placement=True)
  return session_config(threads=threads, num_towers=num_towers, **kwargs)


def eval_config(threads=BY_RULE):
  """The config of evaluation's and classification's short sessions."""
  config = session_config(optimize_graph=False, threads=threads)
  # Take GPU memory as needed, leaving the rest to a training job.
  config.gpu_options.allow_growth = True
  return config


def worker_config(task, operation_timeout_secs, log_device_placement=False):
  """A cluster worker's session config: it sees only the ps tasks and `task`
  (its own, '/job:worker/task:1'), since otherwise a session waits for every
  task at start and synchronous training could hang at the end; the timeout
  bounds any op that still blocks. Its threads are the server's."""
  return tf.ConfigProto(
      device_filters=['/job:ps', task],
      operation_timeout_in_ms=int(operation_timeout_secs * 1000),
      log_device_placement=log_device_placement)


def server_config(threads=BY_RULE):
  """A cluster task's tf.train.Server config: the threads of all its ops."""
  intra, inter = thread_settings(usable_cores(), has_gpu(), 1, *threads,
                                 cluster_task=True)
  return tf.ConfigProto(intra_op_parallelism_threads=intra,
                        inter_op_parallelism_threads=inter)
