"""Download and extraction faults, each injected, each with its exact outcome,
for CIFAR-10's and CIFAR-100's archives: a local HTTP server serves a small
synthetic archive whole, cut short, corrupted or refused on request.

Output is captured by `printed`, not capsys: conftest.py would take capsys's
own _start() call for a slow test's and leave these out of the quick loop.
"""

import collections
import concurrent.futures
import fcntl
import functools
import hashlib
import http.server
import io
import os
import pathlib
import shutil
import tarfile
import threading
import types
from unittest import mock
import urllib.error
import urllib.request

from absl import flags
import numpy as np
import pytest

from cifar10_support import data_files
from cifar10_support import download
from cifar10_support import evaluation
from cifar10_support import run_flags  # pylint: disable=unused-import
import synthetic
import testutil

DATASETS = ['cifar10', 'cifar100']
OTHER = {'cifar10': 'cifar100', 'cifar100': 'cifar10'}

Source = collections.namedtuple('Source', [
    'dataset', 'path', 'body', 'md5', 'root', 'official', 'layout'])


@pytest.fixture(scope='module', params=DATASETS)
def archive(request, tmp_path_factory):
  """A synthetic archive of each data set at `path` (its bytes `body`, their
  `md5`), extracted from root/<official.directory>: layout's data files."""
  dataset = request.param
  root = str(tmp_path_factory.mktemp('archive_source_' + dataset))
  path = (synthetic.make_cifar10_archive if dataset == 'cifar10'
          else synthetic.make_cifar100_archive)(root, seed=1)
  with open(path, 'rb') as f:
    body = f.read()
  return Source(dataset, path, body, hashlib.md5(body).hexdigest(), root,
                download.ARCHIVES[dataset], data_files.LAYOUTS[dataset])


@pytest.fixture
def printed(monkeypatch):
  """A function: what download.py printed since its last call (pytest sets
  sys.stdout again for each test phase: a fixture cannot redirect it)."""
  buffer = io.StringIO()
  monkeypatch.setattr(download, 'print', functools.partial(print, file=buffer),
                      raising=False)

  def take():
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
  return take


class _Handler(http.server.BaseHTTPRequestHandler):
  """Serves server.body; server.plan says how each request goes wrong.

  With server.hold, a threading.Event, the next body stops after its first
  chunk until the event is set (60 s at most).
  """

  def do_GET(self):  # pylint: disable=invalid-name
    server = self.server
    server.requests += 1
    how = server.plan.pop(0) if server.plan else 'ok'
    body = server.body
    if how.isdigit():  # An HTTP error status.
      self.send_error(int(how))
      return
    if how == 'corrupt':  # Same length, other bytes: only the MD5 tells.
      flipped = bytes(b ^ 0xff for b in body[1000:2000])
      body = body[:1000] + flipped + body[2000:]
    self.send_response(200)
    self.send_header('Content-Length', str(len(body)))
    self.end_headers()
    if how == 'truncate':  # Announces the full length, then hangs up.
      body = body[:len(body) // 2]
    hold, server.hold = server.hold, None
    for start in range(0, len(body), 1 << 14):
      self.wfile.write(body[start:start + (1 << 14)])
      if hold is not None:
        self.wfile.flush()
        hold.wait(60)
        hold = None

  def log_message(self, *args):
    pass


@pytest.fixture
def server(archive):
  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
  vars(httpd).update(body=archive.body, plan=[], requests=0, hold=None)
  httpd.url = 'http://127.0.0.1:%d/%s' % (httpd.server_port,
                                          archive.official.name)
  thread = threading.Thread(target=httpd.serve_forever, args=(0.05,),
                            daemon=True)
  thread.start()
  yield httpd
  httpd.shutdown()
  httpd.server_close()


def closed_port_url():
  """An http URL on 127.0.0.1 where nothing listens: offline, at once."""
  port, = testutil.free_ports(1)
  return 'http://127.0.0.1:%d/cifar-10-binary.tar.gz' % port


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch):
  monkeypatch.setattr(download, 'RETRY_WAIT_SECS', 0)


