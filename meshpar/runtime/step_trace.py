"""Where one training step's time goes, per device, from a TensorFlow trace.

A ``FULL_TRACE`` step (``RunMetadata.step_stats``) lists every op each device
ran with its start and duration. Per device this module merges the op
intervals (ops overlap under inter-op parallelism) into:

* ``compute``: time some op other than a transfer was running;
* ``communication``: time only receives/sends were running (waiting on data
  from another device: a gathered activation, an all-reduce chunk);
* ``idle``: the rest of the step's wall time (waiting on the other devices,
  the client's round trip and the framework's scheduling).

The client process's own ops (job ``client``: the input pipeline, master
variables, the loss fetch) are reported the same way under ``client``.

>>> merged_length([(0, 4), (2, 6), (8, 9)])
7.0
"""
from __future__ import annotations

import re
from typing import Iterable, List, Tuple

_TRANSFER = re.compile(r"(_Recv|_Send|_HostRecv|_HostSend|RecvTensor)")
_TASK = re.compile(r"/job:([a-z_]+)(?:/replica:\d+)?/task:(\d+)")


def merged_length(intervals: Iterable[Tuple[float, float]]) -> float:
    """Total length covered by ``(start, end)`` intervals (overlaps counted once)."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _merge(intervals) -> List[Tuple[float, float]]:
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract_length(intervals, minus) -> float:
    """Length of the union of ``intervals`` not covered by the union of ``minus``."""
    keep, cut = _merge(intervals), _merge(minus)
    total = 0.0
    for a, b in keep:
        covered = sum(max(0.0, min(b, d) - max(a, c)) for c, d in cut)
        total += (b - a) - covered
    return total


def task_of(device: str) -> str:
    """``/job:worker/replica:0/task:1/device:CPU:0`` -> ``"worker:1"`` (``"local"`` if no job)."""
    match = _TASK.search(device)
    return f"{match.group(1)}:{match.group(2)}" if match else "local"


def step_breakdown(step_stats, wall_seconds: float) -> dict:
    """Per task (``"worker:0"``, ``"client:0"``, ...): compute, communication and idle
    seconds of one traced step whose wall time was ``wall_seconds``.

    ``step_stats`` is ``RunMetadata.step_stats`` (a proto, or anything with
    ``dev_stats[].device`` and ``node_stats[]`` of ``node_name``,
    ``timeline_label``, ``all_start_micros``, ``all_end_rel_micros``).
    """
    ops, transfers = {}, {}
    for dev in step_stats.dev_stats:
        if "/device:" in dev.device and "stream" in dev.device.lower():
            continue  # GPU stream views repeat the device's kernels
        task = task_of(dev.device)
        for node in dev.node_stats:
            start = node.all_start_micros / 1e6
            span = (start, start + node.all_end_rel_micros / 1e6)
            label = f"{node.node_name} {node.timeline_label}"
            ops.setdefault(task, []).append(span)
            if _TRANSFER.search(label):
                transfers.setdefault(task, []).append(span)
    out = {}
    for task, spans in sorted(ops.items()):
        busy = merged_length(spans)
        moving = transfers.get(task, [])
        compute = _subtract_length(spans, moving) if moving else busy
        out[task] = {"compute": compute, "communication": busy - compute,
                     "idle": max(0.0, wall_seconds - busy)}
    return out


def format_breakdown(breakdown: dict, wall_seconds: float) -> str:
    """A small table: per task, compute / communication / idle in ms and share of the step."""
    lines = [f"{'task':<10} {'compute ms':>10} {'comm ms':>8} {'idle ms':>8}  of step "
             f"{wall_seconds * 1e3:.1f} ms"]
    for task, parts in breakdown.items():
        shares = "/".join(f"{parts[k] / wall_seconds:.0%}" for k in ("compute", "communication",
                                                                     "idle"))
        lines.append(f"{task:<10} {parts['compute'] * 1e3:>10.1f} "
                     f"{parts['communication'] * 1e3:>8.1f} {parts['idle'] * 1e3:>8.1f}  {shares}")
    return "\n".join(lines)
