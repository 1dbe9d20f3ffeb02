"""The labelled confusion-matrix image of evaluation.py."""

import itertools

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont

from cifar10_support import data_files
from cifar10_support import evaluation

NAMES = data_files.CLASS_NAMES
GREY = [200, 200, 200]
WHITE = [255, 255, 255]
FULL = list(evaluation.CONFUSION_FULL_RGB)
HALF = list(np.round(255 - 0.5 * (255 - evaluation.CONFUSION_FULL_RGB)))


def _ink_box(mask):
  """`mask` cut down to the rows and columns that hold ink."""
  rows, columns = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
  return mask[rows[0]:rows[-1] + 1, columns[0]:columns[-1] + 1]


def _contains(mask, text):
  """Whether `text` (a bool mask, cut to its ink) appears exactly in `mask`."""
  windows = np.lib.stride_tricks.sliding_window_view(mask, text.shape)
  return bool((windows == text).all(axis=(2, 3)).any())


def _dark(image):
  # Text is black; the darkest cell, CONFUSION_FULL_RGB, has blue 107.
  return image.max(axis=-1) < 64


def _text(text, size=evaluation.FONT_SIZE):
  """The dark pixels of `text` drawn alone in the picture's font, cut to its
  ink: what a name must look like in the picture to read as itself."""
  font = ImageFont.load_default(size=size)
  image = Image.new('RGB', (400, 100), 'white')
  ImageDraw.Draw(image).text((10, 50), text, fill='black', font=font,
                             anchor='lm')
  return _ink_box(_dark(np.array(image)))


def _grid(image, cell, n=10):
  """(top, left) of the grid, found by its grey lines, n + 1 each way."""
  grey = (image == GREY).all(axis=-1)
  rows = np.flatnonzero(grey.sum(axis=1) >= n * cell)
  columns = np.flatnonzero(grey.sum(axis=0) >= n * cell)
  assert list(np.diff(rows)) == [cell] * n
  assert list(np.diff(columns)) == [cell] * n
  return rows[0], columns[0]


def _row_labels_read(image, cell, labels, size, turns=0):
  """Whether each row's strip, left of the grid, ends in its label (turned
  `turns` times 90 degrees anticlockwise)."""
  dark = _dark(image)
  top, left = _grid(image, cell, len(labels))
  for i, label in enumerate(labels):
    strip = dark[top + i * cell + 1:top + (i + 1) * cell, :left]
    expected = np.rot90(_text(label, size), turns)
    right = np.flatnonzero(strip.any(axis=0))[-1]
    if not np.array_equal(
        _ink_box(strip[:, right - expected.shape[1] + 1:right + 1]),
        expected):
      return False
  return True


def test_confusion_image_colours_each_cell_by_its_row_fraction():
  cell = evaluation.CONFUSION_CELL_PIXELS
  confusion = np.diag(np.arange(1, 11))
  confusion[1, :2] = [3, 3]  # half and half
  confusion[9] = 0  # a class with no examples

  image = evaluation.confusion_image(confusion, NAMES)

  assert image.dtype == np.uint8 and image.ndim == 4
  assert image.shape[0] == 1 and image.shape[3] == 3
  image = image[0]
  top, left = _grid(image, cell)
  for i, j in itertools.product(range(10), range(10)):
    centre = list(image[top + i * cell + cell // 2,
                        left + j * cell + cell // 2])
    if i == 1 and j < 2:
      assert centre == HALF, (i, j)
    elif i == j and i < 9:
      assert centre == FULL, (i, j)
    else:
      assert centre == WHITE, (i, j)
  # White margins right of and below the grid.
  assert (image[top + 10 * cell + 1:] == 255).all()
  assert (image[:, left + 10 * cell + 1:] == 255).all()


def test_confusion_image_names_rows_left_columns_above_and_its_axes():
  cell = evaluation.CONFUSION_CELL_PIXELS
  image = evaluation.confusion_image(np.diag(np.arange(1, 11)), NAMES)[0]
  # 10 cells of 24 pixels, names in 18-pixel Aileron: 377 pixels square with
  # CIFAR-10's names, as before class counts changed the layout.
  assert evaluation.confusion_layout(10) == (24, 18)
  assert image.shape == (377, 377, 3)
  dark = _dark(image)
  top, left = _grid(image, cell)

  assert not dark[top:, left:].any()  # nothing on or right of/below the grid
  # Row i's own strip, left of the grid: its name ends at the right.
  assert _row_labels_read(image, cell, NAMES, evaluation.FONT_SIZE)
  # Column j's strip, above the grid: its name, turned anticlockwise, starts
  # at the bottom; the picture turned so too has them as row names, last
  # first and upside down.
  assert _row_labels_read(np.rot90(image), cell, NAMES[::-1],
                          evaluation.FONT_SIZE, turns=2)
  assert not dark[:top, :left].any()  # the corner stays empty
  # The axis titles, each on its own side.
  predicted = _text('predicted')
  true = np.rot90(_text('true'))
  assert _contains(dark[:top, left:], predicted)
  assert _contains(dark[top:, :left], true)
  assert not _contains(dark[:top, left:], true)


def test_hundred_classes_fit_in_1200_pixels_with_every_name():
  n = 100
  names = ['species_%02d' % i for i in range(n)]
  confusion = np.diag(np.full(n, 5))
  confusion[1::2, 0] = 5  # odd rows: half right, half taken for class 0
  cell, size = evaluation.confusion_layout(n)

  image = evaluation.confusion_image(confusion, names)[0]

  assert (cell, size) == (11, 10)
  assert image.shape[0] == image.shape[1] <= 1200
  top, left = _grid(image, cell, n)
  for i in range(n):
    centre = top + i * cell + cell // 2, left + i * cell + cell // 2
    assert list(image[centre]) == (HALF if i % 2 else FULL), i
  assert _row_labels_read(image, cell, names, size)


def test_names_the_font_cannot_draw_become_class_numbers():
  names = ['飛行機', 'Кириллица', 'plain', 'café']
  assert not evaluation.font_draws(names)
  assert evaluation.font_draws(NAMES + ('a/b', 'x | y'))

  image = evaluation.confusion_image(np.diag([1, 2, 3, 4]), names)[0]

  cell, size = evaluation.confusion_layout(4)
  assert _row_labels_read(image, cell, ['0', '1', '2', '3'], size)
  assert not _row_labels_read(image, cell, names, size)
  # The titles say so; longer than the grid, they stand out beyond it.
  top, left = _grid(image, cell, 4)
  assert _contains(_dark(image)[:top], _text('predicted class number'))
  assert _contains(_dark(image)[:, :left],
                   np.rot90(_text('true class number')))
