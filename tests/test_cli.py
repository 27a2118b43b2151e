"""``meshpar --help`` and every subcommand's ``--help`` exit 0 with an example."""
import argparse

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
