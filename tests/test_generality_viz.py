"""``meshpar plan --plot`` shows the plan's predicted step for every method.

The middle panel draws the plan's history of predicted steps as a line. The
even, proportional and exact planners' history is one value, and a line
through one point draws nothing: their panel showed only the lower bound.
"""
import pytest

pytest.importorskip("matplotlib")

from meshpar import viz  # noqa: E402
from meshpar.models import describe_model  # noqa: E402
from meshpar.planning.planners import plan  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("method", ["even", "proportional", "exact"])
def test_a_one_value_history_is_drawn_as_a_point(method):
    planned = plan(describe_model("resattnet3d-tiny"), [1.0, 0.4, 0.7], 5, method=method)
    assert len(planned.history) == 1
    ax = viz.plot_ga_convergence(list(planned.history), lower_bound=planned.lower_bound_seconds)
    line = ax.get_lines()[0]
    assert list(line.get_ydata()) == pytest.approx([planned.predicted_step_seconds * 1e3])
    assert line.get_marker() not in (None, "None", "", " ")  # visible
