"""Times cifar10_make_dataset.py against make_cifar10_bin.py on CIFAR-10's
60,000 JPEGs, and checks that they write the same records.

    python benchmarks/make_dataset.py --runs=3

Each runs as a whole process, --runs times, interleaved so that drift in the
machine's speed hits both alike; benchmarks/README.md says what it prints,
and holds the figures.
"""

import argparse
import glob
from importlib import metadata
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD_BYTES = 3073


def machine():
  """'model name, cpu family F model M, N cores' of /proc/cpuinfo."""
  try:
    with open('/proc/cpuinfo') as f:
      text = f.read()
  except OSError:
    text = ''
  fields = [re.search(r'^%s\s*:\s*(.*)$' % name, text, re.M)
            for name in ('model name', 'cpu family', 'model')]
  name, family, model = [m.group(1).strip() if m else '?' for m in fields]
  return '%s, cpu family %s model %s, %d cores' % (name, family, model,
                                                   os.cpu_count())


def timed(command):
  """(wall seconds, peak RSS in MiB) of running `command`, which must
  succeed (its stderr, TensorFlow's start-up lines, shown only if not)."""
  with tempfile.TemporaryFile() as stderr:
    start = time.time()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                               stderr=stderr, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.time() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
      stderr.seek(0)
      sys.exit('%s%s failed with exit status %d' % (
          stderr.read().decode(errors='replace'), ' '.join(command),
          process.returncode))
  return seconds, usage.ru_maxrss / 1024.  # Linux gives KiB.


def sorted_records(pattern):
  """The records of the files matching `pattern`, sorted: uint8 [N, 3073]."""
  records = np.concatenate([np.fromfile(path, np.uint8).reshape(
      -1, RECORD_BYTES) for path in sorted(glob.glob(pattern))])
  return records[np.lexsort(records.T[::-1])]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', type=int, default=3)
  parser.add_argument('--reference', default='/work/shared/data/'
                      'make_cifar10_bin.py', help='make_cifar10_bin.py, with '
                      'cifar10-jpg.tar.gz beside it')
  args = parser.parse_args()
  archive = os.path.join(os.path.dirname(args.reference), 'cifar10-jpg.tar.gz')
  print('machine: %s; TensorFlow %s' % (machine(),
                                        metadata.version('tensorflow')))
  with tempfile.TemporaryDirectory() as work:
    jpegs = os.path.join(work, 'jpg')
    with tarfile.open(archive) as tar:
      tar.extractall(jpegs, filter='data')
    commands = {
        'make_cifar10_bin.py': lambda dest: [sys.executable, args.reference,
                                             dest],
        'cifar10_make_dataset.py': lambda dest: [
            sys.executable, os.path.join(ROOT, 'cifar10_make_dataset.py'),
            jpegs, '--data_dir=%s' % dest, '--overwrite']}
    results = {name: [] for name in commands}
    for run in range(args.runs):
      for name, command in commands.items():
        results[name].append(timed(command(os.path.join(work, name))))
        print('run %d, %s: %.1f s, peak RSS %.0f MiB'
              % ((run + 1, name) + results[name][-1]), flush=True)
    same = all(np.array_equal(
        *[sorted_records(os.path.join(work, name, 'cifar-10-batches-bin',
                                      files)) for name in commands])
               for files in ('data_batch_*.bin', 'test_batch.bin'))
  medians = {name: statistics.median(s for s, _ in runs)
             for name, runs in results.items()}
  for name, runs in results.items():
    print('%-24s median %.1f s over %d runs, peak RSS %.0f MiB'
          % (name, medians[name], len(runs), max(r for _, r in runs)))
  print('ratio: cifar10_make_dataset.py takes %.2fx make_cifar10_bin.py\'s '
        'time (target: at most 2x)'
        % (medians['cifar10_make_dataset.py'] / medians['make_cifar10_bin.py']))
  print('records equal (sorted, training and test): %s' % ('yes' if same
                                                            else 'NO'))
  return 0 if same else 1


if __name__ == '__main__':
  sys.exit(main())
