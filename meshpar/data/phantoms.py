"""Synthetic brain-like T1 MRI phantoms, written as real NIfTI files.

A phantom is an analytic head, rendered on a voxel grid given by an affine:

=================  ===========================================================
structure          model (radii in units of the subject's head radii)
=================  ===========================================================
scalp              ellipsoid shell, bright
skull              shell inside the scalp, dark
outer CSF          thin dark shell between skull and brain (widens with atrophy)
grey matter        outer band of the brain (thins with atrophy)
sulci              CSF grooves along the zero crossings of a random "gyral"
                   field on the sphere of directions (widen with age, atrophy)
white matter       inside the cortex, lined by grey matter along the sulci
ventricles         two lateral ellipsoids and a midline third ventricle
                   (enlarge with atrophy)
hippocampi         grey-matter ellipsoids in the temporal lobes (shrink with
                   atrophy), each beside a temporal horn (enlarges)
=================  ===========================================================

Every subject has its own head size and shape, ventricle and hippocampus size,
gyral pattern, head position, scanner gain, bias field and Rician noise, and is
written in one of several voxel orientations with a small oblique rotation, so
reorientation and resampling matter when reading it back. The class signal is
anatomical: disease atrophy enlarges the ventricles and temporal horns and
shrinks the hippocampi most, while ageing (drawn independently of the group)
widens sulci and thins the cortex in everyone. No global intensity statistic
separates the groups: the scanner gain varies more than atrophy changes the
mean, and ageing confounds the global CSF fraction.
The effect sizes are set so that a small 3-D CNN
reaches >= 90% held-out accuracy at 32^3 within seconds of CPU training while
a classifier on mean intensity stays near chance
(``benchmarks/phantom_learnability.py``).

Only numpy, scipy and nibabel are imported here (no TensorFlow).

Example
-------
>>> from meshpar.data.phantoms import write_dataset
>>> write_dataset("phantoms", n=20, shape=(32, 32, 32), seed=0)  # doctest: +SKIP
PosixPath('phantoms/labels.csv')
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from meshpar.data.synth_checks import (check_dataset_arguments, check_phantom_arguments,
                                       check_distinct_severities, check_room, check_voxel_mm,
                                       refuse_targets, subject_file)
from meshpar.planning.jsonio import write_text_atomic

# Atrophy severity of each diagnostic group, 0 (none) to 1 (typical AD).
# Groups not listed get a severity from their position in the label set.
# sMCI/pMCI sit 0.6 apart: at 0.3/0.65 even a classifier given each subject's
# true disease stage reached only 0.85 (anatomy measures 0.83), which leaves an
# image model at 32^3 no room; at 0.2/0.8 those ceilings are 0.96/0.95
# (benchmarks/accuracy.py, docs/accuracy.md).
GROUP_SEVERITY: Mapping[str, float] = {
    "NC": 0.0,
    "CN": 0.0,
    "sMCI": 0.2,
    "MCI": 0.45,
    "pMCI": 0.8,
    "AD": 1.0,
}

# Head semi-axes in mm along x (left-right), y (posterior-anterior), z (inferior-superior).
HEAD_RADII_MM = (72.0, 88.0, 66.0)
DEFAULT_FOV_MM = 200.0
DEFAULT_ORIENTATIONS = ("RAS", "LAS", "LPS")

# T1-like tissue intensities before scanner gain.
INTENSITY = {"background": 0.0, "scalp": 0.55, "skull": 0.10, "csf": 0.18, "gm": 0.55, "wm": 0.85}

FORMAT_VERSION = 1
META_FILE = "phantoms.json"


@dataclass
class PhantomParams:
    """Anatomy and acquisition of one synthetic subject (all sampled per subject)."""

    label: str
    atrophy: float  # disease: 0 none .. ~1 typical AD, jittered per subject
    age: float  # 0 (about 60 years) .. 1 (about 90): atrophy common to all groups
    head_radii_mm: np.ndarray  # (3,)
    head_center_mm: np.ndarray  # (3,) head centre in world (scanner) space
    shape_linear: np.ndarray  # (3,) low-order deformation of the head outline
    shape_quadratic: np.ndarray  # (3, 3) symmetric
    brain_radius: float
    cortex_thickness: float
    sulcal_width: float  # half-width of the sulci in units of the gyral field
    gyral_directions: np.ndarray  # (K, 3) unit vectors
    gyral_phases: np.ndarray  # (K,)
    gyral_frequency: float
    ventricle_scale: np.ndarray  # (3,) per-axis scale of the lateral ventricles
    ventricle_asymmetry: float
    hippocampus_scale: float
    temporal_horn_scale: float
    gain: float
    bias_linear: np.ndarray  # (3,)
    bias_quadratic: np.ndarray  # (3, 3)
    noise_sigma: float  # relative to white-matter intensity

    def summary(self) -> dict:
        """JSON-friendly scalars (for phantoms.json)."""
        return {
            "label": self.label,
            "atrophy": round(float(self.atrophy), 4),
            "age": round(float(self.age), 4),
            "head_radii_mm": [round(float(v), 2) for v in self.head_radii_mm],
            "ventricle_scale": [round(float(v), 4) for v in self.ventricle_scale],
            "cortex_thickness": round(float(self.cortex_thickness), 4),
            "hippocampus_scale": round(float(self.hippocampus_scale), 4),
            "gain": round(float(self.gain), 2),
        }


@dataclass
class Phantom:
    """One rendered subject: the image, its voxel-to-world affine and ground truth."""

    image: np.ndarray  # float32, the array as stored in the file
    affine: np.ndarray  # 4x4 voxel -> RAS+ world (mm)
    params: PhantomParams
    ventricle_ml: float  # analytic ventricular volume (lateral + third + temporal horns)
    brain_ml: float  # brain tissue (GM + WM) volume summed over this grid's voxels
    orientation: str = "RAS"
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Diagnostic group the phantom was drawn for (e.g. ``"AD"``)."""
        return self.params.label

    @property
    def measures(self) -> dict:
        """What an image of this subject shows of its anatomy, as numbers: the
        features of the ``anatomy`` learnability ceiling
        (:mod:`meshpar.evaluation.ceiling`). Ventricular volume is relative to
        head volume; age is the confound every group shares."""
        if "measures" in self.extra:
            return dict(self.extra["measures"])
        return anatomy_measures(self.params)


