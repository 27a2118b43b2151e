"""Make mesh-tensorflow 0.1.21 importable on TensorFlow 2.13-2.15.

mesh_tensorflow/tpu_variables.py calls
``tensorflow.python.framework.ops.register_tensor_conversion_function``. TF 2.13
moved that function to ``tensorflow.python.framework.tensor_conversion_registry``
and removed the alias from ``ops``, so ``import mesh_tensorflow`` fails with an
AttributeError. We put the alias back, once, before mesh_tensorflow is imported.
On TF <= 2.12 the attribute exists and nothing is changed.

Importing :mod:`meshpar` applies this shim; import ``meshpar`` (or
``meshpar._compat``) before ``mesh_tensorflow``.
"""
from __future__ import annotations

_APPLIED = False


def apply() -> bool:
    """Install the alias if this TensorFlow lacks it.

    Returns
    -------
    bool
        True if the alias had to be added, False if TensorFlow already had it.
    """
    global _APPLIED
    from tensorflow.python.framework import ops  # noqa: WPS433 (import on demand: TF is slow)

    if hasattr(ops, "register_tensor_conversion_function"):
        return _APPLIED
    from tensorflow.python.framework import tensor_conversion_registry

    ops.register_tensor_conversion_function = (
        tensor_conversion_registry.register_tensor_conversion_function)
    _APPLIED = True
    return True


def import_mesh_tensorflow():
    """Apply the shim and return the ``mesh_tensorflow`` module."""
    apply()
    import mesh_tensorflow as mtf

    return mtf


class _MeshTensorflowImportHook:
    """A ``sys.meta_path`` finder that applies :func:`apply` just before
    ``mesh_tensorflow`` is first imported, so ``import meshpar`` makes
    ``import mesh_tensorflow`` work without importing TensorFlow itself
    (the planner and the CLI must start fast)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mesh_tensorflow":
            return None
        remove_import_hook()
        apply()
        return None  # let the normal finders import it, now that TF is patched


_HOOK = _MeshTensorflowImportHook()


def install_import_hook() -> None:
    """Patch TensorFlow on the first ``import mesh_tensorflow`` (idempotent)."""
    import sys

    if "mesh_tensorflow" in sys.modules:
        return
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def remove_import_hook() -> None:
    """Take the import hook off ``sys.meta_path`` again (a no-op when it is not there)."""
    import sys

    while _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
