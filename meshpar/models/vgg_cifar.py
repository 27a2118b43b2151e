"""The VGG-like CIFAR-10 network of Moreno-Alvarez et al. (2021), in Mesh-TensorFlow.

==================  ===================================================
part                layers
==================  ===================================================
features            3x3 convs (bias, ReLU) with filters
                    60, 60, 120, 120, 240, 240, 480, 480;
                    2x2 max-pool after every ``pool_every``-th conv
classifier          flatten -> dense 256 + ReLU -> dense 10
==================  ===================================================

Parallel layout: conv ``i`` (1-based) has output dimension
``conv{i}_filters`` and the hidden dense layer ``fc1_units``; all go over the
``model`` axis. A filter-split activation stays split through bias, ReLU and
pooling and is gathered (all-concat, renamed ``conv{i}_channels``) before the
next convolution. ``fc1_units`` split makes the last dense layer a split
contraction (all-reduce of the logits). ``batch`` goes over ``batch``.

Split pairs (``split_pairs=True``, registered as ``vgg-cifar-pairs``): the
convolutions go two by two; the first of a pair splits its filters and keeps
its output split (no gather), the second contracts over that split dimension
(each device convolves its channel slice with its slice of the kernel) and its
partial outputs are all-reduced, so its own filters stay whole. A pair costs
one all-reduce forward (the second's output) and one backward (the first's
input gradient), instead of two gathers and two all-reduces. Which activations
are gathered is part of the graph, so this is a model variant, not only a
layout.

Pure Python at import time; :func:`build` imports Mesh-TensorFlow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

from meshpar.core.splits import integer_at_least, true_or_false
from meshpar.core.splits import integers_at_least as _integers
from meshpar.planning.description import Layer, ModelDescription

__all__ = ["VggCifarConfig", "describe", "layout_rules", "split_dim_names", "build",
           "BuildResult"]


@dataclass(frozen=True)
class VggCifarConfig:
    """Hyper-parameters of the VGG-like CIFAR net.

    Attributes
    ----------
    image_shape : (int, int)
        ``(H, W)``; each must be divisible by 2 ** (number of pools).
    in_channels : int
    filters : tuple of int
        Output filters of each 3x3 convolution.
    pool_every : int
        A 2x2 max-pool follows every ``pool_every``-th convolution.
    dense_units : tuple of int
        Hidden dense layers (ReLU) before the classifier.
    num_classes : int
    name : str
    """

    image_shape: tuple = (32, 32)
    in_channels: int = 3
    filters: tuple = (60, 60, 120, 120, 240, 240, 480, 480)
    pool_every: int = 2
    dense_units: tuple = (256,)
    num_classes: int = 10
    name: str = "vgg-cifar"
    split_pairs: bool = False

    def __post_init__(self):
        # integers as given, not int() of them (8.5 was cut to 8, "6" read as 6, True as
        # 1), and split_pairs a switch ("no" split them)
        for what in ("image_shape", "filters", "dense_units"):
            object.__setattr__(self, what, _integers(getattr(self, what), f"{self.name}: {what}"))
        for what in ("pool_every", "num_classes", "in_channels"):
            object.__setattr__(self, what,
                               integer_at_least(getattr(self, what), f"{self.name}: {what}"))
        object.__setattr__(self, "split_pairs",
                           true_or_false(self.split_pairs, f"{self.name}: split_pairs"))
        if len(self.image_shape) != 2:
            raise ValueError(f"{self.name}: image_shape must be (H, W)")
        if not self.filters:
            raise ValueError(f"{self.name}: filters must be positive")
        pools = len(self.filters) // self.pool_every
        for s in self.image_shape:
            if s % (2 ** pools):
                raise ValueError(f"{self.name}: image size {s} not divisible by 2**{pools} "
                                 f"({pools} max-pools)")

    @classmethod
    def cifar10(cls, **overrides) -> "VggCifarConfig":
        """The published sizes (32x32x3, 8 convs 60..480, dense 256, 10 classes)."""
        return cls(**overrides)

    @classmethod
    def small(cls, **overrides) -> "VggCifarConfig":
        """A tiny variant for tests: 8x8 images, convs 6, 6, 12, 12, dense 16."""
        params = dict(image_shape=(8, 8), filters=(6, 6, 12, 12), dense_units=(16,),
                      name="vgg-cifar-small")
        params.update(overrides)
        return cls(**params)


def _conv_plan(config: VggCifarConfig):
    """Yield ``(index, in_channels, filters, pool_after)`` (index 1-based)."""
    cin = config.in_channels
    for i, f in enumerate(config.filters, start=1):
        yield i, cin, f, i % config.pool_every == 0
        cin = f


def _pair_role(config: VggCifarConfig, i: int) -> str:
    """``"first"``, ``"second"`` or ``""``: conv ``i``'s place in a split pair. Pairs
    are (1, 2), (3, 4), ...; a first must not pool (its output stays split into the
    second) and an odd last conv is unpaired."""
    if not config.split_pairs:
        return ""
    n = len(config.filters)
    if i % 2 == 1 and i < n and i % config.pool_every != 0:
        return "first"
    if i % 2 == 0 and (i - 1) % config.pool_every != 0:
        return "second"
    return ""


def split_dim_names(config: VggCifarConfig) -> list:
    """Names of the dimensions laid out on the model axis: every conv's filters (with
    split pairs, the first conv's of each pair), every dense layer's units, in
    network order.
    """
    names = [f"conv{i}_filters" for i, _, _, _ in _conv_plan(config)
             if _pair_role(config, i) != "second"]
    names += [f"fc{k}_units" for k in range(1, len(config.dense_units) + 1)]
    return names


def layout_rules(config: VggCifarConfig, model_axis: str = "model",
                 batch_axis: Optional[str] = "batch") -> str:
    """Layout string: batch on ``batch_axis``, every filter/unit dim on ``model_axis``."""
    rules = [f"batch:{batch_axis}"] if batch_axis else []
    if model_axis:
        rules += [f"{name}:{model_axis}" for name in split_dim_names(config)]
    return ";".join(rules)


def describe(config: Optional[VggCifarConfig] = None) -> ModelDescription:
    """Layer table per sample, consistent with :func:`build`."""
    config = config or VggCifarConfig()
    h, w = config.image_shape
    layers = []
    for i, cin, f, pool in _conv_plan(config):
        positions = h * w
        role = _pair_role(config, i)
        flops = 2.0 * 9 * cin * f * positions + 2.0 * positions * f  # + bias, ReLU
        if role == "second":
            # A split contraction over the first's filters: the partial outputs are
            # all-reduced; the input gradient stays split (local). Bias and ReLU
            # act on the whole sum, on every device (a row of their own, like the
            # logits' bias).
            layers.append(Layer(
                name=f"conv{i}", kind="conv2d", flops=2.0 * 9 * cin * f * positions,
                params=9 * cin * f, in_elems=positions * cin, out_elems=positions * f,
                split_dim=f"conv{i - 1}_filters", split_size=cin, comm="allreduce"))
            layers.append(Layer(
                name=f"conv{i}_bias", kind="add", flops=2.0 * positions * f, params=f,
                in_elems=positions * f, out_elems=positions * f))
        else:
            layers.append(Layer(
                name=f"conv{i}", kind="conv2d", flops=flops,
                params=9 * cin * f + f, in_elems=positions * cin, out_elems=positions * f,
                split_dim=f"conv{i}_filters", split_size=f,
                comm=None if pool or role == "first" else "allconcat",
                # the gradient of the (whole) input is a partial sum over the filters
                backward_allreduce_elems=0 if i == 1 else positions * cin))
        if pool:
            h, w = h // 2, w // 2
            split = role != "second"
            layers.append(Layer(name=f"pool{i}", kind="pool", flops=float(positions * f),
                                in_elems=positions * f, out_elems=h * w * f,
                                split_dim=f"conv{i}_filters" if split else None,
                                split_size=f if split else None,
                                comm="allconcat" if split else None))
    units = h * w * config.filters[-1]
    last = None  # the split dimension the logits contract over
    for k, u in enumerate(config.dense_units, start=1):
        layers.append(Layer(name=f"fc{k}", kind="dense", flops=2.0 * units * u + 2.0 * u,
                            params=units * u + u, in_elems=units, out_elems=u,
                            split_dim=f"fc{k}_units", split_size=u,
                            backward_allreduce_elems=units))
        units, last = u, (f"fc{k}_units", u)
    classes = config.num_classes
    # A split contraction: each device multiplies its slice of the units by its
    # slice of the kernel and the partial logits are all-reduced; the bias is
    # added after the sum, on every device.
    layers.append(Layer(name="logits", kind="dense", flops=2.0 * units * classes,
                        params=units * classes, in_elems=units, out_elems=classes,
                        split_dim=last[0] if last else None,
                        split_size=last[1] if last else None,
                        comm="allreduce" if last else None))
    layers.append(Layer(name="logits_bias", kind="add", flops=float(classes), params=classes,
                        in_elems=classes, out_elems=classes))
    return ModelDescription(name=config.name, layers=tuple(layers), batch_dim="batch",
                            input_elems=config.image_shape[0] * config.image_shape[1]
                            * config.in_channels)


class BuildResult(NamedTuple):
    """Logits ``[batch, classes]`` and update operations (none for this net)."""

    logits: object
    update_ops: list


def build(inputs, config: Optional[VggCifarConfig] = None, mesh=None,
          is_training: bool = True, batch_dim_name: str = "batch") -> BuildResult:
    """Build the network.

    Parameters
    ----------
    inputs : mtf.Tensor or tf.Tensor
        Images ``[batch, H, W, C]``; a tf tensor is imported onto ``mesh`` with
        dimensions ``batch, h, w, in_channels``.
    config : VggCifarConfig
    mesh : mtf.Mesh, needed for a tf tensor input.
    is_training : bool
        Unused (no batch norm or dropout); kept for a uniform signature.
    """
    import meshpar  # noqa: F401
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    from meshpar.models import _layers as L

    del is_training
    config = config or VggCifarConfig()
    if isinstance(inputs, mtf.Tensor):
        x = inputs
    else:
        if mesh is None:
            raise ValueError("a tf.Tensor input needs mesh=")
        shape = inputs.shape.as_list()
        if len(shape) != 4 or any(s is None for s in shape):
            raise ValueError(f"inputs must be a static [batch, H, W, C] tensor, got {shape}")
        dims = [mtf.Dimension(n, s)
                for n, s in zip([batch_dim_name, "h", "w", "in_channels"], shape)]
        x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    if tuple(d.size for d in x.shape.dims[-3:-1]) != config.image_shape:
        raise ValueError(f"{config.name}: image shape {[d.size for d in x.shape.dims[-3:-1]]}"
                         f" != {list(config.image_shape)}")
    with tf.variable_scope(config.name.replace("-", "_")):
        for i, _, f, pool in _conv_plan(config):
            out_dim = mtf.Dimension(f"conv{i}_filters", f)
            x = L.relu(L.conv2d(x, out_dim, 3, name=f"conv{i}"))
            if pool:
                x = L.max_pool(x, (2, 2), name=f"pool{i}")
            if _pair_role(config, i) != "first":  # a pair's first stays split
                x = L.gather(x, out_dim.name, f"conv{i}_channels")
        batch_dims = x.shape.dims[:-3]
        flat = mtf.Dimension("flat", x.shape.dims[-3].size * x.shape.dims[-2].size
                             * x.shape.dims[-1].size)
        x = mtf.reshape(x, batch_dims + [flat])
        for k, u in enumerate(config.dense_units, start=1):
            unit_dim = mtf.Dimension(f"fc{k}_units", u)
            x = L.relu(L.dense(x, [x.shape.dims[-1]], unit_dim, name=f"fc{k}"))
        class_dim = mtf.Dimension("classes", config.num_classes)
        logits = L.dense(x, [x.shape.dims[-1]], class_dim, name="logits")
    return BuildResult(logits, [])
