"""Bad-input sweep 17: the cases that need more than one row of ``bad_input_cases.py``
(two commands that must agree, a run file edited between commands, what is still
accepted)."""
import json

import pytest

from meshpar.cli import main


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# --------------------------------------------------------- --mesh all:N, plan and train
def test_plan_and_train_read_all_n_as_model_n(capsys):
    """``plan --mesh all:3`` planned the model axis, while ``train --mesh all:3`` was
    refused as 'splits nothing' (the models' layout puts the filters on a one-axis
    mesh of any name). Both now read all:N as model:N."""
    from meshpar.cli.train_options import mesh_from_speeds

    assert mesh_from_speeds([0.9, 0.3, 0.6], "all:3") == mesh_from_speeds([0.9, 0.3, 0.6],
                                                                           "model:3")
    assert main(["plan", "--speeds", "1,1,1", "--mesh", "all:3", "--method", "even",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert dict(map(tuple, plan["mesh_shape"])) == {"batch": 1, "model": 3}


@pytest.mark.parametrize("mesh", ["foo:2", "all:1;model:2", "foo:1;model:2"])
def test_plan_and_train_refuse_another_axis_alike(mesh, capsys):
    lines = []
    for argv in (["plan", "--speeds", "1,1", "--method", "even"],
                 ["train", "--synthetic", "--steps", "1", "--speeds", "1,1"]):
        assert main(argv + ["--mesh", mesh]) == 2
        lines.append(_error_line(capsys).split(": error: ", 1)[1])
    assert lines[0] == lines[1]
    assert "the mesh's axes are batch (the samples) and model (the filters)" in lines[0]
