"""``meshpar train`` on the 2-D VGG nets (synthetic images of classes 0 and 1 of ten).

* ``--loss weighted_cross_entropy --class-weights ...`` could not be used at
  all: two weights were refused by the loss ("needs class_weights: 10
  weights"), ten by the flag ("need 2 finite weights"). The flag now takes one
  weight per class of the model.
* ``--class-weights balanced`` said only "needs every class in the training
  set"; it now lists the training images per class.
* ``--labels a,b,c`` was accepted and ignored (the images are labelled 0 and
  1); it is refused in one line.
"""
import json

import pytest

from meshpar.cli import main
from meshpar.cli import train

TEN = ",".join(["1", "2"] + ["1"] * 8)
VGG = ["train", "--synthetic", "--model", "vgg-cifar-small", "--steps", "1", "--batch", "2",
       "--n-synthetic", "8", "--no-progress"]


def test_one_class_weight_per_class_of_the_model_is_checked_up_front():
    train.check_argv(["--synthetic", "--model", "vgg-cifar-small", "--loss",
                      "weighted_cross_entropy", "--class-weights", TEN, "--steps", "1"])
    with pytest.raises(ValueError, match="need 10 finite weights"):
        train.check_argv(["--synthetic", "--model", "vgg-cifar-small", "--loss",
                          "weighted_cross_entropy", "--class-weights", "1,2", "--steps", "1"])
    # the MRI nets have two classes, as before
    train.check_argv(["--synthetic", "--model", "resattnet3d-tiny", "--loss",
                      "weighted_cross_entropy", "--class-weights", "1,2", "--steps", "1"])


def test_a_vgg_net_trains_with_ten_class_weights(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(VGG + ["--loss", "weighted_cross_entropy", "--class-weights", TEN,
                       "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["model"] == "vgg-cifar-small" and summary["steps"] == 1


@pytest.mark.parametrize("extra, words", [
    (["--labels", "a,b,c"], "--labels names the classes of labels.csv"),
    (["--loss", "weighted_cross_entropy"],
     "balanced needs every class in the training set (training samples per class: 3, 3, 0"),
])
def test_refused_in_one_line(capsys, tmp_path, monkeypatch, extra, words):
    monkeypatch.chdir(tmp_path)
    assert main(VGG + extra) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if line.startswith("meshpar train: error: ")]
    assert len(err) == 1 and words in err[0], err
