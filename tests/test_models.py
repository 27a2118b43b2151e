"""meshpar.models: shapes, layer tables consistent with the graphs, layouts, uneven meshes."""
import subprocess
import sys

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from meshpar.models import ResAttNet3DConfig, VggCifarConfig, resattnet3d, vgg_cifar
from mtf_helpers import run_lowered

ONE_THREAD = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)

TINY_3D = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=5, stage_filters=(5, 7),
                                  attention_stages=(1,), name="tiny3d")
TINY_VGG = VggCifarConfig.small(image_shape=(8, 8), filters=(5, 7), pool_every=1,
                                dense_units=(7,), num_classes=3, name="tiny-vgg")
TINY_VGG_PAIRS = VggCifarConfig.small(image_shape=(8, 8), filters=(5, 7, 6, 4), pool_every=2,
                                      dense_units=(7,), num_classes=3, split_pairs=True,
                                      name="tiny-vgg-pairs")


@pytest.fixture(autouse=True)
def tf_graph():
    """Every test builds in its own TF1 graph (graph mode, not eager)."""
    with tf.Graph().as_default() as graph:
        yield graph


def _build_graph(module, config, batch=3, seed=1, is_training=True):
    """Build (not lower) the model; return (mtf graph, mesh, logits, update ops)."""
    tf.set_random_seed(seed)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    shape = (batch,) + models.input_shape(config)
    x = tf.constant(np.random.RandomState(seed).randn(*shape).astype(np.float32))
    logits, updates = module.build(x, config, mesh=mesh, is_training=is_training)
    return graph, mesh, logits, updates


def _graph_dims(graph):
    return {d.name: d.size for op in graph.operations for t in op.outputs for d in t.shape.dims}


def _run_logits(module, config, impl, batch=5):
    with tf.Graph().as_default():
        return _run_logits_in_graph(module, config, impl, batch)


def _run_logits_in_graph(module, config, impl, batch):
    graph, mesh, logits, _ = _build_graph(module, config, batch=batch)
    lowering = mtf.Lowering(graph, {mesh: impl})
    out = lowering.export_to_tf_tensor(logits)
    with tf.Session(config=ONE_THREAD) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        return sess.run(out)


@pytest.mark.parametrize("module,config", [
    (resattnet3d, TINY_3D), (resattnet3d, ResAttNet3DConfig.small()),
    (resattnet3d, ResAttNet3DConfig.full()), (vgg_cifar, TINY_VGG),
    (vgg_cifar, VggCifarConfig.cifar10())])
def test_describe_params_and_split_dims_match_the_built_graph(module, config):
    graph, _, logits, updates = _build_graph(module, config, batch=2)
    description = module.describe(config)
    assert description.params == sum(v.size for v in graph.trainable_variables)
    dims = _graph_dims(graph)
    for name, size in description.split_dims.items():
        assert dims[name] == size, name
    assert logits.shape.to_integer_list == [2, config.num_classes]
    if module is resattnet3d:  # two moving averages per batch norm
        norms = [layer for layer in description.layers if layer.kind == "norm"]
        assert len(updates) == 2 * len(norms)


@pytest.mark.parametrize("module,config", [(resattnet3d, ResAttNet3DConfig.small()),
                                           (resattnet3d, ResAttNet3DConfig.full()),
                                           (vgg_cifar, VggCifarConfig.cifar10())])
def test_layout_rules_put_every_filter_key_value_and_unit_dim_on_the_model_axis(module, config):
    graph, _, _, _ = _build_graph(module, config, batch=2)
    splittable = {name for name in _graph_dims(graph)
                  if name.endswith(("_filters", "_key", "_value", "_units"))}
    rules = dict(rule.split(":") for rule in module.layout_rules(config).split(";"))
    assert rules.pop("batch") == "batch"
    assert set(rules) == splittable
    assert set(rules.values()) == {"model"}
    assert module.layout_rules(config, model_axis="m", batch_axis=None).startswith(
        f"{module.split_dim_names(config)[0]}:m")


