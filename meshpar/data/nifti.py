"""Read ADNI-style NIfTI datasets: a directory of ``.nii``/``.nii.gz`` files plus ``labels.csv``.

Layout::

    DIR/labels.csv          subject,label[,group][,subject_id]
    DIR/<subject>           e.g. subjects/sub-0001.nii.gz (path relative to DIR)

``subject`` names the file (a name without a NIfTI suffix also finds
``name.nii.gz`` or ``name.nii``); ``label`` must be in the label set (its index
is the class); ``group`` (e.g. sMCI/pMCI) is optional and used for stratified
splits (:mod:`meshpar.data.cohorts`); ``subject_id`` is optional and keeps all
scans of one person on the same side of a train/validation split (default:
the file name; scans of one file name and two labels, ``AD/001.nii.gz`` and
``NC/001.nii.gz``, are refused: give them ids).

Each loaded :class:`Volume` (array + affine + file name) goes through a
pre-processing chain from :mod:`meshpar.data.transforms` (by default
:func:`~meshpar.data.transforms.default_transform`: reorient, resample,
z-score, augment).

Bad data raise :class:`BadSubjectError` (a ``ValueError``) naming the file:
missing file, unreadable/corrupt/truncated file, wrong number of dimensions,
NaN/inf voxels, a constant image, a label outside the label set. Cheap checks
(labels, file existence, headers) run when a :class:`NiftiDataset` is built;
voxel content is checked lazily when a subject is loaded. With
``skip_bad=True`` bad subjects are logged, counted in
:attr:`NiftiDataset.skipped` and left out instead.

Reading one file (labels, headers, voxels) lives in :mod:`meshpar.data.nifti_files`.
TensorFlow is imported only by :func:`make_tf_dataset` / :meth:`NiftiDataset.to_tf`.
"""
from __future__ import annotations

import copy
import functools
import logging
import math
import numbers
import os
import threading
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from meshpar.core.splits import true_or_false
from meshpar.data.transforms import Compose, default_transform
# load_volume and read_labels stay importable from here (their home before nifti_files)
from meshpar.data.nifti_files import (check_header, load_volume, note_skip, orientation_unknown,
                                      read_labels)
from meshpar.data.types import BadDataError, BadSubjectError, PathLike, Skipped, Subject, Volume

log = logging.getLogger(__name__)
#: the warning of files without an orientation (a command that says it itself quiets it)
orientation_log = logging.getLogger(__name__ + ".orientation")

#: Pre-processed examples kept in memory by default (see NiftiDataset's cache_bytes).
DEFAULT_CACHE_BYTES = 512 * 2**20


# --------------------------------------------------------------------------- dataset


def _subject_seed(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step)])


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Subject indices for one epoch: a permutation drawn from ``(seed, epoch)``."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), 7]).permutation(n)


