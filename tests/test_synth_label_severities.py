"""Phantom classes must differ: a known group name and a name placed by its position
in the label set could get one atrophy severity (``AD,control``: both 1.0), and
`meshpar data synth` wrote two classes that differ in nothing, in silence."""
import json

import pytest

from meshpar.cli import main
from meshpar.data.phantoms import write_dataset


@pytest.mark.parametrize("labels", [("AD", "control"), ("control", "NC"), ("NC", "CN"),
                                    ("NC", "AD", "z")])
def test_classes_of_one_severity_are_refused(tmp_path, labels):
    out = tmp_path / "d"
    with pytest.raises(ValueError, match="same atrophy severity"):
        write_dataset(out, 8, shape=(8, 8, 8), label_set=labels)
    assert not out.exists() or not any(out.iterdir())


def test_cli_names_the_two_labels(tmp_path, capsys):
    assert main(["data", "synth", "--out", str(tmp_path / "d"), "--n", "4", "--shape",
                 "8,8,8", "--labels", "AD,control"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("meshpar data synth: error: labels 'AD' and 'control'")
    assert len(err.splitlines()) == 1


def test_distinct_or_unused_classes_still_write(tmp_path):
    """control/NC by position: 0 and 1 apart; a second label with no share may collide."""
    write_dataset(tmp_path / "a", 4, shape=(8, 8, 8), label_set=("control", "AD"))
    truth = json.loads((tmp_path / "a" / "phantoms.json").read_text())
    assert truth["counts"] == {"control": 2, "AD": 2}
    write_dataset(tmp_path / "b", 2, shape=(8, 8, 8), label_set=("NC", "CN"), fractions=(1, 0))
    assert json.loads((tmp_path / "b" / "phantoms.json").read_text())["counts"]["NC"] == 2
