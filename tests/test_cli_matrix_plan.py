"""``meshpar plan`` as a script probing it would: each flag's help against what the
command does with it."""
import argparse
import json

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


def test_a_plan_that_splits_nothing_on_model_keeps_even_weights_there(capsys):
    # vgg-cifar-small at batch 4 on model:2: the GA replicates every layer, so the model
    # axis splits nothing; its weights were the GA's free gene (0.35 for the 0.9 device,
    # 0.78 for the 0.3 one), printed by plan and train as if they split the work
    assert main(["plan", "--speeds", "0.3,0.9", "--model", "vgg-cifar-small", "--batch", "4",
                 "--mesh", "batch:1;model:2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])
    on_model = [dim for dim, axis in plan["layout"] if axis == "model"]
    assert on_model == [] and list(plan["split_sizes"]) == ["batch"]
    assert plan["split_weights"]["model"] == [1.0, 1.0]
