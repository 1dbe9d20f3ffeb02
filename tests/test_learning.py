"""Each trainer learns as a user runs it: the script as a process, its own
hyper-parameters and a seed, on learnable synthetic data; then what
cifar10_eval.py --run_once gives on its checkpoint (a call:
testutil.eval_precision) is a precision an untrained model cannot reach
(testutil.LEARNED; chance is 0.1). The cluster trainers learn in their
clusters' tests (test_distributed_train.py, test_managed_clusters.py).
"""

import pytest

import testutil

# Seeded (--seed, chosen before measuring): each test's run is the same on a
# machine, run after run. Long enough to learn with a margin: over seeds
# 0-19 at 100 steps, the lowest precision was 0.701 on one device and 1.000
# with two towers (docs/reliability.md#the-learning-tests).
SEED = 0
STEPS = 100


@pytest.mark.slow  # A process that trains.
@pytest.mark.parametrize('script,args', [
    ('cifar10_train.py', []),
    ('cifar10_multi_gpu_train.py', ['--num_gpus=2', '--tower_device=cpu'])],
                         ids=['one_device', 'two_cpu_towers'])
def test_each_trainer_learns(learnable_data_dir, tmp_path, script, args):
  train_dir = str(tmp_path / 'train')
  result = testutil.run_script(script, [
      '--data_dir=%s' % learnable_data_dir, '--train_dir=%s' % train_dir,
      '--max_steps=%d' % STEPS, '--seed=%d' % SEED] + args, timeout=300)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'Done: step %d reached' % STEPS in result.stdout
  assert testutil.eval_precision(learnable_data_dir, train_dir, str(
      tmp_path / 'eval')) >= testutil.LEARNED
