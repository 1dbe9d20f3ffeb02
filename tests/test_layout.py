"""The layout: the tutorial at the root, its flags, names and imports kept."""

import ast
import glob
import os
import subprocess
import sys

from absl import flags
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_classify  # pylint: disable=unused-import
import cifar10_distributed_train  # pylint: disable=unused-import
import cifar10_eval  # pylint: disable=unused-import
import cifar10_multi_gpu_train  # pylint: disable=unused-import
import cifar10_train
from testutil import ROOT

SCRIPTS = ['cifar10_train.py', 'cifar10_multi_gpu_train.py', 'cifar10_eval.py',
           'cifar10_distributed_train.py', 'cifar10_classify.py']
ROOT_MODULES = ['cifar10.py', 'cifar10_input.py'] + SCRIPTS

# Every flag of every script with its default (--data_dir: the repository's
# cifar10/ folder). A renamed flag or a changed default fails here.
FLAG_DEFAULTS = {
    'batch_size': 128, 'use_fp16': False,
    'data_url': 'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz',
    'data_md5': 'c32a1d4ab5d03f1284b67883e8d87530', 'mixed_precision': 'off',
    'num_intra_threads': None, 'num_inter_threads': None,
    'train_dir': '/tmp/cifar10_train', 'max_steps': 100000,
    'log_device_placement': False, 'log_frequency': 10, 'fresh_start': False,
    'save_checkpoint_secs': 600, 'save_summaries_steps': 100,
    'save_checkpoint_steps': 0,
    'num_gpus': 1, 'tower_device': 'gpu', 'split_gpus': False,
    'split_gpu_memory_mb': 0,
    'eval_dir': '/tmp/cifar10_eval', 'eval_data': 'test',
    'checkpoint_dir': '/tmp/cifar10_train', 'eval_interval_secs': 300,
    'num_examples': 10000, 'run_once': False,
    'job_name': None, 'task_index': 0, 'ps_hosts': '', 'worker_hosts': '',
    'sync_replicas': False, 'replicas_to_aggregate': -1,
    'startup_wait_secs': 300, 'operation_timeout_secs': 300,
    'checkpoint_path': '', 'top_k': 3, 'export_dir': '',
}

# The 25 variables of a single-device checkpoint, as the original writes them
# (shared/reference/checkpoint_variables.txt): ours restore in its eval.
CHECKPOINT_VARIABLES = {
    'global_step': [], 'cross_entropy/avg': [], 'total_loss/avg': [],
    'local3/weight_loss/avg': [], 'local4/weight_loss/avg': [],
}
for _name, _shape in [('conv1/weights', [5, 5, 3, 64]), ('conv1/biases', [64]),
                      ('conv2/weights', [5, 5, 64, 64]), ('conv2/biases', [64]),
                      ('local3/weights', [2304, 384]), ('local3/biases', [384]),
                      ('local4/weights', [384, 192]), ('local4/biases', [192]),
                      ('softmax_linear/weights', [192, 10]),
                      ('softmax_linear/biases', [10])]:
  CHECKPOINT_VARIABLES[_name] = _shape
  CHECKPOINT_VARIABLES[_name + '/ExponentialMovingAverage'] = _shape


def test_every_flag_keeps_its_name_and_default():
  found = {name: flags.FLAGS[name].default for name in FLAG_DEFAULTS
           if name in flags.FLAGS}
  assert found == FLAG_DEFAULTS
  assert flags.FLAGS['data_dir'].default == os.path.join(ROOT, 'cifar10')


def test_training_graph_saves_the_originals_25_variables(data_dir):
  with tf.Graph().as_default():
    global_step = tf.train.get_or_create_global_step()
    cifar10_train.build_training_graph(global_step, data_dir, 8,
                                       num_threads=1)
    saved = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
  assert saved == CHECKPOINT_VARIABLES


def test_the_root_holds_the_tutorial_and_the_package_the_rest():
  root = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT,
                                                                    '*.py')))
  assert root == sorted(ROOT_MODULES)
  assert os.path.isdir(os.path.join(ROOT, 'cifar10_support'))
  assert os.path.isdir(os.path.join(ROOT, 'cifar10'))  # the data folder


def _imports(path):
  """The top-level project modules a file imports ('cifar10_support.x')."""
  names = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.update('%s.%s' % (node.module, alias.name)
                   for alias in node.names)
  return {n for n in names if n.startswith('cifar10')}


def _module_graph():
  graph = {}
  for path in glob.glob(os.path.join(ROOT, '*.py')) + glob.glob(
      os.path.join(ROOT, 'cifar10_support', '*.py')):
    rel = os.path.relpath(path, ROOT)[:-len('.py')].replace(os.sep, '.')
    graph[rel] = {n for n in _imports(path) if n != 'cifar10_support'}
  return graph


def test_no_support_module_imports_a_script_and_no_cycles():
  graph = _module_graph()
  scripts = {s[:-len('.py')] for s in SCRIPTS}
  for module, imported in graph.items():
    if module.startswith('cifar10_support.'):
      assert not imported & (scripts | {'cifar10'}), module
  # No cycles: a depth-first walk never meets a module on its own path.
  def walk(module, path):
    assert module not in path, ' -> '.join(path + [module])
    for name in graph.get(module, ()):
      walk(name, path + [module])
  for module in graph:
    walk(module, [])


def test_no_private_names_cross_modules():
  for path in glob.glob(os.path.join(ROOT, '*.py')) + glob.glob(
      os.path.join(ROOT, 'cifar10_support', '*.py')):
    for node in ast.walk(ast.parse(open(path).read())):
      if (isinstance(node, ast.Attribute) and node.attr.startswith('_')
          and not node.attr.startswith('__')
          and isinstance(node.value, ast.Name)
          and node.value.id.startswith(('cifar10', 'checkpoints', 'sessions',
                                         'train_dirs', 'console', 'fast_ops'))):
        raise AssertionError('%s uses %s.%s' % (path, node.value.id,
                                                 node.attr))


def test_the_support_package_loads_no_tensorflow():
  # startup must run before TensorFlow loads, so importing it cannot load it.
  code = ('import sys; import cifar10_support.startup; '
          'print("tensorflow" in sys.modules)')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
  assert result.stdout.strip() == 'False', result.stderr


def test_inference_reads_like_the_original():
  # The lesson calls fast_ops.lrn with tf.nn.lrn's own arguments.
  source = open(os.path.join(ROOT, 'cifar10.py')).read()
  assert source.count("fast_ops.lrn(") == 2
  assert 'alpha=0.001 / 9.0, beta=0.75' in source
  assert cifar10.inference.__module__ == 'cifar10'
