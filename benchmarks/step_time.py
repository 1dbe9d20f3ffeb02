"""Splits one training step's wall time into input, compute and host work.

The split comes from the step's own statistics (a traced run's
`RunMetadata.step_stats`) and the wall-clock times just before and after the
`run` call:

  input    the time during which the step's only running ops were dequeues
           from an input queue (QueueDequeue*): waiting for a batch, or
           copying it out of the queue
  compute  the time during which at least one other op of the step ran, on
           any device (an op's interval is its executor's all_start ..
           all_end, so it includes the op's own scheduling inside the
           executor; on a GPU the kernels' stream entries count too)
  host     everything else in the wall time: before the step's first op
           starts (hooks' before_run, the session's feeding and setup), after
           its last op ends (fetching, hooks' after_run: logging, writing
           summaries, checkpoints) and gaps between ops where none of the
           step's ops ran (the executor handing ops on, or ops waiting for a
           thread of the inter-op pool)

The three parts tile the wall time, so they add up to it, each being >= 0,
as long as the traced ops lie inside the timed call. Overlapping ops (two
devices, a GPU's several streams listing the same kernel) are counted once:
every part is a length of a union of intervals.
"""

import collections
import re

import tensorflow.compat.v1 as tf

# Op types that take a batch from an input queue.
INPUT_OP_TYPES = frozenset([
    'QueueDequeueV2', 'QueueDequeueManyV2', 'QueueDequeueUpToV2',
    'QueueDequeue', 'QueueDequeueMany', 'QueueDequeueUpTo'])

# A node's timeline label reads '[allocations] name = OpType(inputs)'; GPU
# stream entries carry a kernel name instead, and are never input ops.
_OP_TYPE = re.compile(r' = (\w+)\(')


class Breakdown(collections.namedtuple(
    'Breakdown', ['step', 'input', 'compute', 'host', 'before', 'between',
                  'after'])):
  """One step's split, every field a float in seconds.

  step = input + compute + host, and host = before + between + after: the
  host time before the first op, between ops, and after the last op.
  """

  def fractions(self):
    """(input, compute, host) as fractions of the step, floats."""
    return tuple(part / self.step if self.step > 0 else float('nan')
                 for part in (self.input, self.compute, self.host))


def op_type(node_stats):
  """The op type in a NodeExecStats' timeline label ('' if none), a str."""
  match = _OP_TYPE.search(node_stats.timeline_label)
  return match.group(1) if match else ''


def _interval(node_stats):
  """(start, end) in microseconds, floats; nanoseconds when recorded."""
  if node_stats.all_start_nanos:
    start = node_stats.all_start_nanos / 1e3
    return start, start + node_stats.all_end_rel_nanos / 1e3
  start = float(node_stats.all_start_micros)
  return start, start + node_stats.all_end_rel_micros


def union(intervals):
  """Sorted, disjoint (start, end) pairs covering the same points."""
  merged = []
  for start, end in sorted(intervals):
    if merged and start <= merged[-1][1]:
      merged[-1][1] = max(merged[-1][1], end)
    else:
      merged.append([start, end])
  return [tuple(pair) for pair in merged]


def length(disjoint):
  return sum(end - start for start, end in disjoint)


def subtract(disjoint, minus):
  """The parts of `disjoint` outside `minus`; both sorted and disjoint."""
  result = []
  for start, end in disjoint:
    for cut_start, cut_end in minus:
      if cut_end <= start or cut_start >= end:
        continue
      if cut_start > start:
        result.append((start, cut_start))
      start = max(start, cut_end)
    if start < end:
      result.append((start, end))
  return result


def split_step(step_stats, start, end, input_op_types=INPUT_OP_TYPES):
  """A Breakdown of a traced step (see the module docstring), in seconds.

  step_stats: one run's StepStats (`run_metadata.step_stats`), every device
  and stream of it; a node without a start time is left out. start, end:
  time.time() just before and after the run call, the clock of TensorFlow's
  all_start times. before or after comes out negative only if the trace
  does not lie inside [start, end]: a clock that is not the host's.
  """
  ops, inputs = [], []
  for device in step_stats.dev_stats:
    for node in device.node_stats:
      if not (node.all_start_nanos or node.all_start_micros):
        continue
      (inputs if op_type(node) in input_op_types else ops).append(
          _interval(node))
  start_us, end_us = start * 1e6, end * 1e6
  busy = union(ops + inputs)
  if not busy:  # nothing traced: all of it was host work
    return Breakdown(end - start, 0.0, 0.0, end - start, end - start, 0.0,
                     0.0)
  computing = union(ops)
  compute = length(computing)
  input_only = length(subtract(union(inputs), computing))
  before = busy[0][0] - start_us
  after = end_us - busy[-1][1]
  between = (busy[-1][1] - busy[0][0]) - length(busy)
  seconds = [x / 1e6 for x in (input_only, compute, before + between + after,
                               before, between, after)]
  return Breakdown(end - start, *seconds)


