"""A plan: mesh shape, layout, device order, split weights, and what it costs.

Every planner (even, proportional, exact, ga) returns a :class:`Plan`, so two
plans compare in one line (``a.predicted_step_seconds / b.predicted_step_seconds``).
A plan is plain data (JSON); :meth:`meshpar.core.mesh_impl.HeterogeneousMeshImpl.from_plan`
turns it into a mesh implementation (that, unlike this module, imports TensorFlow).

========  ==========================  ==========================
pnum      coordinate (batch, model)   device
========  ==========================  ==========================
0         (0, 0)                      ``devices[0]``
1         (0, 1)                      ``devices[1]``
M         (1, 0)                      ``devices[M]``
========  ==========================  ==========================
"""
from __future__ import annotations

import json
import math
import numbers
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from meshpar.planning.jsonio import load_json, save_json_atomic

#: a mesh axis's size as written: ASCII digits, an optional sign
_DECIMAL = re.compile(r"[+-]?[0-9]+")



def parse_mesh_shape(text: str, what: str = "mesh shape") -> tuple:
    """``"batch:2;model:3"`` -> ``(("batch", 2), ("model", 3))``.

    The one parser of Mesh-TensorFlow shape strings in meshpar (it imports no
    TensorFlow, unlike ``mtf.convert_to_shape``). ValueError, prefixed with
    ``what``, for an axis without a name or a size >= 1, repeated names, or
    an empty string.
    """
    bad = f"{what}: bad shape {text!r}, expected e.g. batch:2;model:2"
    axes = []
    for part in filter(None, (p.strip() for p in str(text).split(";"))):
        name, _, size = part.partition(":")
        if not _DECIMAL.fullmatch(size.strip()):  # int() read "1_0" and full-width digits
            raise ValueError(bad)
        axes.append((name.strip(), int(size)))
        if not axes[-1][0] or axes[-1][1] < 1:
            raise ValueError(f"{bad} (each axis needs a name and a size >= 1)")
    if not axes:
        raise ValueError(bad)
    names = [name for name, _ in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: axis names must differ, got {text!r}")
    return tuple(axes)


def parse_layout(text: str, what: str = "layout") -> tuple:
    """``"batch:batch;conv1_filters:model"`` -> ``(("batch", "batch"), ("conv1_filters",
    "model"))``: Mesh-TensorFlow layout rules, tensor dimension to mesh axis.

    The one parser of layout strings in meshpar (``""`` is no rule: everything
    replicated; as in Mesh-TensorFlow, a dimension may have several rules, the
    first whose axis the mesh has applies). ValueError, prefixed with ``what``,
    for a rule that is not ``dimension:axis``.
    """
    rules = []
    for part in filter(None, (p.strip() for p in str(text).split(";"))):
        dim, sep, axis = (x.strip() for x in part.partition(":"))
        if not (sep and dim and axis) or ":" in axis:
            raise ValueError(f"{what}: bad rule {part!r} in {text!r}, expected "
                             "dimension:axis rules joined by ';' (e.g. batch:batch;"
                             "conv1_filters:model)")
        rules.append((dim, axis))
    return tuple(rules)


@dataclass(frozen=True)
class Plan:
    """Result of a planner (same fields whichever planner made it).

    Attributes
    ----------
    method : str
        ``even``, ``proportional``, ``exact`` or ``ga``.
    model : str
        Model name the plan was made for.
    batch : int
        Global batch size.
    mesh_shape : tuple of (axis_name, size)
        e.g. ``(("batch", 2), ("model", 3))``.
    layout : tuple of (tensor_dim, mesh_axis)
    devices : tuple of str
        Device strings in pnum order (row-major over ``mesh_shape``); a worker's
        device (``/job:...``) at most once, emulated local ones may repeat.
    split_weights : dict
        Mesh axis -> weights per coordinate.
    dim_split_weights : dict
        Tensor dim -> weights per coordinate (overrides the axis weights).
    split_sizes : dict
        Tensor dim -> integer sizes per coordinate (from ``split_sizes``).
    predicted_step_seconds : float
        Cost-model step time.
    planning_seconds : float
        Wall time the planner took.
    memory_per_device : tuple of float
        Predicted bytes per device, pnum order.
    feasible : bool
        Every device within its memory.
    history : tuple of float
        Best predicted step time per generation (GA); one entry otherwise.
    lower_bound_seconds : float
        Total work / total peak speed of the cluster.
    """

    method: str
    model: str
    batch: int
    mesh_shape: tuple
    layout: tuple
    devices: tuple
    split_weights: dict = field(default_factory=dict)
    dim_split_weights: dict = field(default_factory=dict)
    split_sizes: dict = field(default_factory=dict)
    predicted_step_seconds: float = math.nan
    planning_seconds: float = 0.0
    memory_per_device: tuple = ()
    feasible: bool = True
    history: tuple = ()
    lower_bound_seconds: float = math.nan
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        shape = tuple((str(a), _mesh_size(a, s)) for a, s in self.mesh_shape)
        names = [a for a, _ in shape]
        if not all(names) or len(set(names)) != len(names):
            raise ValueError(f"plan: mesh axes need distinct, non-empty names, got {names}")
        object.__setattr__(self, "mesh_shape", shape)
        object.__setattr__(self, "layout", tuple((str(d), str(a)) for d, a in self.layout))
        object.__setattr__(self, "devices", tuple(str(d) for d in self.devices))
        object.__setattr__(self, "memory_per_device",
                           tuple(float(m) for m in self.memory_per_device))
        object.__setattr__(self, "history", tuple(float(h) for h in self.history))
        if not _whole(self.batch) or self.batch < 1:
            raise ValueError(f"plan: batch must be an integer >= 1, got {self.batch!r}")
        object.__setattr__(self, "batch", int(self.batch))  # np.int64: to_dict not JSON
        n = math.prod(s for _, s in shape)
        if len(self.devices) != n:
            raise ValueError(f"plan: mesh {self.mesh_shape_string()} has {n} processors "
                             f"but {len(self.devices)} devices are listed")
        _refuse_a_worker_device_twice(self.devices)
        memory = self.memory_per_device  # read per device (bench memory, plan's table)
        if memory and (len(memory) != n or not all(0 <= m < math.inf for m in memory)):
            raise ValueError(f"plan: memory_per_device must be one finite number of bytes "
                             f">= 0 per device ({n}), got {list(memory)}")
        sizes = dict(shape)
        for name, weights in list(self.split_weights.items()) + list(
                self.dim_split_weights.items()):
            axis = name if name in sizes else dict(self.layout).get(name)
            if axis in sizes and len(weights) != sizes[axis]:
                raise ValueError(f"plan: {len(weights)} weights for {name!r} but mesh axis "
                                 f"{axis!r} has size {sizes[axis]}")
        batch_sizes = self.split_sizes.get("batch")
        if batch_sizes is not None and sum(batch_sizes) != self.batch:
            raise ValueError(f"plan: split_sizes of 'batch' {list(batch_sizes)} add up to "
                             f"{sum(batch_sizes)}, not the plan's batch {self.batch}")
        for dim, axis in self.layout:
            if axis not in sizes:
                raise ValueError(f"plan: layout puts {dim!r} on mesh axis {axis!r}, which mesh "
                                 f"{self.mesh_shape_string()} does not have")
        self._check_sizes_follow_weights()

    def _check_sizes_follow_weights(self) -> None:
        """The runtime cuts by the weights: split_sizes that other weights would not
        give (a hand-edited plan) would be silently ignored, so they are refused."""
        from meshpar.core.splits import split_sizes

        on_axis = dict(self.layout)
        axis_size = dict(self.mesh_shape)
        for dim, sizes in self.split_sizes.items():
            parts = axis_size.get(on_axis.get(dim), 1)  # a dim the layout leaves whole: 1
            if len(sizes) != parts:  # the runtime cuts by the layout: these would be ignored
                where = (f"its layout puts {dim!r} on mesh axis {on_axis[dim]!r} of size "
                         f"{parts}" if dim in on_axis else f"its layout does not split {dim!r}")
                raise ValueError(f"plan: split_sizes of {dim!r} {list(sizes)} have {len(sizes)} "
                                 f"parts but {where}; edit the layout or the sizes, or plan "
                                 "again")
            weights = self.dim_split_weights.get(dim) or self.split_weights.get(
                on_axis.get(dim, dim))
            if weights and len(weights) != len(sizes):
                continue
            # no weights: the runtime cuts evenly (a plan whose weights were deleted)
            expected = split_sizes(int(sum(sizes)), weights or [1.0] * len(sizes), dim)
            if list(sizes) != expected:
                given = "its weights give" if weights else "an even split gives (it has no weights)"
                raise ValueError(f"plan: split_sizes of {dim!r} {list(sizes)} are not what "
                                 f"{given} ({expected}); the weights decide the split: "
                                 "edit them, or plan again")

    # -------------------------------------------------------------- strings
    def mesh_shape_string(self) -> str:
        """Mesh-TensorFlow shape string, e.g. ``batch:2;model:3``."""
        return ";".join(f"{a}:{s}" for a, s in self.mesh_shape)

    def layout_string(self) -> str:
        """Mesh-TensorFlow layout string, e.g. ``batch:batch;conv1_filters:model``."""
        return ";".join(f"{d}:{a}" for d, a in self.layout)

    def summary(self) -> str:
        """One line: method, mesh, predicted time."""
        return (f"{self.method}: mesh {self.mesh_shape_string()}, predicted "
                f"{self.predicted_step_seconds:.4g} s/step"
                f"{'' if self.feasible else ' (INFEASIBLE: memory)'}, "
                f"planned in {self.planning_seconds:.3g} s")

    # ---------------------------------------------------------------- use
    def check_compatible(self, model_name, n_devices: Optional[int] = None) -> None:
        """Raise ValueError unless this plan was made for ``model_name`` (a name or
        a tuple of a model's names: registry name, config name) on ``n_devices``."""
        names = (model_name,) if isinstance(model_name, str) else tuple(model_name)
        if self.model not in names:
            raise ValueError(f"plan was made for model {self.model!r}, not {names[0]!r}")
        if n_devices is not None and int(n_devices) != len(self.devices):
            raise ValueError(f"plan is for {len(self.devices)} devices, "
                             f"not {int(n_devices)}")

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """JSON-ready dict of every field (NaN and infinity as null)."""
        out = {
            "method": self.method, "model": self.model, "batch": self.batch,
            "mesh_shape": [[a, s] for a, s in self.mesh_shape],
            "layout": [[d, a] for d, a in self.layout],
            "devices": list(self.devices),
            "split_weights": {k: [float(x) for x in v] for k, v in self.split_weights.items()},
            "dim_split_weights": {k: [float(x) for x in v]
                                  for k, v in self.dim_split_weights.items()},
            "split_sizes": {k: [int(x) for x in v] for k, v in self.split_sizes.items()},
            "predicted_step_seconds": _json_float(self.predicted_step_seconds),
            "planning_seconds": float(self.planning_seconds),
            "memory_per_device": list(self.memory_per_device),
            "feasible": bool(self.feasible),
            "history": [_json_float(h) for h in self.history],
            "lower_bound_seconds": _json_float(self.lower_bound_seconds),
        }
        if self.extra:
            out["extra"] = self.extra
        return out

    @classmethod
    def from_dict(cls, data, source: str = "plan") -> "Plan":
        """Build from :meth:`to_dict`'s format; ValueError naming ``source`` and the bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        required = ("method", "model", "batch", "mesh_shape", "layout", "devices")
        for key in required:
            if key not in data:
                raise ValueError(f"{source}: missing field {key!r}")
        read = {  # field -> (conversion, what the field must be)
            "method": (_text, "a string"), "model": (_text, "a string"),
            "batch": (_integer, "an integer"),
            "mesh_shape": (lambda v: tuple((_text(a), _integer(s)) for a, s in _list(v)),
                           "a list of [axis, size] pairs"),
            "layout": (lambda v: tuple((_text(d), _text(a)) for d, a in _list(v)),
                       "a list of [dimension, axis] pairs"),
            "devices": (lambda v: tuple(_text(d) for d in _list(v)), "a list of device strings"),
            "split_weights": (_number_lists(_number), "an object of number lists"),
            "dim_split_weights": (_number_lists(_number), "an object of number lists"),
            "split_sizes": (_number_lists(_integer), "an object of integer lists"),
            "predicted_step_seconds": (_float, "a number or null"),
            "planning_seconds": (_number, "a number"),
            "memory_per_device": (lambda v: tuple(_number(x) for x in _list(v)),
                                  "a list of numbers"),
            "feasible": (_boolean, "true or false"),
            "history": (lambda v: tuple(_float(h) for h in _list(v)), "a list of numbers"),
            "lower_bound_seconds": (_float, "a number or null"),
            "extra": (lambda v: dict(v or {}), "an object"),
        }
        unknown = sorted(set(data) - set(read), key=str)
        if unknown:  # a misspelt field (e.g. 'split_weight') would be ignored in silence
            raise ValueError(f"{source}: unknown field {unknown[0]!r}; a plan's fields are "
                             f"{', '.join(read)} (anything else goes under 'extra')")
        fields = {}
        for key, (convert, what) in read.items():
            if key not in data:
                continue
            try:
                fields[key] = convert(data[key])
            except (TypeError, ValueError, AttributeError):
                raise ValueError(f"{source}: field {key!r} must be {what}, got "
                                 f"{json.dumps(data[key])[:80]}") from None
        # train --plan takes it as --model: 5 was 'unknown model 5', naming no file
        ref = fields.get("extra", {}).get("model_ref")
        if ref is not None and not (isinstance(ref, str) and ref):
            raise ValueError(f"{source}: extra field 'model_ref' must be the network's file "
                             f"or module reference (a string), got {json.dumps(ref)[:80]}")
        try:
            return cls(**fields)
        except ValueError as err:  # the plan's own checks: "plan: ..." named by source
            raise ValueError(f"{source}: {str(err).removeprefix('plan: ')}") from err

    def save(self, path) -> None:
        """Write the JSON file atomically (an existing file is never left half-written)."""
        save_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path) -> "Plan":
        """Read a plan JSON file (from :meth:`save` or ``meshpar plan --out``); ValueError
        naming the file for bad content, FileNotFoundError if it is missing.
        """
        path = os.fspath(path)
        data = load_json(path, "plan file")
        if isinstance(data, dict) and "method" not in data and "bandwidth" in data:
            raise ValueError(f"{path} is a device profile (`meshpar profile --out`), not a "
                             f"plan: `meshpar plan --profile {path} --out plan.json` makes one")
        if isinstance(data, dict) and data and "method" not in data and (
                "cluster" in data or all(isinstance(v, list) and all(isinstance(a, str) for a in v)
                                         for v in data.values())):  # was "missing field 'method'"
            raise ValueError(f"{path} is a TF cluster file (worker addresses), not a plan: "
                             f"`meshpar profile --cluster {path}`, then `meshpar plan --profile`, "
                             "makes one")
        return cls.from_dict(data, source=f"plan file {path}")


#: the parts of a worker's device string that do not tell two devices apart
_REPLICA_0 = re.compile(r"/replica:0(?=/|$)")
_DEVICE_TYPE = re.compile(r"(/device:)([A-Za-z]+)(?=:)")


def _refuse_a_worker_device_twice(devices) -> None:
    """ValueError for a worker's device (``/job:...``) listed twice, under any spelling
    TensorFlow reads as one (``/replica:0``, the device type's case): its two slices
    would run on the one device, planned as two devices' speed (a hand-edited plan was
    taken as written). Emulated local devices may share a string, as in
    :class:`~meshpar.planning.cluster.ClusterSpec`."""
    seen = {}
    for pnum, name in enumerate(devices):
        if not name.strip().startswith("/job:"):
            continue
        key = _DEVICE_TYPE.sub(lambda m: m.group(1) + m.group(2).upper(),
                               _REPLICA_0.sub("", name.strip()))
        if key in seen:
            raise ValueError(f"plan: device {name} of pnum {pnum} is pnum {seen[key]}'s "
                             f"({devices[seen[key]]}) too; each worker device holds one "
                             "slice (edit the plan's devices, or plan again)")
        seen[key] = pnum


def _json_float(x) -> Optional[float]:
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def _float(x) -> float:
    """A number field that may be null (NaN)."""
    return math.nan if x is None else _number(x)


def _number(x) -> float:
    """A number field as a float (a string or a bool is not a number)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"not a number: {x!r}")
    return float(x)


