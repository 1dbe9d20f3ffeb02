"""evaluation.EvalReport: its console table at 10, 20 and 100 classes, and
its summaries as TensorBoard reads and renders them, for names as users write
them."""

import io
import re

import numpy as np
from PIL import Image
import tensorflow.compat.v1 as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.text import text_plugin

from cifar10_support import data_files
from cifar10_support import evaluation

NAMES = data_files.CLASS_NAMES

# The table evaluation printed, byte for byte, before it served more than
# CIFAR-10's classes: for _TEN below.
TEN_TABLE = """\
class        examples  correct  precision @ 1  most confused with
airplane           62       50          0.806  cat (10)
automobile         66       55          0.833  deer (9)
bird               70       60          0.857  dog (8)
cat                74       65          0.878  frog (7)
deer               78       70          0.897  horse (6)
dog                82       75          0.915  ship (5)
frog               86       80          0.930  truck (4)
horse              90       85          0.944  airplane (3)
ship               94       90          0.957  automobile (2)
truck               0        0              -  -"""


def _report(names, confusion):
  """The EvalReport of the examples a confusion matrix [n, n] counts."""
  labels, predictions = np.nonzero(confusion)
  counts = confusion[labels, predictions]
  labels, predictions = np.repeat(labels, counts), np.repeat(predictions,
                                                             counts)
  return evaluation.EvalReport(names, labels == predictions, predictions,
                                labels)


def _ten():
  confusion = np.zeros([10, 10], np.int64)
  for c in range(9):  # truck: no examples
    confusion[c, c] = 50 + 5 * c
    confusion[c, (c + 3) % 10] = 10 - c
    confusion[c, (c + 1) % 10] = 2
  return confusion


def _summaries(report, tmp_path):
  """What TensorBoard loads of report.write_summaries at step 7:
  an EventAccumulator."""
  with tf.Graph().as_default():
    writer = tf.summary.FileWriter(str(tmp_path))
    report.write_summaries(writer, tf.Summary(), 7)
    writer.close()
  events = event_accumulator.EventAccumulator(str(tmp_path))
  events.Reload()
  return events


def _table(events, tag):
  """The cells, row by row, of a text summary's table as TensorBoard's Text
  dashboard renders it."""
  text, = events.Tensors(tag)
  html = text_plugin.text_array_to_html(tf.make_ndarray(text.tensor_proto),
                                        enable_markdown=True)
  return [re.findall(r'<t[hd](?: [^>]*)?>(.*?)</t[hd]>', row)
          for row in html.split('<tr>')[1:]]


def test_ten_classes_keep_their_table_and_summaries(tmp_path):
  report = _report(NAMES, _ten())
  assert report.table() == TEN_TABLE
  assert not report.numbered
  events = _summaries(report, tmp_path)

  tags = events.Tags()
  assert sorted(tags['scalars']) == sorted(
      'Precision @ 1 by class/' + name for name in NAMES[:9])
  assert events.Scalars('Precision @ 1 by class/cat')[0].value == (
      np.float32(65 / 74))
  assert tags['images'] == ['confusion_matrix/image/0']
  image, = events.Images('confusion_matrix/image/0')
  assert (image.width, image.height) == (377, 377)
  assert Image.open(io.BytesIO(image.encoded_image_string)).size == (377, 377)
  assert sorted(tags['tensors']) == ['confusion_matrix_counts',
                                     'precision_by_class']
  counts = _table(events, 'confusion_matrix_counts')
  assert counts[0] == ['true \\ predicted'] + list(NAMES)
  assert counts[1] == ['<strong>airplane</strong>', '50', '2', '0', '10'] + (
      ['0'] * 6)
  table = _table(events, 'precision_by_class')
  assert table[0] == list(evaluation.TABLE_HEADER)
  assert table[1:] == [line.split(None, 4)
                       for line in TEN_TABLE.splitlines()[1:]]


