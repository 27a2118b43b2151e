"""Sweep 57 of the data path: labels.csv files as other tools save them."""
import nibabel as nib
import numpy as np
from nifti_helpers import blob
import pytest

from meshpar.cli import main
from meshpar.data import read_labels
from meshpar.data.types import BadLabelsError

ROWS = "subject,label,subject_id\r\ns0.nii.gz,NC,p0\r\ns1.nii.gz,AD,p1\r\n"


def _files(directory):
    for i in range(2):
        nib.save(nib.Nifti1Image(blob((8, 8, 8), seed=i), np.eye(4)),
                 str(directory / f"s{i}.nii.gz"))


def test_a_utf16_labels_csv_is_named_as_utf16(tmp_path, capsys):
    """Windows PowerShell's `>` and Excel's 'Unicode Text' save UTF-16: it was
    "cannot be read as CSV: 'utf-8' codec can't decode byte 0xff in position 0"."""
    _files(tmp_path)
    (tmp_path / "labels.csv").write_bytes(ROWS.encode("utf-16"))
    assert main(["data", "check", str(tmp_path), "--shape", "8,8,8"]) == 2
    assert capsys.readouterr().err == (
        f"meshpar data check: error: {tmp_path / 'labels.csv'}: is UTF-16 text (it starts "
        "with a UTF-16 byte-order mark): save it as UTF-8 (labels.csv is read as UTF-8)\n")


def test_a_latin1_byte_is_named_by_its_line_of_the_file(tmp_path):
    """A Latin-1 'é' far into the file was 'can't decode byte 0xe9 in position 21':
    a position within the chunk the reader decoded, naming no line."""
    _files(tmp_path)
    filler = "".join(f"# note {i:05d} of the study\r\n" for i in range(700))  # > 8 KiB
    body = (ROWS + filler + "s2.nii.gz,AD,Ren\xe9\r\n").encode("latin-1")
    (tmp_path / "labels.csv").write_bytes(body)
    with pytest.raises(BadLabelsError, match=r"labels.csv: line 704 is not UTF-8 text "
                                             r"\(byte 0xe9\): saved in another encoding "
                                             r"\(Latin-1\?\); save it as UTF-8"):
        read_labels(tmp_path, ("NC", "AD"))


def test_a_byte_order_mark_crlf_and_quotes_are_read(tmp_path):
    _files(tmp_path)
    text = '"Subject", "Label" ,Subject_ID,age\r\n"s0.nii.gz", NC ,"p0",70\r\n\r\ns1,AD,p1,\r\n'
    (tmp_path / "labels.csv").write_bytes(text.encode("utf-8-sig"))
    got = read_labels(tmp_path, ("NC", "AD"))
    assert [(s.path.name, s.label, s.subject_id, s.line) for s in got] == [
        ("s0.nii.gz", "NC", "p0", 2), ("s1.nii.gz", "AD", "p1", 4)]
