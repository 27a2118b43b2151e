"""``meshpar bench train``: whole networks trained through ``meshpar train --cluster``.

The path a user takes, strategy after strategy on the same workers in one run:

1. ``meshpar profile --cluster --model`` times every worker's whole training
   step of the model (alone and together) into the planner's device profile;
2. for each model, each strategy is a plan file, trained by a
   ``meshpar train --cluster ... --plan ... --json --trace-step K`` process;
   its steady-state samples/s (steps after warm-up) and the traced step's
   per-worker breakdown (compute, communication, idle) come from the summary
   line that command prints; on a LocalCluster, the part of its CPU share each
   worker used over those steady steps comes from the kernel's count of the
   worker processes' CPU time (the trace cannot tell a throttled worker's
   held-back time from idle).

Strategies: each worker ``alone`` (the ideal is the sum of their rates),
``mtf-even-filter`` (Mesh-TensorFlow's own ``PlacementMeshImpl``, filters
split evenly), ``mtf-even-batch``, ``proportional-batch`` and
``proportional-filter`` (weights = the workers' measured standalone rates of
this model) and ``planner``: the plan ``meshpar plan --profile`` picks, with
no trial runs (``planner_close_call``: the note ``meshpar plan`` gives when the
pick's predicted lead over the best plan on other devices is within the
profile's timing spread, :func:`~meshpar.planning.margins.close_call`). With ``--verify K``, a separate row ``verified``: of the
planner's K best candidates, the fastest by median over ``--verify-rounds``
trial runs each (in turns), then timed in the rounds like the others. Rows
that are the same plan are marked ``same_as``. In each round, unless left out,
every worker also trains alone with the others at the same time
(:mod:`meshpar.bench.together`): the ideal of a busy host, ``together``, and
each row's ``of_ideal_together``.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Optional, Sequence

import numpy as np

from meshpar.bench import together
from meshpar.bench.budget import budget_headroom, check_enforceable, out_of_memory_message
from meshpar.bench.train_runs import file_stem, median_run as _median_run
from meshpar.bench.train_runs import run_train_command, train_argv
from meshpar.planning.memory import MEASURED
from meshpar.planning.planners.candidates import same_plan

DEFAULT_MODELS = ("resattnet3d-small", "vgg-cifar")
DEFAULT_SPEEDS = (0.9, 0.3)


def run_strategy(model: str, plan, cluster_file: str, work: str, name: str, steps: int,
                 batch: int, upstream: bool = False, seed: int = 0, log=print,
                 run: int = 0, cluster=None) -> dict:
    """Train ``model`` on ``plan`` through ``meshpar train --cluster``; its JSON summary.
    ``run`` numbers repeated runs of one strategy (each trains from scratch in its
    own model directory). With ``cluster`` (a LocalCluster) the summary also says
    how much of its CPU share each worker used over the steady steps
    (``worker_share_used``, :mod:`meshpar.runtime.cpu_usage`)."""
    from meshpar.runtime.cpu_usage import CpuSampler

    plan_file = os.path.join(work, f"{file_stem(model)}-{name}.plan.json")
    plan.save(plan_file)
    argv = train_argv(model, cluster_file, plan_file, steps, batch,
                      trace_step=max(2, (3 * steps) // 4),
                      model_dir=os.path.join(work, f"{file_stem(model)}-{name}-run{run}"),
                      upstream=upstream, seed=seed)
    started = time.perf_counter()
    sampler = CpuSampler([p.pid for p in cluster.processes]) if cluster is not None else None
    if sampler is not None:
        sampler.start()
    try:
        out = run_train_command(argv, f"{model} / {name}")
    finally:
        if sampler is not None:
            sampler.stop()
    summary = json.loads(out.strip().splitlines()[-1])
    summary["wall_seconds"] = time.perf_counter() - started
    if sampler is not None:
        summary.update(_share_used(sampler, summary, cluster.speeds))
    log(f"  {name:<20} {summary['samples_per_second']:8.2f} samples/s  "
        f"({summary['steady_steps']} steady steps, {summary['wall_seconds']:.0f} s)")
    return summary


def _share_used(sampler, summary: dict, speeds: Sequence[float]) -> dict:
    """``worker_share_used``: each worker's CPU seconds over the run's steady steps
    (the one traced step among them) over the window times its share of a core;
    empty when the window is unknown or not covered."""
    from meshpar.runtime.cpu_usage import share_used

    window = summary.get("steady_window_unix")
    used = sampler.cpu_seconds_between(*window) if window else None
    if used is None:
        return {}
    return {"worker_share_used": share_used(used, window[1] - window[0], speeds)}


def strategy_plans(model_name: str, profile, batch: int, standalone: Sequence[float],
                   memory_terms=MEASURED) -> dict:
    """The non-alone strategies' plans on ``profile``'s devices (task order),
    each with the cost model's predicted step time. ``(plan, upstream)``.
    ``memory_terms``: the count's terms and headroom."""
    from meshpar.models import describe_model
    from meshpar.planning.cost_model import CostModel
    from meshpar.planning.planners.common import build_plan

    cost = CostModel(describe_model(model_name), profile, batch, memory_terms=memory_terms)
    n = len(profile.devices)
    ident, even = list(range(n)), [1.0] * n
    rates = [float(r) for r in standalone]
    return {
        "mtf-even-filter": (build_plan("mtf-even-filter", cost, 1, n, ident, [1.0], even), True),
        "mtf-even-batch": (build_plan("mtf-even-batch", cost, n, 1, ident, even, [1.0]), True),
        "proportional-batch": (build_plan("proportional-batch", cost, n, 1, ident, rates,
                                          [1.0]), False),
        "proportional-filter": (build_plan("proportional-filter", cost, 1, n, ident, [1.0],
                                           rates), False),
    }


