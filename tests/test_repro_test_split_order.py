"""One dataset, one seed, one test score: whatever order labels.csv lists the test subjects in.

``meshpar train`` put its training and validation subjects in the order of their files
before streaming them (tests/test_repro_labels_order.py), but scored the held-out test
set (``--folds``/``--fold``, ``--test-fraction``) in the order of labels.csv's rows: the
mean test loss summed the same per-subject losses in another order, so one dataset
listed in two orders gave two test losses with one --seed (0.7430441728642028 and
...027 after 2 steps of resattnet3d-tiny on 12 phantoms, fold 0 of 3). The test set is
now in the order of its files too.
"""
import csv
import json
import shutil

import pytest

from meshpar.cli import main
from meshpar.data import write_dataset

COMMON = ["train", "--model", "resattnet3d-tiny", "--val-fraction", "0", "--no-progress",
          "--batch", "4", "--seed", "3", "--steps", "2", "--json"]


@pytest.fixture(scope="module")
def listings(tmp_path_factory):
    """A 32^3 phantom dataset as written and a copy listing labels.csv's rows reversed."""
    root = tmp_path_factory.mktemp("test_split_order")
    write_dataset(root / "data", 12, seed=1)
    shutil.copytree(root / "data", root / "reversed")
    with open(root / "data" / "labels.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    with open(root / "reversed" / "labels.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + rows[:0:-1])
    return root


@pytest.mark.parametrize("split", [["--folds", "3", "--fold", "0"]])
def test_the_row_order_of_labels_csv_changes_no_test_score(listings, capsys, split):
    scores = []
    for name in ("data", "reversed"):
        assert main(COMMON + split + ["--data", str(listings / name),
                                      "--model-dir", str(listings / f"run-{name}")]) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["test"]["n"] == 4
        scores.append(summary["test"])
    assert scores[0] == scores[1]
