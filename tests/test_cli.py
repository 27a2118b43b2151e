"""``meshpar --help`` and every subcommand's ``--help`` exit 0 with an example."""
import argparse
import subprocess
import sys

import pytest

from meshpar.cli import build_parser, main


def _subcommands(parser, prefix=()):
    """Every command path below ``parser``: ("plan",), ("data", "synth"), ..."""
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommands(sub, prefix + (name,))


COMMANDS = list(_subcommands(build_parser()))


def test_every_command_module_is_registered():
    top = {c[0] for c in COMMANDS}
    assert {"demo", "profile", "plan", "train", "bench", "data", "worker"} <= top
    assert ("data", "synth") in COMMANDS and ("bench", "hetero") in COMMANDS


@pytest.mark.parametrize("command", [()] + COMMANDS, ids=lambda c: " ".join(c) or "meshpar")
def test_help_exits_0_and_shows_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(list(command) + ["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "example" in out.lower()
    assert "meshpar " + " ".join(command) in out  # the example runs this very command


def test_output_into_a_closed_pipe_is_no_traceback():
    """`meshpar plan ... | head -1`: the reader leaves early; the command stops quietly
    (exit 141, as for SIGPIPE) instead of a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "meshpar", "plan", "--speeds", "1,1",
                             "--model", "vgg-cifar-small", "--method", "even"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child starts writing: its first write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_running_out_of_memory_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """`meshpar data synth --shape 2000,2000,2000` ended in numpy's _ArrayMemoryError
    traceback (exit 1); now one line naming the allocation, exit 2. The allocation
    is faked: a real one of that size could succeed on a large machine."""
    import meshpar.data.phantoms

    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 59.6 GiB for an array with shape (8000000000,) "
                          "and data type float64")

    monkeypatch.setattr(meshpar.data.phantoms, "write_dataset", too_big)
    rc = main(["data", "synth", "--out", str(tmp_path / "big"), "--n", "1",
               "--shape", "2000,2000,2000"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("meshpar data synth: error: out of memory: Unable to allocate "
                               "59.6 GiB"), lines[0]


def test_a_dataset_that_fails_to_render_leaves_no_empty_folders(tmp_path, monkeypatch):
    """A failed `data synth` (e.g. out of memory at the first subject) used to leave
    its empty --out/subjects behind; folders that were there before stay."""
    import meshpar.data.phantoms as phantoms

    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 59.6 GiB")

    monkeypatch.setattr(phantoms, "make_phantom", too_big)
    rc = main(["data", "synth", "--out", str(tmp_path / "new" / "big"), "--n", "2"])
    assert rc == 2 and list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    assert main(["data", "synth", "--out", str(tmp_path / "kept"), "--n", "2"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert list((tmp_path / "kept").iterdir()) == []
