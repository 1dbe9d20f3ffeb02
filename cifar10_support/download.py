"""Downloads, verifies and extracts a data set's official binary archive:
moved into place once complete and of data_md5 (unless ''), a timeout, server
error or short or corrupt transfer retried; once for runs started together (a
lock file), never seen half-extracted nor touching another data set; links,
special files and paths outside data_dir in the archive refused."""

import collections
import hashlib
import http.client
import os
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

from cifar10_support import data_files
from cifar10_support import locks
from cifar10_support.data_files import DataError

# One official archive; `name`: its file in data_dir, holding `directory`.
Archive = collections.namedtuple(
    'Archive', ['title', 'url', 'md5', 'bytes', 'name', 'directory'])
ARCHIVES = {'cifar10': Archive(
    'CIFAR-10', 'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz',
    'c32a1d4ab5d03f1284b67883e8d87530', 170052171, 'cifar-10-binary.tar.gz',
    'cifar-10-batches-bin')}
ARCHIVES['cifar100'] = ARCHIVES['cifar100_coarse'] = Archive(
    'CIFAR-100', 'https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz',
    '03b5dce01913d631647c71ecec9e9cb8', 168513733, 'cifar-100-binary.tar.gz',
    'cifar-100-binary')

BATCHES_DIR = ARCHIVES['cifar10'].directory  # What benchmarks/ read.
# One lock in a data_dir, whatever the archive: downloads there take turns.
LOCK_NAME = '.cifar10_download.lock'
DOWNLOAD_ATTEMPTS = 3
RETRY_WAIT_SECS = 5.0
TIMEOUT_SECS = 60.0  # A connect or one read; then the attempt fails.


class _DownloadFailed(Exception):
  """A download attempt failed; args: reason, transient (another may work)."""


def batches_problem(batches_dir, names, dataset):
  """Why a file of `names` in batches_dir is missing or not whole records."""
  try:
    data_files.check_data_files(
        [os.path.join(batches_dir, name) for name in names],
        check_labels=False, layout=data_files.LAYOUTS[dataset])
  except DataError as e:
    return str(e)
  return None


def writable_dir_problem(path):
  """Creates directory `path` if needed; why no file can be made there."""
  try:
    os.makedirs(path, exist_ok=True)
    tempfile.TemporaryFile(dir=path).close()
  except OSError as e:
    return '%s: %s' % (type(e).__name__, e.strerror or e)
  return None


def _other_set(directory, dataset):
  """(--dataset, Archive) of another data set in `directory`, or (None,)*2."""
  for other, archive in ARCHIVES.items():
    if (archive.directory != ARCHIVES[dataset].directory and
        os.path.isdir(os.path.join(directory, archive.directory))):
      return other, archive
  return None, None


def offline_help(data_dir, dataset):
  archive = ARCHIVES[dataset]
  layout = data_files.LAYOUTS[dataset]
  names = layout.train_files + layout.test_files  # 'a_1 ... a_5 and b'.
  other, other_archive = _other_set(data_dir, dataset)
  return ('To use a copy you already have, put %s (the binary version, %d '
          'bytes) in %s, or point --data_url at it, e.g. '
          '--data_url=file:///path/to/%s (with --data_md5= if it is not the '
          'official file); or extract it yourself so that %s holds %s.%s'
          % (archive.name, archive.bytes, data_dir, archive.name,
             os.path.join(data_dir, archive.directory),
             ' and '.join(names) if len(names) < 3 else '%s ... %s and %s'
             % (names[0], names[-2], names[-1]),
             ' (%s holds %s: --dataset=%s reads it)' % (
                 os.path.join(data_dir, other_archive.directory),
                 other_archive.title, other) if other else ''))


