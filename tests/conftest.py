"""Import paths, quiet TF, the data fixtures, and the `slow` marker: a test
that starts a process or trains (a MonitoredSession), itself or in a fixture,
is marked slow (itself or by `pytestmark`), or the guard below fails it, so
that `python -m pytest -m "not slow"` is the quick loop."""

import functools
import os
import subprocess
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

# (nodeid, 'setup' or 'call') of the test now run, while it is not slow.
_quick_test = [None]


def _refused_in_quick_tests(what, function, when=lambda: True):
  @functools.wraps(function)
  def guarded(*args, **kwargs):
    if _quick_test[0] and when():
      nodeid, phase = _quick_test[0]
      pytest.fail('%s %s%s, so it is slow: mark it @pytest.mark.slow '
                  '(tests/conftest.py)' % (
                      nodeid, 'uses a fixture that ' if phase == 'setup'
                      else '', what), pytrace=False)
    return function(*args, **kwargs)
  guarded.guarded = True
  return guarded


def _graph_holds_the_model():
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  return any(variable.op.name == 'conv1/weights'
             for variable in tf.global_variables())


def _guard_the_quick_loop():
  if not getattr(subprocess.Popen.__init__, 'guarded', False):
    subprocess.Popen.__init__ = _refused_in_quick_tests(
        'starts a process', subprocess.Popen.__init__)
  # Every trainer's session; one of a few ops (a hook's test) is quick.
  monitored = sys.modules.get('tensorflow.python.training.monitored_session')
  session = getattr(monitored, '_MonitoredSession', None)
  if session and not getattr(session.__init__, 'guarded', False):
    session.__init__ = _refused_in_quick_tests(
        'trains (a MonitoredSession of the model)', session.__init__,
        _graph_holds_the_model)


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: starts a process or trains a model, itself or in a '
      'fixture; -m "not slow" leaves it out')


def pytest_collection_modifyitems(items):
  # tf.test.TestCase's test_session, not a test (tensorflow#29439).
  items[:] = [item for item in items if item.name != 'test_session']


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
  _guard_the_quick_loop()
  quick = not item.get_closest_marker('slow')
  _quick_test[0] = (item.nodeid, 'setup') if quick else None
  yield
  _quick_test[0] = (item.nodeid, 'call') if quick else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
  yield
  _quick_test[0] = None


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """A synthetic data dir: 5 training files and a test file of 20 records."""
  # Imported here: the xdist controller, which runs no test, would print
  # TensorFlow's start-up lines after the summary.
  import synthetic  # pylint: disable=g-import-not-at-top
  import testutil  # pylint: disable=g-import-not-at-top
  return testutil.shared_dir(tmp_path_factory, 'cifar10_data',
                             synthetic.make_data_dir)


@pytest.fixture(scope='session')
def learnable_data_dir(tmp_path_factory):
  """Synthetic data a model learns in a few hundred steps at the scripts'
  own hyper-parameters: 512 records a file, each colour telling its label."""
  import synthetic  # pylint: disable=g-import-not-at-top
  import testutil  # pylint: disable=g-import-not-at-top
  return testutil.shared_dir(
      tmp_path_factory, 'cifar10_learnable',
      lambda path: synthetic.make_data_dir(path, records_per_file=512))


@pytest.fixture(scope='session')
def learned_train_dir(data_dir, tmp_path_factory):
  """testutil.learned_train_dir, for promises about a trained model (a
  checkpoint alone: testutil.model_checkpoint, colour_checkpoint)."""
  import testutil  # pylint: disable=g-import-not-at-top
  return testutil.learned_train_dir(data_dir, tmp_path_factory)
