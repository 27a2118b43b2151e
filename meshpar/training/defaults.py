"""Numbers of ``meshpar train``'s default recipe that code without TensorFlow needs.

The command line builds its parsers (every subcommand's, ``meshpar plan``'s
too) from these, and the planner's start-up path imports no TensorFlow;
:mod:`meshpar.training.recipe`, which imports Mesh-TensorFlow, re-exports them.
"""
from __future__ import annotations

__all__ = ["DEFAULT_WEIGHT_DECAY"]

#: The decoupled weight decay of ``meshpar train``'s default recipe (the one the
#: accuracy protocol measured, docs/training.md). A library
#: :class:`~meshpar.training.recipe.Recipe` decays nothing unless asked; the
#: model-step profile times its step with this decay, since the decay is a pass
#: of its own over every kernel each step.
DEFAULT_WEIGHT_DECAY = 1e-3