def severity_of(label: str, label_set: Sequence[str]) -> float:
    """Atrophy severity (0..1) for a diagnostic group name.

    Known groups (NC/CN, sMCI, MCI, pMCI, AD) have fixed severities; any other
    name is placed evenly by its position in ``label_set`` (first = 0, last = 1).
    """
    if label in GROUP_SEVERITY:
        return GROUP_SEVERITY[label]
    labels = list(label_set)
    if label not in labels:
        raise ValueError(f"label {label!r} is not in the label set {tuple(labels)}")
    if len(labels) == 1:
        return 0.0
    return labels.index(label) / (len(labels) - 1)


def _random_rotation(rng: np.random.Generator, max_deg: float) -> np.ndarray:
    """A rotation by an angle up to ``max_deg`` about a random axis (Rodrigues)."""
    if max_deg <= 0:
        return np.eye(3)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = np.deg2rad(rng.uniform(-max_deg, max_deg))
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def orientation_affine(
    shape: Sequence[int],
    voxel_mm: Union[float, Sequence[float]],
    axcodes: str = "RAS",
    rotation: Optional[np.ndarray] = None,
    center_mm: Sequence[float] = (0.0, 0.0, 0.0),
) -> np.ndarray:
    """Voxel-to-world affine for a grid stored in orientation ``axcodes``.

    ``axcodes`` names the world direction each array axis points to, as in
    nibabel (``"LPS"``: axis 0 runs to the left, 1 to posterior, 2 to superior).
    The array centre maps to ``center_mm``; ``rotation`` (3x3) tilts the grid
    (an oblique acquisition).
    """
    from nibabel.orientations import axcodes2ornt

    shape = tuple(int(s) for s in shape)
    if len(shape) != 3:
        raise ValueError(f"shape must have 3 dimensions, got {shape}")
    zooms = np.broadcast_to(np.asarray(voxel_mm, dtype=float), (3,))
    if np.any(zooms <= 0):
        raise ValueError(f"voxel sizes must be positive, got {tuple(zooms)}")
    try:
        ornt = axcodes2ornt(tuple(axcodes))
    except ValueError:
        ornt = np.full((3, 2), np.nan)
    if len(axcodes) != 3 or np.any(np.isnan(ornt)) or len(set(ornt[:, 0])) != 3:
        raise ValueError(f"axis codes {axcodes!r} do not name three distinct axes (use e.g. RAS, LPS)")
    linear = np.zeros((3, 3))
    for array_axis, (world_axis, flip) in enumerate(ornt):
        linear[int(world_axis), array_axis] = flip * zooms[array_axis]
    if rotation is not None:
        linear = np.asarray(rotation, dtype=float) @ linear
    centre_vox = (np.asarray(shape, dtype=float) - 1) / 2
    affine = np.eye(4)
    affine[:3, :3] = linear
    affine[:3, 3] = np.asarray(center_mm, dtype=float) - linear @ centre_vox
    return affine


