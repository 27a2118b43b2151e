"""The two Python examples of README.rst run as written.

Each ``.. code-block:: python`` under the sections "An uneven mesh in ten
lines" and "Planning and estimator training in ten lines" is extracted and
executed in a fresh namespace (the second in a temporary working directory:
it writes ``plan.json``, a small phantom dataset and a checkpoint directory).
"""
import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.rst"


def python_block(title: str) -> str:
    """The first ``code-block:: python`` after the section heading ``title``."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n" + title + "\n")
    match = re.search(r"\.\. code-block:: python\n\n((?:(?:    .*)?\n)+)", text[start:])
    assert match, f"no python block under {title!r}"
    return textwrap.dedent(match.group(1))


def test_readme_has_both_examples():
    for title in ("An uneven mesh in ten lines", "Planning and estimator training in ten lines"):
        assert "import" in python_block(title)


def test_uneven_mesh_example_runs_and_splits_unevenly():
    import meshpar  # noqa: F401  (mesh_tensorflow after meshpar)
    import mesh_tensorflow as mtf
    import numpy as np
    import tensorflow.compat.v1 as tf

    ns = {"__name__": "readme_example_1"}
    exec(compile(python_block("An uneven mesh in ten lines"), "README.rst", "exec"), ns)
    impl = ns["impl"]
    assert impl.split_sizes(mtf.Dimension("filters", 13)) == [7, 4, 2]
    assert impl.split_sizes(mtf.Dimension("batch", 6)) == [4, 2]
    lowering, y_tf = ns["lowering"], ns["y_tf"]
    with y_tf.graph.as_default():
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            out, w = sess.run([y_tf, tf.global_variables()[0]])
    assert out.shape == (6, 13)
    np.testing.assert_allclose(out, np.ones((6, 5)) @ w, rtol=1e-5, atol=1e-5)


def test_planning_and_training_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "readme_example_2"}
    exec(compile(python_block("Planning and estimator training in ten lines"), "README.rst",
                 "exec"), ns)
    assert (tmp_path / "plan.json").is_file()
    assert (tmp_path / "phantoms" / "labels.csv").is_file()
    assert ns["estimator"].get_variable_value("global_step") == 10
