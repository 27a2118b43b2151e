"""``meshpar plan --method exact --time-limit S`` stops within about S: the rows'
own optima (MILPs, one batch of them per placement) were computed for every
placement before the limit was first looked at. Found walking docs/planner.md
as a new user: ``plan --speeds 1,0.5,0.3,0.2,0.9,0.7 --model resattnet3d
--batch 8 --method exact --time-limit 0.5`` gave up after 6.9 s (8.9 s without
device subsets), all of it in ``row_optimum``.

The clock is the planner's own (``time.perf_counter`` in
``meshpar.planning.planners.exact``), replaced here by one that each row optimum
moves 10 s on: the test counts what the planner does past its limit, it times
nothing.
"""
import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import exact
from meshpar.planning.planners.exact import ExactTimeLimit, plan_exact


@pytest.fixture
def slow_rows(monkeypatch):
    """Each row optimum takes 10 s of the planner's clock; returns the call count."""
    clock, calls = [0.0], []
    real = exact.row_optimum

    def row_optimum(*args, **kwargs):
        calls.append(1)
        clock[0] += 10.0
        return real(*args, **kwargs)

    monkeypatch.setattr(exact, "row_optimum", row_optimum)
    monkeypatch.setattr(exact.time, "perf_counter", lambda: clock[0])
    return calls


def test_no_row_optimum_is_started_past_the_time_limit(slow_rows):
    model = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
    with pytest.raises(ExactTimeLimit) as err:
        plan_exact(model, cluster, 8, time_limit=5.0)
    assert len(slow_rows) == 1  # the one it was computing when the limit passed
    assert "not proven optimal within the time limit of 5 s" in str(err.value)
    # the best plan found so far (the proportional start) and a gap to a valid bound
    assert err.value.plan is not None and 0 < err.value.gap < 1


def test_without_a_limit_every_row_optimum_is_computed(slow_rows):
    model = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
    result = plan_exact(model, cluster, 8)
    assert len(slow_rows) > 1 and result.extra["gap"] < 1e-3
