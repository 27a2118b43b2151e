"""A profile's third timed split: the one the cost model fitted to the even and
balanced splits predicted fastest, timed with them and fitted too
(meshpar.planning.calibration.fit_axis's ``checked``)."""
import copy
import json
import os

import numpy as np
import pytest

from meshpar.models import describe_model
from meshpar.planning.calibration import expected_max, fit_axis
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import plan

#: Compute of each device's share in three splits of one axis (seconds).
SHARES = {"even": [1.0, 3.0], "balanced": [1.5, 1.5], "checked": [2.0, 0.5]}


def _predict(work, c, which):
    return float(expected_max(np.array(SHARES[which]), c)) + work / 2.0


def _worst(fit, measured):
    return max(abs(np.log(_predict(*fit, key) / s)) for key, s in measured.items())


def test_a_checked_split_the_pair_prices_as_measured_keeps_the_pair():
    even, balanced = _predict(0.4, 0.6, "even"), _predict(0.4, 0.6, "balanced")
    checked = _predict(0.4, 0.6, "checked")
    assert fit_axis(_predict, even, balanced, 10.0, {"checked": checked}) == \
        fit_axis(_predict, even, balanced, 10.0)


def test_a_checked_split_slower_than_the_pair_predicts_shares_the_error_out():
    """The pair fitted to the even and balanced splits prices those exactly and
    misses the third by 40%; the fit over all three misses none by as much and
    moves the third's prediction towards its time."""
    even, balanced = _predict(0.4, 0.6, "even"), _predict(0.4, 0.6, "balanced")
    measured = {"even": even, "balanced": balanced,
                "checked": 1.4 * _predict(0.4, 0.6, "checked")}
    pair = fit_axis(_predict, even, balanced, 10.0)
    fit = fit_axis(_predict, even, balanced, 10.0, {"checked": measured["checked"]})
    assert _worst(pair, measured) == pytest.approx(np.log(1.4), rel=1e-3)
    assert _worst(fit, measured) < 0.5 * _worst(pair, measured)
    assert _predict(*fit, "checked") > 1.1 * _predict(*pair, "checked")
    # no pair on the jitter grid does better by more than the fit's tie
    for c in np.linspace(0.0, 2.0, 21):
        for w in np.linspace(0.0, 4.0, 401):
            assert _worst((w, c), measured) >= _worst(fit, measured) - 2e-3
    # without a balanced split: the even and the checked split alone
    fit = fit_axis(_predict, even, None, 10.0, {"checked": measured["checked"]})
    assert _worst(fit, {k: measured[k] for k in ("even", "checked")}) < np.log(1.4) / 2


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), None])
def test_a_checked_split_needs_a_positive_time(seconds):
    with pytest.raises(ValueError, match="checked split time must be positive"):
        fit_axis(_predict, 2.0, 1.8, 10.0, {"checked": seconds})


def _stop56_profile():
    """resattnet3d-small, batch 8, workers at 0.9 and 0.3 of a core (stop 56's
    `meshpar bench train --verify 3`): its timed even 4/4 and balanced 6/2 batch
    splits put 7/1 ahead of the fast worker alone."""
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results",
                        "train-0.9-0.3-batch8-verify3-amd-stop56", "train.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["profiles"]["resattnet3d-small"]


def test_the_split_the_pair_put_ahead_timed_slower_leaves_the_slow_worker_idle():
    """Fitted to the 4/4 and 6/2 splits alone, the planner picks 7/1, predicted
    42 ms against 46 ms for the fast worker alone; that run's training measured
    7/1 at 71 ms a step. With 7/1 timed at that, the fit prices it slower than
    the fast worker alone and the planner leaves the slow worker idle."""
    model, data = describe_model("resattnet3d-small"), _stop56_profile()
    profile = ClusterSpec.from_dict(copy.deepcopy(data))
    pick = plan(model, profile, 8, subsets=True)
    assert pick.split_sizes == {"batch": [7, 1]} and len(pick.devices) == 2
    data["extra"]["split_seconds"]["checked"] = {
        "batch": {"plan": pick.to_dict(), "seconds": 8 / 112.5}}
    checked = ClusterSpec.from_dict(data)
    before = CostModel(model, profile, 8).evaluate_plan(pick).seconds[0]
    after = CostModel(model, checked, 8).evaluate_plan(pick).seconds[0]
    assert after > 1.2 * before and after < 8 / 112.5
    alone = plan(model, checked, 8, subsets=True)
    assert alone.devices == ("/job:worker/task:0/device:CPU:0",)
    assert alone.predicted_step_seconds < after


@pytest.mark.parametrize("edit, message", [
    (lambda e, other: e.update(seconds="fast"), "'seconds' must be a positive number"),
    (lambda e, other: e["plan"].update(batch=16), "add up to 8, not the plan's batch 16"),
    (lambda e, other: e.update(plan=other), "not a batch split of batch 8"),
    (lambda e, other: e.update(plan={"mesh_shape": "batch:2"}), "checked batch split"),
])
def test_a_checked_split_edited_by_hand_is_refused_by_name(edit, message):
    model, data = describe_model("resattnet3d-small"), _stop56_profile()
    profile = ClusterSpec.from_dict(copy.deepcopy(data))
    pick = plan(model, profile, 8, shapes=[(2, 1)])
    entry = {"plan": pick.to_dict(), "seconds": 0.07}
    edit(entry, plan(model, profile, 8, shapes=[(1, 2)]).to_dict())  # a model split
    data["extra"]["split_seconds"]["checked"] = {"batch": entry}
    with pytest.raises(ValueError, match=message):
        CostModel(model, ClusterSpec.from_dict(data), 8)
