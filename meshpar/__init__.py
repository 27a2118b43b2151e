"""meshpar: uneven (heterogeneous) model and data parallelism on Mesh-TensorFlow.

The split rule is pure Python and imports no TensorFlow; the mesh
implementation (which needs TensorFlow and mesh_tensorflow) is imported lazily
so the planner and the CLI start fast.
"""
from __future__ import annotations

from meshpar import _onednn

_onednn.default_on()  # before anything imports TensorFlow: it reads the setting once

from meshpar import _compat  # noqa: E402
from meshpar.core.splits import even_sizes, split_sizes  # noqa: E402

_compat.install_import_hook()

__version__ = "0.1.0"

__all__ = ["HeterogeneousMeshImpl", "split_sizes", "even_sizes", "__version__"]


def __getattr__(name):  # PEP 562: import TensorFlow only when asked for
    if name == "HeterogeneousMeshImpl":
        from meshpar.core.mesh_impl import HeterogeneousMeshImpl

        return HeterogeneousMeshImpl
    raise AttributeError(f"module 'meshpar' has no attribute {name!r}")
