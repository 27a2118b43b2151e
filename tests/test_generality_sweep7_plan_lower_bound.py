"""A plan's ``lower_bound_seconds`` is the cluster's (total work / total peak speed,
as ``Plan`` documents it), whichever devices the plan keeps busy.

With device subsets (``meshpar plan``'s default) a plan that left devices idle
carried the bound of its own devices: vgg-cifar-small at batch 8 on speeds
1, 0.5, 0.3, 0.01 went to the fastest device alone under every method, and
reported that device's bound, its own step time (``meshpar plan``: 'lower bound
3.10066e-05 s (ratio 1.000)'), above the cluster's bound; the same cluster's bound
differed with the devices each method kept.
"""
import json

import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import METHODS, plan

SPEEDS = [1.0, 0.5, 0.3, 0.01]


@pytest.mark.parametrize("method", METHODS)
def test_a_plan_on_fewer_devices_reports_the_clusters_bound(method):
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds(SPEEDS)
    found = plan(model, cluster, 8, method=method, subsets=True)
    assert len(found.devices) < len(SPEEDS)  # a subset plan: what this test is about
    bound = CostModel(model, cluster, 8).lower_bound()
    assert found.lower_bound_seconds == pytest.approx(bound, rel=1e-12)
    assert found.lower_bound_seconds < found.predicted_step_seconds


def test_the_cli_reports_one_bound_with_or_without_idle_devices(capsys):
    bounds = set()
    for method in METHODS:
        for flags in ([], ["--all-devices"]):
            assert main(["plan", "--speeds", ",".join(map(str, SPEEDS)), "--model",
                         "vgg-cifar-small", "--method", method, "--json"] + flags) == 0
            bounds.add(json.loads(capsys.readouterr().out)["lower_bound_seconds"])
    assert len(bounds) == 1
