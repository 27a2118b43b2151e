"""One network of one's own named by another spelling is the same network: a plan made
with ``--model tiny3d:CONFIG`` (the module, found in the current directory) trains
with ``--model /abs/tiny3d.py:CONFIG`` (its file), and a run trained with a file's
path resumes with that file reached through a link (docs/training.md: a plan, or a
resume, is refused for *another* file). Before, the plan check compared a module
reference with a file reference as different files, and the resume check compared
the recorded reference as a string, so both were refused."""
import contextlib
import io
import os
import re

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
    (folder / "tiny3d.py").write_text(TINY3D, encoding="utf-8")
    (folder / "copy3d.py").write_text(TINY3D, encoding="utf-8")
    os.symlink(folder, tmp_path / "link")
    monkeypatch.chdir(folder)  # the module references are found here
    return folder


def test_spellings_of_one_file_are_one_reference(nets, tmp_path):
    net = nets / "tiny3d.py"
    assert same_reference(f"{net}:CONFIG", "tiny3d:CONFIG")
    assert same_reference("tiny3d:CONFIG", f"{net}:CONFIG")
    assert same_reference(str(net), str(tmp_path / "link" / "tiny3d.py"))
    assert same_reference(str(net), str(tmp_path / "nets" / ".." / "nets" / "tiny3d.py"))
    assert not same_reference(f"{net}:CONFIG", "tiny3d:Config")       # another ATTR
    assert not same_reference(f"{nets / 'copy3d.py'}:CONFIG", "tiny3d:CONFIG")  # another file
    assert not same_reference(f"{net}:CONFIG", "no_such_module_xyz:CONFIG")
    assert not same_reference(str(net), "resattnet3d-tiny")


def test_a_plan_for_the_module_trains_its_file(nets):
    code, _, err = _run(["plan", "--speeds", "1,0.5", "--model", "tiny3d:CONFIG", "--batch", 4,
                         "--method", "even", "--out", nets.parent / "plan.json"])
    assert code == 0, err
    from meshpar.planning.plan import Plan

    plan = Plan.load(nets.parent / "plan.json")
    assert plan.extra["model_ref"] == "tiny3d:CONFIG"
    check_plan_model(plan, resolve(f"{nets / 'tiny3d.py'}:CONFIG"))  # accepted
    with pytest.raises(ValueError, match=re.escape(f"of tiny3d:CONFIG, not of "
                                                   f"{nets / 'copy3d.py'}:CONFIG")):
        check_plan_model(plan, resolve(f"{nets / 'copy3d.py'}:CONFIG")._replace(
            name="tiny3d:CONFIG"))


def test_a_run_resumes_with_its_file_reached_through_a_link(nets, tmp_path):
    base = ["train", "--synthetic", "--n-synthetic", 8, "--batch", 2, "--val-fraction", 0,
            "--no-progress", "--augment", "none", "--model-dir", tmp_path / "run"]
    code, _, err = _run(base + ["--model", nets / "tiny3d.py", "--steps", 1])
    assert code == 0, err
    code, out, err = _run(base + ["--model", tmp_path / "link" / "tiny3d.py", "--steps", 2])
    assert code == 0, err
    assert "resuming from the checkpoint at step 1" in out + err
    other = tmp_path / "other" / "tiny3d.py"  # the same name, another file
    other.parent.mkdir()
    other.write_text((nets / "tiny3d.py").read_text(encoding="utf-8"), encoding="utf-8")
    code, _, err = _run(base + ["--model", other, "--steps", 3])
    assert code == 2 and "holds a run with another model_ref" in err
