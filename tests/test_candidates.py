"""The plans worth timing (meshpar.planning.planners.candidates) and the bench's
"verified" row that times them (structure and selection; no speed asserted)."""
import pytest

from meshpar.bench import train as bench_train
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.plan import Plan
from meshpar.planning.planners import plan
from meshpar.planning.planners.candidates import batch_neighbours, candidate_plans, same_plan
from meshpar.planning.planners.common import build_plan


@pytest.mark.parametrize("model,speeds,batch", [("resattnet3d-small", [0.9, 0.3], 32),
                                                ("vgg-cifar-small", [0.3, 1.0, 0.6], 12)])
def test_candidates_are_distinct_sorted_and_led_by_the_planner(model, speeds, batch):
    description = describe_model(model)
    cluster = ClusterSpec.from_speeds(speeds)
    got = candidate_plans(description, cluster, batch, 5, seed=3)
    assert 2 <= len(got) <= 5
    for i, a in enumerate(got):
        assert not any(same_plan(a, b) for b in got[i + 1:])
    keys = [(not p.feasible, p.predicted_step_seconds) for p in got]
    assert keys == sorted(keys)
    pick = plan(description, cluster, batch, seed=3, subsets=True)
    # the planner's own pick is a candidate, and none is predicted slower than it ahead of it
    assert any(same_plan(pick, p) for p in got)
    assert got[0].predicted_step_seconds <= pick.predicted_step_seconds
    assert len(candidate_plans(description, cluster, batch, 1, seed=3)) == 1
    with pytest.raises(ValueError, match="count must be >= 1"):
        candidate_plans(description, cluster, batch, 0)


def test_batch_neighbours_move_one_sample_between_rows_and_are_priced_alike():
    description = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([0.9, 0.3, 0.5])
    cost = CostModel(description, cluster, 8)
    # rows on devices 2, 0, 1 (a permuted placement) with 3/3/2 samples
    base = build_plan("ga", cost, 3, 1, [2, 0, 1], [3.0, 3.0, 2.0], [1.0])
    got = batch_neighbours(base, description, cluster)
    sizes = sorted(tuple(p.split_sizes[description.batch_dim]) for p in got)
    assert sizes == sorted([(4, 2, 2), (4, 3, 1), (2, 4, 2), (3, 4, 1), (2, 3, 3), (3, 2, 3)])
    for p in got:
        assert p.devices == base.devices and p.mesh_shape == base.mesh_shape
        direct = build_plan("x", cost, 3, 1, [2, 0, 1],
                            [float(s) for s in p.split_sizes[description.batch_dim]], [1.0])
        assert p.predicted_step_seconds == pytest.approx(direct.predicted_step_seconds)
    # a row holding one sample gives none away; one row has no neighbours
    thin = build_plan("ga", cost, 3, 1, [0, 1, 2], [6.0, 1.0, 1.0], [1.0])
    assert all(min(p.split_sizes[description.batch_dim]) >= 1
               for p in batch_neighbours(thin, description, cluster))
    assert len(batch_neighbours(thin, description, cluster)) == 2  # 6 -> either 1
    single = build_plan("ga", cost, 1, 3, [0, 1, 2], [1.0], [0.9, 0.3, 0.5])
    assert batch_neighbours(single, description, cluster) == []


def test_verified_plan_picks_the_fastest_median_of_trials_taken_in_turns():
    profile = ClusterSpec.from_speeds([0.9, 0.3])
    candidates = candidate_plans(describe_model("resattnet3d-small"), profile, 32, 3)
    assert len(candidates) == 3
    # candidate 0 has the best single trial, candidate 1 the best median of three
    rates = {0: [150.0, 90.0, 95.0], 1: [120.0, 125.0, 118.0], 2: [140.0]}
    calls = []

    def trial(p, i, r):
        calls.append((i, r))
        if i == 2 and r == 1:
            raise RuntimeError("meshpar train failed: worker 1 ran out of memory")
        return {"samples_per_second": rates[i][r]}

    (picked, upstream), info = bench_train.verified_plan(
        "resattnet3d-small", profile, 32, 3, 0, bench_train.MEASURED, trial,
        log=lambda *a: None, rounds=3)
    # in turns, round after round; a candidate that failed is not tried again
    assert calls == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 2), (1, 2)]
    assert upstream is False and info["rounds"] == 3
    assert same_plan(picked, candidates[1]) and info["picked"] == 1
    tried = info["candidates"]
    assert [c.get("trial_samples_per_second") for c in tried] == [95.0, 120.0, None]
    assert tried[0]["trial_samples_per_second_runs"] == [150.0, 90.0, 95.0]
    assert "out of memory" in tried[2]["skipped"]
    assert "trial_samples_per_second_runs" not in tried[2]  # its one good trial does not count
    assert tried[1]["split_sizes"] == {k: list(v) for k, v in candidates[1].split_sizes.items()}

    def failing(p, i, r):
        raise RuntimeError("no")

    none, info = bench_train.verified_plan("resattnet3d-small", profile, 32, 2, 0,
                                           bench_train.MEASURED, failing, log=lambda *a: None)
    assert none is None and info["picked"] is None
    with pytest.raises(ValueError, match="verify rounds must be >= 1"):
        bench_train.verified_plan("resattnet3d-small", profile, 32, 2, 0, bench_train.MEASURED,
                                  trial, log=lambda *a: None, rounds=0)


