"""``meshpar plan`` as a script probing it would: each flag's help against what the
command does with it."""
import argparse

import pytest

from meshpar.cli import build_parser, main

GA_ONLY = [["--seed", "7"], ["--generations", "5"], ["--population", "16"], ["--progress"]]


def _plan_help(flag: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a.help for a in sub.choices["plan"]._actions if flag in a.option_strings)


@pytest.mark.parametrize("option", GA_ONLY, ids=[o[0] for o in GA_ONLY])
def test_a_ga_option_refused_by_the_other_methods_says_so_in_its_help(option, capsys):
    base = ["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar-small", "--batch", "4"]
    assert main(base + ["--method", "ga"] + option) == 0
    for method in ("exact", "proportional", "even"):
        capsys.readouterr()
        assert main(base + ["--method", method] + option) == 2
        assert "goes with --method ga" in capsys.readouterr().err
    # the help is where a user (or a script trying every method with --seed) learns it
    assert "--method ga only" in _plan_help(option[0])
