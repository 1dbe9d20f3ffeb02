"""Session configurations: thread counts by one rule, one config per use.

Every session the scripts open takes its tf.ConfigProto from here:

    training_config(threads, num_towers, tower_device)   cifar10_train.py and
                                                         the towers
    eval_config(threads)            cifar10_eval.py and cifar10_classify.py
    worker_config(task, ...)        a cluster worker's session
    server_config(threads)          a cluster task's server (its threads)

threads is a `ThreadCounts` (--num_intra_threads, --num_inter_threads), None
in either place for the rule of `thread_settings`; BY_RULE is None in both.
"""

import collections
import os

import tensorflow.compat.v1 as tf

# Without a GPU, sessions on machines with at most this many usable cores run
# one op at a time (each op on every core). Measured: on 2 cores it gains
# 4-7% (benchmarks/README.md, change 6); on 16 cores it costs 11-28% against
# TensorFlow's default inter-op pool. Between the two it is not measured yet.
ONE_OP_AT_A_TIME_MAX_CORES = 4

ThreadCounts = collections.namedtuple('ThreadCounts', ['intra', 'inter'])
ThreadCounts.__doc__ = """Thread counts asked for: --num_intra_threads (threads
each op may use) and --num_inter_threads (ops that may run at once); None
for `thread_settings`' rule, 0 for TensorFlow's choice."""
BY_RULE = ThreadCounts(None, None)


