"""Evaluation beside the session cifar10_eval.py shows: its settings, checked
once, the checkpoints it follows, and what it reports per class (the console
table, and the summaries of docs/tensorboard.md#evaluation, among them the
confusion matrix as a picture).

    evaluation.EvalSettings(data_dir, num_examples=20, batch_size=8)
"""

import collections
import io
import math
import re
import time
import unicodedata

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont
import tensorflow.compat.v1 as tf

from cifar10_support import checkpoints
from cifar10_support import download
from cifar10_support import mixed_precision
from cifar10_support import run_flags
from cifar10_support import sessions


EvalSettings = collections.namedtuple(
    'EvalSettings',
    ['data_dir', 'eval_data', 'num_examples', 'batch_size', 'run_once',
     'eval_interval_secs', 'session_config', 'input_threads', 'compute_dtype',
     'until_step', 'dataset'],
    defaults=('test', None, run_flags.TRAIN_DEFAULTS.batch_size, False, 300,
              None, 1, None, None, run_flags.TRAIN_DEFAULTS.dataset))
EvalSettings.__doc__ = """An evaluation's settings: cifar10_eval.py's flags
of the same names, whose defaults these are (batch_size's and dataset's:
run_flags.TRAIN_DEFAULTS'; num_examples None: every record of eval_data); session_config (None: sessions.eval_config()); input_threads
(1 reads the records in file order); compute_dtype (None, or the forward
pass's dtype from float32 weights); until_step (following training, stop
once a checkpoint at or past it is evaluated; None follows for ever)."""


def fetch_data_then_settings(flag_values):
  """Fetches the data cifar10_eval.py's flags name if it is missing (download
  .prepare, which says 'Data: ...' and checks its files), then returns the
  flags' EvalSettings, checked before TensorFlow is asked about the
  machine, and the data_files.DataSet evaluated; ValueError (DataError for
  a file) names what is at fault."""
  settings = EvalSettings(
      data_dir=flag_values.data_dir, eval_data=flag_values.eval_data,
      num_examples=flag_values.num_examples,
      batch_size=flag_values.batch_size, run_once=flag_values.run_once,
      eval_interval_secs=flag_values.eval_interval_secs,
      dataset=flag_values.dataset)
  data_set = download.prepare(flag_values.data_dir, flag_values.data_url,
                              flag_values.data_md5, settings.dataset,
                              split=settings.eval_data)
  check_num_examples(settings.num_examples, data_set, settings.eval_data)
  return settings._replace(
      compute_dtype=mixed_precision.compute_dtype_for_this_machine(
          flag_values.mixed_precision, sessions.has_gpu()),
      session_config=sessions.eval_config(run_flags.threads(flag_values))
  ), data_set


def check_num_examples(num_examples, data_set, eval_data):
  """The records of data_set's `eval_data` files ('test', 'train_eval'),
  counted from their sizes; ValueError if num_examples (None for all) is
  more, or eval_data is neither."""
  names = data_set.eval_files(eval_data)
  num_records = data_set.records(names)
  if num_examples is not None and num_examples > num_records:
    raise ValueError(
        'num_examples=%d is more than the %d records in %s; each example is '
        'counted once, so use num_examples=%d or fewer'
        % (num_examples, num_records, ', '.join(data_set.paths(names)),
           num_records))
  return num_records


