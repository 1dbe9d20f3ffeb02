"""What cifar10_multi_gpu_train.py's towers need beyond the lesson: their
prefetch queue, their variable reads in one scope, their session's config."""

import ctypes
import os

from absl import app
import tensorflow.compat.v1 as tf

from cifar10_support import sessions


def prefetch_queue(tensors, capacity):
  """Replaces slim.prefetch_queue.prefetch_queue: a tf.FIFOQueue of
  `capacity` batches of `tensors`, filled by one thread, for every tower."""
  with tf.device('/cpu:0'), tf.name_scope('prefetch_queue'):
    queue = tf.FIFOQueue(capacity, dtypes=[t.dtype for t in tensors],
                         shapes=[t.shape for t in tensors])
    tf.train.add_queue_runner(
        tf.train.QueueRunner(queue, [queue.enqueue(tensors)]))
    tf.summary.scalar('fraction_of_%d_full' % capacity,
                      tf.cast(queue.size(), tf.float32) / capacity)
  return queue


def read_in_one_scope(getter, *args, **kwargs):
  """The towers' custom_getter: the variable's value, read in scope
  variable_reads/, so that TensorBoard draws the towers apart."""
  var = getter(*args, **kwargs)
  with tf.name_scope('variable_reads/'):
    return var.value()


USABLE_FRACTION = 0.9  # Of each card; CUDA and cuDNN need the rest.
MIN_TOWER_MB = 512  # What a tower of 128 images needs at least.


def split_config(num_towers, num_cards, card_mb, tower_mb=0,
                 log_device_placement=False):
  """The tf.ConfigProto that makes num_towers virtual GPUs of tower_mb MB
  (0: an even share) of num_cards GPUs of card_mb MB (None: unknown)."""
  if num_cards < 1:
    raise app.UsageError(
        '--split_gpus needs a GPU, and TensorFlow sees none; without one, '
        '--tower_device=cpu gives each tower its own CPU device')
  if num_towers < num_cards:
    raise app.UsageError(
        '--split_gpus with --num_gpus=%d and %d GPUs visible: there is nothing '
        'to split (each tower has a GPU of its own); drop --split_gpus'
        % (num_towers, num_cards))
  # Tower i runs on virtual GPU i, numbered card by card.
  base, extra = divmod(num_towers, num_cards)
  counts = [base + (1 if i < extra else 0) for i in range(num_cards)]
  if not tower_mb and not card_mb:
    raise app.UsageError(
        '--split_gpus could not read the GPUs\' memory (no NVIDIA management '
        'library): give each virtual GPU\'s memory with --split_gpu_memory_mb')
  usable = int(card_mb * USABLE_FRACTION) if card_mb else None
  if not tower_mb:
    tower_mb = usable // counts[0]
  if tower_mb < MIN_TOWER_MB or (usable and tower_mb * counts[0] > usable):
    raise app.UsageError(
        '--num_gpus=%d --split_gpus puts %d towers on a GPU of %s MB, %d MB '
        'each: %s. Use fewer towers (--num_gpus) or a smaller '
        '--split_gpu_memory_mb' % (
            num_towers, counts[0], card_mb or 'unknown', tower_mb,
            'each needs at least %d MB' % MIN_TOWER_MB
            if tower_mb < MIN_TOWER_MB else
            'together more than the %d MB usable (%d%%)'
            % (usable, USABLE_FRACTION * 100)))
  config = tf.ConfigProto(allow_soft_placement=True,
                          log_device_placement=log_device_placement)
  for count in counts:
    card = config.gpu_options.experimental.virtual_devices.add()
    card.memory_limit_mb.extend([float(tower_mb)] * count)
  return config


def card_memory_mb():
  """The memory of the smallest visible NVIDIA GPU in MB, None if unknown;
  from NVML, which (unlike TensorFlow) leaves the GPU unconfigured."""
  try:
    nvml = ctypes.CDLL('libnvidia-ml.so.1')
  except OSError:
    return None
  try:
    count = ctypes.c_uint()
    if nvml.nvmlInit_v2() or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)):
      return None
    indices = range(count.value)
    visible = os.environ.get('CUDA_VISIBLE_DEVICES', '')
    if visible and all(i.strip().isdigit() for i in visible.split(',')):
      # NVML numbers cards in PCI order, as CUDA does by default.
      indices = [int(i) for i in visible.split(',') if int(i) < count.value]
    sizes = []
    for index in indices:
      handle = ctypes.c_void_p()
      memory = (ctypes.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used.
      if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) or
          nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))):
        return None
      sizes.append(memory[0] // (1 << 20))
    return min(sizes) if sizes else None
  finally:
    nvml.nvmlShutdown()


def session_config(num_towers, tower_device, threads=sessions.BY_RULE,
                   split_gpus=False, split_gpu_memory_mb=0,
                   log_device_placement=False):
  """The training session's config for num_towers towers on tower_device,
  'gpu' or 'cpu'; prints a line for a split, or for towers without a GPU."""
  visible = sessions.visible_gpus() if tower_device == 'gpu' else 0
  if not split_gpus:
    if tower_device == 'gpu' and visible < num_towers:
      remedy = ('--split_gpus splits the GPU(s) into %d virtual GPUs, one '
                'per tower.' % num_towers if visible else
                '--tower_device=cpu gives each tower its own CPU device.')
      print('%d GPU towers asked for (--num_gpus) but %d GPU(s) visible: '
            'towers without a GPU run on the CPU (soft placement), as in the '
            'original; %s' % (num_towers, visible, remedy))
    return sessions.training_config(threads, num_towers, tower_device,
                                    log_device_placement)
  if tower_device != 'gpu':
    raise app.UsageError(
        '--split_gpus splits GPUs and --tower_device=cpu puts the towers on '
        'CPU devices: drop one of the two')
  config = split_config(num_towers, visible, card_memory_mb(),
                        split_gpu_memory_mb, log_device_placement)
  devices = config.gpu_options.experimental.virtual_devices
  print('--split_gpus: %d GPU(s) split into %d virtual GPUs of %d MB, one per '
        'tower.' % (visible, num_towers, devices[0].memory_limit_mb[0]))
  return sessions.set_threads(config, threads, num_towers)
