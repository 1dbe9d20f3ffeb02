"""What evaluation reports per class: its console table and its summaries
(listed in docs/tensorboard.md#evaluation)."""

import io

import numpy as np
from PIL import Image
import tensorflow.compat.v1 as tf

from cifar10_support import picture

TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')

# What makes a string tensor a text summary, as tf.summary.text writes it.
TEXT_METADATA = tf.SummaryMetadata(
    plugin_data=tf.SummaryMetadata.PluginData(plugin_name='text'))


class EvalReport(object):
  """One evaluation's counts per class, from arrays [num_examples]: `correct`
  (bool, the top prediction is the label), `predictions` and `labels` (int).

  Attributes:
    class_names: tuple of str, the name of each label 0..n-1; n classes.
    per_class: list over classes of dicts with 'name', 'examples',
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
    pixels = picture.confusion_image(self.confusion, self.class_names)[0]
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

