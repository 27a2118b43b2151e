"""`meshpar predict` gives one device's probabilities on any mesh and batch.

A resattnet3d-tiny trained two steps on an uneven batch split predicts ten
phantoms on one device, on an uneven model split, on three batch shares with
batches of 3 (a padded last batch) and on one device with a batch of 7: the same
subjects in the same order with the same probabilities (batch norm on its moving
averages, so neither the mesh nor the padding of a batch moves a prediction).
"""
import csv

import numpy as np
import pytest

from meshpar.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    assert main(["data", "synth", "--out", str(root / "data"), "--n", "10",
                 "--shape", "16,16,16", "--seed", "1"]) == 0
    assert main(["train", "--data", str(root / "data"), "--model", "resattnet3d-tiny",
                 "--steps", "2", "--batch", "4", "--val-fraction", "0", "--no-progress",
                 "--speeds", "3,1", "--mesh", "batch:2", "--model-dir", str(root / "model")]) == 0
    return root


def _predict(root, name, mesh):
    out = root / f"{name}.csv"
    assert main(["predict", "--model-dir", str(root / "model"), "--data", str(root / "data"),
                 "--out", str(out), "--force", *mesh]) == 0
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c.startswith("p_")]
    return [r["subject_id"] for r in rows], np.array([[float(r[c]) for c in columns]
                                                      for r in rows])


def test_predictions_on_other_meshes_and_batches_are_one_devices(trained):
    subjects, want = _predict(trained, "one", [])
    assert len(subjects) == 10 and want.shape == (10, 2)
    np.testing.assert_allclose(want.sum(axis=1), 1.0, atol=2e-6)
    for name, mesh in [("model3", ["--speeds", "1,2,3", "--mesh", "model:3"]),
                       ("batch3", ["--speeds", "1,1,2", "--mesh", "batch:3", "--batch", "3"]),
                       ("batch7", ["--batch", "7"])]:
        got_subjects, got = _predict(trained, name, mesh)
        assert got_subjects == subjects, name
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=name)