def _whole(x) -> bool:
    """Whether ``x`` is an integral number (numpy's too), not a bool, NaN or infinity."""
    return (isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
            and int(x) == x)


def _integer(x) -> int:
    """An integer field: a JSON integer (or an integral number), not a string or bool."""
    if not _whole(x):
        raise ValueError(f"not an integer: {x!r}")
    return int(x)


def _mesh_size(axis, size) -> int:
    """A mesh axis's size as an int; ValueError unless it is a whole number >= 1."""
    if not _whole(size) or size < 1:
        raise ValueError(f"plan: mesh axis {axis!r} needs a whole size >= 1, got {size!r}")
    return int(size)


def _text(x) -> str:
    """A string field as it is (None or a number is not one)."""
    if not isinstance(x, str):
        raise ValueError(f"not a string: {x!r}")
    return x


def _boolean(x) -> bool:
    """A JSON true or false (the string "false" would read as true)."""
    if not isinstance(x, bool):
        raise ValueError(f"not true or false: {x!r}")
    return x


def _number_lists(convert):
    """``{name: [numbers]}`` with each number through ``convert``."""
    def read(value):
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return {str(k): [convert(x) for x in _list(v)] for k, v in value.items()}
    return read


def _list(value) -> tuple:
    """A list field as a tuple (a string, though iterable, is not one)."""
    if not isinstance(value, list):
        raise ValueError("not a list")
    return tuple(value)
