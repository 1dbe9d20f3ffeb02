"""cifar10_classify.py: pictures of one's own, classified as test records are."""

import json
import os
import re
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest
import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import saved_model_pb2

import cifar10_classify
from cifar10_support import data_files
import synthetic
import testutil

NUM_RECORDS = 200
LINE = re.compile(r'^(.*): ([a-z]+) (\d\.\d{3}), ([a-z]+) (\d\.\d{3}), '
                  r'([a-z]+) (\d\.\d{3})$', re.M)


@pytest.fixture(scope='module')
def colour_model(tmp_path_factory):
  """(data_dir, train_dir): synthetic records, 200 in the test file, and a
  model that tells their colours apart (testutil.colour_checkpoint: written
  directly, not trained; every record right, and its raw weights, which
  classify must not read, wrong)."""
  root = tmp_path_factory.mktemp('classify')
  data_dir = synthetic.make_data_dir(str(root / 'data'),
                                     records_per_file=NUM_RECORDS)
  testutil.colour_checkpoint(str(root / 'train'), 5)
  return data_dir, str(root / 'train')


def _classify(train_dir, files, **kwargs):
  """cifar10_classify.classify of files by train_dir's checkpoint."""
  checkpoint, dtype, _ = cifar10_classify.find_checkpoint(train_dir)
  return cifar10_classify.classify(files, checkpoint, dtype, session_config=(
      testutil.session_config()), **kwargs)


def _test_records(data_dir):
  """(labels, uint8 [N, 32, 32, 3] pictures) of test_batch.bin, in order."""
  return synthetic.read_records(
      os.path.join(data_dir, 'cifar-10-batches-bin', 'test_batch.bin'))


def _write(path, data):
  """Writes `data`, bytes or a uint8 HWC picture (by PIL, in the format of
  path's extension); returns path."""
  if isinstance(data, np.ndarray):
    Image.fromarray(data).save(path, quality=90)
  else:
    with open(path, 'wb') as f:
      f.write(data)
  return path


@pytest.fixture(scope='module')
def pngs(colour_model, tmp_path_factory):
  """The test records written as PNG files, in file order."""
  folder = tmp_path_factory.mktemp('pngs')
  return [_write(str(folder / ('record_%03d.png' % i)), record)
          for i, record in enumerate(_test_records(colour_model[0])[1])]


def test_png_of_each_test_record_gets_the_eval_graphs_class(colour_model,
                                                           pngs):
  # The evaluation graph's class of each of these records is its label, every
  # one (testutil.colour_checkpoint: precision 1.000 measured on them).
  classified = list(_classify(colour_model[1], pngs, batch_size=64))

  assert [problem for _, _, problem in classified] == [None] * len(pngs)
  assert [path for path, _, _ in classified] == pngs
  labels = _test_records(colour_model[0])[0]
  assert len(set(labels)) == 10
  np.testing.assert_array_equal([p.argmax() for _, p, _ in classified],
                                labels)


def test_each_batch_is_classified_before_the_next_is_read(colour_model, pngs,
                                                          tmp_path):
  # The script prints each picture's line as it comes: a batch's results
  # come before the next batch's files are even opened.
  later = str(tmp_path / 'later.png')
  results = _classify(colour_model[1], [pngs[0], later, pngs[1]], batch_size=1)
  first = next(results)
  assert first[0] == pngs[0] and first[2] is None
  # Between results the caller's default graph is its own, not classify's.
  assert not tf.get_default_graph().finalized
  with open(pngs[2], 'rb') as f:
    _write(later, f.read())  # Written only now: not read before.
  rest = list(results)
  assert [(path, problem) for path, _, problem in rest] == [
      (later, None), (pngs[1], None)]
  assert first[1].shape == (10,)


def test_a_file_that_does_not_decode_leaves_its_batchs_pictures_as_they_are(
    colour_model, pngs, tmp_path):
  # The batch fails as a whole; its pictures are classified without the bad
  # file, exactly as in a batch of their own.
  text = _write(str(tmp_path / 'notes.png'), b'not a picture at all\n')
  alone = list(_classify(colour_model[1], pngs[:3]))
  mixed = list(_classify(colour_model[1], [pngs[0], text] + pngs[1:3]))
  assert [path for path, _, _ in mixed] == [pngs[0], text] + pngs[1:3]
  assert mixed[1][1] is None and mixed[1][2].startswith(
      '%s: not a PNG, JPEG, BMP or GIF picture TensorFlow can read (' % text)
  good = [p for _, p, problem in mixed if problem is None]
  np.testing.assert_array_equal(np.stack(good),
                                np.stack([p for _, p, _ in alone]))


