"""One network of one's own named by another spelling is the same network: a plan made
with ``--model spelt3d:CONFIG`` (the module, found in the current directory) trains
with ``--model /abs/spelt3d.py:CONFIG`` (its file), and a run trained with a file's
path resumes with that file reached through a link (docs/training.md: a plan, or a
resume, is refused for *another* file). Before, the plan check compared a module
reference with a file reference as different files, and the resume check compared
the recorded reference as a string, so both were refused."""
import contextlib
import io
import os
import re
import sys

import pytest

from meshpar.cli import main
from meshpar.models import resolve
from meshpar.models.reference import check_plan_model, same_reference


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def nets(tmp_path, monkeypatch):
    from test_custom_model_cli import TINY3D

    folder = tmp_path / "nets"
    folder.mkdir()
    (folder / "spelt3d.py").write_text(TINY3D, encoding="utf-8")
    (folder / "speltcopy.py").write_text(TINY3D, encoding="utf-8")
    os.symlink(folder, tmp_path / "link")
    monkeypatch.chdir(folder)  # the module references are found here
    for name in ("spelt3d", "speltcopy"):  # imported from this folder, not a cache
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield folder
    for name in ("spelt3d", "speltcopy"):
        sys.modules.pop(name, None)


def test_spellings_of_one_file_are_one_reference(nets, tmp_path):
    net = nets / "spelt3d.py"
    assert same_reference(f"{net}:CONFIG", "spelt3d:CONFIG")
    assert same_reference("spelt3d:CONFIG", f"{net}:CONFIG")
    assert same_reference(str(net), str(tmp_path / "link" / "spelt3d.py"))
    assert same_reference(str(net), str(tmp_path / "nets" / ".." / "nets" / "spelt3d.py"))
    assert not same_reference(f"{net}:CONFIG", "spelt3d:Config")       # another ATTR
    assert not same_reference(f"{nets / 'speltcopy.py'}:CONFIG", "spelt3d:CONFIG")  # another file
    assert not same_reference(f"{net}:CONFIG", "no_such_module_xyz:CONFIG")
    assert not same_reference(str(net), "resattnet3d-tiny")


def test_a_plan_for_the_module_trains_its_file(nets):
    code, _, err = _run(["plan", "--speeds", "1,0.5", "--model", "spelt3d:CONFIG", "--batch", 4,
                         "--method", "even", "--out", nets.parent / "plan.json"])
    assert code == 0, err
    from meshpar.planning.plan import Plan

    plan = Plan.load(nets.parent / "plan.json")
    assert plan.extra["model_ref"] == "spelt3d:CONFIG"
    check_plan_model(plan, resolve(f"{nets / 'spelt3d.py'}:CONFIG"))  # accepted
    with pytest.raises(ValueError, match=re.escape(f"of spelt3d:CONFIG, not of "
                                                   f"{nets / 'speltcopy.py'}:CONFIG")):
        check_plan_model(plan, resolve(f"{nets / 'speltcopy.py'}:CONFIG")._replace(
            name="spelt3d:CONFIG"))


def test_a_run_resumes_with_its_file_reached_through_a_link(nets, tmp_path):
    base = ["train", "--synthetic", "--n-synthetic", 8, "--batch", 2, "--val-fraction", 0,
            "--no-progress", "--augment", "none", "--model-dir", tmp_path / "run"]
    code, _, err = _run(base + ["--model", nets / "spelt3d.py", "--steps", 1])
    assert code == 0, err
    code, out, err = _run(base + ["--model", tmp_path / "link" / "spelt3d.py", "--steps", 2])
    assert code == 0, err
    assert "resuming from the checkpoint at step 1" in out + err
    other = tmp_path / "other" / "spelt3d.py"  # the same name, another file
    other.parent.mkdir()
    other.write_text((nets / "spelt3d.py").read_text(encoding="utf-8"), encoding="utf-8")
    code, _, err = _run(base + ["--model", other, "--steps", 3])
    assert code == 2 and "holds a run with another model_ref" in err


def test_a_module_reference_means_the_module_of_the_current_directory(nets, tmp_path,
                                                                      monkeypatch):
    """Resolved elsewhere first (a module of that name cached in sys.modules), the module
    reference still names the current directory's file, as resolve imports it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "spelt3d.py").write_text((nets / "spelt3d.py").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    assert resolve("spelt3d:CONFIG").module.__file__ == str(elsewhere / "spelt3d.py")
    monkeypatch.chdir(nets)
    assert same_reference(f"{nets / 'spelt3d.py'}:CONFIG", "spelt3d:CONFIG")
    assert not same_reference(f"{elsewhere / 'spelt3d.py'}:CONFIG", "spelt3d:CONFIG")
    assert resolve("spelt3d:CONFIG").module.__file__ == str(nets / "spelt3d.py")
