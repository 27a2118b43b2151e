"""Mesh-TensorFlow's own ops_test.py and layers_test.py, run unmodified.

The test modules ship inside the installed mesh_tensorflow package. Each of
their TestCase classes runs three times here:

* ``Upstream*``: as it is, on Mesh-TensorFlow's ``PlacementMeshImpl``;
* ``Heterogeneous*``: with ``placement_mesh_impl.PlacementMeshImpl`` replaced
  by :class:`HeterogeneousMeshImpl` (even weights: a drop-in replacement);
* ``Skewed*``: replaced by a HeterogeneousMeshImpl that gives coordinate ``i``
  of every mesh axis weight ``i + 1``, so every split in those tests is
  uneven. The tests compare against numpy results, so they must still pass.
"""
import inspect
import unittest

import meshpar  # noqa: F401  (import shim)
import mesh_tensorflow as mtf
import mesh_tensorflow.layers_test as upstream_layers_test
import mesh_tensorflow.ops_test as upstream_ops_test
from mesh_tensorflow import placement_mesh_impl

from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from tensorflow.python.framework import config as tf_config

_ORIGINAL = placement_mesh_impl.PlacementMeshImpl


class _WithoutOpDeterminism:
    """Upstream tests draw unseeded random numbers, which TF refuses while op
    determinism (TF_DETERMINISTIC_OPS=1, set for the rest of our suite) is on."""

    def setUp(self):  # noqa: N802
        self._was_deterministic = tf_config.is_op_determinism_enabled()
        tf_config.disable_op_determinism()
        super().setUp()

    def tearDown(self):  # noqa: N802
        super().tearDown()
        if self._was_deterministic:
            tf_config.enable_op_determinism()


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
        super(cls, self).setUp()

    def tearDown(self):  # noqa: N802
        placement_mesh_impl.PlacementMeshImpl = _ORIGINAL
        super(cls, self).tearDown()

    cls = type(f"{prefix}{case.__name__}", (_WithoutOpDeterminism, case),
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
del _module, _case
