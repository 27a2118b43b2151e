"""Every worker alone, all at once (the busy host's ideal): the step counts that make
the runs overlap, the overlap measure, the rounds that run it, its table line."""
import pytest

from meshpar.bench import together
from meshpar.bench import train as bench_train


def test_each_worker_trains_about_as_long_as_the_slowest():
    # 3:1 rates: the slow worker runs the steps, the fast one 3x them and the margin
    assert together.together_steps(30, [180.0, 60.0]) == [117, 30]
    assert together.together_steps(30, [60.0, 180.0], margin=1.0) == [30, 90]
    # three workers, listed in any order; equal rates: every one the slowest
    assert together.together_steps(10, [2.0, 1.0, 4.0], margin=1.0) == [20, 10, 40]
    assert together.together_steps(8, [5.0, 5.0]) == [8, 8]
    with pytest.raises(ValueError, match="alone rates must be > 0"):
        together.together_steps(8, [5.0, 0.0])


def test_overlap_is_the_part_of_each_window_the_others_cover():
    assert together.overlap([[0.0, 10.0], [2.0, 6.0]]) == pytest.approx([0.4, 1.0])
    assert together.overlap([[0.0, 4.0], [2.0, 10.0]]) == pytest.approx([0.5, 0.25])
    assert together.overlap([[0.0, 1.0], [2.0, 3.0]]) == [0.0, 0.0]  # never at once
    # three: what all the others cover at the same time
    assert together.overlap([[0.0, 10.0], [0.0, 5.0], [4.0, 10.0]]) == pytest.approx(
        [0.1, 0.2, 1 / 6])
    assert together.overlap([[3.0, 7.0]]) == [1.0]
    with pytest.raises(ValueError, match="window 1 must end after it starts"):
        together.overlap([[0.0, 1.0], [2.0, 2.0]])


def test_the_rows_sum_and_the_median_round():
    runs = [together._combined([{"samples_per_second": a, "steady_window_unix": [0, 10]},
                                {"samples_per_second": b, "steady_window_unix": [1, 9]}],
                               [12, 4])
            for a, b in ((150.0, 50.0), (170.0, 55.0), (160.0, 52.0))]
    assert runs[0]["samples_per_second"] == 200.0 and runs[0]["overlap"] == [0.8, 1.0]
    block = together.together_block(runs, ideal=250.0)
    assert block["samples_per_second"] == 212.0 and block["per_worker"] == [160.0, 52.0]
    assert block["of_ideal"] == pytest.approx(212.0 / 250.0)
    assert block["samples_per_second_min_max"] == [200.0, 225.0]
    line = together.format_line(block)
    assert "212.00 = 160.00 + 52.00 samples/s, 0.85 of the ideal" in line
    assert "overlapping 0.80/1.00" in line and "runs 200.0-225.0" in line
    skipped = together.together_block({"skipped": "worker 1 failed"}, ideal=250.0)
    assert "skipped: worker 1 failed" in together.format_line(skipped)
    with pytest.raises(RuntimeError, match="too few steady steps"):
        together._combined([{"samples_per_second": None}], [8])


def test_the_rounds_run_the_workers_together_in_their_place_each_round(monkeypatch):
    calls = []

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        calls.append((name, run))
        return {"samples_per_second": 1.0}

    def fake_together(r):
        calls.append(("together", r))
        return {"samples_per_second": 2.0}

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    runs, plans = {}, {name: (None, False) for name in ("alone-0", "alone-1", "planner")}
    bench_train._run_rounds("m", plans, ["alone-0", "alone-1", together.TOGETHER, "planner"],
                            runs, 2, "f", "w", 8, 4, 0, log=lambda *a: None,
                            others={together.TOGETHER: fake_together})
    assert calls == [("alone-0", 0), ("alone-1", 0), ("together", 0), ("planner", 0),
                     ("alone-0", 1), ("alone-1", 1), ("together", 1), ("planner", 1)]
    assert runs[together.TOGETHER] == [{"samples_per_second": 2.0}] * 2
    assert together.TOGETHER not in plans  # not a plan: no row among the strategies


def test_a_failed_run_names_the_worker(tmp_path, monkeypatch):
    """A worker's process that fails is named in one line (real processes, fake commands)."""
    import sys

    class FakePlan:
        def save(self, path):
            open(path, "w").write("{}")

    def argv(model, cluster_file, plan_file, steps, batch, trace_step, model_dir, upstream,
             seed):
        code = ("import sys; sys.stderr.write('boom on purpose\\n'); sys.exit(1)"
                if plan_file.endswith("-1.plan.json") else
                "print('{\"samples_per_second\": 3.0, \"steady_window_unix\": [0, 1]}')")
        return [sys.executable, "-c", code]

    monkeypatch.setattr(together, "train_argv", argv)
    with pytest.raises(RuntimeError, match=r"worker 1 alone \(all at once\): boom on purpose"):
        together.run_together("m", [FakePlan(), FakePlan()], "c.json", str(tmp_path), [8, 8], 4,
                              log=lambda *a: None)
