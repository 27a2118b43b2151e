"""Every ``meshpar`` command line the docs show parses as the CLI reads it.

The command lines are those of the literal blocks of README.rst and docs/*.rst,
the fenced blocks of docs/*.md and the examples of every ``meshpar ... --help``
(descriptions and epilogs). Parsing checks each flag's name, its value's type and the
required/exclusive groups, so a renamed or dropped flag, or an example that
leaves out a required one, fails here. Found by it: ``meshpar profile --help``'s
``meshpar train --cluster cluster.json --plan plan.json ...`` had no ``--data``
(train refused it: one of --data --synthetic is required).

What parsing does not say (a file exists, a plan fits) the commands themselves
check, and other tests run them.
"""
import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from meshpar.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
#: a line that runs meshpar: after a prompt (``host-i$``) or an environment variable
#: (``TF_CONFIG='...'``), if any
COMMAND = re.compile(r"^\s*(?:[\w-]*\$\s*|[A-Z_]+='[^']*'\s+)?meshpar ((?:demo|profile|plan|"
                     r"train|predict|evaluate|bench|data|worker)\b.*)")
#: placeholders the docs write for a value: ``host-i$ meshpar worker ... --task i``
PLACEHOLDERS = {"i": "0"}


def _rst_blocks(text):
    """The literal blocks (``::`` and ``.. code-block::``) of a reStructuredText text."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.rstrip().endswith("::") or line.lstrip().startswith(".. code-block"):
            body = []
            for follow in lines[i + 1:]:
                if follow.strip() and not follow.startswith(" "):
                    break
                body.append(follow)
            yield "\n".join(body)


def _md_blocks(text):
    """The fenced code blocks of a Markdown text."""
    return re.findall(r"```[^\n]*\n(.*?)```", text, re.S)


def _help_texts(parser):
    """The description and epilog of ``parser`` and of every subcommand under it."""
    yield parser.description or ""
    yield parser.epilog or ""
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
            for sub in action.choices.values():
                yield from _help_texts(sub)


def _commands(source, text):
    """``(source, command line)`` of each ``meshpar`` command in ``text``: continuation
    lines joined, a trailing comment or (as ``--help`` examples have) two spaces and
    prose left out; lines that elide with ``...`` are not whole commands."""
    text = re.sub(r"\\\n\s*", " ", text)
    for line in text.split("\n"):
        match = COMMAND.match(line)
        if match and "..." not in match.group(1):
            yield source, re.split(r"\s{2,}#|\s{3,}", match.group(1).strip())[0]


def _all_commands():
    found = []
    readme = (ROOT / "README.rst").read_text(encoding="utf-8")
    for block in _rst_blocks(readme):
        found += _commands("README.rst", block)
    for path in sorted((ROOT / "docs").glob("*.md")):
        for block in _md_blocks(path.read_text(encoding="utf-8")):
            found += _commands(f"docs/{path.name}", block)
    for path in sorted((ROOT / "docs").glob("*.rst")):
        for block in _rst_blocks(path.read_text(encoding="utf-8")):
            found += _commands(f"docs/{path.name}", block)
    for text in _help_texts(build_parser()):
        found += _commands("--help", text)
    return sorted(set(found))


COMMANDS = _all_commands()


def test_the_docs_show_commands_of_every_kind():
    shown = {line.split()[0] for _, line in COMMANDS}
    assert shown >= {"demo", "profile", "plan", "train", "predict", "evaluate", "bench",
                     "data", "worker"}, shown


@pytest.mark.parametrize("source, line", COMMANDS, ids=[f"{s}: {c}" for s, c in COMMANDS])
def test_a_documented_command_parses(source, line):
    argv = [PLACEHOLDERS.get(a, a) for a in shlex.split(line, comments=True)
            if not (a.startswith("[") or a.endswith("]"))]  # [--optional VALUE] groups
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{source}: `meshpar {line}`: {err.getvalue().strip()}")
    assert getattr(args, "func", None) is not None, f"{source}: `meshpar {line}` runs nothing"


def test_help_texts_hold_no_sphinx_roles():
    """``--help`` prints a module docstring as it is: ``meshpar bench --help`` showed
    ``:mod:`meshpar.bench.hetero``` to the user."""
    roles = [text for text in _help_texts(build_parser())
             if re.search(r":(?:mod|func|class|meth|data|attr):`", text)]
    assert roles == []


def test_bench_hetero_model_names_its_workload_not_a_network(capsys):
    """docs/training.md lists the commands whose ``--model`` takes a network of one's
    own; ``bench hetero --model`` (a one-layer workload) is not one of them."""
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal
        main(["bench", "hetero", "--model", "mynet.py"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'mynet.py'" in err[0], err
