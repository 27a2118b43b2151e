"""``meshpar demo``'s plans are the plans ``meshpar plan`` gives for the same cluster.

Part 2 called the planners without device subsets, so on a cluster where the
slow devices cost more than they compute it showed (and part 3 trained on) a
GA plan over every device: ``demo --speeds 0.9,0.05,0.05`` gave the GA
``batch:1;model:3`` at 33.90 ms while ``meshpar plan`` gives the fast device
alone at 16.79 ms. The proportional and GA rows now plan as ``meshpar plan``
does; the even row stays the even split over every device (Mesh-TF's).
"""
import json
import re

import pytest

from meshpar.cli import main


def _demo_rows(capsys, speeds):
    assert main(["demo", "--speeds", speeds, "--skip-training"]) == 0
    out = capsys.readouterr().out
    rows = {}
    for method in ("even", "proportional", "ga"):
        found = re.search(rf"^\s+{method}\s+(\S+)\s+([\d.]+) ms", out, re.M)
        assert found, out
        rows[method] = (found.group(1), float(found.group(2)))
    return rows


def _plan(capsys, speeds, method, *extra):
    assert main(["plan", "--speeds", speeds, "--model", "resattnet3d-small", "--batch", "8",
                 "--method", method, "--json", *extra]) == 0
    p = json.loads(capsys.readouterr().out)
    return ";".join(f"{a}:{n}" for a, n in p["mesh_shape"]), p["predicted_step_seconds"] * 1e3


@pytest.mark.parametrize("speeds", ["0.9,0.05,0.05", "0.3,0.9"])
def test_the_demo_shows_what_meshpar_plan_returns(capsys, speeds):
    rows = _demo_rows(capsys, speeds)
    for method in ("proportional", "ga"):
        mesh, ms = _plan(capsys, speeds, method)
        assert rows[method][0] == mesh
        assert rows[method][1] == pytest.approx(ms, abs=0.006)
    mesh, ms = _plan(capsys, speeds, "even", "--all-devices")  # the baseline: every device
    assert rows["even"][0] == mesh and rows["even"][1] == pytest.approx(ms, abs=0.006)