def fetch(data_dir, url, md5, dataset='cifar10', **kwargs):
  """maybe_download_and_extract's DataSet of data_dir."""
  return download.maybe_download_and_extract(str(data_dir), url, md5,
                                             dataset=dataset, **kwargs)


def fetch_source(data_dir, url, source, **kwargs):
  """fetch() of `source`'s data set, checked against its MD5."""
  fetch(data_dir, url, source.md5, source.dataset, **kwargs)


def assert_extracted_like(data_dir, source):
  directory = source.official.directory
  assert snapshot(os.path.join(str(data_dir), directory)) == snapshot(
      os.path.join(source.root, directory))


def make_other(data_dir, dataset):
  """The other data set than `dataset`, extracted in data_dir."""
  if dataset == 'cifar10':
    synthetic.make_cifar100_dir(str(data_dir), records=10, seed=5)
  else:
    synthetic.make_data_dir(str(data_dir), records_per_file=10, seed=5)


def leftovers(data_dir):
  """Temporary files or directories left in data_dir."""
  return sorted(n for n in os.listdir(str(data_dir))
                if n.endswith('.part') or n.startswith('.extracting-'))


def snapshot(directory):
  """{relative path: bytes} of every file under `directory`."""
  root = pathlib.Path(directory)
  return {str(path.relative_to(root)): path.read_bytes()
          for path in root.rglob('*') if path.is_file()}


def test_http_download_verified_extracted_and_done_once(tmp_path, server,
                                                        archive, printed):
  layout = archive.layout
  fetch_source(tmp_path, server.url, archive, files=layout.train_files)
  out = printed()
  name = archive.official.name
  assert ('%s does not exist yet (%s are read from it): getting %s.'
          % (tmp_path / archive.official.directory,
             ', '.join(layout.train_files), archive.official.title) in out)
  assert '>> Downloading %s 100.0%%' % name in out
  assert ('Successfully downloaded %s %d bytes.' % (name, len(archive.body))
          in out)
  assert_extracted_like(tmp_path, archive)
  assert download.file_md5(str(tmp_path / name)) == archive.md5
  assert sorted(os.listdir(str(tmp_path))) == sorted([
      download.LOCK_NAME, archive.official.directory, name])
  # Complete now: a second call, of every file, neither downloads nor prints.
  fetch_source(tmp_path, server.url, archive)
  assert server.requests == 1
  assert printed() == ''


def test_prepare_describes_the_data_once_and_returns_it(tmp_path, archive,
                                                        printed, monkeypatch):
  """The run's one description of its data: prepare describes data_dir once
  when the files are there, again only after an archive changed what is
  there, reads the labels once, and returns the DataSet it described."""
  real_describe, real_check = data_files.describe, data_files.DataSet.check
  described, checked = [], []

  def describe(*args, **kwargs):
    described.append(real_describe(*args, **kwargs))
    return described[-1]

  def check(data_set, names):
    checked.append(list(names))
    return real_check(data_set, names)
  monkeypatch.setattr(data_files, 'describe', describe)
  monkeypatch.setattr(data_files.DataSet, 'check', check)
  layout = archive.layout
  data_dir = str(tmp_path)

  fetched = download.prepare(data_dir, archive.path, archive.md5,
                             archive.dataset)
  assert len(described) == 2  # Before the extraction, and after it.
  assert fetched is described[-1]
  assert fetched == real_describe(data_dir, archive.dataset)
  assert checked == [list(layout.train_files)]
  for split, files in (('train', layout.train_files),
                       ('test', layout.test_files)):
    del described[:], checked[:]
    data_set = download.prepare(data_dir, closed_port_url(), None,
                                archive.dataset, split)
    assert described == [data_set] and data_set == fetched
    assert checked == [list(files)]
  assert 'Data: %s, 1 file, 20 records (checked).' % fetched.directory in (
      printed())


