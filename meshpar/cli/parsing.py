"""Parsing helpers the subcommands share: one parser per notion on the command line."""
from __future__ import annotations

import math


def parse_speeds(text: str, flag: str = "--speeds") -> list:
    """``"0.9,0.3"`` -> ``[0.9, 0.3]``.

    ValueError naming ``flag`` for an empty list or item, a non-number, or a
    speed that is not finite and > 0.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}")
    speeds = []
    for i, p in enumerate(parts):
        try:
            s = float(p)
        except ValueError:
            raise ValueError(f"{flag}: {p!r} is not a number") from None
        if not math.isfinite(s) or s <= 0:
            raise ValueError(f"{flag}: speed {i} is {p}; speeds must be finite and > 0")
        speeds.append(s)
    return speeds
