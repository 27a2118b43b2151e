"""Pre-processing steps: small composable callables ``Volume -> Volume``.

A :class:`~meshpar.data.nifti.Volume` (array + affine + file name) goes
through a chain of steps composed with :class:`Compose`:

====================  ==========================================================
step                  what it does
====================  ==========================================================
:class:`Reorient`     to closest canonical orientation (RAS by default)
:class:`Resample`     to a target shape or voxel spacing (scipy.ndimage.zoom)
:class:`CropOrPad`    centre crop / pad to a shape
:class:`ZScore`       z-score with statistics from a head mask (Otsu)
:class:`RandomFlip`   augmentation; acts only when given a ``rng``
:class:`RandomShift`  augmentation: whole-voxel translation (volumes unchanged)
:class:`RandomAffine` augmentation; acts only when given a ``rng``
====================  ==========================================================

:func:`default_transform` builds the standard chain. A step only uses a
volume's ``data``, ``affine``, ``zooms``, ``replace`` and ``error`` (which
names the file in a :class:`~meshpar.data.nifti.BadSubjectError`), so this
module does not import the reader. Only numpy, scipy and nibabel are used.

Example
-------
>>> from meshpar.data.nifti_files import load_volume
>>> vol = load_volume("sub-0001.nii.gz")                        # doctest: +SKIP
>>> default_transform((32, 32, 32), augment=False)(vol).data.shape  # doctest: +SKIP
(32, 32, 32)
"""
from __future__ import annotations

import abc
import math
import numbers
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

import numpy as np

from meshpar.core.splits import integer_at_least, integers_at_least, number_above, true_or_false

if TYPE_CHECKING:  # types only
    from meshpar.data.types import Volume

__all__ = [
    "AUGMENTATIONS",
    "Compose",
    "CropOrPad",
    "RandomAffine",
    "RandomFlip",
    "RandomShift",
    "Reorient",
    "Resample",
    "Transform",
    "ZScore",
    "default_transform",
    "otsu_threshold",
]


