"""Synthetic MRI phantoms: files, determinism, anatomy that varies and a class signal that is spatial."""
import csv
import json

import nibabel as nib
import numpy as np
import pytest

from meshpar.cli import main
from meshpar.data.nifti import NiftiDataset, load_volume
from meshpar.data.transforms import Reorient
from meshpar.data.phantoms import make_phantom, orientation_affine, write_dataset


def _auc(feature, labels):
    """Probability that a random positive scores above a random negative."""
    f, y = np.asarray(feature, float), np.asarray(labels)
    return float((f[y == 1][:, None] > f[y == 0][None, :]).mean())


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """40 subjects at 32^3, written once for the module."""
    out = tmp_path_factory.mktemp("cohort")
    write_dataset(out, 40, shape=(32, 32, 32), seed=11)
    return out


def test_write_dataset_writes_nifti_files_and_labels_csv(tmp_path):
    labels = write_dataset(tmp_path / "ds", 6, shape=(16, 20, 18), seed=1)
    assert labels == tmp_path / "ds" / "labels.csv"
    rows = list(csv.DictReader(open(labels)))
    assert [r["subject"] for r in rows] == [f"subjects/sub-{i:04d}.nii.gz" for i in range(1, 7)]
    assert sorted(r["label"] for r in rows) == ["AD"] * 3 + ["NC"] * 3
    img = nib.load(str(tmp_path / "ds" / rows[0]["subject"]))
    assert img.shape == (16, 20, 18)
    assert img.get_data_dtype() == np.float32
    assert img.header.get_xyzt_units()[0] == "mm"
    assert int(img.header["sform_code"]) == 1 and int(img.header["qform_code"]) == 1
    np.testing.assert_allclose(img.header.get_zooms(), [200 / 20] * 3, rtol=1e-6)
    meta = json.loads((tmp_path / "ds" / "phantoms.json").read_text())
    assert meta["n"] == 6 and len(meta["subjects"]) == 6
    assert not list((tmp_path / "ds").rglob("*.partial*"))


def test_same_seed_writes_identical_volumes_and_other_seed_differs(tmp_path):
    write_dataset(tmp_path / "a", 3, shape=(16, 16, 16), seed=4)
    write_dataset(tmp_path / "b", 3, shape=(16, 16, 16), seed=4)
    write_dataset(tmp_path / "c", 3, shape=(16, 16, 16), seed=5)
    name = "subjects/sub-0002.nii.gz"
    a, b, c = (nib.load(str(tmp_path / d / name)) for d in "abc")
    np.testing.assert_array_equal(a.get_fdata(), b.get_fdata())
    np.testing.assert_array_equal(a.affine, b.affine)
    assert not np.allclose(a.get_fdata(), c.get_fdata())
    assert (tmp_path / "a" / "labels.csv").read_text() == (tmp_path / "b" / "labels.csv").read_text()


def test_subjects_differ_in_anatomy_and_acquisition(cohort):
    meta = json.loads((cohort / "phantoms.json").read_text())["subjects"]
    nc = [s for s in meta if s["label"] == "NC"]
    heads = np.array([s["head_radii_mm"] for s in nc])
    assert heads.std(axis=0).min() > 1.0  # head size and shape vary (mm)
    assert np.std([s["ventricle_ml"] for s in nc]) > 1.0
    assert len({s["orientation"] for s in meta}) > 1  # stored in several voxel orientations
    gains = [s["gain"] for s in meta]
    assert max(gains) / min(gains) > 1.5


def test_ventricle_volume_separates_ad_from_nc(cohort):
    meta = json.loads((cohort / "phantoms.json").read_text())["subjects"]
    y = [s["label"] == "AD" for s in meta]
    assert _auc([s["ventricle_ml"] for s in meta], y) > 0.9
    # ... and it is visible in the image: darker (more CSF) around the lateral ventricles.
    ds = NiftiDataset(cohort, (32, 32, 32))
    dark = [float((ds[i][0][13:19, 12:21, 15:19, 0] < -0.8).mean()) for i in range(len(ds))]
    assert _auc(dark, [ds.label_index(s) for s in ds.subjects]) > 0.75


def test_mean_intensity_alone_does_not_separate_the_classes(cohort):
    ds = NiftiDataset(cohort, (32, 32, 32))
    y = [ds.label_index(s) for s in ds.subjects]
    raw = [float(load_volume(s.path).data.mean()) for s in ds.subjects]
    normalised = [float(ds[i][0].mean()) for i in range(len(ds))]
    for feature in (raw, normalised):
        assert 0.2 < _auc(feature, y) < 0.8


