"""Writing a benchmark's result: ``NAME.json`` and, with a plot function, ``NAME.png``."""
from __future__ import annotations

import os

from meshpar.planning.jsonio import dumps_strict


def save_result(result: dict, out_dir: str, name: str, plot=None) -> list:
    """Write ``name.json`` (and ``name.png`` drawn by ``plot(result, path)``) into
    ``out_dir``; return the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{name}.json")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write(dumps_strict(result, indent=2))
    if plot is not None:
        paths.append(plot(result, os.path.join(out_dir, f"{name}.png")))
    return paths