class Transform(abc.ABC):
    """A pre-processing step: ``Volume -> Volume``. Random steps take ``rng``."""

    random = False

    @abc.abstractmethod
    def __call__(self, vol: Volume, rng: Optional[np.random.Generator] = None) -> Volume:
        """Return the transformed volume (subclasses implement the step)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Compose(Transform):
    """Apply steps in order; ``rng`` is passed on to the random ones."""

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    @property
    def random(self) -> bool:  # type: ignore[override]
        """True if any step is random (then the composition takes an ``rng``)."""
        return any(getattr(t, "random", False) for t in self.transforms)

    def __call__(self, vol: Volume, rng: Optional[np.random.Generator] = None) -> Volume:
        for step in self.transforms:
            vol = step(vol, rng) if getattr(step, "random", False) else step(vol)
        return vol


class Reorient(Transform):
    """Permute/flip axes to the closest ``axcodes`` orientation (RAS: as ``nibabel.as_closest_canonical``).

    No interpolation: an oblique grid keeps its small residual rotation.
    """

    def __init__(self, axcodes: str = "RAS"):
        self.axcodes = axcodes

    def __call__(self, vol: Volume) -> Volume:
        from nibabel.orientations import apply_orientation, axcodes2ornt, inv_ornt_aff, io_orientation, ornt_transform

        start = io_orientation(vol.affine)
        transform = ornt_transform(start, axcodes2ornt(tuple(self.axcodes)))
        if np.array_equal(transform, [[0, 1], [1, 1], [2, 1]]):
            return vol
        data = apply_orientation(vol.data, transform)
        affine = vol.affine @ inv_ornt_aff(transform, vol.data.shape)
        return vol.replace(data=np.ascontiguousarray(data), affine=affine)


def _scale_affine(affine: np.ndarray, old_shape, new_shape) -> np.ndarray:
    """Affine of a grid covering the same field of view with ``new_shape`` voxels."""
    step = np.asarray(old_shape, float) / np.asarray(new_shape, float)
    grid = np.eye(4)
    grid[:3, :3] = np.diag(step)
    grid[:3, 3] = 0.5 * step - 0.5  # voxel centres of the new grid in old voxel coordinates
    return affine @ grid


class Resample(Transform):
    """Resample to ``shape`` (same field of view) or to voxel ``spacing`` in mm.

    Linear interpolation by default (``order``); when shrinking, a Gaussian
    pre-filter (``antialias``) avoids aliasing.
    """

    def __init__(self, shape: Optional[Sequence[int]] = None, spacing=None, order: int = 1, antialias: bool = True):
        if (shape is None) == (spacing is None):
            raise ValueError("Resample needs exactly one of shape or spacing")
        # sizes as given (16.5 was cut to 16), a switch a switch (antialias="no" was on)
        self.shape = None if shape is None else _three_sizes(shape, "Resample shape")
        self.spacing = None if spacing is None else _spacing(spacing, "Resample spacing")
        self.order = _spline_order(order, "Resample order")
        self.antialias = true_or_false(antialias, "Resample antialias")

    def __call__(self, vol: Volume) -> Volume:
        from scipy import ndimage

        old = vol.data.shape
        if self.shape is not None:
            new = self.shape
        else:
            new = tuple(max(1, int(round(n * z / s))) for n, z, s in zip(old, vol.zooms, self.spacing))
        if tuple(new) == tuple(old):
            return vol
        factors = np.asarray(new, float) / np.asarray(old, float)
        data = vol.data
        if self.antialias and np.any(factors < 1):
            sigma = np.maximum(0.0, (1.0 / factors - 1.0) / 2.0)
            data = ndimage.gaussian_filter(data, sigma, mode="nearest")
        out = ndimage.zoom(data, factors, order=self.order, mode="nearest", grid_mode=True)
        if out.shape != tuple(new):  # zoom rounds output size; keep exactly what was asked
            out = _crop_or_pad(out, new, float(out.min()))[0]
        return vol.replace(data=out.astype(np.float32, copy=False), affine=_scale_affine(vol.affine, old, new))


def _crop_or_pad(data: np.ndarray, shape: Sequence[int], value: float):
    """Centre crop/pad; returns the array and the index offset of its origin in ``data``."""
    out = np.full(tuple(shape), value, dtype=data.dtype)
    offset = []
    src, dst = [], []
    for n_in, n_out in zip(data.shape, shape):
        start = (n_in - n_out) // 2  # >0: crop, <0: pad
        offset.append(start)
        lo = max(start, 0)
        hi = min(start + n_out, n_in)
        src.append(slice(lo, hi))
        dst.append(slice(lo - start, hi - start))
    out[tuple(dst)] = data[tuple(src)]
    return out, np.asarray(offset, float)


class CropOrPad(Transform):
    """Centre crop or pad to ``shape``; padding uses ``value`` (default: the image minimum)."""

    def __init__(self, shape: Sequence[int], value: Optional[float] = None):
        self.shape = _three_sizes(shape, "CropOrPad shape")
        # NaN padded every volume with NaN, refused later subject by subject
        self.value = None if value is None else number_above(value, "CropOrPad value", -math.inf)

    def __call__(self, vol: Volume) -> Volume:
        if vol.data.shape == self.shape:
            return vol
        value = float(vol.data.min()) if self.value is None else float(self.value)
        data, offset = _crop_or_pad(vol.data, self.shape, value)
        shift = np.eye(4)
        shift[:3, 3] = offset
        return vol.replace(data=data, affine=vol.affine @ shift)


def otsu_threshold(data: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold: the intensity that best splits the histogram in two classes."""
    values = data[np.isfinite(data)].ravel()
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        return lo
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    centres = (edges[:-1] + edges[1:]) / 2
    w0 = np.cumsum(counts)
    w1 = w0[-1] - w0
    s0 = np.cumsum(counts * centres)
    m0 = s0 / np.maximum(w0, 1)
    m1 = (s0[-1] - s0) / np.maximum(w1, 1)
    between = w0 * w1 * (m0 - m1) ** 2
    return float(edges[1:][int(np.argmax(between[:-1]))])


