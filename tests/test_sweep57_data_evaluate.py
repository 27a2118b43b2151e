"""Sweep 57 of the evaluation path: ``meshpar evaluate --data D --labels A,B`` on a
labels.csv of more classes than the two (NC, sMCI, pMCI: the ADNI layout).

The first run's ``meshpar train`` refused it ('label NC is not in the label set'),
after evaluate had started, and the rows had to be filtered by hand. evaluate now
runs on the two labels' rows, listed in a labels.csv of its own under ``--out``, and
says how many rows of which labels it left out."""
import csv

import nibabel as nib
import numpy as np
from nifti_helpers import blob
import pytest

from meshpar.cli import main
from meshpar.evaluation import protocol

LABELS = ("sMCI", "pMCI", "NC")


def _blob_dataset(directory, n, header, columns):
    """``n`` 8^3 blob volumes ``s{i}.nii.gz`` in ``directory`` and a labels.csv of
    ``header`` whose row ``i`` is the file, then ``columns(i)``."""
    rows = [header]
    for i in range(n):
        nib.save(nib.Nifti1Image(blob((8, 8, 8), seed=i), np.eye(4)),
                 str(directory / f"s{i}.nii.gz"))
        rows.append(f"s{i}.nii.gz,{columns(i)}")
    (directory / "labels.csv").write_text("\n".join(rows) + "\n")


def _three_classes(directory, n=12, unlabelled=0):
    _blob_dataset(directory, n + unlabelled, "subject,label,group",
                  lambda i: f"{LABELS[i % 3] if i < n else ''},g{i % 2}")


class _Stop(Exception):
    pass


def _runs_of(monkeypatch, argv):
    """The runs evaluate would execute (stopped there: no training)."""
    seen = []

    def execute_all(runs, *args, **kwargs):
        seen.extend(runs)
        raise _Stop

    monkeypatch.setattr(protocol, "execute_all", execute_all)
    with pytest.raises(_Stop):
        main(argv)
    return seen


def test_evaluate_runs_on_the_rows_of_the_two_labels(tmp_path, monkeypatch, capsys):
    data = tmp_path / "adni"
    data.mkdir()
    _three_classes(data, unlabelled=2)  # rows without a label: left out as another one
    out = tmp_path / "acc"
    runs = _runs_of(monkeypatch, ["evaluate", "--out", str(out), "--data", str(data),
                                  "--labels", "sMCI,pMCI", "--seeds", "0", "--folds", "2",
                                  "--only", "one-device", "--model", "resattnet3d-tiny",
                                  "--train-args", "--batch 2"])
    assert len(runs) == 1
    with open(runs[0].data_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["label"] for r in rows] == ["sMCI", "pMCI"] * 4  # no NC row
    assert [r["subject"] for r in rows] == [str(data / f"s{i}.nii.gz")
                                            for i in range(12) if i % 3 != 2]
    assert [r["group"] for r in rows] == [f"g{i % 2}" for i in range(12) if i % 3 != 2]
    assert [r["subject_id"] for r in rows] == [f"s{i}" for i in range(12) if i % 3 != 2]
    err = capsys.readouterr().err
    assert (f"note: --data {data}: 6 of 14 labels.csv rows are of other labels than "
            "--labels sMCI,pMCI ((none) 2, NC 4) and are left out; the runs read the 8 "
            "others") in err


def test_a_two_class_labels_csv_is_read_where_it_is(tmp_path, monkeypatch, capsys):
    data = tmp_path / "two"
    data.mkdir()
    _three_classes(data, n=12)
    text = (data / "labels.csv").read_text().replace(",NC,", ",pMCI,")
    (data / "labels.csv").write_text(text)
    runs = _runs_of(monkeypatch, ["evaluate", "--out", str(tmp_path / "acc"), "--data",
                                  str(data), "--labels", "sMCI,pMCI", "--seeds", "0",
                                  "--folds", "2", "--only", "one-device",
                                  "--model", "resattnet3d-tiny", "--train-args", "--batch 2"])
    assert runs[0].data_dir == data
    assert "left out" not in capsys.readouterr().err


