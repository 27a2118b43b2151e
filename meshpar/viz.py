"""Plots: benchmark bars against the ideal, per-device busy time, plan splits,
GA convergence, the predicted per-device timeline of a plan. matplotlib (Agg),
imported when a function is called; each function takes plain data (dicts,
Plans, cost-model evaluations) and returns the PNG path or the axes.
"""
from __future__ import annotations

from typing import Optional


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi: int = 100) -> None:
    """``fig.savefig(path)`` through a temporary file: a save that fails part-way
    leaves an earlier PNG at ``path`` as it was."""
    import os

    import matplotlib

    from meshpar.planning.jsonio import write_atomic

    # the format of path's extension, else matplotlib's default (png), as savefig(path)
    # takes it: the temporary file's name has another
    form = os.path.splitext(os.fspath(path))[1][1:] or matplotlib.rcParams["savefig.format"]
    write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=form))


def plot_benchmark(result: dict, path: str) -> str:
    """Bars of measured samples/s per strategy against the ideal line, and the
    per-worker busy time of one ``even`` and one ``ga`` step."""
    plt = _pyplot()
    strategies = {k: v for k, v in result["strategies"].items() if "samples_per_second" in v}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(strategies)
    rates = [strategies[n]["samples_per_second"] for n in names]
    colors = ["#c44e52" if n == "even" else "#55a868" if n == "ga" else "#4c72b0" for n in names]
    ax1.bar(names, rates, color=colors)
    ideal = result["ideal_samples_per_second"]
    ax1.axhline(ideal, color="black", linestyle="--", label=f"ideal {ideal:.1f}")
    for i, r in enumerate(rates):
        ax1.text(i, r, f"{r / ideal:.2f}", ha="center", va="bottom", fontsize=9)
    ax1.set_ylabel("samples / s")
    ax1.set_title("throughput (label: fraction of ideal)")
    ax1.legend()
    ax1.tick_params(axis="x", rotation=30)
    # either may be missing: a split the workload cannot take is skipped (3 workers)
    busy = {n: strategies.get(n, {}).get("busy_seconds_per_worker") for n in ("even", "ga")}
    busy = {n: b for n, b in busy.items() if b}
    if busy:
        workers = sorted({int(w) for b in busy.values() for w in b})
        width = 0.8 / len(busy)
        for j, (name, b) in enumerate(busy.items()):
            step = strategies[name]["median_step_seconds"]
            values = [b.get(w, b.get(str(w), 0.0)) for w in workers]
            ax2.bar([w + j * width for w in workers], values, width, label=f"{name} (step {step:.2f} s)")
        ax2.set_xticks([w + width * (len(busy) - 1) / 2 for w in workers])
        ax2.set_xticklabels([f"worker {w}\n(share {result['cluster']['speeds'][w]})" for w in workers])
        ax2.set_ylabel("busy seconds in one step")
        ax2.set_title("per-worker busy time")
        ax2.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def plot_ga_convergence(history, ax=None, label: Optional[str] = None, lower_bound=None):
    """Best predicted step time per generation (a point for a history of one value:
    the even, proportional and exact planners' single prediction)."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(len(history)), [h * 1000 for h in history], label=label or "GA best",
            marker="o" if len(history) == 1 else None)
    if lower_bound:
        ax.axhline(lower_bound * 1000, color="grey", linestyle=":", label="lower bound")
    ax.set_xlabel("generation")
    ax.set_ylabel("predicted step (ms)")
    ax.legend()
    return ax


def plot_plan_split(plan, ax=None):
    """Who holds what: for each split dimension, a stacked bar of its sizes per
    mesh coordinate (the split diagram of a plan)."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.5 + 0.4 * max(1, len(plan.split_sizes))))
    dims = list(plan.split_sizes)
    for row, dim in enumerate(dims):
        left = 0
        sizes = plan.split_sizes[dim]
        total = sum(sizes)
        for coord, size in enumerate(sizes):
            ax.barh(row, size / total, left=left / total, color=f"C{coord}", edgecolor="white")
            ax.text((left + size / 2) / total, row, str(size), ha="center", va="center", fontsize=8)
            left += size
    ax.set_yticks(range(len(dims)))
    ax.set_yticklabels(dims)
    ax.set_xlabel("share of the dimension (colour = mesh coordinate)")
    ax.set_title(f"{plan.method}: mesh {plan.mesh_shape_string()}")
    return ax


