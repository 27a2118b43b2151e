"""Writing a benchmark's result: ``NAME.json`` and, with a plot function, ``NAME.png``."""
from __future__ import annotations

import json
import os


def save_result(result: dict, out_dir: str, name: str, plot=None) -> list:
    """Write ``name.json`` (and ``name.png`` drawn by ``plot(result, path)``) into
    ``out_dir``; return the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{name}.json")]
    with open(paths[0], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    if plot is not None:
        paths.append(plot(result, os.path.join(out_dir, f"{name}.png")))
    return paths


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
