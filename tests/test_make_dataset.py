"""cifar10_make_dataset.py and cifar10_support/pictures.py: folders of
pictures into CIFAR-10's binary layout, decoded as cifar10_classify.py
decodes them. Expected pixels come from numpy and PIL, not from TensorFlow."""

import io
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow.compat.v1 as tf

import cifar10_classify
import cifar10_make_dataset as make_dataset
from cifar10_support import data_files
from cifar10_support import pictures
import synthetic
import testutil


def _pixels(channels=3, seed=0):
  return np.random.RandomState(seed).randint(
      0, 256, (32, 32, channels)).astype(np.uint8)


def _encoded(image, fmt, **kwargs):
  """The bytes of a PIL image saved as `fmt`."""
  out = io.BytesIO()
  image.save(out, fmt, **kwargs)
  return out.getvalue()


def _save(path, image, fmt='PNG', **kwargs):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(_encoded(image, fmt, **kwargs) if isinstance(image, Image.Image)
            else image)
  return path


def _decoded(encoded_files):
  """pictures.decode_batch of the bytes, run in a graph of its own."""
  with tf.Graph().as_default():
    contents = tf.placeholder(tf.string, [None])
    pixels = pictures.decode_batch(contents)
    with tf.Session(config=testutil.session_config()) as sess:
      return sess.run(pixels, {contents: encoded_files})


def _convert(root, data_dir, **kwargs):
  """make_dataset.convert, its log lines and bad-file lines collected."""
  lines = {'log': [], 'bad': []}
  dataset = make_dataset.convert(
      str(root), str(data_dir),
      log=lambda line, bad=False: lines['bad' if bad else 'log'].append(line),
      **kwargs)
  return dataset, lines


def _tree(root, per_class, seed=0):
  """A folder per class, {name: number of 32x32 PNGs}; returns {name:
  [uint8 [32, 32, 3] arrays]} in file-name order."""
  rng = np.random.RandomState(seed)
  written = {}
  for name, count in per_class.items():
    written[name] = []
    for i in range(count):
      pixels = rng.randint(0, 256, (32, 32, 3)).astype(np.uint8)
      _save(os.path.join(str(root), name, '%03d.png' % i),
            Image.fromarray(pixels))
      written[name].append(pixels)
  return written


# pictures.decode: each format and mode as PIL sees it.

def test_each_format_and_mode_decodes_exactly():
  rgb = _pixels()
  grey = Image.fromarray(rgb[:, :, 0])
  palette = Image.fromarray(rgb).convert('P')
  frames = [palette, Image.fromarray(_pixels(seed=4)).convert('P')]
  gif = _encoded(palette, 'GIF', save_all=True, append_images=frames[1:])
  assert Image.open(io.BytesIO(gif)).n_frames == 2
  sixteen = (np.arange(32 * 32, dtype=np.int64) * 64).reshape(32, 32)
  cases = [
      (_encoded(Image.fromarray(rgb), 'PNG'), rgb),
      (_encoded(grey, 'PNG'), np.array(grey.convert('RGB'))),
      (_encoded(palette, 'PNG'), np.array(palette.convert('RGB'))),
      (_encoded(Image.fromarray(rgb), 'BMP'), rgb),
      (gif, np.array(palette.convert('RGB'))),  # Its first frame.
      # 16 bits, rounded to 8.
      (_encoded(Image.fromarray(sixteen.astype(np.int32)).convert('I;16'),
                'PNG'), np.round(sixteen / 257.).astype(np.uint8)[..., None]),
  ]  # JPEG: the next test.
  decoded = _decoded([data for data, _ in cases])
  for got, (_, expected) in zip(decoded, cases):
    np.testing.assert_array_equal(got, np.broadcast_to(expected, got.shape))


