"""Read the files of an ADNI-style NIfTI dataset: ``labels.csv`` into
:class:`~meshpar.data.types.Subject` records, and one NIfTI file into a checked
float32 :class:`~meshpar.data.types.Volume` (the header first, cheaply; the
voxels when the subject is loaded).

Bad data raise :class:`~meshpar.data.types.BadSubjectError` (a ``ValueError``)
naming the file, or :class:`~meshpar.data.types.BadLabelsError` for the labels
file; with ``skip_bad`` a bad labels row is logged and listed instead. The
dataset built on them is :class:`meshpar.data.nifti.NiftiDataset`.
"""
from __future__ import annotations

import csv
import logging
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from meshpar.core.splits import integer_at_least, true_or_false
from meshpar.data.types import (BadDataError, BadLabelsError, BadSubjectError, PathLike, Skipped,
                                Subject, Volume)

log = logging.getLogger(__name__)

NIFTI_SUFFIXES = (".nii.gz", ".nii")
LABELS_FILE = "labels.csv"


# --------------------------------------------------------------------------- labels


def _find_column(header: Sequence[str], name: str) -> Optional[int]:
    lowered = [h.strip().lower() for h in header]
    return lowered.index(name.lower()) if name.lower() in lowered else None


def _resolve(directory: Path, name: str) -> Path:
    path = Path(name) if Path(name).is_absolute() else directory / name
    # a folder of that name (sub-01/ beside sub-01.nii.gz) is not the subject's file
    if path.is_file() or name.endswith(NIFTI_SUFFIXES):
        return path
    for suffix in NIFTI_SUFFIXES:
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            return candidate
    return path


