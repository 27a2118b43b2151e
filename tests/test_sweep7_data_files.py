"""Sweep 7 of the data path: NIfTI files stored in ways the earlier sweeps did not try
(a .hdr/.img pair, other compressions, upper-case suffixes), read as a dataset reads them."""
import bz2
import shutil

import nibabel as nib
import numpy as np
from nifti_helpers import blob, save_nifti
import pytest

from meshpar.data.nifti import NiftiDataset
from meshpar.data.nifti_files import check_header, load_volume
from meshpar.data.types import BadSubjectError


def _pair(path, data):
    """A NIfTI pair (``.hdr`` + ``.img``) of ``data``."""
    nib.save(nib.Nifti1Pair(data, np.eye(4)), str(path.with_suffix(".img")))
    return path.with_suffix(".hdr")


def test_a_hdr_img_pair_is_read_through_its_hdr(tmp_path):
    """The size of the .hdr (348 bytes) was taken for the voxels': every pair named by
    its .hdr was 'is truncated: 348 bytes, header promises 6912'."""
    data = blob()
    vol = load_volume(_pair(tmp_path / "pair", data))
    np.testing.assert_array_equal(vol.data, data)


def test_a_cut_img_of_a_pair_is_named_truncated(tmp_path):
    hdr = _pair(tmp_path / "pair", blob())
    img = hdr.with_suffix(".img")
    img.write_bytes(img.read_bytes()[:-100])
    with pytest.raises(BadSubjectError, match=r"pair.hdr: is truncated \(its voxels, in "
                                              r"pair.img\): 6812 bytes, header promises 6912"):
        check_header(hdr)


@pytest.mark.parametrize("name", ["b.nii.bz2", "m.mgz", "U.NII.GZ"])
def test_compressed_files_nibabel_reads_are_not_called_truncated(tmp_path, name):
    """Only '.gz' was known to be compressed: a .nii.bz2, a FreeSurfer .mgz and a .NII.GZ
    were each 'is truncated' (their compressed size against the voxels')."""
    data = blob()
    raw = save_nifti(tmp_path / "raw.nii", data)
    path = tmp_path / name
    if name.endswith(".bz2"):
        path.write_bytes(bz2.compress(raw.read_bytes()))
    elif name.endswith(".mgz"):
        nib.save(nib.MGHImage(data, np.eye(4)), str(path))
    else:
        shutil.copy(save_nifti(tmp_path / "g.nii.gz", data), path)
    np.testing.assert_array_equal(load_volume(path).data, data)


def test_a_dataset_of_pairs_trains_its_examples(tmp_path):
    """labels.csv naming each subject's .hdr: every subject usable, none skipped."""
    lines = ["subject,label"]
    for i in range(4):
        _pair(tmp_path / f"s{i}", blob(seed=i))
        lines.append(f"s{i}.hdr,{('NC', 'AD')[i % 2]}")
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    ds = NiftiDataset(tmp_path, (8, 8, 8), skip_bad=True)
    assert len(ds) == 4 and ds.n_skipped == 0
    assert ds[0][0].shape == (8, 8, 8, 1)


def test_a_link_whose_target_is_gone_says_so(tmp_path):
    """A dangling link is listed by ls; 'does not exist' alone did not say why."""
    from meshpar.data.nifti_files import read_labels

    save_nifti(tmp_path / "s0.nii.gz", blob())
    (tmp_path / "s1.nii.gz").symlink_to(tmp_path / "store" / "s1.nii.gz")
    (tmp_path / "labels.csv").write_text("subject,label\ns0.nii.gz,NC\ns1.nii.gz,AD\n")
    with pytest.raises(BadSubjectError, match=r"s1.nii.gz: file named in labels.csv line 3 "
                                              r"does not exist \(a link to .*store/s1.nii.gz, "
                                              r"which is not there\)"):
        read_labels(tmp_path, ("NC", "AD"))
    with pytest.raises(BadSubjectError, match=r"does not exist \(a link to"):
        check_header(tmp_path / "s1.nii.gz")
