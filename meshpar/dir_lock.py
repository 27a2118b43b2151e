"""One command at a time writing a directory.

Two ``meshpar train`` with the same ``--model-dir`` both trained in it: each chunk
restored the other's latest checkpoint, the run file and ``best/`` were written by
both, and the directory ended up holding neither run, with no word said. Two
``meshpar data synth`` with the same ``--out`` mixed their subjects under one
``labels.csv``. The command holds an exclusive ``flock`` on the directory itself
while it writes (no file of its own in the user's directory); the kernel drops it
when the process ends, however it ends, so a killed command never leaves a stale
lock behind.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional


class DirectoryInUse(ValueError):
    """Another process holds the directory (a ValueError: the CLI's one line)."""


@contextlib.contextmanager
def hold_directory(directory: Optional[str], flag: str, command: str) -> Iterator[None]:
    """Hold ``directory`` (made if missing) for the duration of the block; None: nothing.
    ``flag`` and ``command`` name it in the refusal (``--model-dir``, ``meshpar train``).

    Raises :class:`DirectoryInUse` at once when another process holds it. A directory
    this made and left empty (the run was refused before writing) is removed again.
    Where the directory cannot be made or opened, or its file system has no ``flock``,
    the block runs unlocked (the run's own writes report what is wrong).
    """
    if not directory:
        yield
        return
    import fcntl

    path = os.path.abspath(directory)
    made = [d for d in _self_and_parents(path) if not os.path.exists(d)]  # deepest first
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # a read-only parent, say: the run's own writes say so, as before
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DirectoryInUse(f"{flag} {directory} is in use by another {command} "
                                f"(running now); wait for it to end, or give another "
                                f"{flag}") from None
        except OSError:  # no flock here (some network file systems): as before
            pass
        try:
            yield
        finally:
            for d in made:  # still empty: nothing was written, leave nothing
                with contextlib.suppress(OSError):
                    os.rmdir(d)
    finally:
        os.close(fd)


def _self_and_parents(path: str) -> list:
    """``path`` and each directory above it, deepest first."""
    chain = [path]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    return chain
