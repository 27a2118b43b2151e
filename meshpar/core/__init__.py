"""The uneven mesh itself: the split rule, :class:`HeterogeneousMeshImpl`, the uneven
lowerings of Mesh-TensorFlow ops, and race-free optimizers. Everything here but
:mod:`~meshpar.core.splits` imports TensorFlow."""
