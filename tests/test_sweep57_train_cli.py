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


_TERMINATED_AFTER_THE_DATA = """
import os, signal, sys, tempfile
tempfile.tempdir = sys.argv[1]
import meshpar.cli.train as T
real = T.prepare_data

def prepare_then_terminated(args, spec, scratch, *rest):
    data = real(args, spec, scratch, *rest)
    assert os.listdir(scratch), scratch  # the phantoms are there
    os.kill(os.getpid(), signal.SIGTERM)
    return data

T.prepare_data = prepare_then_terminated
from meshpar.cli import main
sys.exit(main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "2",
               "--batch", "2", "--n-synthetic", "8", "--no-progress",
               "--model-dir", sys.argv[2]]))
"""


def test_sigterm_removes_the_scratch_directory_and_keeps_the_model_dir(tmp_path):
    """SIGTERM once the synthetic phantoms are written: the process ends with 143 and
    one line, its /tmp/meshpar-train-* directory removed (the default action had left
    it, phantoms and all) and the --model-dir kept."""
    import subprocess
    import sys

    scratch_root, model_dir = tmp_path / "tmp", tmp_path / "run"
    scratch_root.mkdir()
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("the user's")
    done = subprocess.run([sys.executable, "-c", _TERMINATED_AFTER_THE_DATA, str(scratch_root),
                           str(model_dir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "meshpar train: terminated"
    assert [p for p in os.listdir(scratch_root) if p.startswith("meshpar-train-")] == []
    assert (model_dir / "notes.txt").read_text() == "the user's"