def sample_params(
    rng: np.random.Generator,
    label: str,
    label_set: Sequence[str] = ("NC", "AD"),
    noise: float = 0.04,
    severity: Optional[float] = None,
) -> PhantomParams:
    """Draw one subject's anatomy and acquisition for diagnostic group ``label``
    (its group's atrophy severity, or ``severity`` if given)."""
    base = severity_of(label, label_set) if severity is None else float(severity)
    # Disease stage varies within a group; NC subjects have a little too.
    atrophy = float(np.clip(base + rng.normal(0.0, 0.12 + 0.1 * base), 0.0, 1.4))
    # Ageing atrophies every brain, whatever the group: it confounds global
    # measures (CSF fraction, sulcal width), less so the medial temporal lobe.
    age = float(rng.uniform(0.0, 1.0))
    size = rng.normal(1.0, 0.06)
    radii = np.asarray(HEAD_RADII_MM) * size * rng.normal(1.0, 0.035, size=3)
    quad = rng.normal(0.0, 0.02, size=(3, 3))
    k = 14
    directions = rng.normal(size=(k, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    ventricle_base = np.exp(rng.normal(0.0, 0.08))  # people differ a lot in ventricle size
    bias_quad = rng.normal(0.0, 0.08, size=(3, 3))
    return PhantomParams(
        label=label,
        atrophy=atrophy,
        age=age,
        head_radii_mm=radii,
        head_center_mm=rng.normal(0.0, 4.0, size=3),
        shape_linear=rng.normal(0.0, 0.025, size=3),
        shape_quadratic=(quad + quad.T) / 2,
        brain_radius=0.845 * (1.0 - 0.02 * age - 0.015 * atrophy) * rng.normal(1.0, 0.01),
        cortex_thickness=0.14 * (1.0 - 0.12 * age - 0.12 * atrophy) * rng.normal(1.0, 0.06),
        sulcal_width=(0.08 + 0.1 * age + 0.05 * atrophy) * np.exp(rng.normal(0.0, 0.15)),
        gyral_directions=directions,
        gyral_phases=rng.uniform(0.0, 2 * np.pi, size=k),
        gyral_frequency=rng.uniform(11.0, 14.0),
        ventricle_scale=ventricle_base * (1.0 + 0.12 * age + 0.6 * atrophy) * rng.normal(1.0, 0.05, size=3),
        ventricle_asymmetry=rng.normal(0.0, 0.08),
        hippocampus_scale=(1.0 - 0.05 * age - 0.4 * atrophy) * np.exp(rng.normal(0.0, 0.06)),
        temporal_horn_scale=(1.0 + 0.2 * age + 1.3 * atrophy) * np.exp(rng.normal(0.0, 0.1)),
        gain=float(np.exp(rng.normal(np.log(800.0), 0.25))),
        bias_linear=rng.normal(0.0, 0.1, size=3),
        bias_quadratic=(bias_quad + bias_quad.T) / 2,
        noise_sigma=noise * rng.uniform(0.7, 1.3),
    )


def _inside(level: np.ndarray, width: float) -> np.ndarray:
    """Soft indicator of ``level > 0``, a partial-volume edge ``width`` wide."""
    from scipy.special import expit

    return expit(level / width)


def _ellipsoid(p: np.ndarray, centre, radii, width: float) -> np.ndarray:
    """Soft indicator of an axis-aligned ellipsoid in head coordinates ``p`` (..., 3)."""
    q = (p - np.asarray(centre)) / np.asarray(radii)
    rho = np.sqrt(np.sum(q * q, axis=-1))
    # Scale the edge to the ellipsoid's own size so small structures stay soft-edged.
    return _inside((1.0 - rho) * float(np.min(radii)), width)


def _ventricle_ellipsoids(params: PhantomParams) -> list:
    """(centre, radii) in head units of the CSF-filled ventricles."""
    vs = params.ventricle_scale
    a = params.ventricle_asymmetry
    ts = params.temporal_horn_scale
    lateral = np.array([0.1, 0.28, 0.1]) * vs
    horn = np.array([0.03, 0.13, 0.03]) * ts
    return [
        ((-0.13, 0.04, 0.14), lateral * (1 + a)),  # lateral ventricles
        ((0.13, 0.04, 0.14), lateral * (1 - a)),
        ((0.0, -0.02, 0.0), np.array([0.022, 0.12, 0.08]) * np.sqrt(vs)),  # third ventricle
        ((-0.33, -0.08, -0.24), horn),  # temporal horns, beside the hippocampi
        ((0.33, -0.08, -0.24), horn),
    ]


def ventricle_volume_ml(params: PhantomParams) -> float:
    """Analytic ventricular volume (sum of the ellipsoids, independent of the grid)."""
    head = float(np.prod(params.head_radii_mm))
    total = sum(4.0 / 3.0 * np.pi * float(np.prod(radii)) for _, radii in _ventricle_ellipsoids(params))
    return total * head / 1000.0


def anatomy_measures(params: PhantomParams) -> dict:
    """A geometric phantom's image-visible anatomy (see :attr:`Phantom.measures`),
    from its parameters alone (no rendering)."""
    head_ml = 4.0 / 3.0 * np.pi * float(np.prod(params.head_radii_mm)) / 1000.0
    values = {"ventricle_fraction": ventricle_volume_ml(params) / head_ml,
              "hippocampus_scale": params.hippocampus_scale,
              "temporal_horn_scale": params.temporal_horn_scale,
              "cortex_thickness": params.cortex_thickness, "sulcal_width": params.sulcal_width,
              "age": params.age}
    return {k: round(float(v), 6) for k, v in values.items()}


RENDER_CHUNK = 1 << 17  # voxels rendered at a time: bounds memory at any grid size


def render(
    params: PhantomParams,
    affine: np.ndarray,
    shape: Sequence[int],
    rng: Optional[np.random.Generator] = None,
) -> Tuple[np.ndarray, dict]:
    """Render ``params`` on the voxel grid (``affine``, ``shape``).

    Returns the float32 image and ground-truth volumes in ml. ``rng`` draws
    the Rician noise; without one the image is noise-free. Voxels are rendered
    in chunks, so memory stays near a few copies of the image.
    """
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape))
    voxel_mm = float(np.mean(np.sqrt(np.sum(affine[:3, :3] ** 2, axis=0))))
    width = 0.5 * voxel_mm / float(np.mean(params.head_radii_mm))
    image = np.empty(n, dtype=np.float64)
    brain_sum = 0.0
    for start in range(0, n, RENDER_CHUNK):
        ijk = np.stack(np.unravel_index(np.arange(start, min(n, start + RENDER_CHUNK)), shape)).astype(np.float64)
        world = (affine[:3, :3] @ ijk + affine[:3, 3:4]).T  # (N, 3) RAS+ mm
        image[start:start + ijk.shape[1]], tissue_sum = _render_points(params, world, width)
        brain_sum += tissue_sum

    if rng is not None and params.noise_sigma > 0:
        sigma = params.noise_sigma * INTENSITY["wm"]
        real = image + rng.normal(0.0, sigma, size=n)
        imag = rng.normal(0.0, sigma, size=n)
        image = np.sqrt(real * real + imag * imag)  # magnitude image: Rician noise
    image *= params.gain
    voxel_ml = abs(np.linalg.det(affine[:3, :3])) / 1000.0
    truth = {"ventricle_ml": ventricle_volume_ml(params), "brain_ml": float(brain_sum * voxel_ml)}
    return image.reshape(shape).astype(np.float32), truth


