"""Parsing helpers the subcommands share: one parser per notion on the command line."""
from __future__ import annotations

import math


def parse_positive_list(text: str, flag: str, what: str, whats: str) -> list:
    """``"0.9,0.3"`` -> ``[0.9, 0.3]``: a comma-separated list of finite numbers > 0.

    ValueError naming ``flag`` (``what`` each item is, ``whats`` the plural) for
    an empty list or item, a non-number, or a value that is not finite and > 0.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}")
    values = []
    for i, p in enumerate(parts):
        try:
            v = float(p)
        except ValueError:
            raise ValueError(f"{flag}: {p!r} is not a number") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{flag}: {what} {i} is {p}; {whats} must be finite and > 0")
        values.append(v)
    return values


def parse_speeds(text: str, flag: str = "--speeds") -> list:
    """``"0.9,0.3"`` -> ``[0.9, 0.3]`` (:func:`parse_positive_list` of speeds)."""
    return parse_positive_list(text, flag, "speed", "speeds")


def parse_memory_mib(text: str, flag: str = "--memory-mib") -> list:
    """``"64"`` or ``"64,32"`` (MiB) -> bytes per device: one value for every
    device, or one per device in order (:meth:`ClusterSpec.with_memory`)."""
    return [v * 2**20 for v in parse_positive_list(text, flag, "memory", "memory budgets")]


#: ``--memory-headroom``'s help, the same on every command that plans under a budget.
MEMORY_HEADROOM_HELP = ("share of each device's memory a plan's count may not use, for the "
                        "count's error (default 0.25: the count has been up to 23%% under a "
                        "measured need; lower it for a workload measured with "
                        "`meshpar bench memory --enforce`)")


def memory_terms(headroom, flag: str = "--memory-headroom"):
    """The planner's memory terms (:data:`meshpar.planning.memory.MEASURED`) with
    ``headroom`` in place of its default when given (None: the default).
    ValueError naming ``flag`` for a share outside [0, 1)."""
    import dataclasses

    from meshpar.planning.memory import MEASURED

    if headroom is None:
        return MEASURED
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"{flag} must be in [0, 1), got {headroom}")
    return dataclasses.replace(MEASURED, headroom=float(headroom))
