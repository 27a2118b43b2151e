"""A model as data: the layer table the planner and the cost model read.

Pure Python (no TensorFlow at import). A :class:`ModelDescription` is a list
of :class:`Layer` rows. It can be written by hand, produced by a model module
from its configuration (``meshpar.models.get(name).describe()``), or extracted
from a built Mesh-TensorFlow graph by
:func:`meshpar.core.graph_description.describe_mtf_graph`.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Optional

COMM_KINDS = (None, "allconcat", "allreduce")


@dataclass(frozen=True)
class Layer:
    """One layer of a model, per sample of the batch.

    Attributes
    ----------
    name : str
        Unique layer name (e.g. ``"s1b0_conv1"``).
    kind : str
        ``conv3d``, ``conv2d``, ``dense``, ``attention``, ``pool``, ``norm``, ...
    flops : float
        Forward FLOPs per sample (a multiply-add counts 2).
    params : int
        Number of trainable parameters.
    in_elems, out_elems : int
        Input and output activation elements per sample.
    split_dim : str or None
        Name of the tensor dimension that may be split over the model axis
        (for convolutions: the output-filter dimension), or None.
    split_size : int or None
        Size of ``split_dim``.
    comm : None, "allconcat" or "allreduce"
        The forward collective on this layer's output when ``split_dim`` is
        laid out: ``allconcat`` gathers the split output for a next layer that
        needs all of it (its backward is a local slice, no traffic);
        ``allreduce`` sums the partial results of a split contraction.
    backward_allreduce_elems : int
        Elements per sample all-reduced over the model axis in the backward
        pass when ``split_dim`` is laid out: the gradient of a whole
        (replicated) input of a layer whose work is split is a partial sum
        over the split dimension (0 for the first layer: its input needs no
        gradient).
    backward_allconcat_elems : int
        Elements per sample gathered over the model axis in the backward pass
        when ``split_dim`` is laid out (a whole tensor sliced locally onto the
        split dimension, e.g. an identity shortcut, gathers its gradient).
    batch_allreduce_elems : int
        Elements per step (whatever the batch) all-reduced over the batch axis
        besides the parameter gradients: batch-norm statistics and their
        gradients. A device holds its share of them when ``split_dim`` is laid
        out, as it does of the parameters.
    """

    name: str
    kind: str
    flops: float
    params: int = 0
    in_elems: int = 0
    out_elems: int = 0
    split_dim: Optional[str] = None
    split_size: Optional[int] = None
    comm: Optional[str] = None
    backward_allreduce_elems: int = 0
    backward_allconcat_elems: int = 0
    batch_allreduce_elems: int = 0

    def __post_init__(self):
        if not self.name:
            raise ValueError("layer name must not be empty")
        sizes = (self.flops, self.params, self.in_elems, self.out_elems,
                 self.backward_allreduce_elems, self.backward_allconcat_elems,
                 self.batch_allreduce_elems)
        if min(sizes) < 0:
            raise ValueError(f"layer {self.name!r}: sizes must be >= 0")
        if (self.split_dim is None) != (self.split_size is None):
            raise ValueError(
                f"layer {self.name!r}: split_dim and split_size go together")
        if self.split_size is not None and self.split_size < 1:
            raise ValueError(f"layer {self.name!r}: split_size must be >= 1")
        if self.comm not in COMM_KINDS:
            raise ValueError(
                f"layer {self.name!r}: comm must be one of {COMM_KINDS}, got {self.comm!r}")


@dataclass(frozen=True)
class ModelDescription:
    """A model's layer table plus what a plan needs to know about it.

    Attributes
    ----------
    name : str
        Model name (``vgg-cifar``, ``resattnet3d-small``, ...).
    layers : tuple of Layer
    batch_dim : str
        Name of the batch dimension (laid out on the data-parallel axis).
    input_elems : int
        Input elements per sample (what is fed to the first layer).
    dtype_bytes : int
        Bytes per element (4 for float32).
    """

    name: str
    layers: tuple = field(default_factory=tuple)
    batch_dim: str = "batch"
    input_elems: int = 0
    dtype_bytes: int = 4

    def __post_init__(self):
        names = [layer.name for layer in self.layers]
        if len(set(names)) != len(names):
            raise ValueError(f"model {self.name!r}: duplicate layer names")

    @property
    def flops(self) -> float:
        """Forward FLOPs per sample."""
        return float(sum(layer.flops for layer in self.layers))

    @property
    def params(self) -> int:
        """Total parameter count over all layers."""
        return int(sum(layer.params for layer in self.layers))

    @property
    def split_dims(self) -> dict:
        """Tensor dimension name -> size, for every splittable dimension."""
        return {layer.split_dim: layer.split_size
                for layer in self.layers if layer.split_dim is not None}

    def to_dict(self) -> dict:
        """JSON-ready dict, the format :meth:`from_dict` reads."""
        return {
            "name": self.name,
            "batch_dim": self.batch_dim,
            "input_elems": self.input_elems,
            "dtype_bytes": self.dtype_bytes,
            "layers": [dataclasses.asdict(layer) for layer in self.layers],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ModelDescription":
        """Build from :meth:`to_dict`'s format; ValueError naming a missing field."""
        try:
            layers = tuple(Layer(**row) for row in data["layers"])
            return cls(name=data["name"], layers=layers,
                       batch_dim=data.get("batch_dim", "batch"),
                       input_elems=int(data.get("input_elems", 0)),
                       dtype_bytes=int(data.get("dtype_bytes", 4)))
        except KeyError as err:
            raise ValueError(f"model description is missing field {err}") from err
        except TypeError as err:
            raise ValueError(f"model description has a bad layer: {err}") from err

    def to_json(self) -> str:
        """The description as indented JSON text."""
        return json.dumps(self.to_dict(), indent=2)


def check_priced_layout(model: ModelDescription, layout, mesh_axes) -> None:
    """ValueError where ``layout`` (``(tensor dim, mesh axis)`` rules) lays out a
    dimension in a way ``model``'s table cannot price: the cost model knows the batch
    dimension on ``batch`` and the table's split dimensions on ``model``, each with
    the collectives its rows declare. Any other dimension laid out (a spatial one:
    the lowering gathers a split spatial dimension before each pooling and reshape,
    which no row holds) or a dimension on the other axis would be priced as
    replicated, under the step it runs. As in Mesh-TF, a dimension's first rule
    whose axis is in ``mesh_axes`` (the mesh's axis names) is the one that applies.
    """
    expected = {model.batch_dim: "batch", **{d: "model" for d in model.split_dims}}
    seen = set()
    for dim, axis in layout:
        if axis not in mesh_axes or dim in seen:
            continue
        seen.add(dim)
        if expected.get(dim) == axis:
            continue
        if dim not in expected:
            why = (f"{model.name!r}'s layer table does not split {dim!r} (it splits "
                   f"{', '.join(model.split_dims) or 'nothing'} on model and "
                   f"{model.batch_dim!r} on batch), so no row holds the collectives a "
                   "split of it runs (e.g. a split spatial dimension is gathered before "
                   "each pooling)")
        else:
            why = (f"the cost model prices {dim!r} on {expected[dim]!r} only")
        raise ValueError(f"layout rule {dim}:{axis} cannot be priced: {why}")
