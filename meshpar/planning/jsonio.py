"""JSON files with clear errors and atomic writes (pure Python).

Cluster and plan files (:mod:`meshpar.planning.cluster`, :mod:`meshpar.planning.plan`) are read
and written through these two functions:

=====================  ==========================================================
function               what
=====================  ==========================================================
``load_json``          parse a file; errors name the file and what is wrong
``save_json_atomic``   write to a temporary file beside the target, then rename
``write_atomic``       the same for any writer (a PNG, a CSV, a trace)
``write_text_atomic``  the same for a text
``strict_json``        NaN and infinities as null: JSON every parser reads
=====================  ==========================================================

A write that fails part-way (full disk, a non-serialisable value, an
interrupted process) leaves any existing file untouched: the new content
replaces it with one :func:`os.replace`, which is atomic on POSIX and Windows
within one directory.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import tempfile

__all__ = ["load_json", "save_json_atomic", "write_atomic", "write_text_atomic", "strict_json",
           "dumps_strict"]


def strict_json(data):
    """``data`` with every float that is NaN or infinite (numpy's too) as None and
    numpy numbers as Python ones, in dicts, lists and tuples at any depth:
    Python's ``json`` writes those floats as ``NaN``/``Infinity``, which is not
    JSON and which other parsers refuse."""
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    if isinstance(data, bool):
        return data
    if isinstance(data, numbers.Integral):  # numpy integers too
        return int(data)
    if isinstance(data, numbers.Real):
        value = float(data)
        return value if math.isfinite(value) else None
    return data


def dumps_strict(data, **kwargs) -> str:
    """``json.dumps`` of :func:`strict_json` ``(data)``; ValueError if anything
    non-finite were left."""
    return json.dumps(strict_json(data), allow_nan=False, **kwargs)


def load_json(path, what: str = "JSON file"):
    """Parse the JSON file ``path``.

    Parameters
    ----------
    path : str or os.PathLike
    what : str
        How errors name the file, e.g. ``"plan file"`` gives
        ``"plan file /tmp/p.json does not exist"``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        The file is a directory, is not UTF-8 text or is not valid JSON; the
        message names the file.

    >>> load_json("/nonexistent.json", "plan file")
    Traceback (most recent call last):
    ...
    FileNotFoundError: plan file /nonexistent.json does not exist
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what} {path} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{what} {path} is a directory, not a file")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {path}: not valid JSON ({err})") from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{what} {path}: not UTF-8 text ({err})") from err


def save_json_atomic(path, data, indent: int = 2) -> None:
    """Write ``data`` as JSON to ``path`` (plus a final newline), atomically.

    The text goes to a temporary file in the same directory, is flushed to
    disk, and then renamed over ``path``; on any error the temporary file is
    removed and an existing ``path`` is left as it was. The new file gets the
    permissions of the file it replaces, else the usual ones for a new file
    (``0o666`` less the umask).

    Raises
    ------
    TypeError, ValueError
        ``data`` is not JSON-serialisable (nothing is written).
    OSError
        ``path`` is a directory, its directory does not exist (or is a file) or is not
        writable.
    """
    path = os.fspath(path)
    if not path.strip():  # "" was the parent of the working directory's temporary file
        raise ValueError(f"expected a file name to write, got {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    text = json.dumps(data, indent=indent) + "\n"   # serialise before touching the disk
    if os.path.isdir(path):  # was os.replace's '[Errno 21] Is a directory: <temporary file>'
        raise IsADirectoryError(f"{path} is a directory; give a file name")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{path}: {directory} is a file, so no file can be made in it")
    if not os.path.isdir(directory):  # named as given, not as the temporary file
        raise FileNotFoundError(f"{path}: its directory {directory} does not exist")
    write_text_atomic(path, text)


def write_text_atomic(path, text: str) -> None:
    """``text`` (UTF-8) into ``path`` through :func:`write_atomic`, on disk before the
    rename: an earlier file at ``path`` is kept until the new one is whole."""
    write_atomic(path, lambda tmp: _write_text(tmp, text))


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path, write) -> None:
    """Call ``write(tmp)`` to write a temporary file beside ``path``, then rename it
    over ``path``: a write that fails part-way (an error, a full disk, an interrupted
    process) leaves an existing ``path`` as it was. The temporary name ends with
    ``path``'s extension (matplotlib's ``savefig`` takes its format from it); the new
    file gets the permissions of the file it replaces."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                               suffix=os.path.splitext(path)[1], dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _mode_for(path: str) -> int:
    """Permissions of an existing ``path``, else 0o666 less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