def _strip_nifti_suffix(name: str) -> str:
    for suffix in NIFTI_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def read_labels(
    directory: PathLike,
    label_set: Optional[Sequence[str]] = None,
    *,
    labels_file: str = LABELS_FILE,
    subject_column: str = "subject",
    label_column: str = "label",
    group_column: str = "group",
    id_column: str = "subject_id",
    check_files: bool = True,
    skip_bad: bool = False,
    skipped: Optional[List[Skipped]] = None,
) -> List[Subject]:
    """Parse ``directory/labels.csv`` into :class:`Subject` records.

    Column names are matched case-insensitively. Raises
    :class:`BadLabelsError` if the file is missing, has no ``subject`` or
    ``label`` column, is empty, names a file twice, holds a cell that runs over
    lines (a quote left open) or a NUL byte, or gives scans without a ``subject_id``
    one file name (their default person) but two labels. A row whose label is not
    in ``label_set`` or (with ``check_files``) whose file does not exist raises
    :class:`BadSubjectError`; with ``skip_bad`` the row is left out, logged and
    appended to ``skipped``. ValueError / TypeError for a ``label_set`` that is a
    string (it was read letter by letter: label 'NC' not in ('N', 'C', ',', 'A', 'D')) or
    switches that are not True or False (skip_bad="no" skipped in silence).
    """
    if isinstance(label_set, (str, bytes)):
        raise ValueError(f"label_set must be a sequence of names, e.g. ('NC', 'AD'), got "
                         f"{label_set!r}")
    check_files = true_or_false(check_files, "check_files")
    skip_bad = true_or_false(skip_bad, "skip_bad")
    directory = Path(directory)
    csv_path = directory / labels_file
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory}: not a directory (give the dataset directory, "
                                 f"the one holding {labels_file})")
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: dataset directory does not exist")
    if csv_path.is_dir():
        raise BadLabelsError(csv_path, "is a directory, not the labels CSV file")
    if not csv_path.is_file():
        raise BadLabelsError(csv_path, f"no {labels_file} in the dataset directory")
    rows = _csv_rows(csv_path)
    if not rows:
        raise BadLabelsError(csv_path, "is empty (expected a header with 'subject' and 'label')")
    header = rows[0][2]
    lowered = [h.strip().lower() for h in header]
    for name in (subject_column, label_column, group_column, id_column):
        times = lowered.count(name.lower())
        if times > 1:  # the first was read, in silence
            raise BadLabelsError(csv_path, f"column {name!r} appears {times} times in the "
                                           "header; give it once")
    columns = {}
    for key, name in (("subject", subject_column), ("label", label_column)):
        columns[key] = _find_column(header, name)
    missing = [name for key, name in (("subject", subject_column), ("label", label_column)) if columns[key] is None]
    if missing:
        other = next((sep for sep in (";", "\t", "|") if len(header) == 1 and sep in header[0]),
                     None)  # a spreadsheet's export in another locale: one column
        hint = f" (columns separated by {other!r}? labels.csv takes commas)" if other else ""
        raise BadLabelsError(
            csv_path, f"missing column(s) {', '.join(repr(m) for m in missing)}; has "
                      f"{[h.strip() for h in header]}{hint}")
    group_idx = _find_column(header, group_column)
    id_idx = _find_column(header, id_column)
    if len(rows) == 1:
        raise BadLabelsError(csv_path, "has a header but no subjects")
    label_set = None if label_set is None else tuple(label_set)

    subjects: List[Subject] = []
    seen = {}
    named_by_file = set()  # lines whose person is their file name (no subject_id given)
    for line, last, row in rows[1:]:
        cells = [c.strip() for c in row] + [""] * (len(header) - len(row))
        _check_cells(csv_path, line, last, cells, [
            ("subject", columns["subject"]), ("label", columns["label"]),
            ("group", group_idx), ("subject_id", id_idx)])
        name = cells[columns["subject"]]
        label = cells[columns["label"]]
        if not name:
            raise BadLabelsError(csv_path, f"line {line}: empty subject")
        path = _resolve(directory, name)
        key = os.path.realpath(path)  # one file under two spellings (../, absolute, a link)
        if key in seen:
            raise BadLabelsError(csv_path, f"line {line}: {name!r} is already listed on line "
                                           f"{seen[key]} (the same file)")
        seen[key] = line
        group = cells[group_idx] if group_idx is not None and cells[group_idx] else None
        subject_id = cells[id_idx] if id_idx is not None and cells[id_idx] else _strip_nifti_suffix(Path(name).name)
        try:
            if label_set is not None and label not in label_set:
                raise BadSubjectError(
                    path, f"label {label!r} ({labels_file} line {line}) is not in the label set "
                          f"{label_set}{_case_hint(label, label_set)}")
            if check_files and path.is_dir():
                raise BadSubjectError(path, f"named in {labels_file} line {line} is a directory, "
                                            "not a file")
            if check_files and not path.is_file():
                raise BadSubjectError(path, f"file named in {labels_file} line {line} does not "
                                            f"exist{_dangling(path)}")
        except BadSubjectError as err:
            if not skip_bad:
                raise
            note_skip(skipped, err)
            continue
        subjects.append(Subject(path, label, group, subject_id, line))
        if id_idx is None or not cells[id_idx]:
            named_by_file.add(line)
    _refuse_one_file_name_two_labels(csv_path, directory, subjects, named_by_file)
    return subjects


def _refuse_one_file_name_two_labels(csv_path: Path, directory: Path, subjects, named_by_file):
    """BadLabelsError when scans without a ``subject_id`` share a file name (the default
    person id) but not a label: ``AD/001.nii.gz`` and ``NC/001.nii.gz``, or every
    ``sub-XX/T1.nii.gz`` of a dataset, were taken as one person's scans in silence (one
    person of every subject: no validation split, 'k=5 folds need at least 5 people')."""
    first = {}
    for s in subjects:
        if s.line not in named_by_file:
            continue
        other = first.setdefault(s.subject_id, s)
        if other.label != s.label:
            def where(x):
                return f"line {x.line}: {os.path.relpath(x.path, directory)} ({x.label})"
            raise BadLabelsError(csv_path, f"{where(s)} and {where(other)} have one file name, "
                                           "so without a subject_id they are one person's "
                                           "scans, with two labels; give labels.csv a "
                                           "subject_id column (one id per person)")


def _csv_rows(csv_path: Path) -> List[Tuple[int, int, List[str]]]:
    """The rows of ``csv_path`` that hold anything, each with the lines of the file it
    starts and ends on (a row's place was counted among the rows left once blank lines
    were dropped: a row after a blank line was named by the line above it). A quoted
    cell may follow its comma's space."""
    rows = []
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            # 'a, "b c"': the quotes after the space are quotes (they stayed in the name)
            reader = csv.reader(fh, skipinitialspace=True)
            end = 0
            for row in reader:
                start, end = end + 1, reader.line_num
                if any(cell.strip() for cell in row):
                    rows.append((start, end, row))
    except UnicodeDecodeError as err:
        raise BadLabelsError(csv_path, _not_utf8(csv_path, err)) from err
    except (OSError, csv.Error) as err:
        raise BadLabelsError(csv_path, f"cannot be read as CSV: {err}") from err
    return rows


