"""A re-plan (``meshpar train --rebalance``/``--elastic``) of workers whose live speeds
are the same up to which task is which gives the same plan, up to that relabelling.

``rebalance.replan`` lists the workers by task number, so which task measured
which speed was the listing order the planners saw: the exact planner's
re-plan of vgg-cifar-pairs at batch 7 over live speeds 0.5/0.5/0.8 on a
``batch:1;model:3`` mesh split the filters three ways (HiGHS's optima of one
step) depending on which task was the 0.8 one. Planning on the devices in an
order of what they are (``planners.canonical_order``) fixed it.
"""
import itertools

import pytest

from meshpar.models import describe_model
from meshpar.training.rebalance import replan

SPEEDS = (0.5, 0.5, 0.8)


@pytest.mark.parametrize("method", ["exact", "ga"])
def test_relabelled_workers_get_one_replan(method):
    description = describe_model("vgg-cifar-pairs")
    found = set()
    for order in itertools.permutations(range(3)):
        live = {task: SPEEDS[order[task]] for task in range(3)}
        plan = replan(description, live, 7, method=method, shape=(1, 3))
        speed_of = {f"/job:worker/task:{t}/device:CPU:0": s for t, s in live.items()}
        found.add((plan.predicted_step_seconds, tuple(speed_of[d] for d in plan.devices),
                   tuple(sorted((dim, tuple(sizes)) for dim, sizes in plan.split_sizes.items()))))
    assert len(found) == 1, found
