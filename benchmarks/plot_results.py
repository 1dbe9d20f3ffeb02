"""Draws the measured precision @ 1 against steps and wall time, from JSON.

    python benchmarks/plot_results.py

writes docs/results.png and results_thumb.png (docs/results.md) from
accuracy_curve.json, results_*.json (accuracy.py --log) and
results_transcribed.json.
"""

import argparse
import glob
import os
import sys
import textwrap

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCHMARKS)
sys.path[:0] = [ROOT, BENCHMARKS]
from cifar10_support import console  # pylint: disable=g-import-not-at-top
# accuracy.py's rule draws the band; it loads TensorFlow, quietly here.
console.before_tensorflow(__name__)

# pylint: disable=g-import-not-at-top,wrong-import-position
import matplotlib
matplotlib.use('Agg')
from matplotlib import pyplot as plt
from matplotlib import transforms

import accuracy

TRANSCRIBED = os.path.join(BENCHMARKS, 'results_transcribed.json')
OUT = os.path.join(ROOT, 'docs', 'results.png')
THUMB = os.path.join(ROOT, 'docs', 'results_thumb.png')

COLORS = {'float32': '#1f5fa8', 'bfloat16': '#e07b00'}
MARKERS = {'EPYC-Zen5': 'o', 'EPYC-AVX2': 's', 'Xeon-AMX': '^',
           'IceLake': 'D'}
TIME_TICKS = [(60, '1 min'), (300, '5 min'), (600, '10 min'),
              (1800, '30 min'), (3600, '1 h'), (7200, '2 h'), (14400, '4 h')]
DODGE = 1.07  # single points at one step are drawn this factor apart


def series_of_log(log):
  """A series (as in results_transcribed.json) of an accuracy.py --log."""
  return {
      'label': 'ours, %s, %s, %s: accuracy.py --steps=%d' % (
          log['compute_dtype'], log['machine'], log['date'], log['steps']),
      'machine': log['machine'], 'dtype': log['compute_dtype'],
      'points': log['rows']}


def dodges(all_series):
  """{series index: factor}, {step: count}: single points (not the original
  tutorial's) that share a step are drawn DODGE apart on the log axis."""
  at_step = {}
  for index, series in enumerate(all_series):
    if len(series['points']) == 1 and not series.get('theirs'):
      at_step.setdefault(series['points'][0]['step'], []).append(index)
  factors = {index: DODGE ** (rank - (len(at) - 1) / 2)
             for at in at_step.values() for rank, index in enumerate(at)}
  return factors, {step: len(at) for step, at in at_step.items()
                   if len(at) > 1}


def draw_series(axes, series, dodge=1.0):
  """Draws a series on both panels (steps axes, time axes), its steps times
  `dodge`; points without a wall time (null) on the step panel only."""
  theirs, points = series.get('theirs', False), series['points']
  style = dict(
      color='black' if theirs else COLORS[series['dtype']],
      marker='*' if theirs else MARKERS.get(series['machine'], 'o'),
      markersize=13 if theirs else 6,
      linestyle='-' if len(points) > 1 else 'none', linewidth=1.4,
      label=series['label'])
  if series.get('emulated'):
    style['markerfacecolor'] = 'white'
  axes[0].plot([p['step'] * dodge for p in points],
               [p['precision'] for p in points], **style)
  timed = [p for p in points if p['wall_s'] is not None]
  axes[1].plot([p['wall_s'] for p in timed], [p['precision'] for p in timed],
               **style)
  if series.get('annotation'):
    # Named on the panels too, not only in the legend: it is not ours.
    last = points[-1]
    for ax, x in ((axes[0], last['step'] * dodge), (axes[1], last['wall_s'])):
      if x is not None:
        ax.annotate(series['annotation'], (x, last['precision']),
                    xytext=(-10, 0), textcoords='offset points', ha='right',
                    va='center', fontsize=8.5)


def draw_record(axes, curve):
  """The record's runs as grey dots, and its band on the step panel."""
  expected = accuracy.expected_by_step(curve)
  steps = sorted(expected)
  runs = len(curve['runs'])
  label = ('ours, float32, %s, %s: accuracy.py\'s record, %d runs of %s '
           'steps (grey dots), and the band a run passes in' % (
               curve['machine'], curve['date'], runs,
               '{:,}'.format(steps[-1])))
  axes[0].fill_between(
      steps, [expected[s][0] - expected[s][1] for s in steps],
      [expected[s][0] + expected[s][1] for s in steps], color='0.85',
      zorder=0, label=label)
  for point in curve['points']:
    axes[0].plot([point['step']] * runs, point['precision'], '.',
                 color='0.45', markersize=4, zorder=1)
    axes[1].plot(point['wall_s'], point['precision'], '.', color='0.45',
                 markersize=4, zorder=1)