def _not_utf8(csv_path: Path, err: UnicodeDecodeError) -> str:
    """What is wrong with a labels file that is not UTF-8: UTF-16 (Windows PowerShell's
    ``>`` writes it; Excel's 'Unicode Text'), or the line of the first byte that is not
    UTF-8 (Latin-1 'é'). Python's own 'can't decode byte 0xff in position 0' named
    neither, and its position counted within a chunk of the file, not from its start."""
    raw = csv_path.read_bytes()
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return ("is UTF-16 text (it starts with a UTF-16 byte-order mark): save it as "
                "UTF-8 (labels.csv is read as UTF-8)")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as whole:
        line = raw[:whole.start].count(b"\n") + 1
        return (f"line {line} is not UTF-8 text (byte 0x{raw[whole.start]:02x}): saved in "
                "another encoding (Latin-1?); save it as UTF-8")
    return f"cannot be read as CSV: {err}"


def _check_cells(csv_path: Path, line: int, last: int, cells: Sequence[str], columns) -> None:
    """BadLabelsError for a cell of a row (lines ``line``-``last``) that no file name or
    label holds: a line break (a quote left open swallowed the rows after it into one
    cell: with skip_bad they were one 'bad subject', the others gone unnamed) or a NUL
    byte (Python's 'embedded null byte', naming no file or line)."""
    for what, index in columns:
        cell = cells[index] if index is not None else ""
        if "\n" in cell or "\r" in cell:
            raise BadLabelsError(csv_path, f"line {line}: the {what} cell runs on to line "
                                           f"{last} ({cell[:60]!r}...): is a quote left open?")
        if "\x00" in cell:
            raise BadLabelsError(csv_path, f"line {line}: the {what} cell holds a NUL byte "
                                           f"({cell!r}); is labels.csv a text file?")


def _case_hint(label: str, label_set: Sequence[str]) -> str:
    """'; 'AD' differs only in case' when ``label`` is a name of the set in other letters
    ('ad', 'Ad': labels are matched exactly, so every such row was 'not in the set')."""
    same = [name for name in label_set if name.casefold() == label.casefold()]
    return f"; {same[0]!r} differs only in case (labels match exactly)" if same else ""


def _dangling(path: Path) -> str:
    """', a link to TARGET, which is not there' for a link whose target is gone (the
    name is in the directory listing, so 'does not exist' alone read as wrong)."""
    if not path.is_symlink():
        return ""
    return f" (a link to {os.readlink(path)}, which is not there)"


def note_skip(skipped: Optional[list], err: BadDataError) -> None:
    """Log a bad subject left out (``skip_bad``) and list it in ``skipped`` if given."""
    log.warning("skipping bad subject %s", err)
    if skipped is not None:
        skipped.append(Skipped(err.path, err.problem))


# --------------------------------------------------------------------------- volumes


def _spatial_shape(shape: Sequence[int]) -> Optional[Tuple[int, int, int]]:
    """The 3-D shape if ``shape`` is one volume (trailing singleton axes allowed)."""
    shape = tuple(int(s) for s in shape)
    while len(shape) > 3 and shape[-1] == 1:
        shape = shape[:-1]
    if len(shape) != 3 or min(shape) < 2:
        return None
    return shape


def _channel_shape(shape: Sequence[int], channels: int) -> Optional[Tuple[int, ...]]:
    """The array shape of ``channels`` co-registered volumes, channels last
    (``(X, Y, Z, C)``; a 5-D ``(X, Y, Z, 1, C)`` file too), or None."""
    shape = tuple(int(s) for s in shape)
    extra = [s for s in shape[3:] if s != 1]
    if len(shape) < 4 or min(shape[:3]) < 2 or extra != [channels]:
        return None
    return shape[:3] + (channels,)


