"""``meshpar train`` with a k-fold test split and --keep-best, then ``meshpar predict``:
the test fold is never trained on, the test metrics match the CSV, prediction on an
uneven mesh equals one device, TensorBoard gets the training summaries."""
import csv
import json

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.data import person_folds, read_labels, write_dataset
from meshpar.training.metrics import classification_metrics

TRAIN = ["--model", "resattnet3d-tiny", "--steps", "4", "--batch", "4", "--no-progress",
         "--val-fraction", "0.3", "--folds", "4", "--fold", "1", "--keep-best",
         "--checkpoint-every", "2", "--worker-times-every", "2", "--json",
         # the recipe flags reach the estimator (their effect: tests/test_recipe.py)
         "--lr-schedule", "cosine", "--lr-warmup-steps", "2", "--weight-decay", "1e-4",
         "--clip-norm", "5", "--loss", "weighted_cross_entropy", "--augment"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    data = root / "ds"
    write_dataset(data, 20, shape=(16, 16, 16), seed=3)
    model_dir = root / "model"
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["train", "--data", str(data), "--model-dir", str(model_dir)] + TRAIN)
    text = out.getvalue()
    assert rc == 0, text
    return data, model_dir, json.loads(text.strip().splitlines()[-1]), text


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_test_fold_is_held_out_and_scored(trained):
    data, model_dir, summary, text = trained
    fold = person_folds(read_labels(data, ("NC", "AD")), 4, seed=0)[1]
    assert summary["test"]["n"] == len(fold)
    # conftest turns oneDNN on for every test process, as importing meshpar does for users
    assert summary["onednn"] is True and "oneDNN" in text
    assert f"/ {len(fold)} test subjects" in text and "test balanced_accuracy" in text
    run = json.loads((model_dir / "meshpar_run.json").read_text())
    assert run["split"] == {"folds": 4, "fold": 1, "fold_seed": 0, "test_fraction": None}
    assert run["model"] == "resattnet3d-tiny" and run["labels"] == ["NC", "AD"]
    assert run["augment"] == ["flip", "affine"]
    assert run["recipe"]["lr_schedule"] == "cosine" and run["recipe"]["weight_decay"] == 1e-4
    counts = [sum(s.label == c for s in read_labels(data, ("NC", "AD")) if s not in fold)
              for c in ("NC", "AD")]
    assert len(run["recipe"]["class_weights"]) == 2 and all(c > 0 for c in counts)


def test_keep_best_keeps_the_lowest_validation_loss(trained):
    _, model_dir, summary, _ = trained
    steps, losses = zip(*summary["val_losses"])
    assert list(steps) == [2, 4]
    assert summary["best"]["step"] == steps[int(np.argmin(losses))]
    assert summary["test"]["checkpoint"] == f"model.ckpt-{summary['best']['step']}"
    assert list((model_dir / "best").glob(f"model.ckpt-{summary['best']['step']}.index"))


def test_predict_matches_the_test_metrics_and_an_uneven_mesh_matches_one_device(trained,
                                                                               tmp_path):
    data, model_dir, summary, _ = trained
    common = ["predict", "--model-dir", str(model_dir), "--data", str(data), "--folds", "4",
              "--fold", "1", "--checkpoint", "best"]
    assert main(common + ["--out", str(tmp_path / "one.csv")]) == 0
    assert main(common + ["--out", str(tmp_path / "uneven.csv"), "--speeds", "0.9,0.3,0.6,0.2",
                          "--mesh", "batch:2;model:2", "--batch", "2"]) == 0
    one, uneven = _read(tmp_path / "one.csv"), _read(tmp_path / "uneven.csv")
    assert list(one[0]) == ["path", "subject_id", "label", "group", "p_NC", "p_AD", "predicted"]
    assert [r["path"] for r in one] == [r["path"] for r in uneven]
    p_one = np.array([[float(r["p_NC"]), float(r["p_AD"])] for r in one])
    p_uneven = np.array([[float(r["p_NC"]), float(r["p_AD"])] for r in uneven])
    np.testing.assert_allclose(p_uneven, p_one, atol=2e-6)
    labels = [["NC", "AD"].index(r["label"]) for r in one]
    again = classification_metrics(labels, p_one)
    for key in ("accuracy", "balanced_accuracy", "auc", "loss"):
        assert again[key] == pytest.approx(summary["test"][key], abs=1e-5), key


