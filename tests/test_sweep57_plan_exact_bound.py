"""The exact planner's proven bound must hold against every plan of its search space.

Found by the sweep of meshpar plan (sweep 57): vgg-cifar-pairs on speeds
0.1/0.5/0.25/0.1/0.9 at batch 8 (all devices, 1x5 mesh, no dimension replicated).
The exact planner reports 0.0499562053 s with a proven lower bound of 0.0499561813 s
(gap 4.8e-7), and the GA finds a plan of that same search space (same mesh, the
same speeds in each column, every dimension laid out) at 0.0499561420 s: below the
"proven" bound. With ``mip_rel_gap=0`` the exact planner finds the GA's plan, so the
plan exists; the bound comes from :func:`~meshpar.planning.planners.milp.row_optimum`
(per sample 0.00619952266 s, plus 0.00036 s latency, times 8 samples), which is
not the cost model's value: the cost model prices the row optimum's own split at
0.00655952567 s at batch 1, 3.0e-9 s (6.3e-8 objective units, unit = the cost
model's lower bound, 0.048 s) above what the program says, and the GA's split at
0.00655951775 s, below the program's "optimum". Consistent with HiGHS's
tolerances (primal feasibility 1e-7 and absolute MIP gap 1e-6, in objective
units), which ``_MilpSearch._finish`` acknowledges when it accepts a gap ("about
1e-6 relative") but which the reported ``lower_bound_seconds`` and ``gap`` leave out.
Possible fixes: lower the reported bound by the tolerance (``1e-6 * unit`` per
program), or re-price the row optima with the cost model before using them as
bounds. Not fixed in sweep 57 (reported gaps of 0 are quoted in docs and tests):
strict xfail, so that a fix shows up.
"""
import pytest

from meshpar.models import describe_model
from meshpar.planning.planners import plan


@pytest.mark.xfail(strict=True, reason="row_optimum's program differs from the cost model "
                                        "by ~5e-7 relative (sweep 57, not fixed yet)")
def test_no_plan_of_the_exact_search_space_is_below_its_proven_bound():
    model = describe_model("vgg-cifar-pairs")
    speeds = [0.1, 0.5, 0.25, 0.1, 0.9]
    exact = plan(model, speeds, 8, method="exact")
    ga = plan(model, speeds, 8, method="ga", seed=0)
    assert not ga.extra.get("replicated") and ga.mesh_shape == exact.mesh_shape
    assert ga.feasible and exact.feasible
    assert ga.predicted_step_seconds >= exact.extra["lower_bound_seconds"] * (1 - 1e-12)
