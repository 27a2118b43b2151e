"""Sweep 7 of the data path: volumes whose intensities are of another scale than a T1's
(a map in SI units) or of another stored type, through the default pre-processing."""
import nibabel as nib
import numpy as np
from nifti_helpers import blob, save_nifti
import pytest

from meshpar.data.nifti_files import load_volume
from meshpar.data.transforms import ZScore, default_transform
from meshpar.data.types import BadSubjectError, Volume


def _normalised(path):
    return default_transform((8, 8, 8), augment=False)(load_volume(path)).data


@pytest.mark.parametrize("scale", [2.5e-11, 1e-12])  # largest value ~3e-9, ~1e-10
def test_a_map_in_si_units_is_normalised_like_its_twin_in_other_units(tmp_path, scale):
    """A diffusivity map in m^2/s (up to ~3e-9) was 'is constant (0); nothing to normalise'
    (or 'constant inside its mask'): the spread was compared with an absolute 1e-8."""
    data = blob() - blob().min()
    unit = _normalised(save_nifti(tmp_path / "unit.nii.gz", data))
    small = _normalised(save_nifti(tmp_path / "si.nii.gz", data * scale))
    np.testing.assert_allclose(small, unit, rtol=0, atol=1e-4)


def test_int16_with_scl_slope_reads_as_its_scaled_values(tmp_path):
    """The scaling of the header applies (values = stored * slope + intercept)."""
    stored = (blob() * 10).astype(np.int16)
    img = nib.Nifti1Image(stored, np.eye(4))
    img.header.set_slope_inter(0.25, -3.0)
    nib.save(img, str(tmp_path / "scaled.nii.gz"))
    np.testing.assert_allclose(load_volume(tmp_path / "scaled.nii.gz").data,
                               stored * 0.25 - 3.0, rtol=1e-6)


@pytest.mark.parametrize("values, words", [
    (np.zeros((6, 6, 6)), r"is constant \(0\)"),
    (np.full((6, 6, 6), 1e-9), r"is constant \(1e-09\)"),
    (np.full((6, 6, 6), 3e7), r"is constant \(3e\+07\)"),
    (np.where(np.indices((6, 6, 6))[0] > 2, 1e-9, 0.0), "is constant inside its mask"),
    (np.where(np.indices((6, 6, 6))[0] > 2, 500.0, 0.0), "is constant inside its mask"),
])
def test_constant_volumes_of_any_scale_are_still_refused(values, words):
    vol = Volume(values.astype(np.float32), np.eye(4), "flat.nii.gz")
    with pytest.raises(BadSubjectError, match=words):
        ZScore()(vol)