def test_bench_train_cli_default_verify_rounds_is_the_library_default(monkeypatch):
    from meshpar.cli import main

    seen = {}
    monkeypatch.setattr(bench_train, "run_benchmark", lambda *a, **kw: seen.update(kw) or {})
    monkeypatch.setattr(bench_train, "format_table", lambda result: "")
    assert main(["bench", "train", "--verify", "2"]) == 0
    assert seen["verify_rounds"] == bench_train.VERIFY_ROUNDS


def test_the_verified_row_runs_in_the_rounds_after_its_trials(monkeypatch):
    ran = []

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        ran.append((name, run))
        rate = 10.0 + batch_rows(plan)  # a made-up rate that tells plans apart
        return {"samples_per_second": rate, "step_seconds_median": batch / rate,
                "samples_per_second_p25_p75": [rate, rate], "trace_step_seconds": 1.0}

    def batch_rows(p):
        return dict(p.mesh_shape)["batch"]

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    result = bench_train.bench_model("resattnet3d-small", ClusterSpec.from_speeds([0.9, 0.3]),
                                     "f", "w", 8, 32, 0, log=lambda *a: None, rounds=2,
                                     verify=2, verify_rounds=2, run_together=False)
    names = [n for n, _ in ran]
    trials = [(n, r) for n, r in ran if n.startswith("trial-")]
    assert trials == [("trial-0", 0), ("trial-1", 0), ("trial-0", 1), ("trial-1", 1)]
    # the trials run after the alone rows and before the rounds; the row runs in each round
    assert names.index("trial-1") < names.index("planner")
    assert [r for n, r in ran if n == "verified"] == [0, 1]
    rows = result["strategies"]
    assert "verified" in rows and rows["verified"]["runs"] == 2
    info = result["verification"]
    assert len(info["candidates"]) == 2 and info["picked"] in (0, 1)
    no_verify = bench_train.bench_model("resattnet3d-small",
                                        ClusterSpec.from_speeds([0.9, 0.3]), "f", "w", 8, 32, 0,
                                        log=lambda *a: None, run_together=False)
    assert "verified" not in no_verify["strategies"] and "verification" not in no_verify


def test_plans_listing_rows_or_columns_in_another_order_are_the_same_plan():
    """24/8 over tasks 0, 1 and 8/24 over tasks 1, 0 give each task the same work (the
    bench showed them as two plans, 289.3 and 289.4 samples/s); a different share, or
    other devices sharing a row, is another plan."""
    def batch_plan(devices, sizes):
        return Plan(method="x", model="m", batch=32, mesh_shape=(("batch", 2), ("model", 1)),
                    layout=(("batch", "batch"),), devices=tuple(devices),
                    split_weights={"batch": [float(s) for s in sizes]},
                    split_sizes={"batch": list(sizes)})

    a, b = batch_plan(["w0", "w1"], [24, 8]), batch_plan(["w1", "w0"], [8, 24])
    assert same_plan(a, b) and same_plan(b, a)
    assert not same_plan(a, batch_plan(["w0", "w1"], [8, 24]))
    assert not same_plan(a, batch_plan(["w0", "w1"], [25, 7]))

    def grid(devices, rows, filters):  # batch:2;model:2, conv filters on the model axis
        return Plan(method="x", model="m", batch=8, mesh_shape=(("batch", 2), ("model", 2)),
                    layout=(("batch", "batch"), ("f", "model")), devices=tuple(devices),
                    split_weights={"batch": [float(r) for r in rows],
                                   "model": [float(f) for f in filters]},
                    split_sizes={"batch": list(rows), "f": list(filters)})

    base = grid(["a", "b", "c", "d"], [5, 3], [6, 2])
    rows_swapped = grid(["c", "d", "a", "b"], [3, 5], [6, 2])
    cols_swapped = grid(["b", "a", "d", "c"], [5, 3], [2, 6])
    assert same_plan(base, rows_swapped) and same_plan(base, cols_swapped)
    other_rows = grid(["a", "c", "b", "d"], [5, 3], [6, 2])  # a shares its row with c now
    assert not same_plan(base, other_rows)