@pytest.mark.parametrize('reads, fetched', [('test', False),
                                            ('train_eval', True)])
def test_only_a_missing_file_that_is_read_is_fetched(tmp_path, server, archive,
                                                     printed, reads, fetched):
  layout = archive.layout
  batches = tmp_path / archive.official.directory
  batches.mkdir()
  test_file, = layout.test_files
  shutil.copy(os.path.join(archive.root, archive.official.directory,
                           test_file), str(batches))
  files = data_files.describe(str(tmp_path), archive.dataset).eval_files(reads)

  fetch_source(tmp_path, server.url, archive, files=files)

  out = printed()
  assert server.requests == int(fetched)
  if fetched:
    assert ('%s is incomplete (Failed to find file: %s ' % (
        batches, batches / layout.train_files[0])) in out
    assert_extracted_like(tmp_path, archive)
  else:
    assert out == ''
    assert os.listdir(str(batches)) == [test_file]


@pytest.mark.parametrize('plan, reason', [
    (['truncate', 'ok'], 'got %d of the %d bytes announced'),
    (['503', 'ok'], 'HTTP 503 Service Unavailable'),
    (['truncate'] * 2, 'got %d of the %d bytes announced'),
    (['corrupt'] * 2, 'the download has MD5 '),
    (['500'] * 2, 'HTTP 500 Internal Server Error'),
    (['404'], 'HTTP 404 Not Found'),  # A client error: not retried.
])
def test_a_failed_download_is_retried_and_never_taken_for_the_archive(
    tmp_path, server, archive, printed, monkeypatch, plan, reason):
  monkeypatch.setattr(download, 'DOWNLOAD_ATTEMPTS', 2)
  server.plan = list(plan)
  if '%d' in reason:
    reason %= (len(archive.body) // 2, len(archive.body))
  retried = 'Download attempt 1 of 2 failed: ' + reason
  if plan[-1] == 'ok':
    fetch_source(tmp_path, server.url, archive)
    assert retried + '; retrying' in printed()
    assert_extracted_like(tmp_path, archive)
    assert leftovers(tmp_path) == []
  else:
    with pytest.raises(data_files.DataError) as e:
      fetch_source(tmp_path, server.url, archive)
    message = str(e.value)
    assert message.startswith('Could not download %s: %s'
                              % (server.url, reason))
    assert ('(2 attempts)' in message) == (len(plan) == 2)
    assert '. To use a copy you already have, put %s ' % (
        archive.official.name) in message
    assert (retried in printed()) == (len(plan) == 2)
    assert sorted(os.listdir(str(tmp_path))) == [download.LOCK_NAME]
  assert server.requests == len(plan)


def test_file_url_and_plain_path_are_used_in_place(tmp_path, archive):
  fetch_source(tmp_path / 'a', 'file://' + archive.path, archive)
  fetch(tmp_path / 'b', archive.path, '', archive.dataset)
  for sub in ('a', 'b'):
    assert_extracted_like(tmp_path / sub, archive)
    assert not (tmp_path / sub / archive.official.name).exists()


@pytest.mark.parametrize('dataset, expected', [
    ('cifar10', 'put cifar-10-binary.tar.gz (the binary version, 170052171 '
     'bytes) in {d}, or point --data_url at it, e.g. '
     '--data_url=file:///path/to/cifar-10-binary.tar.gz (with --data_md5= if '
     'it is not the official file); or extract it yourself so that '
     '{d}/cifar-10-batches-bin holds data_batch_1.bin ... data_batch_5.bin '
     'and test_batch.bin.'),
    ('cifar100', 'put cifar-100-binary.tar.gz (the binary version, 168513733 '
     'bytes) in {d}, or point --data_url at it, e.g. '
     '--data_url=file:///path/to/cifar-100-binary.tar.gz (with --data_md5= if '
     'it is not the official file); or extract it yourself so that '
     '{d}/cifar-100-binary holds train.bin and test.bin.'),
])
def test_offline_without_archive_says_where_to_put_it(tmp_path, printed,
                                                      dataset, expected):
  url = closed_port_url()
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path, url, None, dataset)
  message = str(e.value)
  assert message.startswith('Could not download %s: ' % url)
  assert message.endswith(expected.format(d=tmp_path))
  assert os.listdir(str(tmp_path)) == [download.LOCK_NAME]  # Nothing else.
  # No connection at all is not retried: one message, not three. (That a
  # script ends with the line, exit status 1: test_reliability.py's
  # process test of a DataError, raised in the same download.prepare.)
  assert 'Download attempt' not in printed()
  with pytest.raises(data_files.DataError, match='names no file'):
    fetch(tmp_path, 'file://' + str(tmp_path / 'nowhere.tar.gz'), '', dataset)
  # The other data set in data_dir: named, with the --dataset that reads it.
  other = download.ARCHIVES[OTHER[dataset]]
  make_other(tmp_path, dataset)
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path, url, None, dataset)
  assert str(e.value).endswith(expected.format(d=tmp_path) + (
      ' (%s holds %s: --dataset=%s reads it)'
      % (tmp_path / other.directory, other.title, OTHER[dataset])))
  # Its own directory, incomplete: both problems named.
  layout = data_files.LAYOUTS[dataset]
  batches = tmp_path / layout.batches_dir
  batches.mkdir()
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path, url, '', dataset)
  assert str(e.value).startswith(
      'Failed to find file: %s (expected a %s binary file'
      % (batches / layout.train_files[0], layout.title))
  assert ('(%s is incomplete), and it cannot be extracted again: Could not '
          'download %s: ' % (batches, url)) in str(e.value)


