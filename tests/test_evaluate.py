"""The accuracy protocol: metric formulas by hand, ceilings, fold checks, and one tiny run."""
import csv
import json
import math

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.data import fold_split, person_id, read_labels
from meshpar.evaluation import ceiling, metrics, protocol, report


def test_binary_metrics_match_hand_counts():
    # 3 positives (p 0.9, 0.4, 0.7), 4 negatives (p 0.2, 0.6, 0.1, 0.5)
    y = [1, 1, 1, 0, 0, 0, 0]
    p = [0.9, 0.4, 0.7, 0.2, 0.6, 0.1, 0.5]
    m = metrics.binary_metrics(y, p)
    # predicted 1: 0.9, 0.7, 0.6 (0.5 is not > 0.5): TP 2, FN 1, FP 1, TN 3
    assert m["accuracy"] == pytest.approx(5 / 7)
    assert m["sensitivity"] == pytest.approx(2 / 3)
    assert m["specificity"] == pytest.approx(3 / 4)
    assert m["balanced_accuracy"] == pytest.approx((2 / 3 + 3 / 4) / 2)
    # positive > negative pairs: 0.9 beats 4, 0.4 beats 2 (0.2, 0.1), 0.7 beats 4 -> 10 of 12
    assert m["auc"] == pytest.approx(10 / 12)
    assert m["n"] == 7


def test_auc_counts_ties_half_and_is_nan_without_both_classes():
    assert metrics.auc([1, 0], [0.5, 0.5]) == 0.5
    assert math.isnan(metrics.auc([1, 1], [0.2, 0.8]))
    m = metrics.binary_metrics([1, 1], [0.2, 0.8])
    assert math.isnan(m["specificity"]) and m["sensitivity"] == 0.5


def test_metrics_refuse_bad_input():
    with pytest.raises(ValueError, match="0 or 1"):
        metrics.binary_metrics([2, 0], [0.1, 0.2])
    with pytest.raises(ValueError, match="same length"):
        metrics.binary_metrics([1, 0], [0.1])
    with pytest.raises(ValueError, match="no predictions"):
        metrics.binary_metrics([], [])


def test_paired_comparison_by_hand():
    a, b = [0.80, 0.90, 0.70, 0.85], [0.82, 0.90, 0.74, 0.84]
    c = metrics.paired_comparison(a, b)
    d = np.array(b) - np.array(a)  # 0.02, 0, 0.04, -0.01
    assert c["mean_difference"] == pytest.approx(0.0125)
    assert c["std_difference"] == pytest.approx(float(np.std(d, ddof=1)))
    assert (c["wins"], c["ties"], c["losses"]) == (2, 1, 1)
    half = 3.182446 * c["std_difference"] / 2  # t(0.975, 3 dof) * s / sqrt(4)
    assert c["ci95"] == pytest.approx([0.0125 - half, 0.0125 + half], abs=1e-6)
    # s = sqrt(1.475e-3 / 3) = 0.022174, t = 0.0125 / (s / 2) = 1.1275; two-sided, 3 dof
    assert c["std_difference"] == pytest.approx(0.022174, abs=1e-6)
    assert c["p_value"] == pytest.approx(0.3416, abs=1e-3)
    same = metrics.paired_comparison([0.5, 0.6], [0.5, 0.6])
    assert same["mean_difference"] == 0 and math.isnan(same["p_value"])
    assert same["ci95"] == [0.0, 0.0]  # two equal differences: the t interval is a point


def test_one_paired_run_has_no_confidence_interval():
    """One run gives a t interval no degree of freedom: it was reported as the
    point ``+0.000..+0.000``, which reads as a certain zero difference."""
    one = metrics.paired_comparison([0.8], [0.75])
    assert one["mean_difference"] == pytest.approx(-0.05)
    assert one["ci95"] is None and math.isnan(one["p_value"])


