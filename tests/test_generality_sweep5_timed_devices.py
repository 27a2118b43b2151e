"""A profile's timed splits are fitted only to the devices that ran them.

``meshpar profile --cluster --model`` times even splits over all its workers
and records which device took each share (``split_seconds.device_names``).
Where the cluster being priced was not those devices, the cost model fell
back to its listing order and fitted the N devices' times as its own split:
``ClusterSpec.subset`` of a profile of 0.9, 0.8 and 0.05 devices (resattnet3d-
tiny, batch 8) priced the two fast devices' splits at 156x the work of
splitting the whole profile fits (their step 3.26 ms instead of 0.39 ms), a
profile with a device deleted by hand planned (``meshpar plan --profile``) at
those prices, and one whose devices were renamed and listed the other way gave
the slow device's share to a fast one and fitted no cost of splitting at all.
The cost model now refuses timed splits that name other devices, in one line
saying how to plan such a cluster; a subset names the devices its profile's
splits ran on even where an old profile did not.
"""
import json

import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import plan
from meshpar.planning.planners.common import subset_cost
from test_generality3_plan_order import _timed_profile

MODEL = describe_model("resattnet3d-tiny")
SPEEDS = [0.9, 0.8, 0.05]


def _profile(names=True):
    data = _timed_profile(SPEEDS, 8)
    if not names:  # a profile written before the timed devices were recorded
        del data["extra"]["split_seconds"]["device_names"]
    return data


@pytest.mark.parametrize("names", [True, False])
def test_a_subset_of_a_timed_profile_is_not_fitted_to_the_whole_profiles_times(names):
    profile = ClusterSpec.from_dict(_profile(names))
    fast = profile.subset(profile.devices[:2])
    assert fast.extra["split_seconds"]["device_names"] == ["w0", "w1", "w2"]
    with pytest.raises(ValueError, match=r"timed on w0, w1, w2 .*lists w0, w1: .*subset_cost"):
        CostModel(MODEL, fast, 8)
    with pytest.raises(ValueError, match="timed on w0, w1, w2"):
        plan(MODEL, fast, 8, method="proportional")
    # what the message offers: the whole profile's fit, carried to the subset
    whole = CostModel(MODEL, profile, 8)
    assert whole.split_overhead["batch"] > 0
    assert subset_cost(whole, profile.devices[:2]).split_overhead == whole.split_overhead
    # one device has no split to price (meshpar bench's alone plans)
    assert CostModel(MODEL, profile.subset(profile.devices[2:]), 8).split_overhead == \
        {"batch": 0.0, "model": 0.0}


def _plan_cli(capsys, tmp_path, data):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    code = main(["plan", "--profile", str(path), "--batch", "8", "--method", "proportional",
                 "--json"])
    out = capsys.readouterr()
    return code, out


def test_a_profile_with_a_device_deleted_by_hand_is_refused_in_one_line(tmp_path, capsys):
    data = _profile()
    del data["devices"][2]
    code, out = _plan_cli(capsys, tmp_path, data)
    assert code == 2 and out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshpar plan: error: "), out.err
    assert "timed on w0, w1, w2" in lines[0] and "Traceback" not in out.err


def test_renamed_devices_are_fitted_by_the_names_their_times_record(tmp_path, capsys):
    base = _profile()
    code, out = _plan_cli(capsys, tmp_path, base)
    assert code == 0, out.err
    first = json.loads(out.out)
    renamed = json.loads(json.dumps(base))
    for device in renamed["devices"]:
        device["name"] = device["name"].replace("w", "node")
    renamed["devices"].reverse()
    code, out = _plan_cli(capsys, tmp_path, renamed)
    assert code == 2 and "timed on w0, w1, w2" in out.err  # was planned, splits free
    renamed["extra"]["split_seconds"]["device_names"] = ["node0", "node1", "node2"]
    code, out = _plan_cli(capsys, tmp_path, renamed)
    assert code == 0, out.err
    second = json.loads(out.out)
    assert second["predicted_step_seconds"] == pytest.approx(first["predicted_step_seconds"],
                                                             rel=1e-9)
    assert (second["devices"], second["split_sizes"]) == (first["devices"],
                                                          first["split_sizes"])
