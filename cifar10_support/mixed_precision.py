"""--mixed_precision: the dtype the model computes in (bfloat16, or float16
with a dynamic loss scale on GPUs before Ampere), and float16's loss scale."""

import re

from absl import app
import tensorflow.compat.v1 as tf

# /proc/cpuinfo flags of x86 CPUs whose oneDNN kernels compute in bfloat16.
CPU_BF16_FLAGS = ('amx_bf16', 'avx512_bf16')

LOSS_SCALE_START = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000  # Overflow-free steps that double the scale.


def read_cpuinfo():
  """The text of /proc/cpuinfo, '' where there is none."""
  try:
    with open('/proc/cpuinfo') as f:
      return f.read()
  except OSError:
    return ''


def cpu_flags(cpuinfo=None):
  """The set of flags on the 'flags' lines of `cpuinfo` (None: read
  /proc/cpuinfo); None without such a line."""
  if cpuinfo is None:
    cpuinfo = read_cpuinfo()
  lines = re.findall(r'^[ \t]*flags[ \t]*:(.*)$', cpuinfo, re.M)
  return set(' '.join(lines).split()) if lines else None


def cpu_bf16_feature(cpuinfo=None):
  """The first of CPU_BF16_FLAGS in `cpu_flags(cpuinfo)`, or None."""
  present = cpu_flags(cpuinfo) or set()
  return next((flag for flag in CPU_BF16_FLAGS if flag in present), None)


def gpu_capability():
  """The lowest compute capability of the visible GPUs, e.g. (9, 0); None
  without GPUs or where TensorFlow does not say."""
  details = [tf.config.experimental.get_device_details(gpu)
             for gpu in tf.config.list_physical_devices('GPU')]
  return min((tuple(d['compute_capability']) for d in details
              if d.get('compute_capability')), default=None)


def choose(requested, on_gpu, cpu_feature, capability):
  """(tf.bfloat16, tf.float16 or None: float32; the line to print or None)
  for --mixed_precision=`requested`, from the two functions above."""
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
  """`choose` for this machine; prints its line. app.UsageError with
  --use_fp16 (float16 variables) too."""
  if use_fp16 and requested != 'off':
    raise app.UsageError(
        '--use_fp16 stores the variables in float16, --mixed_precision=%s '
        'keeps them float32: drop one of the two' % requested)
  dtype, line = choose(requested, on_gpu, cpu_bf16_feature(),
                       gpu_capability() if on_gpu else None)
  if line:
    print(line, flush=True)
  return dtype


def optimizer(opt, compute_dtype):
  """`opt`, or for float16 a LossScaleOptimizer around it; once per graph."""
  return LossScaleOptimizer(opt) if compute_dtype == tf.float16 else opt


def _zeros_unless(finite, grads_and_vars):
  return [(None if g is None else tf.where(finite, g, tf.zeros_like(g)), v)
          for g, v in grads_and_vars]


class LossScaleOptimizer(object):
  """compute_gradients and apply_gradients with a dynamic loss scale, summary
  'loss_scale'. A step where any tower's gradients overflow applies zeros and
  halves the scale, never below 1; LOSS_SCALE_GROWTH_STEPS clean steps in a
  row double it. Both are saved (loss_scale/scale, loss_scale/good_steps;
  a checkpoint without them starts them afresh): resumed, a float16 run goes
  on as the unstopped run."""

  def __init__(self, opt):
    self._opt = opt
    self._finite = []  # Per tower: no overflow.
    with tf.device('/cpu:0'), tf.variable_scope('loss_scale'):
      self.scale = tf.get_variable('scale', initializer=LOSS_SCALE_START,
                                   trainable=False)
      self.good_steps = tf.get_variable(
          'good_steps', initializer=tf.zeros([], tf.int64), trainable=False)
      tf.summary.scalar('loss_scale', self.scale)

  def compute_gradients(self, loss):
    grads_and_vars = self._opt.compute_gradients(loss * self.scale)
    with tf.name_scope('loss_scale'):  # The tower's.
      inverse = 1.0 / self.scale
      unscaled = [(None if g is None else g * inverse, v)
                  for g, v in grads_and_vars]
      self._finite.append(tf.reduce_all(
          [tf.reduce_all(tf.math.is_finite(g)) for g, _ in unscaled
           if g is not None]))
      return _zeros_unless(self._finite[-1], unscaled)

  def apply_gradients(self, grads_and_vars, global_step=None):
    with tf.name_scope('loss_scale/'):
      finite = tf.reduce_all(self._finite)
      safe = _zeros_unless(finite, grads_and_vars)
    apply_op = self._opt.apply_gradients(safe, global_step=global_step)
    with tf.control_dependencies([apply_op]), tf.name_scope('loss_scale/'):
      zero = tf.zeros([], tf.int64)
      good = tf.where(finite, self.good_steps + 1, zero)
      grow = good >= LOSS_SCALE_GROWTH_STEPS
      scale = tf.where(finite, tf.where(grow, self.scale * 2, self.scale),
                       tf.maximum(self.scale / 2, 1.0))
      update = tf.group(tf.assign(self.scale, scale),
                        tf.assign(self.good_steps, tf.where(grow, zero, good)))
    return tf.group(apply_op, update)
