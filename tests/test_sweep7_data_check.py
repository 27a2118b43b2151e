"""Sweep 7 of the data path: what `meshpar data check` counts."""
import nibabel as nib
import numpy as np

from meshpar.cli import main
from meshpar.data import write_dataset


def test_subjects_whose_voxels_are_bad_are_not_counted_usable(tmp_path, capsys):
    """6 good phantoms, a NaN volume (AD) and a missing file (NC): --content said
    '7 subjects (NC 3, AD 4); 2 bad', the NaN one among the 7 (the missing one not)."""
    write_dataset(tmp_path, 6, shape=(8, 8, 8), seed=0)
    nib.save(nib.Nifti1Image(np.full((8, 8, 8), np.nan, np.float32), np.eye(4)),
             str(tmp_path / "nan.nii.gz"))
    with open(tmp_path / "labels.csv", "a") as fh:
        fh.write("nan.nii.gz,AD\nmissing.nii.gz,NC\n")
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8"]) == 1
    assert f"{tmp_path}: 7 subjects (NC 3, AD 4); 1 bad" in capsys.readouterr().out
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8", "--content"]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path}: 6 subjects (NC 3, AD 3); 2 bad" in out
    assert "nan.nii.gz: 512 of 512 voxels are NaN or infinite" in out
