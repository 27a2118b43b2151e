"""Mesh-TensorFlow's own ops_test.py and layers_test.py, run unmodified.

The test modules ship inside the installed mesh_tensorflow package. Each of
their TestCase classes runs three times here:

* ``Upstream*``: as it is, on Mesh-TensorFlow's ``PlacementMeshImpl``;
* ``Heterogeneous*``: with ``placement_mesh_impl.PlacementMeshImpl`` replaced
  by :class:`HeterogeneousMeshImpl` (even weights: a drop-in replacement);
* ``Skewed*``: replaced by a HeterogeneousMeshImpl that gives coordinate ``i``
  of every mesh axis weight ``i + 1``, so every split in those tests is
  uneven. The tests compare against numpy results, so they must still pass.
  Most upstream tests lower on one processor, though, where nothing splits.
* ``Relaid*``: every one-processor mesh a test lowers on is replaced by an
  uneven multi-processor one chosen from the test's own graph (see
  :func:`relaid_mesh`): up to two of its dimensions that no op marks
  unsplittable, split over ``p:3`` (weights 3, 2, 1) and ``q:2`` (2, 1), so
  the same test body, checked against the same numpy values, runs on 2 to 6
  processors with uneven slices. A test that lowers nothing such a mesh can
  split unevenly is reported as skipped, with the reason.
"""
import inspect
import unittest

import meshpar  # noqa: F401  (import shim)
import mesh_tensorflow as mtf
import mesh_tensorflow.layers_test as upstream_layers_test
import mesh_tensorflow.ops_test as upstream_ops_test
from mesh_tensorflow import ops as mtf_ops
from mesh_tensorflow import placement_mesh_impl

from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from tensorflow.python.framework import config as tf_config

_ORIGINAL = placement_mesh_impl.PlacementMeshImpl


class _WithoutOpDeterminism:
    """Upstream tests draw unseeded random numbers, which TF refuses while op
    determinism (TF_DETERMINISTIC_OPS=1, set for the rest of our suite) is on."""

    def setUp(self):  # noqa: N802
        if tf_config.is_op_determinism_enabled():
            # a cleanup, not tearDown: tearDown is skipped when setUp raises (an
            # upstream setUp that skips its test), and the rest of the suite
            # would then run without op determinism
            self.addCleanup(tf_config.enable_op_determinism)
        tf_config.disable_op_determinism()
        super().setUp()


class SkewedMeshImpl(HeterogeneousMeshImpl):
    """HeterogeneousMeshImpl with weights 1, 2, 3, ... on every mesh axis."""

    def __init__(self, shape, layout, devices):
        shape = mtf.convert_to_shape(shape)
        weights = {d.name: [float(i + 1) for i in range(d.size)]
                   for d in shape.dims if d.size > 1}
        super().__init__(shape, layout, devices, split_weights=weights)


def _replaced_by(prefix, impl_class, case):
    def setUp(self):  # noqa: N802 (unittest name)
        placement_mesh_impl.PlacementMeshImpl = impl_class
        self.addCleanup(setattr, placement_mesh_impl, "PlacementMeshImpl", _ORIGINAL)
        super(cls, self).setUp()

    cls = type(f"{prefix}{case.__name__}", (_WithoutOpDeterminism, case),
               {"setUp": setUp, "__module__": __name__})
    return cls


def _splittable_sizes(graph):
    """{dimension name: its smallest size} over the graph's tensors, for the
    dimensions no op of the graph marks unsplittable and no tensor has twice."""
    sizes, unsplittable = {}, set()
    for op in graph.operations:
        unsplittable.update(op.unsplittable_dims)
        for tensor in list(op.inputs) + list(op.outputs):
            names = [dim.name for dim in tensor.shape.dims]
            unsplittable.update(n for n in names if names.count(n) > 1)
            for dim in tensor.shape.dims:
                sizes[dim.name] = min(sizes.get(dim.name, dim.size), dim.size)
    return {name: size for name, size in sizes.items() if name not in unsplittable}


def relaid_mesh(graph):
    """An uneven HeterogeneousMeshImpl for ``graph``, or None if none exists.

    The largest splittable dimension goes on ``p`` (3 processors if it has 4
    or more elements, else 2), the next largest on ``q:2``; a dimension needs 3
    or more elements to split unevenly. Ties go to the name, so the choice is
    the same on every run.
    """
    sizes = _splittable_sizes(graph)
    chosen = sorted((n for n, size in sizes.items() if size >= 3),
                    key=lambda n: (-sizes[n], n))[:2]
    if not chosen:
        return None
    axes = [("p", 3 if sizes[chosen[0]] >= 4 else 2)] + [("q", 2)] * (len(chosen) > 1)
    shape = ";".join(f"{axis}:{n}" for axis, n in axes)
    layout = ";".join(f"{dim}:{axis}" for dim, (axis, _) in zip(chosen, axes))
    weights = {axis: [float(n - i) for i in range(n)] for axis, n in axes}
    n_proc = 1
    for _, n in axes:
        n_proc *= n
    return HeterogeneousMeshImpl(shape, layout, [""] * n_proc, split_weights=weights)


_RELAID = []  # (test id, layout, uneven) of each lowering a Relaid test replaced


class RelaidLowering(mtf_ops.Lowering):
    """``mtf.Lowering`` that lowers one-processor meshes on :func:`relaid_mesh`."""

    def __init__(self, graph, mesh_to_impl, *args, **kwargs):
        relaid = {}
        for mesh, impl in mesh_to_impl.items():
            new = relaid_mesh(graph) if impl.size == 1 else None
            if new is not None:
                uneven = any(new.is_uneven(t.shape) for op in graph.operations
                             for t in op.outputs if t.mesh is mesh)
                _RELAID.append((_CURRENT_TEST[0], str(new.layout_rules), uneven))
            relaid[mesh] = impl if new is None else new
        super().__init__(graph, relaid, *args, **kwargs)


_CURRENT_TEST = [None]


def _relaid(case):
    def setUp(self):  # noqa: N802
        mtf.Lowering = RelaidLowering
        # restored by a cleanup, which runs even when setUp raises (tearDown does
        # not): a test skipped in its setUp left every later test of the session
        # lowering one-processor meshes on uneven ones
        self.addCleanup(setattr, mtf, "Lowering", mtf_ops.Lowering)
        _CURRENT_TEST[0] = self.id()
        super(cls, self).setUp()

    def tearDown(self):  # noqa: N802
        super(cls, self).tearDown()
        if not any(test == self.id() and uneven for test, _, uneven in _RELAID):
            self.skipTest("lowers no graph that a multi-processor mesh splits unevenly")

    cls = type(f"Relaid{case.__name__}", (_WithoutOpDeterminism, case),
               {"setUp": setUp, "tearDown": tearDown, "__module__": __name__})
    return cls


def _upstream_cases(module):
    return [obj for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, unittest.TestCase)
            and obj.__module__ == module.__name__]


for _module in (upstream_ops_test, upstream_layers_test):
    for _case in _upstream_cases(_module):
        globals()[f"Upstream{_case.__name__}"] = type(
            f"Upstream{_case.__name__}", (_WithoutOpDeterminism, _case),
            {"__module__": __name__})
        globals()[f"Heterogeneous{_case.__name__}"] = _replaced_by(
            "Heterogeneous", HeterogeneousMeshImpl, _case)
        globals()[f"Skewed{_case.__name__}"] = _replaced_by("Skewed", SkewedMeshImpl, _case)
        globals()[f"Relaid{_case.__name__}"] = _relaid(_case)
del _module, _case
