"""Re-balancing's count of each worker's work follows the split the mesh really makes.

A plan from the exact planner or the GA carries per-layer split ratios
(``dim_split_weights``); its axis weights are only one of them (the exact
planner's are even). ``worker_work`` used the axis weights for every layer, so
on such a plan it gave the workers shares they do not compute (three equal
thirds where the plan gives 51/13/36%), and the speeds re-balancing measures
from busy times (work / busy) and its re-plans were built on them.
"""
import pytest

from meshpar.core.splits import split_sizes
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import plan
from meshpar.training.live_speeds import worker_work
from meshpar.training.mesh_spec import MeshSpec


def _flop_shares(description, planned) -> dict:
    """Worker task -> share of the step's FLOPs, from the plan's integer split sizes."""
    rows, cols = (size for _, size in planned.mesh_shape)
    layout = dict(planned.layout)
    sizes = planned.split_sizes
    total = sum(layer.flops for layer in description.layers)
    out = {}
    for pnum in range(rows * cols):
        row, col = divmod(pnum, cols)
        work = 0.0
        for layer in description.layers:
            share = 1.0
            if layer.split_dim and layout.get(layer.split_dim) == "model":
                share = sizes[layer.split_dim][col] / layer.split_size
            work += layer.flops * share
        task = int(planned.devices[pnum].split("task:")[1].split("/")[0])
        out[task] = work / total * sizes["batch"][row] / planned.batch
    return out


@pytest.mark.parametrize("method,speeds,batch,shape", [
    ("exact", [1.0, 0.3, 0.6], 8, (1, 3)),
    ("ga", [1.0, 0.3, 0.6, 0.8], 8, (2, 2)),
    ("exact", [0.2, 1.0], 4, (1, 2)),
])
def test_worker_work_is_the_plans_flop_share_with_per_layer_ratios(method, speeds, batch,
                                                                    shape):
    description = describe_model("resattnet3d-small")
    planned = plan(description, ClusterSpec.from_speeds(speeds), batch, method=method,
                   seed=0, shapes=[shape])
    assert planned.dim_split_weights  # per-layer ratios: what this test is about
    work = worker_work(MeshSpec.from_plan(planned), description, planned.layout_string())
    want = _flop_shares(description, planned)
    assert sorted(work) == sorted(want)
    for task, share in want.items():
        assert work[task] == pytest.approx(share, rel=1e-9), (task, work, want)


def test_per_dimension_weights_override_the_axis_weights_in_whole_pieces():
    description = describe_model("resattnet3d-tiny")
    dims = {layer.split_dim: layer.split_size for layer in description.layers
            if layer.split_dim}
    devices = [f"/job:worker/task:{t}/device:CPU:0" for t in (0, 1)]
    layout = ";".join(f"{d}:model" for d in dims)
    mesh = MeshSpec("model:2", layout, devices, split_weights={"model": [1.0, 1.0]},
                    dim_split_weights={d: [3.0, 1.0] for d in dims})
    work = worker_work(mesh, description, layout)
    total = sum(layer.flops for layer in description.layers)
    first = sum(layer.flops * (split_sizes(layer.split_size, [3.0, 1.0])[0] / layer.split_size
                               if layer.split_dim else 1.0)
                for layer in description.layers) / total
    assert work[0] == pytest.approx(first, rel=1e-12)
    assert work[0] > work[1]  # the axis weights alone would make them equal


def test_the_batch_axis_cuts_whole_samples_of_the_run_batch():
    """``--speeds 0.9,0.3 --mesh batch:2 --batch 5``: the workers train 4 and 1
    samples (split_sizes), so their work is 0.8 and 0.2 of the step, not the
    weights' 0.75 and 0.25 (a speed measured from busy time was 25% too high
    for the slow worker)."""
    description = describe_model("resattnet3d-tiny")
    devices = [f"/job:worker/task:{t}/device:CPU:0" for t in (0, 1)]
    mesh = MeshSpec("batch:2", "batch:batch", devices, split_weights={"batch": [0.9, 0.3]})
    assert worker_work(mesh, description, "batch:batch", batch=5) == pytest.approx(
        {0: 0.8, 1: 0.2})
    assert worker_work(mesh, description, "batch:batch") == pytest.approx({0: 0.75, 1: 0.25})


def test_a_rebalancing_run_counts_its_starting_mesh_at_the_run_batch():
    from meshpar.training.rebalance import RebalanceOptions, _Run

    description = describe_model("resattnet3d-tiny")
    devices = [f"/job:worker/task:{t}/device:CPU:0" for t in (0, 1)]
    mesh = MeshSpec("batch:2", "batch:batch", devices, split_weights={"batch": [0.9, 0.3]})
    run = _Run(mesh, None, description, 5, RebalanceOptions(), lambda m: "batch:batch",
               lambda line: None)
    assert run.work == pytest.approx({0: 0.8, 1: 0.2})
