"""README.rst: "``plan`` takes the model a ``profile --model`` timed and ``train`` the
plan's model and batch, so neither needs them given; another ``--model`` (or
``train --batch``) is refused".

The README said "unless told otherwise", as if another model or batch were
taken: each is refused in one line (a model-step profile's times are that
model's, a plan's splits that batch's).
"""
import dataclasses
import json

from meshpar.cli import main
from meshpar.planning.cluster import ClusterSpec


def _step_profile(path, model="resattnet3d-tiny"):
    """A two-device profile of whole training steps of ``model`` (as ``profile --model``
    writes one: ``extra.work`` and ``extra.model``)."""
    cluster = ClusterSpec.from_speeds([1.0, 0.5])
    dataclasses.replace(cluster, extra={"work": "model-step", "model": model}).save(str(path))


def test_plan_takes_the_profiled_model_and_refuses_another(tmp_path, capsys):
    _step_profile(tmp_path / "profile.json")
    plan = tmp_path / "plan.json"
    assert main(["plan", "--profile", str(tmp_path / "profile.json"), "--batch", "2",
                 "--method", "proportional", "--out", str(plan)]) == 0
    assert json.loads(plan.read_text())["model"] == "resattnet3d-tiny"
    capsys.readouterr()
    assert main(["plan", "--profile", str(tmp_path / "profile.json"), "--batch", "2",
                 "--method", "proportional", "--model", "vgg-cifar-small"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["meshpar plan: error: the device profile was measured on model "
                   "'resattnet3d-tiny'; profile 'vgg-cifar-small' to plan it"]


def test_train_refuses_another_model_or_batch_than_the_plans(tmp_path, capsys):
    _step_profile(tmp_path / "profile.json")
    plan = str(tmp_path / "plan.json")
    assert main(["plan", "--profile", str(tmp_path / "profile.json"), "--batch", "2",
                 "--method", "proportional", "--out", plan]) == 0
    train = ["train", "--synthetic", "--plan", plan, "--steps", "1", "--no-progress"]
    for flags, says in ((["--model", "vgg-cifar-small"], "plan was made for model "
                         "'resattnet3d-tiny', not 'vgg-cifar-small'"),
                        (["--batch", "4"], "was planned for batch 2, not --batch 4")):
        capsys.readouterr()
        assert main(train + flags) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
