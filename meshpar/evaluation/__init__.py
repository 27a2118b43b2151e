"""Accuracy that holds: the evaluation protocol behind ``meshpar evaluate``.

``metrics`` (accuracy, balanced accuracy, AUC, sensitivity, specificity,
paired comparisons; numpy), ``ceiling`` (what a phantom dataset's ground
truth allows), ``protocol`` (the grid of runs, each ``meshpar train`` +
``meshpar predict`` in its own process) and ``report`` (scoring, fold checks,
summary, table, plot). No module here imports TensorFlow.
"""
