"""3D-ResAttNet: a 3-D residual network with self-attention, in Mesh-TensorFlow.

After Zhang et al. (IEEE JBHI 2022), as used for AD vs NC / sMCI vs pMCI
classification from structural MRI by Akintoye et al. (IEEE Access 2022). The
exact published layer table is not public; this is a faithful, configurable
version of the architecture they describe:

======================  =====================================================
part                    layers
======================  =====================================================
stem                    conv3d 3x3x3 -> BN -> ReLU -> max-pool 2x2x2
stage ``i``             ``blocks_per_stage`` residual blocks; the first block
                        of stages ``i > 0`` downsamples with a stride-2 conv
residual block          conv3d 3x3x3 -> BN -> ReLU -> conv3d 3x3x3 -> BN,
                        plus shortcut (1x1x1 conv + BN when the channels or
                        the resolution change), then ReLU
attention (per stage    1x1x1 query/key/value projections, softmax over all
in attention_stages)    spatial positions, output projection, residual add
head                    global average pooling -> dense -> logits
======================  =====================================================

Parallel layout
---------------
Every convolution's output-filter dimension has its own name
(``stem_filters``, ``s1b0_conv1_filters``, ...; a block's projection shortcut
shares ``<block>_conv2_filters`` because it is added to it), so each can be
split over the ``model`` mesh axis, unevenly, by a layout rule. A filter-split
activation stays split through BN, ReLU and pooling and is gathered
(all-concat, by renaming to ``..._channels``) just before the next layer that
contracts over it. Attention splits its key and value dimensions
(``s2att_key``, ``s2att_value``): the query-key product and the output
projection are split contractions (all-reduce). ``batch`` goes over the
``batch`` axis. :func:`layout_rules` lists all of them.

Batch norm uses global-batch statistics in training and moving averages in
evaluation (see :mod:`meshpar.models._layers`), so data-parallel and one-device
training agree.

This module imports no TensorFlow at import time: :class:`ResAttNet3DConfig`,
:func:`describe` and :func:`layout_rules` are pure Python (the planner uses
them); :func:`build` imports Mesh-TensorFlow when called.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

from meshpar.core.splits import integer_at_least, true_or_false
from meshpar.core.splits import integers_at_least as _integers
from meshpar.planning.description import Layer, ModelDescription

__all__ = ["ResAttNet3DConfig", "describe", "layout_rules", "split_dim_names", "build",
           "BuildResult"]

# FLOPs per element for the element-wise parts the table counts.
_NORM_FLOPS_PER_ELEM = 9   # shifted sums of x and x^2, normalise, scale, offset, ReLU
_POOL_FLOPS_PER_ELEM = 1
# Batch-axis all-reduce of a batch norm per channel and step besides its
# parameters' gradients: [2, C] statistics, with global ones the batch's mean and
# variance forward (which the moving averages reuse), with local ones the shares'
# means and variances averaged for the moving averages (beside the step's path,
# the same bytes). Backward it all-reduces sum(dy) and sum(dy * xhat), which are
# the gradients of offset and scale.
_NORM_SYNC_PER_CHANNEL = 2


@dataclass(frozen=True)
class ResAttNet3DConfig:
    """Hyper-parameters of a 3D-ResAttNet.

    Attributes
    ----------
    input_shape : (int, int, int)
        Volume size ``(D, H, W)``.
    in_channels : int
        Channels of the input volume (1 for T1-weighted MRI).
    stem_filters : int
        Filters of the stem convolution.
    stage_filters : tuple of int
        Filters of each stage's residual blocks; one stage per entry.
    blocks_per_stage : int
        Residual blocks per stage.
    attention_stages : tuple of int
        0-based indices of the stages followed by a self-attention block.
    attention_key_ratio : float
        Key (query) dimension of attention = ``max(1, round(channels * ratio))``.
    num_classes : int
        Output classes (2 for AD vs NC).
    stem_pool : bool
        Max-pool 2x2x2 after the stem.
    bn_momentum, bn_epsilon : float
        Batch norm moving-average momentum and epsilon.
    bn_statistics : str
        ``"global"``: batch norm in training normalises with the statistics of
        the whole batch, every mesh computes what one device does (one
        all-reduce per layer each way on a batch split). ``"local"``: with each
        device's share of the batch, no synchronisation on the step's path
        (``meshpar.models._layers``).
    name : str
        Model name in descriptions and plans.
    """

    input_shape: tuple = (32, 32, 32)
    in_channels: int = 1
    stem_filters: int = 8
    stage_filters: tuple = (8, 16, 32)
    blocks_per_stage: int = 1
    attention_stages: tuple = (2,)
    attention_key_ratio: float = 0.5
    num_classes: int = 2
    stem_pool: bool = True
    bn_momentum: float = 0.9
    bn_epsilon: float = 1e-5
    bn_statistics: str = "global"
    name: str = "resattnet3d"

    def __post_init__(self):
        # integers as given, not int() of them (16.5 was cut to 16, "8" read as 8, True as
        # 1), and stem_pool a switch ("no" pooled)
        sizes = _integers(self.input_shape, f"{self.name}: input_shape")
        if len(sizes) != 3:
            raise ValueError(f"{self.name}: input_shape must be 3 positive sizes, "
                             f"got {self.input_shape!r}")
        object.__setattr__(self, "input_shape", sizes)
        object.__setattr__(self, "stage_filters",
                           _integers(self.stage_filters, f"{self.name}: stage_filters"))
        object.__setattr__(self, "attention_stages", tuple(sorted(
            _integers(self.attention_stages, f"{self.name}: attention_stages", 0))))
        if not self.stage_filters:
            raise ValueError(f"{self.name}: stage_filters must be positive, "
                             f"got {self.stage_filters!r}")
        for what in ("in_channels", "stem_filters", "blocks_per_stage", "num_classes"):
            object.__setattr__(self, what,
                               integer_at_least(getattr(self, what), f"{self.name}: {what}"))
        object.__setattr__(self, "stem_pool",
                           true_or_false(self.stem_pool, f"{self.name}: stem_pool"))
        if any(i < 0 or i >= len(self.stage_filters) for i in self.attention_stages):
            raise ValueError(f"{self.name}: attention_stages {self.attention_stages} out of "
                             f"range for {len(self.stage_filters)} stages")
        if not self.attention_key_ratio > 0:
            raise ValueError(f"{self.name}: attention_key_ratio must be > 0")
        if not 0 <= self.bn_momentum < 1:
            raise ValueError(f"{self.name}: bn_momentum must be in [0, 1)")
        if self.bn_statistics not in ("global", "local"):
            raise ValueError(f"{self.name}: bn_statistics must be 'global' or 'local', "
                             f"got {self.bn_statistics!r}")

    @classmethod
    def small(cls, **overrides) -> "ResAttNet3DConfig":
        """32^3 input, stem 8, stages (8, 16, 32), attention on the last stage.

        About 60 k parameters, ~0.1 GFLOP per sample: trains on two CPU cores
        in minutes.
        """
        params = dict(input_shape=(32, 32, 32), stem_filters=8, stage_filters=(8, 16, 32),
                      blocks_per_stage=1, attention_stages=(2,), attention_key_ratio=0.5,
                      name="resattnet3d-small")
        params.update(overrides)
        return cls(**params)

    @classmethod
    def full(cls, **overrides) -> "ResAttNet3DConfig":
        """96x112x96 input (MNI-registered, 2 mm), stages (32, 64, 128, 256),
        2 blocks each, attention on the last two stages."""
        params = dict(input_shape=(96, 112, 96), stem_filters=32,
                      stage_filters=(32, 64, 128, 256), blocks_per_stage=2,
                      attention_stages=(2, 3), attention_key_ratio=0.125,
                      name="resattnet3d-full")
        params.update(overrides)
        return cls(**params)

    def key_dim(self, channels: int) -> int:
        """Size of the attention keys for a block of ``channels`` channels (at least 1)."""
        return max(1, int(round(channels * self.attention_key_ratio)))


# --------------------------------------------------------------------------
# The architecture as a walk; describe() and build() both follow it.

def _half(n: int) -> int:
    return (n + 1) // 2


def _block_plan(config: ResAttNet3DConfig):
    """Yield ``(prefix, stage, in_channels, filters, stride)`` for each block."""
    channels = config.stem_filters
    for i, filters in enumerate(config.stage_filters):
        for j in range(config.blocks_per_stage):
            stride = 2 if (i > 0 and j == 0) else 1
            yield f"s{i}b{j}", i, channels, filters, stride
            channels = filters


def _needs_projection(in_channels: int, filters: int, stride: int) -> bool:
    return in_channels != filters or stride != 1


def split_dim_names(config: ResAttNet3DConfig) -> list:
    """Every tensor dimension the layout may split over the model axis."""
    names = ["stem_filters"]
    for prefix, stage, _, _, _ in _block_plan(config):
        names += [f"{prefix}_conv1_filters", f"{prefix}_conv2_filters"]
        if prefix.endswith(f"b{config.blocks_per_stage - 1}") and stage in config.attention_stages:
            names += [f"s{stage}att_key", f"s{stage}att_value"]
    return names


def layout_rules(config: ResAttNet3DConfig, model_axis: str = "model",
                 batch_axis: Optional[str] = "batch") -> str:
    """Mesh-TensorFlow layout string: batch on ``batch_axis``, every filter,
    key and value dimension on ``model_axis``.

    Either axis may be None to leave those dimensions unsplit.

    >>> layout_rules(ResAttNet3DConfig.small()).split(";")[:2]
    ['batch:batch', 'stem_filters:model']
    """
    rules = []
    if batch_axis:
        rules.append(f"batch:{batch_axis}")
    if model_axis:
        rules += [f"{name}:{model_axis}" for name in split_dim_names(config)]
    return ";".join(rules)


def _conv_layer(name, split_dim, kernel, cin, cout, in_spatial, out_spatial, comm=None,
                input_gradient=True):
    """A filter-split convolution of a whole input: with its filters laid out,
    the gradient of its input is a partial sum, all-reduced (none for the
    network's input)."""
    out_positions = math.prod(out_spatial)
    in_elems = math.prod(in_spatial) * cin
    return Layer(name=name, kind="conv3d",
                 flops=2.0 * kernel ** 3 * cin * cout * out_positions,
                 params=kernel ** 3 * cin * cout,
                 in_elems=in_elems,
                 out_elems=out_positions * cout,
                 split_dim=split_dim, split_size=cout, comm=comm,
                 backward_allreduce_elems=in_elems if input_gradient else 0)


def _norm_layer(name, split_dim, channels, spatial, comm=None):
    """A batch norm row: its [2, C] statistics all-reduced over the batch besides its
    parameters' gradients, with global or local statistics alike
    (``_NORM_SYNC_PER_CHANNEL``)."""
    elems = math.prod(spatial) * channels
    return Layer(name=name, kind="norm", flops=float(_NORM_FLOPS_PER_ELEM * elems),
                 params=2 * channels, in_elems=elems, out_elems=elems,
                 split_dim=split_dim, split_size=channels, comm=comm,
                 batch_allreduce_elems=_NORM_SYNC_PER_CHANNEL * channels)


def describe(config: Optional[ResAttNet3DConfig] = None) -> ModelDescription:
    """The layer table of ``config`` (per sample), consistent with :func:`build`.

    Convolution rows are split on their filter dimension; the split output
    stays split through batch norm, ReLU and pooling and ``comm`` marks the
    row after which it is gathered for the next layer (all-concat): the batch
    norm of a block's first conv, the stem's pool, and the block's ``_add``
    row (the second conv is added to its shortcut first). Each collective of
    the lowering is on the row of the dimension whose layout causes it
    (``backward_*`` fields: the all-reduced input gradients of split
    convolutions, the gathered gradient of an identity shortcut; batch norm
    statistics on the batch axis), so a layout that replicates a dimension
    drops exactly its rows' collectives. Attention is two rows: query/key
    (split contraction over the key dimension -> all-reduce of the
    position-by-position scores) and value/output (split over the value
    dimension -> all-reduce of the output projection).
    """
    config = config or ResAttNet3DConfig.small()
    layers = []
    spatial = config.input_shape
    cin = config.in_channels
    c = config.stem_filters
    layers.append(_conv_layer("stem_conv", "stem_filters", 3, cin, c, spatial, spatial,
                              input_gradient=False))
    layers.append(_norm_layer("stem_bn", "stem_filters", c, spatial,
                              None if config.stem_pool else "allconcat"))
    if config.stem_pool:
        pooled = tuple(_half(s) for s in spatial)
        layers.append(Layer(name="stem_pool", kind="pool",
                            flops=float(_POOL_FLOPS_PER_ELEM * math.prod(spatial) * c),
                            in_elems=math.prod(spatial) * c, out_elems=math.prod(pooled) * c,
                            split_dim="stem_filters", split_size=c, comm="allconcat"))
        spatial = pooled
    channels = c
    for prefix, stage, cin, filters, stride in _block_plan(config):
        out_spatial = tuple(_half(s) for s in spatial) if stride == 2 else spatial
        layers.append(_conv_layer(f"{prefix}_conv1", f"{prefix}_conv1_filters", 3, cin, filters,
                                  spatial, out_spatial))
        # gathered after BN and ReLU
        layers.append(_norm_layer(f"{prefix}_bn1", f"{prefix}_conv1_filters", filters,
                                  out_spatial, "allconcat"))
        conv2_dim = f"{prefix}_conv2_filters"
        layers.append(_conv_layer(f"{prefix}_conv2", conv2_dim, 3, filters, filters,
                                  out_spatial, out_spatial))
        layers.append(_norm_layer(f"{prefix}_bn2", conv2_dim, filters, out_spatial))
        projection = _needs_projection(cin, filters, stride)
        if projection:
            layers.append(_conv_layer(f"{prefix}_proj", conv2_dim, 1, cin, filters,
                                      spatial, out_spatial))
            layers.append(_norm_layer(f"{prefix}_proj_bn", conv2_dim, filters, out_spatial))
        elems = math.prod(out_spatial) * filters
        # An identity shortcut slices the whole input onto the split filters:
        # its gradient is gathered on the way back.
        layers.append(Layer(name=f"{prefix}_add", kind="add", flops=2.0 * elems,
                            in_elems=2 * elems, out_elems=elems,
                            split_dim=conv2_dim, split_size=filters, comm="allconcat",
                            backward_allconcat_elems=0 if projection else elems))
        spatial, channels = out_spatial, filters
        last_block = prefix.endswith(f"b{config.blocks_per_stage - 1}")
        if last_block and stage in config.attention_stages:
            layers.extend(_attention_layers(f"s{stage}att", channels, config.key_dim(channels),
                                            math.prod(spatial)))
    layers.append(Layer(name="gap", kind="pool", flops=float(math.prod(spatial) * channels),
                        in_elems=math.prod(spatial) * channels, out_elems=channels))
    layers.append(Layer(name="classifier", kind="dense",
                        flops=2.0 * channels * config.num_classes,
                        params=channels * config.num_classes + config.num_classes,
                        in_elems=channels, out_elems=config.num_classes))
    return ModelDescription(name=config.name, layers=tuple(layers), batch_dim="batch",
                            input_elems=math.prod(config.input_shape) * config.in_channels)


def _attention_layers(prefix, channels, key, positions):
    """Two rows: query/key scores (split on key) and value/output (split on value).

    Split on key, the scores are a split contraction (all-reduced forward) and
    the input's gradients through the query and key projections are partial
    sums (two all-reduces back). Split on value, the output projection is a
    split contraction (all-reduced forward); back, the gradient of the
    attention weights (a contraction over value) and the input's gradient
    through the value projection are all-reduced."""
    qk = Layer(name=f"{prefix}_qk", kind="attention",
               flops=2.0 * positions * channels * key * 2 + 2.0 * positions * positions * key,
               params=2 * channels * key,
               in_elems=positions * channels, out_elems=positions * positions,
               split_dim=f"{prefix}_key", split_size=key, comm="allreduce",
               backward_allreduce_elems=2 * positions * channels)
    value = Layer(name=f"{prefix}_value", kind="attention",
                  flops=(2.0 * positions * channels * channels           # value projection
                         + 5.0 * positions * positions                  # softmax
                         + 2.0 * positions * positions * channels       # weighted sum
                         + 2.0 * positions * channels * channels        # output projection
                         + positions * channels),                       # residual add
                  params=2 * channels * channels,
                  in_elems=positions * channels, out_elems=positions * channels,
                  split_dim=f"{prefix}_value", split_size=channels, comm="allreduce",
                  backward_allreduce_elems=positions * positions + positions * channels)
    return [qk, value]


# --------------------------------------------------------------------------
# The Mesh-TensorFlow graph.

class BuildResult(NamedTuple):
    """What :func:`build` returns: logits ``[batch, classes]`` (mtf.Tensor) and
    the batch-norm moving-average updates (mtf Operations) of a training graph."""

    logits: object
    update_ops: list


def build(inputs, config: Optional[ResAttNet3DConfig] = None, mesh=None,
          is_training: bool = True, batch_dim_name: str = "batch") -> BuildResult:
    """Build the network on a Mesh-TensorFlow mesh.

    Parameters
    ----------
    inputs : mtf.Tensor or tf.Tensor
        Volumes ``[batch, D, H, W, C]``. An mtf tensor is used as is (its last
        dimension is the channel dimension); a tf tensor is imported onto
        ``mesh`` with dimensions ``batch, d, h, w, in_channels``.
    config : ResAttNet3DConfig
        Defaults to :meth:`ResAttNet3DConfig.small`.
    mesh : mtf.Mesh
        Needed only when ``inputs`` is a tf tensor.
    is_training : bool
        Batch statistics and moving-average updates (True) or moving averages.
    batch_dim_name : str
        Name of the batch dimension of an imported tf tensor.

    Returns
    -------
    BuildResult
        ``(logits, update_ops)``.
    """
    import meshpar  # noqa: F401  (mesh_tensorflow import shim)
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    from meshpar.models import _layers as L

    config = config or ResAttNet3DConfig.small()
    x = _as_mtf_input(inputs, mesh, batch_dim_name, mtf)
    if tuple(d.size for d in x.shape.dims[-4:-1]) != config.input_shape:
        raise ValueError(f"{config.name}: input spatial shape "
                         f"{[d.size for d in x.shape.dims[-4:-1]]} != {list(config.input_shape)}")
    if x.shape.dims[-1].size != config.in_channels:
        raise ValueError(f"{config.name}: input has {x.shape.dims[-1].size} channels, "
                         f"config expects {config.in_channels}")
    spatial_names = [d.name for d in x.shape.dims[-4:-1]]
    updates = []

    def norm(ts, dim, names, relu=True, variables=None):
        """Batch norm of ``ts`` (one tensor, or same-shaped ones sharing their
        synchronisations: :func:`_layers.batch_norms_together`)."""
        single = not isinstance(ts, (list, tuple))
        ys, ops = L.batch_norms_together([ts] if single else ts, dim, is_training,
                                         config.bn_momentum, config.bn_epsilon,
                                         [names] if single else names,
                                         config.bn_statistics, variables)
        updates.extend(ops)
        ys = [L.relu(y) for y in ys] if relu else ys
        return ys[0] if single else ys

    with tf.variable_scope(config.name.replace("-", "_")):
        stem_dim = mtf.Dimension("stem_filters", config.stem_filters)
        x = L.conv3d(x, stem_dim, 3, 1, name="stem_conv")
        x = norm(x, stem_dim, "stem_bn")
        if config.stem_pool:
            x = L.max_pool(L.pad_to_even(x, spatial_names), (2, 2, 2),
                          name="stem_pool")
        x = L.gather(x, "stem_filters", "stem_channels")

        for prefix, stage, cin, filters, stride in _block_plan(config):
            with tf.variable_scope(prefix):
                x = _residual_block(x, prefix, filters, stride, norm, L, mtf)
            last_block = prefix.endswith(f"b{config.blocks_per_stage - 1}")
            if last_block and stage in config.attention_stages:
                with tf.variable_scope(f"s{stage}att"):
                    x = _attention_block(x, f"s{stage}att", config, spatial_names, L, mtf)

        channel_dim = x.shape.dims[-1]
        pooled = mtf.reduce_mean(x, reduced_dim=None,
                                 output_shape=x.shape.dims[:-4] + [channel_dim])
        class_dim = mtf.Dimension("classes", config.num_classes)
        logits = L.dense(pooled, [channel_dim], class_dim, name="classifier")
    return BuildResult(logits, updates)


def _as_mtf_input(inputs, mesh, batch_dim_name, mtf):
    if isinstance(inputs, mtf.Tensor):
        if inputs.shape.ndims < 5:
            raise ValueError(f"inputs must be [batch, D, H, W, C], got {inputs.shape}")
        return inputs
    if mesh is None:
        raise ValueError("a tf.Tensor input needs mesh=")
    shape = inputs.shape.as_list()
    if len(shape) != 5 or any(s is None for s in shape):
        raise ValueError(f"inputs must be a static [batch, D, H, W, C] tensor, got {shape}")
    dims = [mtf.Dimension(n, s) for n, s in
            zip([batch_dim_name, "d", "h", "w", "in_channels"], shape)]
    return mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))