def alone_plan(model_name: str, profile, batch: int, task: int, memory_terms=MEASURED):
    """A one-device plan on worker ``task`` (its predicted time from that device alone)."""
    from meshpar.models import describe_model
    from meshpar.planning.cost_model import CostModel
    from meshpar.planning.planners.common import build_plan

    single = profile.subset([profile.devices[task]])
    cost = CostModel(describe_model(model_name), single, batch, memory_terms=memory_terms)
    return build_plan(f"alone-{task}", cost, 1, 1, [0], [1.0], [1.0])


def batch_split_bound(profile, model_name: str, batch: int) -> Optional[dict]:
    """How far any batch split could go if synchronising were free: the integer
    split of ``batch`` over the workers whose slowest share is fastest, timed from
    each worker's measured standalone step at every batch size (the profile's
    ``alone_profile``, interpolated as the cost model does), against the ideal
    from the same profile (each worker alone on the whole batch). A step costs a
    worker a fixed part whatever its share (per-op scheduling, the optimizer), so
    small shares lose: this bound is below 1 before any communication.
    None for a profile without standalone model-step points."""
    from meshpar.models import describe_model
    from meshpar.planning.cluster import DeviceSpec

    alone = (profile.extra or {}).get("alone_profile")
    if not alone or profile.extra.get("work") != "model-step":
        return None
    flops = 3.0 * describe_model(model_name).flops  # per sample, as the profile counts it
    specs = [DeviceSpec(name=f"w{i}", device=d, profile=tuple(map(tuple, points)))
             for i, (d, points) in enumerate(alone.items())]
    # seconds[i][b]: worker i's step on b samples (0 for an idle worker)
    seconds = [[0.0] + [b * flops / s.speed_at(b * flops) for b in range(1, batch + 1)]
               for s in specs]
    best = None
    for limit in sorted({t for row in seconds for t in row[1:]}):
        # the most samples each worker finishes within `limit`, until they cover the batch
        takes = [max(b for b in range(batch + 1) if row[b] <= limit) for row in seconds]
        if sum(takes) >= batch:
            best = (limit, _trim(takes, batch, seconds))
            break
    step, sizes = best
    ideal = sum(batch / row[batch] for row in seconds)
    return {"sizes": sizes, "step_seconds": step, "samples_per_second": batch / step,
            "ideal_samples_per_second": ideal, "of_ideal": batch / step / ideal}


def _trim(takes: list, batch: int, seconds: list) -> list:
    """Shrink the shares that overshoot the batch, slowest step first."""
    takes = list(takes)
    while sum(takes) > batch:
        i = max(range(len(takes)), key=lambda k: seconds[k][takes[k]])
        takes[i] -= 1
    return takes


#: Trial runs of every candidate behind the ``verified`` row, taken in turns
#: (:func:`verified_plan`). One run each did not rank neighbouring splits on the
#: shared 2-core host: a 24/8 trial at 121.9 beat 25/7's at 106.1, and the rounds
#: then measured 24/8 at 106.6-127.2 against 25/7's 124.6-152.2.
VERIFY_ROUNDS = 2


