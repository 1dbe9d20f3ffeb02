"""Downloads, verifies and extracts the CIFAR-10 binary archive, safely.

* A data_dir holding the files read is never touched, nor data_url read.
* The archive is downloaded to a temporary name and moved into place once
  complete (the length announced) and of data_md5 (unless ''); a timeout, a
  server error or a short or corrupt transfer is retried, nothing else.
* Runs started together download and extract once (a lock file), and none
  ever sees a half-extracted directory: it is renamed into place.
* Links, special files and paths outside data_dir in the archive are refused.
"""

import hashlib
import http.client
import os
import socket
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

DATA_URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz'
DATA_MD5 = 'c32a1d4ab5d03f1284b67883e8d87530'
DATA_BYTES = 170052171
ARCHIVE_NAME = 'cifar-10-binary.tar.gz'
BATCHES_DIR = 'cifar-10-batches-bin'
LOCK_NAME = '.cifar10_download.lock'
ALL_FILES = data_files.TRAIN_FILES + data_files.TEST_FILES

DOWNLOAD_ATTEMPTS = 3
RETRY_WAIT_SECS = 5.0
# Seconds a connect or a single read may block before the attempt fails.
TIMEOUT_SECS = 60.0


class _DownloadFailed(Exception):
  """A download attempt failed; args: reason, transient (another may work)."""


def batches_problem(batches_dir, names=ALL_FILES):
  """Why `batches_dir` lacks a file of `names` of whole records, or None."""
  try:
    data_files.check_data_files(
        [os.path.join(batches_dir, name) for name in names],
        check_labels=False)
  except DataError as e:
    return str(e)
  return None


def writable_dir_problem(path):
  """Creates directory `path` if needed; why no file can be made there, or
  None."""
  try:
    os.makedirs(path, exist_ok=True)
    tempfile.TemporaryFile(dir=path).close()
  except OSError as e:
    return '%s: %s' % (type(e).__name__, e.strerror or e)
  return None


def offline_help(data_dir):
  return ('To use a copy you already have, put %s (the binary version, %d '
          'bytes) in %s, or point --data_url at it, e.g. '
          '--data_url=file:///path/to/%s (with --data_md5= if it is not the '
          'official file); or extract it yourself so that %s holds '
          'data_batch_1.bin ... data_batch_5.bin and test_batch.bin.'
          % (ARCHIVE_NAME, DATA_BYTES, data_dir, ARCHIVE_NAME,
             os.path.join(data_dir, BATCHES_DIR)))


def maybe_download_and_extract(data_dir, data_url=DATA_URL, data_md5=DATA_MD5,
                               attempts=DOWNLOAD_ATTEMPTS,
                               retry_wait_secs=RETRY_WAIT_SECS,
                               timeout_secs=TIMEOUT_SECS, files=ALL_FILES):
  """Makes `files` usable in `<data_dir>/cifar-10-batches-bin`, fetching them
  from data_url (http(s), or a file:// URL or path of a copy, used in place);
  DataError with one message naming the problem and the fix."""
  batches_dir = os.path.join(data_dir, BATCHES_DIR)
  if batches_problem(batches_dir, files) is None:
    return
  problem = writable_dir_problem(data_dir)
  if problem:
    raise DataError('Cannot write to data directory %s (%s), so CIFAR-10 '
                    'cannot be downloaded or extracted there; point '
                    '--data_dir at a writable directory. %s'
                    % (data_dir, problem, offline_help(data_dir)))
  def wait(unused_lock_file):
    print('Waiting for another process to finish downloading into %s ...'
          % data_dir, flush=True)

  with locks.exclusive(os.path.join(data_dir, LOCK_NAME), wait):
    # Another process may have finished while this one waited for the lock.
    problem = batches_problem(batches_dir, files)
    if problem is None:
      return
    incomplete = os.path.exists(batches_dir)
    if incomplete:
      print('%s is incomplete (%s): extracting it again.'
            % (batches_dir, problem))
    else:
      print('%s does not exist yet (%s are read from it): getting CIFAR-10.'
            % (batches_dir, ', '.join(files)), flush=True)
    try:
      _extract(_archive(data_url, data_md5, data_dir, attempts,
                        retry_wait_secs, timeout_secs), data_dir)
    except DataError as e:
      if not incomplete:
        raise
      raise DataError('%s (%s is incomplete), and it cannot be extracted '
                      'again: %s' % (problem, batches_dir, e)) from None


