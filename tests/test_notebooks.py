"""The notebooks in ``notebooks/`` run from top to bottom without an error.

Each is executed with nbclient in a fresh kernel running this interpreter
(so the venv's meshpar, TensorFlow and matplotlib), in a temporary working
directory; outputs are not written back. Select them with ``-k notebooks``. Each takes well under two minutes on two CPU cores.
"""
import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300
KERNEL_NAME = "python3"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A ``python3`` kernelspec that runs *this* interpreter, first on JUPYTER_PATH.

    It shadows any other ``python3`` kernel (a user's or the system's), so the
    notebooks always run in the environment the tests run in, whether or not
    ``python -m ipykernel install --sys-prefix`` was ever done.
    """
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (meshpar tests)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    jupyter_path = os.environ.get("JUPYTER_PATH")
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(
        [str(tmp_path / "jupyter")] + ([jupyter_path] if jupyter_path else [])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_notebooks_found():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_uneven_split.ipynb", "02_planner.ipynb",
                     "03_alzheimer_resattnet.ipynb"], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: clear the outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_env):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME, allow_errors=False,
        resources={"metadata": {"path": str(kernel_env)}})
    started = time.perf_counter()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name} failed:\n{err}", pytrace=False)
    seconds = time.perf_counter() - started
    print(f"{path.name}: executed in {seconds:.1f} s")
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.outputs if out.get("output_type") == "error"]
    assert not errors