def verified_plan(model: str, profile, batch: int, count: int, seed: int, memory_terms,
                  trial, log=print, rounds: int = VERIFY_ROUNDS) -> tuple:
    """``((plan, False), verification)``: of the planner's ``count`` best candidates
    (:func:`meshpar.planning.planners.candidates.candidate_plans`), the one of the
    highest median rate over ``rounds`` trial runs each, the candidates taking
    turns round after round so that a slow spell of the host hits them alike
    (``trial(plan, i, r)`` returns candidate ``i``'s summary in round ``r``). A
    candidate whose trial fails is out of the running. The row then runs in the
    rounds like every other strategy: its rate is never the trials that picked
    it (the best of several noisy trials is biased high). ``(None,
    verification)`` when no candidate ran."""
    from meshpar.models import describe_model
    from meshpar.planning.planners.candidates import candidate_plans

    if rounds < 1:
        raise ValueError(f"verify rounds must be >= 1, got {rounds}")
    candidates = candidate_plans(describe_model(model), profile, batch, count, seed=seed,
                                 memory_terms=memory_terms)
    log(f"  verifying the planner's {len(candidates)} best candidate(s), {rounds} trial "
        f"run(s) each, in turns")
    tried = [{"mesh": p.mesh_shape_string(), "plan_devices": list(p.devices),
              "split_sizes": {k: list(v) for k, v in p.split_sizes.items()},
              "predicted_step_seconds": p.predicted_step_seconds} for p in candidates]
    for r in range(rounds):
        for i, p in enumerate(candidates):
            row = tried[i]
            if "skipped" in row:
                continue
            try:
                rate = trial(p, i, r)["samples_per_second"]
            except RuntimeError as err:  # e.g. out of an enforced memory budget
                row["skipped"] = str(err)
                log(f"  trial-{i:<14} skipped: {err}")
                continue
            row.setdefault("trial_samples_per_second_runs", []).append(float(rate))
    for row in tried:
        if "skipped" in row:
            row.pop("trial_samples_per_second_runs", None)  # a plan that failed once is out
        elif row.get("trial_samples_per_second_runs"):
            row["trial_samples_per_second"] = float(np.median(
                row["trial_samples_per_second_runs"]))
    ran = [i for i, row in enumerate(tried) if "trial_samples_per_second" in row]
    if not ran:
        return None, {"candidates": tried, "picked": None, "rounds": rounds}
    best = max(ran, key=lambda i: tried[i]["trial_samples_per_second"])
    return (candidates[best], False), {"candidates": tried, "picked": best, "rounds": rounds}


class EnforcedMemory:
    """An emulated memory budget that the strategies' runs are held to: before
    every run the LocalCluster's workers are replaced by fresh processes (so
    no run inherits another's memory), under the budget for a split's run and
    without it for a worker alone (the ideal's reference: whether it would fit
    is the count's mark, ``fits_memory``)."""

    def __init__(self, cluster, budget: Sequence[float]):
        self.cluster = cluster
        self.budget = [float(b) for b in budget]

    def before(self, name: str) -> None:
        """Fresh workers for strategy ``name``'s next run."""
        self.cluster.renew_workers(None if name.startswith("alone-") else self.budget)

    def out_of_memory(self) -> list:
        """The worker tasks the kernel killed for going over their budget in this run."""
        return self.cluster.workers_out_of_memory()

    def message(self, tasks: Sequence[int]) -> str:
        """One line naming the workers that ran out (as ``bench memory`` says it)."""
        return out_of_memory_message(tasks, self.budget)


