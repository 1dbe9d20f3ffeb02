"""The thread settings: the rule as a function of the core count, and the
flags that override it, down to the sessions' ConfigProtos. The flags'
ranges (no negative count) are test_flag_rules.py's."""

import pytest

from cifar10_support import sessions
from testutil import config_threads


@pytest.mark.parametrize('cores', [1, 2, 3, 4, 5, 8, 16, 64])
def test_one_op_at_a_time_only_on_few_cores_without_a_gpu(cores):
  few = cores <= 4  # sessions.ONE_OP_AT_A_TIME_MAX_CORES
  assert sessions.thread_settings(cores, gpu=False) == (0, 1 if few else 0)
  # A GPU, or towers meant to overlap: TensorFlow's defaults.
  assert sessions.thread_settings(cores, gpu=True) == (0, 0)
  assert sessions.thread_settings(cores, False, num_towers=2) == (0, 0)
  assert sessions.thread_settings(cores, False, cluster_task=True) == (0, 0)


def test_the_flags_win_over_the_rule():
  assert sessions.thread_settings(2, False, intra=3, inter=2) == (3, 2)
  assert sessions.thread_settings(2, False, inter=0) == (0, 0)
  assert sessions.thread_settings(16, True, intra=1) == (1, 0)
  assert sessions.thread_settings(16, False, num_towers=4, inter=1) == (0, 1)


def test_session_configs_follow_the_rule_and_the_flags(monkeypatch):
  monkeypatch.setattr(sessions, 'usable_cores', lambda: 2)
  config = sessions.session_config()
  assert config_threads(config) == (0, 1)
  assert config.session_inter_op_thread_pool[0].global_name
  assert config_threads(sessions.eval_config()) == (0, 1)
  assert config_threads(
      sessions.training_config(num_towers=1, tower_device='cpu')) == (0, 1)
  assert config_threads(
      sessions.training_config(num_towers=2, tower_device='cpu')) == (0, 0)
  # A cluster task's threads are its server's; TF's default, or the flags.
  assert config_threads(sessions.server_config()) == (0, 0)
  assert config_threads(sessions.server_config((2, 1))) == (2, 1)
  assert not sessions.worker_config(
      '/job:worker/task:0', 60).session_inter_op_thread_pool

  monkeypatch.setattr(sessions, 'usable_cores', lambda: 16)
  config = sessions.session_config()
  assert config_threads(config) == (0, 0)
  assert not config.session_inter_op_thread_pool

  explicit = sessions.training_config((3, 2), 2, 'cpu')
  assert config_threads(explicit) == (3, 2)
  assert explicit.device_count['CPU'] == 2
  assert config_threads(sessions.eval_config((1, 0))) == (1, 0)