def test_prediction_agreement_on_common_subjects():
    a = {"s1": 0.9, "s2": 0.45, "s3": 0.2}
    b = {"s1": 0.88, "s2": 0.55, "s4": 0.1}
    g = metrics.prediction_agreement(a, b)
    assert g["subjects"] == 2
    assert g["max_abs_p_difference"] == pytest.approx(0.10)
    assert g["label_agreement"] == 0.5


def test_logistic_ceiling_separates_a_separable_feature_and_not_noise():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 50)
    x = (y + rng.normal(0, 0.1, size=100))[:, None]
    model = ceiling.fit_logistic(x[::2], y[::2])
    assert ((ceiling.predict_logistic(model, x[1::2]) > 0.5) == y[1::2]).mean() == 1.0
    noise = rng.normal(size=(100, 1))
    model = ceiling.fit_logistic(noise[::2], y[::2])
    acc = ((ceiling.predict_logistic(model, noise[1::2]) > 0.5) == y[1::2]).mean()
    assert acc < 0.75


def _dataset_with_repeat_scans(tmp_path):
    """12 people, two scans each (same subject_id), written as phantoms."""
    from meshpar.data.phantoms import write_dataset

    root = tmp_path / "ds"
    write_dataset(root, 24, shape=(8, 8, 8), seed=3)
    rows = list(csv.DictReader(open(root / "labels.csv")))
    rows.sort(key=lambda r: r["label"])
    with open(root / "labels.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["subject", "label", "subject_id"])
        for i, r in enumerate(rows):
            out.writerow([r["subject"], r["label"], f"person{i // 2}"])
    return root


def test_fold_check_accepts_the_fold_and_refuses_anything_else(tmp_path):
    root = _dataset_with_repeat_scans(tmp_path)
    run = protocol.Run("ad-nc", ("NC", "AD"), 5, 4, 1, protocol.Config("one-device"), root,
                       tmp_path / "run")
    subjects = read_labels(root, ("NC", "AD"))
    rest, held = fold_split(subjects, 4, 1, seed=5)
    assert not {person_id(s) for s in rest} & {person_id(s) for s in held}
    key = lambda s: str(s.path.relative_to(root))  # noqa: E731
    train_keys = report.check_fold(run, [key(s) for s in held])
    assert sorted(train_keys) == sorted(key(s) for s in rest)
    with pytest.raises(ValueError, match="differ from fold 1"):
        report.check_fold(run, [key(s) for s in held[1:]])  # a scan missing
    with pytest.raises(ValueError, match="differ from fold 1"):
        report.check_fold(run, [key(s) for s in held] + [key(rest[0])])


def test_ceiling_on_phantom_ground_truth(tmp_path):
    from meshpar.data.phantoms import write_dataset

    write_dataset(tmp_path / "p", 24, shape=(8, 8, 8), seed=2)
    truth = ceiling.load_truth(tmp_path / "p")
    keys = sorted(truth)
    out = ceiling.ceiling_metrics(truth, keys[::2], keys[1::2], "AD")
    assert set(out) == set(ceiling.CEILINGS)
    assert out["disease_stage"]["accuracy"] >= 0.9  # NC (0) vs AD (1): far apart
    assert len(ceiling.ceiling_features(truth[keys[0]], "anatomy")) == 6
    with pytest.raises(ValueError, match="phantoms.json"):
        ceiling.load_truth(tmp_path)


def test_protocol_runs_a_tiny_configuration_and_never_mixes_a_person(tmp_path, capsys):
    """resattnet3d-tiny (16^3), 2 training steps, one device, seed 3, fold 0 of 3;
    every run's predictions are exactly its test fold and no person is on both sides."""
    out = tmp_path / "acc"
    args = ["evaluate", "--out", str(out), "--tasks", "smci-pmci", "--seeds", "3", "--n", "12",
            "--folds", "3", "--model", "resattnet3d-tiny", "--only", "one-device",
            "--train-args", "--steps 2 --batch 4 --val-fraction 0.2"]
    assert main(args) == 0
    result = json.loads((out / "accuracy.json").read_text())
    task = result["tasks"]["smci-pmci"]
    runs = task["configs"]["one-device"]["runs"]
    assert [r["seed"] for r in runs] == [3]
    assert task["configs"]["one-device"]["summary"]["accuracy"]["n"] == 1
    assert set(task["ceilings"]) == set(ceiling.CEILINGS)
    assert (out / "accuracy.png").stat().st_size > 0
    for seed in (3,):
        data = out / "data" / f"smci-pmci-seed{seed}"
        preds = list(csv.DictReader(open(out / "runs" / f"smci-pmci-seed{seed}-fold0"
                                         / "one-device" / "predictions.csv")))
        subjects = read_labels(data, ("sMCI", "pMCI"))
        rest, held = fold_split(subjects, 3, 0, seed=seed)
        assert sorted(r["subject_id"] for r in preds) == sorted(s.subject_id for s in held)
        assert not {s.subject_id for s in rest} & {r["subject_id"] for r in preds}
    # a second call resumes: nothing is trained again, same numbers, and it says so
    capsys.readouterr()
    assert main(args) == 0
    assert json.loads((out / "accuracy.json").read_text())["tasks"]["smci-pmci"]["configs"] == \
        task["configs"]
    assert "one-device: kept (trained and predicted by an earlier call" in \
        capsys.readouterr().out
    # ... also from a moved --out: predictions.csv names the data by the old path
    import shutil

    moved = tmp_path / "moved"
    shutil.move(str(out), str(moved))
    assert main(["evaluate", "--out", str(moved)] + args[3:]) == 0
    assert json.loads((moved / "accuracy.json").read_text())["tasks"]["smci-pmci"][
        "configs"] == task["configs"]
    shutil.move(str(moved), str(out))
    # ... but not under another protocol's name: other training arguments are refused
    capsys.readouterr()
    other = args[:-1] + ["--steps 3 --batch 4 --val-fraction 0.2"]
    assert main(other) == 2
    err = capsys.readouterr().err
    assert "trained with another command" in err and "use a new --out" in err
    assert len(err.strip().splitlines()) == 1


def test_summarize_pairs_configurations_by_seed_and_fold():
    def row(key, config, acc_p, p):
        y = [1, 0, 1, 0]
        return {"key": key, "seed": int(key[-7]), "fold": 0, "config": config,
                "metrics": metrics.binary_metrics(y, acc_p), "train": {}, "p": p}

    scored = [row("ad-nc-seed0-fold0", "one-device", [0.9, 0.1, 0.8, 0.3], {"a": 0.9}),
              row("ad-nc-seed0-fold0", "uneven-mesh", [0.9, 0.1, 0.8, 0.3], {"a": 0.9}),
              row("ad-nc-seed1-fold0", "one-device", [0.9, 0.6, 0.8, 0.3], {"a": 0.6}),
              row("ad-nc-seed1-fold0", "uneven-mesh", [0.9, 0.1, 0.8, 0.3], {"a": 0.4})]
    scored[3]["p_first_model"] = {"a": 0.6 + 1e-7}  # seed 1's one-device weights on the mesh
    s = report.summarize(scored, {"ad-nc": ("NC", "AD")}, ["one-device", "uneven-mesh"])
    paired = s["ad-nc"]["paired"]["uneven-mesh"]
    assert paired["accuracy"]["mean_difference"] == pytest.approx(0.125)  # (0 + 0.25) / 2
    assert paired["predictions"]["max_abs_p_difference"] == pytest.approx(0.2)
    assert paired["predictions"]["label_agreement"] == 0.5
    assert paired["same_weights"]["subjects"] == 1
    assert paired["same_weights"]["max_abs_p_difference"] == pytest.approx(1e-7)
    assert s["ad-nc"]["configs"]["one-device"]["summary"]["accuracy"]["mean"] == \
        pytest.approx(0.875)
    assert "uneven-mesh" in report.format_table(s)
    one = report.format_table(report.summarize(scored[:2], {"ad-nc": ("NC", "AD")},
                                               ["one-device", "uneven-mesh"]))
    # one run: its mean, no '+/- 0.000' spread and no '95% CI +0.000..+0.000' interval
    assert "+/-" not in one and "95% CI" not in one
    assert "(one paired run: no confidence interval)" in one
    assert "0.875 +/- 0.177" in report.format_table(s)  # two runs: mean and sample std


def test_evaluate_refuses_bad_options(capsys):
    assert main(["evaluate", "--out", "x", "--tasks", "ad-nc,bogus"]) == 2
    assert "unknown task" in capsys.readouterr().err
    assert main(["evaluate", "--out", "x", "--data", "nowhere", "--labels", "A,B"]) == 2
    assert main(["evaluate", "--out", "x", "--labels", "A,B"]) == 2
    assert main(["evaluate", "--out", "x", "--n", "6", "--folds", "5"]) == 2


def test_an_interrupted_cohort_is_written_again_and_a_foreign_directory_is_refused(tmp_path):
    labels, shape = ("NC", "AD"), (16, 16, 16)
    partial = tmp_path / "data" / "ad-nc-seed1.partial"
    partial.mkdir(parents=True)
    (partial / "half-written.nii.gz").write_bytes(b"cut off")
    directory = protocol.prepare_phantoms(tmp_path, "ad-nc", labels, 1, 8, shape)
    assert not partial.exists() and len(read_labels(directory, labels)) == 8
    assert protocol.prepare_phantoms(tmp_path, "ad-nc", labels, 1, 8, shape) == directory
    mine = tmp_path / "data" / "ad-nc-seed2"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        protocol.prepare_phantoms(tmp_path, "ad-nc", labels, 2, 8, shape)
    assert (mine / "notes.txt").read_text() == "keep me"


def _tree_bytes(directory):
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_cohorts_written_in_parallel_equal_those_written_one_at_a_time(tmp_path):
    cohorts = [("ad-nc", ("NC", "AD"), 1), ("smci-pmci", ("sMCI", "pMCI"), 1),
               ("ad-nc", ("NC", "AD"), 2)]
    serial = protocol.prepare_all_phantoms(tmp_path / "serial", cohorts, 6, (16, 16, 16))
    parallel = protocol.prepare_all_phantoms(tmp_path / "parallel", cohorts, 6, (16, 16, 16),
                                             jobs=2)
    assert sorted(serial) == sorted(parallel) == [("ad-nc", 1), ("ad-nc", 2), ("smci-pmci", 1)]
    for key in serial:
        assert parallel[key] == tmp_path / "parallel" / "data" / f"{key[0]}-seed{key[1]}"
        assert _tree_bytes(parallel[key]) == _tree_bytes(serial[key]), key
    assert _tree_bytes(serial[("ad-nc", 1)]) != _tree_bytes(serial[("ad-nc", 2)])
    # a worker's error reaches the caller (a foreign directory is refused, not overwritten)
    mine = tmp_path / "other" / "data" / "ad-nc-seed2"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        protocol.prepare_all_phantoms(tmp_path / "other", cohorts, 6, (16, 16, 16), jobs=2)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_an_interrupted_run_trains_from_the_start_not_from_its_checkpoint(tmp_path, monkeypatch):
    run = protocol.Run("ad-nc", ("NC", "AD"), 1, 5, 0, protocol.Config("one-device"),
                       tmp_path / "data", tmp_path / "runs" / "ad-nc-seed1-fold0" / "one-device")
    stale = run.model_dir / "model.ckpt-40.index"
    stale.parent.mkdir(parents=True)
    stale.write_text("left by a run cut off at step 40")
    seen = []

    def fake_call(cmd, log):
        seen.append((cmd[3], run.model_dir.exists()))
        if cmd[3] == "predict":
            run.predictions.write_text("subject,label,p\n")
        return '{"final_loss": 0.5}\n'

    monkeypatch.setattr(protocol, "_call", fake_call)
    assert protocol.execute(run, "resattnet3d-small")["final_loss"] == 0.5
    assert seen == [("train", False), ("predict", False)]  # trained with no checkpoint there
    assert "trained from the start" in (run.run_dir / "train.log").read_text()
    # A finished run is kept as it is: its model is not touched, nothing runs.
    run.model_dir.mkdir()
    seen.clear()
    assert protocol.execute(run, "resattnet3d-small")["final_loss"] == 0.5
    assert seen == [] and run.model_dir.exists()


def _load_pilots():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "pilots.py"
    spec = importlib.util.spec_from_file_location("pilots", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_accuracy(directory, runs):
    directory.mkdir()
    payload = {"tasks": {"smci-pmci": {"configs": {"one-device": {"runs": [
        {"seed": s, "fold": 0, "metrics": {"accuracy": a, "auc": a + 0.05}} for s, a in runs]}}}}}
    (directory / "accuracy.json").write_text(json.dumps(payload))
    return str(directory)


def test_pilots_are_paired_with_the_baseline_by_seed_and_fold(tmp_path, capsys):
    """``benchmarks/pilots.py``: a pilot's runs are matched to the baseline's by
    (seed, fold), whatever order they were written in; a run only one side holds
    is named and left out of both means and of the paired difference."""
    pilots = _load_pilots()
    base = _write_accuracy(tmp_path / "base", [(1, 0.80), (2, 0.70), (3, 0.90)])
    other = _write_accuracy(tmp_path / "other", [(4, 0.10), (2, 0.75), (1, 0.70)])
    out = tmp_path / "cmp.json"
    assert pilots.main([f"default={base}", f"wide={other}", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    wide = result["pilots"]["wide"]
    assert [r["seed"] for r in wide["runs"]] == [1, 2]
    assert wide["not_paired"] == [[3, 0], [4, 0]]
    assert wide["accuracy"]["mean"] == pytest.approx(0.725)
    paired = wide["paired_accuracy"]
    assert paired["mean_difference"] == pytest.approx(-0.025)   # (-0.10 + 0.05) / 2
    assert (paired["wins"], paired["ties"], paired["losses"]) == (1, 0, 1)
    assert "paired_accuracy" not in result["pilots"]["default"]
    assert "wide" in capsys.readouterr().out


def test_a_pilot_argument_without_a_name_is_refused():
    pilots = _load_pilots()
    with pytest.raises(SystemExit):
        pilots.main(["/tmp/somewhere"])
    with pytest.raises(SystemExit, match="must differ"):
        pilots.main(["a=/tmp/x", "a=/tmp/y"])


@pytest.mark.parametrize("code, exit_code", [(2, 2), (1, 1), (-9, 1)])
def test_a_failed_train_process_ends_evaluate_in_one_line(tmp_path, monkeypatch, capsys, code,
                                                          exit_code):
    """A run's ``meshpar train`` that refused its input (exit 2) is evaluate's bad input
    (exit 2); any other failure exits 1; one line naming the log either way."""
    def fake_call(cmd, log):
        raise protocol.CommandFailed(f"meshpar train failed (exit {code}): boom; see {log}",
                                     code)

    monkeypatch.setattr(protocol, "_call", fake_call)
    protocol.prepare_all_phantoms(tmp_path, [("ad-nc", ("NC", "AD"), 0)], 12, (16, 16, 16))
    data = tmp_path / "data" / "ad-nc-seed0"
    assert main(["evaluate", "--out", str(tmp_path / "out"), "--data", str(data),
                 "--labels", "NC,AD", "--seeds", "0", "--folds", "2",
                 "--model", "resattnet3d-tiny"]) == exit_code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshpar evaluate: error: meshpar train failed")
    assert "train.log" in err[0]


def test_a_finished_run_is_compared_without_the_paths_under_out():
    """The same run spelled from another working directory (or a moved --out) is
    the same run; another option is not."""
    from meshpar.evaluation import protocol

    a = ["train", "--data", "ev/data/x", "--steps", "2", "--model-dir", "ev/runs/x/model"]
    b = ["train", "--data", "/abs/ev/data/x", "--steps", "2", "--model-dir", "/abs/m"]
    assert protocol._without_paths(a) == protocol._without_paths(b) == ["train", "--steps", "2"]
    assert protocol._without_paths(a) != protocol._without_paths(a[:4] + ["3"] + a[5:])