def test_phantom_stored_lps_reorients_to_its_ras_twin():
    kwargs = dict(seed=3, noise=0.0, max_rotation_deg=4.0)
    ras = make_phantom("AD", shape=(20, 24, 22), orientation="RAS", **kwargs)
    lps = make_phantom("AD", shape=(20, 24, 22), orientation="LPS", **kwargs)
    pir = make_phantom("AD", shape=(24, 22, 20), orientation="PIR", **kwargs)  # axes y, z, x
    assert not np.allclose(ras.image, lps.image)
    assert nib.aff2axcodes(lps.affine) == ("L", "P", "S")
    from meshpar.data.types import Volume

    want = Reorient()(Volume(ras.image, ras.affine))
    for twin in (lps, pir):
        got = Reorient()(Volume(twin.image, twin.affine))
        np.testing.assert_allclose(got.affine, want.affine, atol=1e-9)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-3)


def test_orientation_affine_maps_array_centre_to_requested_point():
    affine = orientation_affine((10, 12, 14), 2.0, "LPS", center_mm=(1.0, 2.0, 3.0))
    centre = affine @ np.array([4.5, 5.5, 6.5, 1.0])
    np.testing.assert_allclose(centre[:3], [1.0, 2.0, 3.0])
    assert nib.aff2axcodes(affine) == ("L", "P", "S")
    with pytest.raises(ValueError, match="axis codes"):
        orientation_affine((8, 8, 8), 1.0, "RRS")


def test_mci_label_set_and_ad_fraction_set_the_label_counts(tmp_path):
    write_dataset(tmp_path / "mci", 5, shape=(12, 12, 12), label_set=("sMCI", "pMCI"), ad_fraction=0.4)
    labels = [r["label"] for r in csv.DictReader(open(tmp_path / "mci" / "labels.csv"))]
    assert sorted(labels) == ["pMCI", "pMCI", "sMCI", "sMCI", "sMCI"]
    with pytest.raises(ValueError, match="two labels"):
        write_dataset(tmp_path / "x", 3, label_set=("NC", "MCI", "AD"), ad_fraction=0.5)


def test_cli_synth_writes_dataset_then_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "phantoms"
    assert main(["data", "synth", "--out", str(out), "--n", "4", "--shape", "12,12,12", "--seed", "2"]) == 0
    assert len(list((out / "subjects").glob("*.nii.gz"))) == 4
    before = (out / "labels.csv").read_bytes()
    (out / "notes.txt").write_text("mine")
    assert main(["data", "synth", "--out", str(out), "--n", "2", "--shape", "12,12,12"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (out / "labels.csv").read_bytes() == before
    assert main(["data", "synth", "--out", str(out), "--n", "2", "--shape", "12,12,12", "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine"  # --force replaces only files synth writes
    assert len(list(csv.DictReader(open(out / "labels.csv")))) == 2


def test_cli_synth_rejects_a_bad_shape(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["data", "synth", "--out", str(tmp_path / "x"), "--shape", "32,32"])
    assert "three positive sizes" in capsys.readouterr().err


def test_phantoms_json_records_image_visible_measures(tmp_path):
    write_dataset(tmp_path / "m", 4, shape=(8, 8, 8), seed=1)
    meta = json.loads((tmp_path / "m" / "phantoms.json").read_text())
    assert meta["anatomy"] == "geometric"
    measures = meta["subjects"][0]["measures"]
    assert set(measures) == {"ventricle_fraction", "hippocampus_scale", "temporal_horn_scale",
                             "cortex_thickness", "sulcal_width", "age"}


def test_template_phantoms_atrophy_is_a_local_deformation(tmp_path):
    pytest.importorskip("nilearn")
    from meshpar.data import template_phantoms as tp

    # The deformation moves points near a ventricle, leaves far points alone.
    centre = np.array([tp.STRUCTURES["left lateral ventricle"][0]])
    far = np.array([[60.0, 60.0, 60.0]])
    scales = {"ventricle": 1.5, "hippocampus": 0.7, "temporal_horn": 1.3}
    near = centre + [[3.0, 0.0, 0.0]]
    moved = tp.deformation(near, scales) - centre
    assert 0 < moved[0, 0] < 3.0  # drawn from closer to the centre: the ventricle grows
    np.testing.assert_allclose(tp.deformation(far, scales), far, atol=1e-6)
    write = tp.write_dataset(tmp_path / "t", 4, shape=(16, 16, 16), seed=2)
    meta = json.loads((tmp_path / "t" / "phantoms.json").read_text())
    assert meta["anatomy"] == "template" and write.name == "labels.csv"
    img = nib.load(str(tmp_path / "t" / meta["subjects"][0]["subject"]))
    assert img.shape == (16, 16, 16) and float(np.asarray(img.dataobj).max()) > 0
    ad = [s for s in meta["subjects"] if s["label"] == "AD"]
    nc = [s for s in meta["subjects"] if s["label"] == "NC"]
    assert min(s["measures"]["ventricle_scale"] for s in ad) > \
        min(s["measures"]["ventricle_scale"] for s in nc)