def check_header(path: PathLike, channels: int = 1):
    """Open ``path`` with nibabel and check what the header alone can tell.

    Returns the nibabel image (data not read). Raises :class:`BadSubjectError`
    for an unreadable file, a shape that is not one 3-D volume (with
    ``channels`` > 1: not ``channels`` volumes, channels last), a non-numeric
    data type, a singular affine, or an uncompressed file shorter than its
    header promises.
    """
    import nibabel as nib

    channels = integer_at_least(channels, "channels")  # 2.0 was range()'s TypeError, True 1
    path = Path(path)
    if not path.is_file():
        raise BadSubjectError(path, f"file does not exist{_dangling(path)}")
    try:
        img = nib.load(str(path))
    except MemoryError:
        raise
    except Exception as err:  # nibabel raises many types for corrupt files
        raise BadSubjectError(path, f"cannot be read as NIfTI ({type(err).__name__}: {err})"
                                    f"{_misnamed(path)}") from err
    shape = img.shape
    if channels != 1:
        if _channel_shape(shape, channels) is None:
            raise BadSubjectError(path, f"has shape {shape}, expected {channels} channels: "
                                        f"(X, Y, Z, {channels}) with X, Y, Z >= 2")
    elif _spatial_shape(shape) is None:
        if len(shape) >= 4:
            volumes = int(np.prod(shape[3:]))
            problem = f"has shape {shape}: {volumes} volumes, expected one 3-D volume"
            # (X, Y, Z, C) of a few C: modalities? (not a time series of 200 volumes)
            if volumes <= 16 and _channel_shape(shape, volumes) is not None:
                problem += (f" ({volumes} co-registered channels of one subject? --channels "
                            f"{volumes} reads them; channels={volumes} in the API)")
        else:
            problem = f"has shape {shape}: expected a 3-D volume (each axis at least 2 voxels)"
        raise BadSubjectError(path, problem)
    dtype = img.get_data_dtype()
    if dtype.kind not in "biuf":
        raise BadSubjectError(path, f"has data type {dtype}, expected a numeric scalar type")
    affine = stored_affine(img)
    if affine is None or not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise BadSubjectError(path, "has a singular or non-finite affine (bad voxel sizes or orientation)")
    data_file = _uncompressed_data_file(img)
    if data_file is not None and hasattr(img.dataobj, "offset"):
        expected = int(img.dataobj.offset) + int(np.prod(shape)) * dtype.itemsize
        actual = data_file.stat().st_size
        if actual < expected:
            where = "" if data_file == path else f" (its voxels, in {data_file.name})"
            raise BadSubjectError(path, f"is truncated{where}: {actual} bytes, header "
                                        f"promises {expected}")
    return img


