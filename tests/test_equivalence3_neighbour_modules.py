"""Two networks of one's own in one process, each importing a neighbour module of the
same name from its own folder (``from blocks import FILTERS``), get each its own
neighbour: docs/training.md puts a file's directory on ``sys.path`` while it is
imported "so its neighbours import". Before, the second file got the first file's
``blocks`` (cached in ``sys.modules``) and so another network than its own, in
silence. The same file read twice is still one module."""
import pytest

from meshpar.models import resolve


@pytest.fixture
def folders(tmp_path):
    from test_custom_model_cli import TINY3D

    net = TINY3D.replace("    filters: tuple = (5, 3)", "    filters: tuple = FILTERS").replace(
        "import tensorflow.compat.v1 as tf\n",
        "import tensorflow.compat.v1 as tf\nfrom blocks import FILTERS\n", 1)
    assert "FILTERS\n" in net and "= FILTERS" in net
    made = {}
    for name, filters in (("a", (5, 3)), ("b", (4, 2))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "net.py").write_text(net, encoding="utf-8")
        (folder / "blocks.py").write_text(f"FILTERS = {filters!r}\n", encoding="utf-8")
        made[name] = folder
    return made


def test_each_file_gets_its_own_neighbour_module(folders):
    a, b = folders["a"], folders["b"]
    first, second = resolve(str(a / "net.py")), resolve(str(b / "net.py"))
    assert first.config.filters == (5, 3)
    assert second.config.filters == (4, 2)  # was (5, 3): a's blocks
    (a / "net2.py").write_text((a / "net.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert resolve(str(a / "net2.py")).config.filters == (5, 3)  # a's again, after b's
    sizes = {layer.split_dim: layer.split_size for layer in second.describe().layers}
    assert sizes["conv1_filters"] == 4  # the layer table the planner prices: b's too
    again = resolve(f"{b / 'net.py'}:Config")  # the same file: the same module
    assert again.module is second.module and again.config.filters == (4, 2)


def test_a_module_reference_is_found_in_each_current_directory(folders, monkeypatch):
    """``--model net:Config`` names a module found in the current directory first: in
    one process that moves from folder a to folder b it is b's net, not a's cached
    one (before: a's, whose blocks gave (5, 3)), and a's again back in a."""
    import sys

    for name in ("net", "blocks"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    seen = []
    for folder in ("a", "b", "a"):
        monkeypatch.chdir(folders[folder])
        spec = resolve("net:Config")
        seen.append((spec.config.filters, spec.reference))
    assert seen == [((5, 3), "net:Config"), ((4, 2), "net:Config"), ((5, 3), "net:Config")]
    for name in ("net", "blocks"):
        sys.modules.pop(name, None)
