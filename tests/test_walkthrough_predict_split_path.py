"""``predict`` refusing another test split of the training's own data named the
run file by the model directory's last part only: ``--model-dir runs/tf`` gave
``(--fold-seed 0 --test-fraction 0.2, tf/meshpar_run.json)``, a path that is
not there from where the command ran. Found walking the docs as a new user
(``train --test-fraction 0.2 --model-dir runs/tf``, then ``predict
--test-fraction 0.3``). It now gives the run file's path as given."""
import argparse
import os

import pytest

from meshpar.cli.predict import _refuse_another_split


def test_the_run_file_named_is_the_one_under_model_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    model_dir = os.path.join(str(tmp_path), "runs", "tf")
    info = {"data": str(data), "split": {"folds": None, "fold": None, "fold_seed": 0,
                                         "test_fraction": 0.2}}
    args = argparse.Namespace(model_dir=model_dir, data=str(data), folds=None, fold=None,
                              fold_seed=0, test_fraction=0.3)
    with pytest.raises(ValueError) as err:
        _refuse_another_split(args, info)
    message = str(err.value)
    assert "is not the test split" in message
    assert f"--test-fraction 0.2, {os.path.join(model_dir, 'meshpar_run.json')})" in message
    args.test_fraction = 0.2  # the training's own split: taken
    _refuse_another_split(args, info)