def _misnamed(path: Path) -> str:
    """'; it is gzip-compressed: name it .nii.gz' for a gzip file named .nii (nibabel's
    'Cannot work out file type'), '; it is not gzip-compressed: name it .nii' for a
    NIfTI-1/2 file named .nii.gz ('is not a gzip file'); empty otherwise."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(348)
    except OSError:
        return ""
    name = path.name.lower()
    if head[:2] == b"\x1f\x8b" and name.endswith(".nii"):
        return "; it is gzip-compressed: name it .nii.gz"
    nifti = len(head) >= 348 and head[344:347] in (b"n+1", b"ni1", b"n+2", b"ni2")
    nifti2 = head[4:7] in (b"n+2", b"ni2")  # NIfTI-2 keeps its magic at byte 4
    if name.endswith(".nii.gz") and head[:2] != b"\x1f\x8b" and (nifti or nifti2):
        return "; it is not gzip-compressed: name it .nii"
    return ""


def _uncompressed_data_file(img) -> Optional[Path]:
    """The file holding ``img``'s voxels when it is stored uncompressed, else None.

    The voxels of a ``.hdr``/``.img`` pair are in the ``.img`` (the ``.hdr`` was
    measured: every pair was 'truncated: 348 bytes'), and ``.nii.bz2``, ``.mgz`` or
    ``.NII.GZ`` are compressed as nibabel reads them (their size says nothing of the
    voxels; only ``.gz`` was known)."""
    from nibabel.openers import ImageOpener

    holder = getattr(img, "file_map", {}).get("image")
    name = getattr(holder, "filename", None)
    if not name or not hasattr(img, "dataobj"):
        return None
    compressed = tuple(ext for ext in ImageOpener.compress_ext_map if ext)
    if str(name).lower().endswith(compressed):
        return None
    return Path(name)


def load_volume(path: PathLike, channels: int = 1) -> Volume:
    """Load one NIfTI file as a float32 :class:`Volume`, checking its voxels.

    With ``channels`` > 1 the data are ``(X, Y, Z, channels)``. The affine is
    :func:`stored_affine`'s: a NIfTI file whose header gives no orientation is read
    as stored, not mirrored. A truncated or
    corrupt compressed stream, NaN or infinite voxels raise
    :class:`BadSubjectError` naming ``path``.
    """
    path = Path(path)
    img = check_header(path, channels)
    affine = stored_affine(img)
    try:
        with np.errstate(over="ignore"):  # values beyond float32: named below, not warned
            data = np.asarray(img.dataobj, dtype=np.float32)
    except MemoryError:
        raise
    except Exception as err:  # EOFError, zlib.error, OSError, ValueError for damaged files
        raise BadSubjectError(path, f"voxel data cannot be read ({type(err).__name__}: {err})") from err
    data = data.reshape(_spatial_shape(data.shape) if channels == 1
                        else _channel_shape(data.shape, channels))
    bad = ~np.isfinite(data)
    if bad.any():
        raise BadSubjectError(path, _non_finite_problem(img, int(bad.sum()), data.size))
    return Volume(data, affine, path)


def orientation_unknown(img) -> bool:
    """Whether ``img`` is a NIfTI image whose header gives no orientation: its
    ``qform_code`` and ``sform_code`` are both 0 (an Analyze ``.hdr``/``.img`` pair,
    which has no such codes, is not)."""
    import nibabel as nib

    if not isinstance(img, (nib.Nifti1Pair, nib.Nifti2Pair)):
        return False
    header = img.header
    return int(header["qform_code"]) == 0 and int(header["sform_code"]) == 0


def stored_affine(img) -> np.ndarray:
    """The voxel-to-world affine meshpar reads ``img`` with (float64 4x4).

    ``img.affine`` when the header gives an orientation. A NIfTI file without one
    (:func:`orientation_unknown`) is read as stored: the voxel axes i, j, k as x, y, z
    scaled by the voxel sizes (the NIfTI standard's method 1), so re-orienting
    leaves it as it is. nibabel's own affine for such a file is Analyze's,
    x flipped, and every such volume was mirrored left to right by the re-orienting
    step, in silence. A header whose space unit is metres or microns is scaled to
    millimetres (nibabel leaves the unit as it is: a 2 mm voxel stored as 0.002 m was
    resampled by ``spacing`` in mm to one voxel a side, padded to the grid).
    """
    if not orientation_unknown(img):
        affine = np.array(img.affine, dtype=np.float64)
    else:
        zooms = np.abs(np.asarray(img.header.get_zooms()[:3], dtype=np.float64))
        affine = np.diag(np.append(zooms, 1.0))
    affine[:3] *= _MM_PER_UNIT.get(_space_unit(img), 1.0)
    return affine


#: millimetres per NIfTI space unit (``xyzt_units``); 'mm' and 'unknown' are read as mm
_MM_PER_UNIT = {"meter": 1000.0, "micron": 0.001}


def _space_unit(img) -> str:
    """The NIfTI header's space unit ('mm', 'meter', 'micron', 'unknown'); 'unknown' for
    a header without one (Analyze)."""
    units = getattr(img.header, "get_xyzt_units", None)
    return units()[0] if units is not None else "unknown"


def _non_finite_problem(img, bad: int, size: int) -> str:
    """What is wrong with a volume that has ``bad`` non-finite voxels as float32: NaN or
    infinite in the file, or finite values beyond float32's range (1e300 in a float64
    file was said to be 'NaN or infinite', which the file did not hold)."""
    raw = np.asanyarray(img.dataobj)  # the file's own type (read again: errors only)
    in_file = int(np.count_nonzero(~np.isfinite(raw))) if raw.dtype.kind == "f" else 0
    if in_file == bad:
        return f"{bad} of {size} voxels are NaN or infinite"
    largest = float(np.nanmax(np.abs(raw[np.isfinite(raw)])))
    return (f"{bad - in_file} of {size} voxels are beyond float32's range (largest "
            f"magnitude {largest:.3g}; rescale the volume)"
            + (f", {in_file} more are NaN or infinite" if in_file else ""))
