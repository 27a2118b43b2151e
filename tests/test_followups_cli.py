"""Flags that were accepted and then ignored, or refused only after work began.

* ``meshpar train --fold-seed N`` without ``--folds``/``--test-fraction`` was
  silently ignored (there is no test split to seed); ``predict`` the same.
* ``meshpar train --augment flip,flip`` was accepted (each augmentation is
  applied once).
* ``meshpar demo --speeds`` with more than 13 devices printed part 1's header,
  then failed splitting its 13-filter convolution.

Each is now one line ``meshpar <cmd>: error: ...`` with exit 2, before any work.
"""
import pytest

from meshpar.cli import main

FOURTEEN = ",".join(["1"] * 14)


@pytest.mark.parametrize("argv, words", [
    (["train", "--synthetic", "--fold-seed", "3", "--steps", "1"],
     "--fold-seed 3 goes with --folds/--fold or --test-fraction"),
    (["train", "--synthetic", "--augment", "flip,flip", "--steps", "1"],
     "--augment: flip given twice"),
    (["demo", "--speeds", FOURTEEN, "--skip-training"],
     "--speeds lists 14 devices; the demo splits a 13-filter convolution"),
])
def test_refused_up_front_with_one_line(capsys, argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing printed before the refusal (demo printed its header)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"meshpar {argv[0]}: error: ") and words in lines[0], lines[0]


def test_predict_refuses_a_fold_seed_without_a_split(capsys, tmp_path):
    assert main(["predict", "--model-dir", str(tmp_path / "run"), "--data", str(tmp_path),
                 "--fold-seed", "1", "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fold-seed 1 goes with --folds/--fold or --test-fraction" \
        in err[0], err


def test_fold_seed_with_a_split_and_the_default_still_parse():
    from meshpar.cli import train

    train.check_argv(["--synthetic", "--steps", "1"])  # no --fold-seed: fine
    train.check_argv(["--data", "d", "--folds", "4", "--fold", "1", "--fold-seed", "2",
                      "--steps", "1"])
    train.check_argv(["--data", "d", "--augment", "flip,shift", "--steps", "1"])
