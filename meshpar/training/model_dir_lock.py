"""One run at a time in a model directory.

Two ``meshpar train`` with the same ``--model-dir`` both trained in it: each chunk
restored the other's latest checkpoint, the run file and ``best/`` were written by
both, and the directory ended up holding neither run, with no word said. The run
holds an exclusive ``flock`` on the directory itself while it works (no file of its
own in the user's directory); the kernel drops it when the process ends, however it
ends, so a killed run never leaves a stale lock behind.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional


class ModelDirInUse(ValueError):
    """Another process holds the model directory (a ValueError: the CLI's one line)."""


@contextlib.contextmanager
def hold_model_dir(model_dir: Optional[str], flag: str = "--model-dir",
                   command: str = "meshpar train") -> Iterator[None]:
    """Hold ``model_dir`` (made if missing) for the duration of the block; None: nothing.

    Raises :class:`ModelDirInUse` at once when another process holds it. A directory
    this made and left empty (the run was refused before writing) is removed again.
    Where the directory cannot be made or opened, or its file system has no ``flock``,
    the block runs unlocked (the run's own writes report what is wrong).
    """
    if not model_dir:
        yield
        return
    import fcntl

    path = os.path.abspath(model_dir)
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
            raise ModelDirInUse(f"{flag} {model_dir} is in use by another {command} "
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