def test_jpeg_decodes_as_tensorflows_integer_accurate_dct():
  # The reference is TensorFlow's own decoder with the DCT that
  # shared/data/make_cifar10_bin.py (the CIFAR-10 copy here) decodes with.
  jpegs = [_encoded(Image.fromarray(_pixels(seed=s)), 'JPEG', quality=q)
           for s, q in ((3, 75), (4, 90), (5, 50))]
  with tf.Graph().as_default():
    data = tf.placeholder(tf.string, [])
    accurate = tf.io.decode_jpeg(data, channels=3,
                                 dct_method='INTEGER_ACCURATE')
    default = tf.io.decode_jpeg(data, channels=3)
    with tf.Session(config=testutil.session_config()) as sess:
      expected = [sess.run([accurate, default], {data: j}) for j in jpegs]
  got = _decoded(jpegs)
  for decoded, (reference, fast) in zip(got, expected):
    np.testing.assert_array_equal(decoded, reference)
  # Not the default DCT: this test tells the two apart.
  assert any((reference != fast).any() for reference, fast in expected)


def test_png_alpha_is_composited_on_white_bmp_alpha_ignored():
  rgb, alpha = _pixels(seed=1), _pixels(channels=1, seed=2)
  rgba = np.concatenate([rgb, alpha], axis=2)
  a = alpha / 255.
  expected = np.round(rgb * a + 255 * (1 - a))
  grey_alpha = Image.fromarray(rgba[:, :, [0, 3]], 'LA')
  expected_grey = np.round(rgb[:, :, :1] * a + 255 * (1 - a))
  got = _decoded([_encoded(Image.fromarray(rgba), 'PNG'),
                  _encoded(grey_alpha, 'PNG'),
                  _encoded(Image.fromarray(rgba), 'BMP')])
  # float32 against float64: a half may round either way.
  assert np.abs(got[0] - expected).max() <= 1
  assert (got[0] == expected).mean() > 0.99
  assert np.abs(got[1] - expected_grey).max() <= 1
  assert (got[0] != rgb).mean() > 0.9  # Something was composited.
  np.testing.assert_array_equal(got[2], rgb)


def test_other_sizes_are_resized_whole_to_32x32():
  # Left half red, right half blue, 50 rows by 120 columns: resized whole
  # (not cropped), the left columns stay red, the right blue, every row.
  halves = np.zeros((50, 120, 3), np.uint8)
  halves[:, :60, 0] = 255
  halves[:, 60:, 2] = 255
  uniform = np.full((300, 7, 3), (10, 200, 30), np.uint8)
  got = _decoded([_encoded(Image.fromarray(halves), 'PNG'),
                  _encoded(Image.fromarray(uniform), 'BMP')])
  assert got.shape == (2, 32, 32, 3)
  np.testing.assert_array_equal(got[0][:, :15], np.tile([255, 0, 0],
                                                        (32, 15, 1)))
  np.testing.assert_array_equal(got[0][:, 17:], np.tile([0, 0, 255],
                                                        (32, 15, 1)))
  np.testing.assert_array_equal(got[1], np.tile([10, 200, 30], (32, 32, 1)))


def test_classify_decodes_with_the_shared_function():
  assert cifar10_classify.decode_batch is pictures.decode_batch
  assert cifar10_classify.IMAGE_EXTENSIONS == (
      '.png', '.jpg', '.jpeg', '.bmp', '.gif')


def test_palette_bmp_and_broken_files_are_named_with_a_reason(tmp_path):
  palette = Image.fromarray(_pixels()).convert('P')
  good = _encoded(Image.fromarray(_pixels()), 'PNG')
  files = {'palette.bmp': _encoded(palette, 'BMP'),
           'text.png': b'not a picture\n',
           'cut.jpg': _encoded(Image.fromarray(_pixels()), 'JPEG')[:300],
           'good.png': good}
  paths = [_save(str(tmp_path / name), data) for name, data in files.items()]
  outcomes = [pictures.read(path) for path in paths]
  pictures.mark_undecodable(paths, outcomes, lambda data: _decoded([data]))
  reasons = ['(assertion failed: [a BMP of fewer than 24 bits', '(', '(']
  for path, (problem, _), reason in zip(paths, outcomes, reasons):
    assert problem.startswith('%s: %s %s' % (path, pictures.NOT_A_PICTURE,
                                             reason)), problem
  assert outcomes[3] == (None, good)


# The converter.