def file_md5(path):
  md5 = hashlib.md5()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      md5.update(chunk)
  return md5.hexdigest()


def _md5_problem(path, data_md5):
  """'has MD5 <x>, expected <y> ...' if data_md5 is given and differs."""
  if data_md5:
    got = file_md5(path)
    if got != data_md5.lower():
      return 'has MD5 %s, expected %s (--data_md5)' % (got, data_md5)
  return None


def _archive(data_url, data_md5, data_dir, attempts, retry_wait_secs,
             timeout_secs):
  """The verified archive to extract: the file a file:// URL or plain path
  data_url names, else <data_dir>/ARCHIVE_NAME, downloaded unless it is there
  with the right MD5 (one without it is moved aside)."""
  parsed = urllib.parse.urlparse(data_url)
  if parsed.scheme in ('', 'file'):
    path = (urllib.request.url2pathname(parsed.path) if parsed.scheme
            else data_url)
    if not os.path.isfile(path):
      raise DataError('CIFAR-10 is not in %s and --data_url=%s names no file. '
                      '%s' % (data_dir, data_url, offline_help(data_dir)))
    problem = _md5_problem(path, data_md5)
    if problem:
      raise DataError('%s %s: it is corrupt, truncated or another file; give '
                      '--data_md5= (empty) to use it anyway.' % (path, problem))
    return path
  path = os.path.join(data_dir, ARCHIVE_NAME)
  if os.path.isfile(path):
    problem = _md5_problem(path, data_md5)
    if not problem:
      return path
    os.replace(path, path + '.bad')
    print('%s %s: moved it to %s.bad; downloading it again.'
          % (path, problem, path))
  for attempt in range(1, attempts + 1):
    fd, partial = tempfile.mkstemp(dir=data_dir, prefix=ARCHIVE_NAME + '.',
                                   suffix='.part')
    try:
      with os.fdopen(fd, 'wb') as out:
        size = _fetch(data_url, out, timeout_secs)
      problem = _md5_problem(partial, data_md5)
      if problem:
        raise _DownloadFailed('the download ' + problem, True)
      os.replace(partial, path)
      print('Successfully downloaded', ARCHIVE_NAME, size, 'bytes.')
      return path
    except _DownloadFailed as e:
      reason, transient = e.args
      if not transient or attempt == attempts:
        raise DataError('Could not download %s: %s%s. %s'
                        % (data_url, reason,
                           ' (%d attempts)' % attempt if attempt > 1 else '',
                           offline_help(data_dir)))
      print('Download attempt %d of %d failed: %s; retrying in %g s.'
            % (attempt, attempts, reason, retry_wait_secs), flush=True)
      time.sleep(retry_wait_secs)
    finally:
      if os.path.exists(partial):
        os.remove(partial)


def _fetch(url, out, timeout_secs):
  """Copies url to the open file `out`, returning its size, or raises
  _DownloadFailed; shows progress each 0.1% (MiB) on a terminal, each 10%
  (16 MiB) in a log. Not urlretrieve: it has no timeout."""
  tty = sys.stdout.isatty()
  received = 0
  try:
    with urllib.request.urlopen(url, timeout=timeout_secs) as response:
      total = int(response.headers.get('Content-Length') or 0)
      shown = None
      for chunk in iter(lambda: response.read(1 << 16), b''):
        out.write(chunk)
        received += len(chunk)
        if total:
          mark = received * (1000 if tty else 10) // total
          text = '%.1f%%' % (100.0 * received / total)
        else:
          mark = received >> (20 if tty else 24)
          text = '%.1f MiB' % (received / 2.0**20)
        if mark != shown:
          shown = mark
          print('%s>> Downloading %s %s' % ('\r' if tty else '', ARCHIVE_NAME,
                                            text),
                end='' if tty else '\n', flush=True)
  except urllib.error.HTTPError as e:
    raise _DownloadFailed('HTTP %d %s' % (e.code, e.reason),
                          e.code >= 500 or e.code in (408, 429))
  except urllib.error.URLError as e:
    timed_out = isinstance(e.reason, socket.timeout)
    raise _DownloadFailed('%s%s' % (e.reason, '' if timed_out else
                                    ' (offline?)'), timed_out)
  except (OSError, http.client.HTTPException) as e:
    raise _DownloadFailed('the transfer broke off after %d bytes (%s)'
                          % (received, type(e).__name__ if not str(e)
                             else '%s: %s' % (type(e).__name__, e)), True)
  finally:
    if received and tty:
      print(flush=True)  # Ends the progress line.
  if total and received != total:
    raise _DownloadFailed('got %d of the %d bytes announced'
                          % (received, total), True)
  return received


