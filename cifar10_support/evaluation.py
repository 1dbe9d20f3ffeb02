"""cifar10_eval.py's settings, checked once, the checkpoints it follows, and
what it reports per class (console, docs/tensorboard.md#evaluation)."""

import collections
import io
import math
import re
import time
import unicodedata

from absl import flags
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
EvalSettings.__doc__ = """cifar10_eval.py's flags of these names and defaults
(num_examples None: all of eval_data), and session_config (None:
sessions.eval_config()), input_threads (1 reads in file order), compute_dtype
(None, or the forward pass's), until_step (following training, stop once a
checkpoint at or past it is evaluated)."""


def define_eval_flags():
  """Defines cifar10_eval.py's own flags, with EvalSettings' defaults, once;
  every task of the distributed trainer takes them, for its evaluator."""
  if 'eval_dir' in flags.FLAGS:
    return
  default = EvalSettings._field_defaults
  flags.DEFINE_string('eval_dir', '/tmp/cifar10_eval',
                      'Directory where to write event logs.')
  flags.DEFINE_enum('eval_data', default['eval_data'], ['test', 'train_eval'],
                    "Either 'test' or 'train_eval'.")
  flags.DEFINE_integer('eval_interval_secs', default['eval_interval_secs'],
                       'How often to run the eval.', lower_bound=1)
  flags.DEFINE_integer('num_examples', default['num_examples'],
                       'Number of examples to run (default: every record of '
                       '--eval_data, 10000 for CIFAR-10\'s test file).',
                       lower_bound=1)
  flags.DEFINE_boolean('run_once', default['run_once'],
                       'Whether to run eval only once.')


def fetch_data_then_settings(flag_values):
  """(EvalSettings, data_files.DataSet) of cifar10_eval.py's flags, the data
  fetched if missing (download.prepare), checked before TensorFlow is asked
  about the machine; ValueError (DataError for a file) names the fault."""
  data_set = download.prepare(flag_values.data_dir, flag_values.data_url,
                              flag_values.data_md5, flag_values.dataset,
                              split=flag_values.eval_data)
  check_num_examples(flag_values.num_examples, data_set, flag_values.eval_data)
  flags = ('data_dir', 'eval_data', 'num_examples', 'batch_size', 'run_once',
           'eval_interval_secs', 'until_step', 'dataset')
  return EvalSettings(
      session_config=sessions.eval_config(run_flags.threads(flag_values)),
      compute_dtype=mixed_precision.compute_dtype_for_this_machine(
          flag_values.mixed_precision, sessions.visible_gpus()),
      **{name: getattr(flag_values, name) for name in flags}), data_set


def check_num_examples(num_examples, data_set, eval_data):
  """The records of data_set's `eval_data` files ('test', 'train_eval');
  ValueError if num_examples (None: all) is more, or eval_data is neither."""
  names = data_set.eval_files(eval_data)
  num_records = data_set.records(names)
  if num_examples is not None and num_examples > num_records:
    raise ValueError('num_examples=%d is more than the %d records in %s; each '
                     'example is counted once, so use num_examples=%d or fewer'
                     % (num_examples, num_records,
                        ', '.join(data_set.paths(names)), num_records))
  return num_records


def new_checkpoints(checkpoint_dir, run_once, interval_secs,
                    sleep=time.sleep):
  """Yields the newest checkpoint in checkpoint_dir: once with run_once (none:
  checkpoints.CheckpointError), else each new one (rewritten under the same
  name too), looking every interval_secs and saying what it waits for."""
  last_seen = looked = None
  while True:
    path = checkpoints.newest(checkpoint_dir)
    if path is None and run_once:
      raise checkpoints.CheckpointError(
          "No checkpoint file found in checkpoint_dir %s (no 'checkpoint' "
          'file listing one): point --checkpoint_dir at the --train_dir of a '
          'training run that has saved a checkpoint' % checkpoint_dir)
    if path is None and not looked:
      print('No checkpoint file found in %s; waiting for training to write '
            'one (looking every %s s).' % (checkpoint_dir, interval_secs),
            flush=True)
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
    looked = True
    sleep(interval_secs)