def _residual_block(x, prefix, filters, stride, norm, L, mtf):
    in_dim = x.shape.dims[-1]
    conv1_dim = mtf.Dimension(f"{prefix}_conv1_filters", filters)
    conv2_dim = mtf.Dimension(f"{prefix}_conv2_filters", filters)
    h = L.conv3d(x, conv1_dim, 3, stride, name="conv1")
    h = norm(h, conv1_dim, "bn1")
    h = L.gather(h, conv1_dim.name, f"{prefix}_conv1_channels")
    h = L.conv3d(h, conv2_dim, 3, 1, name="conv2")
    if _needs_projection(in_dim.size, filters, stride):
        # both branches normalised at one point: one synchronisation each way, not two;
        # bn2's variables made before proj's kernel, as always (its seeded initial values)
        bn2 = L.batch_norm_variables(h, conv2_dim, "bn2")
        shortcut = L.conv3d(x, conv2_dim, 1, stride, name="proj")
        h, shortcut = norm([h, shortcut], conv2_dim, ["bn2", "proj_bn"], relu=False,
                           variables=[bn2, None])
    else:
        h = norm(h, conv2_dim, "bn2", relu=False)
        # replicated -> split on the model axis: a local slice (all-split), no traffic
        shortcut = mtf.rename_dimension(x, in_dim.name, conv2_dim.name)
    y = L.relu(h + shortcut)
    return L.gather(y, conv2_dim.name, f"{prefix}_out_channels")


