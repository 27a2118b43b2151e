"""Phantoms built on a real brain: the MNI152 T1 template shipped inside nilearn.

An optional extra (``pip install 'meshpar[template]'``); nothing else in
meshpar needs nilearn, and the geometric phantoms of
:mod:`meshpar.data.phantoms` stay the default. The template is part of the
nilearn package (no download).

Each subject is the skull-stripped MNI152 T1 (2 mm) seen through

1. a smooth local deformation, the atrophy: the lateral ventricles and the
   temporal horns expand, the hippocampi shrink. Each structure moves by a
   Gaussian-windowed radial displacement about its centre (MNI mm),
   ``x_template = x - s (x - c) exp(-|(x - c) / w|^2 / 2)``; a strength
   ``s = 1 - 1 / scale`` magnifies (``s > 0``) or shrinks (``s < 0``) the
   structure's core by ``scale``, and the map stays one-to-one for
   ``-2 < s < 1``;
2. the subject's head size, position and a small rotation, and the same
   voxel orientations, scanner gain, bias field and Rician noise as the
   geometric phantoms.

The anatomy is drawn by :func:`meshpar.data.phantoms.sample_params` (so a
group's severity, the age confound and the person-to-person spread are the
same as for the geometric phantoms): ventricle, hippocampus and temporal
horn scales become the deformation strengths.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from meshpar.data import phantoms as geometric

__all__ = ["STRUCTURES", "available", "load_template", "template_anatomy", "deformation", "make_template_phantom",
           "write_dataset"]

# name: (centre in MNI mm, Gaussian window half-widths in mm, which scale drives it)
STRUCTURES = {
    "left lateral ventricle": ((-11.0, -10.0, 15.0), (7.0, 20.0, 9.0), "ventricle"),
    "right lateral ventricle": ((11.0, -10.0, 15.0), (7.0, 20.0, 9.0), "ventricle"),
    "left hippocampus": ((-26.0, -22.0, -14.0), (5.0, 12.0, 5.0), "hippocampus"),
    "right hippocampus": ((28.0, -22.0, -14.0), (5.0, 12.0, 5.0), "hippocampus"),
    "left temporal horn": ((-31.0, -10.0, -20.0), (4.0, 8.0, 4.0), "temporal_horn"),
    "right temporal horn": ((33.0, -10.0, -20.0), (4.0, 8.0, 4.0), "temporal_horn"),
}
_TEMPLATE_VOXEL_MM = 2  # nilearn resamples its 1 mm template to this
# Ventricles are the dark (CSF) voxels of the template in this central box (MNI mm).
_VENTRICLE_BOX = ((-30.0, 30.0), (-45.0, 30.0), (-5.0, 35.0))
_CSF_BELOW = 0.3


def available() -> bool:
    """Whether nilearn (and so the template) is installed."""
    try:
        import nilearn.datasets  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=4)
def load_template(voxel_mm: float = _TEMPLATE_VOXEL_MM):
    """``(image, affine)`` of the MNI152 T1 template (float64, brain only, 0..1),
    smoothed against aliasing when sampled at ``voxel_mm`` coarser than 2 mm."""
    if not available():
        raise ValueError("template phantoms need nilearn: pip install 'meshpar[template]' "
                         "(or pip install nilearn)")
    from nilearn.datasets import load_mni152_template
    from scipy.ndimage import gaussian_filter

    img = load_mni152_template(resolution=_TEMPLATE_VOXEL_MM)
    data = np.asarray(img.get_fdata(), dtype=np.float64)
    ratio = float(voxel_mm) / _TEMPLATE_VOXEL_MM
    if ratio > 1.0:  # a coarse voxel averages what it covers
        data = gaussian_filter(data, sigma=0.42 * ratio, mode="constant")
    return data, np.asarray(img.affine, dtype=np.float64)


@lru_cache(maxsize=1)
def template_anatomy() -> dict:
    """Measured once on the template: brain volume (ml), ventricular volume (ml;
    its dark voxels in the central box) and the brain's centroid (MNI mm)."""
    data, affine = load_template()
    voxel_ml = abs(np.linalg.det(affine[:3, :3])) / 1000.0
    brain = data > 0.05
    ijk = np.indices(data.shape).reshape(3, -1)
    xyz = (affine[:3, :3] @ ijk + affine[:3, 3:4]).T
    inside = np.ones(len(xyz), dtype=bool)
    for axis, (lo, hi) in enumerate(_VENTRICLE_BOX):
        inside &= (xyz[:, axis] > lo) & (xyz[:, axis] < hi)
    flat = data.reshape(-1)
    csf = inside & brain.reshape(-1) & (flat < _CSF_BELOW)
    return {"brain_ml": float(brain.sum() * voxel_ml), "ventricle_ml": float(csf.sum() * voxel_ml),
            "centre_mm": xyz[brain.reshape(-1)].mean(axis=0)}


def _strength(scale: float) -> float:
    """Radial strength that magnifies a structure's core by ``scale``, kept one-to-one."""
    return float(np.clip(1.0 - 1.0 / max(scale, 1e-3), -1.5, 0.8))


