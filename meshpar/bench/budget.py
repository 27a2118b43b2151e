"""A benchmark's emulated memory budget: whether it can be enforced here, and
how a result says it (the headroom the plans were made with, the workers
that ran out)."""
from __future__ import annotations

from typing import Optional


def check_enforceable(budget: Optional[list], cluster_file: Optional[str] = None) -> None:
    """ValueError (one line, naming the flag) unless ``--enforce`` can hold
    workers to ``budget`` here: a budget given, local workers (not those of
    ``cluster_file``), and a writable cgroup memory controller. Said before
    any planning or worker starts."""
    from meshpar.runtime.memory_limit import detect_memory_cgroup

    if budget is None:
        raise ValueError("--enforce needs --memory-mib: the memory to emulate")
    if cluster_file:
        raise ValueError("--enforce emulates memory on local workers; it cannot limit "
                         "the workers of --cluster")
    if detect_memory_cgroup() is None:
        raise ValueError("--enforce needs a writable cgroup memory controller "
                         "(Linux, as root)")


def budget_headroom(result: dict) -> str:
    """``" (a plan's count may use 75% of it)"``: the memory-budget line's note of
    the headroom the plans were made with ("" for a result that does not record
    it: written before the headroom existed)."""
    if "memory_headroom" not in result:
        return ""
    return f" (a plan's count may use {1.0 - result['memory_headroom']:.0%} of it)"


def out_of_memory_message(tasks, budget) -> str:
    """One line naming the workers ``tasks`` that went over their ``budget`` (bytes
    per worker) and were killed for it."""
    return "out of memory: " + ", ".join(
        f"worker {t} went over its {budget[t] / 2**20:.1f} MiB" for t in tasks)
