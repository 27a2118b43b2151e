"""``meshpar bench memory``: the cost model's memory count against measured workers.

For each strategy of ``meshpar bench train`` (planned for the given relative
speeds: a plan's memory does not depend on how fast its devices are), fresh
worker processes start on this machine (a LocalCluster, unthrottled), each
worker's resident memory is read once it is ready and settled (``VmRSS``), the plan is
trained for a few steps through ``meshpar train --cluster``, and each worker's
peak resident memory (``VmHWM``) is read. The growth from ready to peak is
what that worker needed for this plan: slices, gradients, optimizer slots,
activations, the collectives' buffers and whatever TensorFlow allocates on
the way, initialisation and the final checkpoint included (a device must
hold its peak wherever in the run it falls). Next to it: the cost model's
count (``Plan.memory_per_device``: the plan's tensors times the copies a
worker holds of each, plus a runtime base; ``meshpar.planning.memory``).

Linux only (``/proc``). Fresh workers for every strategy, so no run inherits
another's freed-but-kept heap.

With ``enforce`` the budget is also an emulated device memory: each worker
may grow by at most its budget (a cgroup memory limit, as root), and a
strategy whose worker needs more is killed by the kernel; its row says which
worker ran out (``out_of_memory``). That is what a budget means on real
devices, so it tells whether the count kept a plan inside it.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Optional, Sequence

from meshpar.bench.budget import budget_headroom, check_enforceable, out_of_memory_message
from meshpar.planning.memory import MEASURED

STRATEGIES = ("alone-0", "mtf-even-filter", "mtf-even-batch", "proportional-batch",
              "proportional-filter", "planner")


def process_bytes(pid: int, key: str) -> int:
    """``key`` (``"VmRSS"``, ``"VmHWM"``) of process ``pid``, in bytes, from /proc."""
    path = f"/proc/{pid}/status"
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except OSError as err:
        raise RuntimeError(f"cannot read {path} ({err}): bench memory needs Linux's /proc "
                           "and workers on this machine") from None
    raise RuntimeError(f"{path} has no {key} line")


def settled_bytes(pid: int, tolerance: int = 2**20, interval: float = 0.25,
                  limit: float = 10.0) -> int:
    """``VmRSS`` of process ``pid`` once two reads ``interval`` apart differ by at
    most ``tolerance`` bytes (at most ``limit`` seconds): a worker that answers
    still loads and allocates for a moment, and on a busy machine that growth
    was counted as the plan's (an idle worker "grew" 41 MB, the working one 17)."""
    deadline = time.monotonic() + limit
    last = process_bytes(pid, "VmRSS")
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = process_bytes(pid, "VmRSS")
        if abs(now - last) <= tolerance:
            return now
        last = now
    return last


def memory_plans(model: str, speeds: Sequence[float], batch: int,
                 memory_bytes: Optional[Sequence[float]] = None, seed: int = 0,
                 memory_terms=MEASURED) -> dict:
    """``name -> (plan, upstream)`` for :data:`STRATEGIES` on a synthetic cluster of
    ``speeds`` (``memory_bytes``: the planner's budget, one for all or one per
    device; ``memory_terms``: the count's terms and headroom); the planner's row
    is absent when no plan fits the budget."""
    from meshpar.bench.train import alone_plan, strategy_plans
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan as make_plan

    profile = ClusterSpec.from_speeds(speeds)
    if memory_bytes is not None:
        profile = profile.with_memory(memory_bytes)
    plans = {"alone-0": (alone_plan(model, profile, batch, 0, memory_terms), False)}
    plans.update(strategy_plans(model, profile, batch, speeds, memory_terms))
    planned = make_plan(describe_model(model), profile, batch, method="ga", seed=seed,
                        subsets=True, memory_terms=memory_terms)
    if planned.feasible:
        plans["planner"] = (planned, False)
    return plans


class OutOfMemory(RuntimeError):
    """A strategy's worker went over its emulated memory and was killed."""

    def __init__(self, tasks: list, budget: list):
        self.tasks = tasks
        super().__init__(out_of_memory_message(tasks, budget))


def measure(model: str, plan, upstream: bool, batch: int, steps: int, workers: int,
            seed: int = 0, limits: Optional[Sequence[float]] = None) -> list:
    """Train ``plan`` for ``steps`` steps on ``workers`` fresh local workers; per
    worker task: the plan's predicted bytes there and its measured growth.
    ``limits``: bytes each worker may grow by (emulated memory); a worker killed
    for going over raises :class:`OutOfMemory`."""
    from meshpar.bench.train_runs import run_train_command, train_argv
    from meshpar.runtime.local_cluster import LocalCluster

    predicted = dict(zip(plan.devices, plan.memory_per_device))
    with LocalCluster([1.0] * workers, throttle="none", memory_bytes=limits) as cluster, \
            tempfile.TemporaryDirectory(prefix="meshpar-bench-memory-") as work:
        # under an enforced budget the run is read by its charged peak, and waiting
        # there let a worker that outgrows its budget live (the suite's kill test)
        ready = [process_bytes(p.pid, "VmRSS") if limits is not None else settled_bytes(p.pid)
                 for p in cluster.processes]
        cluster_file, plan_file = (os.path.join(work, n) for n in ("cluster.json", "plan.json"))
        with open(cluster_file, "w", encoding="utf-8") as f:
            json.dump({"worker": list(cluster.addresses)}, f)
        plan.save(plan_file)
        argv = train_argv(model, cluster_file, plan_file, steps, batch, trace_step=None,
                          model_dir=os.path.join(work, "model"), upstream=upstream, seed=seed)
        try:
            run_train_command(argv, model)
        except RuntimeError:
            killed = cluster.workers_out_of_memory()
            if killed:
                raise OutOfMemory(killed, list(limits)) from None
            raise
        peak = [process_bytes(p.pid, "VmHWM") for p in cluster.processes]
        charged = [cluster.memory_peak(t) for t in range(workers)]
    rows = []
    for task in range(workers):
        device = f"/job:worker/task:{task}/device:CPU:0"
        rows.append({"device": device, "predicted_bytes": predicted.get(device, 0.0),
                     "ready_bytes": ready[task], "peak_bytes": peak[task],
                     "measured_bytes": peak[task] - ready[task]})
        if charged[task] is not None:  # what the emulated memory counted: new pages only
            rows[-1]["charged_peak_bytes"] = charged[task]
    return rows