def _render_points(params: PhantomParams, world: np.ndarray, width: float) -> Tuple[np.ndarray, float]:
    """Noise-free, gain-free intensity at world points (N, 3), and their summed brain tissue."""
    p = (world - params.head_center_mm) / params.head_radii_mm  # head-normalised
    r0 = np.sqrt(np.sum(p * p, axis=1))
    u = p / np.maximum(r0, 1e-6)[:, None]
    deform = 1.0 + u @ params.shape_linear + np.einsum("ni,ij,nj->n", u, params.shape_quadratic, u)
    r = r0 / deform

    head = _inside(1.0 - r, width)
    skull = _inside(0.93 - r, width)
    outer_csf = _inside(0.885 - r, width)
    rb = params.brain_radius
    brain = _inside(rb - r, width)

    # Gyral field on the sphere of directions (values ~ N(0, 0.5)); its zero
    # crossings form a network of grooves, the sulci, lined by grey matter.
    g = np.cos(params.gyral_frequency * (u @ params.gyral_directions.T) + params.gyral_phases)
    g = np.abs(g.sum(axis=1) / np.sqrt(len(params.gyral_phases)))
    g_width = 0.04
    depth = 1.6 * params.cortex_thickness
    sulcus = _inside(params.sulcal_width - g, g_width) * _inside(r - (rb - depth), width)
    lining = _inside(params.sulcal_width + 0.25 - g, g_width) * _inside(
        r - (rb - depth - 0.8 * params.cortex_thickness), width
    )
    wm = _inside(rb - params.cortex_thickness - r, width) * (1.0 - lining)

    csf_parts = [_ellipsoid(p, c, rad, width) for c, rad in _ventricle_ellipsoids(params)]
    ventricles = np.max(csf_parts, axis=0) * brain
    hs = params.hippocampus_scale
    hippo = np.maximum(
        _ellipsoid(p, (-0.38, -0.14, -0.32), np.array([0.075, 0.2, 0.07]) * hs, width),
        _ellipsoid(p, (0.38, -0.14, -0.32), np.array([0.075, 0.2, 0.07]) * hs, width),
    )

    t = INTENSITY
    image = head * t["scalp"]
    image += skull * (t["skull"] - t["scalp"])
    image += outer_csf * (t["csf"] - t["skull"])
    tissue = t["gm"] + wm * (t["wm"] - t["gm"])
    tissue = tissue * (1.0 - sulcus) + t["csf"] * sulcus
    tissue = tissue * (1.0 - hippo * brain) + t["gm"] * hippo * brain
    tissue = tissue * (1.0 - ventricles) + t["csf"] * ventricles
    image = image * (1.0 - brain) + tissue * brain

    bias = np.exp(p @ params.bias_linear + np.einsum("ni,ij,nj->n", p, params.bias_quadratic, p))
    tissue_sum = float((brain * (1.0 - sulcus) * (1.0 - ventricles)).sum())
    return image * bias, tissue_sum