class ZScore(Transform):
    """Subtract the mean and divide by the standard deviation of the voxels in a mask.

    ``mask``: ``"otsu"`` (head vs background, default), ``"nonzero"``, a number
    (voxels above it) or a callable ``data -> bool array``. With
    ``zero_outside`` voxels outside the mask are set to 0 (the mask's mean).
    A constant image or an empty mask raises :class:`BadSubjectError`; ``eps`` is the
    spread (range, and standard deviation in the mask) at or below which an image is
    constant, relative to its largest magnitude (absolute, a map in SI units, a
    diffusivity of ~1e-9 m^2/s, was 'constant').
    """

    def __init__(self, mask: Union[str, float, Callable] = "otsu", zero_outside: bool = False, eps: float = 1e-8):
        if not (callable(mask) or (isinstance(mask, str) and mask in ("otsu", "nonzero")) or (
                isinstance(mask, numbers.Real) and not isinstance(mask, bool)
                and math.isfinite(mask))):  # was refused at the first volume
            raise ValueError(f"unknown mask {mask!r}: use 'otsu', 'nonzero', a threshold or a "
                             "callable")
        self.mask = mask
        self.zero_outside = true_or_false(zero_outside, "ZScore zero_outside")  # "no" was on
        self.eps = number_above(eps, "ZScore eps", -math.inf)
        if self.eps < 0:
            raise ValueError(f"ZScore eps must be >= 0, got {eps!r}")

    def mask_of(self, data: np.ndarray) -> np.ndarray:
        """Boolean mask of the voxels whose mean and standard deviation are used.

        ``mask`` may be ``"otsu"`` (above Otsu's threshold), ``"nonzero"``, a number
        (above that threshold) or a callable on the data; ValueError otherwise.
        """
        if callable(self.mask):
            return np.asarray(self.mask(data), dtype=bool)
        if self.mask == "otsu":
            return data > otsu_threshold(data)
        if self.mask == "nonzero":
            return data != 0
        if isinstance(self.mask, numbers.Real) and not isinstance(self.mask, bool):
            return data > float(self.mask)  # numpy's numbers too
        raise ValueError(f"unknown mask {self.mask!r}: use 'otsu', 'nonzero', a threshold or a callable")

    def __call__(self, vol: Volume) -> Volume:
        data = vol.data
        low, high = float(data.min()), float(data.max())
        tolerance = self.eps * max(abs(low), abs(high))  # 0 for an image of zeros
        if high - low <= tolerance:
            raise vol.error(f"is constant ({low:g}); nothing to normalise")
        mask = self.mask_of(data)
        if mask.sum() < 2:
            raise vol.error("intensity mask is empty; cannot normalise")
        inside = data[mask].astype(np.float64)
        mean, std = inside.mean(), inside.std()
        if std <= self.eps * float(np.abs(inside).max()):  # relative to the mask's values
            raise vol.error("is constant inside its mask; nothing to normalise")
        out = ((data - mean) / std).astype(np.float32)
        if self.zero_outside:
            out[~mask] = 0.0
        return vol.replace(data=out)


class RandomFlip(Transform):
    """Flip each of ``axes`` with probability ``p`` (axis 0 is left-right in RAS).

    Augmentation: the array changes, the affine does not. Identity without ``rng``.
    """

    random = True

    def __init__(self, axes: Sequence[int] = (0,), p: float = 0.5):
        self.axes = integers_at_least(axes, "RandomFlip axes", 0)
        if any(a > 2 for a in self.axes):  # was numpy's AxisError at the first example
            raise ValueError(f"RandomFlip axes are spatial axes 0, 1 or 2, got {axes!r}")
        self.p = _probability(p, "RandomFlip p")

    def __call__(self, vol: Volume, rng: Optional[np.random.Generator] = None) -> Volume:
        if rng is None:
            return vol
        axes = [a for a in self.axes if rng.random() < self.p]
        if not axes:
            return vol
        return vol.replace(data=np.ascontiguousarray(np.flip(vol.data, axis=axes)))


