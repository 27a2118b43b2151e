"""A plan does not depend on the order the cluster lists its devices in.

The planners index devices by position (the GA's chromosome and its random
draws, the exact planner's programs, the placement of ties), so one cluster
listed in two orders gave two plans: the GA (seed 1) on vgg-cifar-pairs at
batch 7 over speeds 0.5,0.5,0.8 with 80,200,80 MiB found 64.78 ms listed so,
64.52 ms listed 0.8,0.5,0.5; the exact planner split vgg-cifar's layers
21/21/.../92 to the 1.0 device listed 0.5,1.0,0.8,0.5 and 22/22/.../92 listed
0.5,0.5,0.8,1.0 (the same step: HiGHS returned another of its optima); and
every method gave the odd sample of batch 7 over two 0.5 devices to the first
listed, whatever their memory. ``plan`` now plans on the devices in an order
of what they are (speed, memory, profile: ``canonical_order``), so a cluster
listed in any order gets one plan, up to which device is called what.
"""
import itertools
import json

import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec

CASES = [  # method, model, batch, speeds, memory MiB
    ("ga", "vgg-cifar-pairs", 7, (0.5, 0.5, 0.8), (80, 200, 80)),
    ("exact", "vgg-cifar", 3, (0.5, 1.0, 0.8, 0.5), None),
    ("even", "resattnet3d-tiny", 7, (0.5, 0.5), (80, 200)),
    ("proportional", "resattnet3d-tiny", 7, (0.5, 0.5), (80, 200)),
    ("exact", "resattnet3d-tiny", 7, (0.5, 0.5), (80, 200)),
]


def _plan(capsys, method, model, batch, speeds, memory):
    args = ["plan", "--speeds", ",".join(map(str, speeds)), "--model", model, "--batch",
            str(batch), "--method", method, "--json"]
    if memory:
        args += ["--memory-mib", ",".join(map(str, memory))]
    if method == "ga":
        args += ["--generations", "8", "--population", "20", "--seed", "1"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _by_device_kind(plan, speeds, memory):
    """The plan with every device named by its speed and memory; the planning time
    dropped (a clock reading)."""
    kinds = {f"/job:worker/task:{i}/device:CPU:0": f"{s}@{memory[i] if memory else '-'}"
             for i, s in enumerate(speeds)}
    plan = dict(plan, devices=[kinds[d] for d in plan["devices"]])
    plan.pop("planning_seconds")
    return plan


@pytest.mark.parametrize("method, model, batch, speeds, memory", CASES)
def test_every_listing_of_the_devices_gets_one_plan(capsys, method, model, batch, speeds,
                                                    memory):
    n = len(speeds)
    orders = list(itertools.permutations(range(n)))[:4]  # 4 devices: 4 of the 24
    if n == 4:
        orders.append((3, 2, 1, 0))
    found = []
    for order in orders:
        s = [speeds[i] for i in order]
        m = [memory[i] for i in order] if memory else None
        found.append(_by_device_kind(_plan(capsys, method, model, batch, s, m), s, m))
    for order, got in zip(orders[1:], found[1:]):
        assert got == found[0], order


def test_the_order_moves_what_the_profile_holds_per_device():
    cluster = ClusterSpec.from_speeds([0.3, 0.9, 0.6])
    cluster = ClusterSpec(cluster.devices, extra={
        "addresses": ["a:1", "b:2", "c:3"],
        "split_seconds": {"batch": 1.0, "balanced": {"weights": [0.3, 0.9, 0.6], "batch": 0.5}}})
    from meshpar.planning.planners import canonical_order

    ordered = canonical_order(cluster, describe_model("resattnet3d-tiny"), 4)
    assert [d.name for d in ordered.devices] == ["w1", "w2", "w0"]
    assert ordered.extra["addresses"] == ["b:2", "c:3", "a:1"]
    # the timed splits keep their order, and name the devices that ran their shares
    assert ordered.extra["split_seconds"] == dict(cluster.extra["split_seconds"],
                                                  device_names=["w0", "w1", "w2"])
    assert cluster.extra["addresses"] == ["a:1", "b:2", "c:3"]  # the cluster given is kept
    with pytest.raises(ValueError, match="permutation"):
        cluster.reordered([0, 0, 1])


def _timed_profile(speeds, batch):
    """A model-step profile of ``speeds`` whose even splits (shares in the listing
    order: batch 5 over three is 2, 2, 1) were timed 10% above their compute, as
    ``meshpar profile`` writes it (the timed devices named in their order)."""
    import dataclasses

    import numpy as np

    from meshpar.planning.cost_model import CostModel

    model = describe_model("resattnet3d-tiny")
    base = ClusterSpec.from_speeds(speeds)
    extra = {"work": "model-step", "model": model.name}
    plain = CostModel(model, dataclasses.replace(base, extra=extra), batch)
    n = len(speeds)
    even = [batch // n + (i < batch % n) for i in range(n)]
    dims = {d: [s // n + (i < s % n) for i in range(n)]
            for d, s in zip(plain.dim_names, plain.dim_sizes) if s >= n}
    split = {"batch_size": batch, "device_names": [d.name for d in base.devices],
             "batch": float(plain.evaluate_sizes(n, 1, np.arange(n), even, {})
                            .compute_seconds[0] * 1.1),
             "model": float(plain.evaluate_sizes(1, n, np.arange(n), [batch], dims)
                            .compute_seconds[0] * 1.1)}
    return dataclasses.replace(base, extra=dict(extra, split_seconds=split)).to_dict()


@pytest.mark.parametrize("method", ["even", "proportional", "ga"])
def test_a_profile_listing_its_devices_in_another_order_gets_one_plan(tmp_path, capsys, method):
    """The timed splits gave the 0.3 device 2 of batch 5; listed last it took the
    1 sample of the odd share, so the calibrated work of splitting doubled
    (7.4 to 14.8 MFLOP on the batch axis) and every plan's price with it."""
    from meshpar.planning.cost_model import CostModel

    profile = _timed_profile([0.3, 0.9, 0.6], 5)
    reverse = json.loads(json.dumps(profile))
    reverse["devices"].reverse()  # the file edited: the devices listed the other way
    found = []
    for i, data in enumerate((profile, reverse)):
        cost = CostModel(describe_model("resattnet3d-tiny"), ClusterSpec.from_dict(data), 5)
        path = tmp_path / f"profile{i}.json"
        path.write_text(json.dumps(data))
        args = ["plan", "--profile", str(path), "--batch", "5", "--method", method,
                "--all-devices", "--json"]
        if method == "ga":
            args += ["--generations", "5", "--population", "16"]
        assert main(args) == 0
        plan = json.loads(capsys.readouterr().out)
        found.append((cost.split_overhead, plan["predicted_step_seconds"], plan["devices"],
                      plan["split_sizes"]))
    assert found[1] == found[0]
