"""What cifar10_multi_gpu_train.py's towers need beyond the lesson."""

import tensorflow.compat.v1 as tf


def prefetch_queue(tensors, capacity):
  """Replaces slim.prefetch_queue.prefetch_queue (tf.contrib, gone in TF 2):
  a tf.FIFOQueue of `capacity` whole batches (`tensors`, fully defined
  shapes), kept full by one thread on /cpu:0, from which every tower
  dequeues its own: one pipeline per tower made several GPUs slower than
  one (tensorflow#4272).
  """
  with tf.device('/cpu:0'), tf.name_scope('prefetch_queue'):
    queue = tf.FIFOQueue(capacity, dtypes=[t.dtype for t in tensors],
                         shapes=[t.shape for t in tensors])
    tf.train.add_queue_runner(
        tf.train.QueueRunner(queue, [queue.enqueue(tensors)]))
    tf.summary.scalar('fraction_of_%d_full' % capacity,
                      tf.cast(queue.size(), tf.float32) / capacity)
  return queue


def check_gradients(tower_grads):
  """Raises ValueError, naming the tower and variable, unless every tower
  (a list of (gradient, variable) pairs) has a gradient for each of tower 0's
  variables, in the same order: what average_gradients needs."""
  if not tower_grads:
    raise ValueError('average_gradients needs at least one tower')
  names = [var.op.name for _, var in tower_grads[0]]
  for i, grads_and_vars in enumerate(tower_grads):
    tower_names = [var.op.name for _, var in grads_and_vars]
    if tower_names != names:
      missing = sorted(set(names) - set(tower_names))
      extra = sorted(set(tower_names) - set(names))
      raise ValueError(
          'Tower %d has gradients for other variables than tower 0: missing '
          '%s, extra %s%s' % (i, missing, extra,
                              '' if missing or extra else ' (order differs)'))
    for grad, var in grads_and_vars:
      if grad is None:
        raise ValueError('Tower %d has no gradient for variable %s: its loss '
                         'does not depend on it' % (i, var.op.name))


def read_in_one_scope(getter, *args, **kwargs):
  """The towers' custom_getter: the variable's value, read in one scope,
  variable_reads/, instead of the tower's. In TensorBoard's graph a tower
  then has 2 inputs rather than 6, which its graph plugin took for a
  high-degree node and moved the towers to "Auxiliary Nodes"."""
  var = getter(*args, **kwargs)
  with tf.name_scope('variable_reads/'):
    return var.value()