def maybe_download_and_extract(data_dir, data_url=None, data_md5=None,
                               files=None, dataset='cifar10', data_set=None):
  """Makes `files` (None: all) of `dataset` whole in data_dir, from data_url
  (http(s), or a file:// URL or path used in place; None or '': the official
  archive; data_md5 None: its MD5, '': no check). Returns data_set (None:
  described here) if whole, else what the archive put there; DataError names
  the problem and the fix. Never extracts over a converted data set."""
  archive = ARCHIVES[dataset]
  data_url = data_url or archive.url
  data_md5 = archive.md5 if data_md5 is None else data_md5
  data_set = data_set or data_files.describe(data_dir, dataset)
  files = files or data_set.train_files + data_set.test_files
  layout, batches_dir = data_set.layout, data_set.directory
  problem = batches_problem(batches_dir, files, dataset)
  if problem is None:
    return data_set
  converted = None
  if len(data_set.train_files) > len(layout.train_files):
    converted = 'it has %d training files' % len(data_set.train_files)
  elif (layout is data_files.CIFAR10 and
        data_set.class_names != data_files.CLASS_NAMES):
    converted = 'its %s names %s' % (layout.names_file,
                                     data_set.describe_classes())
  if converted:  # Written by cifar10_make_dataset.py: never replaced.
    raise DataError('%s; %s is not the %s download (%s), so it is never '
                    'replaced by one: write it again (cifar10_make_'
                    'dataset.py), or move it away to get %s'
                    % (problem, batches_dir, layout.title, converted,
                       layout.title))
  writable = writable_dir_problem(data_dir)
  if writable:
    raise DataError('Cannot write to data directory %s (%s), so %s cannot be '
                    'downloaded or extracted there; point --data_dir at a '
                    'writable directory. %s'
                    % (data_dir, writable, archive.title,
                       offline_help(data_dir, dataset)))
  with locks.exclusive(os.path.join(data_dir, LOCK_NAME), lambda _: print(
      'Waiting for another process to finish downloading into %s ...'
      % data_dir, flush=True)):
    # Another process may have fetched them while this one waited.
    problem = batches_problem(batches_dir, files, dataset)
    if problem is None:
      return data_files.describe(data_dir, dataset)
    incomplete = os.path.exists(batches_dir)
    print('%s is incomplete (%s): extracting it again.' % (batches_dir, problem)
          if incomplete else '%s does not exist yet (%s are read from it): '
          'getting %s.' % (batches_dir, ', '.join(files), archive.title),
          flush=True)
    try:
      _extract(_archive(data_url, data_md5, data_dir, dataset), data_dir,
               dataset)
    except DataError as e:
      if not incomplete:
        raise
      raise DataError('%s (%s is incomplete), and it cannot be extracted '
                      'again: %s' % (problem, batches_dir, e)) from None
  return data_files.describe(data_dir, dataset)


def file_md5(path):
  md5 = hashlib.md5()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      md5.update(chunk)
  return md5.hexdigest()


def _md5_problem(path, data_md5):
  got = data_md5 and file_md5(path)  # No check for ''.
  if got != data_md5.lower():
    return 'has MD5 %s, expected %s (--data_md5)' % (got, data_md5)
  return None


def _archive(data_url, data_md5, data_dir, dataset):
  """The verified archive: the file a file:// URL or path data_url names,
  else <data_dir>/<its name>, kept if of data_md5, else downloaded (a wrong
  one is moved to .bad)."""
  archive = ARCHIVES[dataset]
  parsed = urllib.parse.urlparse(data_url)
  if parsed.scheme in ('', 'file'):
    path = (urllib.request.url2pathname(parsed.path) if parsed.scheme
            else data_url)
    if not os.path.isfile(path):
      raise DataError('%s is not in %s and --data_url=%s names no file. %s'
                      % (archive.title, data_dir, data_url,
                         offline_help(data_dir, dataset)))
    problem = _md5_problem(path, data_md5)
    if problem:
      raise DataError('%s %s: it is corrupt, truncated or another file; give '
                      '--data_md5= (empty) to use it anyway.' % (path, problem))
    return path
  path = os.path.join(data_dir, archive.name)
  if os.path.isfile(path):
    problem = _md5_problem(path, data_md5)
    if not problem:
      return path
    os.replace(path, path + '.bad')
    print('%s %s: moved it to %s.bad; downloading it again.'
          % (path, problem, path))
  for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):  # urllib never retries.
    fd, partial = tempfile.mkstemp(dir=data_dir, prefix=archive.name + '.',
                                   suffix='.part')
    try:
      with os.fdopen(fd, 'wb') as out:
        size = _fetch(data_url, out, archive.name)
      problem = _md5_problem(partial, data_md5)
      if problem:
        raise _DownloadFailed('the download ' + problem, True)
      os.replace(partial, path)
      print('Successfully downloaded', archive.name, size, 'bytes.')
      return path
    except _DownloadFailed as e:
      reason, transient = e.args
      if not transient or attempt == DOWNLOAD_ATTEMPTS:
        raise DataError('Could not download %s: %s%s. %s'
                        % (data_url, reason,
                           ' (%d attempts)' % attempt if attempt > 1 else '',
                           offline_help(data_dir, dataset)))
      print('Download attempt %d of %d failed: %s; retrying in %g s.'
            % (attempt, DOWNLOAD_ATTEMPTS, reason, RETRY_WAIT_SECS),
            flush=True)
      time.sleep(RETRY_WAIT_SECS)
    finally:
      if os.path.exists(partial):
        os.remove(partial)


