"""``meshpar plan`` finds a plan that fits when only a slower device has the memory.

With device subsets (``meshpar plan``'s default) the planner tried the whole
cluster and the fastest k devices; a slow device with more memory than the
fast ones was never tried alone. Speeds 0.9,0.3,0.6 with 10/120/10 MiB for
resattnet3d-small at batch 8: the 0.3 device alone fits (77 MiB counted of its
120), yet every method said 'no plan fits in memory'. When none of those fits,
the devices with the most memory are now tried too (fitting plans unchanged).
"""
import json

import pytest

from meshpar.cli import main

ARGS = ["plan", "--speeds", "0.9,0.3,0.6", "--model", "resattnet3d-small", "--batch", "8",
        "--json"]


@pytest.mark.parametrize("method", ["ga", "exact", "proportional", "even"])
def test_the_one_device_with_room_is_planned(capsys, method):
    assert main(ARGS + ["--method", method, "--memory-mib", "10,120,10"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["feasible"] and plan["devices"] == ["/job:worker/task:1/device:CPU:0"]
    assert plan["split_sizes"]["batch"] == [8]


def test_the_two_roomiest_devices_are_tried_together(capsys):
    # 0.3 and 0.6 have the room; the fastest (0.9) has none
    assert main(ARGS + ["--memory-mib", "10,70,70"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["feasible"]
    assert sorted(plan["devices"]) == ["/job:worker/task:1/device:CPU:0",
                                       "/job:worker/task:2/device:CPU:0"]


def test_a_budget_nothing_fits_is_still_refused(capsys):
    assert main(ARGS + ["--memory-mib", "10,20,10"]) == 2
    assert "no plan fits in memory" in capsys.readouterr().err


def test_a_plan_that_fits_is_the_same_as_before(capsys):
    assert main(ARGS + ["--memory-mib", "1000"]) == 0
    roomy = json.loads(capsys.readouterr().out)
    assert main(ARGS) == 0
    default = json.loads(capsys.readouterr().out)
    assert roomy["devices"] == default["devices"]
    assert roomy["split_sizes"] == default["split_sizes"]