@pytest.mark.parametrize("labels, message", [
    ("sMCI,AD", r"labels.csv has no 'AD' row \(its labels: NC 4, pMCI 4, sMCI 4\); "
                r"check --labels"),
    ("smci,pMCI", r"labels.csv has label 'sMCI' \(4 rows\) and --labels 'smci': labels "
                  r"match exactly"),
])
def test_labels_without_rows_are_refused_in_one_line(tmp_path, capsys, labels, message):
    data = tmp_path / "adni"
    data.mkdir()
    _three_classes(data)
    assert main(["evaluate", "--out", str(tmp_path / "acc"), "--data", str(data),
                 "--labels", labels, "--seeds", "0", "--folds", "2", "--only",
                 "one-device", "--model", "resattnet3d-tiny"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("meshpar evaluate: error: ")
    import re

    assert re.search(message, err), err


def test_predict_notes_ties_and_which_class_they_go_to():
    """Two classes of equal highest probability (softmax of logits equal to about 1e-7
    gives 0.5 and 0.5 in float32) were predicted as the first class without a word."""
    from meshpar.cli.predict import tie_note

    probs = np.array([[0.5, 0.5], [0.2, 0.8], [0.5, 0.5], [0.9, 0.1]], np.float32)
    assert tie_note(probs, ("NC", "AD")) == (
        "2 of 4 subjects have two or more classes of equal highest probability (equal in "
        "float32): each is predicted as the first of them in the label order (NC 2), as "
        "evaluate's scoring counts it")
    three = tie_note(np.array([[0.1, 0.45, 0.45]]), ("A", "B", "C"))
    assert three.startswith("1 of 1 subjects") and "label order (B 1)" in three
    assert tie_note(probs[[1, 3]], ("NC", "AD")) == ""


def test_fewer_people_than_folds_is_refused_before_any_run(tmp_path, capsys):
    """4 people (two scans each) and --folds 5: the first run's train refused it, after
    evaluate had started a TensorFlow process for it, naming its log."""
    data = tmp_path / "small"
    data.mkdir()
    _blob_dataset(data, 8, "subject,label,subject_id",
                  lambda i: f"{('NC', 'AD')[i // 2 % 2]},p{i // 2}")
    out = tmp_path / "acc"
    assert main(["evaluate", "--out", str(out), "--data", str(data), "--labels", "NC,AD",
                 "--seeds", "0", "--folds", "5", "--only", "one-device",
                 "--model", "resattnet3d-tiny"]) == 2
    err = capsys.readouterr().err
    assert err == (f"meshpar evaluate: error: --data {data}: the 8 rows of NC and AD: k=5 "
                   "folds need at least 5 people, got 4 (--folds 5)\n")
    assert not (out / "runs").exists()


def test_a_missing_file_is_named_by_the_line_of_the_users_labels_csv(tmp_path, capsys,
                                                                    monkeypatch):
    """The runs read evaluate's list of the two labels' rows: train named a missing file
    by its line there, not in the labels.csv the user wrote."""
    data = tmp_path / "adni"
    data.mkdir()
    _three_classes(data)
    (data / "s4.nii.gz").unlink()  # pMCI, line 6 of labels.csv (line 4 of the pair's list)
    assert main(["evaluate", "--out", str(tmp_path / "acc"), "--data", str(data),
                 "--labels", "sMCI,pMCI", "--seeds", "0", "--folds", "2", "--only",
                 "one-device", "--model", "resattnet3d-tiny"]) == 2
    assert capsys.readouterr().err == (
        f"meshpar evaluate: error: --data {data}: {data / 's4.nii.gz'}: file named in "
        "labels.csv line 6 does not exist or is not a file (--train-args --skip-bad leaves "
        "such subjects out)\n")
    runs = _runs_of(monkeypatch, ["evaluate", "--out", str(tmp_path / "acc"), "--data",
                                  str(data), "--labels", "sMCI,pMCI", "--seeds", "0",
                                  "--folds", "2", "--only", "one-device", "--model",
                                  "resattnet3d-tiny", "--train-args", "--skip-bad --batch 2"])
    assert len(runs) == 1  # train's --skip-bad leaves it out


@pytest.mark.parametrize("train_args, pmci, message", [
    ("--batch 2", 1, r"leaves \d training subjects, none of them pMCI: a classifier learns "
                     r"nothing from one class"),
])
def test_a_run_train_would_refuse_is_refused_before_any_run(tmp_path, capsys, train_args,
                                                            pmci, message):
    """Training subjects of one class (one pMCI of 12, in the test fold or the
    validation share): each run's train refused it after evaluate had started it,
    naming its log."""
    import re

    data = tmp_path / "tiny"
    data.mkdir()
    _blob_dataset(data, 12, "subject,label", lambda i: "pMCI" if i < pmci else "sMCI")
    out = tmp_path / "acc"
    assert main(["evaluate", "--out", str(out), "--data", str(data), "--labels", "sMCI,pMCI",
                 "--seeds", "0", "--folds", "2", "--only", "one-device", "--model",
                 "resattnet3d-tiny", "--train-args", train_args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"meshpar evaluate: error: --data {data}: seed 0, fold 0 of 2 "), err
    assert re.search(message, err), err
    assert not (out / "runs").exists()


def test_predict_keeps_subjects_of_other_labels_with_their_own_labels(tmp_path, capsys):
    """An NC/AD model's predict on a labels.csv with an MCI row and a row without a
    label (a scan to diagnose) refused both ('label MCI is not in the label set'):
    now they stand in as class 0 to be loaded and are written with their own labels."""
    from meshpar.cli.predict import _stand_ins
    from meshpar.data import read_labels

    rows = ["subject,label"]
    for i, label in enumerate(["NC", "AD", "MCI", "", "ad"]):
        nib.save(nib.Nifti1Image(blob((8, 8, 8), seed=i), np.eye(4)),
                 str(tmp_path / f"s{i}.nii.gz"))
        rows.append(f"s{i}.nii.gz,{label}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    subjects = read_labels(tmp_path, None)
    loaded, own = _stand_ins(subjects, ("NC", "AD"))
    assert [s.label for s in loaded] == ["NC", "AD", "NC", "NC", "NC"]
    assert [s.path for s in loaded] == [s.path for s in subjects]
    back = [own.get(s.path, s) for s in loaded]
    assert [s.label for s in back] == ["NC", "AD", "MCI", "", "ad"]
    assert capsys.readouterr().err == (
        "meshpar predict: note: 3 of 5 subjects have labels other than the model's NC, AD "
        "(MCI 1, (none) 1, ad 1): predicted too, each with its label as labels.csv gives it "
        "('ad' is 'AD' in other letters?)\n")
    assert _stand_ins(subjects[:2], ("NC", "AD")) == (subjects[:2], {})
