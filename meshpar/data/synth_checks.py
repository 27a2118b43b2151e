"""What :func:`meshpar.data.phantoms.write_dataset` checks before it writes anything:
its counts, labels and noise, voxel sizes the phantoms can be drawn at, and a directory
it may write into."""
from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from meshpar.core.splits import true_or_false

#: the voxel sizes a dataset may have: files below MIN_VOXEL_MM read back as singular
#: (nibabel stores float32 sizes), and past MAX_FOV_MM across the bias field overflows
MIN_VOXEL_MM, MAX_FOV_MM = 1e-3, 600.0
#: the largest noise level (relative to white-matter intensity) a dataset may have: a
#: hundred times the signal is noise alone, and far past it the voxels overflowed to inf
MAX_NOISE = 100.0


def _whole(x) -> bool:
    """Whether ``x`` is an integral number (numpy's too), not a bool, NaN or infinity."""
    return (isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
            and int(x) == x)


def check_dataset_arguments(n, shape, label_set, seed, fractions, noise,
                            max_rotation_deg, orientations: Sequence[str] = ("RAS",)) -> tuple:
    """``(n, shape, label_set)`` of a dataset to write, as int, tuple of ints and tuple of
    str; ValueError for a count or size that is not a whole number in range (2.5 is not
    cut to 2), a label set that is a string, names fewer than two classes (a classifier
    learns nothing from one) or an empty or repeated name, a negative seed, and
    fractions, noise or a rotation that are not finite numbers >= 0, and ``orientations``
    that are not a non-empty list (:func:`check_phantom_arguments`, each subject's)."""
    if not _whole(n) or n < 1:
        raise ValueError(f"n must be a whole number >= 1, got {n!r}")
    if n > np.iinfo(np.int64).max:  # numpy counts the labels in int64
        raise ValueError(f"n must be at most 2**63 - 1, got {n}")
    if isinstance(label_set, (str, bytes)):  # "NCAD" is not the labels N, C, A, D
        raise ValueError(f"label set must be a sequence of names, got {label_set!r}")
    names = tuple(label_set)
    if not all(isinstance(x, str) and x for x in names) or len(set(names)) != len(names):
        raise ValueError(f"label set must be non-empty names without repeats, got {names}")
    for name in names:  # labels.csv is UTF-8: a lone surrogate failed after the subjects
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"label {name!r} is not UTF-8 text (labels.csv is UTF-8)") from None
        if not name.isprintable():  # a line break was written into labels.csv's cells
            raise ValueError(f"label {name!r} holds a control character (a line break, a "
                             "tab); give printable names")
    if len(names) < 2:
        raise ValueError(f"label set must name at least two classes, got {names}: a "
                         "classifier learns nothing from one (for subjects of one group, "
                         "give the other no share: fractions, or ad_fraction 0 or 1)")
    if not _whole(seed) or seed < 0:  # a dataset's seed makes it again: not None
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    shape = check_phantom_arguments(shape, seed, noise, max_rotation_deg, orientations)
    if isinstance(fractions, (str, bytes)):  # was listed letter by letter
        raise ValueError(f"fractions must be numbers, one per label, got {fractions!r}")
    if fractions is not None and not all(_at_least_zero(v) for v in fractions):
        raise ValueError(f"fractions must be finite numbers >= 0, got {list(fractions)}")
    return int(n), shape, names


def check_distinct_severities(label_set: Sequence[str], fractions, severity) -> None:
    """ValueError when two labels that get subjects get one atrophy severity
    (``severity(label, label_set)``): a known name and a name placed by its position
    (``AD,control``: both 1.0) were written as classes that differ in nothing."""
    shares = [True] * len(label_set) if fractions is None else [f > 0 for f in fractions]
    seen = {}
    for name, share in zip(label_set, shares):
        if not share:
            continue
        level = severity(name, label_set)
        if level in seen:
            raise ValueError(f"labels {seen[level]!r} and {name!r} would get the same atrophy "
                             f"severity {level:g}: their subjects would differ in nothing; "
                             "name the healthy group first and the patients last, or use "
                             "known names (NC, sMCI, MCI, pMCI, AD)")
        seen[level] = name


