"""Timing steps on a session's workers: medians of repeated runs, ops taking turns
round after round so that a slow spell of a shared host lands on all of them
(the device profile's size scan, splits and slices; a plan's candidates)."""
from __future__ import annotations

import time

import numpy as np

#: Rounds in which a profile's timed splits take turns with the size scan's steps
#: (:func:`rescan_with`) and the slices with the whole steps (:func:`time_slices`):
#: one measurement per split would let a slow spell of a shared host land on one
#: of them only, and splits read against speeds timed minutes earlier describe
#: two hosts. Seen: a balanced batch split of resattnet3d-small at batch 32 timed
#: at 560 ms against 412 ms for the even one (training measured it at 230 ms),
#: from which the cost model learned a wait for the slowest device so large that
#: the planner left the slow worker idle.
SPLIT_ROUNDS = 3


def interleaved_seconds(session, ops: dict, repeats: int, rounds: int = SPLIT_ROUNDS) -> dict:
    """``{key: seconds}``: each op's median over ``rounds`` rounds of ``repeats``
    timed runs, the ops taking turns round after round (each warmed up first;
    an op may be a list, run as one step)."""
    for op in ops.values():
        session.run(op)  # warm up: a new graph's first run builds its kernels
    times = {key: [] for key in ops}
    for _ in range(rounds):
        for key, op in ops.items():
            for _ in range(repeats):
                t0 = time.perf_counter()
                session.run(op)
                times[key].append(time.perf_counter() - t0)
    return {key: _median(t) for key, t in times.items()}


def time_sizes(session, steps, sizes, flops_of, n: int, repeats: int, log,
               what: str = "size") -> tuple:
    """FLOP/s of every (task, size) step, one task at a time and all at once:
    ``(alone, together)``, each ``{task: {flops: flop/s}}``; each size logged as
    ``what`` (``batch 8`` for a model's whole steps, ``size (8, 16, 16, 16, 8, 8)``
    for the conv3d kernel's)."""
    alone = {task: {} for task in range(n)}
    together = {task: {} for task in range(n)}
    for size in sizes:
        flops = flops_of[tuple(size)]
        for task in range(n):
            seconds = median_seconds(session, [steps[task, tuple(size)]], repeats)[0]
            alone[task][flops] = flops / seconds
        ops = [steps[task, tuple(size)] for task in range(n)]
        for task, seconds in enumerate(median_seconds(session, ops, repeats)):
            together[task][flops] = flops / seconds
        shown = size[0] if what == "batch" else tuple(size)
        log(f"{what} {shown}: " + ", ".join(
            f"task {t} {alone[t][flops] / 1e9:.2f} alone / {together[t][flops] / 1e9:.2f} "
            f"together GFLOP/s" for t in range(n)))
    return alone, together


def rescan_with(session, steps, sizes, flops_of, n: int, ops: dict, repeats: int,
                rounds: int = SPLIT_ROUNDS) -> tuple:
    """``(alone, together, {key: seconds}, {key: spread})``: the size scan's steps (as
    :func:`time_sizes` times them: each task alone, then all tasks at once) and
    ``ops`` (one step each) timed again in the same rounds, taking turns, each
    ``repeats`` times a round; medians over all rounds, and each op's
    :func:`relative_spread` over them.

    A profile's speeds and its timed splits then describe one host. Read
    against a scan minutes earlier, the splits were divided by the drift of
    the workers' whole-batch steps between the two, which on a quiet host was
    the noise of a few timed steps of a throttled worker: three profiles of one
    LocalCluster in a row (resattnet3d-small, batch 8, 0.9/0.3) drifted 0.84,
    1.26 and 0.89, moving the balanced split's calibrated time by as much.
    """
    groups = {}
    for size in sizes:
        size = tuple(size)
        for task in range(n):
            groups["alone", task, size] = [steps[task, size]]
        groups["together", size] = [steps[task, size] for task in range(n)]
    groups.update({("op", key): [op] for key, op in ops.items()})
    for group in groups.values():
        together_times(session, group, 0)  # warm up (see together_times)
    times = {key: [[] for _ in group] for key, group in groups.items()}
    for _ in range(rounds):
        for key, group in groups.items():
            for i, runs in enumerate(together_times(session, group, repeats, warm=False)):
                times[key][i].extend(runs)

    alone = {task: {} for task in range(n)}
    together = {task: {} for task in range(n)}
    for size in sizes:
        flops = flops_of[tuple(size)]
        for task in range(n):
            alone[task][flops] = flops / _median(times["alone", task, tuple(size)][0])
            together[task][flops] = flops / _median(times["together", tuple(size)][task])
    return (alone, together, {key: _median(times["op", key][0]) for key in ops},
            {key: relative_spread(times["op", key][0]) for key in ops})


