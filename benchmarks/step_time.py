"""Splits a traced step's wall time into input, compute and host work, the
parts benchmarks/README.md defines ("Where a training step's time goes")."""

import collections
import re

import tensorflow.compat.v1 as tf

# The op types that take a batch from an input queue.
_INPUT_OP_TYPE = re.compile(r'QueueDequeue(Many|UpTo)?(V2)?$')
# A node's timeline label reads '[allocations] name = OpType(inputs)'; GPU
# stream entries carry a kernel name instead.
_OP_TYPE = re.compile(r' = (\w+)\(')

# Seconds: step = input + compute + host, host = before + between + after
# (the host time before the first op, between ops, after the last).
Breakdown = collections.namedtuple(
    'Breakdown', ['step', 'input', 'compute', 'host', 'before', 'between',
                  'after'])


def op_type(node_stats):
  """The op type in a NodeExecStats' timeline label, or ''."""
  match = _OP_TYPE.search(node_stats.timeline_label)
  return match.group(1) if match else ''


def union(intervals):
  """(sorted, disjoint [start, end] pairs covering intervals, their length)."""
  merged = []
  for start, end in sorted(intervals):
    if merged and start <= merged[-1][1]:
      merged[-1][1] = max(merged[-1][1], end)
    else:
      merged.append([start, end])
  return merged, sum(end - start for start, end in merged)


def split_step(step_stats, start, end):
  """The Breakdown of a traced run's StepStats (every device and stream);
  start, end: time.time() just before and after the run call."""
  ops, inputs = [], []
  for device in step_stats.dev_stats:
    for node in device.node_stats:
      if node.all_start_nanos:  # nanoseconds when recorded, else micros
        begin, span = node.all_start_nanos / 1e3, node.all_end_rel_nanos / 1e3
      elif node.all_start_micros:
        begin, span = node.all_start_micros, node.all_end_rel_micros
      else:
        continue
      is_input = _INPUT_OP_TYPE.match(op_type(node))
      (inputs if is_input else ops).append((begin, begin + span))
  busy, busy_length = union(ops + inputs)
  compute = union(ops)[1]
  before = busy[0][0] - start * 1e6
  after = end * 1e6 - busy[-1][1]
  between = (busy[-1][1] - busy[0][0]) - busy_length
  # Input only: what the dequeues add to the time the other ops cover.
  microseconds = (busy_length - compute, compute, before + between + after,
                  before, between, after)
  return Breakdown(end - start, *[x / 1e6 for x in microseconds])


def _ms(seconds):
  """'12.3 ms', or two decimals below 10 ms (an input wait of 0.04 ms)."""
  return ('%.1f ms' if abs(seconds) >= 0.01 else '%.2f ms') % (1e3 * seconds)


def describe(name, split, untraced_step):
  """One line: 'train    step 95.1 ms = input 1.20 ms (1%) + ...'."""
  share = [100 * part / split.step
           for part in (split.input, split.compute, split.host)]
  return ('%-8s step %s = input %s (%.0f%%) + compute %s (%.0f%%) + host %s '
          '(%.0f%%: %s before the ops, %s between, %s after); untraced %s' % (
              name, _ms(split.step), _ms(split.input), share[0],
              _ms(split.compute), share[1], _ms(split.host), share[2],
              _ms(split.before)[:-3], _ms(split.between)[:-3],
              _ms(split.after)[:-3], _ms(untraced_step)))


def node_costs(step_stats):
  """(node name, op type, first output's dtype name or '', seconds) of each
  op, the costliest first; not a GPU's stream entries (its ops again)."""
  nodes = []
  for device in step_stats.dev_stats:
    if '/stream:' in device.device or '/memcpy' in device.device:
      continue
    for node in device.node_stats:
      kind, dtype = op_type(node), ''
      if not kind:
        continue
      if node.output:
        code = node.output[0].tensor_description.dtype
        try:
          dtype = tf.as_dtype(code).name
        except TypeError:  # DT_INVALID: no dtype recorded
          dtype = 'dtype %d' % code
      nodes.append((node.node_name, kind, dtype,
                    node.all_end_rel_micros / 1e6))
  return sorted(nodes, key=lambda node: -node[3])


def cost_lines(name, step_stats, top_types=15, top_ops=12):
  """Lines of op time: the top_types costliest (op type, output dtype) pairs,
  then the top_ops costliest ops, each with its share of the summed op time
  (ops that ran side by side each count in full)."""
  nodes = node_costs(step_stats)
  total = sum(node[3] for node in nodes) or float('nan')
  counts, times = collections.Counter(), collections.Counter()
  for _, kind, dtype, seconds in nodes:
    counts[kind, dtype] += 1
    times[kind, dtype] += seconds
  types = times.most_common()
  lines = ['%s: op time by type and output dtype (%.1f ms of ops in all):'
           % (name, total * 1e3)]
  for (kind, dtype), seconds in types[:top_types]:
    lines.append('  %-28s %-9s %4d ops %8.2f ms %5.1f%%' % (
        kind, dtype, counts[kind, dtype], seconds * 1e3, 100 * seconds / total))
  if types[top_types:]:
    rest = sum(seconds for _, seconds in types[top_types:])
    lines.append('  %d other op types %8.2f ms %5.1f%%' % (
        len(types[top_types:]), rest * 1e3, 100 * rest / total))
  lines.append('%s: the costliest ops by name:' % name)
  for node_name, kind, dtype, seconds in nodes[:top_ops]:
    lines.append('  %8.2f ms %5.1f%%  %-9s %s (%s)' % (
        seconds * 1e3, 100 * seconds / total, dtype, node_name, kind))
  return lines