def default_voxel_mm(shape: Sequence[int], fov_mm: float = DEFAULT_FOV_MM) -> float:
    """Isotropic voxel size that fits a ``fov_mm`` field of view into ``shape``."""
    return fov_mm / max(int(s) for s in shape)


def make_phantom(
    label: str,
    shape: Sequence[int] = (32, 32, 32),
    seed: Union[int, np.random.SeedSequence, None] = 0,
    label_set: Sequence[str] = ("NC", "AD"),
    voxel_mm: Union[float, Sequence[float], None] = None,
    orientation: Optional[str] = None,
    orientations: Sequence[str] = DEFAULT_ORIENTATIONS,
    max_rotation_deg: float = 5.0,
    noise: float = 0.04,
) -> Phantom:
    """One synthetic subject of group ``label``, deterministic in ``seed``.

    Parameters
    ----------
    label : str
        Diagnostic group; its atrophy severity comes from :data:`GROUP_SEVERITY`
        or its position in ``label_set``.
    shape : 3 ints
        Array shape as stored in the file.
    voxel_mm : float or 3 floats, optional
        Voxel size; default fits a 200 mm field of view (6.25 mm at 32^3,
        1.5625 mm at 128^3).
    orientation : str, optional
        Voxel axis codes (``"RAS"``, ``"LPS"``, ...); default drawn from
        ``orientations``.
    max_rotation_deg : float
        Largest oblique tilt of the voxel grid.
    noise : float
        Rician noise level relative to white matter.
    """
    shape = check_phantom_arguments(shape, seed, noise, max_rotation_deg, orientations)
    if isinstance(label_set, (str, bytes)):  # "NCAD" is not the labels N, C, A, D
        raise ValueError(f"label set must be a sequence of names, got {label_set!r}")
    if voxel_mm is None:
        voxel_mm = default_voxel_mm(shape)
    check_voxel_mm(shape, voxel_mm)  # NaN rendered a volume of NaN in silence
    rng = np.random.default_rng(seed)
    params = sample_params(rng, label, label_set, noise=noise)
    codes = orientation if orientation is not None else str(rng.choice(list(orientations)))
    rotation = _random_rotation(rng, max_rotation_deg)
    affine = orientation_affine(shape, voxel_mm, codes, rotation, center_mm=rng.normal(0.0, 3.0, size=3))
    image, truth = render(params, affine, shape, rng)
    return Phantom(image=image, affine=affine, params=params, orientation=codes, **truth)


