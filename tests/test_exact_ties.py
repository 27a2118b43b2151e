"""The exact planner breaks ties of the predicted step sensibly and deterministically.

``meshpar plan --speeds 0.2,1,0.4,0.8 --batch 7 --method exact --model
resattnet3d-tiny --all-devices`` planned batch sizes 1,1,1,4 on a
``batch:4`` mesh (the 0.8 device with 4 samples, the fastest with 1): the
0.2 device's one sample sets the step, so HiGHS returned any split under it
and the fastest device idled most of the step. Among the plans of equal step
the planner now takes the least total of the rows' times (one column: the
least total device time), in the MILP (a second program bounded by the step)
and in the enumeration (a second sort key).
"""
import itertools

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import exact, plan

SPEEDS = [0.2, 1.0, 0.4, 0.8]
BATCH = 7


def _per_device(result):
    """{device speed: samples} of a one-column plan."""
    speed = {d.device: s for d, s in zip(ClusterSpec.from_speeds(SPEEDS).devices, SPEEDS)}
    return {speed[d]: int(b) for d, b in zip(result.devices, result.split_sizes["batch"])}


def _least_total_at_the_same_step(samples: dict) -> bool:
    """Whether no split of BATCH over these devices has the same slowest device
    time and a smaller total device time (time per sample ~ 1 / speed)."""
    speeds = sorted(samples)
    step = max(samples[s] / s for s in speeds)
    total = sum(samples[s] / s for s in speeds)
    for b in itertools.product(range(1, BATCH + 1), repeat=len(speeds)):
        if sum(b) != BATCH:
            continue
        times = [n / s for n, s in zip(b, speeds)]
        if max(times) <= step * (1 + 1e-12) and sum(times) < total * (1 - 1e-9):
            return False
    return True


def test_exact_ties_leave_no_fast_device_idle():
    model = describe_model("resattnet3d-tiny")
    result = plan(model, SPEEDS, BATCH, method="exact")
    ga = plan(model, SPEEDS, BATCH, method="ga")
    assert result.mesh_shape == (("batch", 4), ("model", 1))
    assert result.predicted_step_seconds <= ga.predicted_step_seconds * (1 + 1e-9)
    samples = _per_device(result)
    assert samples[1.0] == max(samples.values()), samples  # was 1 of 7 (4 on the 0.8 device)
    assert _least_total_at_the_same_step(samples), samples
    again = plan(model, SPEEDS, BATCH, method="exact")
    assert again.split_sizes == result.split_sizes and again.devices == result.devices


def test_enumeration_ties_take_the_least_total_row_time():
    model = describe_model("resattnet3d-tiny")
    cost = CostModel(model, ClusterSpec.from_speeds(SPEEDS), BATCH)
    found, _ = exact._best_for_shape(cost, 4, 1)
    samples = _per_device(found)
    assert samples[1.0] == max(samples.values()), samples
    assert _least_total_at_the_same_step(samples), samples