TABLE_HEADER = ('class', 'examples', 'correct', 'precision @ 1',
                'most confused with')
FULL_TABLE_CLASSES = 20  # CIFAR-100's coarse classes still show in full.
SHOWN_CLASSES = 10
CONFUSION_CELL_PIXELS = 24  # From one cell to the next, at most.
CONFUSION_FULL_RGB = np.array([8, 48, 107])  # A cell holding its whole row.
FONT_SIZE = 18  # Pixels per em of the names, at most: a line fits a cell.


class EvalReport(object):
  """One evaluation's counts per class from arrays [num_examples] `correct`
  (bool: top prediction right), `predictions`, `labels` (int): `per_class`
  (per class a dict 'name', 'examples', 'correct', 'precision': None without
  examples), `confusion` (int64 [n, n], rows the true classes), `numbered`
  (the image numbers the classes, not font_draws; so do the text tables)."""

  def __init__(self, class_names, correct, predictions, labels):
    self.class_names = tuple(class_names)
    n = len(self.class_names)
    self.confusion = np.bincount(np.asarray(labels, np.int64) * n + predictions,
                                 minlength=n * n).reshape(n, n)
    examples = np.bincount(labels, minlength=n)
    hits = np.bincount(labels, weights=correct, minlength=n).astype(np.int64)
    self.per_class = [
        {'name': name, 'examples': int(examples[c]), 'correct': int(hits[c]),
         'precision': hits[c] / examples[c] if examples[c] else None}
        for c, name in enumerate(self.class_names)]
    self.numbered = not font_draws(self.class_names)

  def _rows(self, name):
    """The table's rows, its cells strings, with each name as name(name)."""
    off_diagonal = self.confusion - np.diag(np.diag(self.confusion))
    for row, wrong in zip(self.per_class, off_diagonal):
      confused = ('%s (%d)' % (name(self.class_names[wrong.argmax()]),
                               wrong.max()) if wrong.max() else '-')
      precision = '-' if row['precision'] is None else '%.3f' % row['precision']
      yield (name(row['name']), str(row['examples']), str(row['correct']),
             precision, confused)

  def table(self, markdown=False):
    """The per-class table printed after the precision line, one string (of
    more than FULL_TABLE_CLASSES, the SHOWN_CLASSES lowest and highest); if
    markdown, of every class, for TensorBoard's Text dashboard."""
    if markdown:
      rows = list(self._rows(escape_markdown))
      if self.numbered:
        return _markdown_table(('#',) + TABLE_HEADER,
                               [(str(c),) + r for c, r in enumerate(rows)])
      return _markdown_table(TABLE_HEADER, rows)
    rows = list(self._rows(str))
    def columns(text):  # In a terminal: East Asian wide 2, combining marks 0.
      return sum(0 if unicodedata.combining(ch) else
                 2 if unicodedata.east_asian_width(ch) in 'WF' else 1
                 for ch in text)
    n, width = len(rows), max([12] + [columns(r[0]) for r in rows])
    def lines(rows):
      return [c[0] + ' ' * (width - columns(c[0])) + ' %8s %8s %14s  %s' % c[1:]
              for c in [TABLE_HEADER] + rows]
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
    """Adds the report to tf.Summary `summary`, then writes it and flushes."""
    for tag, row in zip(class_tags(self.class_names), self.per_class):
      if row['precision'] is not None:
        summary.value.add(tag=tag, simple_value=row['precision'])
    pixels = confusion_image(self.confusion, self.class_names)[0]
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format='PNG')
    summary.value.add(tag='confusion_matrix/image/0', image=tf.Summary.Image(
        height=pixels.shape[0], width=pixels.shape[1], colorspace=3,
        encoded_image_string=png.getvalue()))
    names = columns = [escape_markdown(name) for name in self.class_names]
    if self.numbered:  # The image's numbers across, and what they stand for.
      columns = [str(c) for c in range(len(names))]
      names = ['%d %s' % (c, name) for c, name in enumerate(names)]
    counts = _markdown_table(['true \\ predicted'] + columns, [
        ['**%s**' % name] + [str(v) for v in row]
        for name, row in zip(names, self.confusion)])
    for tag, table in (('confusion_matrix_counts', counts),
                       ('precision_by_class', self.table(markdown=True))):
      summary.value.add(tag=tag, tensor=tf.make_tensor_proto(table))
      summary.value[-1].metadata.plugin_data.plugin_name = 'text'  # Its kind.
    writer.add_summary(summary, global_step)
    writer.flush()


