"""Two `meshpar train` in one --model-dir at once: the second is refused in one line
(exit 2) while the first runs, and a first run that was killed leaves no stale lock."""
import os
import signal
import subprocess
import sys
import time

from meshpar.cli import main


def _train_args(data, model_dir, steps):
    return ["train", "--data", str(data), "--model", "resattnet3d-tiny", "--steps", str(steps),
            "--batch", "2", "--checkpoint-every", "2", "--model-dir", str(model_dir),
            "--no-progress"]


def test_a_second_train_in_a_busy_model_dir_is_refused_and_a_killed_one_frees_it(
        tmp_path, capsys):
    """Both used to train in it: each chunk restored the other's checkpoint and the
    directory held neither run, with nothing said."""
    from meshpar.data.phantoms import write_dataset

    data = tmp_path / "phantoms"
    write_dataset(data, 8, shape=(8, 8, 8), seed=0)
    model_dir = tmp_path / "model"
    first = subprocess.Popen([sys.executable, "-m", "meshpar"] + _train_args(
        data, model_dir, 100000), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # it holds the directory once it writes there
        while not (model_dir / "meshpar_run.json").exists() and first.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, "the first train ended early"
        assert main(_train_args(data, model_dir, 2)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in use by another meshpar train" in err[0], err
        assert first.poll() is None  # the first goes on
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
        first.wait()
    # the kernel dropped the killed run's hold: the same command resumes there
    assert main(_train_args(data, model_dir, 2)) == 0
    assert os.path.isfile(model_dir / "checkpoint")


def test_a_refused_run_leaves_no_directory_it_made(tmp_path, capsys):
    """Holding --model-dir makes it; a run refused before writing there (a --mesh
    that does not match --speeds) leaves no empty directory behind, as before."""
    data = tmp_path / "phantoms"
    data.mkdir()
    where = tmp_path / "a" / "model"
    assert main(_train_args(data, where, 2) + ["--speeds", "1,1", "--mesh", "batch:3"]) == 2
    assert "--mesh batch:3 has 3 processors" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
