"""Cohorts of subjects: train/validation splits by person, stratified by label and group.

Pure Python and numpy (no nibabel, no TensorFlow). Works on any objects with
the fields of :class:`meshpar.data.types.Subject` (``path``, ``label``,
``group``, ``subject_id``); re-exported from :mod:`meshpar.data`.

=====================  ========================================================
function               what
=====================  ========================================================
``person_id``          the person a scan belongs to (``subject_id``, else path)
``group_by_person``    person -> that person's scans, in input order
``split_subjects``     stratified train/validation split, one side per person
``person_folds``       stratified k-fold partition, one fold per person
``fold_split``         (rest, fold i) of ``person_folds``
=====================  ========================================================
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

import numpy as np

from meshpar.core.splits import integer_at_least, number_above

if TYPE_CHECKING:  # types only
    from meshpar.data.types import Subject

__all__ = ["person_id", "group_by_person", "split_subjects", "person_folds", "fold_split"]


def person_id(subject: "Subject") -> str:
    """The person a scan belongs to: its ``subject_id``, else its file path."""
    return subject.subject_id or str(subject.path)


def group_by_person(subjects: Sequence["Subject"]) -> Dict[str, List["Subject"]]:
    """Person id -> that person's scans; both in first-seen input order."""
    people: Dict[str, List["Subject"]] = {}
    for s in subjects:
        people.setdefault(person_id(s), []).append(s)
    return people


def _strata(people: Dict[str, List["Subject"]], fields: Sequence[str]) -> Dict[tuple, List[str]]:
    """Stratum key (the ``fields`` of a person's first scan, the one with the first file
    path: not the first listed, so that one dataset listed in two orders is split one
    way) -> person ids."""
    strata: Dict[tuple, List[str]] = {}
    for pid, scans in people.items():
        first = min(scans, key=lambda s: str(s.path))
        key = tuple(getattr(first, f) for f in fields)
        strata.setdefault(key, []).append(pid)
    return strata


def _checked(subjects, seed, stratify, people=None) -> dict:
    """Person id -> scans of ``subjects`` (``people``, when already grouped), once ``seed``
    (an integer >= 0) and ``stratify`` (field names every scan has) are checked:
    TypeError or ValueError naming the argument (a string was read letter by letter as
    fields, 'Subject' object has no attribute 'l'; seed 1.5 or True reached numpy)."""
    integer_at_least(seed, "seed", 0)
    if isinstance(stratify, (str, bytes)) or not all(isinstance(f, str) for f in stratify):
        raise TypeError(f"stratify must be field names, e.g. ('label', 'group'), got "
                        f"{stratify!r}")
    people = group_by_person(subjects) if people is None else people
    for field in stratify:
        lacking = next((s for scans in people.values() for s in scans
                        if not hasattr(s, field)), None)
        if lacking is not None:
            raise ValueError(f"stratify field {field!r}: subject "
                             f"{getattr(lacking, 'path', lacking)} has no such field (a "
                             "Subject has path, label, group, subject_id)")
    return people


def _check_k(k) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 2:
        raise ValueError(f"k must be an integer >= 2, got {k!r}")
    return int(k)


def _validation_count(val_fraction: float, size: int) -> int:
    """People of a stratum of ``size`` that go to validation."""
    k = int(round(val_fraction * size))
    if val_fraction > 0 and size >= 2:
        k = min(max(k, 1), size - 1)
    return k


def split_subjects(
    subjects: Sequence["Subject"],
    val_fraction: float = 0.2,
    seed: int = 0,
    stratify: Sequence[str] = ("label", "group"),
) -> Tuple[List["Subject"], List["Subject"]]:
    """Stratified train/validation split by person (``subject_id``).

    All scans of one person land on the same side. People are grouped by the
    ``stratify`` fields of their first scan by file path (label, and group if any);
    each stratum sends ``round(val_fraction * size)`` people to validation,
    at least one of a stratum of two or more when ``val_fraction > 0``, and
    never all of one. Both lists keep the input order. The same ``seed``
    gives the same split.
    """
    if not 0.0 <= number_above(val_fraction, "val_fraction", -np.inf) < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    strata = _strata(_checked(subjects, seed, stratify), stratify)
    rng = np.random.default_rng(seed)
    val_people = set()
    for key in sorted(strata, key=repr):
        pids = sorted(strata[key])
        chosen = rng.permutation(len(pids))[:_validation_count(val_fraction, len(pids))]
        val_people.update(pids[i] for i in chosen)
    train = [s for s in subjects if person_id(s) not in val_people]
    val = [s for s in subjects if person_id(s) in val_people]
    return train, val


def person_folds(
    subjects: Sequence["Subject"],
    k: int,
    seed: int = 0,
    stratify: Sequence[str] = ("label", "group"),
) -> List[List["Subject"]]:
    """Stratified k-fold partition by person: ``k`` disjoint lists of scans.

    Every scan of one person lands in the same fold. Within each stratum (the
    ``stratify`` fields of a person's first scan by path) people are shuffled with
    ``seed`` and dealt round-robin, continuing across strata where the last
    one stopped, so fold sizes differ by at most one person overall and each
    fold gets its share of every stratum. Each fold keeps the input order.
    Use fold ``i`` as the test set and the others for training (see
    :func:`fold_split`).
    """
    people = group_by_person(subjects)
    k = _check_k(k)
    _checked(subjects, seed, stratify, people)
    if k > len(people):
        raise ValueError(f"k={k} folds need at least {k} people, got {len(people)}")
    strata = _strata(people, stratify)
    rng = np.random.default_rng(seed)
    fold_of: Dict[str, int] = {}
    next_fold = 0
    for key in sorted(strata, key=repr):
        pids = sorted(strata[key])
        for i in rng.permutation(len(pids)):
            fold_of[pids[i]] = next_fold
            next_fold = (next_fold + 1) % k
    folds: List[List["Subject"]] = [[] for _ in range(k)]
    for s in subjects:
        folds[fold_of[person_id(s)]].append(s)
    return folds


def fold_split(
    subjects: Sequence["Subject"],
    k: int,
    fold: int,
    seed: int = 0,
    stratify: Sequence[str] = ("label", "group"),
) -> Tuple[List["Subject"], List["Subject"]]:
    """(rest, fold ``fold``) of :func:`person_folds`; both keep the input order."""
    k = _check_k(k)
    if isinstance(fold, bool) or not isinstance(fold, (int, np.integer)) or not 0 <= fold < k:
        raise ValueError(f"fold must be an integer in [0, {k}), got {fold!r}")
    folds = person_folds(subjects, k, seed, stratify)
    held = {id(s) for s in folds[fold]}
    return [s for s in subjects if id(s) not in held], folds[fold]