def new_checkpoints(checkpoint_dir, run_once, interval_secs,
                    sleep=time.sleep):
  """Yields the newest checkpoint in checkpoint_dir: once with run_once (no
  checkpoint: checkpoints.CheckpointError), else each time a new one appears
  (rewritten under the same name too; the newest only, if several did
  meanwhile), looking every interval_secs and saying what it waits for."""
  last_seen = None
  waiting = False
  while True:
    path = checkpoints.newest(checkpoint_dir)
    if path is None and run_once:
      raise checkpoints.CheckpointError(
          "No checkpoint file found in checkpoint_dir %s (no 'checkpoint' "
          'file listing one): point --checkpoint_dir at the --train_dir of a '
          'training run that has saved a checkpoint' % checkpoint_dir)
    if path is None and not waiting:
      print('No checkpoint file found in %s; waiting for training to write '
            'one (looking every %s s).' % (checkpoint_dir, interval_secs),
            flush=True)
      waiting = True
    elif path is not None:
      try:
        seen = path, tf.io.gfile.stat(path + '.index').mtime_nsec
      except tf.errors.OpError:  # Pruned meanwhile: evaluating it says so.
        seen = path, None
      if seen != last_seen:
        last_seen = seen
        yield path
        print('Waiting for a new checkpoint in %s (looking every %s s).'
              % (checkpoint_dir, interval_secs), flush=True)
        waiting = True
    sleep(interval_secs)


# What evaluation reports per class: the console table, and summaries.
TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')
# Up to this many classes (CIFAR-100's 20 coarse ones) the console shows the
# whole table; above it, the SHOWN_CLASSES of lowest and of highest precision.
FULL_TABLE_CLASSES = 20
SHOWN_CLASSES = 10
CLASS_TAG = 'Precision @ 1 by class/'

# What makes a string tensor a text summary, as tf.summary.text writes it.
TEXT_METADATA = tf.SummaryMetadata(
    plugin_data=tf.SummaryMetadata.PluginData(plugin_name='text'))

# The confusion matrix's picture: pixels from one cell to the next, at most;
# many classes share CONFUSION_GRID_PIXELS, down to cells of
# CONFUSION_MIN_CELL_PIXELS, the smallest whose names (a pixel less per em)
# still read.
CONFUSION_CELL_PIXELS = 24
CONFUSION_GRID_PIXELS = 1100
CONFUSION_MIN_CELL_PIXELS = 11
# Colour of a cell holding a whole row (white is an empty cell).
CONFUSION_FULL_RGB = np.array([8, 48, 107])
# Pixels per em of the names, at most: a line of them fits in a cell.
FONT_SIZE = 18

# Markdown would read these in a name as formatting (| ends a table cell).
_MARKDOWN_SPECIAL = re.compile(r'([\\`*_{}\[\]()#+\-.!|])')