def plot_device_timeline(plan, evaluation=None, cost=None, ax=None):
    """The predicted timeline of one training step, one row per device (a Gantt chart).

    Devices are drawn top to bottom in pnum order. Each row has two bars: the
    device's compute seconds (coloured by device) and, in grey, the rest of
    the step, which it spends waiting for slower devices and in collectives.
    A balanced plan fills every row; an even split on uneven devices leaves
    the fast ones mostly grey.

    Parameters
    ----------
    plan : meshpar.planning.plan.Plan
        The plan drawn (its ``devices`` give the rows).
    evaluation : meshpar.planning.cost_model.Evaluation, optional
        The cost model's evaluation of ``plan`` (its first candidate is used).
        Computed with ``cost.evaluate_plan(plan)`` when omitted.
    cost : meshpar.planning.cost_model.CostModel, optional
        The cost model of the plan's model, cluster and batch; required when
        ``evaluation`` is omitted. When given, rows are labelled with device
        names and speeds relative to the fastest device, coloured by cluster
        index.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure when omitted.

    Returns
    -------
    matplotlib.axes.Axes
        The axes, with ``2 * len(plan.devices)`` bars (compute, then idle).

    Examples
    --------
    >>> cost = CostModel(describe_model("vgg-cifar"), cluster, batch=8)  # doctest: +SKIP
    >>> plot_device_timeline(plan, cost=cost)                             # doctest: +SKIP
    """
    if evaluation is None:
        if cost is None:
            raise ValueError("plot_device_timeline needs an evaluation or a cost model")
        evaluation = cost.evaluate_plan(plan)
    busy = [float(b) for b in evaluation.device_seconds[0]]
    step = float(evaluation.seconds[0])
    n = len(plan.devices)
    if len(busy) != n:
        raise ValueError(f"evaluation has {len(busy)} devices but the plan has {n}")
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.0 + 0.3 * min(n, 32)))
    if cost is not None:
        devices = cost.cluster.devices
        index = {d.device: i for i, d in enumerate(devices)}
        fastest = max(float(s) for s in cost.max_speed)
        speed = {d.device: float(s) / fastest for d, s in zip(devices, cost.max_speed)}
        colors = [f"C{index.get(d, p) % 10}" for p, d in enumerate(plan.devices)]
        labels = [f"{devices[index[d]].name} (speed {speed[d]:.2f})" if d in index else d
                  for d in plan.devices]
    else:
        colors = [f"C{p % 10}" for p in range(n)]
        labels = list(plan.devices)
    rows = list(range(n))
    ms = [b * 1e3 for b in busy]
    ax.barh(rows, ms, color=colors, label="compute (colour: device)")
    ax.barh(rows, [max(step * 1e3 - b, 0.0) for b in ms], left=ms, color="lightgrey",
            label="idle or communicating")
    if n <= 32:
        ax.set_yticks(rows)
        ax.set_yticklabels(labels, fontsize=8)
    else:
        ax.set_ylabel("pnum")
    ax.set_ylim(n - 0.5, -0.5)  # pnum 0 at the top
    ax.set_xlabel("predicted time in one training step (ms)")
    ax.set_title(f"{plan.method}: mesh {plan.mesh_shape_string()}, step {step * 1e3:.2f} ms",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def plot_plan(plan, path: str, model=None, cluster=None) -> str:
    """Write a PNG of a plan (``meshpar plan --plot``).

    Panels: the split diagram, the convergence history and, when ``model`` and
    ``cluster`` are given, the predicted per-device timeline.

    Parameters
    ----------
    plan : meshpar.planning.plan.Plan
    path : str
        PNG file to write.
    model : meshpar.planning.description.ModelDescription, optional
        The model the plan was made for.
    cluster : meshpar.cluster.ClusterSpec, optional
        The cluster the plan was made for.

    Returns
    -------
    str
        ``path``.
    """
    plt = _pyplot()
    timeline = model is not None and cluster is not None
    height = 0.8 + 0.35 * max(4, len(plan.split_sizes))
    if timeline:
        height = max(height, 1.0 + 0.3 * min(len(plan.devices), 32))
    fig, axes = plt.subplots(1, 3 if timeline else 2, figsize=(18 if timeline else 12, height))
    plot_plan_split(plan, ax=axes[0])
    plot_ga_convergence(list(plan.history), ax=axes[1], label=f"{plan.method} best",
                        lower_bound=plan.lower_bound_seconds)
    if timeline:
        from meshpar.planning.cost_model import CostModel
        from meshpar.planning.planners.common import subset_cost

        used = set(plan.devices)  # a plan may leave the slowest devices idle
        cost = subset_cost(CostModel(model, cluster, plan.batch),
                           [d for d in cluster.devices if d.device in used])
        plot_device_timeline(plan, cost=cost, ax=axes[2])
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def plot_train_benchmark(result: dict, path: str) -> str:
    """One column per model: bars of samples/s per strategy against the ideal, and the
    traced step of each strategy split per worker into compute, communication, idle."""
    plt = _pyplot()
    models = result["models"]
    fig, axes = plt.subplots(2, len(models), figsize=(6.5 * len(models), 8), squeeze=False)
    for col, m in enumerate(models):
        rows = {k: v for k, v in m["strategies"].items() if "samples_per_second" in v}
        names = list(rows)
        rates = [rows[n]["samples_per_second"] for n in names]
        ideal = m["ideal_samples_per_second"]
        ax = axes[0][col]
        colors = ["#55a868" if n == "planner" else "#c44e52" if n.startswith("mtf") else
                  "#8c8c8c" if n.startswith("alone") else "#4c72b0" for n in names]
        ax.bar(names, rates, color=colors)
        ax.axhline(ideal, color="black", linestyle="--", label=f"ideal {ideal:.1f}")
        busy = (m.get("together") or {}).get("samples_per_second")
        if busy:  # every worker alone at once: the ideal of a host whose cores all compute
            ax.axhline(busy, color="gray", linestyle=":", label=f"all alone at once {busy:.1f}")
        for i, r in enumerate(rates):
            ax.text(i, r, f"{r / ideal:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"{m['model']}, batch {m['batch']} (label: of ideal)")
        ax.set_ylabel("samples / s (steady state)")
        ax.tick_params(axis="x", rotation=35)
        ax.legend()
        ax = axes[1][col]
        labels, bottoms = [], []
        for name in names:
            step = rows[name].get("trace_step_seconds")
            for task, parts in rows[name].get("step_breakdown", {}).items():
                if not task.startswith("worker"):
                    continue
                labels.append(f"{name}\n{task}")
                bottoms.append([parts[k] / step for k in ("compute", "communication", "idle")])
        x = range(len(labels))
        base = [0.0] * len(labels)
        for k, (part, color) in enumerate(zip(("compute", "communication", "idle"),
                                              ("#4c72b0", "#dd8452", "#cccccc"))):
            values = [b[k] for b in bottoms]
            ax.bar(x, values, bottom=base, color=color, label=part)
            base = [a + v for a, v in zip(base, values)]
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=90, fontsize=7)
        ax.set_ylabel("share of the traced step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path
