"""Re-balancing and elastic training on a cluster of workers.

:func:`train_rebalancing` trains in segments. During a segment a
:class:`~meshpar.training.live_speeds.SpeedMonitor` traces one step in every
``every`` and turns each worker's busy time into its live speed. When the
plan's predicted step at those speeds is more than ``threshold`` longer than
a balanced one at the median speeds of the last ``patience`` samples, the planner
(:func:`meshpar.planning.planners.plan`, on a ClusterSpec of the measured
speeds) makes a new plan; the segment stops after that step, its checkpoint
is written, and the next segment is built on the new mesh and continues from
the same step and the same place in the data stream (the input function
starts at the checkpoint's step).

With ``elastic``, a worker that stops answering ends the segment (its
training thread, blocked in TensorFlow on the dead worker, is abandoned) and
the next one is planned on the workers that remain, from the last
checkpoint: steps after it are run again, none is skipped. A lost worker that
answers again is taken back at the next sample.

Every re-plan is logged in one line and returned as a record (``replans``);
:func:`schedule_from_replans` turns those records into a schedule that
replays the same meshes at the same steps without measuring, which must give
bit-identical weights.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

import numpy as np

from meshpar.runtime.client import ClusterFailure, unreachable_reason

# TensorFlow is imported only when training starts: the options are checked
# (and a bad flag refused) without it.
if TYPE_CHECKING:
    from meshpar.training.estimator import MeshSpec

__all__ = ["RebalanceOptions", "train_rebalancing", "replan", "scaled_profile",
           "schedule_from_replans",
           "mesh_record"]


# How a worker's live speed is measured: "trace": its busy op time in a traced
# training step, against its share of the model (any device kinds); "probe":
# the time of the same fixed matmul chain run on every worker at once after
# the step (workers of one device kind; a CPU quota's holds fall inside it).
# "auto": probe when all the mesh's devices are of one type (all CPU, or all
# GPU), trace otherwise.
MEASURES = ("auto", "trace", "probe")


@dataclasses.dataclass(frozen=True)
class RebalanceOptions:
    """How a run re-balances.

    ``rebalance``: measure and re-plan on drift; ``every``: measure after one
    step in N; ``trigger``: also measure ``patience`` steps in a row as soon as
    the median step time moves by more than this fraction (0: off; see
    :class:`~meshpar.training.live_speeds.StepTimeTrigger`); ``threshold``:
    re-plan when the plan's step at the measured speeds is more than this
    fraction longer than a balanced step (and the new plan is
    predicted to gain at least as much); ``patience``: at the median speeds of
    that many last samples; ``method``: the planner (None: the GA when a
    ``profile`` is given, it prices the profile's measured work of splitting
    per worker; else proportional to the live speeds); ``elastic``: survive lost workers;
    ``poll_seconds``: how often the workers are probed; ``profile``: the workers'
    measured ClusterSpec, to re-plan with its per-step split cost and the
    option of leaving a worker out (:func:`replan`); ``measure``: ``"auto"``,
    ``"trace"`` or ``"probe"`` (see ``MEASURES``); ``budget``: the largest
    share of a segment's time that measuring may take (a regular sample
    waits while it is above; :class:`~meshpar.training.live_speeds.SpeedMonitor`;
    None: no limit). Off by default: a sample costs about the same time
    whatever the step, and on short steps a budget spaces the samples so far
    apart that a slowdown goes unseen for tens of steps (docs/rebalance.md).
    """

    rebalance: bool = True
    # One sample in 50 steps plus the step-time trigger: on steady runs measuring
    # cost 1.2-1.6% of the run (one in 10: 2.1-4.6%), and a drop re-planned as
    # soon (steps 30-33 after a drop at 20; docs/rebalance.md).
    every: int = 50
    trigger: float = 0.25
    threshold: float = 0.10
    patience: int = 3
    method: Optional[str] = None
    elastic: bool = False
    poll_seconds: float = 1.0
    profile: Optional[object] = None
    measure: str = "auto"
    budget: Optional[float] = None

    def __post_init__(self):
        from meshpar.core.splits import integer_at_least, true_or_false
        from meshpar.planning.cluster import ClusterSpec
        from meshpar.planning.planners import METHODS

        # switches True or False (elastic="no" was on), counts integers (every=True was 1
        # step), shares numbers (trigger "0.2" was float()'s)
        for name in ("rebalance", "elastic"):
            true_or_false(getattr(self, name), f"RebalanceOptions.{name}")
        integer_at_least(self.every, "rebalance every")
        integer_at_least(self.patience, "rebalance patience")
        for name in ("trigger", "threshold", "poll_seconds") + ("budget",) * (
                self.budget is not None):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"rebalance {name} must be a number, got {value!r}")
        if not 0.0 <= float(self.trigger) < 1.0:
            raise ValueError(f"rebalance trigger must be in [0, 1), got {self.trigger!r}")
        if not 0.0 < float(self.threshold) <= 1.0:
            raise ValueError(f"rebalance threshold must be in (0, 1], got {self.threshold!r}")
        if self.method is not None and self.method not in METHODS:
            raise ValueError(f"rebalance method must be one of {', '.join(METHODS)}, "
                             f"got {self.method!r}")
        if self.measure not in MEASURES:
            raise ValueError(f"rebalance measure must be one of {', '.join(MEASURES)}, "
                             f"got {self.measure!r}")
        if self.budget is not None and not 0.0 < float(self.budget) <= 1.0:
            raise ValueError(f"rebalance budget must be a share in (0, 1], got {self.budget!r}")
        if not 0 < self.poll_seconds < math.inf:  # inf: thread.join's OverflowError
            raise ValueError(f"poll_seconds must be finite and > 0, got {self.poll_seconds!r}")
        if self.profile is not None and not isinstance(self.profile, ClusterSpec):
            hint = "; for a profile file, ClusterSpec.load(path)" * isinstance(
                self.profile, (str, os.PathLike))  # was "'str' object has no attribute ..."
            raise TypeError(f"rebalance profile must be a ClusterSpec (the workers' measured "
                            f"profile), got {self.profile!r}{hint}")

    @property
    def planner(self) -> str:
        """The re-plans' planner: ``method``, else ``"ga"`` with a profile and
        ``"proportional"`` without (measured, docs/rebalance.md: after a drop
        to a third of a core the GA on the profile re-planned to 0.97 of the
        new ideal where the proportional split reached 0.84)."""
        return self.method or ("ga" if self.profile is not None else "proportional")


def mesh_record(mesh: MeshSpec, layout: str) -> dict:
    """A mesh as JSON: shape, layout, devices and weights (what a replay rebuilds)."""
    return {"mesh_shape": mesh.mesh_shape, "layout": layout, "devices": list(mesh.devices),
            "split_weights": mesh.split_weights, "dim_split_weights": mesh.dim_split_weights}


def schedule_from_replans(replans: Sequence[dict]) -> List[tuple]:
    """``[(step, MeshSpec)]`` of a run's ``replans`` records: the meshes it switched
    to and the steps it switched at (ValueError on a malformed record)."""
    from meshpar.training.estimator import MeshSpec

    out = []
    for i, rec in enumerate(replans):
        try:
            new = rec["new"]
            mesh = MeshSpec(new["mesh_shape"], new["layout"], new["devices"],
                            new["split_weights"], new["dim_split_weights"])
            step = rec["step"]
        except (KeyError, TypeError) as err:
            raise ValueError(f"replans record {i}: missing or malformed {err}") from None
        try:
            step = int(step)
        except (TypeError, ValueError, OverflowError):  # None, 'x', NaN, infinity
            step = -1
        if step < 0 or step != rec["step"]:
            raise ValueError(f"replans record {i}: step must be a whole number >= 0, got "
                             f"{rec['step']!r}")
        out.append((step, mesh))
    return sorted(out, key=lambda item: item[0])


def _probes(measure: str, mesh: MeshSpec) -> bool:
    """Whether a segment on ``mesh`` measures by probe (``measure`` "auto": all
    its devices of one type)."""
    if measure != "auto":
        return measure == "probe"
    from meshpar.runtime.client import parse_worker_device

    kinds = {(parse_worker_device(d)[1] or "CPU").split(":")[0].upper() for d in mesh.devices}
    return len(kinds) == 1


def _worker_devices(mesh: MeshSpec) -> Dict[int, str]:
    """Worker task -> its first device on ``mesh`` (where its probe runs)."""
    from meshpar.runtime.client import parse_worker_device

    out: Dict[int, str] = {}
    for device in mesh.devices:
        out.setdefault(parse_worker_device(device)[0], device)
    return out


def _task_devices(mesh: MeshSpec) -> List[int]:
    return sorted(_worker_devices(mesh))


def replan(description, speeds: Dict[int, float], batch: int, method: str = "proportional",
           shape: Optional[tuple] = None, seed: int = 0, profile=None):
    """A :class:`~meshpar.planning.plan.Plan` for the worker tasks in ``speeds``
    (task -> relative speed) from the planner ``method``; ``shape``: keep this
    ``(rows, columns)`` mesh shape, else the planner picks one.

    ``profile``: the workers' measured :class:`~meshpar.planning.cluster.ClusterSpec`
    (``meshpar profile --cluster --model``). Each task's profile is scaled to
    its live speed relative to the others, the profile's measured per-step
    cost of splitting is kept, and the planner may leave workers out
    (``subsets``): a worker that no longer pays for its synchronisation is
    dropped. Without it, every task in ``speeds`` gets work at a constant speed.
    """
    from meshpar.planning import planners
    from meshpar.planning.cluster import REFERENCE_FLOPS, ClusterSpec, DeviceSpec

    if profile is not None:
        return planners.plan(description, scaled_profile(profile, speeds, description, batch),
                             batch, method=method, seed=seed, subsets=True)
    devices = tuple(DeviceSpec(name=f"w{t}", device=f"/job:worker/task:{t}/device:CPU:0",
                               profile=((1.0, float(s) * REFERENCE_FLOPS),))
                    for t, s in sorted(speeds.items()))
    return planners.plan(description, ClusterSpec(devices), batch, method=method,
                         shapes=[shape] if shape else None, seed=seed)


def scaled_profile(profile, speeds: Dict[int, float], description=None, batch: int = 0):
    """``profile`` restricted to the tasks in ``speeds``, each device's speeds scaled so
    the tasks' relative speeds are ``speeds``.

    Live speeds are relative, so one absolute level must be assumed: the task
    that slowed least against its profile keeps its profile (machines slow
    down under load; they do not outrun their own profile).

    The profile's measured cost of splitting is kept as calibrated on the
    profile itself (``extra["split_overhead_flops"]``, work per device and
    step, and ``extra["sync_jitter"]``; needs the model ``description`` and
    ``batch``): the splits it was derived from ran at the profiled speeds,
    not the live ones, and the cost model prices that work at each worker's
    live speed. The profile's worker ``addresses`` stay with their devices (a
    plan records each device's, ``extra["worker_addresses"]``).

    ValueError when a task is not in the profile.
    """
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel
    from meshpar.runtime.client import parse_worker_device

    by_task = {}
    for dev in profile.devices:
        task, _ = parse_worker_device(dev.device)
        if task is not None:
            by_task.setdefault(task, dev)
    missing = sorted(t for t in speeds if t not in by_task)
    if missing:
        raise ValueError(f"the re-balancing profile has no device of worker task(s) "
                         f"{', '.join(map(str, missing))}: profile the cluster the run uses")
    top = {t: max(f for _, f in by_task[t].profile) for t in speeds}
    scale = {t: float(speeds[t]) / (top[t] / max(top.values())) for t in speeds}
    norm = max(scale.values())
    devices = tuple(dataclasses.replace(
        by_task[t], profile=tuple((size, f * scale[t] / norm) for size, f in by_task[t].profile))
        for t in sorted(speeds))
    extra = dict(profile.extra or {})
    # one per device, in the devices' order (here: by task), as planners.plan reads them
    addresses = profile.addresses_of([by_task[t] for t in sorted(speeds)])
    if addresses is not None:
        extra["addresses"] = addresses
    if extra.get("alone_profile"):  # the speeds alone scale with the device's
        extra["alone_profile"] = {
            by_task[t].device: tuple((size, f * scale[t] / norm) for size, f in points)
            for t in sorted(speeds) if (points := profile.alone_points(by_task[t].device))}
    if description is not None and batch:
        extra.update(CostModel(description, profile, batch).calibration())
    return ClusterSpec(devices, bandwidth=profile.bandwidth, latency=profile.latency,
                       extra=extra)


def check_profile(profile, description, batch: int, tasks: Sequence[int]) -> None:
    """ValueError (one line) unless ``profile`` can re-plan this run: measured on
    this model (when it is a model-step profile) and naming every worker task
    of the mesh. Checked when the run starts, not at its first re-plan."""
    # the same scaling a re-plan does: refuses missing tasks, and its cost
    # model refuses a profile of another model
    scaled_profile(profile, {t: 1.0 for t in tasks}, description, batch)


def _shape_of(mesh: MeshSpec) -> tuple:
    axes = dict(mesh.axes)
    rows = axes.get("batch", 1)
    return rows, mesh.size // rows


class _Run:
    """State of one re-balancing run: the current mesh, its workers, the known
    speeds, the samples and the re-plans."""

    def __init__(self, mesh, client, description, batch, options, layout_of, log):
        self.mesh, self.client, self.description = mesh, client, description
        from meshpar.training.live_speeds import worker_work

        self.batch, self.options, self.layout_of, self.log = batch, options, layout_of, log
        self.tasks = _task_devices(mesh)
        self.work = worker_work(mesh, description, layout_of(mesh), batch)
        total = max(self.work.values())
        self.speeds = {t: w / total for t, w in self.work.items()}  # the plan's premise
        self.lost: List[int] = []
        self.replans: List[dict] = []
        self.samples: List[dict] = []
        self.pending: Optional[dict] = None
        self.streak: List[Dict[int, float]] = []
        self.probing = False  # set per segment by train_rebalancing

    # ------------------------------------------------------------- deciding
    def on_sample(self, step: int, busy: Dict[int, float]) -> bool:
        """A traced step: update the live speeds; True when a re-plan is due."""
        from meshpar.training.live_speeds import imbalance, speeds_from_busy

        busy = {t: b for t, b in busy.items() if t in self.work}
        if len(busy) < len(self.work):
            return self.on_step(step, probe=True)
        if self.probing:  # the same work on every worker
            speeds = speeds_from_busy({t: 1.0 for t in busy}, busy)
        else:
            speeds = speeds_from_busy(self.work, busy)
        skew = imbalance(self.work, speeds)
        self.samples.append({"step": step, "busy_seconds": busy, "speeds": speeds,
                             "imbalance": skew})
        # Sustained: the median speeds of the last `patience` samples (one odd
        # sample, e.g. a quota period that fell between two ops, does not decide).
        self.streak = (self.streak + [speeds])[-self.options.patience:]
        if len(self.streak) == self.options.patience:
            live = {t: float(np.median([s[t] for s in self.streak])) for t in self.work}
            if imbalance(self.work, live) - 1.0 > self.options.threshold and self._propose(
                    step, "drift", live):
                return True
        return self.on_step(step, probe=True)

    def on_step(self, step: int, probe: bool = False) -> bool:
        """Every step: with ``elastic``, every ``every`` steps, probe the lost workers."""
        if not self.lost or not (probe or step % self.options.every == 0):
            return False
        back = [t for t in self.lost if unreachable_reason(self.client.addresses[t], 1.0) is None]
        if not back:
            return False
        speeds = dict(self.speeds)
        return self._propose(step, "worker back", speeds, back=back)

    def _propose(self, step, reason, speeds, back=(), lost=()) -> bool:
        """Plan on ``speeds``; keep it as pending if it is worth a rebuild."""
        from meshpar.training.estimator import MeshSpec
        from meshpar.training.live_speeds import worker_work

        profile = self.options.profile
        plan = replan(self.description, speeds, self.batch, self.options.planner,
                      None if back or lost or profile else _shape_of(self.mesh),
                      profile=profile)
        devices = self.client.place(plan.devices, keep_device_type=False)
        new = MeshSpec.from_plan(plan, devices)
        new_work = worker_work(new, self.description, self.layout_of(new), self.batch)
        gain = None
        if not back and not lost:
            old_t = max(self.work[t] / speeds[t] for t in self.work)
            new_t = max(new_work[t] / speeds[t] for t in new_work)
            gain = old_t / new_t - 1.0
            if gain < self.options.threshold:
                return False
        self.speeds.update(speeds)
        self.pending = {"step": step, "reason": reason, "mesh": new, "work": new_work,
                        "speeds": {t: speeds[t] for t in sorted(speeds)},
                        "predicted_gain": gain, "back": list(back), "lost": list(lost),
                        "plan_predicted_step_seconds": plan.predicted_step_seconds}
        return True

    # ------------------------------------------------------------- applying
    def apply(self, step: int) -> None:
        """Switch to the pending plan at ``step``: log one line, keep a record."""
        p, self.pending = self.pending, None
        old = mesh_record(self.mesh, self.layout_of(self.mesh))
        new = mesh_record(p["mesh"], self.layout_of(p["mesh"]))
        record = {"step": int(step), "reason": p["reason"], "old": old, "new": new,
                  "measured_speeds": {str(t): v for t, v in p["speeds"].items()},
                  "predicted_gain": p["predicted_gain"], "lost_workers": p["lost"],
                  "workers_back": p["back"], "sampled_at_step": p["step"],
                  "plan_predicted_step_seconds": p["plan_predicted_step_seconds"],
                  "time": time.time()}
        self.replans.append(record)
        self.mesh, self.work, self.streak = p["mesh"], p["work"], []
        self.tasks = _task_devices(self.mesh)
        self.lost = [t for t in self.lost if t not in p["back"]] + list(p["lost"])
        gain = "n/a" if p["predicted_gain"] is None else f"{p['predicted_gain']:+.0%}"
        self.log(f"re-plan at step {step} ({p['reason']}): {_split_text(old)} -> "
                 f"{_split_text(new)}, predicted gain {gain}")

    def on_lost(self, down: Sequence[int], step: int) -> None:
        """Workers ``down`` stopped answering: plan on the others from ``step``."""
        remaining = {t: self.speeds[t] for t in self.tasks if t not in down}
        if not remaining:
            raise ClusterFailure("every worker of the mesh stopped answering")
        self._propose(step, "lost worker", remaining, lost=down)
        self.apply(step)


def _split_text(record: dict) -> str:
    """A mesh record for the re-plan log line: shape, worker tasks, and each split's
    shares, the axis weights then a plan's per-dimension weights (per-layer ratios,
    which override the axis weights of their dimensions)."""
    tasks = [d.split("/task:")[1].split("/")[0] for d in record["devices"]]

    def shares(table) -> str:
        return ";".join(f"{name}=" + "/".join(f"{w / sum(ws):.2f}" for w in ws)
                        for name, ws in (table or {}).items() if len(ws) > 1)

    weights = shares(record["split_weights"]) or "even"
    per_dim = shares(record.get("dim_split_weights"))
    if per_dim:
        weights += f"; per dimension {per_dim}"
    return f"{record['mesh_shape']} on tasks {','.join(tasks)} [{weights}]"


def _run_segment(train: Callable, client, tasks: Sequence[int], poll: float):
    """Run ``train()`` in a thread while probing the segment's workers.

    Returns ``(None, thread)`` when it ended, ``(down tasks, thread)`` when a
    worker stopped answering (the thread may stay blocked in TensorFlow and is
    abandoned); an error that is not a lost worker is raised.
    """
    box = {}

    def target():
        try:
            box["result"] = train()
        except BaseException as err:  # handed to the main thread below
            box["error"] = err

    thread = threading.Thread(target=target, name="meshpar-train-segment", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll)
        down = _down(client, tasks, poll) if thread.is_alive() else []
        if down:
            return down, thread
    if "error" in box:
        down = _down(client, tasks, poll)
        if down:
            return down, thread
        raise box["error"]
    return None, thread


def _down(client, tasks, timeout) -> list:
    if client is None:
        return []
    return [t for t, _ in client.down_workers(timeout=timeout) if t in tasks]


def train_rebalancing(build: Callable, train_fn: Callable, max_steps: int, mesh: MeshSpec,
                      client, description, batch: int, model_dir: str,
                      options: RebalanceOptions = RebalanceOptions(), hooks: Sequence = (),
                      layout_of: Optional[Callable] = None, schedule: Sequence[tuple] = (),
                      log: Callable = print) -> dict:
    """Train to ``max_steps``, re-planning on drift (and lost workers with
    ``options.elastic``); see the module docstring.

    ``build(mesh, tasks)`` returns an Estimator on ``mesh`` in ``model_dir``
    whose sessions use only worker ``tasks``; ``client`` is the
    :class:`~meshpar.runtime.client.ClusterClient`; ``description`` the model's
    layer table; ``layout_of(mesh)`` its layout string (default
    ``mesh.layout``). ``schedule``: ``[(step, MeshSpec)]`` to switch to at
    those steps instead of measuring (a replay; see
    :func:`schedule_from_replans`). Returns ``{"replans", "samples",
    "monitor", "abandoned_threads", "step_times"}``.
    """
    from meshpar.training.inputs import checkpoint_step
    from meshpar.training.live_speeds import SpeedMonitor, StepTimeTrigger

    if client is None:
        raise ValueError("re-balancing and elastic training need a cluster (--cluster)")
    if options.profile is not None:
        check_profile(options.profile, description, batch, _task_devices(mesh))
    layout_of = layout_of or (lambda m: m.layout)
    run = _Run(mesh, client, description, batch, options, layout_of, log)
    pending = sorted(schedule, key=lambda item: item[0])
    monitors, abandoned = [], []
    step = checkpoint_step(model_dir)
    while step < max_steps:
        # the latest re-plan due by now only: a resumed run (or re-plans recorded at
        # one step) had switched through each earlier one at this step in turn, and
        # recorded meshes no step trained on
        due = [forced for at, forced in pending if at <= step]
        if due:
            pending = pending[len(due):]
            run.pending = _forced(run, due[-1], step)
            run.apply(step)
        if run.lost and not schedule and run.on_step(step, probe=True):
            run.apply(step)  # a lost worker answers again: take it back now
        target = min([max_steps] + [s for s, _ in pending])
        est = build(run.mesh, run.tasks)
        run.probing = options.rebalance and not schedule and _probes(options.measure, run.mesh)
        monitor = SpeedMonitor(options.every, run.on_sample, run.on_step,
                               trace=options.rebalance and not schedule,
                               probe=_worker_devices(run.mesh) if run.probing else None,
                               trigger=StepTimeTrigger(threshold=options.trigger)
                               if options.trigger else None, burst=options.patience,
                               budget=options.budget)
        monitors.append(monitor)
        down, thread = _run_segment(
            lambda: est.train(train_fn, max_steps=target, hooks=[*hooks, monitor]),
            client, run.tasks, options.poll_seconds)
        before, step = step, checkpoint_step(model_dir)
        if not down and run.pending is None and step <= before and step < target:
            raise RuntimeError(f"training stopped at step {step} before step {target} "
                               "without a re-plan or a lost worker")
        if down:
            if not options.elastic:
                raise ClusterFailure(", ".join(f"worker {t} at {client.addresses[t]}"
                                               for t in down) + " stopped answering")
            abandoned.append(thread)
            run.on_lost(down, step)
        elif run.pending is not None and step < max_steps:
            run.apply(step)
        run.pending = None  # a re-plan proposed at the final step is not needed
    return _result(run, monitors, abandoned)


def _forced(run: _Run, mesh: MeshSpec, step: int) -> dict:
    from meshpar.training.live_speeds import worker_work

    return {"step": step, "reason": "schedule", "mesh": mesh,
            "work": worker_work(mesh, run.description, run.layout_of(mesh), run.batch),
            "speeds": {}, "predicted_gain": None, "back": [], "lost": [],
            "plan_predicted_step_seconds": None}


def _result(run: _Run, monitors: list, abandoned: list) -> dict:
    steps = [(s, end, sec, traced) for m in monitors for s, end, sec, traced in m.steps]
    overheads = [m.overhead() for m in monitors]
    traced = sum(o["traced_steps"] for o in overheads)
    shares = [(o["overhead_fraction"], sum(sec for _, _, sec, _ in m.steps))
              for o, m in zip(overheads, monitors) if o["overhead_fraction"] is not None]
    weight = sum(w for _, w in shares)
    overhead = sum(f * w for f, w in shares) / weight if weight else None
    return {"replans": run.replans, "samples": run.samples,
            "monitor": {"traced_steps": traced, "overhead_fraction": overhead,
                        "every": run.options.every, "trigger": run.options.trigger,
                        "budget": run.options.budget,
                        "waited_steps": sum(m.waited_steps for m in monitors),
                        "setup_seconds": sum(m.setup_seconds for m in monitors),
                        "triggered_at_steps": [s for m in monitors for s in m.triggers]},
            "abandoned_threads": len([t for t in abandoned if t.is_alive()]),
            "step_times": [[s, sec] for s, _, sec, _ in steps]}
