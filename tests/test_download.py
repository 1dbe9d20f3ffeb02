"""Download and extraction faults: each injected, each with its exact outcome.

A local HTTP server on 127.0.0.1 serves a small synthetic archive shaped like
cifar-10-binary.tar.gz, whole, cut short or corrupted on request.
"""

import fcntl
import hashlib
import http.server
import io
import os
import shutil
import tarfile
import threading

import pytest

import cifar10_input
from cifar10_support import download
import synthetic
import testutil

NAMES = synthetic.TRAIN_FILES + [synthetic.TEST_FILE]


@pytest.fixture(scope='module')
def archive(tmp_path_factory):
  """A synthetic cifar-10-binary.tar.gz: (path, bytes, md5, source dir)."""
  root = str(tmp_path_factory.mktemp('archive_source'))
  synthetic.make_data_dir(root, records_per_file=20, seed=1)
  path = os.path.join(root, 'cifar-10-binary.tar.gz')
  with tarfile.open(path, 'w:gz') as tar:
    tar.add(os.path.join(root, 'cifar-10-batches-bin'),
            arcname='cifar-10-batches-bin')
  with open(path, 'rb') as f:
    body = f.read()
  return path, body, hashlib.md5(body).hexdigest(), root


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
  httpd.body = archive[1]
  httpd.plan = []
  httpd.requests = 0
  httpd.hold = None
  httpd.url = 'http://127.0.0.1:%d/cifar-10-binary.tar.gz' % httpd.server_port
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


def fetch(data_dir, url, md5, **kwargs):
  kwargs.setdefault('retry_wait_secs', 0)
  download.maybe_download_and_extract(str(data_dir), url, md5, **kwargs)


def assert_extracted_like(data_dir, source_root):
  for name in NAMES:
    with open(os.path.join(str(data_dir), 'cifar-10-batches-bin', name),
              'rb') as f, open(os.path.join(source_root, 'cifar-10-batches-bin',
                                            name), 'rb') as g:
      assert f.read() == g.read(), name


def leftovers(data_dir):
  """Temporary files or directories left in data_dir."""
  return sorted(n for n in os.listdir(str(data_dir))
                if n.endswith('.part') or n.startswith('.extracting-'))


def test_http_download_verified_extracted_and_done_once(tmp_path, server,
                                                        archive, capsys):
  _, body, md5, source = archive
  fetch(tmp_path, server.url, md5)
  out = capsys.readouterr().out
  assert '>> Downloading cifar-10-binary.tar.gz 100.0%' in out
  assert ('Successfully downloaded cifar-10-binary.tar.gz %d bytes.'
          % len(body)) in out
  assert_extracted_like(tmp_path, source)
  assert download.file_md5(
      str(tmp_path / 'cifar-10-binary.tar.gz')) == md5
  assert sorted(os.listdir(str(tmp_path))) == [
      download.LOCK_NAME, 'cifar-10-batches-bin',
      'cifar-10-binary.tar.gz']
  # Complete now: a second call neither downloads nor prints.
  fetch(tmp_path, server.url, md5)
  assert server.requests == 1
  assert capsys.readouterr().out == ''


@pytest.mark.parametrize('reads, fetched', [
    (cifar10_input.eval_files('test'), False),
    (cifar10_input.TRAIN_FILES, True),
])
def test_only_a_missing_file_that_is_read_is_fetched(tmp_path, server, archive,
                                                     capsys, reads, fetched):
  _, _, md5, source = archive
  batches = tmp_path / 'cifar-10-batches-bin'
  batches.mkdir()
  shutil.copy(os.path.join(source, 'cifar-10-batches-bin', synthetic.TEST_FILE),
              str(batches))

  fetch(tmp_path, server.url, md5, files=reads)

  out = capsys.readouterr().out
  assert server.requests == int(fetched)
  if fetched:
    assert ('%s is incomplete (Failed to find file: %s ' % (
        batches, batches / 'data_batch_1.bin')) in out
    assert_extracted_like(tmp_path, source)
  else:
    assert out == ''
    assert os.listdir(str(batches)) == [synthetic.TEST_FILE]


def test_missing_directory_line_names_the_files_read(tmp_path, server, archive,
                                                     capsys):
  fetch(tmp_path, server.url, archive[2], files=cifar10_input.TRAIN_FILES)
  assert ('%s does not exist yet (data_batch_1.bin, data_batch_2.bin, '
          'data_batch_3.bin, data_batch_4.bin, data_batch_5.bin are read from '
          'it): getting CIFAR-10.' % (tmp_path / 'cifar-10-batches-bin')
          in capsys.readouterr().out)
  assert server.requests == 1