class RandomShift(Transform):
    """Translate by a whole number of voxels, up to ``max_shift`` along each axis.

    Augmentation that keeps every volume and intensity: no interpolation and no
    scaling, so a measure the label depends on (a ventricle's or hippocampus's
    size) is the same in the shifted example. The voxels shifted in take the
    volume's minimum (the background after z-scoring). Identity without ``rng``.
    """

    random = True

    def __init__(self, max_shift: int = 2):
        if isinstance(max_shift, bool) or not isinstance(max_shift, numbers.Real) or not (
                math.isfinite(max_shift) and int(max_shift) == max_shift and max_shift >= 0):
            raise ValueError(f"max_shift must be a whole number of voxels >= 0, got {max_shift!r}")
        self.max_shift = int(max_shift)

    def __call__(self, vol: Volume, rng: Optional[np.random.Generator] = None) -> Volume:
        if rng is None or self.max_shift == 0:
            return vol
        spatial = vol.data.shape[:3]  # a trailing channel axis is not shifted
        shifts = rng.integers(-self.max_shift, self.max_shift + 1, size=len(spatial))
        out = np.full_like(vol.data, vol.data.min())
        src, dst = [], []
        for n, k in zip(spatial, shifts):
            k = int(np.clip(k, -n, n))
            src.append(slice(max(0, -k), n - max(0, k)))
            dst.append(slice(max(0, k), n - max(0, -k)))
        out[tuple(dst)] = vol.data[tuple(src)]
        return vol.replace(data=out)


class RandomAffine(Transform):
    """Small random rotation, scaling and shift about the centre (augmentation).

    Angles up to ``max_rotation_deg`` about each axis, scale within
    ``1 +- max_scale``, shift up to ``max_shift`` voxels; applied with
    probability ``p``. Identity without ``rng``.
    """

    random = True

    def __init__(self, max_rotation_deg: float = 5.0, max_scale: float = 0.05, max_shift: float = 2.0,
                 order: int = 1, p: float = 1.0):
        # NaN made NaN volumes, a scale of 1 or more could divide by zero, p 2 was 1
        self.max_rotation_deg, self.max_shift = (
            _at_least_zero(value, f"RandomAffine {name}") for name, value in
            (("max_rotation_deg", max_rotation_deg), ("max_shift", max_shift)))
        self.max_scale = _at_least_zero(max_scale, "RandomAffine max_scale")
        if self.max_scale >= 1:
            raise ValueError(f"RandomAffine max_scale must be < 1 (a scale within 1 +- it), "
                             f"got {max_scale!r}")
        self.order = _spline_order(order, "RandomAffine order")
        self.p = _probability(p, "RandomAffine p")

    def __call__(self, vol: Volume, rng: Optional[np.random.Generator] = None) -> Volume:
        from scipy import ndimage

        if rng is None or rng.random() >= self.p:
            return vol
        angles = np.deg2rad(rng.uniform(-self.max_rotation_deg, self.max_rotation_deg, size=3))
        matrix = np.eye(3)
        for axis, angle in enumerate(angles):
            i, j = [k for k in range(3) if k != axis]
            rot = np.eye(3)
            rot[i, i] = rot[j, j] = math.cos(angle)
            rot[i, j], rot[j, i] = -math.sin(angle), math.sin(angle)
            matrix = rot @ matrix
        matrix = matrix / rng.uniform(1 - self.max_scale, 1 + self.max_scale)
        centre = (np.asarray(vol.data.shape, float) - 1) / 2
        shift = rng.uniform(-self.max_shift, self.max_shift, size=3)
        offset = centre - matrix @ (centre + shift)  # output voxel x samples input at matrix @ x + offset
        data = ndimage.affine_transform(vol.data, matrix, offset=offset, order=self.order,
                                        mode="constant", cval=float(vol.data.min()))
        return vol.replace(data=data.astype(np.float32, copy=False))


#: Augmentation names (``meshpar train --augment``) -> the random step they add.
AUGMENTATIONS = {
    "flip": lambda: RandomFlip(axes=(0,)),
    "shift": lambda: RandomShift(),
    "affine": lambda: RandomAffine(),
}


