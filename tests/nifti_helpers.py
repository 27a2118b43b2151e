"""Small NIfTI fixtures shared by the data tests."""
import nibabel as nib
import numpy as np


def blob(shape=(12, 12, 12), seed=0):
    """A bright ellipsoid on a dark noisy background, off-centre so flips show."""
    rng = np.random.default_rng(seed)
    grid = np.indices(shape).astype(float)
    centre = np.array(shape)[:, None, None, None] * np.array([0.55, 0.45, 0.5])[:, None, None, None]
    inside = (((grid - centre) / (np.array(shape)[:, None, None, None] * 0.3)) ** 2).sum(0) < 1
    return (inside * 100.0 + grid[0] * 2 + rng.normal(0, 1, shape)).astype(np.float32) + 5.0


def save_nifti(path, data, affine=None):
    nib.save(nib.Nifti1Image(np.asarray(data), np.eye(4) if affine is None else affine), str(path))
    return path