def test_training_writes_loss_accuracy_learning_rate_and_worker_step_times(trained):
    from meshpar.training.schedules import learning_rate
    from meshpar.training.summaries import read_scalars

    _, model_dir, _, _ = trained
    tags = read_scalars(str(model_dir))
    for tag in ("loss", "accuracy", "learning_rate", "step_time"):
        assert tag in tags, sorted(tags)
    # cosine with 2 warm-up steps over 4: 0.5e-3, 1e-3, 1e-3, 0.5e-3; a summary's step is
    # read in the same session run as its increment, so it names step t or t + 1
    for step, value in tags["learning_rate"]:
        rates = [learning_rate("cosine", 1e-3, t, warmup_steps=2, total_steps=4)
                 for t in (step - 1, step) if 0 <= t < 4]
        assert any(value == pytest.approx(r, rel=1e-6) for r in rates), (step, value)
    assert tags["learning_rate"][0][1] == pytest.approx(0.5e-3)
    workers = [t for t in tags if t.startswith("worker_step_time/")]  # one task: this process
    assert len(workers) == 1, sorted(tags)
    assert all(0 < v <= wall for (_, v), (_, wall) in zip(tags[workers[0]], tags["step_time"]))


def test_predict_needs_a_run_file_and_keeps_an_existing_csv(trained, tmp_path, capsys):
    data, model_dir, _, _ = trained
    rc = main(["predict", "--model-dir", str(tmp_path), "--data", str(data),
               "--out", str(tmp_path / "p.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "meshpar_run.json not found" in err and len(err.strip().splitlines()) == 1
    saved = tmp_path / "mine.csv"
    saved.write_text("keep me\n")
    rc = main(["predict", "--model-dir", str(model_dir), "--data", str(data), "--out", str(saved)])
    assert rc == 2 and "--force" in capsys.readouterr().err
    assert saved.read_text() == "keep me\n"


def test_a_batch_below_the_mesh_batch_axis_is_one_line_before_anything_is_written(
        trained, tmp_path, capsys):
    """Each row of the batch axis takes a sample of every batch: a smaller --batch (or
    training batch, predict's default) is refused naming where it came from, not with
    Mesh-TF's 'mtf op import ... cannot be split' after the graph is built."""
    data, model_dir, summary, _ = trained
    train_batch = json.loads((model_dir / "meshpar_run.json").read_text())["batch"]
    rows = train_batch + 1
    out = tmp_path / "p.csv"
    mesh = ["--speeds", ",".join(["1"] * rows), "--mesh", f"batch:{rows}"]
    rc = main(["predict", "--model-dir", str(model_dir), "--data", str(data), "--out", str(out),
               "--batch", "1"] + mesh)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--batch 1 is smaller than the mesh's batch axis (batch:{rows})" in err
    rc = main(["predict", "--model-dir", str(model_dir), "--data", str(data), "--out", str(out)]
              + mesh)
    err = capsys.readouterr().err
    assert rc == 2 and f"the training batch {train_batch} (predict's default --batch) is " \
        f"smaller than the mesh's batch axis (batch:{rows})" in err, err
    assert not out.exists()
    new_dir = tmp_path / "run"
    rc = main(["train", "--synthetic", "--steps", "1", "--model-dir", str(new_dir), "--batch", "1"]
              + TRAIN[:2] + mesh)
    err = capsys.readouterr().err
    assert rc == 2 and "--batch 1 is smaller than the mesh's batch axis" in err, err
    assert not new_dir.exists()


def test_predict_refuses_another_test_split_of_the_training_data(trained, tmp_path, capsys):
    """Trained with --folds 4 --fold 1: --folds 3 --fold 0 of the same data would hold
    subjects the model trained on; refused in one line. On another dataset (a copy),
    and with no split flags (every subject), it predicts."""
    import shutil

    data, model_dir, _, _ = trained
    out = str(tmp_path / "p.csv")
    base = ["predict", "--model-dir", str(model_dir), "--out", out, "--force"]
    for flags in (["--folds", "3", "--fold", "0"], ["--folds", "4", "--fold", "0"],
                  ["--test-fraction", "0.25"], ["--folds", "4", "--fold", "1", "--fold-seed", "2"]):
        assert main(base + ["--data", str(data)] + flags) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not the test split" in err[0], err
        assert "(--folds 4 --fold 1 --fold-seed 0, " in err[0]
    assert not (tmp_path / "p.csv").exists()
    assert main(base + ["--data", str(data), "--folds", "4"]) == 2  # the request's own error
    assert "--folds and --fold go together" in capsys.readouterr().err
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    assert main(base + ["--data", str(copy), "--folds", "3", "--fold", "0"]) == 0
    assert main(base + ["--data", str(data)]) == 0


def test_predict_refuses_a_checkpoint_of_another_model_in_one_line(trained, tmp_path, capsys):
    """--checkpoint PATH from another run's directory whose run file names another
    model: one line, not the TF traceback of variables that do not load; a
    checkpoint of the same model from another directory is taken."""
    import shutil

    data, model_dir, _, _ = trained
    run = json.loads((model_dir / "meshpar_run.json").read_text())
    step = max(int(p.name.split("-")[1].split(".")[0])
               for p in model_dir.glob("model.ckpt-*.index"))
    for name, model in (("other", "vgg-cifar-small"), ("same", run["model"])):
        home = tmp_path / name
        home.mkdir()
        for f in model_dir.glob(f"model.ckpt-{step}.*"):
            shutil.copy(f, home)
        (home / "meshpar_run.json").write_text(json.dumps(dict(run, model=model)))
    argv = ["predict", "--model-dir", str(model_dir), "--data", str(data), "--force",
            "--out", str(tmp_path / "p.csv"), "--checkpoint"]
    assert main(argv + [str(tmp_path / "other" / f"model.ckpt-{step}")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a checkpoint of another model (model='vgg-cifar-small')" in err[0]
    assert main(argv + [str(tmp_path / "same" / f"model.ckpt-{step}")]) == 0


def test_predict_refuses_a_lone_checkpoint_of_another_model_in_one_line(trained, tmp_path,
                                                                       capfd):
    """--checkpoint PATH of another model with no run file beside it (copied away from
    its model directory): one line naming a variable it lacks, not TF's traceback."""
    import shutil

    data, model_dir, _, _ = trained
    other = tmp_path / "small"
    assert main(["train", "--data", str(data), "--model", "resattnet3d-small", "--batch", "2",
                 "--steps", "1", "--val-fraction", "0", "--no-progress",
                 "--model-dir", str(other)]) == 0
    lone = tmp_path / "lone"
    lone.mkdir()
    for f in other.glob("model.ckpt-1.*"):
        shutil.copy(f, lone)
    capfd.readouterr()
    assert main(["predict", "--model-dir", str(model_dir), "--data", str(data),
                 "--out", str(tmp_path / "p.csv"), "--checkpoint",
                 str(lone / "model.ckpt-1")]) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert "Traceback" not in out + err and len(lines) == 1, err
    assert lines[0].startswith("meshpar predict: error: checkpoint ") and \
        "has no variable resattnet3d_tiny/" in lines[0] and "another model" in lines[0], lines[0]
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("extra, message", [
    (["--folds", "4"], "--folds and --fold go together"),
    (["--folds", "4", "--fold", "4"], "--fold must be in [0, 4)"),
    (["--folds", "4", "--fold", "0", "--test-fraction", "0.2"], "not both"),
    (["--test-fraction", "1.5"], "--test-fraction must be in (0, 1)"),
    (["--keep-best"], "--checkpoint-every"),
    (["--augment", "rotate"], "unknown augmentation rotate"),
])
def test_bad_split_and_best_flags_are_usage_errors(extra, message, capsys):
    rc = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "12",
               "--steps", "1", "--no-progress"] + extra)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_a_batch_past_the_subjects_is_one_line(trained, tmp_path, capsys):
    """A short batch is filled up with blank volumes, so --batch 100000000 asked for
    terabytes: an out-of-memory traceback. Above the subjects, the training batch and
    the mesh's batch rows it is refused; up to the subjects it predicts."""
    data, model_dir, _, _ = trained
    args = ["predict", "--model-dir", str(model_dir), "--data", str(data), "--folds", "4",
            "--fold", "1"]
    capsys.readouterr()
    assert main(args + ["--batch", "100000000", "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batch 100000000 is larger than the 5 subjects to predict " \
        "(and the training batch 4)" in err[0], err
    assert not (tmp_path / "p.csv").exists()
    assert main(args + ["--batch", "5", "--out", str(tmp_path / "p.csv")]) == 0
    assert len(_read(tmp_path / "p.csv")) == 5
