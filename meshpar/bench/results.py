"""Writing a benchmark's result: ``NAME.json`` and, with a plot function, ``NAME.png``."""
from __future__ import annotations

import json
import os

from meshpar.planning.jsonio import dumps_strict, write_text_atomic


def check_result_paths(out_dir, name: str, plot: bool, flag: str = "--out") -> None:
    """Said before a benchmark runs, not after: IsADirectoryError for a ``name.json``
    (with ``plot``, also ``name.png``) in ``out_dir`` that is a directory, and
    FileExistsError for a ``name.json`` there that is not a result of this benchmark
    (something else the user saved: it is kept). An earlier result is replaced."""
    if not out_dir:
        return
    paths = [os.path.join(out_dir, f"{name}.{ext}") for ext in (("json", "png") if plot
                                                               else ("json",))]
    for path in paths:
        if os.path.isdir(path):
            raise IsADirectoryError(f"{flag} {out_dir}: {path} is a directory; the results "
                                    "are written there as a file")
    if os.path.isfile(paths[0]) and not _is_result(paths[0], name):
        raise FileExistsError(f"{paths[0]} exists and is not a `meshpar bench {name}` result; "
                              f"it is kept (remove it, or give another {flag})")


def _is_result(path: str, name: str) -> bool:
    """Whether ``path`` holds a result of benchmark ``name`` (hetero's results have no
    ``"benchmark"`` key; theirs are the only ones with a ``"workload"``)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):  # not JSON, not text
        return False
    return isinstance(data, dict) and data.get(
        "benchmark", "hetero" if "workload" in data else None) == name


def save_result(result: dict, out_dir: str, name: str, plot=None) -> list:
    """Write ``name.json`` (and ``name.png`` drawn by ``plot(result, path)``) into
    ``out_dir``; return the paths."""
    text = dumps_strict(result, indent=2)  # before the earlier result is touched
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{name}.json")]
    # through a temporary file: a write that fails part-way keeps the earlier result
    write_text_atomic(paths[0], text)
    if plot is not None:
        paths.append(plot(result, os.path.join(out_dir, f"{name}.png")))
    return paths
