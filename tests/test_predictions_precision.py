"""The predictions CSV carries each probability exactly, so what `meshpar evaluate`
scores from it is what the model predicted (written to 6 decimals, a subject the
model put at 0.5000004 was scored as the other class than its ``predicted`` column,
and confident predictions on both sides of an AUC tied)."""
import numpy as np
import pytest

from meshpar.data.types import Subject
from meshpar.evaluation.metrics import auc, binary_metrics
from meshpar.evaluation.report import read_predictions
from meshpar.training.run import write_predictions


def _written(tmp_path, probs, labels=("NC", "AD")):
    subjects = [Subject(tmp_path / f"s{i}.nii.gz", lab, subject_id=f"s{i}")
                for i, lab in enumerate(labels)]
    out = tmp_path / "predictions.csv"
    write_predictions(str(out), subjects, probs, ["NC", "AD"])
    return read_predictions(out, tmp_path, "AD")


def test_probabilities_read_back_exactly(tmp_path):
    probs = np.array([[0.4999996, 0.5000004], [3e-8, 1 - 3e-8]], dtype=np.float32)
    got = _written(tmp_path, probs)
    # each float32 read back as float32 is the same number (shortest round-trip form)
    assert [np.float32(got[f"s{i}.nii.gz"]["p"]) for i in range(2)] == list(probs[:, 1])
    assert got["s1.nii.gz"]["p"] < 1.0


def test_near_threshold_is_scored_as_predicted(tmp_path):
    """The model's argmax says AD (0.5000004); evaluate must score it AD too."""
    got = _written(tmp_path, np.array([[0.4999996, 0.5000004]], dtype=np.float32),
                   labels=("AD",))
    m = binary_metrics([got["s0.nii.gz"]["y"]], [got["s0.nii.gz"]["p"]])
    assert m["accuracy"] == 1.0 and m["sensitivity"] == 1.0
    rows = (tmp_path / "predictions.csv").read_text().splitlines()
    assert rows[1].endswith(",AD")


def test_confident_predictions_keep_their_order_in_the_auc(tmp_path):
    """An NC subject at p(AD) 0.9999996 and an AD one at 0.9999999: the AD subject
    ranks higher (AUC 1); at 6 decimals both were 1.000000, a tie (AUC 0.5)."""
    probs = np.array([[4e-7, 0.9999996], [1e-7, 0.9999999]])
    got = _written(tmp_path, probs)
    keys = sorted(got)
    assert auc([got[k]["y"] for k in keys], [got[k]["p"] for k in keys]) == pytest.approx(1.0)