def test_32x32_pngs_convert_bit_exactly_classes_sorted(tmp_path):
  names = {'zebra': 4, 'Ant': 3, 'big cat': 5, 'ødegaard': 3, '猫': 3}
  written = _tree(tmp_path / 'pics', names)
  dataset, lines = _convert(tmp_path / 'pics', tmp_path / 'data',
                            test_fraction=0.34)

  expected_names = sorted(names)  # Code points: upper case first.
  assert expected_names[:2] == ['Ant', 'big cat']
  assert dataset.class_names == tuple(expected_names)
  assert dataset.train_files == ('data_batch_1.bin',)
  assert dataset.check(dataset.train_files + dataset.test_files) == 18
  with open(os.path.join(dataset.directory, 'batches.meta.txt'), 'rb') as f:
    assert f.read().decode('utf-8').splitlines() == expected_names
  # Every picture once, bit for bit, under its class's label.
  records = [(label, picture.tobytes(), name)
             for name in dataset.train_files + dataset.test_files
             for label, picture in zip(*synthetic.read_records(
                 os.path.join(dataset.directory, name)))]
  assert sorted(record[:2] for record in records) == sorted(
      (expected_names.index(name), picture.tobytes())
      for name, pictures_of in written.items() for picture in pictures_of)
  # 0.34 of each class held out, rounded: 1 of 3 or 4, 2 of 5.
  assert sorted(label for label, _, name in records
                if name == 'test_batch.bin') == [0, 1, 1, 2, 3, 4]
  assert lines['bad'] == []
  assert lines['log'][0].startswith('Converting 18 pictures in %s (5 classes'
                                    % (tmp_path / 'pics'))


def test_hidden_and_non_picture_files_are_left_out_nested_pictures_in(
    tmp_path):
  root = tmp_path / 'pics'
  _tree(root, {'a': 2, 'b': 2})
  picture = Image.fromarray(_pixels())
  _save(str(root / 'a' / 'deeper' / 'still' / 'x.JPG'), picture, 'JPEG')
  _save(str(root / 'a' / '.hidden.png'), picture)
  _save(str(root / 'a' / '.thumbnails' / 'x.png'), picture)
  _save(str(root / '.git' / 'x.png'), picture)  # Not a class.
  _save(str(root / 'b' / 'notes.txt'), b'hello')
  _save(str(root / 'README.md'), b'hello')

  names, per_class, others = make_dataset.find_classes(str(root))

  assert names == ['a', 'b']
  assert per_class == [
      [str(root / 'a' / n) for n in ('000.png', '001.png',
                                     os.path.join('deeper', 'still', 'x.JPG'))],
      [str(root / 'b' / n) for n in ('000.png', '001.png')]]
  assert sorted(others) == [str(root / 'README.md'),
                            str(root / 'b' / 'notes.txt')]


def test_a_split_of_ones_own_is_kept(tmp_path):
  _tree(tmp_path / 'pics' / 'train', {'cat': 5, 'dog': 3}, seed=1)
  _tree(tmp_path / 'pics' / 'test', {'cat': 1, 'dog': 2}, seed=2)
  names, train, test, _, own = make_dataset.plan(str(tmp_path / 'pics'), 0.5)
  assert own and names == ['cat', 'dog']
  assert sorted(train) == sorted(
      [(str(tmp_path / 'pics' / 'train' / 'cat' / ('%03d.png' % i)), 0)
       for i in range(5)] +
      [(str(tmp_path / 'pics' / 'train' / 'dog' / ('%03d.png' % i)), 1)
       for i in range(3)])
  assert sorted(label for _, label in test) == [0, 1, 1]
  assert all(os.sep + 'test' + os.sep in path for path, _ in test)


def test_held_out_share_is_per_class_and_the_bytes_repeat(tmp_path,
                                                          monkeypatch):
  _tree(tmp_path / 'pics', {'a': 10, 'b': 7, 'c': 3})
  monkeypatch.setattr(make_dataset, 'RECORDS_PER_FILE', 4)
  first, _ = _convert(tmp_path / 'pics', tmp_path / 'one')
  second, _ = _convert(tmp_path / 'pics', tmp_path / 'two')

  # 0.2 of each, rounded: 2 of 10, 1 of 7, 1 of 3 (0.6); 16 to train.
  assert first.train_files == tuple('data_batch_%d.bin' % i
                                    for i in range(1, 5))
  sizes = [os.path.getsize(p) // data_files.RECORD_BYTES
           for p in first.paths(first.train_files + first.test_files)]
  assert sizes == [4, 4, 4, 4, 4]
  labels = synthetic.read_records(first.paths(first.test_files)[0])[0]
  assert sorted(labels) == [0, 0, 1, 2]
  for name in first.train_files + first.test_files + ('batches.meta.txt',):
    with open(os.path.join(first.directory, name), 'rb') as a, \
        open(os.path.join(second.directory, name), 'rb') as b:
      assert a.read() == b.read(), name
  # Shuffled, not in class order.
  train_labels = np.concatenate([synthetic.read_records(p)[0] for p in
                                 first.paths(first.train_files)])
  assert list(train_labels) != sorted(train_labels)


