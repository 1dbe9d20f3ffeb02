"""--mixed_precision: the dtype the model computes in, and float16's loss scale.

With --mixed_precision=bf16 the convolutions, matrix products, bias adds,
ReLUs and max pools run in bfloat16 (float16 with a dynamic loss scale on GPUs
older than Ampere); the variables, their moving averages, the LRN, the loss,
the gradients as applied and the checkpoints stay float32 (the table:
docs/mixed_precision.md). The loss scale is a local variable, never saved,
which TensorFlow's DynamicLossScale is not.
"""

import collections

from absl import app
import tensorflow.compat.v1 as tf

# /proc/cpuinfo flags of x86 CPUs whose oneDNN kernels compute in bfloat16
# natively. AMX also needs the kernel's permission, which TF asks for.
CPU_BF16_FLAGS = ('amx_bf16', 'avx512_bf16')

# The dynamic loss scale: its start, and how many overflow-free steps double
# it (an overflow halves it at once).
LOSS_SCALE_START = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000

# The loss-scale variables: scale (float32 scalar, what the loss is
# multiplied by), good_steps (int64 scalar, steps since the scale changed).
LossScale = collections.namedtuple('LossScale', ['scale', 'good_steps'])


def read_cpuinfo():
  """The text of /proc/cpuinfo, '' where there is none."""
  try:
    with open('/proc/cpuinfo') as f:
      return f.read()
  except OSError:
    return ''


def cpu_flags(cpuinfo=None):
  """The set of flags on the 'flags' lines of `cpuinfo` (text as Linux's
  /proc/cpuinfo; None reads that file); None without such a line."""
  if cpuinfo is None:
    cpuinfo = read_cpuinfo()
  present = None
  for line in cpuinfo.splitlines():
    key, _, value = line.partition(':')
    if key.strip() == 'flags':
      present = (present or set()) | set(value.split())
  return present


def cpu_bf16_feature(cpuinfo=None):
  """The first of CPU_BF16_FLAGS in `cpu_flags(cpuinfo)`, or None."""
  present = cpu_flags(cpuinfo) or set()
  return next((flag for flag in CPU_BF16_FLAGS if flag in present), None)


def gpu_capability():
  """The lowest compute capability of the visible GPUs, e.g. (9, 0); None
  without GPUs or where TensorFlow does not say."""
  found = []
  for gpu in tf.config.list_physical_devices('GPU'):
    details = tf.config.experimental.get_device_details(gpu)
    if details.get('compute_capability'):
      found.append(tuple(details['compute_capability']))
  return min(found) if found else None


def choose(requested, on_gpu, cpu_feature, capability):
  """(dtype, line) for --mixed_precision=`requested` ('off' or 'bf16'):
  tf.bfloat16, tf.float16 or None (float32), and the line to print (None
  when off), from `cpu_bf16_feature()` and `gpu_capability()`."""
  if requested == 'off':
    return None, None
  kept = 'variables, loss, gradients and checkpoints stay float32'
  if on_gpu:
    if capability and capability >= (8, 0):  # Ampere's bfloat16 tensor cores.
      return tf.bfloat16, ('Mixed precision: bfloat16 on the GPU (compute '
                           'capability %d.%d); %s.' % (capability + (kept,)))
    return tf.float16, (
        'Mixed precision: float16 with dynamic loss scaling, since this GPU '
        '(compute capability %s) has no fast bfloat16; %s.'
        % ('%d.%d' % capability if capability else 'unknown', kept))
  if cpu_feature:
    return tf.bfloat16, ('Mixed precision: bfloat16 on the CPU (%s); %s.'
                         % (cpu_feature, kept))
  return None, ('--mixed_precision=bf16: this CPU has neither AVX512_BF16 '
                'nor AMX, so bfloat16 would be emulated and slower than '
                'float32: running in float32.')


def compute_dtype_for_this_machine(requested, on_gpu, use_fp16=False):
  """`choose` for this machine; prints its line. For a script's main().

  Raises:
    app.UsageError: with --use_fp16 (float16 variables) too.
  """
  if use_fp16 and requested != 'off':
    raise app.UsageError(
        '--use_fp16 stores the variables in float16, --mixed_precision=%s '
        'keeps them float32: drop one of the two' % requested)
  dtype, line = choose(requested, on_gpu, cpu_bf16_feature(),
                       gpu_capability() if on_gpu else None)
  if line:
    print(line, flush=True)
  return dtype


def needs_loss_scale(compute_dtype):
  """bool: gradients computed in this dtype need a loss scale (float16)."""
  return compute_dtype == tf.float16


def dynamic_loss_scale(device='/cpu:0'):
  """A LossScale of local variables on `device` (with the shared weights);
  once per graph, outside any tower's variable scope. Its summary
  'loss_scale' keeps falling when steps overflow (and are skipped)."""
  with tf.device(device), tf.variable_scope('loss_scale'):
    scale = tf.get_local_variable('scale', [], tf.float32,
                                  tf.constant_initializer(LOSS_SCALE_START))
    good_steps = tf.get_local_variable('good_steps', [], tf.int64,
                                       tf.zeros_initializer())
    tf.summary.scalar('loss_scale', scale)
  return LossScale(scale, good_steps)


def compute_gradients(opt, loss, loss_scale=None):
  """opt.compute_gradients of `loss`, of loss * scale with a LossScale (lest
  small float16 gradients become 0; `apply_gradients` divides them back)."""
  return opt.compute_gradients(
      loss if loss_scale is None else loss * loss_scale.scale)


def apply_gradients(opt, grads_and_vars, global_step, loss_scale=None):
  """(train_op, the pairs as applied) of opt.apply_gradients; with a loss
  scale, the pairs are unscaled, and a step whose gradients overflowed (any
  Inf or NaN) applies zero gradients (plain SGD: the weights stay as they
  were) and halves the scale; LOSS_SCALE_GROWTH_STEPS clean steps in a row
  double it. The scale never falls below 1."""
  if loss_scale is None:
    return (opt.apply_gradients(grads_and_vars, global_step=global_step),
            grads_and_vars)
  with tf.name_scope('loss_scale/'):
    inverse = 1.0 / loss_scale.scale
    unscaled = [(None if g is None else g * inverse, v)
                for g, v in grads_and_vars]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g))
                            for g, _ in unscaled if g is not None])
    safe = [(None if g is None else tf.where(finite, g, tf.zeros_like(g)), v)
            for g, v in unscaled]
  apply_op = opt.apply_gradients(safe, global_step=global_step)
  with tf.control_dependencies([apply_op]), tf.name_scope('loss_scale/'):
    good = tf.where(finite, loss_scale.good_steps + 1, tf.zeros([], tf.int64))
    grow = good >= LOSS_SCALE_GROWTH_STEPS
    scale = tf.where(finite,
                     tf.where(grow, loss_scale.scale * 2, loss_scale.scale),
                     tf.maximum(loss_scale.scale / 2, 1.0))
    update = tf.group(
        tf.assign(loss_scale.scale, scale),
        tf.assign(loss_scale.good_steps,
                  tf.where(grow, tf.zeros([], tf.int64), good)))
  return tf.group(apply_op, update), safe
