"""Each worker's speed, measured while training runs.

:class:`SpeedMonitor` traces one training step in every ``every``
(``FULL_TRACE``; :func:`meshpar.runtime.step_trace.step_breakdown` gives
each worker's busy compute seconds) and times every step, so the cost of
tracing is measured, not assumed (:meth:`SpeedMonitor.overhead`).

A worker's speed is its work over its busy time. Its work on a mesh
(:func:`worker_work`) is the share of the model it computes: the layers whose
split dimension is laid out on a model axis are cut as the mesh cuts that
dimension (its per-layer weights, else the axis weights), the others are
replicated on every processor of a row, and the batch axis cuts all of it
(into whole samples). So a worker's measured busy time maps to a speed that
does not depend on the plan it ran under, and a re-plan from these speeds
converges.

>>> imbalance({0: 0.5, 1: 0.5}, {0: 2.0, 1: 1.0})
1.5
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow.compat.v1 as tf

from meshpar.core.splits import (integer_at_least, number_above, split_sizes,
                                 true_or_false)
from meshpar.planning.plan import parse_layout
from meshpar.runtime.client import parse_worker_device
from meshpar.training.step_trigger import StepTimeTrigger  # noqa: F401 (re-exported)

__all__ = ["worker_work", "speeds_from_busy", "imbalance", "SpeedMonitor", "StepTimeTrigger",
           "probe_ops", "probe_seconds", "probe_rounds", "PROBE_SIZE", "PROBE_ROUNDS",
           "PROBE_SECONDS", "PROBE_MAX_ROUNDS"]

# The probe: a chain of matmuls of PROBE_SIZE^2 matrices (33.6 MFLOP each),
# as many rounds as make it last PROBE_SECONDS on the fastest worker: several
# 10 ms CPU-quota periods, so that a throttled worker's holds fall inside it
# and are averaged (a fixed 16 rounds, 0.54 GFLOP, took ~20 ms on the host it
# was sized on, 5-6 ms in the last recorded re-balancing benchmark and 3.5 ms
# on this round's AVX-512 host, where a worker at 0.3 of a core often ran the
# whole probe inside one period's quota and measured at full speed).
# PROBE_ROUNDS is the first run's count, from which the count is sized.
PROBE_SIZE = 256
PROBE_ROUNDS = 16
PROBE_SECONDS = 0.02
PROBE_MAX_ROUNDS = 4096
_PROBE_SCOPE = "meshpar_speed_probe_"


def probe_ops(devices: Dict[int, str], size: int = PROBE_SIZE,
              rounds=PROBE_ROUNDS) -> Dict[int, "tf.Tensor"]:
    """Worker task -> a chain of ``rounds`` matmuls (an int or an int32 scalar
    tensor, e.g. a placeholder fed at each run) placed on its
    ``devices[task]`` (random input drawn on the worker: nothing to transfer,
    nothing for Grappler to fold). Fetched together, the workers run them at
    once, with no dependency between them, so each one's span is its own
    speed."""
    out = {}
    for task, device in sorted(devices.items()):
        with tf.device(device), tf.name_scope(f"{_PROBE_SCOPE}{task}"):
            x = tf.random.uniform([size, size], seed=task + 1)
            # the count copied onto the worker once: read from the client's device
            # inside the loop, it cost a cross-task receive every round
            limit = tf.identity(rounds)
            # x is uniform in [0, 1): y @ x * 2 / size keeps y's mean where it is,
            # so a long chain neither overflows nor flushes to zero
            _, y = tf.while_loop(lambda i, y: i < limit,
                                 lambda i, y: (i + 1, tf.linalg.matmul(y, x) * (2.0 / size)),
                                 (tf.constant(0), x), back_prop=False)
            out[task] = tf.reduce_sum(y)
    return out


def probe_rounds(seconds: Dict[int, float], rounds: int, target: float = PROBE_SECONDS,
                 limit: int = PROBE_MAX_ROUNDS) -> int:
    """Rounds that make the probe last ``target`` seconds on the fastest worker,
    from one run of ``rounds`` rounds that took ``seconds`` per worker (at
    least ``rounds``, at most ``limit``)."""
    fastest = min(seconds.values()) if seconds else 0.0
    if not fastest > 0:
        return int(min(max(rounds, 1), limit))
    return int(min(max(rounds, int(np.ceil(rounds * target / fastest))), limit))


def probe_seconds(step_stats) -> Dict[int, float]:
    """Worker task -> wall seconds from its probe's first op start to its last
    op end, from the trace of a run of :func:`probe_ops`."""
    spans: Dict[int, list] = {}
    for dev in step_stats.dev_stats:
        for node in dev.node_stats:
            name = node.node_name
            if not name.startswith(_PROBE_SCOPE):
                continue
            task = int(name[len(_PROBE_SCOPE):].split("/", 1)[0])
            start = node.all_start_micros / 1e6
            spans.setdefault(task, []).append((start, start + node.all_end_rel_micros / 1e6))
    return {t: max(b for _, b in v) - min(a for a, _ in v) for t, v in spans.items()}


def _axis_shares(mesh, name: str, size: int) -> np.ndarray:
    weights = mesh.split_weights.get(name) or [1.0] * size
    weights = np.asarray(weights, float)
    return weights / weights.sum()


def _dim_shares(mesh, name: str, size: int, dim: str, dim_size) -> np.ndarray:
    """The share of dimension ``dim`` (``dim_size`` long) each coordinate of mesh axis
    ``name`` (``size`` long) holds: its per-dimension weights, else the axis weights,
    else equal parts, cut into whole pieces by the split rule as the mesh cuts it."""
    weights = (mesh.dim_split_weights.get(dim) or mesh.split_weights.get(name)
               or [1.0] * size)
    try:
        return np.asarray(split_sizes(int(dim_size), weights, dim), float) / int(dim_size)
    except (TypeError, ValueError):  # no size, or too small to cut: the weights' quotas
        weights = np.asarray(weights, float)
        return weights / weights.sum()


def worker_work(mesh, description, layout: str, batch: Optional[int] = None) -> Dict[int, float]:
    """Worker task -> the fraction of one step's FLOPs it computes on ``mesh`` (a
    :class:`~meshpar.training.estimator.MeshSpec` on worker devices) laid out
    by ``layout`` (``"dim:axis;..."``), from the model's layer table
    ``description`` (a ModelDescription).

    A layer whose split dimension is laid out on a non-batch axis is cut along
    it as the mesh cuts that dimension: by its per-dimension weights (a plan's
    per-layer ratios) if it has them, else the axis weights, in whole pieces
    (:func:`~meshpar.core.splits.split_sizes`); along the other non-batch axes
    it is replicated. The batch axis cuts every layer: into the whole samples
    of a global ``batch`` when it is given (weights 0.9, 0.3 cut 5 samples 4/1,
    not 3.75/1.25), else by its weights.
    """
    names = {name for name, _ in mesh.axes}
    rules = {}
    for dim, axis in parse_layout(layout):  # as Mesh-TF: a dimension's first rule on this mesh
        if axis in names:
            rules.setdefault(dim, axis)
    sizes = [size for _, size in mesh.axes]
    coords = np.array([np.unravel_index(p, sizes) for p in range(len(mesh.devices))],
                      int).reshape(len(mesh.devices), len(sizes))
    work = np.zeros(len(mesh.devices))
    for layer in description.layers:
        factor = np.ones(len(mesh.devices))
        axis = rules.get(layer.split_dim) if layer.split_dim else None
        if axis is not None and axis != "batch":
            i = [name for name, _ in mesh.axes].index(axis)
            factor = _dim_shares(mesh, axis, sizes[i], layer.split_dim,
                                 layer.split_size)[coords[:, i]]
        work += layer.flops * factor
    total = sum(layer.flops for layer in description.layers)
    work = work / total if total else np.ones(len(mesh.devices))
    for i, (name, size) in enumerate(mesh.axes):
        if name == "batch":
            shares = (_axis_shares(mesh, name, size) if batch is None else
                      _dim_shares(mesh, name, size, description.batch_dim, batch))
            work = work * shares[coords[:, i]]
    out = {}
    for pnum, device in enumerate(mesh.devices):
        task, _ = parse_worker_device(device)
        if task is None:
            raise ValueError(f"device {device!r} is not a worker task: re-balancing needs "
                             "a cluster (/job:worker/task:i)")
        out[task] = out.get(task, 0.0) + float(work[pnum])
    return out


def speeds_from_busy(work: Dict[int, float], busy: Dict[int, float]) -> Dict[int, float]:
    """Worker task -> speed (work per busy second), scaled so the fastest is 1."""
    raw = {t: work[t] / busy[t] for t in work if busy.get(t, 0.0) > 0.0}
    if not raw:
        raise ValueError("no worker was busy in the traced step")
    top = max(raw.values())
    return {t: v / top for t, v in raw.items()}


def imbalance(work: Dict[int, float], speeds: Dict[int, float]) -> float:
    """Predicted step time of ``work`` at ``speeds`` (the slowest worker's
    work / speed) over the balanced step (total work / total speed): 1.0 is a
    balanced plan, 1.5 one whose step could be 1.5x shorter."""
    step = max(work[t] / speeds[t] for t in work)
    balanced = sum(work.values()) / sum(speeds[t] for t in work)
    return float(step / balanced)


class SpeedMonitor(tf.estimator.SessionRunHook):
    """Times every training step and traces one in ``every`` (counted in this
    segment, the first after ``warmup`` steps) to measure each worker's busy
    compute time.

    ``on_sample(global_step, busy)`` is called after each traced step with
    ``{task: busy compute seconds}``; when it returns True the training stops
    after that step (its checkpoint is written by the estimator's saver).
    ``on_step(global_step)``, if given, is called after every step; True stops
    too. ``trace=False`` times steps only (no tracing).

    ``trigger``: a :class:`StepTimeTrigger`; when it fires, the next ``burst``
    steps are all sampled (so a change is measured ``burst`` times within a
    few steps, while the regular samples stay one in ``every``).

    ``budget``: the largest share of the segment's time that measuring may
    take (:meth:`overhead`'s account); a regular sample that falls due while
    the share is above it waits for the first step at which it is not, and
    the next one is due ``every`` steps after it. A sample costs about the
    same time whatever the step, so on short steps this spaces the samples
    out and on long ones it changes nothing. None: no limit. Trigger bursts
    are not held back.
    """

    def __init__(self, every: int, on_sample: Callable, on_step: Optional[Callable] = None,
                 warmup: int = 3, trace: bool = True, probe: Optional[Dict[int, str]] = None,
                 trigger: Optional[StepTimeTrigger] = None, burst: int = 3,
                 budget: Optional[float] = None):
        # counts as given (every=2.5 sampled one step in 2), trace a switch (trace="no" traced)
        self.every = integer_at_least(every, "re-balancing samples every N steps: N")
        self.warmup = integer_at_least(warmup, "SpeedMonitor warmup", 0)
        self.trace = true_or_false(trace, "SpeedMonitor trace")
        if budget is not None and not 0.0 < number_above(budget, "the measuring budget") <= 1.0:
            raise ValueError(f"the measuring budget must be a share in (0, 1], got {budget!r}")
        if not callable(on_sample) or not (on_step is None or callable(on_step)):
            raise TypeError(f"SpeedMonitor on_sample (and on_step, if given) must be "
                            f"callable, got {on_sample!r}, {on_step!r}")
        self.budget = None if budget is None else float(budget)
        self._due = self.every  # the count after warm-up at which a sample is due
        self.waited_steps = 0  # steps at which a due sample waited for the budget
        self.setup_seconds = 0.0  # the probes' set-up and sizing runs at session start
        self.trigger, self.burst = trigger, integer_at_least(burst, "SpeedMonitor burst")
        self._burst_left = 0
        self.triggers = []  # global steps at which the step time moved
        self.probe_devices = dict(probe) if probe else None
        self._probes = None
        self._rounds = None  # the placeholder of the probes' round count ...
        self.probe_rounds = PROBE_ROUNDS  # ... and the count fed to it
        self.on_sample, self.on_step = on_sample, on_step
        self.steps = []  # (global step after the step, end time, seconds, traced)
        self._seen = 0
        self._first = 0
        self._step = None
        self._started = None
        self._traced = False
        self.probe_time = 0.0  # seconds spent running probes, outside the steps

    def begin(self):
        """Find the global step (a new segment starts counting from 0); add the
        probes to the graph when measuring by probe."""
        self._step = tf.train.get_global_step()
        self._seen = 0
        self._due = self.every
        if self.probe_devices:
            self._rounds = tf.placeholder_with_default(PROBE_ROUNDS, [], name="probe_rounds")
            self._probes = probe_ops(self.probe_devices, rounds=self._rounds)

    def _traces_now(self) -> bool:
        k = self._seen - self.warmup
        if not self.trace or k <= 0:
            return False
        if self._burst_left > 0:
            return True
        if k < self._due:
            return False
        share = self._spent()[0] if self.budget is not None else None
        if share is not None and share > self.budget:
            self.waited_steps += 1
            return False
        self._due = k + self.every
        return True

    def after_create_session(self, session, coord):
        """The step this segment starts from (a variable read in the training
        step itself is not ordered against the step's own increment); the
        probes run once, so that their first run's set-up (partitioning them
        onto the workers) is session set-up, not the cost of a sample, then
        once more, traced, to size their round count (:func:`probe_rounds`)."""
        self._first = int(session.run(self._step))
        if self._probes is not None and self.trace:
            started = time.perf_counter()
            session.run(list(self._probes.values()))
            metadata = tf.RunMetadata()
            session.run(list(self._probes.values()), run_metadata=metadata,
                        options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
            self.probe_rounds = probe_rounds(probe_seconds(metadata.step_stats), PROBE_ROUNDS)
            self.setup_seconds += time.perf_counter() - started

    def before_run(self, run_context):
        """Ask for a full trace on a sampled step."""
        self._seen += 1
        self._traced = self._traces_now()
        self._started = time.perf_counter()
        if not self._traced or self._probes is not None:
            return None
        return tf.train.SessionRunArgs(
            None, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))

    def after_run(self, run_context, run_values):
        """Record the step's time; on a traced step, the workers' busy times."""
        from meshpar.runtime.step_trace import step_breakdown

        end = time.perf_counter()
        seconds = end - self._started
        step = self._first + self._seen
        self.steps.append((step, end, seconds, self._traced))
        if self._traced:
            self._burst_left = max(0, self._burst_left - 1)
        elif (self.trace and self.trigger is not None and self._seen > self.warmup
              and self.trigger.observe(seconds)):
            self._burst_left = self.burst
            self.triggers.append(step)
        stop = False
        if self._traced and self._probes is not None:
            # after the step (its time is recorded above): the probes alone
            metadata = tf.RunMetadata()
            run_context.session.run(
                list(self._probes.values()), run_metadata=metadata,
                feed_dict={self._rounds: self.probe_rounds},
                options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
            self.probe_time += time.perf_counter() - end
            stop = bool(self.on_sample(step, probe_seconds(metadata.step_stats)))
        elif self._traced and run_values.run_metadata is not None:
            parts = step_breakdown(run_values.run_metadata.step_stats, seconds)
            busy = {int(task.split(":")[1]): p["compute"] for task, p in parts.items()
                    if task.startswith("worker:")}
            stop = bool(self.on_sample(step, busy))
        if self.on_step is not None and self.on_step(step):
            stop = True
        if stop:
            run_context.request_stop()

    def _spent(self) -> tuple:
        """(share of the time spent measuring or None, median untraced step or
        None, traced step times): see :meth:`overhead`."""
        plain = [s for _, _, s, traced in self.steps if not traced]
        traced = [s for _, _, s, t in self.steps if t]
        total = sum(s for _, _, s, _ in self.steps) + self.probe_time
        if not plain or not traced or total <= 0:
            return (0.0 if not traced else None), None, traced
        median = float(np.median(plain))
        extra = sum(max(0.0, s - median) for s in traced) + self.probe_time
        return extra / total, median, traced

    def overhead(self) -> dict:
        """What measuring cost: each traced step's time over the median untraced
        step's, summed, plus the time spent running probes, as a share of all
        the steps' time (probes included)."""
        share, median, traced = self._spent()
        out = {"traced_steps": len(traced), "overhead_fraction": None,
               "waited_steps": self.waited_steps, "setup_seconds": self.setup_seconds}
        if median is not None:
            out.update(median_step_seconds=median, overhead_fraction=share,
                       traced_step_seconds_mean=float(np.mean(traced)))
        return out
