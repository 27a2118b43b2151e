"""A plan on some of the profiled devices keeps the profile's calibrated cost of
splitting.

The profile's timed splits ran over all its devices; a plan that leaves one
idle is priced with the split work fitted to those timings on the whole
cluster. Fitted again on the subset, the N-way times were read as the
subset's own k-way split: with a 0.05 device among three, whose share set the
timed step, two fast devices' split was priced with ~150x the work of
splitting, 8-12x its step."""
import dataclasses

import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import plan
from meshpar.planning.planners.candidates import batch_neighbours
from meshpar.planning.planners.common import subset_cost
from test_generality3_plan_order import _timed_profile

MODEL = describe_model("resattnet3d-tiny")


def _priced_with(profile, devices, calibrated):
    """The cost model of ``devices`` whose split work is ``calibrated``'s."""
    sub = profile.subset(devices)
    extra = {k: v for k, v in sub.extra.items() if k != "split_seconds"}
    extra.update(split_overhead_flops=calibrated.split_overhead,
                 sync_jitter=calibrated.sync_jitter)
    return CostModel(MODEL, dataclasses.replace(sub, extra=extra), calibrated.batch)


@pytest.mark.parametrize("speeds", [[0.9, 0.8, 0.05], [0.05, 0.9, 0.8], [0.8, 0.05, 0.9]])
@pytest.mark.parametrize("method", ["proportional", "ga", "exact"])
def test_a_plan_leaving_a_profiled_device_idle_is_priced_at_the_profiles_calibration(
        speeds, method):
    profile = ClusterSpec.from_dict(_timed_profile(speeds, 8))
    whole = CostModel(MODEL, profile, 8)
    assert whole.split_overhead["batch"] > 0 and whole.split_overhead["model"] > 0
    found = plan(MODEL, profile, 8, method, 0, subsets=True)
    assert len(found.devices) == 2  # the 0.05 device idle: the case under test
    used = [d for d in profile.devices if d.device in found.devices]
    expected = _priced_with(profile, used, whole).evaluate_plan(found).seconds[0]
    assert found.predicted_step_seconds == pytest.approx(expected, rel=1e-9)
    # the helper itself: the same split work, on the subset's devices only
    sub = subset_cost(whole, used)
    assert sub.split_overhead == whole.split_overhead
    assert [d.device for d in sub.cluster.devices] == [d.device for d in used]


def test_a_subset_plans_batch_neighbours_are_priced_at_the_profiles_calibration():
    profile = ClusterSpec.from_dict(_timed_profile([0.9, 0.8, 0.05], 8))
    whole = CostModel(MODEL, profile, 8)
    found = plan(MODEL, profile, 8, "proportional", 0, subsets=True)
    used = [d for d in profile.devices if d.device in found.devices]
    priced = _priced_with(profile, used, whole)
    neighbours = batch_neighbours(found, MODEL, profile)
    assert neighbours
    for p in neighbours:
        assert p.predicted_step_seconds == pytest.approx(
            priced.evaluate_plan(p).seconds[0], rel=1e-9)


def test_a_cost_model_without_timed_splits_gives_its_subset_none():
    cluster = ClusterSpec.from_speeds([0.9, 0.8, 0.05])
    sub = subset_cost(CostModel(MODEL, cluster, 8), cluster.devices[:2])
    assert sub.split_overhead is None and sub.n == 2
    assert "split_overhead_flops" not in (sub.cluster.extra or {})
