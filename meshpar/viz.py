"""Plots: benchmark bars against the ideal, per-device busy time, plan splits,
GA convergence. matplotlib (Agg), imported when a function is called; each
function takes plain data (dicts, Plans) and returns the PNG path or the axes.
"""
from __future__ import annotations

from typing import Optional


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    busy = {n: strategies[n].get("busy_seconds_per_worker") for n in ("even", "ga")}
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_ga_convergence(history, ax=None, label: Optional[str] = None, lower_bound=None):
    """Best predicted step time per generation."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(len(history)), [h * 1000 for h in history], label=label or "GA best")
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


def plot_plan(plan, path: str) -> str:
    """A plan's split diagram next to its convergence history (``meshpar plan --plot``)."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.8 + 0.35 * max(4, len(plan.split_sizes))))
    plot_plan_split(plan, ax=ax1)
    plot_ga_convergence(list(plan.history), ax=ax2, label=f"{plan.method} best",
                        lower_bound=plan.lower_bound_seconds)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
