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


#: how every group this package makes is named (LocalCluster's CPU quotas, emulated memory)
GROUP_PREFIX = "meshpar-"
CGROUP_ROOT = "/sys/fs/cgroup"


def leave_own_groups(membership: str = "/proc/self/cgroup") -> list:
    """Move this process out of each group of this package it is in (into the group's
    parent, where LocalCluster made it) and remove the group; returns the removed paths.

    A LocalCluster worker does this when the process that made its groups is gone:
    a SIGKILL or SIGTERM runs no cleanup code there, and the groups stayed, empty,
    in /sys/fs/cgroup after each killed command. Best effort: the worker is exiting."""
    try:
        with open(membership, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux
        return []
    removed = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if not name.startswith(GROUP_PREFIX):
            continue
        for group in _group_dirs(controllers, name):
            try:
                with open(os.path.join(os.path.dirname(group), "cgroup.procs"), "w",
                          encoding="utf-8") as f:
                    f.write(str(os.getpid()))
            except OSError:
                continue
            remove_group(group)
            if not os.path.exists(group):
                removed.append(group)
    return removed


def _group_dirs(controllers: str, name: str) -> list:
    """The directories of group ``name`` of one /proc/self/cgroup line: under the
    hierarchy's root (LocalCluster makes its groups there), v1 or v2."""
    roots = [os.path.join(CGROUP_ROOT, c) for c in controllers.split(",") if c] or [CGROUP_ROOT]
    found = []
    for root in roots:
        group = os.path.join(root, name)
        if os.path.isdir(group) and os.path.realpath(group) not in map(os.path.realpath, found):
            found.append(group)
    return found
