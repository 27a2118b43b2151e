"""README.rst's "Supported versions" names what setup.py installs: its Python range
and the TensorFlow and mesh-tensorflow versions it pins. The README said
"TensorFlow 2.12-2.15", which setup.py (tensorflow-cpu==2.15.1) never installs
and no test ran on."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _section(title):
    text = (ROOT / "README.rst").read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    end = text.index("\n---", start + len(title) + 2 + len(title) + 2)
    return " ".join(text[start:end].split())


def test_supported_versions_are_the_pinned_ones():
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    tf = re.search(r'"tensorflow-cpu==([\d.]+)"', setup).group(1)
    mtf = re.search(r'"mesh-tensorflow==([\d.]+)"', setup).group(1)
    low, high = re.search(r'python_requires=">=3\.(\d+),<3\.(\d+)"', setup).groups()
    text = _section("Supported versions")
    assert f"Python 3.{low}-3.{int(high) - 1} with TensorFlow {tf} and mesh-tensorflow {mtf}" \
        in text, text