def _run_rounds(model: str, plans: dict, names: Sequence[str], runs: dict, rounds: int,
                cluster_file: str, work: str, steps: int, batch: int, seed: int, log,
                enforced: Optional[EnforcedMemory] = None, local_cluster=None,
                others: Optional[dict] = None) -> None:
    """Run each of ``names`` once per round, round after round (strategies
    interleaved, so a slow spell of the shared machine hits them all alike);
    ``runs[name]`` collects the summaries, or the row of a plan that cannot run,
    ``{"skipped": why}``. A run in which ``enforced`` saw workers killed adds
    ``{"skipped": why, "out_of_memory": [tasks]}`` to the summaries and ends the
    strategy's runs: a plan that ran out of memory once does not fit.
    ``others``: names that are not one plan (the workers alone all at once), each
    run by its function of the round's number."""
    for r in range(rounds):
        if rounds > 1:
            log(f"  round {r + 1} of {rounds}")
        for name in names:
            got = runs.get(name, [])
            if isinstance(got, dict) or len(got) > r or any("out_of_memory" in g for g in got):
                continue
            if enforced is not None:
                enforced.before(name)
            try:
                if others and name in others:
                    runs.setdefault(name, []).append(others[name](r))
                    continue
                plan, upstream = plans[name]
                runs.setdefault(name, []).append(run_strategy(
                    model, plan, cluster_file, work, name, steps, batch, upstream=upstream,
                    seed=seed, log=log, run=r, cluster=local_cluster))
            except RuntimeError as err:  # e.g. a split Mesh-TF cannot express
                killed = enforced.out_of_memory() if enforced is not None else []
                if killed:
                    runs.setdefault(name, []).append(
                        {"skipped": enforced.message(killed), "out_of_memory": killed})
                else:
                    runs[name] = {"skipped": str(err)}
                log(f"  {name:<20} skipped: {enforced.message(killed) if killed else err}")


def _row(got) -> dict:
    """A strategy's row from what :func:`_run_rounds` collected: its skip row, or
    its median run; a plan that ran out of memory after runs that did not
    keeps those runs' rates and says in which run it ran out."""
    if isinstance(got, dict):
        return dict(got)
    ran = [g for g in got if "out_of_memory" not in g]
    short = [g for g in got if "out_of_memory" in g]
    if not ran:
        return dict(short[0])
    row = _median_run(ran)
    if short:
        row.update(out_of_memory=short[0]["out_of_memory"], out_of_memory_in_run=len(ran) + 1,
                   out_of_memory_message=short[0]["skipped"])
    return row