def _odd_pictures(folder, data_dir):
  """Grey and RGBA PNGs, a 1000x800 JPEG, a BMP: data_dir's test records."""
  records = _test_records(data_dir)[1]
  rng = np.random.RandomState(1)
  alpha = np.concatenate([records[1], np.full((32, 32, 1), 128, np.uint8)], 2)
  big = np.kron(records[2], np.ones((25, 31, 1), np.uint8))[:800, :1000]
  big = np.clip(big + rng.normal(0, 3, big.shape), 0, 255).astype(np.uint8)
  return [_write(str(folder / 'grey.png'), records[0][:, :, 0]),
          _write(str(folder / 'rgba.png'), alpha),
          _write(str(folder / 'photo_1000x800.jpg'), big),
          _write(str(folder / 'record.bmp'), records[3])]


@pytest.mark.slow  # Starts a process; its fixture trains.
def test_script_classifies_odd_pictures_and_names_each_bad_file(
    data_dir, learned_train_dir, tmp_path):
  # The script's console, after training: the SavedModel's line, each
  # picture's line in the order given, each bad file's line, exit status 1.
  train_dir = learned_train_dir
  export_dir = str(tmp_path / 'model')
  good = _odd_pictures(tmp_path, data_dir)
  empty = _write(str(tmp_path / 'empty.jpg'), b'')
  text = _write(str(tmp_path / 'notes.png'), b'not a picture at all\n')
  no_pictures = tmp_path / 'no_pictures'
  no_pictures.mkdir()
  (no_pictures / 'readme.txt').write_text('hello')
  missing = str(tmp_path / 'missing.png')

  result = testutil.run_script('cifar10_classify.py', [
      '--checkpoint_dir=%s' % train_dir, '--export_dir=%s' % export_dir,
      missing] + good[:2] + [empty, text, str(no_pictures)] + good[2:])

  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stdout.startswith(
      'Wrote a SavedModel of %s to %s (signatures serving_default: images, '
      'pixels: pixels).\n' % (tf.train.latest_checkpoint(train_dir),
                               export_dir)), result.stdout[:2000]
  assert os.path.exists(os.path.join(export_dir, 'saved_model.pb'))
  lines = LINE.findall(result.stdout)
  assert [line[0] for line in lines] == good  # In the order given.
  for line in lines:
    assert line[1] in data_files.CLASS_NAMES
    assert 1.0 >= float(line[2]) >= float(line[4]) >= float(line[6]) >= 0
  errors = [line for line in result.stderr.splitlines()
            if line.startswith('cifar10_classify.py: ')]
  assert errors == [
      'cifar10_classify.py: %s: no such file or directory' % missing,
      'cifar10_classify.py: %s: a directory without pictures (.png, .jpg, '
      '.jpeg, .bmp, .gif files)' % no_pictures,
      'cifar10_classify.py: %s: the file is empty' % empty,
      errors[3]]
  # TensorFlow's own reason, its list of formats left to it.
  assert errors[3].startswith(
      'cifar10_classify.py: %s: not a PNG, JPEG, BMP or GIF picture '
      'TensorFlow can read (Unknown image file format.' % text)


def test_top_k_above_the_class_count_is_one_line(colour_model, pngs, capsys):
  # What the script's main does with these flags (the process that prints
  # the line, exit status 1: test_eval.py's
  # test_scripts_refuse_a_checkpoint_they_cannot_use_each_in_its_line).
  train_dir = colour_model[1]
  line = testutil.exit_line(
      lambda: cifar10_classify.main(['cifar10_classify.py', pngs[0]]),
      'cifar10_classify.py',
      ['--checkpoint_dir=%s' % train_dir, '--top_k=11', pngs[0]],
      cifar10_classify.FLAGS)
  assert line == (
      'cifar10_classify.py: --top_k=11 is more than the 10 classes of '
      'checkpoint %s; give --top_k=10 or fewer'
      % tf.train.latest_checkpoint(train_dir))
  assert not capsys.readouterr().out  # No picture classified.


