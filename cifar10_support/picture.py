"""The confusion matrix as a picture for TensorBoard, with the class names.

The text is drawn by Pillow in its default font, Aileron (sizes from Pillow
10.1).
"""

import math

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont

# Pixels from one cell to the next.
CONFUSION_CELL_PIXELS = 24
# Colour of a cell holding a whole row (white is an empty cell).
CONFUSION_FULL_RGB = np.array([8, 48, 107])
# Pixels per em: lowercase letters are 10 pixels high, a line 23, within a cell.
FONT_SIZE = 18


def confusion_image(confusion, class_names):
  """Renders a confusion matrix, with the class names and axis titles.

  Rows are the true classes, top to bottom, and columns the predicted ones,
  left to right. Each row is normalized by its count, so a cell's colour runs
  from white (none of that class) to CONFUSION_FULL_RGB (all of it); grey
  (200) lines frame the cells. The names stand right-aligned left of the
  rows, with 'true' (read bottom to top) left of them, and above the columns,
  read bottom to top from the grid up, with 'predicted' on top.

  Args:
    confusion: int array [n, n], rows true classes, columns predicted.
    class_names: sequence of n str.

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
