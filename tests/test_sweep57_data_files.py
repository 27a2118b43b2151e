"""Sweep 57 of the data path: NIfTI files whose name says another compression than
their bytes (a .nii.gz renamed .nii, or the other way)."""
import gzip

import nibabel as nib
import numpy as np
from nifti_helpers import blob
import pytest

from meshpar.data.nifti_files import check_header
from meshpar.data.types import BadSubjectError


def test_a_gzip_file_named_nii_says_to_name_it_nii_gz(tmp_path):
    """nibabel's 'Cannot work out file type of ...' named no cause."""
    nib.save(nib.Nifti1Image(blob((8, 8, 8)), np.eye(4)), str(tmp_path / "a.nii.gz"))
    (tmp_path / "a.nii.gz").rename(tmp_path / "a.nii")
    with pytest.raises(BadSubjectError, match=r"a.nii: cannot be read as NIfTI \(.*\); it is "
                                              r"gzip-compressed: name it .nii.gz$"):
        check_header(tmp_path / "a.nii")


@pytest.mark.parametrize("image", [nib.Nifti1Image, nib.Nifti2Image])
def test_a_plain_file_named_nii_gz_says_to_name_it_nii(tmp_path, image):
    nib.save(image(blob((8, 8, 8)), np.eye(4)), str(tmp_path / "b.nii"))
    (tmp_path / "b.nii").rename(tmp_path / "b.nii.gz")
    with pytest.raises(BadSubjectError, match=r"b.nii.gz: cannot be read as NIfTI \(.*is not "
                                              r"a gzip file\); it is not gzip-compressed: "
                                              r"name it .nii$"):
        check_header(tmp_path / "b.nii.gz")


def test_a_corrupt_gzip_gets_no_renaming_advice(tmp_path):
    (tmp_path / "c.nii.gz").write_bytes(gzip.compress(b"not a nifti header at all"))
    with pytest.raises(BadSubjectError) as err:
        check_header(tmp_path / "c.nii.gz")
    assert "name it" not in str(err.value)


@pytest.mark.parametrize("unit, size", [("meter", 0.002), ("micron", 2000.0)])
def test_voxel_sizes_in_metres_or_microns_are_read_in_mm(tmp_path, unit, size):
    """nibabel leaves the header's space unit as it is: a 2 mm voxel stored as 0.002 m
    was resampled by spacing=2 (mm) to one voxel a side, padded to the grid, in silence."""
    from meshpar.data import NiftiDataset
    from meshpar.data.nifti_files import load_volume

    data = blob((12, 12, 12))
    img = nib.Nifti1Image(data, np.diag([size, size, size, 1.0]))
    img.header.set_xyzt_units(unit)
    nib.save(img, str(tmp_path / "odd.nii.gz"))
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0]))
    img.header.set_xyzt_units("mm")
    nib.save(img, str(tmp_path / "mm.nii.gz"))
    (tmp_path / "labels.csv").write_text("subject,label\nodd.nii.gz,NC\nmm.nii.gz,AD\n")
    np.testing.assert_allclose(np.diag(load_volume(tmp_path / "odd.nii.gz").affine),
                               [2.0, 2.0, 2.0, 1.0], rtol=1e-6)
    ds = NiftiDataset(tmp_path, (12, 12, 12), spacing=2.0)
    np.testing.assert_array_equal(ds[0][0], ds[1][0])