def check_phantom_arguments(shape, seed, noise, max_rotation_deg,
                            orientations: Sequence[str] = ("RAS",)) -> tuple:
    """``shape`` as a tuple of ints; ValueError naming the argument of one phantom
    (:func:`~meshpar.data.phantoms.make_phantom`, each subject of a dataset) that is not
    three whole sizes of at least 8, a seed (a whole number >= 0, a SeedSequence or None),
    a finite noise level in [0, MAX_NOISE] and rotation >= 0, or a non-empty list of
    axis codes: make_phantom cut 12.5 to 12, gave numpy's errors for a seed of -1 or 1.5
    and a size of 0, no noise for a NaN or negative level, and read 'RAS' letter by
    letter."""
    if isinstance(shape, (str, bytes)) or len(shape) != 3 or not all(
            _whole(s) and s >= 8 for s in shape):
        raise ValueError(f"shape must be three sizes of at least 8, got {tuple(shape)}")
    if not (seed is None or isinstance(seed, np.random.SeedSequence)
            or (_whole(seed) and seed >= 0)):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    if isinstance(noise, numbers.Real) and noise > MAX_NOISE:  # inf voxels, written in silence
        raise ValueError(f"noise must be at most {MAX_NOISE:g} (relative to white matter; "
                         f"default 0.04), got {noise!r}")
    for what, value in (("noise", noise), ("max_rotation_deg", max_rotation_deg)):
        if not _at_least_zero(value):
            raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    if isinstance(orientations, (str, bytes)) or not len(orientations):  # numpy's 'a cannot
        raise ValueError(f"orientations must be a list of axis codes such as "  # be empty'
                         f"['RAS', 'LPS'], got {orientations!r}")
    return tuple(int(s) for s in shape)


def _at_least_zero(value) -> bool:
    """Whether ``value`` is a finite real number >= 0 (not a bool)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def check_voxel_mm(shape: Sequence[int], voxel_mm: Union[float, Sequence[float]]) -> None:
    """ValueError unless every voxel size is finite, at least :data:`MIN_VOXEL_MM`, and
    the field of view (size x voxels, per axis) at most :data:`MAX_FOV_MM`."""
    given = () if isinstance(voxel_mm, (str, bytes)) else np.ravel(np.asarray(voxel_mm,
                                                                          dtype=object))
    if len(given) not in (1, 3) or not all(  # "1" was read as 1 mm, [1, 1] was numpy's error
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in given):
        raise ValueError(f"voxel_mm must be a voxel size in mm or three of them, got "
                         f"{voxel_mm!r}")
    zooms = np.broadcast_to(np.asarray(given, dtype=float), (3,))
    for size, zoom in zip(shape, zooms.tolist()):  # Python floats: no overflow warning
        if not zoom >= MIN_VOXEL_MM:  # NaN too
            raise ValueError(f"voxel size {zoom:g} mm is under {MIN_VOXEL_MM:g} mm")
        if size * zoom > MAX_FOV_MM:
            raise ValueError(f"voxel size {zoom:g} mm x {size} voxels is over a {MAX_FOV_MM:g} "
                             "mm field of view (a head is about 180 mm across; default 200 mm)")


def refuse_targets(out_dir: Path, n: int, force: bool, files: Sequence[str]) -> None:
    """Before anything is written: ``out_dir`` a file, or not empty without ``force``;
    with it, a place the dataset's ``files`` (in ``out_dir``), ``subjects/`` or one of
    its ``n`` subjects go that holds the other kind (it is kept). ``force`` is True or
    False: force="no" wrote over a non-empty directory."""
    force = true_or_false(force, "force")
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} exists and is not a directory")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not force:
        raise FileExistsError(f"{out_dir} is not empty; refusing to overwrite (use --force / force=True)")
    subjects = out_dir / "subjects"
    if subjects.exists() and not subjects.is_dir():
        raise NotADirectoryError(f"{subjects} is a file where the subjects' directory goes; "
                                 "it is kept")
    places = [out_dir / name for name in files] + [
        p for p in (subjects.glob("sub-*.nii.gz") if subjects.is_dir() else ())
        if p.name == subject_file(_number(p.name), n)]
    for path in places:
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a directory where a file of the dataset goes; "
                                    "it is kept")
    _refuse_another_dataset(out_dir, files)


def _refuse_another_dataset(out_dir: Path, files: Sequence[str]) -> None:
    """With ``force``: FileExistsError when ``out_dir`` holds a dataset this command did
    not write (its ``labels.csv`` or ``files[1]``, the generator's record, without
    that record saying ``meshpar.data``): its labels and subjects named like the
    phantoms' (``subjects/sub-0001.nii.gz``) were replaced, a real dataset lost. An
    interrupted earlier run (subjects, no labels.csv or record yet) is rewritten."""
    import json

    record = out_dir / files[1] if len(files) > 1 else None
    ours = False
    if record is not None and record.is_file():
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
            ours = isinstance(data, dict) and str(data.get("generator", "")).startswith(
                "meshpar.data.")
        except (OSError, UnicodeDecodeError, ValueError):
            ours = False
    if ours:
        return
    theirs = [name for name in files if (out_dir / name).is_file()]
    if theirs:
        why = (f"its {record.name} is not the record data synth writes"
               if record is not None and record.exists() else
               f"no {record.name if record is not None else 'record'} of data synth beside it")
        raise FileExistsError(
            f"{out_dir} holds {' and '.join(theirs)} that `meshpar data synth` did not write "
            f"({why}): --force replaces only an earlier synthetic dataset's files, so "
            "these are kept (give another --out, or remove them)")


def subject_file(i: int, n: int) -> str:
    """The file name of subject ``i`` (1 to ``n``) of ``n``: ``sub-0001.nii.gz``
    (more digits when ``n`` has more); "" for an ``i`` out of that range."""
    return f"sub-{i:0{max(4, len(str(n)))}d}.nii.gz" if 1 <= i <= n else ""


def _number(name: str) -> int:
    """``sub-0012.nii.gz`` -> 12 (0 when it names no number)."""
    digits = name[len("sub-"):-len(".nii.gz")]
    return int(digits) if digits.isdigit() else 0


#: Peak memory of drawing and saving one phantom, per voxel: the growth of the peak
#: resident size of ``write_dataset`` from a 128^3 to a 192^3 grid (48 B; float64
#: fields and masks, the float32 image, its compression), on this repository's host.
PHANTOM_BYTES_PER_VOXEL = 48
#: Bytes on disk per voxel of a subject file: float32, which gzip barely shrinks on
#: noisy phantoms (3.6 B a voxel at 32^3 to 192^3), counted whole; and its header.
FILE_BYTES_PER_VOXEL, FILE_HEADER_BYTES = 4, 352


def _available_memory():
    """Bytes of memory available to a new allocation (``MemAvailable``), or None when
    the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def bytes_text(nbytes: float) -> str:
    """``nbytes`` in MiB, GiB, TiB or PiB, three digits ("1.21 GiB")."""
    for power, unit in ((50, "PiB"), (40, "TiB"), (30, "GiB")):
        if nbytes >= 2 ** power or unit == "GiB" and nbytes >= 2 ** 29:
            return f"{nbytes / 2 ** power:.3g} {unit}"
    return f"{nbytes / 2 ** 20:.3g} MiB"


