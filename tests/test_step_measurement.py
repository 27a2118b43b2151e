"""Steady-state throughput and the traced step's per-worker breakdown (formulas and
structure; speed itself is measured in benchmarks, never asserted here)."""
from types import SimpleNamespace as NS

import pytest

from meshpar.runtime.step_trace import merged_length, step_breakdown, task_of
from meshpar.training.throughput import default_warmup, steady_state


def test_steady_state_leaves_out_the_warmup_and_uses_the_median_step():
    # ends of steps 1..7: step 2 is slow (first run after start-up), step 7 also
    # writes a checkpoint
    ends = [0.0, 9.0, 9.1, 9.3, 9.4, 9.5, 10.5]
    s = steady_state(ends, batch=8, warmup=2)
    assert s["steady_steps"] == 5 and s["warmup_steps"] == 2
    assert s["step_seconds_median"] == pytest.approx(0.1)  # the outlier does not move it
    assert s["samples_per_second"] == pytest.approx(80.0)
    assert s["samples_per_second_mean"] == pytest.approx(8 * 5 / 1.5)
    lo, hi = s["samples_per_second_p25_p75"]
    assert lo <= s["samples_per_second"] <= hi
    # the steady steps run from the end of the last warm-up step to the end of the run
    assert s["steady_window"] == [9.0, 10.5]


def test_a_traced_step_is_left_out_of_the_steady_rates():
    """``train --trace-step N`` inside the steady steps counted the traced step (every
    op's stats collected: 1.5-2x a step) in the mean and the spread; now left out."""
    # steps 1..8 end at these times; step 6 is the traced one (0.5 s against 0.1 s)
    ends = [0.0, 5.0, 5.1, 5.2, 5.3, 5.8, 5.9, 6.0]
    s = steady_state(ends, batch=8, warmup=2, leave_out=(6,))
    assert s["steady_steps"] == 5  # steps 3, 4, 5, 7, 8
    assert s["samples_per_second_mean"] == pytest.approx(80.0)
    assert s["samples_per_second_p25_p75"] == pytest.approx([80.0, 80.0])
    assert s["steady_window"] == [5.0, 6.0]  # the steps' span is unchanged
    kept = steady_state(ends, batch=8, warmup=2)
    assert kept["steady_steps"] == 6 and kept["samples_per_second_mean"] < 70
    # a step in the warm-up, or past the run, leaves nothing more out
    assert steady_state(ends, 8, 2, leave_out=(2, 40))["steady_steps"] == 6


def test_train_leaves_its_traced_step_out_of_samples_per_second(capsys):
    """Through the CLI: ``--trace-step`` inside the steady window reports one steady
    step fewer than the same run without it."""
    import json

    from meshpar.cli import main

    args = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "8",
            "--batch", "2", "--steps", "8", "--warmup-steps", "2", "--no-progress", "--json"]
    counts = []
    for extra in ([], ["--trace-step", "5"]):
        assert main(args + extra) == 0
        counts.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1])
                      ["steady_steps"])
    assert counts == [6, 5]


def test_too_short_a_run_reports_no_rate_instead_of_a_wrong_one():
    s = steady_state([0.0, 1.0, 2.0], batch=4, warmup=2)
    assert s["samples_per_second"] is None and s["steady_steps"] == 1
    assert s["steady_window"] is None


def test_default_warmup_is_a_tenth_of_the_run_but_at_least_three_steps():
    assert default_warmup(200) == 20
    assert default_warmup(12) == 3
    assert default_warmup(4) == 2  # leaves two steps to time


def test_merged_length_counts_overlaps_once():
    assert merged_length([]) == 0
    assert merged_length([(0, 4), (2, 6), (8, 9)]) == pytest.approx(7)
    assert merged_length([(0, 10), (2, 3)]) == pytest.approx(10)


def _node(name, start_us, dur_us, label=""):
    return NS(node_name=name, timeline_label=label, all_start_micros=start_us,
              all_end_rel_micros=dur_us)


def test_breakdown_splits_each_task_into_compute_communication_and_idle():
    stats = NS(dev_stats=[
        NS(device="/job:worker/replica:0/task:0/device:CPU:0", node_stats=[
            _node("conv", 0, 40_000), _node("bn", 30_000, 20_000),       # compute 0-50 ms
            _node("recv_x", 50_000, 30_000, "_Recv: from task 1")]),      # waiting 50-80 ms
        NS(device="/job:worker/replica:0/task:1/device:CPU:0", node_stats=[
            _node("conv", 0, 90_000)]),
        NS(device="/job:client/replica:0/task:0/device:CPU:0", node_stats=[
            _node("IteratorGetNext", 0, 5_000)]),
    ])
    b = step_breakdown(stats, wall_seconds=0.1)
    assert b["worker:0"] == pytest.approx({"compute": 0.05, "communication": 0.03, "idle": 0.02})
    assert b["worker:1"] == pytest.approx({"compute": 0.09, "communication": 0.0, "idle": 0.01})
    assert b["client:0"]["compute"] == pytest.approx(0.005)


def test_task_names_come_from_device_strings():
    assert task_of("/job:worker/replica:0/task:3/device:GPU:0") == "worker:3"
    assert task_of("/device:CPU:0") == "local"
