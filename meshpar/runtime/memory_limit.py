"""Emulated device memory: a cgroup memory limit on what a worker may grow by.

A worker process moved into a fresh memory cgroup once it is ready is
charged only for what it allocates from then on (the kernel leaves earlier
charges, the TensorFlow runtime's ~450 MiB, with the group they were made
in), so the group's limit is a limit on the worker's growth: the memory its
part of a plan needs. Going over it, the kernel kills the worker (SIGKILL),
as a device that runs out of memory fails its step. cgroup v1's memory
controller (``memory.limit_in_bytes``) or v2's (``memory.max``), writable
only as root; :func:`detect_memory_cgroup` says whether one is usable.
"""
from __future__ import annotations

import os
from typing import Optional

from meshpar.runtime.cgroups import CGROUP_ROOT, remove_group, writable

CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"
CGROUP_V2 = CGROUP_ROOT  # the unified hierarchy


def detect_memory_cgroup() -> Optional[str]:
    """'v1' or 'v2' if this process may create memory-limited cgroups, else None."""
    if writable(CGROUP_V1_MEMORY) and os.path.exists(
            os.path.join(CGROUP_V1_MEMORY, "memory.limit_in_bytes")):
        return "v1"
    controllers = os.path.join(CGROUP_V2, "cgroup.controllers")
    subtree = os.path.join(CGROUP_V2, "cgroup.subtree_control")
    if os.path.exists(subtree) and writable(CGROUP_V2):
        with open(controllers, encoding="utf-8") as f:
            available = f.read().split()
        with open(subtree, encoding="utf-8") as f:
            enabled = f.read().split()
        if "memory" in available and "memory" in enabled:
            return "v2"
    return None


def mapped_files(pid: int) -> list:
    """The files process ``pid`` maps (its shared libraries, mostly), from /proc;
    none for a process that is gone."""
    found = []
    try:
        with open(f"/proc/{int(pid)}/maps", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5].strip() if len(fields) == 6 else ""
        if path.startswith("/") and not path.endswith("(deleted)") and path not in found:
            found.append(path)
    return [p for p in found if os.path.isfile(p)]


def warm_page_cache(paths, done: Optional[set] = None, chunk: int = 1 << 20) -> list:
    """Read each of ``paths`` (not already in ``done``) through once, from this
    process, so their pages sit in the page cache charged to this process's group.

    A memory group charges a file's page to the group of the process that first
    brings it into the cache. A worker that, once under its budget, runs code of
    its libraries that nothing on the host had run before would be charged for
    those pages: on a cold host several MiB (vgg-cifar-small's worker: 16 MiB
    charged on a cold host, 7-9 MiB warm), which is not the memory its part of a
    plan needs. Returns the paths read; adds them to ``done``."""
    read = []
    for path in paths:
        if done is not None and path in done:
            continue
        try:
            with open(path, "rb", buffering=0) as f:
                while f.read(chunk):
                    pass
        except OSError:  # gone or unreadable: nothing to warm
            continue
        read.append(path)
        if done is not None:
            done.add(path)
    return read


class MemoryLimit:
    """One cgroup whose processes may allocate at most ``limit_bytes`` from the
    moment they join it (see module doc). Raises ValueError where no memory
    cgroup can be made."""

    def __init__(self, name: str, limit_bytes: float):
        self.version = detect_memory_cgroup()
        if self.version is None:
            raise ValueError("emulated memory limits need a writable cgroup memory controller "
                             "(Linux, as root)")
        limit = int(limit_bytes)
        if limit <= 0:
            raise ValueError(f"a memory limit must be > 0 bytes, got {limit_bytes!r}")
        root = CGROUP_V1_MEMORY if self.version == "v1" else CGROUP_V2
        self.path = os.path.join(root, name)
        self.limit_bytes = limit
        os.mkdir(self.path)
        try:
            if self.version == "v1":
                self._write("memory.limit_in_bytes", str(limit))
            else:
                self._write("memory.max", str(limit))
                self._write("memory.swap.max", "0")
        except OSError:
            self.remove()
            raise

    def _write(self, name: str, value: str):
        with open(os.path.join(self.path, name), "w", encoding="utf-8") as f:
            f.write(value)

    def _read(self, name: str) -> str:
        with open(os.path.join(self.path, name), encoding="utf-8") as f:
            return f.read()

    def add(self, pid: int):
        """Move process ``pid`` into the group: from now on its growth is limited."""
        self._write("cgroup.procs", str(pid))

    def peak_bytes(self) -> Optional[int]:
        """The most the group has held since it was made (None where the kernel
        does not keep it)."""
        name = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        try:
            return int(self._read(name))
        except OSError:
            return None

    def out_of_memory(self) -> bool:
        """True once the group has hit its limit and the kernel killed a process."""
        if self.version == "v2":
            events = dict(line.split() for line in self._read("memory.events").splitlines())
            return int(events.get("oom_kill", 0)) > 0
        fields = dict(line.split() for line in self._read("memory.oom_control").splitlines())
        if "oom_kill" in fields:
            return int(fields["oom_kill"]) > 0
        return int(self._read("memory.failcnt")) > 0  # older kernels: the limit was hit

    def remove(self):
        """Remove the group (once its processes have exited)."""
        remove_group(self.path)
