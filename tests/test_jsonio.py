"""meshpar.planning.jsonio: JSON files with errors that name the file, and atomic writes."""
import json
import os

import pytest

from meshpar.planning import jsonio
from meshpar.planning.jsonio import load_json, save_json_atomic


def test_saved_json_loads_back_with_a_final_newline(tmp_path):
    path = tmp_path / "plan.json"
    save_json_atomic(path, {"b": [1, 2.5], "a": None})
    assert load_json(path, "plan file") == {"b": [1, 2.5], "a": None}
    assert path.read_text(encoding="utf-8").endswith("}\n")


def test_missing_file_error_names_the_file_and_what_it_is(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match=r"cluster file .*nope\.json does not exist"):
        load_json(path, "cluster file")


def test_invalid_json_error_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"plan file .*broken\.json: not valid JSON"):
        load_json(path, "plan file")


def test_a_directory_or_binary_file_is_a_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        load_json(tmp_path, "plan file")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"bin\.json: not UTF-8"):
        load_json(binary, "plan file")


def test_unserialisable_data_leaves_the_existing_file_and_no_temp_files(tmp_path):
    path = tmp_path / "cluster.json"
    save_json_atomic(path, {"old": 1})
    with pytest.raises(TypeError):
        save_json_atomic(path, {"new": object()})
    assert json.loads(path.read_text(encoding="utf-8")) == {"old": 1}
    assert os.listdir(tmp_path) == ["cluster.json"]


def test_a_failed_rename_leaves_the_existing_file_and_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "cluster.json"
    save_json_atomic(path, {"old": 1})

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(jsonio.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        save_json_atomic(path, {"new": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"old": 1}
    assert os.listdir(tmp_path) == ["cluster.json"]


def test_overwrite_keeps_the_permissions_of_the_replaced_file(tmp_path):
    path = tmp_path / "plan.json"
    save_json_atomic(path, {"v": 1})
    os.chmod(path, 0o640)
    save_json_atomic(path, {"v": 2})
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert load_json(path) == {"v": 2}


def test_missing_directory_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        save_json_atomic(tmp_path / "no" / "plan.json", {})


def test_strict_json_writes_null_for_what_json_cannot_hold():
    import json
    import math

    import numpy as np

    from meshpar.planning.jsonio import dumps_strict, strict_json

    data = {"auc": math.nan, "p": [1.5, -math.inf, np.float32("nan"), np.float64(2.0)],
            "n": np.int64(3), "ok": True, "nested": ({"x": math.inf},), "name": "NaN"}
    assert strict_json(data) == {"auc": None, "p": [1.5, None, None, 2.0], "n": 3, "ok": True,
                                 "nested": [{"x": None}], "name": "NaN"}
    text = dumps_strict(data)
    assert "NaN" not in text.replace('"NaN"', "") and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


# ------------------------------------------- write_atomic: PNGs, benchmark results, traces
def _interrupted(text):
    """A writer that gets half of ``text`` out and is then interrupted."""
    def write(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[: len(text) // 2])
        raise KeyboardInterrupt
    return write


def test_an_interrupted_write_keeps_the_earlier_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "accuracy.json"
    path.write_text("earlier\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        jsonio.write_atomic(path, _interrupted("a much longer new result\n"))
    assert path.read_text(encoding="utf-8") == "earlier\n"
    assert os.listdir(tmp_path) == ["accuracy.json"]


def test_an_interrupted_benchmark_save_keeps_the_earlier_result(tmp_path, monkeypatch):
    """bench's train.json (hours of runs) was opened for writing, truncated, before the
    new result was written: an interrupted or failed write lost the earlier one."""
    from meshpar.bench import results

    results.save_result({"benchmark": "train", "rows": [1]}, str(tmp_path), "train")
    earlier = (tmp_path / "train.json").read_text(encoding="utf-8")
    monkeypatch.setattr(jsonio, "_write_text", lambda path, text: _interrupted(text)(path))
    with pytest.raises(KeyboardInterrupt):
        results.save_result({"benchmark": "train", "rows": [1, 2]}, str(tmp_path), "train")
    assert (tmp_path / "train.json").read_text(encoding="utf-8") == earlier
    assert sorted(os.listdir(tmp_path)) == ["train.json"]


def test_a_figure_that_fails_to_save_keeps_the_earlier_png(tmp_path):
    """savefig wrote straight into the PNG: one that failed part-way left it cut."""
    from meshpar.viz import _pyplot, save_figure

    plt = _pyplot()
    path = tmp_path / "plan.png"
    fig = plt.figure(figsize=(2, 2))
    save_figure(fig, path)
    earlier = path.read_bytes()
    assert earlier.startswith(b"\x89PNG")

    def broken(target, **kwargs):
        with open(target, "wb") as f:
            f.write(earlier[:10])
        raise OSError("No space left on device")

    fig.savefig = broken
    with pytest.raises(OSError, match="No space left"):
        save_figure(fig, path)
    plt.close(fig)
    assert path.read_bytes() == earlier
    assert os.listdir(tmp_path) == ["plan.png"]


def test_a_figure_path_without_an_extension_is_still_a_png(tmp_path):
    from meshpar.viz import _pyplot, save_figure

    plt = _pyplot()
    fig = plt.figure(figsize=(2, 2))
    save_figure(fig, tmp_path / "plan")
    plt.close(fig)
    assert (tmp_path / "plan").read_bytes().startswith(b"\x89PNG")
