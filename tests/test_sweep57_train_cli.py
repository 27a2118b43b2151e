"""meshpar train through the CLI: refusals said before any output, scratch data
removed on a signal, and a resumed --replay-replans run's record."""
import os

import pytest

from meshpar.cli import main


def test_mtf_mesh_that_cannot_cut_the_batch_is_refused_before_the_header(capsys, tmp_path):
    """--mesh-impl mtf with a batch its batch axis does not divide: one line, exit 2,
    nothing on stdout and no model directory (the refusal came at the first step,
    after train's model/mesh/optimizer lines)."""
    model_dir = tmp_path / "run"
    code = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--speeds", "1,1",
                 "--mesh", "batch:2", "--batch", "3", "--steps", "1", "--n-synthetic", "8",
                 "--mesh-impl", "mtf", "--no-progress", "--model-dir", str(model_dir)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshpar train: error: ")
    assert "dimension batch of size 3" in lines[0]
    assert not model_dir.exists()


def test_mtf_mesh_that_cannot_cut_a_channel_dimension_is_refused_before_the_header(capsys):
    """The same for a model dimension (resattnet3d-tiny's 4 stem filters on model:3)."""
    code = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--speeds", "1,1,1",
                 "--batch", "3", "--steps", "1", "--n-synthetic", "8", "--mesh-impl", "mtf",
                 "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "into 3 equal parts" in err