def default_transform(
    shape: Sequence[int],
    spacing=None,
    augment: Union[bool, Sequence[str]] = True,
    mask: Union[str, float, Callable] = "otsu",
) -> Compose:
    """The standard chain: reorient to RAS, resample, z-score, [augment].

    ``augment``: True for every step of :data:`AUGMENTATIONS` (left-right
    flip, a whole-voxel shift, then a small affine), False for none, or a
    sequence of their names.

    The random steps come last so that everything before them is done once
    per subject and cached (:class:`~meshpar.data.nifti.NiftiDataset`): an
    augmented example then costs one flip (a copy), not an Otsu threshold and
    a z-score per example. With the z-score after the flip, the per-example
    Python work of the input pipeline took the CPU the training step needed
    (resattnet3d-small, batch 32, one process: 121 against 207 samples/s
    without augmentation). A flip leaves the intensity statistics as they
    are, so a flipped example is exactly the normalised volume flipped; the
    small affine is applied to the normalised volume, so its output is close
    to, not exactly, zero mean and unit spread (interpolation at the edges).

    With ``spacing`` (mm) the volume is resampled to that voxel size and then
    centre cropped/padded to ``shape`` (geometry kept); without, it is
    resampled straight to ``shape`` (field of view kept). The random steps
    (left-right flip, small affine) only act when an ``rng`` is passed, so one
    chain serves training and evaluation.
    """
    shape = integers_at_least(shape, "shape")  # 16.5 was cut to 16
    if isinstance(augment, (str, bytes)) or not (
            isinstance(augment, (bool, np.bool_)) or hasattr(augment, "__iter__")):
        hint = f"; for one, [{augment!r}]" * isinstance(augment, str)  # read letter by letter
        raise TypeError(f"augment must be True, False or a sequence of the names "
                        f"{', '.join(AUGMENTATIONS)}, got {augment!r}{hint}")
    augment = bool(augment) if isinstance(augment, np.bool_) else augment
    steps: list = [Reorient("RAS")]
    if spacing is None:
        steps.append(Resample(shape=shape))
    else:
        steps += [Resample(spacing=spacing), CropOrPad(shape)]
    names = list(AUGMENTATIONS) if augment is True else list(augment or ())
    unknown = [n for n in names if n not in AUGMENTATIONS]
    if unknown:
        raise ValueError(f"unknown augmentation {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(AUGMENTATIONS)}")
    steps.append(ZScore(mask))
    steps += [AUGMENTATIONS[n]() for n in AUGMENTATIONS if n in names]
    return Compose(steps)


def _three_sizes(shape, what: str) -> tuple:
    """``shape`` as three whole sizes >= 1 (a volume's axes): two were numpy's broadcast
    error at the first volume."""
    sizes = integers_at_least(shape, what)
    if len(sizes) != 3:
        raise ValueError(f"{what} must be three sizes (X, Y, Z), got {tuple(shape)!r}")
    return sizes


def _at_least_zero(value, what: str) -> float:
    """``value`` as a finite float >= 0; TypeError or ValueError naming ``what``."""
    x = number_above(value, what, -math.inf)
    if x < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return x


def _probability(value, what: str) -> float:
    """``value`` as a probability in [0, 1]; TypeError or ValueError naming ``what``."""
    x = _at_least_zero(value, what)
    if x > 1:
        raise ValueError(f"{what} must be a probability in [0, 1], got {value!r}")
    return x


def _spline_order(value, what: str) -> int:
    """An interpolation order scipy takes (0 to 5), naming ``what`` otherwise."""
    order = integer_at_least(value, what, 0)
    if order > 5:
        raise ValueError(f"{what} must be a spline order 0 to 5, got {value!r}")
    return order


def _spacing(value, what: str) -> tuple:
    """One voxel size in mm or three, each finite and > 0, as three floats."""
    sizes = np.ravel(np.asarray(value, dtype=object))
    if len(sizes) not in (1, 3):
        raise ValueError(f"{what} must be a voxel size in mm or three of them, got {value!r}")
    sizes = [number_above(v, what) for v in sizes]
    return tuple(sizes * 3 if len(sizes) == 1 else sizes)
