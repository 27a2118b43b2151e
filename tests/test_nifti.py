"""Reading ADNI-style NIfTI directories: files, bad data, tf.data (steps: test_transforms.py,
splits: test_cohorts.py)."""
import gzip
import logging

import nibabel as nib
import numpy as np
from nifti_helpers import blob, save_nifti
import pytest

from meshpar.data.nifti import NiftiDataset, load_volume, read_labels
from meshpar.data.types import BadLabelsError, BadSubjectError

SHAPE = (12, 12, 12)


def _blob(shape=SHAPE, seed=0):
    return blob(shape, seed)


_save = save_nifti


def _dataset(root, labels, n_bytes=None, header="subject,label"):
    """Write ``labels`` (name -> label) as good 12^3 volumes plus labels.csv."""
    root.mkdir(exist_ok=True)
    lines = [header]
    for i, (name, label) in enumerate(labels.items()):
        _save(root / name, _blob(seed=i))
        lines.append(f"{name},{label}")
    (root / "labels.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def good(tmp_path):
    return _dataset(tmp_path / "ds", {f"s{i}.nii.gz": ("NC", "AD")[i % 2] for i in range(6)})


def _add(root, name, label="AD"):
    with open(root / "labels.csv", "a") as fh:
        fh.write(f"{name},{label}\n")
    return root / name


# ------------------------------------------------------------------ reading


def test_volume_round_trips_through_a_nii_gz_file(tmp_path):
    data = _blob()
    affine = np.diag([1.5, 1.5, 2.0, 1.0])
    affine[:3, 3] = [-9, -8, -12]
    vol = load_volume(_save(tmp_path / "a.nii.gz", data, affine))
    np.testing.assert_array_equal(vol.data, data)
    np.testing.assert_allclose(vol.affine, affine)
    np.testing.assert_allclose(vol.zooms, [1.5, 1.5, 2.0])
    assert vol.data.dtype == np.float32 and vol.path == tmp_path / "a.nii.gz"


def test_dataset_reads_labels_and_yields_model_shaped_examples(good):
    ds = NiftiDataset(good, (8, 8, 8))
    assert len(ds) == 6 and ds.class_counts() == {"NC": 3, "AD": 3} and ds.n_skipped == 0
    x, y = ds[1]
    assert x.shape == (8, 8, 8, 1) and x.dtype == np.float32 and y == 1
    epoch = list(ds.examples(shuffle=True, seed=1))
    assert sorted(int(y) for _, y in epoch) == [0, 0, 0, 1, 1, 1]


def test_labels_csv_columns_match_case_insensitively_and_names_may_omit_suffix(tmp_path):
    root = tmp_path / "adni"
    root.mkdir()
    _save(root / "002_S_0295.nii.gz", _blob())
    (root / "labels.csv").write_text("Subject,Label,Group,Subject_ID\n002_S_0295,AD,pMCI,002_S_0295\n")
    [s] = read_labels(root, ("NC", "AD"))
    assert s.path == root / "002_S_0295.nii.gz" and s.group == "pMCI" and s.label == "AD"


# ------------------------------------------------------------------ bad data, one test per case


def test_corrupt_file_is_named_in_the_error(good):
    (good / "junk.nii.gz").write_bytes(b"this is not a nifti file at all" * 20)
    _add(good, "junk.nii.gz")
    with pytest.raises(BadSubjectError, match="junk.nii.gz.*cannot be read") as err:
        NiftiDataset(good, (8, 8, 8))
    assert err.value.path == good / "junk.nii.gz"


def test_corrupt_file_is_skipped_and_counted_with_skip_bad(good, caplog):
    (good / "junk.nii.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 100)
    _add(good, "junk.nii.gz")
    with caplog.at_level(logging.WARNING, logger="meshpar.data.nifti"):
        ds = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    assert len(ds) == 6 and ds.n_skipped == 1 and ds.skipped[0].path == good / "junk.nii.gz"
    assert "junk.nii.gz" in caplog.text


def test_truncated_nii_gz_fails_when_its_voxels_are_read(good):
    whole = gzip.compress(nib.Nifti1Image(_blob(shape=(20, 20, 20)), np.eye(4)).to_bytes())
    (good / "cut.nii.gz").write_bytes(whole[: len(whole) // 2])
    _add(good, "cut.nii.gz")
    ds = NiftiDataset(good, (8, 8, 8))  # the header is intact: caught lazily
    with pytest.raises(BadSubjectError, match="cut.nii.gz: voxel data cannot be read"):
        ds.load(6)
    lenient = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    assert len(list(lenient.examples())) == 6 and lenient.skipped[0].path == good / "cut.nii.gz"


def test_truncated_uncompressed_nii_fails_at_the_header_check(good):
    whole = nib.Nifti1Image(_blob(), np.eye(4)).to_bytes()
    (good / "cut.nii").write_bytes(whole[:-100])
    _add(good, "cut.nii")
    with pytest.raises(BadSubjectError, match="cut.nii: is truncated"):
        NiftiDataset(good, (8, 8, 8))


def test_two_dimensional_file_is_rejected(good):
    _save(good / "slice.nii.gz", _blob()[:, :, 0])
    _add(good, "slice.nii.gz")
    with pytest.raises(BadSubjectError, match=r"slice.nii.gz: has shape \(12, 12\)"):
        NiftiDataset(good, (8, 8, 8))
    assert NiftiDataset(good, (8, 8, 8), skip_bad=True).n_skipped == 1


def test_four_dimensional_file_with_two_volumes_is_rejected_but_one_volume_is_fine(good):
    _save(good / "fmri.nii.gz", np.stack([_blob(), _blob()], axis=-1))
    _save(good / "single.nii.gz", _blob()[..., None])
    _add(good, "single.nii.gz")
    assert NiftiDataset(good, (8, 8, 8))[6][0].shape == (8, 8, 8, 1)
    _add(good, "fmri.nii.gz")
    with pytest.raises(BadSubjectError, match="fmri.nii.gz: has shape .*2 volumes"):
        NiftiDataset(good, (8, 8, 8))
    assert NiftiDataset(good, (8, 8, 8), skip_bad=True).n_skipped == 1


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_inf_voxels_fail_lazily_naming_the_file(good, value):
    data = _blob()
    data[3, 4, 5] = value
    _save(good / "nan.nii.gz", data)
    _add(good, "nan.nii.gz")
    ds = NiftiDataset(good, (8, 8, 8))
    with pytest.raises(BadSubjectError, match="nan.nii.gz: 1 of 1728 voxels are NaN or infinite"):
        ds[6]
    lenient = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    assert lenient.n_skipped == 0  # content is checked when read...
    assert len(list(lenient.examples())) == 6 and lenient.n_skipped == 1  # ...then skipped and counted


def test_constant_volume_cannot_be_normalised(good):
    _save(good / "flat.nii.gz", np.full(SHAPE, 7.0, np.float32))
    _add(good, "flat.nii.gz")
    with pytest.raises(BadSubjectError, match="flat.nii.gz: is constant"):
        NiftiDataset(good, (8, 8, 8))[6]


def test_label_outside_the_label_set_is_rejected(good):
    _save(good / "mci.nii.gz", _blob())
    _add(good, "mci.nii.gz", label="MCI")
    with pytest.raises(BadSubjectError, match=r"mci.nii.gz: label 'MCI' \(labels.csv line 8\) is not in"):
        NiftiDataset(good, (8, 8, 8))
    ds = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    assert len(ds) == 6 and ds.skipped[0].path == good / "mci.nii.gz"
    assert len(NiftiDataset(good, (8, 8, 8), label_set=("NC", "MCI", "AD"))) == 7


def test_file_named_in_labels_csv_but_missing_is_rejected(good):
    _add(good, "gone.nii.gz")
    with pytest.raises(BadSubjectError, match="gone.nii.gz: file named in labels.csv line 8 does not exist"):
        NiftiDataset(good, (8, 8, 8))
    ds = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    assert (len(ds), ds.n_skipped) == (6, 1)


def test_labels_csv_missing_a_column_is_rejected_even_with_skip_bad(tmp_path):
    root = _dataset(tmp_path / "ds", {"a.nii.gz": "AD"}, header="subject,diagnosis")
    with pytest.raises(BadLabelsError, match="labels.csv: missing column\\(s\\) 'label'"):
        NiftiDataset(root, (8, 8, 8), skip_bad=True)


def test_missing_labels_csv_and_duplicate_rows_are_rejected(good):
    _add(good, "s1.nii.gz")
    with pytest.raises(BadLabelsError, match="'s1.nii.gz' is already listed on line 3"):
        read_labels(good)
    (good / "labels.csv").unlink()
    with pytest.raises(BadLabelsError, match="no labels.csv"):
        read_labels(good)


def test_one_file_listed_under_two_spellings_is_a_duplicate(good):
    """s1.nii.gz again as ./x/../s1.nii.gz, and as its absolute path: one volume with
    two labels would be two subjects."""
    (good / "x").mkdir()
    for other in ("x/../s1.nii.gz", str((good / "s1.nii.gz").resolve())):
        text = (good / "labels.csv").read_text()
        (good / "labels.csv").write_text(text.rstrip("\n") + f"\n{other},AD\n")
        with pytest.raises(BadLabelsError, match="already listed on line .* \\(the same file\\)"):
            read_labels(good)
        (good / "labels.csv").write_text(text)


def test_all_subjects_bad_is_an_error_not_an_empty_dataset(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    (root / "labels.csv").write_text("subject,label\nx.nii.gz,AD\n")
    with pytest.raises(ValueError, match=r"no usable subjects in labels.csv \(1 skipped as "
                                         r"bad; first: x.nii.gz: "):
        NiftiDataset(root, (8, 8, 8), skip_bad=True)


# ------------------------------------------------------------------ tf.data


def test_tf_pipeline_streams_batches_and_skips_bad_subjects(good):
    import tensorflow as tf

    from meshpar.data.nifti import make_tf_dataset

    data = _blob()
    data[0, 0, 0] = np.nan
    _save(good / "nan.nii.gz", data)
    _add(good, "nan.nii.gz")
    source = NiftiDataset(good, (8, 8, 8), skip_bad=True)
    batches = list(make_tf_dataset(source, batch_size=4, augment=True, seed=3))
    assert [tuple(x.shape) for x, _ in batches] == [(4, 8, 8, 8, 1), (2, 8, 8, 8, 1)]
    assert batches[0][0].dtype == tf.float32 and batches[0][1].dtype == tf.int32
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert sorted(labels) == [0, 0, 0, 1, 1, 1]
    assert source.n_skipped == 1 and source.skipped[0].path == good / "nan.nii.gz"
    again = list(make_tf_dataset(source, batch_size=4, augment=True, seed=3))
    np.testing.assert_array_equal(batches[0][0].numpy(), again[0][0].numpy())  # deterministic
    two_epochs = make_tf_dataset(source, batch_size=3, repeat=2, drop_remainder=True)
    assert sum(1 for _ in two_epochs) == 4

    strict = make_tf_dataset(good, (8, 8, 8), batch_size=7, shuffle=False)
    with pytest.raises(tf.errors.OpError, match="nan.nii.gz: 1 of 1728 voxels are NaN"):
        list(strict)


def test_a_resumed_stream_starts_where_the_checkpoint_left_it(good):
    from meshpar.data.nifti import make_tf_dataset

    full = [x.numpy() for x, _ in make_tf_dataset(good, (8, 8, 8), batch_size=2, seed=5,
                                                  augment=True, repeat=3)]
    resumed = [x.numpy() for x, _ in make_tf_dataset(good, (8, 8, 8), batch_size=2, seed=5,
                                                     augment=True, repeat=3, start=2 * 4)]
    assert len(resumed) == len(full) - 4
    for a, b in zip(full[4:], resumed):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="start"):
        make_tf_dataset(good, (8, 8, 8), batch_size=2, start=-1)


def test_augmented_epochs_normalise_each_subject_once(good, monkeypatch):
    """The z-score (Otsu mask, mean, std) runs before the random steps, so it is
    cached with the subject: augmented epochs only flip. Per example it took the
    CPU the training step needed (docs/measuring.md)."""
    from meshpar.data import transforms
    from meshpar.data.transforms import default_transform

    calls = []
    original = transforms.ZScore.__call__
    monkeypatch.setattr(transforms.ZScore, "__call__",
                        lambda self, vol: calls.append(vol.path) or original(self, vol))
    source = NiftiDataset(good, (8, 8, 8), transform=default_transform((8, 8, 8),
                                                                       augment=("flip",)))
    plain = {i: source.load(i)[0] for i in range(len(source))}
    calls.clear()
    for epoch in range(3):
        for i in range(len(source)):
            x, _ = source.load(i, np.random.default_rng([epoch, i]))
            # an augmented example is its subject's normalised volume, flipped or not
            assert (np.array_equal(x, plain[i])
                    or np.array_equal(x, plain[i][::-1])), (epoch, i)
    assert len(calls) == len(source)


def test_data_check_names_each_bad_subject_once(tmp_path):
    """In a process of its own: pytest keeps log records off stderr, where the
    readers' skip warnings went a second time."""
    import subprocess
    import sys

    from meshpar.data import write_dataset

    write_dataset(tmp_path / "d", 6, shape=(8, 8, 8), seed=0)
    with open(tmp_path / "d" / "labels.csv", "a") as fh:
        fh.write("missing.nii.gz,AD\n")
    proc = subprocess.run([sys.executable, "-m", "meshpar", "data", "check", str(tmp_path / "d"),
                           "--shape", "8,8,8"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert (proc.stdout + proc.stderr).count("missing.nii.gz") == 1, proc.stdout + proc.stderr
    assert "6 subjects (NC 3, AD 3); 1 bad" in proc.stdout
