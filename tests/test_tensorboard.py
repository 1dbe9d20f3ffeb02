"""What a user sees in TensorBoard, through a real TensorBoard server's HTTP
data API, as a browser reads it."""

import functools
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

import cifar10_multi_gpu_train
import cifar10_train
from cifar10_support import evaluation
from cifar10_support import run_flags
import testutil
from testutil import ROOT

# Each test trains, or reads a TensorBoard server's runs that a fixture
# trained.
pytestmark = pytest.mark.slow

STEPS = 25


def _train(train, data_dir, train_dir, towers=(), **kwargs):
  """A trainer's train function, in this process, as its script calls it;
  towers: its num_towers and tower_device."""
  testutil.train(train, run_flags.TrainSettings(
      data_dir, train_dir, batch_size=8, log_frequency=100, **kwargs),
                 **dict(zip(('num_towers', 'tower_device'), towers)))


@pytest.fixture(scope='module')
def logdir(data_dir, tmp_path_factory):
  """A TensorBoard logdir: runs 'train' (STEPS steps), 'eval' and 'towers',
  written by the scripts' own train and eval functions in this process once
  per test run (testutil.shared_dir); seeded, so that the loss curves the
  tests read are the same every run."""
  def build(root):
    _train(cifar10_train.train, data_dir, os.path.join(root, 'train'),
           max_steps=STEPS, save_summaries_steps=10, seed=1)
    testutil.evaluate(
        os.path.join(root, 'train'), os.path.join(root, 'eval'),
        evaluation.EvalSettings(data_dir, num_examples=20, batch_size=8,
                                run_once=True))
    _train(cifar10_multi_gpu_train.train, data_dir,
           os.path.join(root, 'towers'), (2, 'cpu'), max_steps=12,
           save_summaries_steps=5, seed=1)
  return testutil.shared_dir(tmp_path_factory, 'logdir', build)


def test_save_summaries_steps_zero_writes_no_summaries(data_dir, tmp_path):
  train_dir = str(tmp_path / 'train')
  _train(cifar10_train.train, data_dir, train_dir, max_steps=5,
         save_summaries_steps=0)
  assert testutil.event_tags(train_dir) == set()
  assert os.path.exists(os.path.join(train_dir, 'model.ckpt-5.index'))


def _get(port, path, **query):
  """GET http://127.0.0.1:port/path?query, as JSON."""
  with urllib.request.urlopen('http://127.0.0.1:%d%s?%s' % (
      port, path, urllib.parse.urlencode(query)), timeout=30) as response:
    return json.loads(response.read())


def _shows_every_run(port):
  try:
    return {'train', 'eval', 'towers'} <= set(_get(
        port, '/data/plugin/scalars/tags'))
  except (OSError, ValueError):  # Not listening yet, or not loaded.
    return False


@pytest.fixture(scope='module')
def tensorboard(logdir, tmp_path_factory):
  """A TensorBoard server on logdir; yields a function GET path -> JSON."""
  console = str(tmp_path_factory.mktemp('tensorboard') / 'console.log')

  def start():
    port, = testutil.free_ports(1)
    # Its console to a file: a pipe nobody reads could fill and block it.
    with open(console, 'w') as log:
      server = subprocess.Popen(
          [sys.executable, '-m', 'tensorboard.main', '--logdir', logdir,
           '--host', '127.0.0.1', '--port', str(port), '--load_fast=false',
           '--reload_interval=1'],
          cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
      testutil.wait_for('TensorBoard to show every run of ' + logdir,
                        lambda: _shows_every_run(port), [console],
                        lambda: server.poll() is not None and 'it ended')
    except BaseException:
      server.kill()
      server.wait()
      with open(console) as f:  # Another process took the port first?
        if 'TensorBoard could not bind to port %d, it was already in use' % (
            port) in f.read():
          raise testutil.PortTaken()
      raise
    return server, port

  server, port = testutil.retry_port_taken(start)
  try:
    yield functools.partial(_get, port)
  finally:
    server.terminate()
    server.wait(timeout=60)


@pytest.mark.parametrize('run,steps', [
    ('train', [1, 10, 20, STEPS]), ('towers', [1, 5, 10, 12])])
def test_tensorboard_shows_loss_curves_from_their_start_to_the_last_step(
    tensorboard, run, steps):
  def points(tag):  # [wall_time, step, value] each.
    return tensorboard('/data/plugin/scalars/scalars', run=run, tag=tag)

  for name in ('total_loss', 'cross_entropy', 'local3/weight_loss'):
    average, raw = points(name + '_1'), points(name + '__raw_')
    assert [p[1] for p in average] == [p[1] for p in raw] == steps
    # The first point is the first loss, not a 0 the average climbs from.
    assert average[0][2] == pytest.approx(raw[0][2], rel=0.1)
    assert average[0][2] > 0.5 * raw[-1][2]
  # Steps per second, with the summaries after the first.
  rates = points('global_step/sec')
  assert [p[1] for p in rates] == steps[1:]
  assert all(p[2] > 0 for p in rates)


def test_tensorboard_shows_both_precisions_and_the_per_class_table(
    tensorboard):
  assert {'Precision @ 1', 'Precision @ 5'} <= set(
      tensorboard('/data/plugin/scalars/tags')['eval'])
  at_1, at_5 = [
      tensorboard('/data/plugin/scalars/scalars', run='eval', tag=tag)
      for tag in ('Precision @ 1', 'Precision @ 5')]
  # Points are [wall_time, step, value]: one each, from the same event.
  assert len(at_1) == len(at_5) == 1
  assert at_5[0][:2] == at_1[0][:2] and at_5[0][1] == STEPS
  assert at_1[0][2] <= at_5[0][2] <= 1

  tags = tensorboard('/data/plugin/text/tags')
  assert {'precision_by_class', 'confusion_matrix_counts'} <= set(tags['eval'])
  table, = tensorboard('/data/plugin/text/text', run='eval',
                       tag='precision_by_class')
  assert table['step'] == STEPS
  # Rendered from markdown: a header row and one row per class.
  for cell in ('<th>precision @ 1</th>', '<th>most confused with</th>',
               '<td>airplane</td>', '<td>truck</td>'):
    assert cell in table['text'], table['text']
  assert table['text'].count('<tr>') == 11
