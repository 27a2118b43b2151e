"""oneDNN CPU kernels on by default (meshpar/_onednn.py): set before TensorFlow is
imported, a user's own setting kept, nothing changed once TensorFlow is imported."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, os, sys
{first}
import meshpar
from meshpar import _onednn
print(json.dumps({{"env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "on": _onednn.enabled()}}))
"""


def _probe(first: str = "", **env_override) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(env_override, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_meshpar_turns_the_kernels_on():
    assert _probe() == {"env": "1", "on": True}


def test_the_users_setting_is_kept():
    assert _probe(TF_ENABLE_ONEDNN_OPTS="0") == {"env": "0", "on": False}


def test_nothing_changes_when_tensorflow_came_first():
    # TensorFlow read the setting at its import: setting it afterwards would only lie
    assert _probe(first="import tensorflow")["env"] is None


def test_default_on_sets_only_an_unset_variable(monkeypatch):
    from meshpar import _onednn

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.setenv(_onednn.ENV, "0")
    assert _onednn.default_on() is False and os.environ[_onednn.ENV] == "0"
    monkeypatch.delenv(_onednn.ENV)
    assert _onednn.default_on() is True and os.environ[_onednn.ENV] == "1"
