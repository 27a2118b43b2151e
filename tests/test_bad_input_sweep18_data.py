"""Bad-input sweep 18, the data: NIfTI volumes, transforms, phantoms, datasets and the
evaluation metrics, each argument either taken as meant or refused naming it."""
import math
import re

import numpy as np
import pytest


def _match(words: str) -> str:
    return re.escape(words)


# ------------------------------------------------------------------------ NIfTI volumes
def _nifti(path, data):
    import nibabel as nib

    nib.save(nib.Nifti1Image(data, np.eye(4)), str(path))
    return path


def test_values_beyond_float32_are_not_called_nan(tmp_path):
    """A float64 volume holding 1e300 (finite) was refused as '512 of 512 voxels are NaN
    or infinite', which the file did not hold: the values overflow float32."""
    from meshpar.data import BadSubjectError, load_volume

    data = np.ones((8, 8, 8))
    data[0, 0, :3] = 1e300
    path = _nifti(tmp_path / "big.nii", data)
    with pytest.raises(BadSubjectError, match=_match(
            "3 of 512 voxels are beyond float32's range (largest magnitude 1e+300; rescale")):
        load_volume(path)
    data[1, 1, 1] = np.nan
    with pytest.raises(BadSubjectError, match="3 of 512 voxels are beyond float32's range .*"
                                              ", 1 more are NaN or infinite"):
        load_volume(_nifti(tmp_path / "both.nii", data))
    data[0, 0, :3] = 1.0
    with pytest.raises(BadSubjectError, match="1 of 512 voxels are NaN or infinite"):
        load_volume(_nifti(tmp_path / "nan.nii", data))


@pytest.mark.parametrize("channels, error", [(2.0, TypeError), (True, TypeError),
                                              (0, ValueError), ("2", TypeError)])
def test_load_volume_names_a_wrong_channel_count(tmp_path, channels, error):
    """channels=2.0 was range()'s "'float' object cannot be interpreted as an integer",
    True read as one channel and 0 as 'expected 0 channels: (X, Y, Z, 0)'."""
    from meshpar.data import load_volume

    path = _nifti(tmp_path / "v.nii", np.ones((8, 8, 8, 2), np.float32))
    with pytest.raises(error, match="channels must be an integer >= 1"):
        load_volume(path, channels=channels)
    assert load_volume(path, channels=np.int64(2)).data.shape == (8, 8, 8, 2)


# -------------------------------------------------------------------------- transforms
def _transforms():
    from meshpar.data import transforms

    return transforms


@pytest.mark.parametrize("make, error, words", [
    (lambda t: t.Resample(shape=(16.5, 16, 16)), TypeError, "Resample shape[0] must be an "
                                                            "integer >= 1, got 16.5"),
    (lambda t: t.Resample(shape=(16, 16, 16), antialias="no"), TypeError,
     "Resample antialias must be True or False"),
    (lambda t: t.Resample(shape=(16, 16, 16), order=7), ValueError,
     "Resample order must be a spline order 0 to 5, got 7"),
    (lambda t: t.Resample(spacing=(1, 1)), ValueError,
     "Resample spacing must be a voxel size in mm or three of them"),
    (lambda t: t.Resample(spacing=math.nan), ValueError, "Resample spacing must be finite"),
    (lambda t: t.CropOrPad((16, 16, 16), value=math.nan), ValueError,
     "CropOrPad value must be finite"),
    (lambda t: t.CropOrPad((16, 0, 16)), ValueError, "CropOrPad shape[1] must be an integer"),
    (lambda t: t.ZScore(zero_outside="no"), TypeError, "ZScore zero_outside must be True or "
                                                       "False"),
    (lambda t: t.ZScore(mask="Otsu"), ValueError, "unknown mask 'Otsu'"),
    (lambda t: t.ZScore(eps=-1), ValueError, "ZScore eps must be >= 0"),
    (lambda t: t.RandomFlip(axes=(3,)), ValueError, "RandomFlip axes are spatial axes 0, 1 "
                                                    "or 2"),
    (lambda t: t.RandomFlip(p=2), ValueError, "RandomFlip p must be a probability in [0, 1]"),
    (lambda t: t.RandomFlip(p="0.5"), TypeError, "RandomFlip p must be a number"),
    (lambda t: t.RandomShift(max_shift=True), ValueError, "max_shift must be a whole number"),
    (lambda t: t.RandomShift(max_shift=math.inf), ValueError, "max_shift must be a whole "
                                                              "number"),
    (lambda t: t.RandomAffine(max_rotation_deg=math.nan), ValueError,
     "RandomAffine max_rotation_deg must be finite"),
    (lambda t: t.RandomAffine(max_scale=1.0), ValueError, "RandomAffine max_scale must be < 1"),
    (lambda t: t.RandomAffine(p=1.5), ValueError, "RandomAffine p must be a probability"),
    (lambda t: t.RandomAffine(order=1.0), TypeError, "RandomAffine order must be an integer"),
    (lambda t: t.default_transform((16, 16, 16), augment="flip"), TypeError,
     "augment must be True, False or a sequence of the names flip, shift, affine, got "
     "'flip'; for one, ['flip']"),
    (lambda t: t.default_transform((16.5, 16, 16)), TypeError, "shape[0] must be an integer"),
])
def test_the_transforms_name_a_wrong_argument(make, error, words):
    """Each was taken and went wrong later or in silence: sizes 16.5 cut to 16, switches
    'no' on, order 7 scipy's error and NaN values NaN volumes at the first example (each
    subject then refused as bad), a RandomFlip axis 3 numpy's AxisError, p 2 always,
    max_scale 1 a possible division by zero, augment='flip' read letter by letter
    ("unknown augmentation 'f', 'l', 'i', 'p'"), ZScore(mask='Otsu') refused only at the
    first volume."""
    with pytest.raises(error, match=_match(words)):
        make(_transforms())


