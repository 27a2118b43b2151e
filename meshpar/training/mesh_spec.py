"""Where a model runs: :class:`MeshSpec` (mesh shape, layout, devices, split
weights), the model's default layout for a mesh, and the mesh that
:func:`meshpar.training.estimator.build_model_fn`'s arguments choose.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from meshpar import models
from meshpar.core.splits import true_or_false
from meshpar.planning.plan import parse_layout, parse_mesh_shape

__all__ = ["MeshSpec", "default_layout", "chosen_mesh", "check_layout", "as_spec"]


class MeshSpec:
    """Where the model runs: mesh shape, layout, devices, split weights.

    Built from a :class:`~meshpar.planning.plan.Plan` (:meth:`from_plan`) or from
    explicit arguments; :meth:`make_impl` gives a fresh
    :class:`~meshpar.HeterogeneousMeshImpl` (call it inside the graph).

    Parameters
    ----------
    mesh_shape : str
        e.g. ``"batch:2;model:3"`` (``"all:1"``: one device).
    layout : str, optional
        Layout rules; by default the model's :func:`default_layout` for the
        axes the mesh has.
    devices : sequence of str, optional
        One per processor, row-major; default all ``""`` (local).
    split_weights, dim_split_weights : dict, optional
        As for :class:`~meshpar.HeterogeneousMeshImpl`.
    upstream : bool
        Use Mesh-TensorFlow's own ``PlacementMeshImpl`` (even splits only), the
        baseline meshpar is compared with.
    """

    def __init__(self, mesh_shape: str = "all:1", layout: Optional[str] = None,
                 devices: Optional[Sequence[str]] = None,
                 split_weights: Optional[Mapping] = None,
                 dim_split_weights: Optional[Mapping] = None, upstream: bool = False):
        self.mesh_shape = str(mesh_shape)
        self.upstream = true_or_false(upstream, "upstream")
        self.axes = parse_mesh_shape(self.mesh_shape)
        n = 1
        for _, size in self.axes:
            n *= size
        if isinstance(devices, (str, bytes)):  # tuple() would make one device per letter
            raise TypeError(f"devices must be a sequence of device strings, got {devices!r}")
        self.devices = tuple(devices) if devices is not None else ("",) * n
        if len(self.devices) != n:
            raise ValueError(f"mesh {self.mesh_shape} has {n} processors but "
                             f"{len(self.devices)} devices were given")
        if layout is not None:
            parse_layout(layout)  # a clear error now, not Mesh-TF's at the first step
        self.layout = layout
        self.split_weights, self.dim_split_weights = _checked_weights(
            self.mesh_shape, layout, self.devices, split_weights, dim_split_weights)
        if self.upstream and any(len(set(w)) > 1 for w in list(self.split_weights.values())
                                 + list(self.dim_split_weights.values())):
            raise ValueError("Mesh-TensorFlow's PlacementMeshImpl splits evenly only; "
                             "drop the uneven split weights or use meshpar's mesh")

    @classmethod
    def from_plan(cls, plan, devices: Optional[Sequence[str]] = None,
                  upstream: bool = False) -> "MeshSpec":
        """Mesh of a :class:`~meshpar.planning.plan.Plan` (or a path to its JSON)."""
        plan = as_plan(plan)
        devs = plan.devices if devices is None else devices  # MeshSpec checks them
        return cls(plan.mesh_shape_string(), plan.layout_string(), devs,
                   dict(plan.split_weights), dict(plan.dim_split_weights), upstream=upstream)

    @property
    def size(self) -> int:
        """Number of processors (devices) in the mesh."""
        return len(self.devices)

    def layout_for(self, spec: models.ModelSpec) -> str:
        """The layout string for ``spec``: the given one, else the model's default rules
        for this mesh shape.
        """
        return self.layout if self.layout is not None else default_layout(spec, self.mesh_shape)

    def make_impl(self, spec: models.ModelSpec):
        """A ``HeterogeneousMeshImpl`` for ``spec`` on this mesh (or Mesh-TF's own
        ``PlacementMeshImpl`` when ``upstream``)."""
        from meshpar.core.mesh_impl import HeterogeneousMeshImpl

        if self.upstream:
            from mesh_tensorflow.placement_mesh_impl import PlacementMeshImpl

            return PlacementMeshImpl(self.mesh_shape, self.layout_for(spec), list(self.devices))

        return HeterogeneousMeshImpl(self.mesh_shape, self.layout_for(spec), list(self.devices),
                                     split_weights=self.split_weights or None,
                                     dim_split_weights=self.dim_split_weights or None)

    def __repr__(self):
        return (f"MeshSpec({self.mesh_shape!r}, layout={self.layout!r}, devices={self.devices!r}, "
                f"upstream={self.upstream!r}, "
                f"split_weights={self.split_weights!r}, "
                f"dim_split_weights={self.dim_split_weights!r})")


def as_plan(plan):
    """``plan`` as a :class:`~meshpar.planning.plan.Plan`: one, or the path of its JSON
    (:meth:`Plan.load`). TypeError for anything else: a dict (a plan file's
    ``json.load``) ended in "'dict' object has no attribute 'devices'"."""
    from meshpar.planning.plan import Plan  # lazy: plan module is optional here

    if isinstance(plan, (str, os.PathLike)):
        return Plan.load(plan)
    if not isinstance(plan, Plan):
        hint = "; for a plan file's JSON object, Plan.from_dict(it)" * isinstance(plan, dict)
        raise TypeError(f"plan must be a Plan or the path of a plan file, got a "
                        f"{type(plan).__name__}{hint}")
    return plan


def _checked_weights(mesh_shape: str, layout, devices, split_weights: Optional[Mapping],
                     dim_split_weights: Optional[Mapping]) -> tuple:
    """``(split_weights, dim_split_weights)`` as float lists, checked by the mesh impl
    now, not at the first step (a dimension's axis only if ``layout`` is known)."""
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl
    from meshpar.core.splits import validate_weights

    for name, value in (("split_weights", split_weights),
                        ("dim_split_weights", dim_split_weights)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a dict of weight lists, got {value!r}")
    dims = {k: validate_weights(v, f"dim_split_weights for dimension {k!r}")
            for k, v in (dim_split_weights or {}).items()}
    impl = HeterogeneousMeshImpl(mesh_shape, layout or "", list(devices), split_weights,
                                 dims if layout is not None else None)
    return {k: list(v) for k, v in impl.split_weights.items()}, dims


def default_layout(spec: models.ModelSpec, mesh_shape: str) -> str:
    """The model's layout rules for the axes present in ``mesh_shape``.

    Axis ``batch`` gets the batch dimension, axis ``model`` every filter, key,
    value and unit dimension with at least as many units as the axis has
    devices (the planner's rule, ``CostModel.active_dims``: a dimension of 4
    filters stays whole on ``model:5``, where it has no split with every part
    >= 1); a one-axis mesh of another name (``all:4``) is used for the model
    dimensions.
    """
    batch_axis, model_axis = _default_axes(mesh_shape)
    rules = spec.layout_rules(model_axis=model_axis, batch_axis=batch_axis)
    parsed = parse_layout(rules, f"{spec.name}'s layout")
    narrow = _narrow_dims(spec, dict(parse_mesh_shape(mesh_shape)).get(model_axis, 1),
                          [dim for dim, axis in parsed if axis == model_axis])
    if not narrow:
        return rules
    return ";".join(f"{dim}:{axis}" for dim, axis in parsed
                    if not (axis == model_axis and dim in narrow))


def _default_axes(mesh_shape: str) -> tuple:
    """``(batch axis, model axis)`` of the models' default layout on ``mesh_shape``
    (either None where the mesh has no such axis)."""
    names = [name for name, _ in parse_mesh_shape(mesh_shape)]
    others = [n for n in names if n != "batch"]
    return ("batch" if "batch" in names else None,
            "model" if "model" in names else (others[0] if len(others) == 1 else None))


def _narrow_dims(spec: models.ModelSpec, size: int, names=()) -> dict:
    """``{dimension: units}`` of ``spec``'s split dimensions, and of ``names``, with
    fewer units than ``size`` devices (none when ``size`` is 1)."""
    if size <= 1:
        return {}
    return {dim: units for dim, units in _dimensions(spec, names).items()
            if units is not None and units < size}


def _dimensions(spec: models.ModelSpec, names=()) -> dict:
    """``{dimension: units}`` a layout of ``spec`` may name: its layer table's split
    dimensions and its batch (units None); where ``names`` holds one the table lacks,
    also every dimension of the graph its ``build`` makes, when its input shape is
    known. The table gives one split dimension per layer, so a network of one's own
    may split another (attention's heads, where the table has its kv): refused as a
    dimension the model does not have, on one device too."""
    description = spec.describe()
    dims = {**description.split_dims, description.batch_dim: None}
    if any(name not in dims for name in names) and models.known_input_shape(spec) is not None:
        from meshpar.core.graph_description import built_dimensions  # imports TensorFlow

        dims = {**built_dimensions(spec.build, spec.input_shape), **dims}
    return dims


def as_spec(model) -> models.ModelSpec:
    """The :class:`~meshpar.models.ModelSpec` of a model name, spec or model config
    (ValueError for anything else)."""
    if isinstance(model, models.ModelSpec):
        return model
    if isinstance(model, str):  # a registered name or a reference to a module of one's own
        return models.resolve(model)
    if isinstance(model, models.ResAttNet3DConfig):
        return models.ModelSpec(model.name, models.resattnet3d, model)
    if isinstance(model, models.VggCifarConfig):
        return models.ModelSpec(model.name, models.vgg_cifar, model)
    raise ValueError(f"model must be a registered name ({', '.join(models.names())}), a "
                     "ModelSpec or a registered network's config, got "
                     f"{model!r}; for a network of one's own, pass "
                     "meshpar.models.from_module(module, config)")


def chosen_mesh(spec: models.ModelSpec, plan, mesh: Optional[MeshSpec], upstream: bool,
                 explicit: dict) -> MeshSpec:
    """The mesh of :func:`build_model_fn`'s arguments; ValueError for a mesh argument
    that ``plan`` or ``mesh`` would silently override (a plan takes ``devices``,
    as many as it has, to re-place it)."""
    if sum(x is not None for x in (plan, mesh, explicit["mesh_shape"])) > 1:
        raise ValueError("give one of plan=, mesh= or mesh_shape=")
    if mesh is not None and not isinstance(mesh, MeshSpec):
        raise TypeError(f"mesh must be a MeshSpec, got {mesh!r}")
    devices = explicit.pop("devices")
    clash = [f"{k}=" for k, v in explicit.items() if v is not None]
    if mesh is not None:  # a plan takes devices= and upstream=; a MeshSpec has its own
        clash += ["devices="] * (devices is not None)
        clash += ["upstream="] * bool(upstream and not mesh.upstream)
    if clash and (plan is not None or mesh is not None):
        why = "a plan takes devices= to re-place it" if mesh is None else "give them to it"
        raise ValueError(f"{'plan' if mesh is None else 'mesh'}= sets the whole mesh: drop "
                         f"{', '.join(clash)} ({why})")
    if plan is not None:
        plan = as_plan(plan)
        # as `meshpar train --plan` does; a config of one's own may have no name
        models.reference.check_plan_model(plan, spec)
        mesh = MeshSpec.from_plan(plan, devices, upstream=upstream)
    elif mesh is None:
        mesh = MeshSpec(explicit["mesh_shape"] or "all:1", explicit["layout"], devices,
                        explicit["split_weights"], explicit["dim_split_weights"], upstream)
    if mesh.layout is None and mesh.dim_split_weights:  # the layout is the model's: check now
        _checked_weights(mesh.mesh_shape, mesh.layout_for(spec), mesh.devices, None,
                         mesh.dim_split_weights)
    check_layout(spec, mesh)
    return mesh


def check_layout(spec: models.ModelSpec, mesh: MeshSpec) -> None:
    """ValueError where ``mesh`` would split less of ``spec`` than it says, which would
    otherwise train with the work copied on every device: a layout rule naming a
    dimension the model does not have (a typo); a rule naming an axis the mesh does
    not have while an axis of size > 1 goes unused (a rule for another mesh, as
    ``batch:batch`` on ``model:2``, is skipped as Mesh-TF does); with the model's own
    rules (no ``layout``), a mesh axis of size > 1 that none of them uses (they name
    ``batch`` and ``model``, or a mesh's only other axis). An explicit layout may
    leave an axis unused on purpose (``layout=""``: replicated).
    """
    what = f"{spec.name} on mesh {mesh.mesh_shape}"
    rules = parse_layout(mesh.layout_for(spec), f"layout of {what}")
    description = spec.describe()
    dims = _dimensions(spec, [dim for dim, _ in rules])
    axes = dict(parse_mesh_shape(mesh.mesh_shape))
    for dim, axis in rules:
        if dim not in dims:
            listed = {description.batch_dim, *description.split_dims}
            raise ValueError(f"layout rule {dim}:{axis}: {spec.name} has no dimension {dim!r}; "
                             f"it lays out {', '.join(sorted(listed))}")
    used = {axis for _, axis in rules}
    idle = [name for name, size in axes.items() if size > 1 and name not in used]
    absent = [(dim, axis) for dim, axis in rules if axis not in axes]
    if absent and idle:  # a rule for another mesh is fine (Mesh-TF skips it); not a typo
        dim, axis = absent[0]
        raise ValueError(f"layout rule {dim}:{axis}: mesh {mesh.mesh_shape} has no axis "
                         f"{axis!r}, and no rule uses its axis {idle[0]!r}")
    if mesh.layout is None and idle:
        batch_axis, model_axis = _default_axes(mesh.mesh_shape)
        own = parse_layout(spec.layout_rules(model_axis=model_axis, batch_axis=batch_axis),
                           f"{spec.name}'s layout")
        narrow = _narrow_dims(spec, axes[idle[0]], [dim for dim, axis in own if axis == idle[0]])
        if narrow and idle[0] == model_axis:  # all narrower than it
            shown = ", ".join(f"{dim} {units}" for dim, units in narrow.items())
            raise ValueError(f"mesh {mesh.mesh_shape}: axis {idle[0]!r} splits nothing: each "
                             f"dimension {spec.name} lays out on it has fewer units than its "
                             f"{axes[idle[0]]} devices ({shown}); use a smaller axis")
        raise ValueError(f"mesh {mesh.mesh_shape}: axis {idle[0]!r} splits nothing, since "
                         f"{spec.name}'s layout puts the batch on an axis named 'batch' and its "
                         "filters on one named 'model' (or on a mesh's only other axis); name "
                         "the axes so, or give layout=")
