"""``meshpar train``: argument handling, speeds -> split weights, a tiny end-to-end run."""
import json
import shutil

import pytest

from meshpar.cli import main
from meshpar.cli.train import mesh_from_speeds


def test_speeds_on_one_axis_are_the_split_weights():
    assert mesh_from_speeds([0.9, 0.3]) == ("model:2", {"model": [0.9, 0.3]})


def test_speeds_on_a_2d_mesh_follow_the_planners_proportional_rule():
    # grid [[0.8, 0.4], [0.6, 0.2]]: columns get their slowest device's speed
    # (0.6, 0.2 -> 0.75, 0.25); row r finishes at 1 / max_m(w_m / s_rm):
    # row 0 at 1 / max(0.9375, 0.625), row 1 at 1 / max(1.25, 1.25).
    shape, weights = mesh_from_speeds([0.8, 0.4, 0.6, 0.2], "batch:2;model:2")
    assert shape == "batch:2;model:2"
    assert weights["model"] == pytest.approx([0.75, 0.25])
    rates = [1 / 0.9375, 1 / 1.25]
    assert weights["batch"] == pytest.approx([r / sum(rates) for r in rates])


def test_mesh_that_does_not_match_the_speeds_is_a_usage_error(capsys):
    rc = main(["train", "--synthetic", "--speeds", "0.9,0.3", "--mesh", "model:3"])
    assert rc == 2
    assert "3 processors" in capsys.readouterr().err


def test_bad_speed_is_a_usage_error(capsys):
    rc = main(["train", "--synthetic", "--speeds", "0.9,-1"])
    assert rc == 2
    assert "speed 1" in capsys.readouterr().err


