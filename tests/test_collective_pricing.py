"""The cost model's bytes per collective against the bytes the lowered training
graph really sends between devices.

Each case builds a model's training step (loss, gradients, optimizer update,
batch-norm averages: ``meshpar.training.estimator.lower_model``, as ``meshpar
train`` does) on a mesh of device strings in one process and counts, in the
lowered TF graph, every tensor that an op on one mesh device reads from an op
on another: TF's partitioner sends each such (tensor, receiving device) pair
once. Only the step's ops are counted (walked back from the updates and the
loss); the input batch lives on a host device outside the mesh, so feeding it
is not counted (the cost model does not price the input pipeline). The
prediction is :meth:`CostModel.traffic` for the same plan: the two must be
equal, byte for byte, per mesh axis.
"""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core.splits import split_sizes
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.plan import parse_mesh_shape
from meshpar.training import estimator as E

HOST = "/job:host/device:CPU:0"


def _step_ops(fetches):
    seen, stack = set(), [f if isinstance(f, tf.Operation) else f.op for f in fetches]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    return seen


def _spec(model):
    """A registered name's ModelSpec, or ``model`` itself (a spec with overrides)."""
    # by the name's type: tests/test_graph_forward_collectives.py stands in for models.get
    return models.get(model) if isinstance(model, str) else model


def counted_bytes(name, mesh_shape, layout, weights, batch):
    """Bytes the lowered step sends between mesh devices: (model axis, batch axis).
    ``name``: a registered model or a ModelSpec."""
    spec = _spec(name)
    axes = dict(parse_mesh_shape(mesh_shape))
    cols = axes.get("model", 1)
    n = axes.get("batch", 1) * cols
    devices = [f"/device:CPU:{i}" for i in range(n)]
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        with tf.device(HOST):
            features = tf.zeros((batch,) + spec.input_shape, tf.float32)
            labels = tf.zeros([batch], tf.int32)
        mesh = E.MeshSpec(mesh_shape, layout, devices, weights)
        lowering, _, loss, updates = E.lower_model(spec, features, labels, mesh, True,
                                                   "sgd", 0.1)
        ops = _step_ops(list(updates) + [lowering.export_to_tf_tensor(loss)])
        sent = {}
        for op in ops:
            if op.device not in devices:
                continue
            for t in op.inputs:
                if t.op.device in devices and t.op.device != op.device:
                    sent[(t.name, op.device)] = (t, t.op.device, op.device)
    by_axis = {"model": 0, "batch": 0}
    for t, src, dst in sent.values():
        a, b = devices.index(src), devices.index(dst)
        nbytes = int(np.prod(t.shape.as_list())) * t.dtype.size
        if a // cols == b // cols:
            by_axis["model"] += nbytes
        elif a % cols == b % cols:
            by_axis["batch"] += nbytes
        else:
            raise AssertionError(f"{t.name} crosses both axes ({src} -> {dst})")
    return by_axis


def predicted_bytes(name, mesh_shape, layout, weights, batch):
    """:meth:`CostModel.traffic` of the same plan: (model axis, batch axis) bytes."""
    description = _spec(name).describe()
    axes = dict(parse_mesh_shape(mesh_shape))
    rows, cols = axes.get("batch", 1), axes.get("model", 1)
    cost = CostModel(description, ClusterSpec.from_speeds([1.0] * (rows * cols)), batch)
    laid_out = [d for d, axis in (r.split(":") for r in layout.split(";") if r)
                if axis == "model"]
    sizes = {d: split_sizes(int(cost.dim_sizes[cost.dim_names.index(d)]),
                            weights.get("model", [1] * cols)) for d in laid_out}
    batch_sizes = split_sizes(batch, weights.get("batch", [1] * rows))
    traffic = cost.traffic(rows, cols, batch_sizes, sizes, laid_out)
    assert set(laid_out) == set(cost.dim_names[i] for i in np.nonzero(
        cost.layout_mask(cols, laid_out)[0])[0]), "every listed dim is laid out"
    return {"model": sum(v for (layer, _), v in traffic.items() if layer != "batch"),
            "batch": traffic.get(("batch", "allreduce"), 0.0)}


