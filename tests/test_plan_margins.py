"""A pick whose predicted lead over the best plan on other devices is within what its
profile could measure (the timed splits' spread) is said to be a close call."""
import dataclasses

import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.margins import close_call, timing_spread
from meshpar.planning.planners import plan_subsets


def _with_spread(cluster, spread):
    split = {"batch": 0.1, "model": 0.2, "batch_size": 8, "spread": spread}
    return dataclasses.replace(cluster, extra={**(cluster.extra or {}), "split_seconds": split})


@pytest.fixture(scope="module")
def planned():
    cluster = ClusterSpec.from_speeds([3.0, 1.0])
    found = plan_subsets(describe_model("resattnet3d-small"), cluster, 8, "proportional")
    return cluster, found


def test_the_spread_is_the_largest_of_the_timed_splits():
    cluster = ClusterSpec.from_speeds([3.0, 1.0])
    assert timing_spread(cluster) is None
    assert timing_spread(_with_spread(cluster, {"even": {"batch": 0.05, "model": 0.3},
                                                "balanced": {"batch": 0.2}})) == 0.3
    assert timing_spread(_with_spread(cluster, {})) is None


def test_a_lead_within_the_spread_is_a_close_call_and_one_beyond_it_is_not(planned):
    cluster, found = planned
    split = found.whole
    alone = next(p for p in found.subsets if len(p.devices) == 1)
    assert len(split.devices) == 2
    pick = dataclasses.replace(split, predicted_step_seconds=0.050)
    rival = dataclasses.replace(alone, predicted_step_seconds=0.051)  # 2% slower
    noisy = _with_spread(cluster, {"even": {"batch": 0.12}, "balanced": {"batch": 0.25}})
    note = close_call(pick, [pick, rival], noisy)
    assert "2.0% faster" in note and "alone" in note and "25%" in note and "--verify" in note
    # a lead beyond the spread, no spread recorded, or no rival on other devices: silent
    quiet = _with_spread(cluster, {"even": {"batch": 0.01}, "balanced": {"batch": 0.015}})
    assert close_call(pick, [rival], quiet) is None
    assert close_call(pick, [rival], cluster) is None
    assert close_call(pick, [dataclasses.replace(split, predicted_step_seconds=0.0505)],
                      noisy) is None
    # a rival that does not fit in memory is no rival
    assert close_call(pick, [dataclasses.replace(rival, feasible=False)], noisy) is None


def test_meshpar_plan_notes_a_pick_within_its_profiles_timing_spread(tmp_path, capsys):
    """Stop 56's batch-8 profile of resattnet3d-small (0.9/0.3): the planner picks a
    7/1 split predicted 2.4% faster than the fast worker alone (it ran at 0.78x it).
    With the spread a stop-57 profile records beside its timed splits, `meshpar plan`
    says the pick is a close call and names --verify; the same profile without a
    spread, or with one below the lead, gets no note. The plan is the same."""
    import json

    from meshpar.cli import main

    stored = json.load(open("benchmarks/results/train-0.9-0.3-batch8-amd-stop56/train.json"))
    profile = stored["profiles"]["resattnet3d-small"]
    outputs = {}
    for name, spread in (("none", None), ("wide", 0.20), ("narrow", 0.01)):
        p = json.loads(json.dumps(profile))
        if spread is not None:
            p["extra"]["split_seconds"]["spread"] = {"even": {"batch": spread},
                                                     "balanced": {"batch": spread / 2}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(p))
        out = tmp_path / f"{name}-plan.json"
        assert main(["plan", "--profile", str(path), "--model", "resattnet3d-small",
                     "--batch", "8", "--out", str(out)]) == 0
        outputs[name] = (capsys.readouterr().err, json.loads(out.read_text()))
    err, plan = outputs["wide"]
    assert plan["split_sizes"] == {"batch": [7, 1]}
    assert err.startswith("note: the pick is predicted 2.") and "alone" in err
    assert "20%" in err and "--verify" in err and len(err.strip().splitlines()) == 1
    for name in ("none", "narrow"):
        assert "close" not in outputs[name][0] and "note: the pick" not in outputs[name][0]
        assert outputs[name][1]["split_sizes"] == plan["split_sizes"]
