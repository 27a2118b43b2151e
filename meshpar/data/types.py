"""The data types every data module shares: a scan's record, a loaded volume, and the
errors that name a bad file. No TensorFlow, no nibabel."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

PathLike = Union[str, Path]


class BadDataError(ValueError):
    """A dataset problem, with ``.path`` the file it concerns."""

    def __init__(self, path: PathLike, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class BadSubjectError(BadDataError):
    """One subject cannot be used (skippable with ``skip_bad=True``)."""


class BadLabelsError(BadDataError):
    """``labels.csv`` itself is unusable (never skippable)."""


def bad_data_in(error: BaseException) -> Optional[BadDataError]:
    """The :class:`BadDataError` carried by a TensorFlow runtime error, or None.

    A bad file met while ``tf.data`` streams (:meth:`NiftiDataset.to_tf`)
    reaches the caller as a ``tf.errors.OpError`` whose message holds the
    original error's text (plus a traceback); this rebuilds the original, so
    callers can report one line naming the file.
    """
    text = str(getattr(error, "message", None) or error)
    for line in text.splitlines():
        for cls in (BadSubjectError, BadLabelsError, BadDataError):
            prefix = f"{cls.__name__}: "
            at = line.find(prefix)
            if at >= 0 and (at == 0 or not line[at - 1].isalnum()):
                path, _, problem = line[at + len(prefix):].partition(": ")
                return cls(path, problem.strip())
    return None


@dataclass(frozen=True)
class Skipped:
    """A subject left out under ``skip_bad=True`` and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class Subject:
    """One scan: its file, label, optional group and the person it belongs to."""

    path: Path
    label: str
    group: Optional[str] = None
    subject_id: str = ""
    line: int = 0  # line in labels.csv, for messages


@dataclass(frozen=True)
class Volume:
    """A 3-D image with its voxel-to-world affine and the file it came from."""

    data: np.ndarray
    affine: np.ndarray
    path: Optional[Path] = None

    @property
    def zooms(self) -> np.ndarray:
        """Voxel sizes (mm) along the array axes."""
        return np.sqrt(np.sum(self.affine[:3, :3] ** 2, axis=0))

    def replace(self, **changes) -> "Volume":
        """A copy with the given fields changed (volumes are immutable)."""
        return dataclasses.replace(self, **changes)

    def error(self, problem: str) -> BadSubjectError:
        """A :class:`BadSubjectError` naming this volume's file and ``problem`` (to raise)."""
        return BadSubjectError(self.path if self.path is not None else "<array>", problem)
