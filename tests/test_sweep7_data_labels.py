"""Sweep 7 of the data path: labels.csv as people write it (blank lines, a quote left
open, stray bytes, BOM and CRLF, subjects in subfolders), read by read_labels."""
import re

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


def _tree(root, files):
    """``files``: relative path -> label; each a small volume, labels.csv without ids."""
    for i, name in enumerate(files):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        save_nifti(root / name, blob(seed=i))
    (root / "labels.csv").write_text(
        "subject,label\n" + "".join(f"{n},{lab}\n" for n, lab in files.items()))
    return root


def test_one_file_name_in_two_label_folders_is_refused_not_one_person(tmp_path):
    """AD/000 and NC/000 got the one default person id '000': two people of two
    diagnoses were one person's scans in every split, in silence."""
    root = _tree(tmp_path, {f"{g}/{i:03d}.nii.gz": g for i in range(3) for g in ("AD", "NC")})
    with pytest.raises(BadLabelsError, match=r"line 3: NC/000.nii.gz \(NC\) and line 2: "
                                             r"AD/000.nii.gz \(AD\) have one file name.*"
                                             r"give labels.csv a subject_id column"):
        read_labels(root, ("NC", "AD"))
    with pytest.raises(BadLabelsError):  # a labels.csv problem: not one subject to skip
        read_labels(root, ("NC", "AD"), skip_bad=True)


def test_every_subject_named_t1_is_refused(tmp_path):
    """A FreeSurfer-like layout, sub-XX/T1.nii.gz: the whole dataset was one person."""
    root = _tree(tmp_path, {f"sub-{i:02d}/T1.nii.gz": ("NC", "AD")[i % 2] for i in range(6)})
    with pytest.raises(BadLabelsError, match=r"sub-01/T1.nii.gz \(AD\) and line 2: "
                                             r"sub-00/T1.nii.gz \(NC\) have one file name"):
        read_labels(root, ("NC", "AD"))


def test_subject_ids_or_one_label_keep_their_people(tmp_path):
    """With a subject_id column the folders read as given; a file name shared by scans of
    one label (sessions in folders) stays one person, as documented."""
    root = _tree(tmp_path, {"bl/s1.nii.gz": "AD", "m12/s1.nii.gz": "AD", "bl/s2.nii.gz": "NC"})
    assert [s.subject_id for s in read_labels(root, ("NC", "AD"))] == ["s1", "s1", "s2"]
    (root / "labels.csv").write_text("subject,label,subject_id\nbl/s1.nii.gz,AD,p1\n"
                                     "m12/s1.nii.gz,NC,p2\nbl/s2.nii.gz,NC,p3\n")
    assert [s.subject_id for s in read_labels(root, ("NC", "AD"))] == ["p1", "p2", "p3"]


def test_a_name_without_suffix_finds_its_file_beside_a_folder_of_that_name(folder):
    """sub-01/ (a subject's folder) beside sub-01.nii.gz: the name 'sub-01' took the
    folder and was 'named in labels.csv line 2 is a directory, not a file'."""
    (folder / "s0").mkdir()
    _labels(folder, "subject,label\ns0,NC\ns1,AD\n")
    assert [s.path.name for s in read_labels(folder, ("NC", "AD"))] == ["s0.nii.gz",
                                                                         "s1.nii.gz"]
    (folder / "s0.nii.gz").unlink()
    with pytest.raises(BadSubjectError, match="s0: named in labels.csv line 2 is a directory"):
        read_labels(folder, ("NC", "AD"))


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_labels_csv_of_another_separator_says_so(folder, sep):
    """A spreadsheet saved with ';' (or tabs) read as one column; the error listed it,
    'has ['subject;label']', without saying why."""
    _labels(folder, f"subject{sep}label\ns0.nii.gz{sep}NC\n")
    with pytest.raises(BadLabelsError, match=rf"missing column\(s\) 'subject', 'label'; has "
                                             rf".* \(columns separated by {re.escape(repr(sep))}\? "
                                             r"labels.csv takes commas\)"):
        read_labels(folder, ("NC", "AD"))
    _labels(folder, "subj,label\ns0.nii.gz,NC\n")  # one wrong name: no separator hint
    with pytest.raises(BadLabelsError, match=r"missing column\(s\) 'subject'; has \['subj', "
                                             r"'label'\]$"):
        read_labels(folder, ("NC", "AD"))


def test_a_label_of_other_case_says_which_name_it_may_mean(folder):
    """'ad' for AD was 'not in the label set ('NC', 'AD')' alone."""
    _labels(folder, "subject,label\ns0.nii.gz,NC\ns1.nii.gz,ad\n")
    with pytest.raises(BadSubjectError, match=r"label 'ad' \(labels.csv line 3\) is not in the "
                                              r"label set \('NC', 'AD'\); 'AD' differs only in "
                                              r"case \(labels match exactly\)$"):
        read_labels(folder, ("NC", "AD"))
    _labels(folder, "subject,label\ns0.nii.gz,NC\ns1.nii.gz,MCI\n")  # no such name: no hint
    with pytest.raises(BadSubjectError, match=r"label set \('NC', 'AD'\)$"):
        read_labels(folder, ("NC", "AD"))


def test_subjects_given_twice_are_refused_like_a_labels_csv_row_twice(folder):
    """NiftiDataset(subjects=train + test) of two overlapping splits read s1 twice an
    epoch, in silence (its predictions were two rows)."""
    from meshpar.data.nifti import NiftiDataset

    _labels(folder, "subject,label\ns0.nii.gz,NC\ns1.nii.gz,AD\n")
    subjects = read_labels(folder, ("NC", "AD"))
    with pytest.raises(ValueError, match=r"subjects lists .*s1.nii.gz twice \(as "
                                         r".*s1.nii.gz before\): give each file once"):
        NiftiDataset(folder, (8, 8, 8), subjects=subjects + subjects[1:], skip_bad=True)
    assert len(NiftiDataset(folder, (8, 8, 8), subjects=subjects)) == 2
