"""Session configs, one per use; `threads`: a ThreadCounts of the flags."""

import collections
import os

import tensorflow.compat.v1 as tf

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
  """How many GPUs TensorFlow sees in this process (0: false, none)."""
  return len(tf.config.list_physical_devices('GPU'))


def thread_settings(num_cores, gpu, num_towers=1, intra=None, inter=None,
                    cluster_task=False):
  """(intra, inter) op threads, 0 for TensorFlow's choice; intra and inter
  are the flags, None for the rule of docs/performance.md."""
  if inter is None:
    inter = 1 if (not gpu and num_towers == 1 and not cluster_task
                  and num_cores <= ONE_OP_AT_A_TIME_MAX_CORES) else 0
  return (0 if intra is None else intra), inter


def set_threads(config, threads=BY_RULE, num_towers=1):
  """Sets a tf.ConfigProto's thread counts by `thread_settings`; returns it."""
  intra, inter = thread_settings(usable_cores(), visible_gpus(), num_towers,
                                 *threads)
  config.intra_op_parallelism_threads = intra
  if inter:
    # The session's own pool: the global one is sized by the first session.
    pool = config.session_inter_op_thread_pool.add()
    pool.num_threads = inter
    pool.global_name = 'cifar10_inter_op_%d' % inter
  return config


def session_config(optimize_graph=True, threads=BY_RULE, num_towers=1,
                   **kwargs):
  """`tf.ConfigProto(**kwargs)` with `set_threads`' thread counts; without a
  GPU, optimize_graph=False skips Grappler's rewrites (shorter start-up)."""
  config = set_threads(tf.ConfigProto(**kwargs), threads, num_towers)
  if not optimize_graph and not visible_gpus():
    config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


def training_config(threads=BY_RULE, num_towers=1, tower_device=None,
                    log_device_placement=False):
  """The training session's config; tower_device None for one device, 'cpu'
  for num_towers CPU devices without soft placement (a misplaced op is an
  error), 'gpu' with it (for queue ops, and towers on missing GPUs)."""
  cpus = {'device_count': {'CPU': num_towers}} if tower_device == 'cpu' else {}
  return session_config(threads=threads, num_towers=num_towers,
                        log_device_placement=log_device_placement,
                        allow_soft_placement=tower_device == 'gpu', **cpus)


def eval_config(threads=BY_RULE):
  """The config of short sessions; GPU memory taken as needed."""
  return session_config(optimize_graph=False, threads=threads,
                        gpu_options=tf.GPUOptions(allow_growth=True))


def worker_config(task, operation_timeout_secs, log_device_placement=False):
  """A cluster worker's session config, with the server's threads; it sees
  only the ps tasks and its `task`, lest a session wait for every task."""
  return tf.ConfigProto(
      device_filters=['/job:ps', task],
      operation_timeout_in_ms=int(operation_timeout_secs * 1000),
      log_device_placement=log_device_placement)


def server_config(threads=BY_RULE):
  """A cluster task's tf.train.Server config: the threads of all its ops."""
  intra, inter = thread_settings(usable_cores(), visible_gpus(), 1, *threads,
                                 cluster_task=True)
  return tf.ConfigProto(intra_op_parallelism_threads=intra,
                        inter_op_parallelism_threads=inter)
