"""Plans made on a profile measured on an emulated cluster (a stored benchmark run),
re-priced from scratch: the planners leave the slow worker idle there, so the plan
runs on a subset of the profiled devices."""
import json
from pathlib import Path

import pytest

from meshpar.models import resolve
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import plan
from meshpar.planning.planners.common import subset_cost

RUN = (Path(__file__).resolve().parent.parent
       / "benchmarks/results/train-0.9-0.3-batch8-amd-stop55/train.json")


def _vgg_profile_plan():
    """The stored run's vgg-cifar profile as a cluster, its model, and Mesh-TF's even
    plan at batch 8 (on the fast worker alone: the split is priced slower)."""
    cluster = ClusterSpec.from_dict(json.loads(RUN.read_text())["profiles"]["vgg-cifar"])
    model = resolve("vgg-cifar").describe()
    return cluster, model, plan(model, cluster, 8, method="even", subsets=True)


def test_a_subset_plan_priced_on_the_whole_cluster_is_refused_naming_the_subset_cost():
    """Before: ``mesh 1x1 does not have 2 devices``, which says neither that the plan
    leaves a device idle nor how to price it."""
    cluster, model, result = _vgg_profile_plan()
    assert len(result.devices) == 1 < len(cluster)
    with pytest.raises(ValueError, match=r"runs on 1 of this cluster's 2 devices.*subset_cost"):
        CostModel(model, cluster, 8).evaluate_plan(result)


def test_a_subset_plan_repriced_with_its_devices_cost_model_is_the_time_it_reports():
    cluster, model, result = _vgg_profile_plan()
    devices = [d for s in result.devices for d in cluster.devices if d.device == s]
    cost = subset_cost(CostModel(model, cluster, 8), devices)
    assert float(cost.evaluate_plan(result).seconds[0]) == pytest.approx(
        result.predicted_step_seconds, rel=1e-12)