def _extract(archive, data_dir):
  """Extracts archive's cifar-10-batches-bin into data_dir, atomically;
  DataError if it is unreadable, holds a refused member or lacks data."""
  print('Extracting %s into %s' % (archive, data_dir), flush=True)
  with tempfile.TemporaryDirectory(dir=data_dir, prefix='.extracting-',
                                   ignore_cleanup_errors=True) as work_dir:
    try:
      with tarfile.open(archive, 'r:gz') as tar:
        members = tar.getmembers()  # Reads to the end: finds truncation.
        for member in members:
          refusal = _refusal(member, os.path.realpath(work_dir))
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
                                      offline_help(data_dir)))
    extracted = os.path.join(work_dir, BATCHES_DIR)
    problem = batches_problem(extracted)
    if problem:
      raise DataError('%s does not hold the CIFAR-10 binary data: %s'
                      % (archive, problem.replace(work_dir, '<archive>')))
    target = os.path.join(data_dir, BATCHES_DIR)
    if os.path.exists(target):
      # Incomplete (complete ones return early): deleted with work_dir.
      os.rename(target, os.path.join(work_dir, 'incomplete'))
    os.rename(extracted, target)


def _refusal(member, root):
  """Why archive `member` must not be extracted into `root` (a real path), or
  None. Not tarfile's data filter alone: it takes links inside root, and
  strips the '/' of an absolute name instead of refusing it."""
  if member.issym() or member.islnk():
    return 'is a link (to %r); the CIFAR-10 archive has none' % member.linkname
  if not (member.isfile() or member.isdir()):
    return 'is not a regular file or directory'
  if not os.path.realpath(os.path.join(root, member.name)).startswith(
      root + os.sep):
    return 'would be written outside the directory it is extracted into'
  return None


def data_check_message(data_dir, files, records=None, data_set=None):
  """'Data: /d/cifar-10-batches-bin, 5 files, 50000 records (checked).': checks
  `files` of data_set (CIFAR-10's in data_dir if None) unless `records`
  counts them; DataError if one is malformed."""
  if data_set is None:
    data_set = data_files.describe(data_dir)
  if records is None:
    records = data_set.check(files)
  return 'Data: %s, %d file%s, %d records (checked).' % (
      data_set.directory, len(files), 's' if len(files) > 1 else '', records)


def prepare(data_dir, data_url=None, data_md5=None, dataset='cifar10',
            split='train'):
  """A script's data step: fetches --dataset's files if needed, checks those
  of `split` ('train', or cifar10_eval.py's 'test' or 'train_eval'), prints
  the data line (and the classes, unless CIFAR-10's) and returns the
  data_files.DataSet; DataError if a file is malformed or cannot be fetched.
  data_url, data_md5: None for the official archive's."""
  maybe_download_and_extract(
      data_dir, DATA_URL if data_url is None else data_url,
      DATA_MD5 if data_md5 is None else data_md5,
      files=data_files.describe(data_dir, dataset).eval_files(
          'train_eval' if split == 'train' else split))
  data_set = data_files.describe(data_dir, dataset)
  files = data_set.eval_files('train_eval' if split == 'train' else split)
  print(data_check_message(data_dir, files, data_set=data_set))
  if data_set.class_names != data_files.CLASS_NAMES:
    print('Classes: %s, from %s.' % (
        data_set.describe_classes(),
        os.path.join(data_set.directory, data_set.layout.names_file)))
  return data_set
