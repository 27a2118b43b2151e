"""What every cgroup this package makes shares: whether one may be made
here, and removing it again."""
from __future__ import annotations

import os
import time


def writable(path: str) -> bool:
    """True if ``path`` is a directory this process may create groups in."""
    return os.path.isdir(path) and os.access(path, os.W_OK)


def remove_group(path: str) -> None:
    """Remove the cgroup at ``path`` (gone already is fine); the kernel frees a
    group a moment after its last task exits, so a busy group is retried."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
