"""`meshpar data synth` cut off part-way (Ctrl-C during a --force rewrite, a disk
that refuses the record) leaves a directory that reads as unfinished and that
--force redoes: never an old dataset's labels over new subjects, never a
half-written record that --force then refuses as not its own."""
import subprocess
import sys
import textwrap

import pytest

from meshpar.data.nifti import NiftiDataset
from meshpar.data.phantoms import make_phantom, write_dataset


def test_a_rewrite_interrupted_part_way_does_not_read_as_a_whole_dataset(tmp_path):
    """labels.csv marks a whole dataset; an earlier one's stayed while --force rewrote
    the subjects, so Ctrl-C after two of six left seed 0's labels over seed 1's first
    subjects, and `data check` and train read it as whole."""
    out = tmp_path / "phantoms"
    write_dataset(out, 6, shape=(8, 8, 8), seed=0)
    drawn = []

    def interrupted(*args, **kwargs):
        if len(drawn) == 2:
            raise KeyboardInterrupt  # Ctrl-C at the third subject
        drawn.append(1)
        return make_phantom(*args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        write_dataset(out, 6, shape=(8, 8, 8), seed=1, force=True, phantom_fn=interrupted)
    assert not (out / "labels.csv").exists(), "a half-rewritten dataset reads as whole"
    with pytest.raises(Exception, match="labels.csv"):
        NiftiDataset(out)
    write_dataset(out, 6, shape=(8, 8, 8), seed=1, force=True)  # --force redoes it
    fresh = tmp_path / "fresh"
    write_dataset(fresh, 6, shape=(8, 8, 8), seed=1)
    assert (out / "labels.csv").read_text() == (fresh / "labels.csv").read_text()
    assert ((out / "subjects" / "sub-0001.nii.gz").read_bytes()
            == (fresh / "subjects" / "sub-0001.nii.gz").read_bytes())


def test_a_record_the_disk_refused_part_way_is_not_left_half_written(tmp_path):
    """phantoms.json was written in place: a disk that refused it part-way (here a
    file-size limit below the record's size, above a subject's) left a truncated
    record, and --force then refused the directory as 'not the record data synth
    writes'. The record is now written aside and renamed, so --force redoes it."""
    out = tmp_path / "phantoms"
    _write_refused_part_way(out, file_limit=8192, subjects=30, shape=(8, 8, 8))
    assert (out / "subjects" / "sub-0030.nii.gz").is_file()  # the subjects fitted
    assert not (out / "phantoms.json").exists() and not (out / "labels.csv").exists()
    write_dataset(out, 30, shape=(8, 8, 8), seed=0, force=True)
    assert len(NiftiDataset(out)) == 30


def test_a_second_synth_into_a_directory_being_written_is_refused(tmp_path, capsys):
    """`data synth --force` into a directory another synth was still writing went
    ahead: the two wrote their subjects in turn and one labels.csv described them
    (seen: seed 0's labels over seed 1's first subject). It is now refused in one line
    while the first runs, and free again once that one is killed."""
    import os
    import signal
    import time

    from meshpar.cli import main

    out = tmp_path / "phantoms"
    first = subprocess.Popen([sys.executable, "-m", "meshpar", "data", "synth", "--out",
                              str(out), "--n", "100000", "--shape", "8,8,8"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (out / "subjects").is_dir() or not os.listdir(out / "subjects"):
            assert first.poll() is None and time.monotonic() < deadline, "synth ended early"
            time.sleep(0.05)
        argv = ["data", "synth", "--out", str(out), "--n", "4", "--shape", "8,8,8",
                "--seed", "1", "--force"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in use by another meshpar data synth" in err[0], err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert main(argv) == 0  # the kernel dropped the killed one's hold
    assert len(NiftiDataset(out)) == 4


def test_a_subject_the_disk_refused_leaves_no_half_file(tmp_path):
    """save_nifti wrote each subject to a hidden .partial file and renamed it; a write
    that failed part-way (a full disk; here a file-size limit below a subject's size)
    left that truncated file in subjects/. It is removed, and the error raised."""
    out = tmp_path / "phantoms"
    _write_refused_part_way(out, file_limit=1024, subjects=2, shape=(16, 16, 16))
    left = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert left == [], left


def _write_refused_part_way(out, file_limit: int, subjects: int, shape) -> None:
    """``write_dataset`` in a process whose files may not grow past ``file_limit``
    bytes (a full disk, in effect); asserts that it was refused with an OSError."""
    script = textwrap.dedent(f"""
        import resource, signal
        from meshpar.data.phantoms import write_dataset
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, ({file_limit}, {file_limit}))
        try:
            write_dataset({str(out)!r}, {subjects}, shape={tuple(shape)!r}, seed=0)
        except OSError as err:
            print("refused", err.errno)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert "refused" in run.stdout, run.stdout + run.stderr
