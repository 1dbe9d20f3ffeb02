"""Bad flags (docs/reliability.md): the ranges absl checks as it parses, the
rule between two flags, an unwritable --train_dir, and a read-only
--data_dir that already holds the data."""

import contextlib
import copy
import ctypes
import os
import re

from absl import flags
import pytest

import cifar10  # pylint: disable=unused-import (its flags)
import cifar10_distributed_train
import cifar10_multi_gpu_train
import cifar10_train
from cifar10_support import download
import testutil

# The trainers' flags with a range (cifar10.py's, cifar10_train.py's and
# run_flags', which every trainer imports): the lowest value each takes, and
# what absl's --help writes for that bound. --num_gpus: the multi-GPU one's.
NUM_GPUS = (1, '(a positive integer)')
RANGES = {
    'batch_size': (1, '(a positive integer)'),
    'max_steps': (1, '(a positive integer)'),
    'log_frequency': (1, '(a positive integer)'),
    'save_checkpoint_secs': (1, '(a positive integer)'),
    'save_checkpoint_steps': (0, '(a non-negative integer)'),
    'save_summaries_steps': (0, '(a non-negative integer)'),
    'num_intra_threads': (0, '(a non-negative integer)'),
    'num_inter_threads': (0, '(a non-negative integer)'),
}


def _parsed(names, *args):
  """Copies of the scripts' flags `names`, with their validators, parsed
  from args: the process's FLAGS are left alone."""
  flag_values = flags.FlagValues()
  for name in names:
    flag_values[name] = copy.deepcopy(flags.FLAGS[name])
    flag_values[name].unparse()
  flag_values(['cifar10_train.py'] + list(args))
  return flag_values


def _help_entries(module):
  """{flag name: its entry} of what `python <module>.py --help` prints: the
  flags key to the script's module, its own and those it adopts."""
  text = flags.FLAGS.module_help(module)
  entries = re.split(r'\n  (?=--)', text)
  return {re.match(r'--(?:\[no\])?(\w+)', entry).group(1): entry
          for entry in entries[1:]}


@pytest.mark.parametrize('name', sorted(RANGES) + ['num_gpus'])
def test_each_range_is_checked_as_parsed_and_shown_by_help(name):
  lowest, words = RANGES.get(name, NUM_GPUS)
  below = lowest - 1
  with pytest.raises(flags.IllegalFlagValueError) as e:
    _parsed([name], '--%s=%d' % (name, below))
  # What the script's `Flags parsing error` line says after its prefix.
  assert str(e.value) == 'flag --%s=%d: %d is not %s' % (
      name, below, below, words.strip('()'))
  assert _parsed([name], '--%s=%d' % (name, lowest))[name].value == lowest
  # The --help of each trainer that has the flag shows it.
  trainers = [cifar10_train, cifar10_multi_gpu_train, cifar10_distributed_train]
  for module in trainers[1:2] if name == 'num_gpus' else trainers:
    assert words in _help_entries(module)[name], module.__name__


# The one process test of a flag refused as it is parsed (a range, or a
# rule between flags); each message is tested by a call.
@pytest.mark.slow  # Starts a process.
def test_a_value_out_of_range_stops_the_script_before_anything_is_made(
    tmp_path):
  # tmp_path stays empty when the flags are refused; a run that went on
  # would fail on the missing local archive, never reaching the network.
  result = testutil.run_script('cifar10_train.py', [
      '--max_steps=0', '--train_dir=%s' % (tmp_path / 'train'),
      '--data_dir=%s' % (tmp_path / 'data'),
      '--data_url=%s' % (tmp_path / 'no_archive.tar.gz')], timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert ('FATAL Flags parsing error: flag --max_steps=0: 0 is not a positive '
          'integer') in result.stderr.splitlines()
  assert not os.listdir(str(tmp_path))


def test_replicas_without_sync_replicas_is_a_flags_parsing_error():
  names = ('replicas_to_aggregate', 'sync_replicas')
  with pytest.raises(flags.IllegalFlagValueError) as e:
    _parsed(names, '--replicas_to_aggregate=2')
  # What the script's `FATAL Flags parsing error` line says after its
  # prefix (that line, exit 1, nothing made: the test above, as absl parses
  # every script's flags alike): the two flags' values, the rule's message.
  assert str(e.value) == (
      'flags replicas_to_aggregate=2, sync_replicas=False: '
      '--replicas_to_aggregate only applies with --sync_replicas')
  assert _parsed(names, '--replicas_to_aggregate=2',
                 '--sync_replicas').replicas_to_aggregate == 2


@pytest.mark.slow  # Starts a process.
def test_an_unwritable_train_dir_is_refused_with_the_data_in_place(
    tmp_path, data_dir):
  # Every other flag is good and the data is there: the refusal is the
  # train_dir check's. Root writes anywhere chmod forbids, but not under a
  # regular file.
  (tmp_path / 'file').write_text('a file, not a directory')
  train_dir = str(tmp_path / 'file' / 'train')
  data_before = sorted(os.walk(data_dir))
  result = testutil.run_script('cifar10_train.py', [
      '--data_dir=%s' % data_dir, '--train_dir=%s' % train_dir,
      '--max_steps=1', '--batch_size=8'], timeout=120)
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      '--train_dir=%s is not a writable directory: NotADirectoryError: Not a '
      'directory' % train_dir)
  assert os.listdir(str(tmp_path)) == ['file']
  assert sorted(os.walk(data_dir)) == data_before


_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MNT_DETACH = 1, 32, 4096, 2


@contextlib.contextmanager
def _read_only_view(source, target):
  """Yields `target`, an empty directory made to show `source` read-only,
  to root too, whom file modes do not stop: a read-only bind mount, undone
  afterwards. Skips the test where this process may not mount."""
  os.makedirs(target)
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.mount(source.encode(), target.encode(), None, _MS_BIND, None):
    pytest.skip('cannot bind-mount here: %s'
                % os.strerror(ctypes.get_errno()))
  try:
    if libc.mount(None, target.encode(), None,
                  _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None):
      raise OSError(ctypes.get_errno(), 'read-only remount of ' + target)
    yield target
  finally:
    libc.umount2(target.encode(), _MNT_DETACH)


def test_a_read_only_data_dir_that_holds_the_data_is_used(data_dir, tmp_path,
                                                          capsys):
  with _read_only_view(data_dir, str(tmp_path / 'read_only')) as read_only:
    batches = os.path.join(read_only, 'cifar-10-batches-bin')
    for directory in (read_only, batches):
      with pytest.raises(OSError):  # Really unwritable, for root too.
        open(os.path.join(directory, 'probe'), 'w').close()
    # The data step of every trainer (train) and of cifar10_eval.py (test).
    for split in ('train', 'test'):
      data_set = download.prepare(read_only, split=split)
      assert data_set.directory == batches
      assert capsys.readouterr().out.startswith('Data: %s, ' % batches)
