"""Shared test set-up: import paths, quiet TF, the synthetic data fixture."""

import os
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

import synthetic  # pylint: disable=wrong-import-position


def pytest_collection_modifyitems(items):
  # tf.test.TestCase has a method named test_session that pytest would collect
  # and report as skipped (tensorflow#29439).
  items[:] = [item for item in items if item.name != 'test_session']


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """A synthetic data dir: 5 training files and a test file of 20 records."""
  return synthetic.make_data_dir(str(tmp_path_factory.mktemp('cifar10_data')))
