"""A re-plan from a profile records each worker's own address.

``scaled_profile`` (every re-plan of ``train --rebalance-profile``) lists the
devices by task, but kept the profile's ``addresses`` in the profile's listing
order, so where the profile did not list its devices by task (a cluster file
listing the workers in another order: ``ClusterClient.follow_addresses`` moves
each device to the task at its address and keeps the listing) every device was
given another's address: the 0.9 worker at a:1, now task 1, was recorded at
b:2, and ``ClusterClient.place(plan.devices, plan_addresses=...)`` with the
plan's ``worker_addresses`` put its share on the 0.3 worker. A re-plan on some
of the workers recorded no addresses at all.
"""
import dataclasses

import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.training.rebalance import replan, scaled_profile

ADDRESSES = ["a:1", "b:2", "c:3"]


def _profile():
    """Speeds 0.9, 0.3, 0.6 at a:1, b:2, c:3, the first two now tasks 1 and 0 (as
    ``follow_addresses`` leaves a profile for a cluster file listing b:2 first)."""
    devices = list(ClusterSpec.from_speeds([0.9, 0.3, 0.6]).devices)
    for i, task in ((0, 1), (1, 0)):
        devices[i] = dataclasses.replace(devices[i], device=f"/job:worker/task:{task}/device:CPU:0")
    return ClusterSpec(tuple(devices), extra={"addresses": list(ADDRESSES)})


def _address_of(profile):
    return {d.device: a for d, a in zip(profile.devices, profile.extra["addresses"])}


def test_scaled_profile_keeps_each_devices_address():
    profile = _profile()
    scaled = scaled_profile(profile, {0: 0.3, 1: 0.9, 2: 0.6})
    assert _address_of(scaled) == _address_of(profile)
    some = scaled_profile(profile, {1: 0.9, 2: 0.6})
    assert _address_of(some) == {d: a for d, a in _address_of(profile).items()
                                 if not d.startswith("/job:worker/task:0/")}


@pytest.mark.parametrize("method", ["proportional", "exact", "ga"])
@pytest.mark.parametrize("live", [{0: 0.3, 1: 0.9, 2: 0.6}, {1: 0.9, 2: 0.6}])
def test_a_replan_records_the_address_each_device_was_profiled_at(method, live):
    profile = _profile()
    plan = replan(describe_model("resattnet3d-tiny"), live, 6, method, profile=profile)
    where = _address_of(profile)
    assert plan.extra["worker_addresses"] == [where[d] for d in plan.devices]


@pytest.mark.parametrize("method", ["proportional", "exact", "ga"])
def test_a_plan_on_a_subset_of_a_profile_records_its_devices_addresses(method):
    """``ClusterSpec.subset`` kept all the profile's addresses, one per device of the
    whole profile: planned on two of three workers (``subset`` of tasks 2 and 1), the
    plan recorded no addresses, so a cluster file listing the workers in another
    order got its slices by task number, on other machines than profiled."""
    from meshpar.planning.planners import plan

    whole = ClusterSpec(ClusterSpec.from_speeds([0.3, 0.9, 0.6]).devices,
                        extra={"addresses": list(ADDRESSES)})
    some = whole.subset([whole.devices[2], whole.devices[1]])
    assert some.extra["addresses"] == ["c:3", "b:2"]
    found = plan(describe_model("resattnet3d-tiny"), some, 4, method)
    assert found.extra["worker_addresses"] == [_address_of(whole)[d] for d in found.devices]