def _attention_block(x, prefix, config, spatial_names, L, mtf):
    """Single-head self-attention over all spatial positions, with a residual."""
    batch_dims = x.shape.dims[:-4]
    spatial = x.shape.dims[-4:-1]
    channel_dim = x.shape.dims[-1]
    positions = math.prod(d.size for d in spatial)
    pos = mtf.Dimension(f"{prefix}_pos", positions)
    mem = mtf.Dimension(f"{prefix}_mem", positions)
    key_dim = mtf.Dimension(f"{prefix}_key", config.key_dim(channel_dim.size))
    value_dim = mtf.Dimension(f"{prefix}_value", channel_dim.size)

    flat = mtf.reshape(x, batch_dims + [pos, channel_dim])
    memory = mtf.rename_dimension(flat, pos.name, mem.name)
    query = L.dense(flat, [channel_dim], key_dim, use_bias=False, name="query")
    key = L.dense(memory, [channel_dim], key_dim, use_bias=False, name="key")
    value = L.dense(memory, [channel_dim], value_dim, use_bias=False, name="value")
    scores = mtf.einsum([query, key], output_shape=batch_dims + [pos, mem])
    weights = mtf.softmax(scores * (1.0 / math.sqrt(key_dim.size)), mem)
    attended = mtf.einsum([weights, value], output_shape=batch_dims + [pos, value_dim])
    out = L.dense(attended, [value_dim], channel_dim, use_bias=False, name="output")
    return x + mtf.reshape(out, x.shape)
