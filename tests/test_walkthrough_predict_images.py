"""``meshpar predict`` on a model directory of a 2-D VGG net trained on
``--synthetic`` images says that predict reads NIfTI volumes.

Found walking the docs as a new user (``train --synthetic --model
vgg-cifar-small``, then ``predict --model-dir`` on it): predict answered
``meshpar_run.json: labels ['0', '1'] name 2 classes, but vgg-cifar-small has
10``, as if the run file train had just written were broken; the images are
labelled 0 and 1 of the net's ten classes by design (docs/training.md).
"""
from meshpar.cli import main


def test_predict_on_an_image_run_names_the_real_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--synthetic", "--model", "vgg-cifar-small", "--steps", "1",
                 "--batch", "2", "--n-synthetic", "8", "--no-progress",
                 "--model-dir", "m"]) == 0
    assert main(["data", "synth", "--out", "d", "--n", "4", "--shape", "8,8,8"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model-dir", "m", "--data", "d", "--out", "p.csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "vgg-cifar-small was trained on synthetic images; predict reads NIfTI volumes" in err
    assert "classes" not in err
    assert not (tmp_path / "p.csv").exists()