def test_truncated_download_is_retried(tmp_path, server, archive, capsys):
  _, body, md5, source = archive
  server.plan = ['truncate', 'ok']
  fetch(tmp_path, server.url, md5, attempts=3)
  assert server.requests == 2
  assert ('Download attempt 1 of 3 failed: got %d of the %d bytes announced; '
          'retrying' % (len(body) // 2, len(body))) in capsys.readouterr().out
  assert_extracted_like(tmp_path, source)
  assert leftovers(tmp_path) == []


@pytest.mark.parametrize('how,reason', [
    ('truncate', 'got %d of the %d bytes announced'),
    ('corrupt', 'the download has MD5 '),
])
def test_bad_download_is_never_taken_for_the_archive(tmp_path, server, archive,
                                                     how, reason):
  body = archive[1]
  server.plan = [how, how]
  if '%d' in reason:
    reason %= (len(body) // 2, len(body))
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(tmp_path, server.url, archive[2], attempts=2)
  message = str(e.value)
  assert message.startswith('Could not download %s: %s' % (server.url, reason))
  assert '(2 attempts)' in message
  assert 'put cifar-10-binary.tar.gz' in message
  assert server.requests == 2
  assert sorted(os.listdir(str(tmp_path))) == [download.LOCK_NAME]


def test_file_url_and_plain_path_are_used_in_place(tmp_path, archive):
  path, _, md5, source = archive
  fetch(tmp_path / 'a', 'file://' + path, md5)
  fetch(tmp_path / 'b', path, '')
  for sub in ('a', 'b'):
    assert_extracted_like(tmp_path / sub, source)
    assert not (tmp_path / sub / 'cifar-10-binary.tar.gz').exists()


def test_offline_without_archive_says_where_to_put_it(tmp_path, capsys):
  url = closed_port_url()
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(tmp_path, url, download.DATA_MD5, attempts=3)
  message = str(e.value)
  assert message.startswith('Could not download %s: ' % url)
  assert ('put cifar-10-binary.tar.gz (the binary version, 170052171 bytes) '
          'in %s, or point --data_url at it, e.g. '
          '--data_url=file:///path/to/cifar-10-binary.tar.gz' % tmp_path
          in message)
  # No connection at all is not retried: one message, not three.
  assert 'Download attempt' not in capsys.readouterr().out
  with pytest.raises(cifar10_input.DataError, match='names no file'):
    fetch(tmp_path, 'file://' + str(tmp_path / 'nowhere.tar.gz'), '')


def test_offline_script_exits_with_one_message(tmp_path):
  data_dir = str(tmp_path / 'data')
  url = closed_port_url()
  result = testutil.run_script('cifar10_train.py', [
      '--data_dir=' + data_dir, '--train_dir=' + str(tmp_path / 'train'),
      '--data_url=' + url, '--max_steps=1'], timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('cifar10_train.py: Could not download %s: ' % url)
  assert 'put cifar-10-binary.tar.gz' in last and data_dir in last
  assert not os.path.exists(os.path.join(data_dir, 'cifar-10-batches-bin'))


def test_incomplete_extraction_is_redone_from_the_archive(tmp_path, archive,
                                                          capsys):
  path, body, md5, source = archive
  batches = tmp_path / 'cifar-10-batches-bin'
  batches.mkdir()
  (batches / 'data_batch_1.bin').write_bytes(b'x' * 5000)  # Cut short.
  (tmp_path / 'cifar-10-binary.tar.gz').write_bytes(body)
  fetch(tmp_path, closed_port_url(), md5)  # Never contacted.
  assert 'is incomplete (Data file %s has 5000 bytes' % (
      batches / 'data_batch_1.bin') in capsys.readouterr().out
  assert_extracted_like(tmp_path, source)
  assert leftovers(tmp_path) == []


def test_archive_with_wrong_md5_is_moved_aside(tmp_path, server, archive,
                                               capsys):
  (tmp_path / 'cifar-10-binary.tar.gz').write_bytes(b'half a download')
  fetch(tmp_path, server.url, archive[2])
  assert 'moved it to %s.bad; downloading it again' % (
      tmp_path / 'cifar-10-binary.tar.gz') in capsys.readouterr().out
  assert (tmp_path / 'cifar-10-binary.tar.gz.bad').read_bytes() == (
      b'half a download')
  assert_extracted_like(tmp_path, archive[3])


def _tar_with(path, add_member):
  with tarfile.open(path, 'w:gz') as tar:
    add_member(tar)


def _add_file(name):
  def add(tar):
    info = tarfile.TarInfo(name)
    info.size = 3
    tar.addfile(info, io.BytesIO(b'bad'))
  return add


def _add_symlink(tar):
  info = tarfile.TarInfo('cifar-10-batches-bin/test_batch.bin')
  info.type = tarfile.SYMTYPE
  info.linkname = '/etc/passwd'
  tar.addfile(info)


@pytest.mark.parametrize('add_member,expected', [
    (_add_file('../escaped.bin'),
     "member '../escaped.bin' would be written outside the directory it is "
     'extracted into'),
    (_add_file('cifar-10-batches-bin/../../../escaped.bin'),
     "member 'cifar-10-batches-bin/../../../escaped.bin' would be written "
     'outside the directory it is extracted into'),
    (_add_symlink,
     "member 'cifar-10-batches-bin/test_batch.bin' is a link (to "
     "'/etc/passwd')"),
])
def test_unsafe_members_are_refused(tmp_path, add_member, expected):
  bad = str(tmp_path / 'bad.tar.gz')
  _tar_with(bad, add_member)
  data_dir = tmp_path / 'data'
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(data_dir, bad, '')
  assert str(e.value) == 'Refusing to extract %s: %s%s' % (
      bad, expected, '; the CIFAR-10 archive has none.' if 'link' in expected
      else '.')
  assert not (tmp_path / 'escaped.bin').exists()
  assert not (data_dir / 'escaped.bin').exists()
  assert sorted(os.listdir(str(data_dir))) == [download.LOCK_NAME]


@pytest.mark.parametrize('cut', ['garbage', 'half'])
def test_unreadable_archive_is_reported(tmp_path, archive, cut):
  bad = tmp_path / 'cifar-10-binary.tar.gz'
  body = archive[1]
  bad.write_bytes(b'not a tar' * 100 if cut == 'garbage'
                  else body[:len(body) // 2])
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(tmp_path / 'data', str(bad), '')
  assert str(e.value).startswith('Could not extract %s (' % bad)
  assert 'it is truncated or not a .tar.gz; delete it' in str(e.value)
  assert not (tmp_path / 'data' / 'cifar-10-batches-bin').exists()


def test_unwritable_data_dir_is_reported(tmp_path):
  (tmp_path / 'file').write_text('a file, not a directory')
  data_dir = tmp_path / 'file' / 'data'
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(data_dir, closed_port_url(), '')
  assert str(e.value).startswith(
      'Cannot write to data directory %s (NotADirectoryError' % data_dir)


def test_concurrent_runs_download_once_and_never_see_partial_files(
    tmp_path, server, archive, capsys, monkeypatch):
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
  batches = str(tmp_path / 'cifar-10-batches-bin')
  errors, seen_partial, done = [], [], threading.Event()

  def run():
    try:
      fetch(tmp_path, server.url, archive[2])
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  def watch():
    while not done.is_set():
      if os.path.isdir(batches):
        problem = download.batches_problem(batches)
        if problem:
          seen_partial.append(problem)

  threads = [threading.Thread(target=run) for _ in range(2)]
  watcher = threading.Thread(target=watch)
  watcher.start()
  try:
    for t in threads:
      t.start()
    try:
      one_waited = waiting.wait(60)
    finally:
      hold.set()  # Either way: the download goes on, the runs end.
    for t in threads:
      t.join(60)
  finally:
    done.set()
    watcher.join(10)
  assert one_waited, 'no run waited for the lock within 60 s'
  assert not any(t.is_alive() for t in threads + [watcher])
  assert errors == [] and seen_partial == []
  assert server.requests == 1
  assert ('Waiting for another process to finish downloading into %s'
          % tmp_path) in capsys.readouterr().out
  assert_extracted_like(tmp_path, archive[3])


def test_incomplete_dir_without_archive_names_both_problems(tmp_path):
  batches = tmp_path / 'cifar-10-batches-bin'
  batches.mkdir()
  url = closed_port_url()
  with pytest.raises(cifar10_input.DataError) as e:
    fetch(tmp_path, url, '')
  assert str(e.value).startswith(
      'Failed to find file: %s (expected a CIFAR-10 binary file'
      % (batches / 'data_batch_1.bin'))
  assert ('(%s is incomplete), and it cannot be extracted again: Could not '
          'download %s: ' % (batches, url)) in str(e.value)
