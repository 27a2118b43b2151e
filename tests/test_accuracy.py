"""resattnet3d-small learns the synthetic AD-vs-NC phantoms (held-out accuracy >= 90%).

Trained through ``meshpar train`` (tf.estimator) on an uneven 2-device mesh,
96 phantoms at 32^3 (72 train, 24 held out), 150 Adam steps of batch 8.
Deterministic ops and seeds: the same machine gives the same number.
"""
import re

from meshpar.cli import main


def test_resattnet3d_small_reaches_90_percent_held_out_accuracy(capsys, tmp_path):
    status = main(["train", "--synthetic", "--model", "resattnet3d-small",
                   "--speeds", "0.9,0.3", "--steps", "150", "--batch", "8",
                   "--n-synthetic", "96", "--lr", "3e-3", "--threads", "2", "--seed", "0",
                   "--no-progress", "--model-dir", str(tmp_path / "model")])
    out = capsys.readouterr().out
    assert status == 0, out
    accuracy = float(re.search(r"eval accuracy\s+([0-9.]+)", out).group(1))
    auc = float(re.search(r"eval auc\s+([0-9.]+)", out).group(1))
    assert accuracy >= 0.90, out
    assert auc >= 0.90, out