def _ms(seconds):
  """'12.3 ms', or two decimals below 10 ms (an input wait of 0.04 ms)."""
  return ('%.1f ms' if abs(seconds) >= 0.01 else '%.2f ms') % (1e3 * seconds)


def describe(name, breakdown, untraced_step=None):
  """One line: 'train    step 95.1 ms = input 1.20 ms (1%) + compute 90.3
  ms (95%) + host 3.60 ms (4%: 0.30 before the ops, 1.10 between, 2.20
  after); untraced 94.0 ms' (the last part given untraced_step, seconds)."""
  input_, compute, host = breakdown.fractions()
  line = ('%-8s step %s = input %s (%.0f%%) + compute %s (%.0f%%) + host %s '
          '(%.0f%%: %s before the ops, %s between, %s after)' % (
              name, _ms(breakdown.step), _ms(breakdown.input), 100 * input_,
              _ms(breakdown.compute), 100 * compute, _ms(breakdown.host),
              100 * host, _ms(breakdown.before)[:-3],
              _ms(breakdown.between)[:-3], _ms(breakdown.after)[:-3]))
  if untraced_step is not None:
    line += '; untraced %s' % _ms(untraced_step)
  return line


OpCost = collections.namedtuple('OpCost', ['op_type', 'dtype', 'count',
                                           'seconds'])
OpCost.__doc__ = """The ops of one type and output dtype in a traced step.

  op_type: str, e.g. 'Conv2D'. dtype: str, the first output's ('bfloat16',
  'float32', ...; '' for an op without outputs). count: int, how many ran.
  seconds: float, their summed executor times (all_start .. all_end; ops
  that ran side by side each count in full).
"""


def node_costs(step_stats):
  """What each op of a traced step cost, by its name: conv2's filter
  gradient apart from its input gradient, say.

  Returns:
    A list of (node name, op type, first output's dtype name or '',
    seconds), the costliest first; a GPU's stream entries (they repeat its
    ops' kernels) and labels without an op type are left out.
  """
  nodes = []
  for device in step_stats.dev_stats:
    if '/stream:' in device.device or '/memcpy' in device.device:
      continue
    for node in device.node_stats:
      kind = op_type(node)
      if not kind:
        continue
      dtype = ''
      if node.output:
        code = node.output[0].tensor_description.dtype
        try:
          dtype = tf.as_dtype(code).name
        except TypeError:  # DT_INVALID: no dtype recorded
          dtype = 'dtype %d' % code
      nodes.append((node.node_name, kind, dtype,
                    node.all_end_rel_micros / 1e6))
  return sorted(nodes, key=lambda node: -node[3])


def op_costs(step_stats):
  """What each op type, in each output dtype, cost in a traced step: a list
  of OpCost, the costliest first."""
  totals = collections.defaultdict(lambda: [0, 0.0])
  for _, kind, dtype, seconds in node_costs(step_stats):
    totals[(kind, dtype)][0] += 1
    totals[(kind, dtype)][1] += seconds
  costs = [OpCost(kind, dtype, count, seconds)
           for (kind, dtype), (count, seconds) in totals.items()]
  return sorted(costs, key=lambda cost: -cost.seconds)


def describe_op_costs(name, costs, top=15):
  """Lines for the `top` costliest op types of a step, with their share of
  the step's summed op time."""
  total = sum(cost.seconds for cost in costs) or float('nan')
  lines = ['%s: op time by type and output dtype (%.1f ms of ops in all):'
           % (name, total * 1e3)]
  for cost in costs[:top]:
    lines.append('  %-28s %-9s %4d ops %8.2f ms %5.1f%%' % (
        cost.op_type, cost.dtype, cost.count, cost.seconds * 1e3,
        100 * cost.seconds / total))
  rest = costs[top:]
  if rest:
    lines.append('  %d other op types %8.2f ms %5.1f%%' % (
        len(rest), sum(c.seconds for c in rest) * 1e3,
        100 * sum(c.seconds for c in rest) / total))
  return lines


def describe_node_costs(name, nodes, top=12):
  """Lines for the `top` costliest ops of a step by name (`node_costs`),
  with their share of the step's summed op time."""
  total = sum(node[3] for node in nodes) or float('nan')
  lines = ['%s: the costliest ops by name:' % name]
  for node_name, kind, dtype, seconds in nodes[:top]:
    lines.append('  %8.2f ms %5.1f%%  %-9s %s (%s)' % (
        seconds * 1e3, 100 * seconds / total, dtype, node_name, kind))
  return lines