def save_nifti(image: np.ndarray, affine: np.ndarray, path: Union[str, Path]) -> Path:
    """Write ``image`` as NIfTI-1 with qform and sform set to scanner space, in mm.

    The file is written under a temporary name and renamed, so an interrupted
    run never leaves a truncated file under the final name (nor, when the write
    fails, the truncated temporary one).
    """
    import nibabel as nib

    path = Path(path)
    img = nib.Nifti1Image(np.asarray(image, dtype=np.float32), affine)
    img.header.set_xyzt_units("mm", "sec")
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    suffix = ".nii.gz" if path.name.endswith(".nii.gz") else path.suffix
    tmp = path.with_name(f".{path.name}.partial{suffix}")
    try:
        nib.save(img, str(tmp))
        os.replace(tmp, path)
    except BaseException:  # a full disk or Ctrl-C part-way: no half file left beside it
        tmp.unlink(missing_ok=True)
        raise
    return path


def label_counts(n: int, label_set: Sequence[str], fractions: Optional[Sequence[float]]) -> list:
    """Integer counts per label summing to n, by largest remainder: how many of ``n``
    phantoms get each label (``fractions`` of them; None: equal shares)."""
    k = len(label_set)
    if fractions is None:
        fractions = [1.0 / k] * k
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (k,) or np.any(fractions < 0) or fractions.sum() <= 0:
        raise ValueError(f"need {k} non-negative fractions for labels {tuple(label_set)}, got {fractions.tolist()}")
    quota = n * fractions / fractions.sum()
    counts = np.floor(quota).astype(int)
    order = np.argsort(-(quota - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts.tolist()


def write_dataset(
    out_dir: Union[str, Path],
    n: int,
    shape: Sequence[int] = (32, 32, 32),
    seed: int = 0,
    label_set: Sequence[str] = ("NC", "AD"),
    fractions: Optional[Sequence[float]] = None,
    ad_fraction: Optional[float] = None,
    voxel_mm: Union[float, Sequence[float], None] = None,
    orientations: Sequence[str] = DEFAULT_ORIENTATIONS,
    max_rotation_deg: float = 5.0,
    noise: float = 0.04,
    force: bool = False,
    phantom_fn: Optional[Callable[..., Phantom]] = None,
    anatomy: str = "geometric",
) -> Path:
    """Write ``n`` phantoms as ``out_dir/subjects/sub-XXXX.nii.gz`` and ``labels.csv``.

    ``labels.csv`` has the columns ``subject`` (file name relative to
    ``out_dir``) and ``label``; ``phantoms.json`` records the generator
    settings and each subject's ground truth (atrophy, ventricle volume).

    Labels are assigned in exact proportions: ``fractions`` per label of
    ``label_set``, or for two labels ``ad_fraction`` for the second (the
    patient group); default equal shares. Subject ``i`` depends only on
    ``seed`` and ``i`` (and its label), so the same seed gives identical files.

    An existing non-empty ``out_dir`` is refused unless ``force``; with
    ``force`` only the files this function writes are replaced, nothing else is
    deleted (``labels.csv``, which marks a whole dataset, goes first and comes back
    last: a rewrite interrupted part-way reads as unfinished, not as the old
    dataset), and only those of an earlier ``write_dataset`` (a ``labels.csv`` or
    ``phantoms.json`` it did not write is refused, FileExistsError). A dataset that would not fit is refused before anything is written:
    one subject needing more memory than is available, or the subjects more disk
    than is free (:func:`meshpar.data.synth_checks.check_room`).

    ``phantom_fn`` (default :func:`make_phantom`) draws each subject, with
    :func:`make_phantom`'s arguments; ``anatomy`` names it in
    ``phantoms.json`` (see :mod:`meshpar.data.template_phantoms`).

    Returns the path of ``labels.csv``.
    """
    out_dir = Path(out_dir)
    n, shape, label_set = check_dataset_arguments(n, shape, label_set, seed, fractions, noise,
                                                  max_rotation_deg, orientations)
    if phantom_fn is not None and not callable(phantom_fn):  # failed once the files began
        raise TypeError(f"phantom_fn must be callable, as make_phantom is, got {phantom_fn!r}")
    if ad_fraction is not None:
        if fractions is not None:
            raise ValueError("give either fractions or ad_fraction, not both")
        if len(label_set) != 2:
            raise ValueError(f"ad_fraction needs exactly two labels, got {label_set}")
        if isinstance(ad_fraction, (str, bool)) or not 0.0 <= ad_fraction <= 1.0:
            raise ValueError(f"ad_fraction must be in [0, 1], got {ad_fraction!r}")
        fractions = (1.0 - ad_fraction, ad_fraction)
    check_distinct_severities(label_set, fractions, severity_of)
    if fractions is None and n < len(label_set):  # equal shares: a label left empty
        raise ValueError(f"n={n} subjects cannot share {len(label_set)} labels equally: "
                         f"{', '.join(label_set[n:])} would have none; give n >= "
                         f"{len(label_set)} (or fractions that leave it out)")
    for codes in orientations:
        orientation_affine(shape, 1.0, codes)  # fail on bad codes before writing anything
    if voxel_mm is None:
        voxel_mm = default_voxel_mm(shape)
    check_voxel_mm(shape, voxel_mm)
    refuse_targets(out_dir, n, force, ("labels.csv", META_FILE))
    check_room(out_dir, n, shape)

    counts = label_counts(n, label_set, fractions)
    root = np.random.SeedSequence(seed)
    order_rng = np.random.default_rng(root.spawn(1)[0])
    labels = np.repeat(np.arange(len(label_set)), counts)
    order_rng.shuffle(labels)
    subject_seeds = np.random.SeedSequence([seed, 1]).spawn(n)

    # labels.csv marks a whole dataset: an earlier one's, kept while its subjects were
    # rewritten, made a rewrite interrupted part-way read as whole (old labels, some new
    # subjects); without it the directory reads as unfinished, and --force redoes it
    for name in ("labels.csv", META_FILE):
        (out_dir / name).unlink(missing_ok=True)
    subjects_dir = out_dir / "subjects"
    made = [d for d in (subjects_dir, out_dir, *out_dir.parents) if not d.exists()]  # deepest first
    subjects_dir.mkdir(parents=True, exist_ok=True)
    try:
        rows, meta_subjects = _write_subjects(
            out_dir, n, shape, label_set, labels, subject_seeds, voxel_mm, orientations,
            max_rotation_deg, noise, phantom_fn)
    except BaseException:  # e.g. MemoryError at the first subject: leave no empty folder
        for d in made:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise

    meta = {
        "generator": "meshpar.data.phantoms",
        "format_version": FORMAT_VERSION,
        "anatomy": anatomy,
        "n": n,
        "shape": list(shape),
        "voxel_mm": np.broadcast_to(np.asarray(voxel_mm, float), (3,)).tolist(),
        "seed": seed,
        "label_set": list(label_set),
        "counts": dict(zip(label_set, counts)),
        "orientations": list(orientations),
        "max_rotation_deg": max_rotation_deg,
        "noise": noise,
        "subjects": meta_subjects,
    }
    # whole or not at all: a half-written record is not data synth's, and --force refused it
    write_text_atomic(out_dir / META_FILE, json.dumps(meta, indent=1) + "\n")
    # labels.csv last: a directory with labels.csv is a complete dataset.
    labels_path = out_dir / "labels.csv"
    tmp = out_dir / ".labels.csv.partial"
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["subject", "label"])
        writer.writerows(rows)
    os.replace(tmp, labels_path)
    return labels_path


def _write_subjects(out_dir: Path, n, shape, label_set, labels, subject_seeds, voxel_mm,
                    orientations, max_rotation_deg, noise, phantom_fn) -> tuple:
    """Draw and save each of :func:`write_dataset`'s subjects: ``(labels.csv rows,
    phantoms.json subject records)``."""
    rows, meta_subjects = [], []
    for i in range(n):
        name = f"subjects/{subject_file(i + 1, n)}"
        label = label_set[labels[i]]
        phantom = (phantom_fn or make_phantom)(
            label, shape, seed=subject_seeds[i], label_set=label_set, voxel_mm=voxel_mm,
            orientations=orientations, max_rotation_deg=max_rotation_deg, noise=noise,
        )
        save_nifti(phantom.image, phantom.affine, out_dir / name)
        rows.append((name, label))
        meta_subjects.append(
            {
                "subject": name,
                "orientation": phantom.orientation,
                "ventricle_ml": round(phantom.ventricle_ml, 3),
                "brain_ml": round(phantom.brain_ml, 3),
                **phantom.params.summary(),
                "measures": phantom.measures,
            }
        )
    return rows, meta_subjects