def caption(transcribed, dodged):
  """The text under the legend: the transcribed notes, then the dodges'."""
  lines = transcribed['notes'] + [series['note']
                                  for series in transcribed['series']
                                  if series.get('note')]
  for step, count in sorted(dodged.items()):
    lines.append('The %d points at %s steps are drawn side by side, %.0f%% '
                 'apart on the step axis, so that none hides another.'
                 % (count, '{:,}'.format(step), (DODGE - 1) * 100))
  return '\n'.join(textwrap.fill(line, 165) for line in lines)


def draw(transcribed, curve, logs):
  """(matplotlib Figure, its two Axes: steps then wall time, its title)."""
  figure, axes = plt.subplots(1, 2, figsize=(13, 8.2), sharey=True)
  draw_record(axes, curve)
  # float32 first, as in the transcribed series.
  logs = sorted(logs, key=lambda log: (log['compute_dtype'] != 'float32',
                                       log['steps']))
  all_series = [series_of_log(log) for log in logs] + transcribed['series']
  factors, dodged = dodges(all_series)
  for index, series in enumerate(all_series):
    draw_series(axes, series, factors.get(index, 1.0))

  for ax, name in zip(axes, ('against training steps', 'against wall time')):
    ax.set(xscale='log', title=name)
    ax.grid(True, which='major', color='0.9')
  axes[0].set(xlabel='training steps (batch of 128; log scale)',
              ylabel='precision @ 1 (test set)')
  axes[0].xaxis.set_major_formatter('{x:,.0f}')
  axes[1].set_xlabel('wall time from the start of training (log scale)')
  axes[1].set_xticks(*zip(*TIME_TICKS))
  axes[1].minorticks_off()
  # sharey hides the right panel's tick labels; the left one keeps them.
  axes[1].yaxis.set_tick_params(labelleft=True)

  versions = {x['tensorflow'] for x in logs + [curve] + transcribed['series']
              if not x.get('theirs')}
  title = figure.suptitle(
      'CIFAR-10 tutorial model: precision @ 1 on the 10,000 test images as '
      'it trains (ours: TensorFlow %s, CPU only)'
      % ', '.join(sorted(versions)), fontsize=13)
  figure.legend(*axes[0].get_legend_handles_labels(), loc='upper center',
                ncol=2, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 0.3))
  figure.text(0.5, 0.015, caption(transcribed, dodged), ha='center',
              va='bottom', fontsize=8, color='0.25')
  figure.subplots_adjust(left=0.055, right=0.99, top=0.92, bottom=0.37,
                         wspace=0.08)
  return figure, axes, title


def panels_box(figure, axes, title):
  """The box, in inches, around the title and both panels (no legend)."""
  renderer = figure.canvas.get_renderer()
  boxes = [ax.get_tightbbox(renderer) for ax in axes] + [
      title.get_window_extent(renderer)]
  return transforms.Bbox.union(boxes).transformed(
      figure.dpi_scale_trans.inverted()).padded(0.1)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default=OUT)
  parser.add_argument('--thumb', default=THUMB,
                      help='the panels alone, small; empty for none')
  parser.add_argument('--curve', default=accuracy.CURVE,
                      help='the record of accuracy.py')
  parser.add_argument('--logs', default=None,
                      help='comma-separated --log files of accuracy.py; '
                      'default: benchmarks/results_*.json but the '
                      'transcribed one')
  args = parser.parse_args()
  paths = (args.logs.split(',') if args.logs else
           [path for path in sorted(glob.glob(os.path.join(
               BENCHMARKS, 'results_*.json'))) if path != TRANSCRIBED])
  figure, axes, title = draw(
      accuracy.read_json(TRANSCRIBED), accuracy.read_json(args.curve),
      [accuracy.read_json(path) for path in paths])
  figure.savefig(args.out, dpi=110)
  print('Wrote %s' % args.out)
  if args.thumb:
    figure.savefig(args.thumb, dpi=48,
                   bbox_inches=panels_box(figure, axes, title))
    print('Wrote %s' % args.thumb)


if __name__ == '__main__':
  main()