def class_tags(class_names):
  """'Precision @ 1 by class/<name>' per class, '/' written '\u2215' (else a
  TensorBoard group); if two coincide, every tag ends in ' (class <c>)'."""
  tags = ['Precision @ 1 by class/' + name.replace('/', '\u2215')
          for name in class_names]
  if len(set(tags)) < len(tags):
    tags = ['%s (class %d)' % (tag, c) for c, tag in enumerate(tags)]
  return tags


def escape_markdown(text):
  """`text` as markdown that renders as itself, in a table cell too."""
  text = text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
  return re.sub(r'([\\`*_{}\[\]()#+\-.!|])', r'\\\1', text)


def _markdown_table(header, rows):
  """A markdown table (TensorBoard's Text dashboard renders it) of strings."""
  lines = ['| %s |' % ' | '.join(cells) for cells in [header] + rows]
  lines.insert(1, '|---' * len(header) + '|')
  return '\n'.join(lines)


def font_draws(texts):
  """Whether the default font has a glyph for every character of texts
  (Pillow draws those it lacks as one box glyph, U+E000's)."""
  font = ImageFont.load_default(size=FONT_SIZE)
  def mask(ch):
    m = font.getmask(ch)
    return m.size, bytes(np.asarray(m))
  missing = mask('\ue000')
  return all(mask(ch) != missing for ch in set(''.join(texts)))


def confusion_layout(n):
  """(cell, font_size) for n classes: many share 1,100 pixels, down to cells
  of 11, the least whose names (a pixel less per em) still read."""
  cell = min(CONFUSION_CELL_PIXELS, max(11, 1100 // n))
  return cell, min(FONT_SIZE, cell - 1)


def confusion_image(confusion, class_names):
  """uint8 [1, height, width, 3]: a confusion matrix (int [n, n]) as the
  picture of docs/tensorboard.md#evaluation, its grid n * cell + 1 pixels
  square (confusion_layout), its names numbers if not font_draws."""
  n = len(class_names)
  cell, font_size = confusion_layout(n)
  labels, title = list(class_names), ''
  if not font_draws(class_names):
    labels, title = [str(c) for c in range(n)], ' class number'
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  rgb = 255 - (confusion / totals)[..., None] * (255 - CONFUSION_FULL_RGB)
  grid = np.pad(np.kron(rgb, np.ones([cell, cell, 1])),
                [(0, 1), (0, 1), (0, 0)])
  grid[::cell] = grid[:, ::cell] = 200
  font = ImageFont.load_default(size=font_size)
  pad, gap = font_size // 4, font_size // 3
  # As wide left of the grid as high above it: title, gap, names, gap.
  margin = (pad + sum(font.getmetrics()) + gap + gap +
            math.ceil(max(font.getlength(label) for label in labels)))
  # The longer title's extends right of (and below) a smaller grid.
  side = max(len(grid), math.ceil(font.getlength('predicted' + title)))
  image = Image.new('RGB', (margin + side + pad,) * 2, 'white')
  image.paste(Image.fromarray(np.round(grid).astype(np.uint8)),
              (margin, margin))
  def write(xy, text, anchor):
    ImageDraw.Draw(image).text(xy, text, 'black', font, anchor)
  # The names left of the rows; then, turned a quarter right, the margin above
  # the grid is right of it: names written there read bottom to top.
  for i, label in enumerate(labels):
    write((margin - gap, margin + i * cell + cell // 2), label, 'rm')
  write((margin + side // 2, pad), 'predicted' + title, 'ma')
  image = image.transpose(Image.Transpose.ROTATE_270)
  for j, label in enumerate(labels):
    write((side + pad + gap, margin + j * cell + cell // 2), label, 'lm')
  write((side + pad - side // 2, pad), 'true' + title, 'ma')
  return np.array(image.transpose(Image.Transpose.ROTATE_90))[None]
