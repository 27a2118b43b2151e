"""What ``meshpar`` commands print, checked the way a script reading their output would."""
import os

from meshpar.cli import main


def test_train_without_model_dir_names_no_checkpoint_directory_that_is_gone(capsys):
    # without --model-dir the checkpoints live in a scratch directory that train removes
    # when it ends; the line saying where they are must not send a reader there
    rc = main(["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "16",
               "--batch", "4", "--steps", "2", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in out.splitlines() if "checkpoints in " in x)
    where = line.split("checkpoints in ", 1)[1]
    assert os.path.isdir(where) or "removed when train ends" in where, line


def test_demo_names_no_checkpoint_directory_that_is_gone(capsys):
    # the demo trained with --model-dir in its own temporary directory, removed when the
    # demo ends, and train printed that path as where the checkpoints are
    assert main(["demo", "--speeds", "0.3,0.9", "--steps", "2", "--subjects", "10"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "checkpoints in " in x)
    where = line.split("checkpoints in ", 1)[1]
    assert os.path.isdir(where) or "removed when train ends" in where, line