@pytest.mark.parametrize('dataset', ['cifar10', 'cifar100', 'cifar100_coarse'])
def test_official_archive_by_default(tmp_path, monkeypatch, dataset):
  # data_url and data_md5 None (the flags' defaults): --dataset's own archive.
  official = download.ARCHIVES[dataset]
  offline = mock.Mock(side_effect=urllib.error.URLError('no network here'))
  monkeypatch.setattr(urllib.request, 'urlopen', offline)
  for data_url in (None, ''):  # An empty --data_url= is the official one.
    with pytest.raises(data_files.DataError) as e:
      download.prepare(str(tmp_path / 'data'), data_url, dataset=dataset)
    assert str(e.value).startswith(
        'Could not download %s: no network here (offline?). To use a copy you '
        'already have, put %s ' % (official.url, official.name))
  assert [call.args[0] for call in offline.call_args_list] == [official.url] * 2
  copy = tmp_path / 'copy.tar.gz'
  copy.write_bytes(b'not the archive')
  with pytest.raises(data_files.DataError) as e:
    download.prepare(str(tmp_path / 'data'), str(copy), dataset=dataset)
  assert str(e.value) == (
      '%s has MD5 %s, expected %s (--data_md5): it is corrupt, truncated or '
      'another file; give --data_md5= (empty) to use it anyway.'
      % (copy, hashlib.md5(b'not the archive').hexdigest(), official.md5))


def test_data_flags_default_to_the_official_archive_of_dataset():
  for name, field in (('data_url', 'url'), ('data_md5', 'md5')):
    flag = flags.FLAGS[name]  # Its default, None: test_layout.py.
    assert ('Default: the official archive' in flag.help)
    assert ('%s for cifar10, %s for cifar100 and cifar100_coarse.' % (
        getattr(download.ARCHIVES['cifar10'], field),
        getattr(download.ARCHIVES['cifar100'], field))) in flag.help
  assert "empty (--data_md5=) to skip the check" in flags.FLAGS['data_md5'].help


def test_incomplete_extraction_is_redone_from_the_archive(tmp_path, archive,
                                                          printed):
  batches = tmp_path / archive.official.directory
  batches.mkdir()
  first = archive.layout.train_files[0]
  (batches / first).write_bytes(b'x' * 5000)  # Cut short.
  (tmp_path / archive.official.name).write_bytes(archive.body)
  fetch_source(tmp_path, closed_port_url(), archive)  # Never contacted.
  assert 'is incomplete (Data file %s has 5000 bytes' % (
      batches / first) in printed()
  assert_extracted_like(tmp_path, archive)
  assert leftovers(tmp_path) == []


