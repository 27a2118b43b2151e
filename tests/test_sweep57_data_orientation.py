"""Sweep 57 of the data path: NIfTI files whose header gives no orientation
(``qform_code`` and ``sform_code`` both 0).

nibabel gives such a file Analyze's affine, x flipped (``diag(-dx, dy, dz)``), so the
re-orienting step mirrored every such volume left to right, in silence. The NIfTI
standard reads them by its method 1 (``x = i * dx``...): as stored. meshpar now does
that, and says which files have no orientation (their left-right side is unknown)."""
import nibabel as nib
import numpy as np
from nifti_helpers import blob

from meshpar.cli import main
from meshpar.data.nifti import NiftiDataset
from meshpar.data.nifti_files import load_volume
from meshpar.data.transforms import Compose, Reorient


def _unoriented(path, data, zooms=(2.0, 3.0, 4.0)):
    """``data`` saved with both orientation codes 0 and voxel sizes ``zooms``."""
    img = nib.Nifti1Image(data, None)
    img.header.set_zooms(zooms[:data.ndim])
    nib.save(img, str(path))
    assert int(nib.load(str(path)).header["qform_code"]) == 0
    assert int(nib.load(str(path)).header["sform_code"]) == 0
    return path


def test_a_file_without_orientation_is_read_as_stored_not_mirrored(tmp_path):
    data = blob((10, 12, 14))
    _unoriented(tmp_path / "a.nii.gz", data)
    (tmp_path / "labels.csv").write_text("subject,label\na.nii.gz,NC\n")
    ds = NiftiDataset(tmp_path, shape=data.shape, label_set=("NC", "AD"),
                      transform=Compose([Reorient("RAS")]))
    x, _ = ds[0]
    np.testing.assert_array_equal(x[..., 0], data)  # was data[::-1]
    assert ds.unoriented == [tmp_path / "a.nii.gz"]
    vol = load_volume(tmp_path / "a.nii.gz")
    np.testing.assert_array_equal(vol.affine, np.diag([2.0, 3.0, 4.0, 1.0]))


def test_a_file_with_an_orientation_keeps_its_affine(tmp_path):
    from meshpar.data.nifti_files import orientation_unknown, stored_affine

    affine = np.array([[-2.0, 0, 0, 10], [0, 2, 0, -5], [0, 0, 2, 3], [0, 0, 0, 1]])
    nib.save(nib.Nifti1Image(blob(), affine), str(tmp_path / "b.nii"))
    img = nib.load(str(tmp_path / "b.nii"))
    assert not orientation_unknown(img)
    np.testing.assert_array_equal(stored_affine(img), affine)
    np.testing.assert_array_equal(load_volume(tmp_path / "b.nii").affine, affine)


def test_data_check_names_the_files_without_orientation(tmp_path, capsys):
    rows = ["subject,label"]
    for i in range(4):
        name = f"s{i}.nii.gz"
        data = blob((8, 8, 8), seed=i)
        if i < 2:
            _unoriented(tmp_path / name, data)
        else:
            nib.save(nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0])), str(tmp_path / name))
        rows.append(f"{name},{'NC' if i % 2 else 'AD'}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8"]) == 0
    out = capsys.readouterr().out
    assert "4 subjects (NC 2, AD 2); 0 bad" in out
    assert (f"note: 2 of 4 files have no orientation in their header (qform_code and "
            f"sform_code 0; first: {tmp_path / 's0.nii.gz'}): read as stored") in out
    assert "the other 2 give one and are re-oriented to RAS" in out


def test_train_notes_the_files_without_orientation_once(tmp_path, capsys, caplog):
    """Each part of a train run (training, validation, test) warned of its own share,
    without the command's name: '2 of 6 files...', then '1 of 2 files...'."""
    from types import SimpleNamespace

    from meshpar.cli.train_data import part_datasets
    from meshpar.data import read_labels

    rows = ["subject,label"]
    for i in range(6):
        data = blob((8, 8, 8), seed=i)
        if i % 3 == 0:
            _unoriented(tmp_path / f"s{i}.nii.gz", data)
        else:
            nib.save(nib.Nifti1Image(data, np.eye(4)), str(tmp_path / f"s{i}.nii.gz"))
        rows.append(f"s{i}.nii.gz,{('NC', 'AD')[i % 2]}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    subjects = read_labels(tmp_path, ("NC", "AD"))
    args = SimpleNamespace(skip_bad=False, command="train")
    sources = part_datasets(tmp_path, (8, 8, 8), ("NC", "AD"), args,
                            [subjects[:4], subjects[4:], []], 1, Compose([Reorient()]))
    assert sources[2] is None and [len(s) for s in sources[:2]] == [4, 2]
    err = capsys.readouterr().err
    assert err.count("no orientation") == 1
    assert err.startswith(f"meshpar train: note: 2 of 6 files have no orientation in their "
                          f"header (qform_code and sform_code 0; first: "
                          f"{tmp_path / 's0.nii.gz'})")
    assert not [r for r in caplog.records if "no orientation" in r.getMessage()]


def test_a_file_of_channels_read_as_one_volume_names_the_channels_option(tmp_path, capsys):
    """A 4-D file of two modalities read without --channels was 'has shape (8, 8, 8, 2):
    2 volumes, expected one 3-D volume', naming no way to read it."""
    data = np.stack([blob((8, 8, 8)), blob((8, 8, 8), seed=1)], axis=-1)
    nib.save(nib.Nifti1Image(data, np.eye(4)), str(tmp_path / "m.nii.gz"))
    (tmp_path / "labels.csv").write_text("subject,label\nm.nii.gz,NC\n")
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("meshpar data check: error: ")
    assert ("m.nii.gz: has shape (8, 8, 8, 2): 2 volumes, expected one 3-D volume (2 "
            "co-registered channels of one subject? --channels 2 reads them; channels=2 in "
            "the API)") in err
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8", "--channels", "2"]) == 0
