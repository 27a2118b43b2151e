"""Pre-processing steps: reorientation, resampling, crop/pad, z-scoring, seeded augmentation."""
import nibabel as nib
import numpy as np
from nifti_helpers import blob, save_nifti
import pytest

from meshpar.data.nifti import load_volume
from meshpar.data.types import Volume
from meshpar.data.transforms import (
    Compose,
    CropOrPad,
    RandomAffine,
    RandomFlip,
    RandomShift,
    Reorient,
    Resample,
    ZScore,
    default_transform,
)


def _blob(shape=(12, 12, 12), seed=0):
    return blob(shape, seed)


_save = save_nifti


def test_lps_file_reorients_to_the_same_array_as_its_ras_twin(tmp_path):
    data = _blob(shape=(10, 12, 14))
    ras_affine = np.diag([2.0, 2.0, 2.0, 1.0])
    ras_affine[:3, 3] = [-9, -11, -13]
    flip = np.diag([-1.0, -1.0, 1.0, 1.0])
    flip[:3, 3] = [9, 11, 0]  # index i -> 9 - i, j -> 11 - j
    lps_data = data[::-1, ::-1, :]
    lps_affine = ras_affine @ flip
    ras = load_volume(_save(tmp_path / "ras.nii.gz", data, ras_affine))
    lps = load_volume(_save(tmp_path / "lps.nii", lps_data, lps_affine))
    assert nib.aff2axcodes(lps.affine) == ("L", "P", "S")
    got, want = Reorient()(lps), Reorient()(ras)
    np.testing.assert_array_equal(got.data, want.data)
    np.testing.assert_allclose(got.affine, want.affine)
    canonical = nib.as_closest_canonical(nib.load(str(tmp_path / "lps.nii")))
    np.testing.assert_array_equal(got.data, canonical.get_fdata(dtype=np.float32))


def test_resample_to_target_shape_keeps_the_field_of_view():
    vol = Volume(_blob(shape=(24, 20, 16)), np.diag([1.0, 1.2, 1.5, 1.0]))
    out = Resample(shape=(12, 10, 8))(vol)
    assert out.data.shape == (12, 10, 8) and out.data.dtype == np.float32
    np.testing.assert_allclose(out.zooms, [2.0, 2.4, 3.0])

    def corner(v, index):  # world position of a grid corner (voxel edge, not centre)
        return (v.affine @ np.r_[index, 1.0])[:3]

    np.testing.assert_allclose(corner(out, [-0.5] * 3), corner(vol, [-0.5] * 3))
    np.testing.assert_allclose(corner(out, [11.5, 9.5, 7.5]), corner(vol, [23.5, 19.5, 15.5]))
    ramp = Volume(np.indices((20, 20, 20))[0].astype(np.float32), np.eye(4))
    np.testing.assert_allclose(Resample(shape=(10, 10, 10))(ramp).data[2:8, 5, 5], 2 * np.arange(2, 8) + 0.5,
                               atol=1e-3)


def test_resample_to_spacing_then_crop_or_pad_reaches_the_model_grid():
    vol = Volume(_blob(shape=(20, 20, 10)), np.diag([1.0, 1.0, 3.0, 1.0]))
    spaced = Resample(spacing=2.0)(vol)
    assert spaced.data.shape == (10, 10, 15)
    out = CropOrPad((12, 8, 12))(spaced)
    assert out.data.shape == (12, 8, 12)
    # voxel (1, 0, 0) of the padded/cropped grid is voxel (0, 1, 1) of the spaced one
    np.testing.assert_allclose(out.affine @ [1, 0, 0, 1], spaced.affine @ [0, 1, 1, 1])
    np.testing.assert_array_equal(out.data[1:11, :, :], spaced.data[:, 1:9, 1:13])


def test_zscore_uses_statistics_inside_the_head_mask():
    data = np.zeros((16, 16, 16), np.float32)
    data[4:12, 4:12, 4:12] = np.random.default_rng(0).normal(500, 40, (8, 8, 8))
    out = ZScore()(Volume(data, np.eye(4))).data
    inside = out[4:12, 4:12, 4:12]
    assert abs(inside.mean()) < 1e-4 and abs(inside.std() - 1) < 1e-4
    assert np.all(out[0] < -5)  # background far below the head
    zeroed = ZScore(mask=100.0, zero_outside=True)(Volume(data, np.eye(4))).data
    assert np.all(zeroed[0] == 0)


def test_augmentation_is_seeded_and_off_without_rng():
    vol = Volume(_blob(shape=(16, 16, 16)), np.eye(4))
    aug = Compose([RandomFlip(p=1.0), RandomAffine(max_rotation_deg=10, max_shift=1)])
    assert aug(vol).data is vol.data
    a = aug(vol, np.random.default_rng(3)).data
    b = aug(vol, np.random.default_rng(3)).data
    c = aug(vol, np.random.default_rng(4)).data
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c) and not np.allclose(a, vol.data)
    np.testing.assert_array_equal(RandomFlip(p=1.0)(vol, np.random.default_rng(0)).data, vol.data[::-1])


def test_shift_moves_whole_voxels_and_fills_with_the_background():
    data = np.zeros((6, 7, 8), np.float32) - 1.0
    data[2:4, 3:5, 2:6] = np.arange(16, dtype=np.float32).reshape(2, 2, 4)
    vol = Volume(data, np.eye(4))
    assert RandomShift(2)(vol).data is data  # no rng: identity
    seen = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        k = np.random.default_rng(seed).integers(-2, 3, size=3)  # the draw the shift makes
        out = RandomShift(2)(vol, rng).data
        np.testing.assert_array_equal(out, np.roll(data, tuple(k), axis=(0, 1, 2)))  # object inside
        assert out.dtype == data.dtype and (out == -1.0).sum() == (data == -1.0).sum()
        seen.add(tuple(k))
    assert len(seen) > 10  # the shifts vary with the seed
    edge = np.arange(27, dtype=np.float32).reshape(3, 3, 3)  # content leaves: min fills in
    out = RandomShift(1)(Volume(edge, np.eye(4)), np.random.default_rng(1)).data
    k = np.random.default_rng(1).integers(-1, 2, size=3)
    assert k.any() and (out == 0.0).sum() > 1
    with pytest.raises(ValueError, match="whole number"):
        RandomShift(1.5)


def test_default_transform_gives_the_model_grid_and_augments_only_with_rng():
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    vol = Volume(_blob(shape=(20, 24, 18)), affine)
    chain = default_transform((8, 8, 8))
    plain = chain(vol).data
    assert plain.shape == (8, 8, 8) and plain.dtype == np.float32
    np.testing.assert_array_equal(chain(vol).data, plain)
    assert not np.allclose(chain(vol, np.random.default_rng(0)).data, plain)
    spaced = default_transform((8, 8, 8), spacing=4.0, augment=False)
    assert spaced(vol).data.shape == (8, 8, 8) and not spaced.random


def test_constant_volume_error_names_its_file(tmp_path):
    vol = load_volume(_save(tmp_path / "flat.nii.gz", np.full((6, 6, 6), 3.0, np.float32)))
    with pytest.raises(ValueError, match="flat.nii.gz: is constant"):
        ZScore()(vol)


def test_the_data_package_re_exports_the_steps():
    import meshpar.data
    import meshpar.data.transforms as transforms

    for name in ("Compose", "CropOrPad", "RandomAffine", "RandomFlip", "RandomShift", "Reorient", "Resample", "ZScore",
                 "default_transform"):
        assert getattr(meshpar.data, name) is getattr(transforms, name)
