"""A refusal is the one line on stderr even where the command imported TensorFlow
before it refused, in a shell that sets no TensorFlow log level.

The test suite's conftest sets ``TF_CPP_MIN_LOG_LEVEL`` for every process it
starts, so tests/test_bad_input.py's subprocess rows could not see it: run from
a user's shell, ``meshpar evaluate --train-args=--cluster ...`` and ``meshpar
profile --cluster ... --model ... --batch <too large>`` printed TensorFlow's
start-up notes (oneDNN, CPU features: three lines) before their error, against
docs/accuracy.md's "refused in one line".
"""
import json
import os
import subprocess
import sys

import pytest


def _meshpar(argv, cwd):
    """``python -m meshpar argv`` with no TensorFlow log level in its environment."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "meshpar"] + argv, capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("argv, expect", [
    (["evaluate", "--out", "ev", "--train-args=--cluster dead.json"],
     "meshpar evaluate: error: --train-args may not set --cluster"),
    (["profile", "--cluster", "dead.json", "--model", "resattnet3d-tiny",
      "--batch", str(10 ** 12)],
     f"meshpar profile: error: --batch {10 ** 12}: one training step of resattnet3d-tiny"),
], ids=["evaluate-train-args-cluster", "profile-batch-beyond-the-host"])
def test_a_refusal_after_tensorflow_is_one_line(tmp_path, argv, expect):
    (tmp_path / "dead.json").write_text(json.dumps({"worker": ["127.0.0.1:1"]}))
    proc = _meshpar(argv, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(expect), lines[0]
    assert not (tmp_path / "ev").exists()  # refused before any phantom was written