def test_bad_files_are_each_named_and_nothing_is_written(tmp_path):
  # A split of one's own: where each bad file falls is known.
  _tree(tmp_path / 'pics' / 'train', {'a': 3, 'b': 3})
  _tree(tmp_path / 'pics' / 'test', {'a': 1, 'b': 1})
  bad = [_save(str(tmp_path / 'pics' / 'train' / 'a' / 'text.png'),
               b'text\n'),
         _save(str(tmp_path / 'pics' / 'test' / 'b' / 'empty.jpg'), b'')]
  data_dir = tmp_path / 'data'
  data_dir.mkdir()
  named = []
  with pytest.raises(make_dataset.DatasetError,
                     match=r'^2 files above are not a picture TensorFlow '
                     'can read; nothing written to '):
    make_dataset.convert(str(tmp_path / 'pics'), str(data_dir),
                         test_fraction=0.34,
                         log=lambda line, bad=False: bad and named.append(line))
  unknown = '%s: %s (Unknown image file format.' % (bad[0],
                                                   pictures.NOT_A_PICTURE)
  assert len(named) == 2
  assert named[0].startswith(unknown) or named[1].startswith(unknown)
  assert '%s: the file is empty' % bad[1] in named
  assert os.listdir(str(data_dir)) == []

  dataset, lines = _convert(tmp_path / 'pics', data_dir, test_fraction=0.34,
                            skip_bad_files=True)
  assert sorted(lines['bad']) == sorted('skipped ' + line for line in named)
  assert dataset.records(dataset.train_files) == 6
  assert dataset.records(dataset.test_files) == 2


def test_a_class_left_without_readable_pictures_is_refused(tmp_path):
  _tree(tmp_path / 'pics', {'a': 3})
  for i in range(3):
    _save(str(tmp_path / 'pics' / 'b' / ('%d.png' % i)), b'text')
  with pytest.raises(make_dataset.DatasetError,
                     match='^class b has no picture that TensorFlow can read '
                     'in the (training|test) split; expected at least one$'):
    _convert(tmp_path / 'pics', tmp_path / 'data', test_fraction=0.34,
             skip_bad_files=True)
  assert os.listdir(str(tmp_path / 'data')) == []


def _refusal(tmp_path, **kwargs):
  """The DatasetError message of converting tmp_path/pics."""
  existed = os.path.exists(str(tmp_path / 'data' / 'cifar-10-batches-bin'))
  with pytest.raises(make_dataset.DatasetError) as raised:
    _convert(tmp_path / 'pics', tmp_path / 'data', **kwargs)
  assert os.path.exists(str(tmp_path / 'data' / 'cifar-10-batches-bin')) == (
      existed)
  return str(raised.value)


def test_bad_trees_are_refused_naming_the_path(tmp_path):
  root = tmp_path / 'pics'
  assert _refusal(tmp_path) == (
      '%s: no such folder; expected a folder of class folders '
      '(%s/<class>/...)' % (root, root))
  _save(str(root / 'loose.png'), Image.fromarray(_pixels()))
  assert _refusal(tmp_path).startswith('%s holds no class folder; ' % root)
  (root / 'empty' / 'sub').mkdir(parents=True)
  _save(str(root / 'empty' / 'sub' / 'x.txt'), b'x')
  _tree(root, {'full': 5})
  assert _refusal(tmp_path) == (
      '%s holds no picture; expected at least one .png, .jpg, .jpeg, .bmp, '
      '.gif file in each class folder (at any depth)' % (root / 'empty'))


