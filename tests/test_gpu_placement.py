"""The GPU path of `cifar10_multi_gpu_train.py --num_gpus=4`, checked from
the graph on a machine without a GPU: each tower's work on its GPU, the
shared state and the input on /cpu:0, and a GPU kernel (which the full
`tensorflow` package lists even without a GPU) for every op asked on a GPU,
which soft placement would otherwise move to the CPU silently.
"""

import pytest
import tensorflow.compat.v1 as tf
from tensorflow.python.framework import kernels  # pylint: disable=g-direct-tensorflow-import

import cifar10_multi_gpu_train

NUM_TOWERS = 4
CPU = '/device:CPU:0'


def _device(op):
  """Where `op` runs: with the variable it reads or writes, if any (the
  placer keeps resource ops there), else by its colocation or device."""
  for tensor in op.inputs:
    if tensor.dtype == tf.resource:
      return _device(tensor.op)
  for group in op.colocation_groups():
    name = group.decode()[len('loc:@'):]
    if name != op.name:
      return op.graph.get_operation_by_name(name).device
  return op.device


def _gpu_kernel_problem(op):
  """None if a GPU kernel is registered for op's type and type attributes."""
  candidates = [k for k in kernels.get_registered_kernels_for_op(op.type).kernel
                if k.device_type in ('GPU', 'DEFAULT')]
  if not candidates:
    return 'no GPU kernel for %s' % op.type
  def types(value):
    return list(value.list.type) if value.HasField('list') else [value.type]
  for kernel in candidates:
    if all(set(c.allowed_values.list.type).issuperset(
        types(op.node_def.attr[c.name])) for c in kernel.constraint):
      return None
  return 'no GPU kernel for %s with %s' % (op.type, {
      c.name: op.get_attr(c.name) for c in candidates[0].constraint})


# (use_fp16, compute_dtype): the original's float16 variables, and
# --mixed_precision on a GPU with bfloat16 and on one without.
SETTINGS = {'fp32': (False, None), 'fp16': (True, None),
            'mixed_bf16': (False, tf.bfloat16),
            'mixed_fp16': (False, tf.float16)}


@pytest.fixture(scope='module', params=sorted(SETTINGS))
def graph(request, data_dir):
  use_fp16, compute_dtype = SETTINGS[request.param]
  with tf.Graph().as_default() as g:
    with tf.device('/cpu:0'):  # As cifar10_multi_gpu_train.train makes it.
      global_step = tf.train.get_or_create_global_step()
    batches = cifar10_multi_gpu_train.tower_input_batches(
        data_dir, NUM_TOWERS, batch_size=8, use_fp16=use_fp16,
        num_threads=1)
    cifar10_multi_gpu_train.build_train_step(batches, global_step, 8, 'gpu',
                                             compute_dtype)
  g.compute_dtype = compute_dtype
  return g


def _summary_or_average(op):
  """Summary ops with their tag constants, and the loss averages' ops."""
  names = [op.name] + [t.op.name for t in op.inputs if t.dtype == tf.resource]
  return ('Summary' in op.type or any('/avg' in name for name in names) or
          op.name.rsplit('/', 1)[-1] in ('tags', 'tag',
                                          'serialized_summary_metadata'))


def _ops(graph, prefix):
  return [op for op in graph.get_operations() if op.name.startswith(prefix)]


def test_each_towers_work_is_on_its_gpu(graph):
  for i in range(NUM_TOWERS):
    gpu = '/device:GPU:%d' % i
    tower = _ops(graph, 'tower_%d/' % i)
    by_type = {}
    for op in tower:
      by_type.setdefault(op.type, set()).add(_device(op))
    for op_type in ('Conv2D', 'Conv2DBackpropFilter', 'Conv2DBackpropInput',
                    'MatMul', 'MaxPool', 'MaxPoolGrad', 'Relu', 'ReluGrad',
                    'Rsqrt', 'SparseSoftmaxCrossEntropyWithLogits', 'L2Loss',
                    'AddN'):
      assert by_type.get(op_type) == {gpu}, (i, op_type, by_type.get(op_type))
    for scope in ('norm1_window/', 'norm2_window/', 'cross_entropy',
                  'total_loss', 'gradients/'):
      # Without the summaries and the loss averages, which live on the CPU.
      devices = {_device(op) for op in _ops(graph, 'tower_%d/%s' % (i, scope))
                 if not _summary_or_average(op)}
      assert devices == {gpu}, (i, scope, devices)


def test_shared_state_averaging_and_input_are_on_the_cpu(graph):
  variables = [op for op in graph.get_operations() if op.type == 'VarHandleOp']
  assert len(variables) > 20
  for op in variables:  # weights, their averages, loss averages, global step
    assert _device(op) == CPU, op.name
  assert any(op.name.endswith('ExponentialMovingAverage') for op in variables)
  prefixes = ['average_gradients/', 'moving_averages/', 'GradientDescent',
              'input_producer', 'data_augmentation/', 'shuffle_batch',
              'prefetch_queue/']
  if graph.compute_dtype == tf.float16:
    prefixes.append('loss_scale/')
  for prefix in prefixes:
    ops = _ops(graph, prefix)
    assert ops, prefix
    assert {_device(op) for op in ops} == {CPU}, prefix


def test_mixed_precision_computes_on_the_gpus_and_applies_float32(graph):
  if graph.compute_dtype is None:
    # Without the flag: no bfloat16 anywhere, and no loss scale.
    assert not [op for op in graph.get_operations()
                if op.node_def.attr['T'].type == tf.bfloat16.as_datatype_enum]
    assert not _ops(graph, 'loss_scale')
    return
  reduced = [op for op in graph.get_operations()
             if op.node_def.attr['T'].type == graph.compute_dtype.as_datatype_enum]
  for op_type in ('Conv2D', 'Conv2DBackpropFilter', 'MatMul', 'BiasAddGrad',
                  'MaxPool', 'Relu'):
    found = [op for op in reduced if op.type == op_type]
    assert len(found) >= NUM_TOWERS, op_type
  # All of it in the towers, on their GPUs: none in the shared update.
  assert {_device(op) for op in reduced} == {
      '/device:GPU:%d' % i for i in range(NUM_TOWERS)}
  for op in graph.get_operations():
    if op.type in ('ResourceApplyGradientDescent', 'AssignMovingAvg', 'AddN'):
      assert op.get_attr('T') == tf.float32, op.name
  # float16's loss scale is saved with the checkpoint; bfloat16 has none.
  saved = [v.op.name for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
           if v.op.name.startswith('loss_scale')]
  assert saved == (['loss_scale/scale', 'loss_scale/good_steps']
                   if graph.compute_dtype == tf.float16 else [])


def test_every_op_asked_on_a_gpu_has_a_gpu_kernel(graph):
  problems = sorted('%s: %s' % (op.name, _gpu_kernel_problem(op))
                    for op in graph.get_operations()
                    if 'GPU' in _device(op) and _gpu_kernel_problem(op))
  assert problems == []