def bench_model(model: str, profile, cluster_file: str, work: str, steps: int, batch: int,
                seed: int, log, rounds: int = 1, memory_terms=MEASURED,
                enforced: Optional[EnforcedMemory] = None, local_cluster=None,
                verify: int = 0, verify_rounds: int = VERIFY_ROUNDS,
                run_together: bool = True) -> dict:
    """All strategies for one model; the result dict of that model. With
    ``rounds`` > 1 every strategy runs that many times, interleaved, and each row
    is its median run; the proportional plans use the first round's alone rates.
    ``memory_terms``: the count's terms and headroom every plan is priced with;
    ``enforced``: the emulated memory the runs are held to (fresh workers each);
    ``local_cluster``: the LocalCluster the runs train on, whose workers' CPU time
    each row reports (:func:`run_strategy`); ``verify`` > 0: also the row
    ``verified`` (:func:`verified_plan`, ``verify_rounds`` trial runs per
    candidate), the trial runs in ``verification``. ``run_together`` (and more than
    one worker): also every worker alone, all at once, in each round
    (:mod:`meshpar.bench.together`), the block ``together``."""
    from meshpar.planning.margins import close_call
    from meshpar.planning.planners import plan_subsets
    from meshpar.models import describe_model

    n = len(profile.devices)
    log(f"{model}: batch {batch}, {steps} steps per strategy, {rounds} round(s)")
    plans = {f"alone-{task}": (alone_plan(model, profile, batch, task, memory_terms), False)
             for task in range(n)}
    runs = {}
    _run_rounds(model, plans, list(plans), runs, 1, cluster_file, work, steps, batch, seed, log,
                enforced, local_cluster)
    failed = [f"{name}: {got['skipped']}" for name, got in runs.items()
              if isinstance(got, dict)]
    if failed:  # no ideal without every worker's standalone rate
        raise RuntimeError("; ".join(failed))
    plans.update(strategy_plans(model, profile, batch,
                                [runs[f"alone-{t}"][0]["samples_per_second"] for t in range(n)],
                                memory_terms))
    started = time.perf_counter()
    weighed = plan_subsets(describe_model(model), profile, batch, method="ga", seed=seed,
                           memory_terms=memory_terms)  # plan(subsets=True)'s pick and rivals
    plans["planner"] = (weighed.best, False)
    planning_seconds = time.perf_counter() - started
    close = close_call(weighed.best, [weighed.whole, *weighed.subsets, *weighed.roomiest],
                       profile)
    if close:
        log(f"  planner: {close}")
    if not plans["planner"][0].feasible:  # the budget leaves no plan: nothing to run
        runs["planner"] = {"skipped": "no plan fits the memory budget"}
    verification = None
    if verify and plans["planner"][0].feasible:
        def trial(p, i, r):
            if enforced is not None:
                enforced.before("trial")  # a split: fresh workers under the budget
            return run_strategy(model, p, cluster_file, work, f"trial-{i}", steps, batch,
                                seed=seed, log=log, run=r, cluster=local_cluster)

        verified, verification = verified_plan(model, profile, batch, verify, seed,
                                               memory_terms, trial, log, rounds=verify_rounds)
        if verified is not None:
            plans["verified"] = verified
    names, others = list(plans), {}
    if run_together and n > 1:
        alone = [plans[f"alone-{t}"][0] for t in range(n)]
        each = together.together_steps(
            steps, [runs[f"alone-{t}"][0]["samples_per_second"] for t in range(n)])
        others[together.TOGETHER] = lambda r: together.run_together(
            model, alone, cluster_file, work, each, batch, seed=seed, log=log, run=r,
            cluster=local_cluster)
        names.insert(n, together.TOGETHER)  # after the alone rows
    _run_rounds(model, plans, names, runs, rounds, cluster_file, work, steps, batch, seed,
                log, enforced, local_cluster, others)
    rows = {name: _row(runs[name]) for name in plans if name in runs}  # strategies' order
    standalone = [rows[f"alone-{t}"]["samples_per_second"] for t in range(n)]
    ideal = sum(standalone)
    busy = together.together_block(runs[together.TOGETHER], ideal) if others else None
    baseline = rows.get("mtf-even-filter", {}).get("samples_per_second")
    # the measured fastest worker alone, as predicted: every row's predicted speed-up
    # over it compares with its measured one whatever the host's speed did between
    # the profile and the runs (both of a ratio's runs are of the same rounds)
    fastest_alone = plans[f"alone-{int(np.argmax(standalone))}"][0].predicted_step_seconds
    for name, row in rows.items():
        plan = plans[name][0]
        row.update(mesh=plan.mesh_shape_string(), plan_devices=list(plan.devices),
                   split_sizes={k: list(v) for k, v in plan.split_sizes.items()},
                   predicted_step_seconds=plan.predicted_step_seconds,
                   predicted_memory_bytes=list(plan.memory_per_device),
                   fits_memory=bool(plan.feasible))
        same = [other for other in plans if other != name and other in rows
                and list(rows).index(other) < list(rows).index(name)
                and same_plan(plans[other][0], plan)]
        if same:
            row["same_as"] = same[0]
        rate = row.get("samples_per_second")
        if rate:
            row["of_ideal"] = rate / ideal
            row["vs_fastest_alone"] = rate / max(standalone)
            if busy and "samples_per_second" in busy:
                row["of_ideal_together"] = rate / busy["samples_per_second"]
            if baseline:
                row["vs_mtf_even_filter"] = rate / baseline
            row["predicted_over_measured"] = plan.predicted_step_seconds / row[
                "step_seconds_median"]
            row["predicted_vs_fastest_alone"] = fastest_alone / plan.predicted_step_seconds
    return {"model": model, "batch": batch, "steps": steps, "rounds": rounds,
            "ideal_samples_per_second": ideal,
            "batch_split_bound": batch_split_bound(profile, model, batch),
            "standalone_samples_per_second": standalone, "planning_seconds": planning_seconds,
            "strategies": rows, **({"verification": verification} if verification else {}),
            **({"together": busy} if busy else {}),
            **({"planner_close_call": close} if close else {})}