def usable_cores():
  """The cores this process may run on (its affinity mask), an int."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


def has_gpu():
  """Whether TensorFlow sees a GPU in this process."""
  return bool(tf.config.list_physical_devices('GPU'))


def thread_settings(num_cores, gpu, num_towers=1, intra=None, inter=None,
                    cluster_task=False):
  """How many threads a session's ops get: the rule, in one place.

  Args:
    num_cores: int, usable cores.
    gpu: bool, a GPU is visible. There the CPU's inter-op threads launch
      kernels and feed the input, so TensorFlow's defaults stay.
    num_towers: int, model replicas that should run side by side (CPU
      towers); more than one keeps TensorFlow's inter-op pool.
    intra, inter: --num_intra_threads and --num_inter_threads as given;
      None for the rule, 0 for TensorFlow's choice.
    cluster_task: bool, the process is a task of a TensorFlow cluster, whose
      inter-op pool also runs what the other tasks ask of it: TensorFlow's
      default stays (one op at a time there is not measured).

  Returns:
    (intra, inter), ints: threads each op may use, and ops that may run at
    once; 0 leaves the choice to TensorFlow (one per core).
  """
  if inter is None:
    one_at_a_time = (not gpu and num_towers == 1 and not cluster_task
                     and num_cores <= ONE_OP_AT_A_TIME_MAX_CORES)
    inter = 1 if one_at_a_time else 0
  return (0 if intra is None else intra), inter


def thread_counts_for_this_machine(threads=BY_RULE, num_towers=1,
                                   cluster_task=False):
  """`thread_settings` for this process: its usable cores, whether a GPU is
  visible, and the flags (threads: (intra, inter), None for the rule)."""
  return thread_settings(usable_cores(), has_gpu(), num_towers, *threads,
                         cluster_task=cluster_task)


def set_threads(config, threads=BY_RULE, num_towers=1):
  """Sets a tf.ConfigProto's thread counts by `thread_settings`; returns it.

  On a machine without a GPU and with few cores that is one op at a time (a
  private inter-op pool of one thread), each op using every core through
  its own intra-op threads. oneDNN's convolutions already keep a few cores
  busy; two of them side by side, TF's default, made a 2-core training step
  4-7% slower (benchmarks/README.md), while on 16 cores the single pool cost
  11-28%.

  Args:
    config: the tf.ConfigProto to change.
    threads: (--num_intra_threads, --num_inter_threads).
    num_towers: int, CPU towers meant to run side by side.
  """
  intra, inter = thread_counts_for_this_machine(threads, num_towers)
  config.intra_op_parallelism_threads = intra
  if inter:
    # A named pool of the session's own: the global inter-op pool is sized
    # once per process, by the first session that uses it.
    pool = config.session_inter_op_thread_pool.add()
    pool.num_threads = inter
    pool.global_name = 'cifar10_inter_op_%d' % inter
  return config


def config_threads(config):
  """(intra, inter) of a tf.ConfigProto, as `thread_settings` gives them."""
  pools = config.session_inter_op_thread_pool
  inter = pools[0].num_threads if pools else config.inter_op_parallelism_threads
  return config.intra_op_parallelism_threads, inter


def session_config(optimize_graph=True, threads=BY_RULE, num_towers=1,
                   **kwargs):
  """`tf.ConfigProto(**kwargs)` with `set_threads`' thread counts.

  Args:
    optimize_graph: False skips Grappler's graph rewrites on a machine
      without a GPU. Meant for short sessions (one evaluation each): the
      rewrites cost about 0.1 s per new session and made this model's forward
      pass no faster on the CPU. With a GPU they stay (its layout rewrites
      matter there).
    threads: (--num_intra_threads, --num_inter_threads).
    num_towers: int, CPU towers meant to run side by side.
    **kwargs: fields of tf.ConfigProto.

  Returns:
    A tf.ConfigProto.
  """
  config = set_threads(tf.ConfigProto(**kwargs), threads, num_towers)
  if not optimize_graph and not has_gpu():
    config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


def training_config(threads=BY_RULE, num_towers=1, tower_device=None,
                    log_device_placement=False):
  """The training session's config, for one device or for towers.

  Args:
    threads: (--num_intra_threads, --num_inter_threads); by the rule, two
      or more towers keep TensorFlow's inter-op pool so that they overlap.
    num_towers: int, number of towers.
    tower_device: None for single-device training. 'cpu' gives the session
      num_towers CPU devices and no soft placement, so that every tower
      really runs on its own device and a misplaced op is an error rather
      than a silent fold onto CPU:0. 'gpu' keeps soft placement: queue and
      string ops have no GPU kernels, and towers on GPUs that are not there
      fall back to the CPU.
    log_device_placement: bool, log where each op runs.

  Returns:
    A tf.ConfigProto.
  """
  kwargs = {'log_device_placement': log_device_placement}
  if tower_device == 'cpu':
    kwargs.update(device_count={'CPU': num_towers}, allow_soft_placement=False)
  elif tower_device == 'gpu':
    kwargs.update(allow_soft_placement=True)
  return session_config(threads=threads, num_towers=num_towers, **kwargs)


def eval_config(threads=BY_RULE):
  """The config of evaluation's and classification's short sessions.

  Args:
    threads: (--num_intra_threads, --num_inter_threads).
  """
  config = session_config(optimize_graph=False, threads=threads)
  # Take GPU memory as needed, leaving the rest to a training job.
  config.gpu_options.allow_growth = True
  return config


def worker_config(task, operation_timeout_secs, log_device_placement=False):
  """A cluster worker's session config: see only the ps tasks and itself.

  Args:
    task: str, the worker's own task, '/job:worker/task:1' (or the chief's
      job).
    operation_timeout_secs: number, the longest any op may block.
    log_device_placement: bool, log where each op runs.

  Without device_filters, a session waits for every task of the cluster at
  start, and synchronous training could hang at the end; the timeout bounds
  any op that still blocks (tf2_notes.md section 11). Its thread counts are
  the server's (`server_config`): a distributed session takes none of its
  own.
  """
  return tf.ConfigProto(
      device_filters=['/job:ps', task],
      operation_timeout_in_ms=int(operation_timeout_secs * 1000),
      log_device_placement=log_device_placement)


def server_config(threads=BY_RULE):
  """A cluster task's tf.train.Server config: the threads of every op it runs.

  Args:
    threads: (--num_intra_threads, --num_inter_threads); None in either
      place for `thread_settings`' rule for a cluster task.
  """
  intra, inter = thread_counts_for_this_machine(threads, cluster_task=True)
  return tf.ConfigProto(intra_op_parallelism_threads=intra,
                        inter_op_parallelism_threads=inter)