def test_classes_too_small_to_split_or_too_many_are_refused(tmp_path):
  root = tmp_path / 'pics'
  _tree(root, {'a': 5, 'b': 2})
  assert _refusal(tmp_path) == (
      '%s: none of its 2 pictures would be held out for testing at '
      '--test_fraction=0.2; expected a class with enough pictures for both '
      'splits (add pictures, or change --test_fraction)' % (root / 'b'))
  assert _refusal(tmp_path, test_fraction=0.8).startswith(
      '%s: all of its 2 pictures would be held out' % (root / 'b'))
  for i in range(data_files.MAX_CLASSES - 1):
    (root / ('c%03d' % i)).mkdir()
  assert _refusal(tmp_path) == (
      '%s holds 257 class folders; expected at most 256 (a record\'s label '
      'is one byte)' % root)


def test_splits_that_disagree_and_odd_names_are_refused(tmp_path):
  root = tmp_path / 'pics'
  _tree(root / 'train', {'cat': 2, 'dog': 2, 'emu': 1})
  _tree(root / 'test', {'cat': 1, 'fox': 1, 'emu': 1})
  assert _refusal(tmp_path) == (
      '%s/train and %s/test hold different class folders (only in train/: '
      'dog; only in test/: fox); expected the same classes in both'
      % (root, root))
  (root / 'val').mkdir()
  assert _refusal(tmp_path).startswith(
      '%s holds train/ and test/ beside val; expected either' % root)

  other = tmp_path / 'names'
  _tree(other, {'a': 3, 'two\nlines': 3})
  with pytest.raises(make_dataset.DatasetError,
                     match=r"^'.*two\\nlines': a class folder's name cannot "
                     'hold a line break'):
    make_dataset.plan(str(other), 0.5)


def test_an_existing_data_set_is_replaced_only_with_overwrite(tmp_path):
  _tree(tmp_path / 'pics', {'a': 3, 'b': 3})
  target = tmp_path / 'data' / 'cifar-10-batches-bin'
  target.mkdir(parents=True)
  (target / 'data_batch_7.bin').write_bytes(b'old')
  assert _refusal(tmp_path) == (
      '%s exists already (a data set); expected a new --data_dir, or '
      '--overwrite to replace it' % target)
  assert os.listdir(str(target)) == ['data_batch_7.bin']

  dataset, _ = _convert(tmp_path / 'pics', tmp_path / 'data',
                        test_fraction=0.34, overwrite=True)
  assert sorted(os.listdir(str(target))) == [
      'batches.meta.txt', 'data_batch_1.bin', 'test_batch.bin']
  assert dataset.class_names == ('a', 'b')
  # Nothing else is left in data_dir: no partial or old copy.
  assert os.listdir(str(tmp_path / 'data')) == ['cifar-10-batches-bin']


# The script, as a user runs it (slow: a process).

@pytest.mark.slow  # Starts a process.
def test_script_names_each_bad_file_and_exits_1_or_says_what_it_wrote(
    tmp_path):
  _tree(tmp_path / 'pics', {'cat': 3, 'dog': 4})
  bad = _save(str(tmp_path / 'pics' / 'dog' / 'broken.gif'), b'GIF89a...')
  data_dir = tmp_path / 'data'
  args = [str(tmp_path / 'pics'), '--data_dir=%s' % data_dir]
  result = testutil.run_script('cifar10_make_dataset.py', args, timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  lines = result.stderr.splitlines()
  assert len(lines) == 2
  assert lines[0].startswith('cifar10_make_dataset.py: %s: %s ('
                             % (bad, pictures.NOT_A_PICTURE))
  assert lines[1] == (
      'cifar10_make_dataset.py: 1 file above is not a picture TensorFlow can '
      'read; nothing written to %s (expected PNG, JPEG, BMP or GIF pictures; '
      '--skip_bad_files leaves such files out)' % data_dir)
  assert os.listdir(str(data_dir)) == []

  os.remove(bad)
  result = testutil.run_script('cifar10_make_dataset.py', args, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == ''
  assert result.stdout.splitlines()[-1] == (
      'Wrote %s: 2 classes (cat, dog); 5 training records in 1 file, 2 test '
      'records.' % (data_dir / 'cifar-10-batches-bin'))
