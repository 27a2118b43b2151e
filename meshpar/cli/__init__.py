"""The ``meshpar`` command (also ``python -m meshpar``).

Each subcommand lives in ``meshpar/cli/<name>.py`` with two functions:
``register(subparsers)`` adds its parser (and sets ``func=run`` on it) and
``run(args) -> int`` does the work. Start-up imports no TensorFlow; a
subcommand imports what it needs when it runs.

Bad input (a ValueError, a missing file) ends with one line on stderr and exit
code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from meshpar.cli.parsing import strict_number_types
from meshpar.runtime.client import ClusterFailure

# Subcommand modules, in the order --help lists them. A module that is not
# there yet is skipped, so the command keeps working while the tree grows.
COMMAND_MODULES = (
    "meshpar.cli.demo",
    "meshpar.cli.profile",
    "meshpar.cli.plan",
    "meshpar.cli.train",
    "meshpar.cli.predict",
    "meshpar.cli.evaluate",
    "meshpar.cli.bench",
    "meshpar.cli.data",
    "meshpar.cli.worker",
)

EPILOG = """examples:
  meshpar demo                                   uneven split of a conv net on an emulated mesh
  meshpar plan --speeds 1.0,0.5,0.3,0.2 --model resattnet3d-small --batch 8 --method ga
  meshpar data synth --out phantoms --n 400      write a synthetic NIfTI dataset
  meshpar train --synthetic --model resattnet3d-small --speeds 0.9,0.3 --steps 50
"""


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors (a bad value, an unknown option) are one line on
    stderr and exit code 2, as every other bad input of the command; the usage is a
    ``--help`` away. Subcommand parsers are of the same class, and each reads
    ``type=int`` and ``type=float`` strictly (:func:`~meshpar.cli.parsing.strict_number_types`:
    ``1_0`` and full-width digits are refused; ``nan`` and ``inf`` reach each flag's
    own range check)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        strict_number_types(self)

    def error(self, message):
        """Print ``<prog>: error: <message> (see <prog> --help)`` and exit with code 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``meshpar`` argument parser with every available subcommand registered."""
    parser = OneLineErrorParser(
        prog="meshpar",
        description="Uneven (heterogeneous) model + data parallelism on Mesh-TensorFlow.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:
                continue
            raise
        module.register(sub)
    return parser


#: a comma-separated list of numbers whose first is negative ("-1,0.3"): argparse takes
#: it for an option and says "expected one argument"
_NEGATIVE_LIST = re.compile(r"^-(\d|\.\d)[\d.eE+-]*(,[^,]*)+$")


#: Flags whose value is itself a string of options (argparse would take a value
#: such as ``--no-keep-best`` for a flag of its own).
_OPTION_STRINGS = ("--train-args",)


def _negative_lists_attached(argv) -> list:
    """``["--speeds", "-1,0.3"]`` -> ``["--speeds=-1,0.3"]``, so that the flag's own check
    names the bad value (argparse parses a lone negative number itself); likewise
    ``["--train-args", "--no-keep-best"]`` -> ``["--train-args=--no-keep-best"]``."""
    out = []
    for token in argv:
        flag = out[-1] if out else ""
        if flag.startswith("--") and "=" not in flag and (
                _NEGATIVE_LIST.match(token) or flag in _OPTION_STRINGS):
            out[-1] = f"{flag}={token}"
        else:
            out.append(token)
    return out


def main(argv=None) -> int:
    """Run the ``meshpar`` command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit code: the subcommand's, 2 for bad input (one line on stderr) or no
        subcommand, 1 for a failed cluster, 130 when interrupted.
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(
        _negative_lists_attached(sys.argv[1:] if argv is None else argv))
    if unknown:  # argparse said it as 'meshpar: error:' whatever the command
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # the command as argparse names it in its own errors: "meshpar bench memory"
    name = " ".join(["meshpar", args.command] + [
        getattr(args, a) for a in ("bench", "data_command") if getattr(args, a, None)])
    # TensorFlow's start-up notes (oneDNN, CPU features) on stderr: a command that
    # imported it before refusing its input said three lines more than its one
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return int(args.func(args) or 0)
    except ClusterFailure as err:  # a worker lost at run time, not bad input
        print(f"{name}: failed: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except MemoryError as err:  # e.g. `data synth --shape 2000,2000,2000`: numpy's allocation
        print(f"{name}: error: out of memory: {str(err).strip() or 'an allocation failed'}; "
              "smaller sizes need less", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `meshpar plan ... | head`: the reader left; nothing to say
        _drop_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command its pipe stopped
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
            IsADirectoryError, PermissionError) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"{name}: error: {message}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a read-only one: was a traceback, work later
        if err.errno not in _PLACE_ERRNOS:
            raise
        print(f"{name}: error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 2


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran (``meshpar bench memory``'s), so that
    its errors name it as every other error of the command does."""
    while True:
        sub = next((a for a in parser._actions  # pylint: disable=protected-access
                    if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if name not in (sub.choices if sub is not None else {}):
            return parser
        parser = sub.choices[name]


def _place_errnos() -> frozenset:
    """errno values of a place that cannot take what a command writes (no space, a quota,
    a read-only file system, a name too long): said in one line, as a permission is."""
    import errno

    return frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS",
                                                       "ENAMETOOLONG", "ELOOP", "EFBIG")
                     if hasattr(errno, name))


_PLACE_ERRNOS = _place_errnos()


def _drop_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so that the interpreter's last
    flush at exit does not fail on the closed pipe too (and print about it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