def test_stem_conv_flops_are_two_times_kernel_channels_and_positions():
    table = resattnet3d.describe(ResAttNet3DConfig.small())
    stem = table.layers[0]
    assert stem.flops == 2 * 27 * 1 * 8 * 32 ** 3
    assert (stem.split_dim, stem.split_size) == ("stem_filters", 8)
    attention = [layer for layer in table.layers if layer.kind == "attention"]
    assert [layer.comm for layer in attention] == ["allreduce", "allreduce"]
    assert attention[0].split_size == 16  # 32 channels * key ratio 0.5


def test_odd_volume_downsamples_like_tf_same_padding():
    config = ResAttNet3DConfig.small(input_shape=(7, 9, 10), stem_filters=3,
                                     stage_filters=(3, 4), attention_stages=(1,))
    graph, _, logits, _ = _build_graph(resattnet3d, config, batch=2)
    positions = _graph_dims(graph)["s1att_pos"]
    assert positions == 2 * 3 * 3  # 7,9,10 -> pool 4,5,5 -> stride 2: 2,3,3
    table = resattnet3d.describe(config)
    attention = next(layer for layer in table.layers if layer.name == "s1att_qk")
    assert attention.out_elems == positions ** 2
    assert logits.shape.to_integer_list == [2, 2]


@pytest.mark.parametrize("module,config", [(resattnet3d, TINY_3D), (vgg_cifar, TINY_VGG),
                                           (vgg_cifar, TINY_VGG_PAIRS)])
def test_uneven_hybrid_mesh_gives_the_one_device_logits(module, config):
    one = _run_logits(module, config, HeterogeneousMeshImpl("all:1", "", [""]))
    hybrid = _run_logits(module, config, HeterogeneousMeshImpl(
        "batch:2;model:3", module.layout_rules(config), [""] * 6,
        split_weights={"batch": [2, 1], "model": [3, 2, 1]}))
    assert one.shape == (5, config.num_classes)
    np.testing.assert_allclose(hybrid, one, atol=1e-5)


def _weight_gradients(build, layout_rules):
    """Gradients of sum(logits^2) for every trainable variable, on one device and on
    an uneven 2 x 3 hybrid mesh laid out by ``layout_rules``. ``build(mesh)`` builds
    the model in the current graph and returns its logits."""
    def gradients(impl):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            loss = mtf.reduce_sum(mtf.square(build(mesh)))
            grads = mtf.gradients([loss], [v.outputs[0] for v in graph.trainable_variables])
            return run_lowered(graph, mesh, impl, grads)

    return (gradients(HeterogeneousMeshImpl("all:1", "", [""])),
            gradients(HeterogeneousMeshImpl("batch:2;model:3", layout_rules, [""] * 6,
                                            split_weights={"batch": [2, 1],
                                                           "model": [3, 2, 1]})))


def test_float64_gradients_on_an_uneven_hybrid_mesh_equal_one_device_to_rounding():
    """In float64 the uneven split changes nothing but rounding (~1e-14). In
    float32, batch-norm backward over large volumes amplifies reduction-order
    rounding (at 32^3, one device in float32 is itself ~0.5% off float64), so
    exact-parity checks use small volumes or float64. TF's CPU max-pool has no
    float64 kernel, hence no stem pool here."""
    config = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=5,
                                     stage_filters=(5, 7), attention_stages=(1,),
                                     stem_pool=False, name="tiny3d-f64")
    x = np.random.RandomState(0).randn(5, 8, 8, 8, 1)
    one, hybrid = _weight_gradients(
        lambda mesh: resattnet3d.build(tf.constant(x, tf.float64), config, mesh=mesh)[0],
        resattnet3d.layout_rules(config))
    assert len(one) == len(hybrid) > 20
    for want, got in zip(one, hybrid):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_eval_graph_uses_moving_averages_and_returns_no_updates():
    graph, _, _, updates = _build_graph(resattnet3d, TINY_3D, is_training=False)
    assert updates == []
    names = {v.name for v in graph.all_variables}
    assert any(name.endswith("stem_bn/moving_mean") for name in names)


