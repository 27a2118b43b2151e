"""Docs against code, sweep 7: what README.rst and docs/*.md say a command, a file or
an API does, checked against what it does."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bullet(path: str, start: str) -> str:
    """The Markdown list item of ``path`` that begins with ``start``, its lines joined."""
    text = (ROOT / path).read_text(encoding="utf-8")
    begin = text.index(f"- {start}")
    end = re.search(r"\n(?:- |\n|#)", text[begin + 2:])
    return " ".join(text[begin:begin + 2 + (end.start() if end else len(text))].split())


def test_measuring_md_says_the_profile_runs_as_training_does(monkeypatch):
    """docs/measuring.md's bullet on op determinism opened with "the profile runs
    without" (determinism, so with Grappler's arithmetic optimizer), which 00c7b20
    changed: a cluster profile now times its steps as ``meshpar train`` runs them."""
    from meshpar.runtime.client import training_determinism

    monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)
    assert training_determinism() is True  # what profile_cluster_workers() defaults to
    bullet = _bullet("docs/measuring.md", "**Op determinism and Grappler's arithmetic")
    assert "the profile runs without" not in bullet, bullet[:300]
    assert "Since stop 56 the profile runs as training does" in bullet