def test_twenty_classes_print_all_and_a_hundred_ten_keeping_all_in_tensorboard(
    tmp_path):
  names = ['species %02d' % c for c in range(100)]
  # Up to 20 classes, the console shows them all.
  twenty = _report(names[:20], np.diag(np.arange(1, 21))).table()
  assert [line[:12].rstrip() for line in twenty.splitlines()[1:]] == (
      names[:20])
  # 100 classes, the last without examples; the others 100 examples each,
  # as many of them right as their place in a shuffle of 1 .. 99 (so each
  # precision differs), most of the rest taken for the class 7 after them.
  right = np.random.RandomState(5).permutation(99) + 1
  confusion = np.zeros([100, 100], np.int64)
  for c in range(99):
    wrong = 100 - right[c]
    confusion[c, [c, (c + 7) % 99, (c + 3) % 99]] = (
        right[c], wrong - wrong // 3, wrong // 3)
  by_precision = list(np.argsort(right))

  report = _report(names, confusion)
  lines = report.table().splitlines()

  assert lines[0] == 'The 10 classes of lowest precision @ 1, of 100:'
  assert lines[1] == lines[13] == TEN_TABLE.splitlines()[0]
  assert lines[12] == 'The 10 of highest:'
  assert lines[24] == ("All 100 classes (1 without examples): "
                       "precision_by_class in TensorBoard's Text dashboard.")
  assert len(lines) == 25
  for shown, classes in ((lines[2:12], by_precision[:10]),
                         (lines[14:24], by_precision[:-11:-1])):
    for line, c in zip(shown, classes):
      wrong = 100 - right[c]
      assert line == '%-12s %8d %8d %14.3f  %s (%d)' % (
          names[c], 100, right[c], right[c] / 100, names[(c + 7) % 99],
          wrong - wrong // 3), line

  events = _summaries(report, tmp_path)

  table = _table(events, 'precision_by_class')
  assert [row[0] for row in table[1:]] == names
  assert [row[2] for row in table[1:]] == [str(r) for r in right] + ['0']
  assert len(events.Tags()['scalars']) == 99
  image, = events.Images('confusion_matrix/image/0')
  assert image.width == image.height <= 1200


def test_a_slash_in_a_name_does_not_nest_its_tag(tmp_path):
  names = ['cats/dogs', 'cats\u2215dogs', 'bird']
  tags = evaluation.class_tags(names)
  assert evaluation.class_tags(['cats/dogs', 'bird']) == [
      'Precision @ 1 by class/cats\u2215dogs', 'Precision @ 1 by class/bird']
  # cats/dogs, written cats∕dogs, would be the next class's tag: both are
  # numbered, and all the others with them.
  assert tags == ['Precision @ 1 by class/cats\u2215dogs (class 0)',
                  'Precision @ 1 by class/cats\u2215dogs (class 1)',
                  'Precision @ 1 by class/bird (class 2)']

  events = _summaries(_report(names, np.diag([1, 2, 3])), tmp_path)

  scalars = events.Tags()['scalars']
  assert sorted(scalars) == sorted(tags)
  # TensorBoard groups a tag's charts by what comes before its first '/'.
  assert {tag.split('/')[0] for tag in scalars} == {'Precision @ 1 by class'}
  assert [events.Scalars(tag)[0].value for tag in tags] == [1, 1, 1]


def test_wide_names_line_up_and_those_the_font_cannot_draw_are_numbered(
    tmp_path):
  names = ['飛行機', 'Кириллица', 'longer than twelve']
  report = _report(names, np.array([[3, 1, 0], [0, 2, 0], [0, 0, 1]]))
  # The console keeps the names, which a terminal draws; each column ends in
  # the same terminal column (the wide characters of 飛行機 count twice).
  assert report.table() == """\
class              examples  correct  precision @ 1  most confused with
飛行機                    4        3          0.750  Кириллица (1)
Кириллица                 2        2          1.000  -
longer than twelve        1        1          1.000  -"""
  assert report.numbered

  events = _summaries(report, tmp_path)

  # The image's numbers, and what they stand for, in TensorBoard's text.
  table = _table(events, 'precision_by_class')
  assert table[0] == ['#'] + list(evaluation.TABLE_HEADER)
  assert table[1:] == [['0', '飛行機', '4', '3', '0.750', 'Кириллица (1)'],
                       ['1', 'Кириллица', '2', '2', '1.000', '-'],
                       ['2', 'longer than twelve', '1', '1', '1.000', '-']]
  counts = _table(events, 'confusion_matrix_counts')
  assert counts[0] == ['true \\ predicted', '0', '1', '2']
  assert [row[0] for row in counts[1:]] == [
      '<strong>0 飛行機</strong>', '<strong>1 Кириллица</strong>',
      '<strong>2 longer than twelve</strong>']


def test_markdown_characters_in_names_read_as_themselves(tmp_path):
  names = ['a|b', '*bold* _it_', '<i>x</i>', 'AT&amp;T', 'back\\slash',
           '# [link](u) `c` 1. - +!']
  confusion = np.diag(np.arange(1, 7))
  confusion[0, 1] = 1
  events = _summaries(_report(names, confusion), tmp_path)

  table = _table(events, 'precision_by_class')
  assert all(len(row) == 5 for row in table)
  shown = ['a|b', '*bold* _it_', '&lt;i&gt;x&lt;/i&gt;', 'AT&amp;amp;T',
           'back\\slash', '# [link](u) `c` 1. - +!']
  assert [row[0] for row in table[1:]] == shown
  assert table[1][4] == '*bold* _it_ (1)'
  counts = _table(events, 'confusion_matrix_counts')
  assert counts[0][1:] == shown
  assert [row[0] for row in counts[1:]] == [
      '<strong>%s</strong>' % name for name in shown]