def test_the_transforms_still_take_numpy_values_and_still_transform():
    from meshpar.data.types import Volume

    t = _transforms()
    chain = t.Compose([t.Resample(shape=np.array([8, 8, 8]), order=np.int64(1)),
                       t.ZScore(mask=np.float32(0.5)), t.RandomFlip(axes=[np.int64(0)],
                                                                   p=np.float64(1.0))])
    data = np.arange(4 ** 3, dtype=np.float32).reshape(4, 4, 4)
    out = chain(Volume(data, np.eye(4), "v.nii"), np.random.default_rng(0))
    assert out.data.shape == (8, 8, 8) and np.isfinite(out.data).all()
    plain = t.Compose([t.Resample(shape=(8, 8, 8)), t.ZScore(mask=0.5)])(
        Volume(data, np.eye(4), "v.nii"))
    np.testing.assert_array_equal(out.data, plain.data[::-1])
    assert t.default_transform((8, 8, 8), spacing=[2.0], augment=np.bool_(False))


# ---------------------------------------------------------------------------- metrics
@pytest.mark.parametrize("threshold, error, words", [
    (math.nan, ValueError, "threshold must be finite, got nan"),
    ("0.5", TypeError, "threshold must be a number, got '0.5'"),
    (1.5, ValueError, "threshold must be a probability in [0, 1], got 1.5"),
])
def test_the_metrics_name_a_wrong_threshold(threshold, error, words):
    """binary_metrics(threshold=nan) predicted every subject negative in silence
    (accuracy 0.5, sensitivity 0 on a perfect classifier), as did prediction_agreement;
    '0.5' was numpy's comparison error."""
    from meshpar.evaluation.metrics import binary_metrics, prediction_agreement

    with pytest.raises(error, match=_match(words)):
        binary_metrics([0, 1], [0.1, 0.9], threshold=threshold)
    with pytest.raises(error, match=_match(words)):
        prediction_agreement({"a": 0.1}, {"a": 0.9}, threshold=threshold)


def test_prediction_agreement_names_a_subject_without_a_probability():
    """A NaN probability made every difference statistic NaN, naming nothing."""
    from meshpar.evaluation.metrics import binary_metrics, prediction_agreement

    with pytest.raises(ValueError, match="probabilities must be finite; subject b has nan"):
        prediction_agreement({"a": 0.1, "b": math.nan}, {"a": 0.2, "b": 0.3})
    assert prediction_agreement({"a": 0.1, "b": 0.7}, {"a": 0.2, "b": 0.3},
                                threshold=np.float32(0.5))["label_agreement"] == 0.5
    assert binary_metrics([0, 1], [0.1, 0.9], threshold=np.float64(0.5))["accuracy"] == 1.0


