"""A network with an odd size at a strided convolution predicts and evaluates.

``_layers.pad_to_even`` zero-pads an odd spatial size by one before a strided
convolution or pooling. It padded with ``mtf.pad``: a TF ``Pad`` op, which TF
2.15's oneDNN CPU kernels fold into a ``Conv3D`` that is its only consumer, and
the fused op returned the unpadded input's shape. A training step hides it (the
filter gradient reads the padded tensor too), so a ResAttNet of one's own on
9x7x2 volumes (``ResAttNet3DConfig(input_shape=...)`` through ``--model
PATH.py:ATTR``) trained, but its validation in ``meshpar train --val-fraction``
and ``meshpar predict`` stopped with a traceback: "Incompatible shapes: [5] vs.
[3,5,4,1,3]" in ``s1b0/bn1``. The zeros are now concatenated; the training
step is the same bit for bit. The same holds for any network that pads
(``mtf.pad``) before a 3-D convolution: on a ``HeterogeneousMeshImpl`` each
slice's pad is now a concatenation with zeros (``meshpar.core.lowering``).
"""
import contextlib
import csv
import io
import json

import numpy as np
import pytest

from meshpar.cli import main

NET = '''"""A ResAttNet of 9x7x2 volumes: odd sizes, and a 1-voxel edge after the stem's pooling."""
from meshpar.models.resattnet3d import ResAttNet3DConfig, build, describe, layout_rules  # noqa: F401

CONFIG = ResAttNet3DConfig(input_shape=(9, 7, 2), stem_filters=3, stage_filters=(3, 5),
                           attention_stages=(1,), name="oddres")
'''
SHAPE = (9, 7, 2)


def test_pad_to_even_pads_odd_sizes_with_zeros_at_the_end():
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    from meshpar.core.mesh_impl import HeterogeneousMeshImpl
    from meshpar.models._layers import pad_to_even

    value = np.arange(2 * 5 * 4 * 1 * 3, dtype=np.float32).reshape(2, 5, 4, 1, 3)
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "m")
        names = ["batch", "d", "h", "w", "c"]
        x = mtf.import_tf_tensor(mesh, tf.constant(value), mtf.Shape(
            [mtf.Dimension(n, s) for n, s in zip(names, value.shape)]))
        y = pad_to_even(x, ["d", "h", "w"])
        lowering = mtf.Lowering(graph, {mesh: HeterogeneousMeshImpl(
            "batch:2", "batch:batch", ["", ""], split_weights={"batch": [3, 1]})})
        with tf.Session() as session:
            got = session.run(lowering.export_to_tf_tensor(y))
    np.testing.assert_array_equal(got, np.pad(value, [(0, 0), (0, 1), (0, 0), (0, 1), (0, 0)]))


MESHES = [
    ("all:1", "", None),
    ("batch:2", "batch:batch", {"batch": [3, 1]}),
    ("batch:2;model:2", "batch:batch;f:model", {"batch": [1, 1], "model": [4, 1]}),
]


def _processors(mesh_shape):
    return int(np.prod([int(axis.split(":")[1]) for axis in mesh_shape.split(";")]))


def _conv_after(transform, value, reference, kernel, strides, mesh_shape, layout, weights):
    """``(got, want)``: ``transform`` (mtf ops on the input) then a 3-D convolution with
    ``kernel``, lowered on a ``HeterogeneousMeshImpl`` and fed ``value``, run forward
    only; and TF's own convolution of ``reference`` (the transformed input made in
    numpy and fed through a placeholder, so no Pad op reaches oneDNN)."""
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    with tf.Graph().as_default():
        tf.set_random_seed(0)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "m")
        fed = tf.placeholder(tf.float32, value.shape)  # a constant would be folded
        x = mtf.import_tf_tensor(mesh, fed, mtf.Shape(
            [mtf.Dimension(n, s) for n, s in zip(["batch", "d", "h", "w", "c"], value.shape)]))
        y = mtf.layers.conv3d(transform(x), mtf.Dimension("f", kernel.shape[-1]),
                              kernel.shape[:3], strides=strides, padding="SAME",
                              filter_initializer=tf.constant_initializer(kernel))
        impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * _processors(mesh_shape),
                                     split_weights=weights)
        lowering = mtf.Lowering(graph, {mesh: impl})
        out = lowering.export_to_tf_tensor(y)
        plain = tf.placeholder(tf.float32, reference.shape)
        want = tf.nn.conv3d(plain, tf.constant(kernel), [1, *strides, 1], "SAME")
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            session.run(lowering.copy_masters_to_slices())
            return session.run(out, {fed: value}), session.run(want, {plain: reference})