def test_archive_with_wrong_md5_is_moved_aside(tmp_path, server, archive,
                                               printed):
  target = tmp_path / archive.official.name
  target.write_bytes(b'half a download')
  fetch_source(tmp_path, server.url, archive)
  assert 'moved it to %s.bad; downloading it again' % target in printed()
  assert (tmp_path / (archive.official.name + '.bad')).read_bytes() == (
      b'half a download')
  assert_extracted_like(tmp_path, archive)


OUTSIDE = ' would be written outside the directory it is extracted into.'


@pytest.mark.parametrize('dataset', DATASETS)
@pytest.mark.parametrize('name, kind, link, expected', [
    ('../escaped.bin', tarfile.REGTYPE, '', OUTSIDE),
    ('{dir}/../../../escaped.bin', tarfile.REGTYPE, '', OUTSIDE),
    ('/tmp/escaped.bin', tarfile.REGTYPE, '', OUTSIDE),
    ('{dir}/{file}', tarfile.SYMTYPE, '/etc/passwd',
     " is a link (to '/etc/passwd'); the {title} archive has none."),
    ('{dir}/{file}', tarfile.LNKTYPE, 'elsewhere.bin',
     " is a link (to 'elsewhere.bin'); the {title} archive has none."),
    ('{dir}/{file}', tarfile.FIFOTYPE, '',
     ' is not a regular file or directory.'),
])
def test_unsafe_members_are_refused(tmp_path, dataset, name, kind, link,
                                    expected):
  official = download.ARCHIVES[dataset]
  names = dict(dir=official.directory, title=official.title,
               file=data_files.LAYOUTS[dataset].test_files[0])
  member = tarfile.TarInfo(name.format(**names))
  member.type, member.linkname = kind, link
  member.size = 3 if kind == tarfile.REGTYPE else 0
  bad = str(tmp_path / 'bad.tar.gz')
  with tarfile.open(bad, 'w:gz') as tar:
    tar.addfile(member, io.BytesIO(b'bad') if member.size else None)
  data_dir = tmp_path / 'data'
  with pytest.raises(data_files.DataError) as e:
    fetch(data_dir, bad, '', dataset)
  assert str(e.value) == "Refusing to extract %s: member '%s'%s" % (
      bad, member.name, expected.format(**names))
  assert not (tmp_path / 'escaped.bin').exists()
  assert not os.path.exists('/tmp/escaped.bin')
  assert sorted(os.listdir(str(data_dir))) == [download.LOCK_NAME]


