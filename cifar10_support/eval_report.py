"""What evaluation reports: per-class counts, the table, the confusion matrix.

The console table printed after the precision line, and the same table, the
confusion matrix as counts and as a picture with the class names, for
TensorBoard's Text and Images dashboards.
"""

import numpy as np

import cifar10_input
from cifar10_support import picture

# The class names of CIFAR-10's labels 0..9 (batches.meta.txt).
CLASS_NAMES = cifar10_input.CLASS_NAMES

# Pixels per confusion-matrix cell in the TensorBoard image.
CONFUSION_CELL_PIXELS = 24
# Colour of a cell holding a whole row (white is an empty cell).
CONFUSION_FULL_RGB = np.array([8, 48, 107])


def count_per_class(correct, predictions, labels):
  """Per-class counts and the confusion matrix.

  Returns:
    per_class: list over classes of dicts with 'name', 'examples', 'correct',
      'precision' (None for a class without examples).
    confusion: int64 array [NUM_CLASSES, NUM_CLASSES]; rows are true
      classes, columns predicted classes.
  """
  n = cifar10_input.NUM_CLASSES
  confusion = np.zeros([n, n], np.int64)
  np.add.at(confusion, (labels, predictions), 1)
  examples = np.bincount(labels, minlength=n)
  hits = np.bincount(labels, weights=correct, minlength=n).astype(np.int64)
  per_class = []
  for c in range(n):
    per_class.append({'name': CLASS_NAMES[c], 'examples': int(examples[c]),
                      'correct': int(hits[c]),
                      'precision': (float(hits[c]) / examples[c]
                                    if examples[c] else None)})
  return per_class, confusion


TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')


def _table_rows(per_class, confusion):
  """The per-class table's rows: five strings per class, as TABLE_HEADER."""
  rows = []
  for c, row in enumerate(per_class):
    wrong = confusion[c].copy()
    wrong[c] = 0
    confused = ('%s (%d)' % (CLASS_NAMES[wrong.argmax()], wrong.max())
                if wrong.max() else '-')
    precision = ('%.3f' % row['precision'] if row['precision'] is not None
                 else '-')
    rows.append((row['name'], str(row['examples']), str(row['correct']),
                 precision, confused))
  return rows


def format_table(per_class, confusion):
  """The per-class table printed after the precision line, as one string."""
  line = '%-12s %8s %8s %14s  %s'
  return '\n'.join(line % cells for cells in
                   [TABLE_HEADER] + _table_rows(per_class, confusion))


def _markdown_table(header, rows):
  """A markdown table (TensorBoard's Text dashboard renders it) of strings."""
  lines = ['| %s |' % ' | '.join(cells) for cells in [header] + rows]
  lines.insert(1, '|---' * len(header) + '|')
  return '\n'.join(lines)


def per_class_markdown(per_class, confusion):
  """The same table as markdown, for TensorBoard's Text dashboard."""
  return _markdown_table(TABLE_HEADER, _table_rows(per_class, confusion))


def confusion_image(confusion, cell=CONFUSION_CELL_PIXELS):
  """Renders the confusion matrix for TensorBoard, with the class names.

  Each row (true class, airplane at the top) is normalized by its count, so a
  cell's colour runs from white (none of that class) to dark blue (all of
  it); columns are the predicted classes, airplane on the left. Grey lines
  frame the cells. The class names stand left of the rows and above the
  columns (read bottom to top), with the titles 'true' and 'predicted'.

  Args:
    confusion: int array [10, 10], rows true classes, columns predicted.
    cell: int, pixels from one cell to the next; the text is 2x for 24 up.

  Returns:
    uint8 array [1, height, width, 3]: the 10 * cell + 1 pixels square grid
    inside a white margin of text (picture.label_grid).
  """
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  fraction = confusion / totals
  rgb = 255 - fraction[..., None] * (255 - CONFUSION_FULL_RGB)
  pixels = np.pad(np.kron(rgb, np.ones([cell, cell, 1])),
                  [(0, 1), (0, 1), (0, 0)])
  # Light grey lines around the cells.
  pixels[::cell, :, :] = 200
  pixels[:, ::cell, :] = 200
  return picture.label_grid(
      pixels, cell, CLASS_NAMES, CLASS_NAMES, 'true', 'predicted',
      scale=max(1, cell // 12))[None]


def confusion_markdown(confusion):
  """The confusion matrix as a markdown table of counts (TensorBoard Text)."""
  return _markdown_table(
      ('true \\ predicted',) + tuple(CLASS_NAMES),
      [['**%s**' % name] + [str(v) for v in counts]
       for name, counts in zip(CLASS_NAMES, confusion)])