def check_room(out_dir: Path, n: int, shape: Sequence[int]) -> None:
    """Before anything is written: ValueError when one subject of ``shape`` needs more
    memory than is available while it is drawn (:data:`PHANTOM_BYTES_PER_VOXEL`), or the
    ``n`` subject files more disk than is free where ``out_dir`` goes (their float32
    size, :data:`FILE_BYTES_PER_VOXEL`; files of this dataset already there, which
    ``force`` replaces, count as free). Both were found only after the work: the
    system's out-of-memory killer ended the process without a word, and a full disk
    stopped it with a traceback, subjects later."""
    import shutil

    voxels = math.prod(int(s) for s in shape)
    grid = "x".join(str(int(s)) for s in shape)
    need = PHANTOM_BYTES_PER_VOXEL * voxels
    available = _available_memory()
    if available is not None and need > available:
        raise ValueError(f"a {grid} subject needs about {bytes_text(need)} of memory while it is "
                         f"drawn ({PHANTOM_BYTES_PER_VOXEL} bytes a voxel), more than the "
                         f"{bytes_text(available)} available; use a smaller shape")
    disk = n * (FILE_BYTES_PER_VOXEL * voxels + FILE_HEADER_BYTES)
    where = Path(out_dir).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:  # no answer: the write says
        return
    subjects = Path(out_dir) / "subjects"
    if disk > free and subjects.is_dir():  # what --force replaces is freed as it goes
        free += sum(p.stat().st_size for p in subjects.glob("sub-*.nii.gz")
                    if p.is_file() and p.name == subject_file(_number(p.name), n))
    if disk > free:
        raise ValueError(f"{n} subjects of {grid} need about {bytes_text(disk)} on disk (float32, "
                         f"{FILE_BYTES_PER_VOXEL} bytes a voxel), more than the {bytes_text(free)} "
                         f"free under {where}; write fewer or smaller subjects, or elsewhere")
