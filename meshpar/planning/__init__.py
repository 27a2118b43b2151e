"""Choosing a plan: the model's layer table, the cluster's device profiles, the cost
model, :class:`~meshpar.planning.plan.Plan` and the planners (even, proportional,
exact, ga). Numpy only: nothing here imports TensorFlow."""