@pytest.mark.parametrize('cut', ['garbage', 'half'])
def test_unreadable_archive_is_reported(tmp_path, archive, cut):
  bad = tmp_path / archive.official.name
  body = archive.body
  bad.write_bytes(b'not a tar' * 100 if cut == 'garbage'
                  else body[:len(body) // 2])
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path / 'data', str(bad), '', archive.dataset)
  assert str(e.value).startswith('Could not extract %s (' % bad)
  assert 'it is truncated or not a .tar.gz; delete it' in str(e.value)
  assert 'put %s' % archive.official.name in str(e.value)
  assert not (tmp_path / 'data' / archive.official.directory).exists()


def test_archive_lacking_the_data_is_reported(tmp_path, archive):
  # The official directory, with the test file alone.
  directory, layout = archive.official.directory, archive.layout
  partial = tmp_path / 'partial'
  (partial / directory).mkdir(parents=True)
  shutil.copy(os.path.join(archive.root, directory, layout.test_files[0]),
              str(partial / directory))
  bad = synthetic.make_archive(str(tmp_path / 'partial.tar.gz'), str(partial),
                               directory)
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path / 'data', bad, '', archive.dataset)
  assert str(e.value) == (
      '%s does not hold the %s binary data: Failed to find file: '
      '<archive>/%s/%s (expected a %s binary file of %d-byte records; see '
      'README.md, "Data")' % (
          bad, archive.official.title, directory, layout.train_files[0],
          layout.title, layout.record_bytes))
  assert sorted(os.listdir(str(tmp_path / 'data'))) == [download.LOCK_NAME]
  # The other data set's archive: named, with the --dataset that reads it.
  wanted = OTHER[archive.dataset]
  with pytest.raises(data_files.DataError) as e:
    fetch(tmp_path / 'other', archive.path, '', wanted)
  message = str(e.value)
  assert message.startswith('%s does not hold the %s binary data: Failed to '
                            'find file: <archive>/%s/' % (
                                archive.path, download.ARCHIVES[wanted].title,
                                download.ARCHIVES[wanted].directory))
  assert message.endswith(
      "; it holds %s/, %s's: use --dataset=%s, or point --data_url at %s"
      % (archive.official.directory, archive.official.title, archive.dataset,
         download.ARCHIVES[wanted].name))
  assert os.listdir(str(tmp_path / 'other')) == [download.LOCK_NAME]


def test_extraction_beside_the_other_data_set_leaves_it_alone(tmp_path,
                                                              archive):
  other = download.ARCHIVES[OTHER[archive.dataset]].directory
  make_other(tmp_path, archive.dataset)
  before = snapshot(tmp_path / other)
  mtimes = {name: os.stat(str(tmp_path / other / name)).st_mtime_ns
            for name in before}
  fetch_source(tmp_path, archive.path, archive)
  assert_extracted_like(tmp_path, archive)
  assert snapshot(tmp_path / other) == before
  assert mtimes == {name: os.stat(str(tmp_path / other / name)).st_mtime_ns
                    for name in before}
  # And the other one is complete: fetching it touches nothing.
  fetch(tmp_path, closed_port_url(), None, OTHER[archive.dataset])
  assert snapshot(tmp_path / other) == before


def test_unwritable_data_dir_is_reported(tmp_path):
  (tmp_path / 'file').write_text('a file, not a directory')
  data_dir = tmp_path / 'file' / 'data'
  for dataset in download.ARCHIVES:
    with pytest.raises(data_files.DataError) as e:
      fetch(data_dir, closed_port_url(), '', dataset)
    assert str(e.value).startswith(
        'Cannot write to data directory %s (NotADirectoryError' % data_dir)
    assert ('so %s cannot be downloaded' % download.ARCHIVES[dataset].title
            in str(e.value))
    assert 'put %s' % download.ARCHIVES[dataset].name in str(e.value)


def test_concurrent_runs_download_once_and_never_see_partial_files(
    tmp_path, server, archive, printed, monkeypatch):
  # The download stays in flight until the other run waits for the lock: a
  # blocking LOCK_EX on the download lock, tried once LOCK_NB found it held.
  hold = server.hold = threading.Event()
  waiting = threading.Event()
  real_flock = fcntl.flock

  def flock(file, operation):
    if (operation == fcntl.LOCK_EX and
        getattr(file, 'name', '').endswith(download.LOCK_NAME)):
      waiting.set()
    return real_flock(file, operation)
  monkeypatch.setattr(fcntl, 'flock', flock)
  batches = str(tmp_path / archive.official.directory)
  names = archive.layout.train_files + archive.layout.test_files
  seen_partial, done = [], threading.Event()

  def watch():
    while not done.is_set():
      if os.path.isdir(batches):
        problem = download.batches_problem(batches, names, archive.dataset)
        if problem:
          seen_partial.append(problem)

  pool = concurrent.futures.ThreadPoolExecutor(3)
  watcher = pool.submit(watch)
  runs = [pool.submit(fetch_source, tmp_path, server.url, archive)
          for _ in range(2)]
  one_waited = waiting.wait(60)
  hold.set()  # Either way: the download goes on, the runs end.
  concurrent.futures.wait(runs, 60)
  done.set()
  pool.shutdown(wait=False)
  assert one_waited, 'no run waited for the lock within 60 s'
  for each in runs + [watcher]:
    each.result(10)  # Raises what it raised; fails while it still runs.
  assert seen_partial == []
  assert server.requests == 1
  assert ('Waiting for another process to finish downloading into %s'
          % tmp_path) in printed()
  assert_extracted_like(tmp_path, archive)


