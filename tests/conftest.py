"""Shared test set-up: import paths, quiet TF, the synthetic data fixture,
and the `slow` marker.

`python -m pytest -m "not slow"` is the quick loop: the unit tests, under a
minute. A test is slow when it starts a process (a script, a cluster task,
TensorBoard) or trains: its source, or that of a fixture it uses, calls one
of SLOW_CALLS. The README's `python -m pytest` runs everything.
"""

import inspect
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))
for path in (ROOT, TESTS):
  if path not in sys.path:
    sys.path.insert(0, path)

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# The kernels the scripts choose (see cifar10_train.py).
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


# What makes a test slow: starting a process, or training a model.
SLOW_CALLS = re.compile(
    r'\b(run_script|subprocess\.(run|Popen)|_start|_run_chief|_run|_train|'
    r'_train_here|train_fixture|train|evaluate|tensorboard)\(')


def _source(function):
  try:
    return inspect.getsource(function)
  except (OSError, TypeError):
    return ''


def _calls_slow(function, depth=3):
  """Whether `function`, or a helper of its module it calls, is slow."""
  source = _source(function)
  if SLOW_CALLS.search(source):
    return True
  if depth == 0:
    return False
  module = sys.modules.get(getattr(function, '__module__', None))
  for name in set(re.findall(r'\b(_?\w+)\(', source)):
    helper = getattr(module, name, None)
    if (inspect.isfunction(helper) and helper is not function
        and _calls_slow(helper, depth - 1)):
      return True
  return False


def _ours(function):
  """Whether `function` is defined in this repository: pytest's own
  fixtures (capsys calls a `_start(` of its own) start no process."""
  try:
    return inspect.getsourcefile(function).startswith(ROOT + os.sep)
  except TypeError:
    return False


def _is_slow(item):
  fixtures = item._fixtureinfo.name2fixturedefs  # pylint: disable=protected-access
  return _calls_slow(item.function) or any(
      _calls_slow(definition.func)
      for name in item.fixturenames for definition in fixtures.get(name, ())
      if _ours(definition.func))


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: starts a process or trains a model (conftest.py '
      'marks these); -m "not slow" leaves them out')


def pytest_collection_modifyitems(items):
  # tf.test.TestCase has a method named test_session that pytest would collect
  # and report as skipped (tensorflow#29439).
  items[:] = [item for item in items if item.name != 'test_session']
  for item in items:
    if _is_slow(item):
      item.add_marker('slow')


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """A synthetic data dir: 5 training files and a test file of 20 records."""
  # Imported here, not at the top: testutil loads TensorFlow, and the xdist
  # controller, which loads this file but runs no test, would hold
  # TensorFlow's start-up lines in its capture and print them after the
  # summary.
  import synthetic  # pylint: disable=g-import-not-at-top
  import testutil  # pylint: disable=g-import-not-at-top
  return testutil.shared_dir(tmp_path_factory, 'cifar10_data',
                             synthetic.make_data_dir)


@pytest.fixture(scope='session')
def learnable_data_dir(tmp_path_factory):
  """Synthetic data a model learns in a few hundred steps at the scripts'
  own hyper-parameters: 512 records a file (so a batch of 128 is a quarter
  of one), each image's colour telling its label; chance is 0.1."""
  import synthetic  # pylint: disable=g-import-not-at-top
  import testutil  # pylint: disable=g-import-not-at-top
  return testutil.shared_dir(
      tmp_path_factory, 'cifar10_learnable',
      lambda path: synthetic.make_data_dir(path, records_per_file=512))