def _fetch(url, out, name):
  """Copies url to the open file `out`, returning its size; progress (as
  `name`) each 0.1% (MiB) on a terminal, each 10% (16 MiB) in a log."""
  tty = sys.stdout.isatty()
  received = 0
  try:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECS) as response:
      total = int(response.headers.get('Content-Length') or 0)
      shown = None
      for chunk in iter(lambda: response.read(1 << 16), b''):
        out.write(chunk)
        received += len(chunk)
        mark = (received * (1000 if tty else 10) // total if total
                else received >> (20 if tty else 24))
        if mark != shown:
          shown = mark
          print('%s>> Downloading %s %s' % (
              '\r' if tty else '', name,
              '%.1f%%' % (100.0 * received / total) if total
              else '%.1f MiB' % (received / 2.0**20)),
                end='' if tty else '\n', flush=True)
  except urllib.error.HTTPError as e:
    raise _DownloadFailed('HTTP %d %s' % (e.code, e.reason),
                          e.code >= 500 or e.code in (408, 429))
  except urllib.error.URLError as e:
    timed_out = isinstance(e.reason, TimeoutError)
    raise _DownloadFailed('%s%s' % (e.reason, '' if timed_out else
                                    ' (offline?)'), timed_out)
  except BrokenPipeError:
    raise  # Our own output closed, not the transfer: the script ends.
  except (OSError, http.client.HTTPException) as e:
    raise _DownloadFailed('the transfer broke off after %d bytes (%s)'
                          % (received, type(e).__name__ if not str(e)
                             else '%s: %s' % (type(e).__name__, e)), True)
  finally:
    if received and tty:
      print(flush=True)  # Ends the progress line.
  if total and received != total:  # http.client does not check it.
    raise _DownloadFailed('got %d of the %d bytes announced'
                          % (received, total), True)
  return received


def _extract(archive, data_dir, dataset):
  """Extracts `dataset`'s directory from the file `archive` into data_dir."""
  official = ARCHIVES[dataset]
  layout = data_files.LAYOUTS[dataset]
  print('Extracting %s into %s' % (archive, data_dir), flush=True)
  with tempfile.TemporaryDirectory(dir=data_dir, prefix='.extracting-',
                                   ignore_cleanup_errors=True) as work_dir:
    try:
      with tarfile.open(archive, 'r:gz') as tar:
        members = tar.getmembers()  # Reads to the end: finds truncation.
        for member in members:
          refusal = _refusal(member, os.path.realpath(work_dir), official.title)
          if refusal:
            raise DataError('Refusing to extract %s: member %r %s.'
                            % (archive, member.name, refusal))
        # Python 3.10 before 3.10.12 has no extraction filters.
        filters = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
        tar.extractall(work_dir, members=members, **filters)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
      if isinstance(e, OSError) and e.errno is not None:
        raise DataError('Could not extract %s into %s: %s'
                        % (archive, data_dir, e))
      raise DataError('Could not extract %s (%s: %s): it is truncated or '
                      'not a .tar.gz; delete it and run again to fetch it '
                      'afresh. %s' % (archive, type(e).__name__, e,
                                      offline_help(data_dir, dataset)))
    extracted = os.path.join(work_dir, official.directory)
    problem = batches_problem(extracted, layout.train_files +
                              layout.test_files, dataset)
    if problem:
      other, other_archive = _other_set(work_dir, dataset)
      raise DataError('%s does not hold the %s binary data: %s%s'
                      % (archive, official.title,
                         problem.replace(work_dir, '<archive>'),
                         '; it holds %s/, %s\'s: use --dataset=%s, or point '
                         '--data_url at %s' % (
                             other_archive.directory, other_archive.title,
                             other, official.name) if other else ''))
    target = os.path.join(data_dir, official.directory)
    if os.path.exists(target):  # Incomplete: deleted with work_dir.
      os.rename(target, os.path.join(work_dir, 'incomplete'))
    os.rename(extracted, target)


def _refusal(member, root, title):
  """Why archive `member` must not be extracted into `root` (a real path), or
  None: tarfile's data filter, where there is one, takes links inside root,
  strips an absolute name's '/', and may let links chain out (CVE-2025-4517)."""
  if member.issym() or member.islnk():
    return 'is a link (to %r); the %s archive has none' % (member.linkname,
                                                            title)
  if not (member.isfile() or member.isdir()):
    return 'is not a regular file or directory'
  if not os.path.realpath(os.path.join(root, member.name)).startswith(
      root + os.sep):
    return 'would be written outside the directory it is extracted into'
  return None


def prepare(data_dir, data_url=None, data_md5=None, dataset='cifar10',
            split='train'):
  """A script's data step: describes --dataset's data in data_dir once,
  fetches the files of `split` ('train', 'test' or 'train_eval') if one is
  missing or short, checks them (labels too), prints the data line (and the
  classes, unless CIFAR-10's) and returns that data_files.DataSet."""
  eval_data = 'train_eval' if split == 'train' else split
  data_set = data_files.describe(data_dir, dataset)
  data_set = maybe_download_and_extract(
      data_dir, data_url, data_md5, data_set.eval_files(eval_data), dataset,
      data_set)
  files = data_set.eval_files(eval_data)
  print('Data: %s, %d file%s, %d records (checked).' % (
      data_set.directory, len(files), 's' if len(files) > 1 else '',
      data_set.check(files)))
  if data_set.class_names != data_files.CLASS_NAMES:
    print('Classes: %s, from %s.' % (
        data_set.describe_classes(),
        os.path.join(data_set.directory, data_set.layout.names_file)))
  return data_set
