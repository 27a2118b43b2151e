"""Sweep 7 of the data path: labels.csv as people write it (blank lines, a quote left
open, stray bytes, BOM and CRLF, subjects in subfolders), read by read_labels."""
from nifti_helpers import blob, save_nifti
import pytest

from meshpar.data.nifti_files import read_labels
from meshpar.data.types import BadLabelsError, BadSubjectError


@pytest.fixture
def folder(tmp_path):
    """Two subjects, s0 (NC) and s1 (AD), and no labels.csv yet."""
    for i in range(2):
        save_nifti(tmp_path / f"s{i}.nii.gz", blob(seed=i))
    return tmp_path


def _labels(folder, text):
    (folder / "labels.csv").write_bytes(text.encode() if isinstance(text, str) else text)
    return folder


def test_a_row_after_blank_lines_is_named_by_its_own_line(folder):
    """Rows were numbered once blank lines were dropped: 'mci' on line 4 was 'line 3'."""
    _labels(folder, "subject,label\n\ns0.nii.gz,MCI\n")
    with pytest.raises(BadSubjectError, match=r"s0.nii.gz: label 'MCI' \(labels.csv line 3\)"):
        read_labels(folder, ("NC", "AD"))
    _labels(folder, "subject,label\n\ns0.nii.gz,NC\n\n\ns1.nii.gz,AD\n")
    assert [s.line for s in read_labels(folder, ("NC", "AD"))] == [3, 6]


def test_a_row_after_a_quoted_line_break_is_named_by_its_own_line(folder):
    _labels(folder, 'subject,label,notes\ns0.nii.gz,NC,"two\nlines"\ns1.nii.gz,xx,\n')
    with pytest.raises(BadSubjectError, match=r"label 'xx' \(labels.csv line 4\)"):
        read_labels(folder, ("NC", "AD"))


@pytest.mark.parametrize("skip_bad", [False, True])
def test_a_quote_left_open_is_refused_not_one_bad_subject(folder, skip_bad):
    """The open quote swallowed every row after it into one subject cell; with skip_bad
    that was one 'bad subject' whose name held both rows, s1 gone unnamed."""
    _labels(folder, 'subject,label\n"s0.nii.gz,NC\ns1.nii.gz,AD\n')
    with pytest.raises(BadLabelsError, match=r"line 2: the subject cell runs on to line 3 "
                                             r".*is a quote left open\?"):
        read_labels(folder, ("NC", "AD"), skip_bad=skip_bad)


def test_a_nul_byte_is_named_with_its_line(folder):
    """Was ValueError('embedded null byte'), naming neither the file nor the line."""
    _labels(folder, b"subject,label\ns0.nii.gz,NC\ns1.nii.gz\x00,AD\n")
    with pytest.raises(BadLabelsError, match=r"labels.csv: line 3: the subject cell holds a "
                                             r"NUL byte"):
        read_labels(folder, ("NC", "AD"), skip_bad=True)


def test_bom_crlf_quotes_spaces_and_extra_columns_read_alike(folder):
    """A quoted cell after its comma's space (' "Subject"') kept its quotes: "missing
    column(s) 'subject'"."""
    plain = [(s.path, s.label, s.line) for s in read_labels(
        _labels(folder, "subject,label\ns0.nii.gz,NC\ns1.nii.gz,AD\n"), ("NC", "AD"))]
    dressed = b'\xef\xbb\xbf "Subject" ,LABEL,age,notes\r\n"s0.nii.gz", NC ,71,"a, b"\r\ns1 ,AD\r\n'
    got = [(s.path, s.label, s.line) for s in read_labels(_labels(folder, dressed), ("NC", "AD"))]
    assert got == plain
