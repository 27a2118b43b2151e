"""How much of its CPU share each LocalCluster worker used while a run trained.

A traced step (:mod:`meshpar.runtime.step_trace`) sees ops, not the scheduler: on
a worker throttled to a fraction of a core, the time the quota holds it back
shows as gaps between its ops, which the trace counts as idle. The kernel's
own count of each worker process's CPU time (``/proc/<pid>/stat``, every
thread, gRPC's included) does not have that blind spot. :class:`CpuSampler`
reads it a few times a second while a run trains; :func:`share_used` turns two
readings into the part of its share a worker used between them, 1.0 for a
worker that computed whenever its quota let it.

Linux only; elsewhere :func:`process_cpu_seconds` raises ``OSError``.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional, Sequence

import numpy as np

#: Clock ticks per second of /proc's utime and stime.
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads, exited ones included) process ``pid`` has used."""
    with open(f"/proc/{int(pid)}/stat", encoding="ascii") as f:
        # the command name (field 2) may contain spaces: split after its ')'
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class CpuSampler:
    """Samples the CPU seconds of ``pids`` every ``interval`` seconds, in a thread,
    from ``start()`` (or entering a ``with``) to ``stop()``; ``samples`` is a list
    of ``(unix time, [CPU seconds per pid])``."""

    def __init__(self, pids: Sequence[int], interval: float = 0.05):
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.pids = [int(p) for p in pids]
        self.interval = float(interval)
        self.samples: list = []
        self._halt = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _sample(self) -> None:
        try:
            self.samples.append((time.time(), [process_cpu_seconds(p) for p in self.pids]))
        except OSError:  # a worker that exited (killed for memory): keep what was read
            self._halt.set()

    def _loop(self) -> None:
        while not self._halt.wait(self.interval):
            self._sample()

    def start(self) -> "CpuSampler":
        """Take the first sample and start sampling."""
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (one last sample first)."""
        if self._thread is not None and not self._halt.is_set():
            self._sample()
        self._halt.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def cpu_seconds_between(self, start: float, end: float) -> Optional[list]:
        """Each pid's CPU seconds between unix times ``start`` and ``end``, read off the
        samples by linear interpolation; None when the samples do not cover the window."""
        return cpu_seconds_between(self.samples, start, end)


def cpu_seconds_between(samples: Sequence, start: float, end: float) -> Optional[list]:
    """See :meth:`CpuSampler.cpu_seconds_between`; ``samples`` as there."""
    if not end > start:
        raise ValueError(f"the window must end after it starts, got {start}..{end}")
    if len(samples) < 2 or samples[0][0] > start or samples[-1][0] < end:
        return None
    times = np.array([s[0] for s in samples])
    used = np.array([s[1] for s in samples], dtype=float)
    return [float(np.interp(end, times, used[:, i]) - np.interp(start, times, used[:, i]))
            for i in range(used.shape[1])]


def share_used(cpu_seconds: Sequence[float], seconds: float, shares: Sequence[float]) -> list:
    """The part of its CPU share each worker used: CPU seconds over ``seconds`` times
    its share of a core (``shares``, e.g. a LocalCluster's speeds)."""
    if len(cpu_seconds) != len(shares):
        raise ValueError(f"{len(cpu_seconds)} CPU readings for {len(shares)} shares")
    if seconds <= 0 or min(shares) <= 0:
        raise ValueError("the window and every share must be > 0")
    return [float(c) / (seconds * float(s)) for c, s in zip(cpu_seconds, shares)]