@pytest.mark.parametrize('train_files, why', [
    (1, None),
    (2, 'its batches.meta.txt names 3 classes (cat, dog, seven)'),
    (7, 'it has 7 training files'),
])
def test_converted_set_is_never_replaced_by_a_download(tmp_path, printed,
                                                       train_files, why):
  # A data set cifar10_make_dataset.py could write, of 3 classes.
  synthetic.make_own_data_dir(str(tmp_path), ('cat', 'dog', 'seven'),
                              (7,) * train_files, 7)
  batches = os.path.join(str(tmp_path), 'cifar-10-batches-bin')
  before = snapshot(batches)
  url = closed_port_url()  # Nothing listens: any download attempt fails.

  fetch(tmp_path, url, None)
  for split in ('train', 'test', 'train_eval'):
    data_set = download.prepare(str(tmp_path), url, None, split=split)
    assert data_set.class_names == ('cat', 'dog', 'seven')
  out = printed()
  assert ('Data: %s, %d file%s, %d records (checked).\nClasses: 3 classes '
          '(cat, dog, seven), from %s/batches.meta.txt.\n'
          % (batches, train_files, 's' if train_files > 1 else '',
             7 * train_files, batches)) in out
  assert 'Data: %s, 1 file, 7 records (checked).\n' % batches in out
  assert 'getting' not in out and 'incomplete' not in out
  not_cifar10 = ('; %s is not the CIFAR-10 download (%%s), so it is never '
                 'replaced by one: write it again (cifar10_make_dataset.py), '
                 'or move it away to get CIFAR-10' % batches)
  # The five files of old, asked for explicitly: named, and still untouched.
  if train_files < 5:
    with pytest.raises(data_files.DataError) as e:
      fetch(tmp_path, url, None,
            files=data_files.TRAIN_FILES + data_files.TEST_FILES)
    assert str(e.value).startswith(
        'Failed to find file: %s (expected a CIFAR-10 binary file'
        % os.path.join(batches, 'data_batch_%d.bin' % (train_files + 1)))
    assert str(e.value).endswith(not_cifar10 % (
        'its batches.meta.txt names 3 classes (cat, dog, seven)'))
  assert snapshot(batches) == before
  assert sorted(os.listdir(str(tmp_path))) == ['cifar-10-batches-bin']
  if why:  # Broken: named, still not replaced.
    cut = os.path.join(batches, 'data_batch_2.bin')
    os.truncate(cut, 5000)
    before = snapshot(batches)
    with pytest.raises(data_files.DataError) as e:
      download.prepare(str(tmp_path), url)
    assert str(e.value).startswith('Data file %s has 5000 bytes' % cut)
    assert str(e.value).endswith(not_cifar10 % why)
    assert snapshot(batches) == before
    assert os.listdir(str(tmp_path)) == ['cifar-10-batches-bin']  # No lock.


