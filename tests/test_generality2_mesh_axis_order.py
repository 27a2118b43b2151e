"""``--speeds`` with a two-axis ``--mesh`` splits by axis name, in either listing order.

The proportional rule gives the ``model`` axis each column's slowest device's
speed and the ``batch`` axis the rate at which each row finishes. It was
applied by position: on ``--mesh 'model:2;batch:2'`` the model axis got the
batch rule and the other way round, a worse balance than the same devices on
``batch:2;model:2`` (speeds 1.0,0.1,0.5,0.5 listed model-first gave batch
5/6,1/6 and model 1/2,1/2 where the rule gives batch 1/2,1/2 and model
1/6,5/6; over random 2-3 x 2-3 grids, 42% of them were less balanced).
"""
import json

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.cli.train_options import mesh_from_speeds


def _step(weights, speeds, model_first, rows, cols):
    """The slowest device's time units: batch share x model share / speed."""
    b = np.asarray(weights["batch"], float)
    m = np.asarray(weights["model"], float)
    b, m = b / b.sum(), m / m.sum()
    s = np.asarray(speeds, float)
    grid = s.reshape(cols, rows).T if model_first else s.reshape(rows, cols)  # [batch, model]
    return max(b[i] * m[j] / grid[i, j] for i in range(rows) for j in range(cols))


@pytest.mark.parametrize("seed", range(6))
def test_either_listing_of_the_axes_gives_each_axis_its_rule(seed):
    rng = np.random.RandomState(seed)
    rows, cols = rng.randint(1, 4), rng.randint(2, 4)
    speeds = rng.uniform(0.05, 1.0, rows * cols)  # model-first: pnum = model * rows + batch
    _, model_first = mesh_from_speeds(list(speeds), f"model:{cols};batch:{rows}")
    batch_first_speeds = speeds.reshape(cols, rows).T.reshape(-1)  # the same devices
    _, batch_first = mesh_from_speeds(list(batch_first_speeds), f"batch:{rows};model:{cols}")
    for axis in ("batch", "model"):
        assert model_first[axis] == pytest.approx(batch_first[axis])
    assert _step(model_first, speeds, True, rows, cols) == pytest.approx(
        _step(batch_first, batch_first_speeds, False, rows, cols))


def test_the_model_first_example():
    _, weights = mesh_from_speeds([1.0, 0.1, 0.5, 0.5], "model:2;batch:2")
    assert weights["batch"] == pytest.approx([0.5, 0.5])
    assert weights["model"] == pytest.approx([1 / 6, 5 / 6])  # model 0 holds the 0.1 device


def test_train_splits_a_model_first_mesh_by_the_rule(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--synthetic", "--model", "vgg-cifar-small", "--speeds",
                 "1.0,0.1,0.5,0.5", "--mesh", "model:2;batch:2", "--steps", "1", "--batch", "4",
                 "--n-synthetic", "8", "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["mesh_shape"] == "model:2;batch:2"
    assert summary["split_weights"]["batch"] == pytest.approx([0.5, 0.5])
    assert summary["split_weights"]["model"] == pytest.approx([1 / 6, 5 / 6])