def test_model_registry_names_and_bad_names():
    assert {"resattnet3d-small", "resattnet3d-full", "vgg-cifar"} <= set(models.names())
    spec = models.get("resattnet3d-small")
    assert spec.input_shape == (32, 32, 32, 1)
    assert spec.describe().name == "resattnet3d-small"
    with pytest.raises(ValueError, match="unknown model"):
        models.get("resnet-9000")


def test_the_wide_accuracy_model_is_small_48_with_one_and_a_half_times_the_channels():
    """``resattnet3d-wide-48`` (``meshpar evaluate``'s default) has small-48's layers,
    grid and split dimensions, every split dimension 1.5x as large."""
    small, wide = models.get("resattnet3d-small-48"), models.get("resattnet3d-wide-48")
    assert wide.input_shape == small.input_shape == (48, 48, 48, 1)
    s_dims, w_dims = small.describe().split_dims, wide.describe().split_dims
    assert set(w_dims) == set(s_dims)
    assert all(w_dims[d] == 3 * s_dims[d] // 2 for d in s_dims)
    assert [layer.name for layer in wide.describe().layers] == \
        [layer.name for layer in small.describe().layers]


@pytest.mark.parametrize("kwargs", [dict(input_shape=(8, 8)), dict(stage_filters=()),
                                    dict(attention_stages=(5,)),
                                    dict(attention_key_ratio=0)])
def test_bad_resattnet_configs_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        ResAttNet3DConfig.small(**kwargs)


def test_vgg_rejects_images_the_pools_cannot_halve():
    with pytest.raises(ValueError, match="divisible"):
        VggCifarConfig(image_shape=(30, 30))


def test_configs_and_layer_tables_import_no_tensorflow():
    code = ("import sys, meshpar.models as m; m.describe_model('resattnet3d-full'); "
            "m.get('vgg-cifar').layout_rules(); print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_split_pairs_keep_the_first_split_and_lay_out_only_its_filters():
    """Pairs (1, 2) and (3, 4): the second of each contracts over the first's split
    filters (its own filters are whole); no gather of a pair's first output."""
    assert vgg_cifar.split_dim_names(TINY_VGG_PAIRS) == ["conv1_filters", "conv3_filters",
                                                         "fc1_units"]
    graph, _, _, _ = _build_graph(vgg_cifar, TINY_VGG_PAIRS)
    dims = _graph_dims(graph)
    assert "conv1_channels" not in dims and "conv3_channels" not in dims
    assert "conv2_channels" in dims and "conv4_channels" in dims
    table = vgg_cifar.describe(TINY_VGG_PAIRS)
    second = next(layer for layer in table.layers if layer.name == "conv2")
    assert (second.split_dim, second.comm) == ("conv1_filters", "allreduce")
    # An odd conv whose output pools cannot start a pair: pool_every=1 pairs nothing.
    unpaired = VggCifarConfig.small(image_shape=(8, 8), filters=(5, 7), pool_every=1,
                                    split_pairs=True)
    assert vgg_cifar.split_dim_names(unpaired) == vgg_cifar.split_dim_names(
        VggCifarConfig.small(image_shape=(8, 8), filters=(5, 7), pool_every=1))


def test_split_pairs_gradients_on_an_uneven_hybrid_mesh_equal_one_device():
    """The backward of a pair (input gradient of the second stays split, the first's
    is all-reduced) gives one device's weight gradients."""
    x = np.random.RandomState(1).randn(5, 8, 8, 3).astype(np.float32)
    one, hybrid = _weight_gradients(
        lambda mesh: vgg_cifar.build(tf.constant(x), TINY_VGG_PAIRS, mesh=mesh).logits,
        vgg_cifar.layout_rules(TINY_VGG_PAIRS))
    assert len(one) == len(hybrid) == 12  # 4 convs and 2 dense layers, kernel and bias
    for want, got in zip(one, hybrid):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_every_model_name_is_in_the_help_and_an_alias_names_the_same_model():
    from meshpar import models

    shown = models.names_for_help()
    for name in models.names():
        assert name in shown
    for alias, name in models.ALIASES.items():
        assert f"{alias} = {name}" in shown and shown.count(f"{alias},") == 0
        assert models.get(alias).config == models.get(name).config
