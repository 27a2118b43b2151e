"""``meshpar predict --checkpoint NAME`` finds a checkpoint by the name it is reported by.

``train`` and ``predict`` name checkpoints by their file name in the model
directory (``checkpoint model.ckpt-2``, ``"test": {"checkpoint": ...}``), but
``--checkpoint model.ckpt-2`` was looked for in the current directory only:
'no such checkpoint (model.ckpt-2.index missing)' unless the user ran from
inside the model directory.
"""
import csv

from meshpar.cli import main
from meshpar.data import write_dataset


def _probabilities(path):
    with open(path, newline="") as f:
        return [(row["subject_id"], row["p_AD"]) for row in csv.DictReader(f)]


def test_a_checkpoint_name_is_looked_for_in_the_model_dir(tmp_path, monkeypatch, capsys):
    data, run = tmp_path / "data", tmp_path / "run"
    write_dataset(str(data), 6, shape=(16, 16, 16))
    assert main(["train", "--data", str(data), "--model", "resattnet3d-tiny", "--batch", "2",
                 "--steps", "2", "--checkpoint-every", "1", "--no-keep-best", "--val-fraction",
                 "0", "--no-progress", "--model-dir", str(run)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--checkpoint",
                 "model.ckpt-1", "--out", "by-name.csv"]) == 0
    assert "checkpoint model.ckpt-1" in capsys.readouterr().out
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--checkpoint",
                 str(run / "model.ckpt-1"), "--out", "by-path.csv"]) == 0
    assert _probabilities("by-name.csv") == _probabilities("by-path.csv")
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--checkpoint",
                 "model.ckpt-7", "--out", "none.csv"]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