_LOAD_IN_TF2 = '''
import json, sys
import numpy as np
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
files = json.loads(sys.argv[2])
encoded = tf.constant([open(f, 'rb').read() for f in files])
out = model.signatures['serving_default'](images=encoded)
pixels = tf.io.decode_png(tf.io.read_file(files[0]), channels=3)
by_pixels = model.signatures['pixels'](pixels=pixels[None])
np.savez(sys.argv[3], probabilities=out['probabilities'].numpy(),
         classes=np.array([c.decode() for c in out['classes'].numpy()]),
         pixels=by_pixels['probabilities'].numpy(),
         pixels_classes=np.array(
             [c.decode() for c in by_pixels['classes'].numpy()]))
'''


@pytest.mark.slow  # Starts a process.
def test_savedmodel_serves_what_the_script_prints(colour_model, pngs, tmp_path):
  data_dir, train_dir = colour_model
  files = pngs[:20] + _odd_pictures(tmp_path, data_dir)[2:3]
  export_dir = str(tmp_path / 'model')
  # What --export_dir runs (its line: the script's console test above).
  checkpoint, dtype, names = cifar10_classify.find_checkpoint(train_dir)
  cifar10_classify.export(checkpoint, export_dir, dtype, names)

  # Plain TensorFlow 2, eager, no compat module, in a process of its own.
  out = str(tmp_path / 'served.npz')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  subprocess.run([sys.executable, '-c', _LOAD_IN_TF2, export_dir,
                  json.dumps(files), out], check=True, env=env, timeout=120)
  served = np.load(out)

  expected = np.stack([p for _, p, _ in _classify(train_dir, files)])
  np.testing.assert_allclose(served['probabilities'], expected, atol=1e-5)
  np.testing.assert_allclose(served['pixels'], expected[:1], atol=1e-5)
  assert list(served['classes']) == [
      data_files.CLASS_NAMES[p.argmax()] for p in expected]
  assert list(served['pixels_classes']) == list(served['classes'][:1])

  # The signatures as `saved_model_cli show --all` lists them: its
  # saved_model.pb's, by key, with their inputs and outputs.
  with open(os.path.join(export_dir, 'saved_model.pb'), 'rb') as f:
    saved = saved_model_pb2.SavedModel.FromString(f.read())
  assert [list(graph.meta_info_def.tags) for graph in saved.meta_graphs] == [
      ['serve']]
  signatures = saved.meta_graphs[0].signature_def
  assert {key: (sorted(signatures[key].inputs), sorted(signatures[key].outputs))
          for key in ('serving_default', 'pixels')} == {
              'serving_default': (['images'], ['classes', 'probabilities']),
              'pixels': (['pixels'], ['classes', 'probabilities'])}

  # Never written over: --export_dir again is refused (the script's line is
  # 'cifar10_classify.py: ' and this).
  with pytest.raises(cifar10_classify.ClassifyError) as refused:
    cifar10_classify.export(checkpoint, export_dir, dtype, names)
  assert str(refused.value) == (
      '--export_dir=%s exists already: give a new directory (a SavedModel is '
      'never written over another)' % export_dir)


def test_find_checkpoint_names_a_missing_unreadable_or_averageless_one(
    tmp_path):
  # The script's line: 'cifar10_classify.py: ' and each message (test_eval.py's
  # test_scripts_refuse_a_checkpoint_they_cannot_use_each_in_its_line).
  with pytest.raises(cifar10_classify.ClassifyError) as refused:
    cifar10_classify.find_checkpoint(str(tmp_path))
  assert str(refused.value) == (
      'no checkpoint in --checkpoint_dir=%s: point it at the --train_dir of '
      'a training run, or give --checkpoint_path' % tmp_path)
  path = str(tmp_path / 'model.ckpt')
  testutil.save_checkpoint(path, 3, 0, 0, with_averages=False)
  path += '-3'
  with pytest.raises(cifar10_classify.ClassifyError,
                     match='holds no CIFAR-10 model with moving averages'):
    cifar10_classify.find_checkpoint(str(tmp_path))
  with open(path + '.data-00000-of-00001', 'r+b') as f:
    f.truncate(1)
  with pytest.raises(cifar10_classify.ClassifyError,
                     match='^cannot read checkpoint %s: ' % path):
    cifar10_classify.find_checkpoint('', checkpoint_path=path)
