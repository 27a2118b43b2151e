"""``meshpar train``'s default recipe (docs/accuracy.md): what the flags resolve to
without options, and how keep-best, warm-up and augmentation follow the run."""
import json

import pytest

from meshpar.cli import build_parser, main
from meshpar.cli.train import KEEP_BEST_EVERY, _check_args
from meshpar.cli.train_options import augmentations, recipe_params


def _args(*argv):
    args = build_parser().parse_args(["train", "--synthetic", *argv])
    _check_args(args)
    return args


def test_the_default_recipe():
    args = _args()
    assert (args.steps, args.batch, args.n_synthetic) == (300, 8, 400)
    params = recipe_params(args)
    assert params["lr_schedule"] == "cosine" and params["weight_decay"] == 1e-3
    assert params["warmup_steps"] == 30 and params["total_steps"] == 300
    assert args.keep_best and args.checkpoint_every == KEEP_BEST_EVERY
    assert augmentations(args.augment) == ("flip",)


def test_warmup_is_a_tenth_of_the_steps_unless_given():
    assert recipe_params(_args("--steps", "120"))["warmup_steps"] == 12
    assert recipe_params(_args("--steps", "120", "--lr-warmup-steps", "0"))["warmup_steps"] == 0


@pytest.mark.parametrize("argv, keep, every", [
    (["--steps", "50"], False, None),                       # one checkpoint: nothing to choose
    (["--steps", "51"], True, KEEP_BEST_EVERY),
    (["--steps", "40", "--checkpoint-every", "10"], True, 10),
    (["--no-keep-best"], False, None),
    (["--keep-best", "--checkpoint-every", "100"], True, 100),
])
def test_keep_best_follows_the_checkpoints(argv, keep, every):
    args = _args(*argv)
    assert (args.keep_best, args.checkpoint_every) == (keep, every)


def test_keep_best_is_off_when_the_run_replans(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"worker": ["localhost:1"]}))
    args = _args("--cluster", str(cluster), "--speeds", "1", "--rebalance")
    assert args.keep_best is False and args.checkpoint_every is None


def test_augmentation_names():
    assert augmentations(None) == ("flip",) and augmentations("none") == ()
    assert augmentations("flip,affine") == ("flip", "affine")
    with pytest.raises(ValueError, match="unknown augmentation"):
        augmentations("rotate")


def test_run_file_records_the_resolved_recipe(tmp_path, capsys):
    """A short default run: no validation-free surprise, the run file says what ran."""
    model_dir = tmp_path / "m"
    rc = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "16",
               "--steps", "2", "--batch", "2", "--no-progress", "--model-dir", str(model_dir)])
    assert rc == 0, capsys.readouterr().err
    run = json.loads((model_dir / "meshpar_run.json").read_text())
    assert run["augment"] == ["flip"] and run["keep_best"] is False
    assert run["recipe"]["lr_schedule"] == "cosine" and run["recipe"]["warmup_steps"] == 0


def test_images_take_no_augmentation_but_accept_none(capsys):
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--steps", "1", "--batch", "2",
            "--n-synthetic", "8", "--no-progress"]
    assert main(base + ["--augment", "flip"]) == 2
    assert "--augment need NIfTI" in capsys.readouterr().err
    assert main(base + ["--augment", "none"]) == 0