@pytest.mark.parametrize('dataset', ['cifar100', 'cifar100_coarse'])
def test_cifar100_data_line_classes_and_label_bytes(tmp_path, printed,
                                                    dataset):
  synthetic.make_cifar100_dir(str(tmp_path), records=30, test_records=10)
  data_set = download.prepare(str(tmp_path), closed_port_url(),
                              dataset=dataset)
  count = 100 if dataset == 'cifar100' else 20
  prefix = 'fine' if dataset == 'cifar100' else 'coarse'
  assert data_set.num_classes == count
  assert printed() == (
      'Data: %s, 1 file, 30 records (checked).\nClasses: %d classes (%s, '
      '...), from %s.\n' % (tmp_path / 'cifar-100-binary', count, ', '.join(
          '%s_%d' % (prefix, i) for i in range(10)),
          tmp_path / 'cifar-100-binary' / ('%s_label_names.txt' % prefix)))
  # Record 3's fine label out of range, then its coarse one too (the first
  # checked).
  path = os.path.join(str(tmp_path), 'cifar-100-binary', 'train.bin')
  coarse = ' (coarse labels)' if dataset == 'cifar100_coarse' else ''
  for byte, value, expected in (
      (1, 100, 'fine label byte is 100, expected 0-99'),
      (0, 20, 'coarse label byte is 20, expected 0-19')):
    with open(path, 'r+b') as f:
      f.seek(3 * 3074 + byte)
      f.write(bytes([value]))
    with pytest.raises(data_files.DataError) as e:
      download.prepare(str(tmp_path), closed_port_url(), dataset=dataset)
    assert str(e.value) == (
        'Data file %s, record 3 (byte offset 9222): %s (1 records in the file '
        'have a bad label): the file is corrupt, or not CIFAR-100%s binary '
        'data of %d classes' % (path, expected, coarse, value))
  assert printed() == ''  # Labels never trigger a download.


@pytest.mark.parametrize('written, read, records, expected', [
    # Whole records of the other layout are not whole records of this one.
    ('cifar10', 'cifar100', 20, 'has 61460 bytes, which is not a whole number '
     'of 3074-byte records (19 records and 3054 bytes left over): the file is '
     'truncated or not CIFAR-100 binary data'),
    ('cifar100', 'cifar10', 20, 'has 61480 bytes, which is not a whole number '
     'of 3073-byte records (20 records and 20 bytes left over): the file is '
     'truncated or not CIFAR-10 binary data'),
    # 3,074 CIFAR-10 records are 3,073 CIFAR-100 ones: the labels tell.
    ('cifar10', 'cifar100', 3074, 'coarse label byte is 2'),
    ('cifar100', 'cifar10', 3073, 'label byte is 1'),
])
def test_a_file_of_the_other_layout_is_named(tmp_path, written, read, records,
                                             expected):
  rng = np.random.RandomState(0)
  labels = np.arange(records) % 10 + 10 * (written == 'cifar100')
  if written == 'cifar100':
    labels = np.stack([labels, labels * 5], axis=1)
  layout = data_files.LAYOUTS[read]
  directory = tmp_path / layout.batches_dir
  directory.mkdir()
  path = str(directory / layout.train_files[0])
  synthetic.write_records(path, labels, rng.randint(
      200, 256, (records, 32, 32, 3)))
  data_set = data_files.describe(str(tmp_path), read)
  with pytest.raises(data_files.DataError) as e:
    data_set.check([layout.train_files[0]])
  assert str(e.value).startswith('Data file %s' % path)
  assert expected in str(e.value)
  if expected.startswith('label byte'):
    assert str(e.value).endswith(
        '(CIFAR-100 has two label bytes: --dataset=cifar100)')


def test_eval_flags_prepare_their_dataset(tmp_path, printed):
  synthetic.make_cifar100_dir(str(tmp_path), records=30, test_records=10)
  flag_values = types.SimpleNamespace(
      data_dir=str(tmp_path), eval_data='test', num_examples=10,
      batch_size=5, run_once=True, eval_interval_secs=0, until_step=None,
      data_url=closed_port_url(), data_md5=None, dataset='cifar100',
      mixed_precision='off', num_intra_threads=None, num_inter_threads=None)
  settings, data_set = evaluation.fetch_data_then_settings(flag_values)
  assert settings.num_examples == 10 and data_set.num_classes == 100
  with pytest.raises(ValueError, match='more than the 10 records in %s' % (
      tmp_path / 'cifar-100-binary' / 'test.bin')):
    evaluation.fetch_data_then_settings(types.SimpleNamespace(
        **dict(vars(flag_values), num_examples=11)))