def relative_spread(runs) -> float:
    """The interquartile range of ``runs`` (seconds) over their median: how far apart
    a step's timed runs fall (a throttled worker's come in bands a quota period
    apart), so how far a median of them may be from the next one."""
    q25, q50, q75 = np.percentile(np.asarray(runs, dtype=float), [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def time_slices(session, slices, reference, n: int, repeats: int, log,
                rounds: int = SPLIT_ROUNDS) -> dict:
    """``{task: {1/k: efficiency}}``: each worker's speed on ``1/k`` of every split
    dim (the model split ``k`` ways, every slice on that worker), relative to its
    whole-model step at the same batch (``reference``: one op per task); all
    workers at once, like ``together``. The k slices together do the whole
    step's work, so efficiency is the whole step's seconds over the split
    step's. The two are timed in the same rounds, taking turns (``repeats``
    runs of each shared out over ``rounds``), so a host that runs slower for
    a while slows both: the whole step's time from the size scan, minutes
    earlier, had put a 0.3-core worker's half slices at 0.48 of its speed
    where three other profiles of the same workers measured 0.58-0.60."""
    if not slices:
        return {task: {} for task in range(n)}
    counts = sorted({k for _, k in slices})
    groups = {"whole": list(reference), **{k: [slices[task, k] for task in range(n)]
                                           for k in counts}}
    for ops in groups.values():
        together_times(session, ops, 0)  # warm up (see together_times)
    times = {key: [[] for _ in range(n)] for key in groups}
    per_round = max(1, -(-repeats // rounds))
    for _ in range(rounds):
        for key, ops in groups.items():
            for task, runs in enumerate(together_times(session, ops, per_round, warm=False)):
                times[key][task].extend(runs)
    whole = [float(np.median(t)) for t in times["whole"]]
    out = {task: {} for task in range(n)}
    for k in counts:
        for task in range(n):
            out[task][1.0 / k] = whole[task] / _median(times[k][task])
        log(f"slices of 1/{k} of every split dim: " + ", ".join(
            f"task {t} {out[t][1.0 / k]:.2f}" for t in range(n)) + " of the whole step's speed")
    return out


def _median(runs) -> float:
    """The median of ``runs`` (seconds), never 0 (a speed divides by it)."""
    return max(float(np.median(runs)), 1e-9)


def median_seconds(session, ops, repeats: int) -> list:
    """Each op's median seconds over ``repeats`` runs, all ops started together."""
    return [_median(t) for t in together_times(session, ops, repeats)]


def together_times(session, ops, repeats: int, warm: bool = True) -> list:
    """Each op's seconds in ``repeats`` runs, all ops started together (a list per op)."""
    import threading

    # Warm up each op as it is timed, alone: a distributed session registers a graph
    # with the workers for each new set of fetches (seconds for a model's step), so a
    # warm-up of all ops in one run left the first timed run of each op paying that
    if warm:
        for op in ops:
            session.run(op)
    times = [[] for _ in ops]
    for _ in range(repeats):
        barrier = threading.Barrier(len(ops))

        def run(i):
            barrier.wait()
            t0 = time.perf_counter()
            session.run(ops[i])
            times[i].append(time.perf_counter() - t0)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ops))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return times
