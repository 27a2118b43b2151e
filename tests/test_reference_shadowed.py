"""A module reference whose name this process already imported from another folder
than the current directory's (the caller's own import, not resolve's) is refused,
rather than training the cached network while the plan and resume checks read the
current directory's file (found by stop 52's docs audit)."""
import importlib
import sys

import pytest

from meshpar.models import resolve

NET = '''
import meshpar  # noqa: F401
import mesh_tensorflow as mtf
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    filters: int = {filters}
    num_classes: int = 2


CONFIG = Config()


def input_shape(config):
    return (4, 4, 1)


def layout_rules(config, model_axis="model", batch_axis="batch"):
    return f"batch:{{batch_axis}}" if batch_axis else ""


def describe(config):
    raise NotImplementedError


def build(inputs, config, mesh=None, is_training=True):
    raise NotImplementedError
'''


@pytest.fixture
def two_folders(tmp_path, monkeypatch):
    name = "shadowed_net_s52"
    for folder, filters in (("a", 3), ("b", 5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{name}.py").write_text(NET.format(filters=filters))
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    importlib.invalidate_caches()
    yield tmp_path, name
    sys.modules.pop(name, None)


def test_a_module_the_caller_imported_from_elsewhere_is_refused_here(two_folders,
                                                                    monkeypatch):
    tmp_path, name = two_folders
    importlib.import_module(name)  # the caller's own import, from folder a
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ValueError, match="imported .* before, and .* holds another"):
        resolve(f"{name}:CONFIG")
    # the file itself is unambiguous
    assert resolve(f"{name}.py").config.filters == 5


def test_the_module_imported_from_the_current_directory_is_taken(two_folders,
                                                                 monkeypatch):
    tmp_path, name = two_folders
    monkeypatch.chdir(tmp_path / "a")
    importlib.import_module(name)
    assert resolve(f"{name}:CONFIG").config.filters == 3


def test_a_folder_whose_name_holds_a_colon_is_part_of_the_path(tmp_path, monkeypatch):
    from meshpar.models.reference import parse_reference

    folder = tmp_path / "run:1"
    folder.mkdir()
    (folder / "colon_net_s52.py").write_text(NET.format(filters=4))
    monkeypatch.chdir(tmp_path)
    assert parse_reference("run:1/colon_net_s52.py") == ("file", "run:1/colon_net_s52.py", None)
    assert parse_reference("run:1/colon_net_s52.py:CONFIG").attr == "CONFIG"
    assert resolve("run:1/colon_net_s52.py").config.filters == 4
