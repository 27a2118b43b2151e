"""A pick whose predicted lead over the best plan on other devices is within what its
profile could measure (the timed splits' spread) is said to be a close call."""
import dataclasses

import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.margins import close_call, timing_spread
from meshpar.planning.planners import plan_subsets


def _with_spread(cluster, spread):
    split = {"batch": 0.1, "model": 0.2, "batch_size": 8, "spread": spread}
    return dataclasses.replace(cluster, extra={**(cluster.extra or {}), "split_seconds": split})


@pytest.fixture(scope="module")
def planned():
    cluster = ClusterSpec.from_speeds([3.0, 1.0])
    found = plan_subsets(describe_model("resattnet3d-small"), cluster, 8, "proportional")
    return cluster, found


def test_the_spread_is_the_largest_of_the_timed_splits():
    cluster = ClusterSpec.from_speeds([3.0, 1.0])
    assert timing_spread(cluster) is None
    assert timing_spread(_with_spread(cluster, {"even": {"batch": 0.05, "model": 0.3},
                                                "balanced": {"batch": 0.2}})) == 0.3
    assert timing_spread(_with_spread(cluster, {})) is None


def test_a_lead_within_the_spread_is_a_close_call_and_one_beyond_it_is_not(planned):
    cluster, found = planned
    split = found.whole
    alone = next(p for p in found.subsets if len(p.devices) == 1)
    assert len(split.devices) == 2
    pick = dataclasses.replace(split, predicted_step_seconds=0.050)
    rival = dataclasses.replace(alone, predicted_step_seconds=0.051)  # 2% slower
    noisy = _with_spread(cluster, {"even": {"batch": 0.12}, "balanced": {"batch": 0.25}})
    note = close_call(pick, [pick, rival], noisy)
    assert "2.0% faster" in note and "alone" in note and "25%" in note and "--verify" in note
    # a lead beyond the spread, no spread recorded, or no rival on other devices: silent
    quiet = _with_spread(cluster, {"even": {"batch": 0.01}, "balanced": {"batch": 0.015}})
    assert close_call(pick, [rival], quiet) is None
    assert close_call(pick, [rival], cluster) is None
    assert close_call(pick, [dataclasses.replace(split, predicted_step_seconds=0.0505)],
                      noisy) is None
    # a rival that does not fit in memory is no rival
    assert close_call(pick, [dataclasses.replace(rival, feasible=False)], noisy) is None