def run_benchmark(models: Sequence[str] = DEFAULT_MODELS,
                  speeds: Sequence[float] = DEFAULT_SPEEDS, cluster_file: Optional[str] = None,
                  steps: int = 60, batch: int = 8, seed: int = 0, throttle: str = "auto",
                  profile_repeats: int = 3, rounds: int = 1, log=print,
                  memory_bytes: Optional[Sequence[float]] = None, memory_terms=MEASURED,
                  enforce: bool = False, verify: int = 0,
                  verify_rounds: int = VERIFY_ROUNDS, period_us: Optional[int] = None,
                  together_row: bool = True) -> dict:
    """Run every model's strategies on one cluster; the JSON-ready result.

    ``memory_bytes``: an emulated memory budget per worker (one value for all or
    one per worker) given to the planner in place of the profile's memory;
    every row reports its predicted memory per worker and whether it fits.
    ``memory_terms``: the count's terms and headroom (default
    :data:`meshpar.planning.memory.MEASURED`). ``enforce``: the budget is also
    each LocalCluster worker's emulated memory (:class:`EnforcedMemory`); a
    run whose worker outgrows it is reported out of memory. ``verify`` > 0: also
    the row ``verified`` (:func:`verified_plan`, ``verify_rounds`` trial runs of
    each candidate). ``period_us``: the LocalCluster throttle's period (None: its
    default). ``together_row``: also every worker alone, all at once, in each
    round (:mod:`meshpar.bench.together`)."""
    from meshpar.models import resolve
    from meshpar.planning.cluster import per_device
    from meshpar.runtime.cluster_files import ExistingCluster
    from meshpar.runtime.local_cluster import LocalCluster
    from meshpar.runtime.profiling import check_profile_fits, profile_cluster_workers

    for name in models:
        resolve(name)  # unknown names fail before any worker starts
    if steps < 8:
        raise ValueError(f"--steps must be >= 8 (warm-up plus steady steps), got {steps}")
    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {rounds}")
    if profile_repeats < 1:
        raise ValueError(f"--profile-repeats must be >= 1, got {profile_repeats}")
    if verify < 0:
        raise ValueError(f"--verify must be >= 0, got {verify}")
    if verify_rounds < 1:
        raise ValueError(f"--verify-rounds must be >= 1, got {verify_rounds}")
    if not cluster_file:  # an existing cluster's workers are counted once it is reached
        _check_batch(batch, len(speeds))
        for name in models:  # each profile's step at the whole batch, before workers start
            check_profile_fits(name, batch, local=len(speeds), what="--batch")
    budget = None  # per worker
    if memory_bytes is not None and not cluster_file:  # refused before any worker starts
        budget = per_device(memory_bytes, len(speeds), "--memory-mib", "worker")
    if enforce:
        check_enforceable(memory_bytes, cluster_file)
    started = time.time()
    context = ExistingCluster(cluster_file) if cluster_file else LocalCluster(
        speeds, throttle=throttle, period_us=period_us)
    with context as cluster, tempfile.TemporaryDirectory(prefix="meshpar-bench-train-") as work:
        tf_cluster = os.path.join(work, "cluster.json")
        with open(tf_cluster, "w", encoding="utf-8") as f:
            json.dump({"worker": list(cluster.addresses)}, f)
        log(cluster.describe())
        if cluster_file:  # an existing cluster's workers are counted only now
            _check_batch(batch, len(cluster.addresses))
            if memory_bytes is not None:
                budget = per_device(memory_bytes, len(cluster.addresses), "--memory-mib",
                                    "worker")
        results, profiles = [], {}
        for m in models:
            log(f"profiling the workers on {m} (meshpar profile --cluster --model):")
            profile = profile_cluster_workers(cluster.addresses, repeats=profile_repeats,
                                              model=m, batch=batch, log=log,
                                              batch_flag="--batch")
            if memory_bytes is not None:
                profile = profile.with_memory(memory_bytes)
            profiles[m] = profile.to_dict()
            enforced = EnforcedMemory(cluster, budget) if enforce else None
            results.append(bench_model(m, profile, tf_cluster, work, steps, batch, seed, log,
                                       rounds=rounds, memory_terms=memory_terms,
                                       enforced=enforced,
                                       local_cluster=None if cluster_file else cluster,
                                       verify=verify, verify_rounds=verify_rounds,
                                       run_together=together_row))
            if enforced is not None:  # the next model's profile runs without the budget
                cluster.renew_workers(None)
    return {"benchmark": "train", "cluster": {
                "workers": len(cluster.addresses), "speeds": list(getattr(cluster, "speeds", [])),
                "describe": cluster.describe(), "throttle": getattr(cluster, "throttle", "none")},
            "profiles": profiles, "models": results,
            "memory_budget_bytes": None if memory_bytes is None else list(memory_bytes),
            "memory_headroom": float(memory_terms.headroom), "enforced": bool(enforce),
            "profile_repeats": int(profile_repeats), "seconds": time.time() - started}


def _check_batch(batch: int, workers: int) -> None:
    """ValueError before anything is measured for a ``batch`` the batch splits cannot
    share out over ``workers`` (each takes at least one sample)."""
    if batch < workers:
        raise ValueError(f"--batch {batch} is smaller than the {workers} workers: a batch "
                         "split gives each at least one sample")


