"""A run on ``--synthetic`` images resumes only on the same images. Its stream goes on
from the example the checkpoint reached (the run file's ``stream``), numbered within
the set ``--n-synthetic`` draws; before, a resume with another ``--n-synthetic`` was
accepted in silence and trained on another set (other validation images, another
epoch order), where phantoms and NIfTI files are refused as other subjects."""
import contextlib
import io
import json

from meshpar.cli import main


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_a_resume_on_another_image_set_is_refused_and_on_the_same_goes_on(tmp_path):
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--batch", 2,
            "--val-fraction", 0.25, "--no-progress", "--model-dir", tmp_path / "m"]
    code, _, err = _run(base + ["--n-synthetic", 16, "--steps", 1])
    assert code == 0, err
    info = json.loads((tmp_path / "m" / "meshpar_run.json").read_text())
    assert {k: info["subjects"][k] for k in ("train", "validation", "test")} == {
        "train": 12, "validation": 4, "test": 0}
    code, _, err = _run(base + ["--n-synthetic", 24, "--steps", 2])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "holds a run with other subjects (subjects: 12 training / 4 validation" in lines[0]
    code, _, err = _run(base + ["--n-synthetic", 16, "--steps", 2])
    assert code == 0, err
    info = json.loads((tmp_path / "m" / "meshpar_run.json").read_text())
    assert info["stream"] == [[0, 0, 2]]


def test_a_run_file_without_subjects_resumes_as_before(tmp_path):
    """Regression guard (passes on the old code): old run files still resume."""
    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--batch", 2,
            "--val-fraction", 0, "--no-progress", "--n-synthetic", 8,
            "--model-dir", tmp_path / "m"]
    assert _run(base + ["--steps", 1])[0] == 0
    path = tmp_path / "m" / "meshpar_run.json"
    info = json.loads(path.read_text())
    info.pop("subjects", None)  # as written before images recorded their set
    path.write_text(json.dumps(info))
    code, _, err = _run(base + ["--steps", 2])
    assert code == 0, err