def _layout(name, model_dims="all", batch=True):
    spec = _spec(name)
    dims = spec.module.split_dim_names(spec.config) if model_dims == "all" else model_dims
    return ";".join((["batch:batch"] if batch else []) + [f"{d}:model" for d in dims])


VGG = "vgg-cifar-small"
PAIRS = "vgg-cifar-small-pairs"
TINY = "resattnet3d-tiny"
CASES = [
    # data parallel: gradient all-reduce of every parameter, the mean loss
    (VGG, "batch:2", "batch:batch", {"batch": [3, 1]}),
    # filter split on three devices, uneven: gathers forward, all-reduces back
    (VGG, "model:3", _layout(VGG, batch=False), {"model": [3, 2, 1]}),
    # hybrid with a partial layout: conv1 and conv3 replicated, the others split
    (VGG, "batch:2;model:2", _layout(VGG, ["conv2_filters", "conv4_filters", "fc1_units"]),
     {"batch": [1, 1], "model": [2, 1]}),
    # split pairs: the second conv of a pair contracts over the first's split
    # filters (all-reduce of its output), no gathers between the two
    (PAIRS, "model:3", _layout(PAIRS, batch=False), {"model": [3, 2, 1]}),
    (PAIRS, "batch:2;model:2", _layout(PAIRS), {"batch": [2, 1], "model": [2, 1]}),
    # batch norm, residual blocks (projection and identity shortcuts), attention
    (TINY, "batch:2;model:2", _layout(TINY), {"batch": [1, 1], "model": [3, 1]}),
    # partial: the stem and attention key split, the rest replicated
    (TINY, "model:2", _layout(TINY, ["stem_filters", "s1att_key", "s0b0_conv2_filters"],
                               batch=False), {"model": [1, 1]}),
]


@pytest.mark.parametrize("name,mesh_shape,layout,weights", CASES)
def test_predicted_bytes_per_collective_equal_the_bytes_the_lowered_step_sends(
        name, mesh_shape, layout, weights):
    batch = 4
    counted = counted_bytes(name, mesh_shape, layout, weights, batch)
    predicted = predicted_bytes(name, mesh_shape, layout, weights, batch)
    assert counted["model"] + counted["batch"] > 0
    assert predicted == {k: float(v) for k, v in counted.items()}


def test_the_backward_of_a_filter_split_layer_is_a_full_allreduce_not_a_reduce_scatter():
    # vgg's conv2 alone split on two devices: its input (conv1's output, S
    # bytes, replicated) has a partial gradient on each device; the lowering
    # all-reduces it (2 S sent), where a reduce-scatter would send S. Forward,
    # the pooled output is gathered (each device receives the half it lacks).
    layout = _layout(VGG, ["conv2_filters"], batch=False)
    counted = counted_bytes(VGG, "model:2", layout, {}, batch=2)
    conv1_out = 2 * 8 * 8 * 6 * 4  # batch x positions x filters x float32
    pool2_out = 2 * 4 * 4 * 6 * 4
    assert counted["model"] == 2 * conv1_out + pool2_out


def test_a_split_pair_sends_less_than_two_gathered_filter_splits():
    """conv1+conv2 as a pair on two devices: the second's output all-reduced (2 S),
    against conv1's output gathered (S) and its gradient all-reduced (2 S) plus the
    pooled conv2 output gathered when both are split with gathers."""
    pair = counted_bytes(PAIRS, "model:2", _layout(PAIRS, ["conv1_filters"], batch=False),
                         {}, batch=2)
    conv2_out = 2 * 8 * 8 * 6 * 4  # batch x positions x filters x float32
    assert pair["model"] == 2 * conv2_out
    both = counted_bytes(VGG, "model:2", _layout(VGG, ["conv1_filters", "conv2_filters"],
                                                   batch=False), {}, batch=2)
    assert both["model"] > pair["model"]