class EvalReport(object):
  """One evaluation's counts per class, from arrays [num_examples]: `correct`
  (bool, the top prediction is the label), `predictions` and `labels` (int).

  Attributes:
    per_class: list over the n classes of dicts with 'name', 'examples',
      'correct', 'precision' (None for a class without examples).
    confusion: int64 array [n, n]; rows are true classes, columns predicted.
    numbered: the confusion image names classes by number, as the default
      font cannot draw every name; the text tables then give the numbers.
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
    self.numbered = not font_draws(self.class_names)

  def _rows(self, name):
    """The table's rows, its cells strings, with each name as name(name)."""
    rows = []
    for c, row in enumerate(self.per_class):
      wrong = self.confusion[c].copy()
      wrong[c] = 0
      confused = ('%s (%d)' % (name(self.class_names[wrong.argmax()]),
                               wrong.max()) if wrong.max() else '-')
      precision = ('%.3f' % row['precision'] if row['precision'] is not None
                   else '-')
      rows.append((name(row['name']), str(row['examples']),
                   str(row['correct']), precision, confused))
    return rows

  def table(self, markdown=False):
    """The per-class table printed after the precision line, as one string.

    Up to FULL_TABLE_CLASSES classes, a row for each; with more, the
    SHOWN_CLASSES classes with examples of lowest precision @ 1 (lowest
    first), those of highest (highest first), and a line saying where the
    whole table is. If markdown, the whole table for TensorBoard's Text
    dashboard, names escaped, and first a column '#' of class numbers if
    `numbered`.
    """
    if markdown:
      rows = self._rows(escape_markdown)
      if self.numbered:
        return _markdown_table(('#',) + TABLE_HEADER,
                               [(str(c),) + r for c, r in enumerate(rows)])
      return _markdown_table(TABLE_HEADER, rows)
    rows = self._rows(str)
    n, width = len(rows), max([12] + [_width(r[0]) for r in rows])

    def lines(rows):
      return [_pad(cells[0], width) + ' %8s %8s %14s  %s' % cells[1:]
              for cells in [TABLE_HEADER] + rows]

    if n <= FULL_TABLE_CLASSES:
      return '\n'.join(lines(rows))
    # By precision, a tie in class order, either way; none shown twice.
    ranked = sorted((r['precision'], c) for c, r in enumerate(self.per_class)
                    if r['precision'] is not None)
    worst = [rows[c] for _, c in ranked[:SHOWN_CLASSES]]
    best = [rows[c] for _, c in sorted(
        ranked[max(SHOWN_CLASSES, len(ranked) - SHOWN_CLASSES):],
        key=lambda pc: (-pc[0], pc[1]))]
    empty = n - len(ranked)
    return '\n'.join(
        ['The %d classes of lowest precision @ 1, of %d:' % (len(worst), n)] +
        lines(worst) +
        ['The %d of highest:' % len(best)] + lines(best) +
        ['All %d classes%s: precision_by_class in TensorBoard\'s Text '
         'dashboard.' % (n, ' (%d without examples)' % empty if empty else '')])

  def write_summaries(self, writer, summary, global_step):
    """Adds the report to `summary` (a tf.Summary: the eval graph's own) and
    writes it with a tf.summary.FileWriter at global_step; flushes."""
    for tag, row in zip(class_tags(self.class_names), self.per_class):
      if row['precision'] is not None:
        summary.value.add(tag=tag, simple_value=row['precision'])
    pixels = confusion_image(self.confusion, self.class_names)[0]
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format='PNG')
    summary.value.add(tag='confusion_matrix/image/0', image=tf.Summary.Image(
        height=pixels.shape[0], width=pixels.shape[1], colorspace=3,
        encoded_image_string=png.getvalue()))
    names = [escape_markdown(name) for name in self.class_names]
    if self.numbered:  # The image's numbers across, and what they stand for.
      columns = [str(c) for c in range(len(names))]
      names = ['%d %s' % (c, name) for c, name in enumerate(names)]
    else:
      columns = names
    counts = _markdown_table(
        ['true \\ predicted'] + columns,
        [['**%s**' % name] + [str(v) for v in row]
         for name, row in zip(names, self.confusion)])
    for tag, text in (('confusion_matrix_counts', counts),
                      ('precision_by_class', self.table(markdown=True))):
      summary.value.add(tag=tag, metadata=TEXT_METADATA,
                        tensor=tf.make_tensor_proto(text))
    writer.add_summary(summary, global_step)
    writer.flush()


def class_tags(class_names):
  """The per-class scalar tags, CLASS_TAG + name, in class order.

  A '/' in a name is written '\u2215' (division slash), as TensorBoard would
  read it as one more level of grouping. If two classes would still share a
  tag, every tag ends in ' (class <number>)', which makes them unique.
  """
  tags = [CLASS_TAG + name.replace('/', '\u2215') for name in class_names]
  if len(set(tags)) < len(tags):
    tags = ['%s (class %d)' % (tag, c) for c, tag in enumerate(tags)]
  return tags


def escape_markdown(text):
  """`text` as markdown that renders as itself, in a table cell too."""
  text = text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
  return _MARKDOWN_SPECIAL.sub(r'\\\1', text)


def _width(text):
  """Terminal columns of text: East Asian wide characters take two, combining
  marks none."""
  return sum(0 if unicodedata.combining(ch) else
             2 if unicodedata.east_asian_width(ch) in 'WF' else 1
             for ch in text)


def _pad(text, width):
  return text + ' ' * (width - _width(text))


