"""Every flag of every ``meshpar`` command and action says what it does in
``--help``, and a flag whose default is a value says that value.

Found by a new user's walk through the docs: ``plan --method``, ``train
--optimizer``, ``bench * --seed`` and ``--no-plot`` and ``data check``'s
directory were listed in ``--help`` with no words at all, and ``plan
--generations``/``--population`` and ``bench hetero --steps`` hid their
defaults behind ``None``.
"""
import argparse

import pytest

from meshpar.cli import build_parser


def _actions(parser, prog="meshpar"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{prog} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield prog, action


def _name(action):
    return "/".join(action.option_strings) or action.dest


ACTIONS = list(_actions(build_parser()))


def test_every_flag_has_help_text():
    missing = [f"{prog} {_name(a)}" for prog, a in ACTIONS
               if a.help is None or not str(a.help).strip()]
    assert missing == []


# Flags whose parser default is None but whose value then comes from elsewhere: the
# help must say what that value is (the planner's, the benchmark's own).
HIDDEN_DEFAULTS = {("meshpar plan", "--generations"): "200",
                   ("meshpar plan", "--population"): "32",
                   ("meshpar bench hetero", "--steps"): "7"}


@pytest.mark.parametrize("prog,flag", sorted(HIDDEN_DEFAULTS))
def test_defaults_set_elsewhere_are_stated(prog, flag):
    (action,) = [a for p, a in ACTIONS if p == prog and flag in a.option_strings]
    assert "default" in action.help and HIDDEN_DEFAULTS[prog, flag] in action.help


def test_every_value_default_is_stated():
    """A default that is a value (not None, not a switch's False) appears in the help."""
    unstated = []
    for prog, a in ACTIONS:
        if a.help == argparse.SUPPRESS or isinstance(a, (argparse._StoreTrueAction,
                                                         argparse._StoreFalseAction)):
            continue
        if a.default in (None, "", argparse.SUPPRESS):
            continue
        help_text = a.help or ""
        text = help_text % {"default": a.default} if "%(default)" in help_text else help_text
        if "default" not in text.lower():
            unstated.append(f"{prog} {_name(a)} (default {a.default!r})")
    assert unstated == []


def test_documented_defaults_are_the_real_ones():
    """The values the help states for ga's generations and population are plan_ga's."""
    import inspect

    from meshpar.planning.planners.ga import plan_ga

    params = inspect.signature(plan_ga).parameters
    assert str(params["generations"].default) == HIDDEN_DEFAULTS["meshpar plan", "--generations"]
    assert str(params["population"].default) == HIDDEN_DEFAULTS["meshpar plan", "--population"]