def deformation(points: np.ndarray, scales: dict) -> np.ndarray:
    """Template points (N, 3, MNI mm) the subject points ``points`` come from.

    ``scales``: ``{"ventricle", "hippocampus", "temporal_horn"}`` linear
    magnification of each kind of structure (1 = as in the template).
    """
    source = np.array(points, dtype=np.float64, copy=True)
    for centre, width, kind in STRUCTURES.values():
        d = points - np.asarray(centre)
        window = np.exp(-0.5 * np.sum((d / np.asarray(width)) ** 2, axis=1))
        source -= _strength(scales[kind]) * d * window[:, None]
    return source


def _scales(params: geometric.PhantomParams) -> dict:
    return {"ventricle": float(np.mean(params.ventricle_scale)),
            "hippocampus": float(params.hippocampus_scale),
            "temporal_horn": float(params.temporal_horn_scale)}


def _render(params, affine, shape, rng) -> np.ndarray:
    """The subject on the voxel grid (``affine``, ``shape``): template sampled through
    the head pose and the atrophy deformation, then bias, noise and gain."""
    from scipy.ndimage import map_coordinates

    voxel_mm = float(np.mean(np.sqrt(np.sum(affine[:3, :3] ** 2, axis=0))))
    template, t_affine = load_template(round(voxel_mm, 3))
    ijk = np.indices(shape).reshape(3, -1).astype(np.float64)
    world = (affine[:3, :3] @ ijk + affine[:3, 3:4]).T
    size = params.head_radii_mm / np.asarray(geometric.HEAD_RADII_MM)
    # subject head -> template space, the head centre on the brain's centroid
    mni = (world - params.head_center_mm) / size + template_anatomy()["centre_mm"]
    source = deformation(mni, _scales(params))
    t_ijk = np.linalg.solve(t_affine[:3, :3], (source - t_affine[:3, 3]).T)
    image = map_coordinates(template, t_ijk, order=1, mode="constant", cval=0.0)
    p = (world - params.head_center_mm) / params.head_radii_mm
    image = image * np.exp(p @ params.bias_linear
                           + np.einsum("ni,ij,nj->n", p, params.bias_quadratic, p))
    if rng is not None and params.noise_sigma > 0:
        sigma = params.noise_sigma * geometric.INTENSITY["wm"]
        real = image + rng.normal(0.0, sigma, size=image.size)
        image = np.sqrt(real * real + rng.normal(0.0, sigma, size=image.size) ** 2)
    return (image * params.gain).reshape(shape).astype(np.float32)


def make_template_phantom(
    label: str,
    shape: Sequence[int] = (32, 32, 32),
    seed: Union[int, np.random.SeedSequence, None] = 0,
    label_set: Sequence[str] = ("NC", "AD"),
    voxel_mm: Union[float, Sequence[float], None] = None,
    orientation: Optional[str] = None,
    orientations: Sequence[str] = geometric.DEFAULT_ORIENTATIONS,
    max_rotation_deg: float = 5.0,
    noise: float = 0.04,
) -> geometric.Phantom:
    """One template-based subject of group ``label``, deterministic in ``seed``
    (arguments as :func:`meshpar.data.phantoms.make_phantom`)."""
    rng = np.random.default_rng(seed)
    params = geometric.sample_params(rng, label, label_set, noise=noise)
    if voxel_mm is None:
        voxel_mm = geometric.default_voxel_mm(shape)
    if np.ndim(voxel_mm) and len(set(np.ravel(voxel_mm).tolist())) > 1:
        raise ValueError(f"template phantoms need isotropic voxels, got {voxel_mm}")
    codes = orientation if orientation is not None else str(rng.choice(list(orientations)))
    rotation = geometric._random_rotation(rng, max_rotation_deg)
    affine = geometric.orientation_affine(shape, float(np.ravel(voxel_mm)[0]), codes, rotation,
                                          center_mm=rng.normal(0.0, 3.0, size=3))
    image = _render(params, affine, tuple(int(s) for s in shape), rng)
    scales = _scales(params)
    size = float(np.prod(params.head_radii_mm / np.asarray(geometric.HEAD_RADII_MM)))
    measures = {f"{k}_scale": round(v, 6) for k, v in scales.items()}
    measures["age"] = round(float(params.age), 6)
    volumes = template_anatomy()
    return geometric.Phantom(
        image=image, affine=affine, params=params, orientation=codes,
        # Approximate: the ventricles' core grows with the cube of its linear scale.
        ventricle_ml=float(volumes["ventricle_ml"] * scales["ventricle"] ** 3 * size),
        brain_ml=float(volumes["brain_ml"] * size), extra={"measures": measures})


def write_dataset(out_dir: Union[str, Path], n: int, **kwargs) -> Path:
    """:func:`meshpar.data.phantoms.write_dataset` with template-based subjects."""
    return geometric.write_dataset(out_dir, n, phantom_fn=make_template_phantom,
                                   anatomy="template", **kwargs)