class NiftiDataset:
    """Subjects of a NIfTI directory with their pre-processing; loads one at a time.

    Parameters
    ----------
    directory : path
        Holds ``labels.csv`` and the NIfTI files.
    shape : 3 ints
        The model's input grid; every example is ``float32 [*shape, channels]``.
    label_set : names
        Class names; a label's index is its class id.
    spacing : float or 3 floats, optional
        Resample to this voxel size (mm) then crop/pad, instead of straight to ``shape``.
    transform : callable, optional
        Replaces :func:`default_transform` (``Volume [, rng] -> Volume``).
    skip_bad : bool
        Leave bad subjects out (logged, listed in :attr:`skipped`) instead of raising.
    subjects : list of Subject, optional
        Use these (e.g. one side of :func:`split_subjects`) instead of reading labels.csv;
        each file once (ValueError otherwise).
    check_headers : bool
        Open every file's header now, so bad files fail before training starts.
    cache_bytes : int
        Keep pre-processed examples in memory, up to this many bytes (default
        512 MiB; 0 turns it off), so later epochs skip reading and
        pre-processing. Augmented loads (``rng`` given) keep only the output
        of the steps before the first random one (re-orient, resample) and
        compute the rest afresh.
    channels : int
        Volumes per subject: 1 (a 3-D file) or C co-registered modalities in
        one 4-D file, channels last. Each channel goes through ``transform``
        on its own (z-scored on its own) with the same random draws, so an
        augmentation moves every channel alike.

    Example
    -------
    >>> ds = NiftiDataset("phantoms", shape=(32, 32, 32))          # doctest: +SKIP
    >>> x, y = ds[0]; x.shape, y                                   # doctest: +SKIP
    ((32, 32, 32, 1), 1)
    """

    def __init__(
        self,
        directory: PathLike,
        shape: Sequence[int] = (32, 32, 32),
        label_set: Sequence[str] = ("NC", "AD"),
        *,
        spacing=None,
        transform: Optional[Callable] = None,
        skip_bad: bool = False,
        subjects: Optional[Sequence[Subject]] = None,
        check_headers: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        channels: int = 1,
    ):
        self.directory = Path(directory)
        self.channels = _whole_at_least(channels, 1, "channels")
        # a switch must be one: skip_bad="no" skipped bad subjects in silence
        skip_bad = true_or_false(skip_bad, "skip_bad")
        check_headers = true_or_false(check_headers, "check_headers")
        self.cache_bytes = _whole_at_least(cache_bytes, 0, "cache_bytes")  # 1.5 was cut to 1
        self._cache: dict = {}  # index -> (example, class id), deterministic loads only
        self._fixed_cache: dict = {}  # index -> channel volumes after the non-random steps
        # a string is not three sizes (nor "NCAD" the labels N, C, A, D); 8.5 is not cut to 8
        if isinstance(shape, (str, bytes)) or len(shape) != 3 or not all(
                _is_whole(s) and s >= 1 for s in shape):
            raise ValueError(f"shape must be three positive sizes, got {shape!r}")
        self.shape = tuple(int(s) for s in shape)
        names = () if isinstance(label_set, (str, bytes)) else tuple(label_set)
        if not names or len(set(names)) != len(names) or not all(
                isinstance(x, str) and x for x in names):
            raise ValueError(f"label set must be non-empty names without repeats, got {label_set!r}")
        self.label_set = names
        if spacing is not None and not all(  # was a TF error at the first batch
                isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < math.inf
                for v in np.ravel(np.asarray(spacing, dtype=object))):
            raise ValueError(f"spacing must be finite voxel sizes > 0 (mm), got {spacing!r}")
        self.skip_bad = skip_bad
        # was "'str' object is not callable" at the first load, naming nothing
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable (a Transform or Compose of "
                            f"meshpar.data.transforms) or None, got {transform!r}")
        self.transform = transform if transform is not None else default_transform(self.shape, spacing)
        self._skipped: dict = {}
        self._lock = threading.Lock()
        self._usable_known = {}  # subject index -> whether its voxels load
        found: List[Skipped] = []
        given = subjects is not None
        if subjects is None:
            subjects = read_labels(self.directory, self.label_set, skip_bad=skip_bad, skipped=found)
        else:
            subjects = self._check_given(subjects, found)
        for item in found:
            self._skipped[item.path] = item.reason
        #: files whose header gives no orientation (read as stored; see stored_affine)
        self.unoriented: List[Path] = []
        if check_headers:
            subjects = [s for s in subjects if self._header_ok(s)]
            self._note_unoriented(len(subjects))
        self.subjects: List[Subject] = list(subjects)
        if not self.subjects:
            # name one reason: with --skip-bad every subject of the part may have
            # failed for the same cause (e.g. 3-D volumes read with --channels 2)
            first = next(iter(self._skipped.items()), None)
            why = f"; first: {Path(first[0]).name}: {first[1]}" if first else ""
            among = "of the subjects given" if given else "in labels.csv"
            raise BadDataError(self.directory, f"no usable subjects {among} "
                                               f"({len(self._skipped)} skipped as bad{why})")

    def _check_given(self, subjects: Sequence[Subject], found: List[Skipped]) -> List[Subject]:
        if isinstance(subjects, (str, bytes)) or not all(
                hasattr(s, "label") and hasattr(s, "path") for s in subjects):
            raise TypeError(f"subjects must be Subjects (of read_labels or split_subjects), "
                            f"got {subjects!r}")
        kept, seen = [], {}
        for s in subjects:
            # one file twice (two splits joined that overlap) was two examples an epoch,
            # in silence; read_labels refuses it in labels.csv
            key = os.path.realpath(s.path)
            if key in seen:
                raise ValueError(f"subjects lists {s.path} twice (as {seen[key]} before): "
                                 "give each file once")
            seen[key] = s.path
            try:
                if s.label not in self.label_set:
                    raise BadSubjectError(s.path, f"label {s.label!r} is not in the label set {self.label_set}")
            except BadSubjectError as err:
                if not self.skip_bad:
                    raise
                note_skip(found, err)
                continue
            kept.append(s)
        return kept

    def _header_ok(self, subject: Subject) -> bool:
        try:
            img = check_header(subject.path, self.channels)
        except BadSubjectError as err:
            if not self.skip_bad:
                raise
            self._record_skip(err)
            return False
        if orientation_unknown(img):
            self.unoriented.append(Path(subject.path))
        return True

    def _note_unoriented(self, checked: int) -> None:
        """One warning for the files of :attr:`unoriented` (of ``checked``)."""
        if self.unoriented:
            orientation_log.warning("%s", unoriented_note(self.unoriented, checked))

    def _record_skip(self, err: BadDataError) -> None:
        with self._lock:
            if err.path in self._skipped:
                return
            self._skipped[err.path] = err.problem
        log.warning("skipping bad subject %s", err)

    @property
    def skipped(self) -> List[Skipped]:
        """Subjects left out as bad so far (grows as voxel content is read)."""
        with self._lock:
            return [Skipped(p, r) for p, r in self._skipped.items()]

    @property
    def n_skipped(self) -> int:
        """Number of subjects in :attr:`skipped` (left out as bad so far)."""
        with self._lock:
            return len(self._skipped)

    def __len__(self) -> int:
        return len(self.subjects)

    def __repr__(self) -> str:
        return (f"NiftiDataset({str(self.directory)!r}, {len(self)} subjects, shape={self.shape}, "
                f"labels={self.label_set}, skipped={self.n_skipped})")

    def class_counts(self) -> dict:
        """Label name -> number of subjects, every name of ``label_set`` included."""
        counts = {name: 0 for name in self.label_set}
        for s in self.subjects:
            counts[s.label] += 1
        return counts

    def label_index(self, subject: Subject) -> int:
        """Class id of ``subject``: the position of its label in ``label_set``."""
        return self.label_set.index(subject.label)

    def load(self, index: int, rng: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, int]:
        """Pre-processed example ``index``: ``(float32 [*shape, channels], class id)``.

        ``rng`` turns on the random (augmentation) steps. Raises
        :class:`BadSubjectError` for bad voxel content, whatever ``skip_bad``.
        """
        if rng is None and index in self._cache:
            return self._cache[index]
        subject = self.subjects[index]
        fixed, rest = self._split_transform()
        if rng is not None and fixed is not None:  # augmenting: reuse the fixed steps' output
            volumes = self._fixed_volumes(index, fixed)
        else:
            volumes, rest = self._channel_volumes(load_volume(subject.path, self.channels)), \
                self.transform
        # the same draws for every channel: copies of one generator state
        data = np.stack([self._preprocess(rest, v, copy.deepcopy(rng)) for v in volumes], axis=-1)
        if not np.all(np.isfinite(data)):
            raise BadSubjectError(subject.path, "pre-processing produced NaN or infinite values")
        item = (data, self.label_index(subject))
        if rng is None and (len(self._cache) + 1) * data.nbytes <= self.cache_bytes:
            with self._lock:
                self._cache[index] = item
        return item

    def _channel_volumes(self, vol: Volume) -> List[Volume]:
        """One 3-D volume per channel."""
        if self.channels == 1:
            return [vol]
        return [vol.replace(data=vol.data[..., c]) for c in range(self.channels)]

    def _split_transform(self):
        """``(fixed, rest)``: the steps of a :class:`Compose` before its first random one,
        and the others; ``(None, transform)`` when there is no such prefix."""
        steps = list(getattr(self.transform, "transforms", []))
        if not isinstance(self.transform, Compose) or not steps:
            return None, self.transform
        k = next((i for i, t in enumerate(steps) if getattr(t, "random", False)), len(steps))
        return (Compose(steps[:k]), Compose(steps[k:])) if k else (None, self.transform)

    def _fixed_volumes(self, index: int, fixed) -> List[Volume]:
        """The channel volumes of ``index`` after the deterministic steps (re-orient,
        resample), kept in memory within ``cache_bytes`` so augmented epochs skip
        reading and resampling."""
        if index in self._fixed_cache:
            return self._fixed_cache[index]
        vol = load_volume(self.subjects[index].path, self.channels)
        volumes = [fixed(v) for v in self._channel_volumes(vol)]
        size = sum(v.data.nbytes for v in volumes)
        if (len(self._fixed_cache) + 1) * size <= self.cache_bytes:
            with self._lock:
                self._fixed_cache[index] = volumes
        return volumes

    def _preprocess(self, transform, vol: Volume, rng) -> np.ndarray:
        """One channel through ``transform``, checked to be ``shape``."""
        vol = transform(vol, rng) if getattr(transform, "random", False) else transform(vol)
        data = np.asarray(vol.data, dtype=np.float32)
        if data.shape != self.shape:
            raise ValueError(f"{vol.path}: pre-processing gave shape {data.shape}, expected {self.shape}")
        return data

    def __getitem__(self, index: int) -> Tuple[np.ndarray, int]:
        return self.load(index)

    def _load_or_skip(self, index: int, rng) -> Optional[Tuple[np.ndarray, int]]:
        try:
            return self.load(index, rng)
        except BadSubjectError as err:
            if not self.skip_bad:
                raise
            self._record_skip(err)
            return None

    def check_content(self) -> List[Skipped]:
        """Read every subject's voxels once now (instead of lazily while training).

        Raises the first :class:`BadSubjectError`, or with ``skip_bad`` records
        them all; returns :attr:`skipped`.
        """
        for index in range(len(self)):
            self._load_or_skip(index, None)
        return self.skipped

    def stream_element(self, examples: int, seed: int = 0, shuffle: bool = True) -> int:
        """The element number at which a :meth:`to_tf` stream (``repeat=True``, same
        ``seed`` and ``shuffle``) that has yielded ``examples`` examples goes on.

        Without ``skip_bad`` every element is an example: ``examples``. With it,
        the bad subjects the stream left out before then are counted too, so a
        run resumed (or chunked) at ``examples`` sees the examples an
        uninterrupted run would: the voxels of the subjects passed are read
        once (at most every subject, one epoch's reading; those this dataset
        has read already, streaming too, are not read again). BadDataError
        when no subject is usable.
        """
        examples = _whole_at_least(examples, 0, "examples")
        if not self.skip_bad or examples == 0:
            return examples
        n = len(self)
        good = 0
        first = self.epoch_subjects(seed, 0, shuffle)
        for pos in range(n):  # the first epoch: which subjects are usable, as met
            if self._usable(int(first[pos])):
                good += 1
                if good == examples:
                    return pos + 1
        usable = sum(self._usable(i) for i in range(n))  # every subject known by now
        if usable == 0:
            raise BadDataError(self.directory, f"no usable subjects ({self.n_skipped} "
                                               "skipped as bad)")
        epochs, left = divmod(examples - good - 1, usable)  # the last example's epoch
        epoch, left = 1 + epochs, left + 1
        order = self.epoch_subjects(seed, epoch, shuffle)
        for pos in range(n):
            left -= self._usable(int(order[pos]))
            if left == 0:
                return epoch * n + pos + 1
        raise AssertionError("unreachable: an epoch holds every usable subject")

    def epoch_subjects(self, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
        """Indices into :attr:`subjects` that epoch ``epoch`` of a stream visits.

        Shuffled: :func:`epoch_order` ``(n, seed, epoch)`` drawn over the subjects
        ranked by file (relative to :attr:`directory`), so one dataset whose
        labels.csv (or ``subjects``) lists them in another order streams the same
        examples; unshuffled: the order given."""
        order = epoch_order(len(self), seed, epoch, shuffle)
        if not shuffle:
            return order
        by_file = sorted(range(len(self)), key=lambda i: (
            os.path.relpath(self.subjects[i].path, self.directory), i))
        return np.asarray(by_file, dtype=np.int64)[order]

    def _usable(self, index: int) -> bool:
        """Whether subject ``index``'s voxels load (read once; with ``skip_bad`` a bad
        one is recorded in :attr:`skipped`)."""
        if index not in self._usable_known:
            path = self.subjects[index].path
            with self._lock:
                bad = path in self._skipped
            self._usable_known[index] = not bad and self._load_or_skip(index, None) is not None
        return self._usable_known[index]

    def examples(self, shuffle: bool = False, augment: bool = False, seed: int = 0,
                 epoch: int = 0) -> Iterator[Tuple[np.ndarray, int]]:
        """Iterate over one epoch, one subject in memory at a time (bad ones skipped if ``skip_bad``)."""
        n = len(self)
        for pos, index in enumerate(self.epoch_subjects(seed, epoch, shuffle)):
            rng = _subject_seed(seed, epoch * n + pos) if augment else None
            item = self._load_or_skip(int(index), rng)
            if item is not None:
                yield item

    def to_tf(
        self,
        batch_size: int,
        shuffle: bool = True,
        augment: bool = False,
        seed: int = 0,
        repeat: Union[bool, int] = False,
        drop_remainder: bool = False,
        num_parallel_calls: int = 2,
        prefetch: int = 2,
        start: int = 0,
    ):
        """A ``tf.data.Dataset`` of ``(float32 [B, *shape, channels], int32 [B])`` batches.

        Files are read and pre-processed on demand in ``num_parallel_calls``
        threads (``tf.numpy_function``), in a deterministic order: epoch ``e``
        visits the subjects in :meth:`epoch_subjects` ``(seed, e)`` (shuffled
        over the subjects ranked by file, whatever order they are listed in) and
        augmentation draws from ``(seed, element number)``. ``repeat``: False
        for one pass, True forever, an int for that many passes.

        A bad file met while streaming stops iteration with a TensorFlow error
        whose message contains the :class:`BadSubjectError` (naming the file);
        with ``skip_bad`` it is skipped and recorded in :attr:`skipped`.
        ``start`` is the first element number: a run resumed at global step
        ``g`` with batches of ``b`` passes ``g * b`` and sees the batches an
        uninterrupted run would when no subject is skipped (with ``skip_bad``,
        pass :meth:`stream_element` of the examples it has seen).
        """
        import tensorflow as tf

        batch_size = _whole_at_least(batch_size, 1, "batch_size")
        start = _whole_at_least(start, 0, "start")
        # shuffle="no" shuffled, augment="no" augmented: a switch must be one; seed "1" and
        # 1.5 were read as 1
        shuffle, augment = true_or_false(shuffle, "shuffle"), true_or_false(augment, "augment")
        drop_remainder = true_or_false(drop_remainder, "drop_remainder")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if num_parallel_calls != tf.data.AUTOTUNE:
            num_parallel_calls = _whole_at_least(num_parallel_calls, 1, "num_parallel_calls")
        n = len(self)
        if repeat is True:
            steps = tf.data.Dataset.range(start, 2**62)
        else:
            epochs = 1 if repeat is False else repeat
            if not _is_whole(epochs) or epochs < 1:  # 2.5 was cut to 2 passes
                raise ValueError(f"repeat must be True, False or a positive int, got {repeat!r}")
            epochs = int(epochs)
            left = n * epochs - min(start, n * epochs)
            if drop_remainder and left < batch_size:  # was an empty dataset, in silence
                raise ValueError(f"batch_size {batch_size} is more than the {left} examples "
                                 f"of {epochs} pass(es) from element {start}: with "
                                 "drop_remainder no whole batch is made (repeat, or give a "
                                 "smaller batch)")
            steps = tf.data.Dataset.range(min(start, n * epochs), n * epochs)
        shape = self.shape
        example_shape = shape + (self.channels,)

        @functools.lru_cache(maxsize=4)  # parallel calls straddle at most two epochs
        def order(epoch):
            return self.epoch_subjects(seed, epoch, shuffle)

        def load(step):
            step = int(step)
            epoch, pos = divmod(step, n)
            index = int(order(epoch)[pos])
            rng = _subject_seed(seed, step) if augment else None
            item = self._load_or_skip(index, rng)
            if self.skip_bad:  # what stream_element would read the file for
                self._usable_known.setdefault(index, item is not None)
            if item is None:
                return np.zeros(example_shape, np.float32), np.int32(-1), np.bool_(False)
            return item[0], np.int32(item[1]), np.bool_(True)

        def load_tf(step):
            x, y, ok = tf.numpy_function(load, [step], (tf.float32, tf.int32, tf.bool), stateful=True)
            x.set_shape(example_shape)
            y.set_shape(())
            ok.set_shape(())
            return x, y, ok

        ds = steps.map(load_tf, num_parallel_calls=num_parallel_calls, deterministic=True)
        if self.skip_bad:
            ds = ds.filter(lambda x, y, ok: ok)
        ds = ds.map(lambda x, y, ok: (x, y))
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
        return ds.prefetch(prefetch)


def unoriented_note(paths: Sequence[PathLike], checked: int) -> str:
    """What a dataset's files without an orientation (:attr:`NiftiDataset.unoriented`,
    of ``checked`` files) are read as, in one line."""
    mixed = (f"; the other {checked - len(paths)} give one and are re-oriented to RAS, so "
             "check that the two kinds agree" if checked > len(paths) else "")
    return (f"{len(paths)} of {checked} files have no orientation in their header "
            f"(qform_code and sform_code 0; first: {paths[0]}): read as stored, voxel axes "
            f"as x, y, z (NIfTI method 1), not flipped as nibabel's Analyze default would; "
            f"their left-right side is unknown{mixed}")


def _is_whole(x) -> bool:
    """Whether ``x`` is an integral number (numpy's too), not a bool, NaN or infinity."""
    return (isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
            and int(x) == x)


def _whole_at_least(value, least: int, what: str) -> int:
    """``value`` as an int; ValueError naming ``what`` unless a whole number >= ``least``
    (TensorFlow's 'Cannot convert 2.5 to EagerTensor' named nothing, true was 1)."""
    if not _is_whole(value) or value < least:
        raise ValueError(f"{what} must be a whole number >= {least}, got {value!r}")
    return int(value)


def make_tf_dataset(
    directory: Union[PathLike, NiftiDataset],
    shape: Optional[Sequence[int]] = None,
    batch_size: int = 2,
    label_set: Optional[Sequence[str]] = None,
    shuffle: bool = True,
    augment: bool = False,
    seed: int = 0,
    skip_bad: Optional[bool] = None,
    repeat: Union[bool, int] = False,
    *,
    spacing=None,
    subjects: Optional[Sequence[Subject]] = None,
    drop_remainder: bool = False,
    num_parallel_calls: int = 2,
    start: int = 0,
):
    """Stream a NIfTI directory through ``tf.data`` (see :meth:`NiftiDataset.to_tf`).

    Builds a :class:`NiftiDataset` (labels, files and headers are checked now;
    ``shape`` default 32^3, ``label_set`` default ``("NC", "AD")``) unless one is
    passed: then ``shape``, ``label_set``, ``skip_bad``, ``spacing`` and
    ``subjects`` are the dataset's own, and one given otherwise is a ValueError
    (it was ignored in silence). The whole set is never held in memory: each
    element is read from disk when the pipeline asks for it.

    Example
    -------
    >>> ds = make_tf_dataset("phantoms", (32, 32, 32), batch_size=4, augment=True)  # doctest: +SKIP
    >>> x, y = next(iter(ds)); x.shape, y.dtype                                      # doctest: +SKIP
    (TensorShape([4, 32, 32, 32, 1]), tf.int32)
    """
    if isinstance(directory, NiftiDataset):
        source = directory
        other = [name for name, given, own in (
            ("shape", shape, source.shape), ("label_set", label_set, source.label_set),
            ("skip_bad", skip_bad, source.skip_bad), ("spacing", spacing, object()),
            ("subjects", subjects, object())) if given is not None and (
                tuple(given) if isinstance(given, (list, tuple)) else given) != own]
        if other:
            raise ValueError(f"{', '.join(other)}: the NiftiDataset passed has its own; build "
                             "it with them (or pass its directory)")
    else:
        source = NiftiDataset(directory, (32, 32, 32) if shape is None else shape,
                              ("NC", "AD") if label_set is None else label_set,
                              spacing=spacing, skip_bad=False if skip_bad is None else skip_bad,
                              subjects=subjects)
    return source.to_tf(batch_size, shuffle=shuffle, augment=augment, seed=seed, repeat=repeat,
                        drop_remainder=drop_remainder, num_parallel_calls=num_parallel_calls,
                        start=start)