def format_table(result: dict) -> str:
    """Per model: one row per strategy (samples/s, of ideal, vs Mesh-TF's even filter
    split, vs the fastest worker alone measured and predicted, predicted/measured, the
    traced step's split)."""
    lines = []
    budget = result.get("memory_budget_bytes")
    if budget:
        lines.append("memory budget per worker (emulated): "
                     + ", ".join(f"{b / 2**20:.1f}" for b in budget) + " MiB"
                     + budget_headroom(result) + ("; enforced: every split ran on fresh workers "
                                                  "under it, each worker alone without it"
                                                  if result.get("enforced") else
                                                  "; rows marked by the count"))
    for m in result["models"]:
        lines.append(f"{m['model']} (batch {m['batch']}): ideal {m['ideal_samples_per_second']:.2f}"
                     " samples/s = " + " + ".join(f"{r:.2f}" for r in
                                                  m["standalone_samples_per_second"]))
        if m.get("together"):
            lines.append(together.format_line(m["together"]))
        if m.get("planner_close_call"):
            lines.append(f"  planner: {m['planner_close_call']}")
        bound = m.get("batch_split_bound")
        if bound:
            lines.append(f"  best batch split if synchronising were free (standalone steps per "
                         f"batch size): {'/'.join(map(str, bound['sizes']))}, "
                         f"{bound['of_ideal']:.2f} of the profile's ideal")
        lines.append(f"  {'strategy':<20} {'mesh':<16} {'samples/s':>9} {'p25-p75':>13} "
                     f"{'ideal':>6} {'vs mtf':>6} {'vs 1':>5} {'pred':>5} {'pred/meas':>9}  "
                     "traced step: compute/comm/idle per worker; CPU share used")
        for name, r in m["strategies"].items():
            if "samples_per_second" not in r:
                lines.append(f"  {name:<20} {r.get('skipped', '')}")
                continue
            lo, hi = r["samples_per_second_p25_p75"]
            trace = "  ".join(
                f"{task.split(':')[0][0]}{task.split(':')[1]} " + "/".join(
                    f"{parts[k] / r['trace_step_seconds']:.0%}"
                    for k in ("compute", "communication", "idle"))
                for task, parts in r.get("step_breakdown", {}).items())
            used = r.get("worker_share_used")
            if used:  # the trace counts a throttled worker's held-back time as idle
                trace += "  used " + " ".join(f"w{i} {u:.0%}" for i, u in enumerate(used))
            same = f"  (same plan as {r['same_as']})" if r.get("same_as") else ""
            if r.get("runs", 1) > 1:
                same += "  runs {:.1f}-{:.1f}".format(*r["samples_per_second_min_max"])
            if r.get("out_of_memory"):
                same += f"  OUT OF MEMORY in run {r['out_of_memory_in_run']}: " + \
                    r["out_of_memory_message"].split(": ", 1)[1]
            if not r.get("fits_memory", True):
                same += "  OVER THE MEMORY BUDGET (predicted {:.1f} MiB)".format(
                    max(r["predicted_memory_bytes"]) / 2**20)
            vs_mtf = (f"{r['vs_mtf_even_filter']:5.2f}x" if "vs_mtf_even_filter" in r
                      else f"{'-':>6}")  # Mesh-TF's row did not run (e.g. out of memory)
            lines.append(
                f"  {name:<20} {r['mesh']:<16} {r['samples_per_second']:9.2f} "
                f"{lo:6.1f}-{hi:<6.1f} {r['of_ideal']:6.2f} {vs_mtf} "
                f"{r['vs_fastest_alone']:4.2f}x {_predicted_vs_alone(r)} "
                f"{r['predicted_over_measured']:9.2f}  "
                f"{trace}{same}")
    return "\n".join(lines)


def _predicted_vs_alone(row: dict) -> str:
    """A row's predicted speed-up over the fastest worker alone, as the table shows
    it (``-`` in results written before the field)."""
    value = row.get("predicted_vs_fastest_alone")
    return f"{value:4.2f}x" if value is not None else f"{'-':>5}"


def save(result: dict, out_dir: str, plot: bool = True) -> list:
    """Write train.json (and train.png) into ``out_dir``; return the paths."""
    from meshpar.bench.results import save_result
    from meshpar.viz import plot_train_benchmark

    return save_result(result, out_dir, "train", plot_train_benchmark if plot else None)
