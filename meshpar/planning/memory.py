"""What a worker needs in memory for its part of a plan: the count the cost
model and the exact planner hold plans to (numpy, no TensorFlow).

The tensors a plan puts on a device are counted from the model description
(parameter slices, the input and every layer output the backward pass keeps);
a training worker holds more than one copy of each at its peak, plus memory
that does not depend on the plan at all. :class:`MemoryTerms` says how many:

* ``base_bytes``: what any working worker adds over an idle one (thread
  pools, kernel scratch, oneDNN primitive caches, the step's graph);
* per parameter byte: the value, its gradient and the optimizer's slots,
  counted exactly, plus ``update_copies`` for the temporaries of the update
  and of the checkpoint transfer;
* ``exchange_copies`` more per parameter byte where the batch axis is split
  (the gradient all-reduce: the flat concatenation, the peer's copy, the sum);
* ``activation_copies`` per kept activation byte (the output itself, its
  gradient in the backward pass, the intermediates a layer keeps besides its
  output: a normalisation's centred input, an activation function's mask);
* ``headroom``: the share of a device's memory a plan's count may not use,
  because the count has been up to 23% under a measured need: a plan is
  held to ``(1 - headroom) x memory``.

The defaults are fitted (least squares on the relative error) to ``meshpar
bench memory`` runs of this repository, TensorFlow 2.15 on Linux x86-64: the
peak resident growth of 56 worker rows, six workloads from vgg-cifar-small
(17 MiB) to resattnet3d at 96x112x96 (12 GiB), every strategy, two and three
workers. The count is then 0.77-1.56 of the measured need (median 0.97);
the tensors alone were at most 0.68 of it, median 0.35 (docs/cost_model.md
"Memory: the count against the measured peak", with a held-out check).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIB = 2 ** 20


@dataclass(frozen=True)
class MemoryTerms:
    """Multiples of the counted tensors a worker holds at its peak (see module doc)."""

    base_bytes: float = 18.5 * MIB
    update_copies: float = 4.0
    exchange_copies: float = 2.8
    activation_copies: float = 2.3
    headroom: float = 0.25

    def __post_init__(self):
        for name in ("base_bytes", "update_copies", "exchange_copies", "activation_copies"):
            value = float(getattr(self, name))
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"MemoryTerms.{name} must be finite and >= 0, got {value!r}")
        if not 0.0 <= float(self.headroom) < 1.0:
            raise ValueError(f"MemoryTerms.headroom must be in [0, 1), got {self.headroom!r}")

    def usable(self, memory_bytes):
        """What a plan's count may take of devices with ``memory_bytes``."""
        return np.asarray(memory_bytes, dtype=float) * (1.0 - self.headroom)

    def state_copies(self, optimizer_slots: int, batch_split: bool) -> float:
        """Bytes held per parameter byte of a device's slices: value, gradient,
        ``optimizer_slots``, the update's temporaries, and the gradient
        exchange's buffers where the batch axis is split (``batch_split``)."""
        return (2.0 + optimizer_slots + self.update_copies
                + (self.exchange_copies if batch_split else 0.0))

    def device_bytes(self, param_bytes, activation_bytes, optimizer_slots: int,
                     batch_split: bool):
        """Peak bytes of devices holding ``param_bytes`` of parameter slices and
        ``activation_bytes`` of kept activations (input included); arrays broadcast."""
        return (self.base_bytes
                + self.state_copies(optimizer_slots, batch_split) * np.asarray(param_bytes)
                + self.activation_copies * np.asarray(activation_bytes))


#: The counted tensors alone, one copy each (the count before it was measured):
#: for tests of the counting itself and for comparison.
TENSORS_ONLY = MemoryTerms(base_bytes=0.0, update_copies=0.0, exchange_copies=0.0,
                           activation_copies=1.0, headroom=0.0)

#: The terms fitted on this host (see module doc).
MEASURED = MemoryTerms()
