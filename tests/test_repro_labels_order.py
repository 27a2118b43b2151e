"""One dataset, one seed, one training: whatever order labels.csv lists its rows in.

The split of the subjects (validation set, folds) and the run file's record of them
were already independent of the row order, but the training stream shuffled the
training subjects by their position in labels.csv: the same files listed in another
order (a labels.csv written by a script walking the directory, whose order differs
from one file system to another) trained on other batches with the same --seed, and
a resumed run accepted the reordered copy (its record matched) and went on in another
permutation, seeing some subjects twice in the epoch and others not at all.
"""
import csv
import json
import shutil

import numpy as np

from meshpar.cli import main
from meshpar.data import write_dataset

COMMON = ["train", "--model", "resattnet3d-tiny", "--val-fraction", "0.25", "--no-keep-best",
          "--no-progress", "--batch", "3", "--seed", "2", "--lr-schedule", "constant",
          "--lr-warmup-steps", "0", "--optimizer", "sgd", "--json"]


def _checkpoint(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _reordered_copy(src, dst):
    """``src`` copied to ``dst`` with labels.csv's rows (not its header) reversed."""
    shutil.copytree(src, dst)
    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    with open(dst / "labels.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + rows[:0:-1])


def _train(data, model_dir, steps, capsys, every=None):
    extra = ["--checkpoint-every", str(every)] if every else []
    assert main(COMMON + ["--data", str(data), "--steps", str(steps),
                          "--model-dir", str(model_dir), *extra]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _assert_same(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_the_row_order_of_labels_csv_changes_nothing(tmp_path, capsys):
    data = tmp_path / "data"
    write_dataset(data, 12, shape=(16, 16, 16), seed=4)
    _reordered_copy(data, tmp_path / "reordered")
    steps = 4   # 4 x 3 examples: more than the 9 training subjects, into a second epoch
    first = _train(data, tmp_path / "a", steps, capsys)
    second = _train(tmp_path / "reordered", tmp_path / "b", steps, capsys)
    assert first["first_loss"] == second["first_loss"]
    _assert_same(_checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "b"))
    # stopped halfway on the first listing, resumed on the second: the stream goes on
    # in the uninterrupted run's order
    _train(data, tmp_path / "c", steps // 2, capsys)
    _train(tmp_path / "reordered", tmp_path / "c", steps, capsys)
    _assert_same(_checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "c"))
