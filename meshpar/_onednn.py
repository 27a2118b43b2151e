"""oneDNN CPU kernels for TensorFlow, on by default.

TensorFlow 2.15 turns its oneDNN (MKL) CPU kernels on by itself only on CPUs
with AVX-512 VNNI/BF16 or AMX; elsewhere (AVX2-only x86, e.g. many AMD EPYC
and older Intel servers) 3-D convolutions and their gradients run on Eigen's
generic kernels. On such a machine (2-core AMD EPYC, one thread) the full
resattnet3d-small training step ran 5.0x faster with oneDNN (12.4 -> 61.7
samples/s, ``meshpar train --synthetic --model resattnet3d-small``), while
vgg-cifar's 2-D convolutions were the same either way (60.4 vs 56.7, noise).
docs/measuring.md has the trace.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, when it is imported, so
:func:`default_on` must run before ``import tensorflow``: importing
:mod:`meshpar` does it. A value the user set is kept (``TF_ENABLE_ONEDNN_OPTS=0``
turns the kernels off), and when TensorFlow was imported first nothing is
changed. Worker processes (``meshpar worker``, LocalCluster) import meshpar the
same way. With one thread the kernels are deterministic: two runs of the same
command give the same weights bit for bit (tests/test_determinism.py).
"""
from __future__ import annotations

import os
import sys

ENV = "TF_ENABLE_ONEDNN_OPTS"


def default_on() -> bool:
    """Set ``TF_ENABLE_ONEDNN_OPTS=1`` unless it is set or TensorFlow is already
    imported. Returns True if this call set it."""
    if ENV in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[ENV] = "1"
    return True


def enabled() -> bool:
    """Whether this process's TensorFlow runs its oneDNN CPU kernels (imports TF)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())
