"""What evaluation reports per class: its console table and its summaries
(listed in docs/tensorboard.md#evaluation), among them the confusion matrix
as a picture, its text drawn by Pillow in its default font (Aileron; sizes
from Pillow 10.1)."""

import io
import math

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont
import tensorflow.compat.v1 as tf

TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')

# What makes a string tensor a text summary, as tf.summary.text writes it.
TEXT_METADATA = tf.SummaryMetadata(
    plugin_data=tf.SummaryMetadata.PluginData(plugin_name='text'))

# The confusion matrix's picture: pixels from one cell to the next.
CONFUSION_CELL_PIXELS = 24
# Colour of a cell holding a whole row (white is an empty cell).
CONFUSION_FULL_RGB = np.array([8, 48, 107])
# Pixels per em: lowercase letters are 10 pixels high, a line 23, within a cell.
FONT_SIZE = 18


class EvalReport(object):
  """One evaluation's counts per class, from arrays [num_examples]: `correct`
  (bool, the top prediction is the label), `predictions` and `labels` (int).

  Attributes:
    per_class: list over the n classes of dicts with 'name', 'examples',
      'correct', 'precision' (None for a class without examples).
    confusion: int64 array [n, n]; rows are true classes, columns predicted.
  """

  def __init__(self, class_names, correct, predictions, labels):
    self.class_names = tuple(class_names)
    n = len(self.class_names)
    self.confusion = np.zeros([n, n], np.int64)
    np.add.at(self.confusion, (labels, predictions), 1)
    examples = np.bincount(labels, minlength=n)
    hits = np.bincount(labels, weights=correct, minlength=n).astype(np.int64)
    self.per_class = [
        {'name': name, 'examples': int(examples[c]), 'correct': int(hits[c]),
         'precision': hits[c] / examples[c] if examples[c] else None}
        for c, name in enumerate(self.class_names)]

  def table(self, markdown=False):
    """The per-class table printed after the precision line, as one string;
    as a markdown table for TensorBoard's Text dashboard if markdown."""
    rows = []
    for c, row in enumerate(self.per_class):
      wrong = self.confusion[c].copy()
      wrong[c] = 0
      confused = ('%s (%d)' % (self.class_names[wrong.argmax()], wrong.max())
                  if wrong.max() else '-')
      precision = ('%.3f' % row['precision'] if row['precision'] is not None
                   else '-')
      rows.append((row['name'], str(row['examples']), str(row['correct']),
                   precision, confused))
    if markdown:
      return _markdown_table(TABLE_HEADER, rows)
    return '\n'.join('%-12s %8s %8s %14s  %s' % cells
                     for cells in [TABLE_HEADER] + rows)

  def write_summaries(self, writer, summary, global_step):
    """Adds the report to `summary` (a tf.Summary: the eval graph's own) and
    writes it with a tf.summary.FileWriter at global_step; flushes."""
    for row in self.per_class:
      if row['precision'] is not None:
        summary.value.add(tag='Precision @ 1 by class/' + row['name'],
                          simple_value=row['precision'])
    pixels = confusion_image(self.confusion, self.class_names)[0]
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format='PNG')
    summary.value.add(tag='confusion_matrix/image/0', image=tf.Summary.Image(
        height=pixels.shape[0], width=pixels.shape[1], colorspace=3,
        encoded_image_string=png.getvalue()))
    counts = _markdown_table(
        ('true \\ predicted',) + self.class_names,
        [['**%s**' % name] + [str(v) for v in row]
         for name, row in zip(self.class_names, self.confusion)])
    for tag, text in (('confusion_matrix_counts', counts),
                      ('precision_by_class', self.table(markdown=True))):
      summary.value.add(tag=tag, metadata=TEXT_METADATA,
                        tensor=tf.make_tensor_proto(text))
    writer.add_summary(summary, global_step)
    writer.flush()


def _markdown_table(header, rows):
  """A markdown table (TensorBoard's Text dashboard renders it) of strings."""
  lines = ['| %s |' % ' | '.join(cells) for cells in [header] + rows]
  lines.insert(1, '|---' * len(header) + '|')
  return '\n'.join(lines)


def confusion_image(confusion, class_names):
  """Renders a confusion matrix (int [n, n]) with its n class names.

  Rows are the true classes, top to bottom, and columns the predicted ones,
  left to right. Each row is normalized by its count, so a cell's colour runs
  from white (none of that class) to CONFUSION_FULL_RGB (all of it); grey
  (200) lines frame the cells. The names stand right-aligned left of the
  rows, with 'true' (read bottom to top) left of them, and above the columns,
  read bottom to top from the grid up, with 'predicted' on top.

  Returns:
    uint8 array [1, height, width, 3]: the n * CONFUSION_CELL_PIXELS + 1
    pixels square grid inside a white margin holding the text.
  """
  cell = CONFUSION_CELL_PIXELS
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  rgb = 255 - (confusion / totals)[..., None] * (255 - CONFUSION_FULL_RGB)
  grid = np.pad(np.kron(rgb, np.ones([cell, cell, 1])),
                [(0, 1), (0, 1), (0, 0)])
  grid[::cell, :, :] = 200
  grid[:, ::cell, :] = 200

  font = ImageFont.load_default(size=FONT_SIZE)
  line = sum(font.getmetrics())  # ascent + descent
  pad, gap = FONT_SIZE // 4, FONT_SIZE // 3
  # As wide left of the grid as high above it: title, gap, names, gap.
  margin = (pad + line + gap + gap +
            math.ceil(max(font.getlength(name) for name in class_names)))
  side = len(grid)
  image = Image.new('RGB', (margin + side + pad,) * 2, 'white')
  image.paste(Image.fromarray(np.round(grid).astype(np.uint8)),
              (margin, margin))

  def write(xy, text, anchor):
    ImageDraw.Draw(image).text(xy, text, fill='black', font=font,
                               anchor=anchor)

  # The names left of the rows; then, with the picture turned a quarter right,
  # the margin above the grid is right of it, and the names written across
  # there read bottom to top once it is turned back.
  for i, name in enumerate(class_names):
    write((margin - gap, margin + i * cell + cell // 2), name, 'rm')
  write((margin + side // 2, pad), 'predicted', 'ma')
  image = image.transpose(Image.Transpose.ROTATE_270)
  for j, name in enumerate(class_names):
    write((side + pad + gap, margin + j * cell + cell // 2), name, 'lm')
  write((side + pad - side // 2, pad), 'true', 'ma')
  return np.array(image.transpose(Image.Transpose.ROTATE_90))[None]
