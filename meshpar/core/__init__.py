"""The uneven mesh itself: the split rule, :class:`HeterogeneousMeshImpl` and its
collectives with explicit sizes, the uneven lowerings of Mesh-TensorFlow ops, and
race-free optimizers. Everything here but
:mod:`~meshpar.core.splits` imports TensorFlow."""
