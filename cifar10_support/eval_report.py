"""What evaluation reports: per-class counts, the table, the confusion matrix.

One `EvalReport` per evaluation holds the counts per class; it prints the
per-class table after the precision line and writes the same table, the
per-class precisions and the confusion matrix, as counts and as a picture
with the class names, for TensorBoard's Scalars, Text and Images dashboards:

    report = eval_report.EvalReport(class_names, correct, predictions, labels)
    report.print_table()
    report.write_summaries(writer, summary, global_step, sess, report_ops)

The class names are passed in (the scripts take them from cifar10_input);
their number is the number of classes.
"""

import collections

import numpy as np
import tensorflow.compat.v1 as tf

from cifar10_support import picture

# Pixels per confusion-matrix cell in the TensorBoard image.
CONFUSION_CELL_PIXELS = 24
# Colour of a cell holding a whole row (white is an empty cell).
CONFUSION_FULL_RGB = np.array([8, 48, 107])

TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')

ReportOps = collections.namedtuple('ReportOps', [
    'confusion_image', 'confusion_counts', 'per_class_table', 'summaries'])
ReportOps.__doc__ = """The graph's inputs for a report's summaries
(`build_report_ops`), fed after counting.

  confusion_image: uint8 placeholder [1, height, width, 3], the rendered
    matrix (`confusion_image`).
  confusion_counts: string placeholder [], the matrix as a markdown table.
  per_class_table: string placeholder [], the per-class table as markdown.
  summaries: string tensor [], the serialized tf.Summary of the three
    (tags 'confusion_matrix/image/0', 'confusion_matrix_counts',
    'precision_by_class').
"""


def build_report_ops():
  """Adds the placeholders and summaries of `ReportOps` to the graph.

  Call it in the eval graph before it is finalized. The summaries are kept
  out of the graph's collections, so `tf.summary.merge_all` (run with the
  input) does not take them.
  """
  image = tf.placeholder(tf.uint8, [1, None, None, 3])
  counts = tf.placeholder(tf.string, [])
  table = tf.placeholder(tf.string, [])
  summaries = tf.summary.merge(
      [tf.summary.image('confusion_matrix', image, collections=[]),
       tf.summary.text('confusion_matrix_counts', counts, collections=[]),
       tf.summary.text('precision_by_class', table, collections=[])])
  return ReportOps(image, counts, table, summaries)


class EvalReport(object):
  """One evaluation's counts per class, its console table and its summaries.

  Attributes:
    class_names: tuple of str, the name of each label 0..n-1; n classes.
    per_class: list over classes of dicts with 'name', 'examples',
      'correct', 'precision' (None for a class without examples).
    confusion: int64 array [n, n]; rows are true classes, columns predicted
      classes.
  """

  def __init__(self, class_names, correct, predictions, labels):
    """Counts the examples of each class.

    Args:
      class_names: sequence of str, the name of each label.
      correct: bool array [num_examples], whether each example's top
        prediction is its label.
      predictions: int array [num_examples], each example's top class.
      labels: int array [num_examples], each example's label.
    """
    self.class_names = tuple(class_names)
    n = len(self.class_names)
    self.confusion = np.zeros([n, n], np.int64)
    np.add.at(self.confusion, (labels, predictions), 1)
    examples = np.bincount(labels, minlength=n)
    hits = np.bincount(labels, weights=correct, minlength=n).astype(np.int64)
    self.per_class = []
    for c in range(n):
      self.per_class.append({
          'name': self.class_names[c], 'examples': int(examples[c]),
          'correct': int(hits[c]),
          'precision': (float(hits[c]) / examples[c] if examples[c]
                        else None)})

  def _table_rows(self):
    """The per-class table's rows: five strings per class, as TABLE_HEADER."""
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
    return rows

  def table(self):
    """The per-class table printed after the precision line, as one string."""
    line = '%-12s %8s %8s %14s  %s'
    return '\n'.join(line % cells
                     for cells in [TABLE_HEADER] + self._table_rows())

  def print_table(self):
    """Prints `table` to the console."""
    print(self.table(), flush=True)

  def per_class_markdown(self):
    """The same table as markdown, for TensorBoard's Text dashboard."""
    return _markdown_table(TABLE_HEADER, self._table_rows())

  def confusion_markdown(self):
    """The confusion matrix as a markdown table of counts (TensorBoard Text)."""
    return _markdown_table(
        ('true \\ predicted',) + self.class_names,
        [['**%s**' % name] + [str(v) for v in counts]
         for name, counts in zip(self.class_names, self.confusion)])

  def write_summaries(self, writer, summary, global_step, sess, report_ops):
    """Writes the report to TensorBoard at global_step, and flushes.

    Args:
      writer: a tf.summary.FileWriter.
      summary: a tf.Summary (the eval graph's own, with the precision); the
        scalar 'Precision @ 1 by class/<name>' of each class with examples is
        added to it before it is written.
      global_step: int, the step of the evaluated checkpoint.
      sess: the session of the graph holding report_ops.
      report_ops: the graph's `ReportOps` (`build_report_ops`).
    """
    for row in self.per_class:
      if row['precision'] is not None:
        summary.value.add(tag='Precision @ 1 by class/' + row['name'],
                          simple_value=row['precision'])
    writer.add_summary(summary, global_step)
    writer.add_summary(sess.run(report_ops.summaries, {
        report_ops.confusion_image: confusion_image(self.confusion,
                                                     self.class_names),
        report_ops.confusion_counts: self.confusion_markdown(),
        report_ops.per_class_table: self.per_class_markdown()}),
                       global_step)
    writer.flush()


def _markdown_table(header, rows):
  """A markdown table (TensorBoard's Text dashboard renders it) of strings."""
  lines = ['| %s |' % ' | '.join(cells) for cells in [header] + rows]
  lines.insert(1, '|---' * len(header) + '|')
  return '\n'.join(lines)


def confusion_image(confusion, class_names, cell=CONFUSION_CELL_PIXELS):
  """Renders the confusion matrix for TensorBoard, with the class names.

  Each row (true class, the first at the top) is normalized by its count, so
  a cell's colour runs from white (none of that class) to dark blue (all of
  it); columns are the predicted classes, the first on the left. Grey lines
  frame the cells. The class names stand left of the rows and above the
  columns (read bottom to top), with the titles 'true' and 'predicted'.

  Args:
    confusion: int array [n, n], rows true classes, columns predicted.
    class_names: sequence of n str, the name of each class.
    cell: int, pixels from one cell to the next; the text is 2x for 24 up.

  Returns:
    uint8 array [1, height, width, 3]: the n * cell + 1 pixels square grid
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
      pixels, cell, class_names, class_names, 'true', 'predicted',
      scale=max(1, cell // 12))[None]