def test_train_vgg_small_on_an_uneven_mesh_prints_a_metrics_table(capsys, tmp_path):
    rc = main(["train", "--synthetic", "--model", "vgg-cifar-small", "--speeds", "0.9,0.3",
               "--steps", "4", "--batch", "4", "--n-synthetic", "16", "--no-progress",
               "--model-dir", str(tmp_path / "run"), "--optimizer", "momentum"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "mesh model:2" in out and "eval accuracy" in out and "last loss" in out
    assert list((tmp_path / "run").glob("model.ckpt-4.index"))


def test_skip_bad_trains_on_the_good_subjects_and_counts_the_bad(tmp_path, capsys):
    import numpy as np

    from meshpar.cli import main
    from meshpar.data.phantoms import write_dataset
    from nifti_helpers import save_nifti

    data = tmp_path / "ds"
    write_dataset(data, 14, shape=(12, 12, 12), seed=1)
    volume = np.ones((12, 12, 12), np.float32)
    volume[3, 3, 3] = np.nan
    save_nifti(data / "subjects" / "nan.nii.gz", volume)
    with open(data / "labels.csv", "a", encoding="utf-8") as f:
        f.write("subjects/nan.nii.gz,AD\nsubjects/missing.nii.gz,NC\n")
    argv = ["train", "--data", str(data), "--model", "resattnet3d-tiny", "--steps", "2",
            "--batch", "2", "--no-progress", "--model-dir", str(tmp_path / "m")]
    assert main(argv) == 2
    assert "missing.nii.gz" in capsys.readouterr().err
    assert main(argv + ["--skip-bad", "--val-fraction", "0.0"]) == 0
    out, err = capsys.readouterr()
    assert "skipped subjects" in out and "missing.nii.gz" in err


def test_train_with_local_batch_norm_statistics_on_an_uneven_batch_split(capsys, tmp_path):
    """The registry's local-statistics variant trains through the CLI on a 3/1 batch
    split (the layer's values and gradients: test_local_batch_norm.py)."""
    rc = main(["train", "--synthetic", "--model", "resattnet3d-small-local-bn",
               "--speeds", "0.9,0.3", "--mesh", "batch:2", "--steps", "2", "--batch", "4",
               "--n-synthetic", "8", "--val-fraction", "0", "--no-progress", "--json",
               "--model-dir", str(tmp_path / "run")])
    assert rc == 0

    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["mesh_shape"] == "batch:2" and summary["steps"] == 2
    assert summary["model"] == "resattnet3d-small-local-bn"


def test_run_summary_counts_global_steps_and_says_when_steps_ran_again():
    from types import SimpleNamespace

    from meshpar.cli.train_report import run_summary

    spec = SimpleNamespace(name="m")
    mesh = SimpleNamespace(mesh_shape="batch:2", devices=["a", "b"], split_weights=None)
    speed = {"samples_per_second": None, "warmup_steps": 5}
    again, rows = run_summary(spec, mesh, [0.9, 0.8, 0.7, 0.8, 0.6], 3, 2.0, speed,
                              on_cluster=True)
    assert again["steps"] == 3 and again["step_runs"] == 5
    assert again["first_loss"] == 0.9 and again["last_loss"] == 0.6
    table = dict(rows)
    assert table["steps"].startswith("3 (5 step runs")
    assert "too few steps after 5 warm-up steps" in table["samples/s"]
    assert any(key == "cpu kernels (this process)" for key, _ in rows)
    once, rows = run_summary(spec, mesh, [0.9, 0.8, 0.7], 3, 2.0, speed, on_cluster=False)
    assert "step_runs" not in once and dict(rows)["steps"] == "3"


def test_a_model_dir_resumes_only_under_the_same_split_and_optimizer(capsys, tmp_path):
    """Resuming under another test fold, validation seed or optimizer is refused in one
    line before any step (the first trains on subjects the new split holds out, the
    last cannot load its slots); the same command resumes. Validation scores every
    validation sample, the padded last batch included, and the run says how many."""

    from meshpar.data import write_dataset

    data = tmp_path / "ds"
    write_dataset(data, 20, shape=(12, 12, 12), seed=1)

    def argv(steps, *change, data=data):
        return ["train", "--data", str(data), "--model", "resattnet3d-tiny", "--steps",
                str(steps), "--batch", "3", "--folds", "4", "--fold", "0", "--val-fraction",
                "0.3", "--no-progress", "--json", "--model-dir", str(tmp_path / "m"), *change]

    assert main(argv(1)) == 0
    out = capsys.readouterr().out
    first = json.loads(out.strip().splitlines()[-1])
    count = first["validation_samples"]
    assert count % 3 and first["eval_samples"] == count  # a partial last batch, scored
    for change, name in [(["--fold", "1"], "split"), (["--seed", "3"], "seed"),
                         (["--optimizer", "sgd"], "optimizer")]:
        assert main(argv(2, *change)) == 2, change
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"holds a run with another {name}" in err[0], err
    # more subjects in the data reshuffle the folds: refused like another split
    grown = tmp_path / "grown"
    write_dataset(grown, 24, shape=(12, 12, 12), seed=1)
    assert main(argv(2, data=grown)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "with other subjects (subjects: " in err[0], err
    moved = tmp_path / "moved"  # the same files elsewhere resume
    shutil.copytree(data, moved)
    assert main(argv(2, data=moved)) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 1


def test_a_run_file_from_before_the_split_was_recorded_still_resumes(tmp_path):
    from meshpar.training.run import RUN_FILE, save_run_info

    identity = {"model": "m", "model_overrides": {}, "labels": ["NC", "AD"],
                "input_shape": [8, 8, 8, 1], "channels": 1}
    (tmp_path / RUN_FILE).write_text(json.dumps(identity))
    save_run_info(str(tmp_path), dict(identity, split={"folds": 4, "fold": 1}, seed=2,
                                      val_fraction=0.2, optimizer="adam"))
    with pytest.raises(ValueError, match="another optimizer"):
        save_run_info(str(tmp_path), dict(identity, split={"folds": 4, "fold": 1}, seed=2,
                                          val_fraction=0.2, optimizer="sgd"))


def test_a_trace_goes_into_the_model_directory_the_run_creates(tmp_path, capsys):
    """--trace-out inside a --model-dir that does not exist yet is accepted (train
    makes the directory before the traced step) and holds a Chrome trace; a rerun
    with fewer --steps than the directory holds says it trains nothing and leaves the
    saved run's record (its schedule's total steps) as it was."""
    model_dir = tmp_path / "runs" / "new"
    trace = model_dir / "trace.json"
    (tmp_path / "runs").mkdir()
    assert main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "2",
                 "--batch", "2", "--n-synthetic", "12", "--no-progress", "--trace-step", "2",
                 "--trace-out", str(trace), "--model-dir", str(model_dir)]) == 0
    assert json.loads(trace.read_text())["traceEvents"]
    capsys.readouterr()
    recorded = (model_dir / "meshpar_run.json").read_text()
    assert json.loads(recorded)["recipe"]["total_steps"] == 2
    # the directory is past a smaller --steps: nothing trains, and the run says so
    assert main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "1",
                 "--batch", "2", "--n-synthetic", "12", "--no-progress",
                 "--model-dir", str(model_dir)]) == 0
    assert "is at step 2, not below --steps 1: nothing to train" in capsys.readouterr().err
    assert (model_dir / "meshpar_run.json").read_text() == recorded
    # a run that would train nothing is still refused a directory of another model
    assert main(["train", "--synthetic", "--model", "vgg-cifar-small", "--steps", "1",
                 "--batch", "2", "--n-synthetic", "12", "--no-progress",
                 "--model-dir", str(model_dir)]) == 2
    assert "holds a run with another model" in capsys.readouterr().err
    assert (model_dir / "meshpar_run.json").read_text() == recorded