# ----------------------------------------------------------------------------- phantoms
@pytest.mark.parametrize("kwargs, words", [
    (dict(noise=math.nan), "noise must be a finite number >= 0, got nan"),
    (dict(noise=-1), "noise must be a finite number >= 0, got -1"),
    (dict(voxel_mm=math.nan), "voxel size nan mm is under"),
    (dict(shape=(12.5, 12, 12)), "shape must be three sizes of at least 8"),
    (dict(shape=(0, 12, 12)), "shape must be three sizes of at least 8"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),
    (dict(seed=1.5), "seed must be a whole number >= 0, got 1.5"),
    (dict(max_rotation_deg=math.nan), "max_rotation_deg must be a finite number >= 0"),
    (dict(orientations="RAS"), "orientations must be a list of axis codes"),
    (dict(orientations=[]), "orientations must be a list of axis codes"),
    (dict(noise="0.1"), "noise must be a finite number >= 0, got '0.1'"),
    (dict(label_set="NCAD"), "label set must be a sequence of names, got 'NCAD'"),
])
def test_make_phantom_names_a_wrong_argument(kwargs, words):
    """make_phantom took what write_dataset refuses: a NaN or negative noise level gave a
    phantom without noise and a NaN voxel size a volume of NaN, both in silence; 12.5
    was cut to 12; a size of 0, a seed of -1 or 1.5, a NaN rotation, no orientations and
    noise '0.1' were numpy's errors; 'RAS' was read letter by letter (axis codes 'S')."""
    from meshpar.data import make_phantom

    with pytest.raises(ValueError, match=_match(words)):
        make_phantom("AD", **{"shape": (12, 12, 12), **kwargs})


def test_make_phantom_still_takes_numpy_values_and_seed_sequences():
    from meshpar.data import make_phantom

    a = make_phantom("AD", shape=np.array([12, 12, 12]), seed=np.int64(3), noise=np.float32(0))
    b = make_phantom("AD", shape=(12, 12, 12), seed=3, noise=0.0)
    np.testing.assert_array_equal(a.image, b.image)
    assert make_phantom("NC", (12, 12, 12), seed=np.random.SeedSequence(1)).image.shape == (
        12, 12, 12)


def test_nifti_dataset_names_a_transform_that_is_not_callable(tmp_path):
    """NiftiDataset(transform='default') was taken and failed at the first example with
    "'str' object is not callable"."""
    from meshpar.data import NiftiDataset, write_dataset

    write_dataset(tmp_path / "ds", n=2, shape=(8, 8, 8), seed=0)
    with pytest.raises(TypeError, match="transform must be callable .* got 'default'"):
        NiftiDataset(tmp_path / "ds", shape=(8, 8, 8), transform="default")
    data = NiftiDataset(tmp_path / "ds", shape=(8, 8, 8),
                        transform=_transforms().default_transform((8, 8, 8), augment=False))
    assert data[0][0].shape == (8, 8, 8, 1)


def test_a_pass_shorter_than_one_whole_batch_is_refused(tmp_path):
    """make_tf_dataset(batch_size=8, drop_remainder=True) of 4 subjects (one pass) was an
    empty dataset: an estimator trained or evaluated on nothing, in silence."""
    from meshpar.data import NiftiDataset, make_tf_dataset, write_dataset

    write_dataset(tmp_path / "ds", n=4, shape=(8, 8, 8), seed=0)
    data = NiftiDataset(tmp_path / "ds", shape=(8, 8, 8))
    with pytest.raises(ValueError, match="batch_size 8 is more than the 4 examples of 1 "
                                         "pass\\(es\\) from element 0: with drop_remainder"):
        make_tf_dataset(data, batch_size=8, drop_remainder=True)
    with pytest.raises(ValueError, match="more than the 1 examples of 2 pass"):
        data.to_tf(2, repeat=2, drop_remainder=True, start=7)
    assert len(list(data.to_tf(4, repeat=2, drop_remainder=True, start=4))) == 1
    assert len(list(data.to_tf(8, drop_remainder=False))) == 1  # a short batch is kept


@pytest.mark.parametrize("make", [lambda t: t.Resample(shape=(8, 8)),
                                  lambda t: t.CropOrPad((8, 8, 8, 1))])
def test_a_transform_shape_is_three_sizes(make):
    """Resample(shape=(8, 8)) and CropOrPad((8, 8, 8, 1)) were taken and failed at the
    first volume with numpy's 'operands could not be broadcast together'."""
    with pytest.raises(ValueError, match="shape must be three sizes \\(X, Y, Z\\)"):
        make(_transforms())
