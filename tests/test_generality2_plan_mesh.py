"""``meshpar plan --mesh SHAPE`` plans that mesh shape only, for every method.

``train``, ``predict`` and ``evaluate`` take ``--mesh``; ``plan`` refused it
('unrecognized arguments'), so a plan for a chosen shape (the planner's
``shapes=`` in Python) could not be made from the shell. It now plans that
shape on every device of the cluster (no device subsets), with the axes in
either order.
"""
import json

import pytest

from meshpar.cli import main

ARGS = ["plan", "--speeds", "1.0,0.5,0.3,0.2", "--model", "resattnet3d-tiny", "--batch", "6",
        "--json"]


@pytest.mark.parametrize("method", ["ga", "exact", "proportional", "even"])
@pytest.mark.parametrize("mesh, shape", [("batch:2;model:2", [["batch", 2], ["model", 2]]),
                                         ("model:2;batch:2", [["batch", 2], ["model", 2]]),
                                         ("model:4", [["batch", 1], ["model", 4]]),
                                         ("batch:4", [["batch", 4], ["model", 1]])])
def test_the_plan_has_the_mesh_asked_for(capsys, method, mesh, shape):
    assert main(ARGS + ["--method", method, "--mesh", mesh]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["mesh_shape"] == shape and len(plan["devices"]) == 4
    assert sum(plan["split_sizes"]["batch"]) == 6


def test_the_python_planner_gives_the_same_plan(capsys):
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan

    assert main(ARGS + ["--mesh", "batch:2;model:2", "--seed", "3"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = plan(describe_model("resattnet3d-tiny"), [1.0, 0.5, 0.3, 0.2], 6, seed=3,
               shapes=[(2, 2)])
    assert cli["devices"] == list(api.devices) and cli["split_sizes"] == api.split_sizes


@pytest.mark.parametrize("mesh, words", [
    ("batch:2;model:1", "has 2 processors but the cluster has 4 devices"),
    ("rows:4", "axis 'rows'"),
])
def test_a_mesh_that_does_not_fit_is_refused_in_one_line(capsys, mesh, words):
    assert main(ARGS + ["--mesh", mesh]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshpar plan: error: ") and words in err[0]