def _markdown_table(header, rows):
  """A markdown table (TensorBoard's Text dashboard renders it) of strings."""
  lines = ['| %s |' % ' | '.join(cells) for cells in [header] + rows]
  lines.insert(1, '|---' * len(header) + '|')
  return '\n'.join(lines)


def font_draws(texts):
  """Whether the default font has a glyph for every character of texts.

  Pillow draws a character the font lacks as the font's box glyph, the same
  for every such character; U+E000 (private use) is one of them.
  """
  font = ImageFont.load_default(size=FONT_SIZE)
  def mask(ch):
    m = font.getmask(ch)
    return m.size, bytes(np.asarray(m))
  missing = mask('\ue000')
  return all(mask(ch) != missing for ch in set(''.join(texts)))


def confusion_layout(n):
  """(cell, font_size): pixels from one cell to the next for n classes, and
  the font's pixels per em, whose lines of text fit in a cell."""
  cell = min(CONFUSION_CELL_PIXELS,
             max(CONFUSION_MIN_CELL_PIXELS, CONFUSION_GRID_PIXELS // n))
  return cell, min(FONT_SIZE, cell - 1)


def confusion_image(confusion, class_names):
  """Renders a confusion matrix (int [n, n]) with its n class names.

  Rows are the true classes, top to bottom, and columns the predicted ones,
  left to right. Each row is normalized by its count, so a cell's colour runs
  from white (none of that class) to CONFUSION_FULL_RGB (all of it); grey
  (200) lines frame the cells. The names stand right-aligned left of the
  rows, with 'true' (read bottom to top) left of them, and above the columns,
  read bottom to top from the grid up, with 'predicted' on top. If the font
  cannot draw every name (font_draws), the class numbers 0 .. n - 1 stand in
  their place and the titles are 'true class number' and 'predicted class
  number'.

  Returns:
    uint8 array [1, height, width, 3]: the n * cell + 1 pixels square grid
    (cell: confusion_layout(n)) inside a white margin holding the text.
  """
  n = len(class_names)
  cell, font_size = confusion_layout(n)
  labels, title = list(class_names), ''
  if not font_draws(class_names):
    labels, title = [str(c) for c in range(n)], ' class number'
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  rgb = 255 - (confusion / totals)[..., None] * (255 - CONFUSION_FULL_RGB)
  grid = np.pad(np.kron(rgb, np.ones([cell, cell, 1])),
                [(0, 1), (0, 1), (0, 0)])
  grid[::cell, :, :] = 200
  grid[:, ::cell, :] = 200

  font = ImageFont.load_default(size=font_size)
  line = sum(font.getmetrics())  # ascent + descent
  pad, gap = font_size // 4, font_size // 3
  # As wide left of the grid as high above it: title, gap, names, gap.
  margin = (pad + line + gap + gap +
            math.ceil(max(font.getlength(label) for label in labels)))
  # The grid's side, or the longer title's, which extends right of (and
  # below) a smaller grid.
  side = max(len(grid), math.ceil(font.getlength('predicted' + title)))
  image = Image.new('RGB', (margin + side + pad,) * 2, 'white')
  image.paste(Image.fromarray(np.round(grid).astype(np.uint8)),
              (margin, margin))

  def write(xy, text, anchor):
    ImageDraw.Draw(image).text(xy, text, fill='black', font=font,
                               anchor=anchor)

  # The names left of the rows; then, with the picture turned a quarter right,
  # the margin above the grid is right of it, and the names written across
  # there read bottom to top once it is turned back.
  for i, label in enumerate(labels):
    write((margin - gap, margin + i * cell + cell // 2), label, 'rm')
  write((margin + side // 2, pad), 'predicted' + title, 'ma')
  image = image.transpose(Image.Transpose.ROTATE_270)
  for j, label in enumerate(labels):
    write((side + pad + gap, margin + j * cell + cell // 2), label, 'lm')
  write((side + pad - side // 2, pad), 'true' + title, 'ma')
  return np.array(image.transpose(Image.Transpose.ROTATE_90))[None]
