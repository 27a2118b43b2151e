"""Every registered model plans with every method on other device counts, speed
orders and odd or small batches, and the plan is consistent with itself.

Invariants checked on each plan: the batch split adds up to the batch and each
laid-out split to its dimension, every part >= 1; as many distinct devices as
the mesh has processors; the plan names the model asked for; and the devices
listed in another order give a plan with the same mesh shape and predicted
step (the speeds, not their listing order, decide; the exact planner's to
within its proven gap). The ``meshpar plan --json`` sweep that found
tests/test_generality2_plan_json.py's defect ran these models and methods.
"""
import pytest

from meshpar import models
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import plan

MODELS = [n for n in models.names() if n != "resattnet3d"]  # the alias of -full
CASES = [((0.3, 0.9, 0.6), 5), ((1.0, 0.5, 0.5, 0.2), 3)]


def _check(p, name, speeds, batch):
    description = models.describe_model(name)
    assert p.model == models.get(name).config.name and p.batch == batch
    n = 1
    for _, size in p.mesh_shape:
        n *= size
    assert len(p.devices) == n == len(set(p.devices)) <= len(speeds)
    sizes = dict(p.split_sizes)
    assert sum(sizes[description.batch_dim]) == batch
    dims = {layer.split_dim: layer.split_size for layer in description.layers
            if layer.split_dim}
    for dim, parts in sizes.items():
        assert min(parts) >= 1
        if dim != description.batch_dim:
            assert sum(parts) == dims[dim]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["ga", "exact", "proportional", "even"])
def test_plans_are_whole_and_do_not_depend_on_the_listing_order(name, method):
    if name == "resattnet3d-full" and method == "ga":
        pytest.skip("its GA's local search takes seconds a plan; its exact plans are checked")
    description = models.describe_model(name)
    for speeds, batch in CASES:
        options = {"generations": 5, "population": 16} if method == "ga" else {}
        found = []
        for listed in (speeds, tuple(reversed(speeds))):
            p = plan(description, ClusterSpec.from_speeds(list(listed)), batch, method=method,
                     subsets=True, **options)
            _check(p, name, listed, batch)
            found.append(p)
        assert found[0].mesh_shape == found[1].mesh_shape
        # exact: within its MILP's relative gap (mip_rel_gap 1e-4), which either listing
        # may stop anywhere inside
        assert found[0].predicted_step_seconds == pytest.approx(
            found[1].predicted_step_seconds, rel=1e-4 if method == "exact" else 1e-9)