@pytest.mark.parametrize("mesh_shape, layout, weights", MESHES)
def test_a_pad_before_a_convolution_predicts_on_every_mesh(mesh_shape, layout, weights):
    """A network of one's own that pads (``mtf.pad``) before a strided 3-D
    convolution, run forward only (prediction): each slice's pad is a
    concatenation with zeros, so oneDNN's fused Pad + Conv3D never runs."""
    import mesh_tensorflow as mtf

    rng = np.random.default_rng(1)
    value = rng.normal(size=(4, 5, 4, 1, 3)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 3, 3, 5)).astype(np.float32)
    got, want = _conv_after(
        lambda x: mtf.pad(mtf.pad(x, [1, 2], "d"), [0, 1], "w"), value,
        np.pad(value, [(0, 0), (1, 2), (0, 0), (0, 1), (0, 0)]), kernel, (2, 2, 2),
        mesh_shape, layout, weights)
    assert got.shape == (4, 4, 2, 1, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mesh_shape, layout, weights", MESHES)
@pytest.mark.parametrize("offset", [2, -1])
def test_a_shift_before_a_convolution_predicts_on_every_mesh(mesh_shape, layout, weights,
                                                             offset):
    """``mtf.shift`` (no wrap) along a dimension no mesh splits, then a 3-D
    convolution, forward only: upstream shifted each slice with TF's ``Pad``,
    which oneDNN folded into the ``Conv3D`` (a [4, 5, 4, 2, 3] input shifted by 2
    came out of the convolution as [4, 3, 4, 2, 3], the unshifted slice)."""
    import mesh_tensorflow as mtf

    rng = np.random.default_rng(2)
    value = rng.normal(size=(4, 5, 4, 2, 3)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 3, 3, 5)).astype(np.float32)
    shifted = np.zeros_like(value)
    if offset > 0:
        shifted[:, offset:] = value[:, :-offset]
    else:
        shifted[:, :offset] = value[:, -offset:]
    got, want = _conv_after(lambda x: mtf.shift(x, offset, x.shape.dims[1], wrap=False),
                            value, shifted, kernel, (1, 1, 1), mesh_shape, layout, weights)
    assert got.shape == (4, 5, 4, 2, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The network's file, 9x7x2 NIfTI subjects, and a 2-step run that validates."""
    import nibabel as nib

    root = tmp_path_factory.mktemp("odd")
    (root / "oddres.py").write_text(NET, encoding="utf-8")
    (root / "data" / "subjects").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = ["subject,label"]
    for i in range(7):
        path = f"subjects/s{i}.nii.gz"
        nib.save(nib.Nifti1Image(rng.normal(size=SHAPE).astype(np.float32), np.eye(4)),
                 str(root / "data" / path))
        rows.append(f"{path},{'AD' if i % 2 else 'NC'}")
    (root / "data" / "labels.csv").write_text("\n".join(rows) + "\n")
    argv = ["train", "--data", root / "data", "--model", f"{root / 'oddres.py'}:CONFIG",
            "--batch", 2, "--steps", 2, "--val-fraction", 0.3, "--augment", "none",
            "--no-progress", "--model-dir", root / "run", "--json",
            "--speeds", "1,0.4", "--mesh", "batch:2"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in argv]) == 0  # validation: an evaluation graph
    return root, json.loads(out.getvalue().strip().splitlines()[-1])


def _predict(root, name, mesh=()):
    out = root / f"{name}.csv"
    assert main([str(a) for a in ["predict", "--model-dir", root / "run", "--data",
                                  root / "data", "--out", out, *mesh]]) == 0
    with open(out, newline="") as f:
        return {row["path"]: float(row["p_AD"]) for row in csv.DictReader(f)}


def test_a_network_of_odd_volumes_validates_and_predicts_alike_on_every_mesh(trained):
    trained, summary = trained
    assert summary["validation_samples"] == 2 and np.isfinite(summary["eval_loss"]), summary
    one = _predict(trained, "one")
    assert len(one) == 7 and all(0.0 <= p <= 1.0 for p in one.values())
    for name, mesh in [("model", ["--speeds", "1,0.4", "--mesh", "model:2", "--batch", "3"]),
                       ("hybrid", ["--speeds", "0.3,1,0.6,0.5", "--mesh", "batch:2;model:2"])]:
        got = _predict(trained, name, mesh)
        assert sorted(got) == sorted(one), name
        for path, p in one.items():
            assert got[path] == pytest.approx(p, abs=1e-5), (name, path)