def test_a_refused_resume_leaves_the_saved_run_file_as_it_was(capsys, tmp_path):
    """Recipe flags that building the step would refuse (a clip norm of 0, a focal
    exponent that is not finite, a warm-up longer than a cosine schedule) are refused
    before the run file is written: the model directory still describes its run."""
    model_dir = tmp_path / "m"
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "16",
            "--batch", "4", "--no-progress", "--model-dir", str(model_dir)]
    assert main(base + ["--steps", "2"]) == 0
    saved = (model_dir / "meshpar_run.json").read_text()
    for flags, message in [(["--clip-norm", "0"], "clip_norm must be finite and > 0"),
                           (["--loss", "focal", "--focal-gamma", "nan"],
                            "focal_gamma must be finite and >= 0, got nan"),
                           (["--lr-schedule", "cosine", "--lr-warmup-steps", "9"],
                            "must exceed the warm-up steps")]:
        capsys.readouterr()
        assert main(base + ["--steps", "4"] + flags) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert (model_dir / "meshpar_run.json").read_text() == saved


def test_resuming_with_more_steps_says_the_schedule_is_laid_out_again(capsys, tmp_path):
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "16",
            "--batch", "4", "--no-progress", "--model-dir", str(tmp_path / "m")]
    assert main(base + ["--steps", "2"]) == 0
    first = capsys.readouterr()
    assert "schedule now runs" not in first.err and "resuming from" not in first.out
    assert main(base + ["--steps", "4"]) == 0
    second = capsys.readouterr()
    err = second.err
    assert "schedule now runs over 4 steps" in err and "planned 2" in err
    # the second run on the directory says it goes on, from where
    assert f"resuming from the checkpoint at step 2 in {tmp_path / 'm'}: 2 more step(s)" \
        in second.out
    assert main(base + ["--steps", "4"]) == 0  # the same steps: nothing to say
    assert "schedule now runs" not in capsys.readouterr().err


def test_a_constant_rate_past_its_warm_ups_is_not_noted_and_a_new_batch_is(capsys, tmp_path):
    """A constant schedule resumed past both runs' warm-ups (1 and 2 steps of 10 and
    20) keeps its rate: no note. A resume with another --batch is accepted and said."""
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "16",
            "--no-progress", "--lr-schedule", "constant", "--model-dir", str(tmp_path / "m")]
    assert main(base + ["--steps", "10", "--batch", "4"]) == 0
    capsys.readouterr()
    assert main(base + ["--steps", "20", "--batch", "4"]) == 0
    err = capsys.readouterr().err
    assert "schedule now runs" not in err and "--batch" not in err
    assert main(base + ["--steps", "22", "--batch", "8"]) == 0
    err = capsys.readouterr().err
    assert "the run this resumes trained with --batch 4; from step 20 on it trains with " \
        "--batch 8, going on from example 80 of the data stream, where the old batch had " \
        "left it" in err


def test_split_weights_print_rounded_for_a_person():
    """The run's printed mesh line rounds the weights (the JSON keeps them whole)."""
    from meshpar.cli.train_report import format_weights

    assert format_weights({"batch": [27.0, 4.999999999999999], "model": [1.0425097781685597]}) \
        == "{batch: [27, 5], model: [1.043]}"
    assert format_weights({}) == "even" and format_weights(None) == "even"


def test_a_nan_validation_loss_is_never_kept_over_a_number_nor_keeps_one_out(tmp_path):
    """``x < nan`` is False: a NaN kept first was never replaced by a later, finite loss."""
    from meshpar.training.run import best_record, keep_if_best

    for step in (1, 2, 3, 4):
        (tmp_path / f"model.ckpt-{step}.index").write_text("x")
    assert keep_if_best(str(tmp_path), 1, float("nan"))
    assert keep_if_best(str(tmp_path), 2, 0.5)  # a number beats the kept NaN
    assert not keep_if_best(str(tmp_path), 3, float("nan"))  # NaN beats nothing
    assert keep_if_best(str(tmp_path), 4, 0.25)
    assert best_record(str(tmp_path))["step"] == 4
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["best.json",
                                                                   "model.ckpt-4.index"]


