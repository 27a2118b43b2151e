"""Two `meshpar evaluate --out X` at once: the second took the first's runs in
progress (a run directory without its summary yet) for interrupted ones and removed
them, and its phantoms being written (the .partial cohort). It is now refused in one
line while another command holds X."""
import subprocess
import sys
import textwrap

from meshpar.cli import main


def test_a_second_evaluate_into_a_busy_out_is_refused(tmp_path, capsys):
    out = tmp_path / "acc"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from meshpar.dir_lock import hold_directory
        with hold_directory({str(out)!r}, "--out", "meshpar evaluate"):
            print("held", flush=True)
            time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ["evaluate", "--out", str(out), "--tasks", "smci-pmci", "--seeds", "3",
                "--n", "12", "--folds", "3", "--model", "resattnet3d-tiny", "--only",
                "one-device", "--train-args", "--steps 2 --batch 4 --val-fraction 0.2"]
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in use by another meshpar evaluate" in err[0], err
        assert list(out.iterdir()) == []  # nothing written
    finally:
        holder.kill()
        holder.wait()
