"""``train``/``predict --devices``: the help offered "empty for the default
device", but an empty entry is refused (``--devices ,``: "expected
comma-separated device strings, none empty"). Found walking the docs as a new
user. The help now says what is taken, and what happens without the flag."""
import argparse

import pytest

from meshpar.cli import build_parser
from meshpar.cli.parsing import device_strings


def _devices_help(command):
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (action,) = [a for a in sub.choices[command]._actions if "--devices" in a.option_strings]
    return action.help


@pytest.mark.parametrize("command", ["train", "predict"])
def test_devices_help_matches_what_is_accepted(command):
    text = _devices_help(command)
    with pytest.raises(argparse.ArgumentTypeError, match="none empty"):
        device_strings(",")
    with pytest.raises(argparse.ArgumentTypeError):
        device_strings("/cpu:0,,/cpu:0")
    assert "empty for" not in text and "none empty" in text
    assert device_strings("/gpu:0,/gpu:1") == "/gpu:0,/gpu:1"  # the help's example
    assert "/gpu:0,/gpu:1" in text and "default" in text
