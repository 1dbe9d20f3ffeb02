"""Text for the pictures sent to TensorBoard, drawn with numpy alone.

The confusion matrix image (eval_report.confusion_image) carries the class
names and axis titles. Pillow and matplotlib are not dependencies, so this
module holds a small bitmap font of its own, with just the lowercase letters
those words need, and lays the labels out around a grid of cells.

    mask = text_pixels('cat', scale=2)      # bool [18, 34]
    image = label_grid(grid, cell, names, names, 'true', 'predicted')
"""

import numpy as np

# Each glyph is 5 columns by 9 rows: rows 0-6 stand on the baseline (lowercase
# letters are the 5 rows 2-6, ascenders reach row 0) and rows 7-8 hold the
# descenders of g and p, so the letters keep their usual shapes.
GLYPHS = {
    'a': ('.....', '.....', '.###.', '....#', '.####', '#...#', '.####',
          '.....', '.....'),
    'b': ('#....', '#....', '####.', '#...#', '#...#', '#...#', '####.',
          '.....', '.....'),
    'c': ('.....', '.....', '.####', '#....', '#....', '#....', '.####',
          '.....', '.....'),
    'd': ('....#', '....#', '.####', '#...#', '#...#', '#...#', '.####',
          '.....', '.....'),
    'e': ('.....', '.....', '.###.', '#...#', '#####', '#....', '.####',
          '.....', '.....'),
    'f': ('..###', '.#...', '####.', '.#...', '.#...', '.#...', '.#...',
          '.....', '.....'),
    'g': ('.....', '.....', '.####', '#...#', '#...#', '#...#', '.####',
          '....#', '.###.'),
    'h': ('#....', '#....', '####.', '#...#', '#...#', '#...#', '#...#',
          '.....', '.....'),
    'i': ('..#..', '.....', '.##..', '..#..', '..#..', '..#..', '.###.',
          '.....', '.....'),
    'k': ('#....', '#....', '#..#.', '#.#..', '##...', '#.#..', '#..#.',
          '.....', '.....'),
    'l': ('.##..', '..#..', '..#..', '..#..', '..#..', '..#..', '.###.',
          '.....', '.....'),
    'm': ('.....', '.....', '##.#.', '#.#.#', '#.#.#', '#.#.#', '#.#.#',
          '.....', '.....'),
    'n': ('.....', '.....', '####.', '#...#', '#...#', '#...#', '#...#',
          '.....', '.....'),
    'o': ('.....', '.....', '.###.', '#...#', '#...#', '#...#', '.###.',
          '.....', '.....'),
    'p': ('.....', '.....', '####.', '#...#', '#...#', '#...#', '####.',
          '#....', '#....'),
    'r': ('.....', '.....', '#.##.', '##..#', '#....', '#....', '#....',
          '.....', '.....'),
    's': ('.....', '.....', '.####', '#....', '.###.', '....#', '####.',
          '.....', '.....'),
    't': ('.#...', '.#...', '####.', '.#...', '.#...', '.#..#', '..##.',
          '.....', '.....'),
    'u': ('.....', '.....', '#...#', '#...#', '#...#', '#..##', '.##.#',
          '.....', '.....'),
}
GLYPH_WIDTH = 5
GLYPH_HEIGHT = 9
# Rows above the baseline; centring these, not the descenders, looks centred.
GLYPH_BODY = 7
# Blank columns between two letters.
LETTER_SPACING = 1

TEXT_RGB = (0, 0, 0)
BACKGROUND_RGB = (255, 255, 255)


def text_pixels(text, scale=1):
  """The pixels of `text` in the bitmap font, each font pixel scale x scale.

  Returns:
    bool array [GLYPH_HEIGHT * scale, width * scale], True where ink is, with
    width = len(text) * (GLYPH_WIDTH + LETTER_SPACING) - LETTER_SPACING.

  Raises:
    ValueError: a character that the font lacks.
  """
  missing = sorted(set(text) - set(GLYPHS))
  if missing:
    raise ValueError('no glyph for %r in %r' % (''.join(missing), text))
  gap = np.zeros([GLYPH_HEIGHT, LETTER_SPACING], bool)
  columns = []
  for i, char in enumerate(text):
    if i:
      columns.append(gap)
    columns.append(np.array([[c == '#' for c in row] for row in GLYPHS[char]]))
  mask = (np.concatenate(columns, axis=1) if columns
          else np.zeros([GLYPH_HEIGHT, 0], bool))
  return np.kron(mask, np.ones([scale, scale], bool)).astype(bool)


def label_grid(grid, cell, row_names, column_names, row_title, column_title,
               scale=2):
  """Puts names and titles around a grid of square cells, on white.

  Row names go right-aligned to the left of their rows, with `row_title`
  (read bottom to top) left of them; column names go above their columns,
  read bottom to top from just above the grid, with `column_title` on top.

  Args:
    grid: array [len(row_names) * cell + 1, len(column_names) * cell + 1, 3],
      values 0-255: the cells, row i from pixel i * cell.
    cell: int, pixels from one row (or column) of the grid to the next.
    row_names, column_names: sequences of str, top to bottom / left to right.
    row_title, column_title: str.
    scale: int, screen pixels per font pixel.

  Returns:
    uint8 array [height, width, 3]: the grid, copied unchanged, inside a white
    margin holding the text.
  """
  pad, gap = 2 * scale, 3 * scale
  text_height, body = GLYPH_HEIGHT * scale, GLYPH_BODY * scale
  longest = max(text_pixels(name, scale).shape[1]
                for name in list(row_names) + list(column_names))
  # Text taller than a cell spills past the last row or column.
  spill = max(0, text_height - cell)
  top = left = pad + text_height + gap + longest + gap
  rows, columns = grid.shape[:2]
  canvas = np.empty([top + rows + pad + spill, left + columns + pad + spill, 3])
  canvas[...] = BACKGROUND_RGB
  canvas[top:top + rows, left:left + columns] = grid

  def paste(mask, y, x):
    canvas[y:y + mask.shape[0], x:x + mask.shape[1]][mask] = TEXT_RGB

  # The body of the text (not its descenders) sits centred on each row.
  offset = (cell - body + 1) // 2
  for i, name in enumerate(row_names):
    mask = text_pixels(name, scale)
    paste(mask, top + i * cell + offset, left - gap - mask.shape[1])
  for j, name in enumerate(column_names):
    # Turned a quarter left, the tops of the letters face left.
    mask = np.rot90(text_pixels(name, scale))
    paste(mask, top - gap - mask.shape[0], left + j * cell + offset)
  mask = np.rot90(text_pixels(row_title, scale))
  paste(mask, top + (rows - mask.shape[0]) // 2, pad)
  mask = text_pixels(column_title, scale)
  paste(mask, pad, left + (columns - mask.shape[1]) // 2)
  return np.round(canvas).astype(np.uint8)