def test_a_resume_with_another_recipe_says_so(capsys, tmp_path):
    """A resumed run may change its loss, weight decay, learning rate or augmentation
    (as its batch and schedule, which have notes of their own), but it said nothing and
    the run file was rewritten to the new recipe as if every step had trained with it;
    the learning rate was not recorded at all."""
    model_dir = tmp_path / "m"
    base = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "8",
            "--batch", "2", "--val-fraction", "0", "--no-progress", "--model-dir",
            str(model_dir), "--lr-schedule", "constant"]
    assert main(base + ["--steps", "1"]) == 0
    assert json.loads((model_dir / "meshpar_run.json").read_text())["lr"] == 1e-3
    capsys.readouterr()
    assert main(base + ["--steps", "2", "--weight-decay", "0", "--augment", "none",
                        "--lr", "0.01"]) == 0
    err = capsys.readouterr().err
    assert ("meshpar train: note: the run this resumes trained with augment=['flip'], "
            "lr=0.001, weight_decay=0.001; from step 1 on it trains with augment=[], "
            "lr=0.01, weight_decay=0.0") in err, err
    assert main(base + ["--steps", "3", "--weight-decay", "0", "--augment", "none",
                        "--lr", "0.01"]) == 0
    assert "resumes trained with" not in capsys.readouterr().err  # the same recipe again


def test_a_refused_resume_writes_no_phantoms_first(capsys, tmp_path, monkeypatch):
    """A resume refused for what the run file records of the flags (another optimizer,
    seed, model, split) is refused before --synthetic writes its phantoms (400 by
    default: seconds to minutes); only the subjects need the data."""
    import meshpar.data

    model_dir = tmp_path / "m"
    base = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "8",
            "--batch", "2", "--steps", "1", "--no-progress", "--model-dir", str(model_dir)]
    assert main(base) == 0
    capsys.readouterr()

    def no_phantoms(*args, **kwargs):
        raise AssertionError("phantoms written before the resume was refused")

    monkeypatch.setattr(meshpar.data, "write_dataset", no_phantoms)
    for flags, field in [(["--optimizer", "sgd"], "another optimizer"),
                         (["--seed", "3"], "another seed"),
                         (["--val-fraction", "0.5"], "another val_fraction")]:
        assert main(base + flags) == 2, flags
        assert f"holds a run with {field}" in capsys.readouterr().err


def test_a_plan_that_does_not_fit_in_memory_is_noted(tmp_path, capsys):
    """The Python planner returns the plan that overflows least when none fits
    (``feasible`` false; the CLI's plan refuses to write one): training from it
    says so rather than starting in silence."""
    import dataclasses

    from meshpar.cli import build_parser
    from meshpar.cli.train_options import mesh_arguments
    from meshpar.models import describe_model, get
    from meshpar.planning.planners import plan

    fits = plan(describe_model("vgg-cifar-small"), [0.9, 0.3], 4, method="proportional")
    for feasible, noted in ((True, False), (False, True)):
        path = tmp_path / f"plan-{feasible}.json"
        dataclasses.replace(fits, feasible=feasible).save(path)
        args = build_parser().parse_args(["train", "--synthetic", "--model", "vgg-cifar-small",
                                          "--plan", str(path)])
        assert mesh_arguments(args, get("vgg-cifar-small"))["plan"].feasible == feasible
        err = capsys.readouterr().err
        assert ('"feasible": false' in err) == noted, err


def test_the_best_checkpoint_is_kept_and_found_in_a_directory_whose_name_is_a_pattern(tmp_path):
    """``keep_if_best`` and ``best_checkpoint`` (library functions: the CLI refuses such
    directories before training) looked the checkpoint files up with ``glob`` on the
    directory's name, so in ``run[1]`` no checkpoint was found to keep, the replaced best
    copy stayed beside the new one, and the kept one was not found."""
    from meshpar.training.run import best_checkpoint, keep_if_best

    model_dir = tmp_path / "run[1]"
    model_dir.mkdir()
    for step in (1, 2):
        (model_dir / f"model.ckpt-{step}.index").write_text("x")
        (model_dir / f"model.ckpt-{step}.data-00000-of-00001").write_text("x")
    assert keep_if_best(str(model_dir), 1, 0.5)
    assert best_checkpoint(str(model_dir)) == str(model_dir / "best" / "model.ckpt-1")
    assert keep_if_best(str(model_dir), 2, 0.25)
    assert sorted(p.name for p in (model_dir / "best").iterdir()) == [
        "best.json", "model.ckpt-2.data-00000-of-00001", "model.ckpt-2.index"]
    assert best_checkpoint(str(model_dir)) == str(model_dir / "best" / "model.ckpt-2")