def run_benchmark(models: Sequence[str], speeds: Sequence[float], batch: int = 8,
                  steps: int = 8, memory_bytes: Optional[Sequence[float]] = None,
                  strategies: Sequence[str] = STRATEGIES, seed: int = 0, enforce: bool = False,
                  log=print, memory_terms=MEASURED) -> dict:
    """Every model's strategies measured; the JSON-ready result. ``enforce``: the
    budget ``memory_bytes`` is each worker's emulated memory (see module doc).
    ``memory_terms``: the count's terms and headroom the plans are made with
    (default :data:`meshpar.planning.memory.MEASURED`)."""
    from meshpar.models import resolve
    from meshpar.planning.cluster import per_device

    for name in models:
        resolve(name)  # unknown names fail before any worker starts
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    if steps < 1:
        raise ValueError(f"--steps must be >= 1, got {steps}")
    from meshpar.bench.train import _check_batch

    _check_batch(batch, len(speeds))  # was the planner's 'batch: size 1 cannot be split'
    from meshpar.runtime.profiling import check_profile_fits

    for name in models:  # every strategy failed in turn once the workers had started
        check_profile_fits(name, batch, local=len(speeds), what="--batch", split=True)
    budget = None if memory_bytes is None else \
        per_device(memory_bytes, len(speeds), "--memory-mib", "worker")
    if enforce:
        check_enforceable(budget)
    limits = budget if enforce else None
    results = []
    for model in models:
        plans = memory_plans(model, speeds, batch, memory_bytes, seed, memory_terms)
        rows = {}
        for name in strategies:
            if name not in plans:
                rows[name] = {"skipped": "no plan fits the memory budget"}
                continue
            plan, upstream = plans[name]
            try:
                tasks = measure(model, plan, upstream, batch, steps, len(speeds), seed, limits)
            except OutOfMemory as err:
                rows[name] = {"mesh": plan.mesh_shape_string(), "out_of_memory": err.tasks,
                              "predicted_bytes": list(plan.memory_per_device),
                              "devices": list(plan.devices), "skipped": str(err)}
                log(f"{model} {name:<20} {err}")
                continue
            except RuntimeError as err:  # e.g. a split Mesh-TF cannot express
                rows[name] = {"skipped": str(err)}
                log(f"{model} {name:<20} skipped: {err}")
                continue
            # plan_devices: the pnum order of split_sizes, so a stored row can be re-priced
            rows[name] = {"mesh": plan.mesh_shape_string(), "plan_devices": list(plan.devices),
                          "split_sizes": {k: list(v) for k, v in plan.split_sizes.items()},
                          "tasks": tasks}
            log(f"{model} {name:<20} " + "  ".join(
                f"task {i}: predicted {t['predicted_bytes'] / 2**20:.1f} MiB, measured "
                f"{t['measured_bytes'] / 2**20:.1f} MiB" for i, t in enumerate(tasks)))
        results.append({"model": model, "batch": batch, "steps": steps, "strategies": rows})
    return {"benchmark": "memory", "speeds": list(speeds),
            "memory_budget_bytes": None if memory_bytes is None else list(memory_bytes),
            "enforced": bool(enforce), "memory_headroom": float(memory_terms.headroom),
            "models": results}


def format_table(result: dict) -> str:
    """Per model and strategy: each worker's predicted and measured MiB and their ratio."""
    budget = result.get("memory_budget_bytes")
    lines = []
    if budget:
        lines.append("planner's memory budget per worker: "
                     + ", ".join(f"{b / 2**20:.1f}" for b in budget) + " MiB"
                     + budget_headroom(result))
    for m in result["models"]:
        # an enforced budget counts the pages a worker charged since it was ready, not
        # its resident growth (pages it had before and touched again are not charged)
        charged = any("charged_peak_bytes" in t for r in m["strategies"].values()
                      for t in r.get("tasks", []))
        lines.append(f"{m['model']} (batch {m['batch']}, {m['steps']} steps): per worker, "
                     "predicted / measured MiB (peak resident growth)"
                     + (" [charged against the enforced budget]" if charged else ""))
        for name, r in m["strategies"].items():
            if "tasks" not in r:
                lines.append(f"  {name:<20} {r['skipped']}")
                continue
            cells = []
            for t in r["tasks"]:
                pred, meas = t["predicted_bytes"] / 2**20, t["measured_bytes"] / 2**20
                ratio = f" ({pred / meas:.2f})" if pred and meas > 0 else ""
                held = t.get("charged_peak_bytes")
                cells.append(f"{pred:7.1f} / {meas:7.1f}{ratio}"
                             + ("" if held is None else f" [{held / 2**20:.1f}]"))
            lines.append(f"  {name:<20} {r['mesh']:<16} " + "   ".join(cells))
    return "\n".join(lines)


def save(result: dict, out_dir: str, plot: bool = False) -> list:
    """Write memory.json into ``out_dir``; return the paths (no plot)."""
    from meshpar.bench.results import save_result

    return save_result(result, out_dir, "memory")
