"""Each plot in meshpar.viz draws real content: PNG files, or axes with the expected bars."""
import pytest

pytest.importorskip("matplotlib")

from meshpar import viz  # noqa: E402
from meshpar.planning.cluster import ClusterSpec  # noqa: E402
from meshpar.planning.cost_model import CostModel  # noqa: E402
from meshpar.models import describe_model  # noqa: E402
from meshpar.planning.planners import plan as make_plan  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def planned():
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
    p = make_plan(model, cluster, 8, method="ga", seed=0, generations=5)
    return model, cluster, p


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_device_timeline_has_a_compute_and_an_idle_bar_per_device(planned):
    model, cluster, p = planned
    cost = CostModel(model, cluster, p.batch)
    ax = viz.plot_device_timeline(p, cost=cost)
    bars = ax.patches
    n = len(p.devices)
    assert len(bars) == 2 * n
    evaluation = cost.evaluate_plan(p)
    step_ms = float(evaluation.seconds[0]) * 1e3
    for pnum in range(n):
        busy, idle = bars[pnum], bars[n + pnum]
        assert busy.get_width() == pytest.approx(evaluation.device_seconds[0][pnum] * 1e3)
        assert busy.get_width() + idle.get_width() == pytest.approx(step_ms)
        assert idle.get_x() == pytest.approx(busy.get_width())
    assert [t.get_text() for t in ax.get_yticklabels()][0].startswith(
        {d.device: d.name for d in cluster.devices}[p.devices[0]])


def test_device_timeline_from_an_evaluation_alone_labels_device_strings(planned):
    model, cluster, p = planned
    evaluation = CostModel(model, cluster, p.batch).evaluate_plan(p)
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    assert viz.plot_device_timeline(p, evaluation=evaluation, ax=ax) is ax
    assert len(ax.patches) == 2 * len(p.devices)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(p.devices)
    assert f"{float(evaluation.seconds[0]) * 1e3:.2f} ms" in ax.get_title()


def test_device_timeline_needs_an_evaluation_or_a_cost_model(planned):
    with pytest.raises(ValueError, match="evaluation or a cost model"):
        viz.plot_device_timeline(planned[2])


def test_even_plan_leaves_the_fast_device_idle_in_the_timeline():
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.25])
    p = make_plan(model, cluster, 8, method="even")
    ax = viz.plot_device_timeline(p, cost=CostModel(model, cluster, 8))
    idle = {p.devices[i]: ax.patches[2 + i].get_width() for i in range(2)}
    fast, slow = cluster.devices[0].device, cluster.devices[1].device
    assert idle[fast] > idle[slow]


def test_plot_plan_with_model_and_cluster_adds_the_timeline_panel(planned, tmp_path,
                                                                   monkeypatch):
    model, cluster, p = planned
    import matplotlib.figure

    drawn = []
    savefig = matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        drawn.append(len(fig.axes))
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    two = viz.plot_plan(p, str(tmp_path / "two.png"))
    three = viz.plot_plan(p, str(tmp_path / "three.png"), model=model, cluster=cluster)
    assert drawn == [2, 3]
    for path in (two, three):
        with open(path, "rb") as f:
            assert f.read(8) == PNG


def test_plan_split_draws_one_bar_per_slice(planned):
    p = planned[2]
    ax = viz.plot_plan_split(p)
    assert len(ax.patches) == sum(len(s) for s in p.split_sizes.values())
    assert [t.get_text() for t in ax.get_yticklabels()] == list(p.split_sizes)


def test_ga_convergence_plots_the_history_in_ms(planned):
    p = planned[2]
    ax = viz.plot_ga_convergence(list(p.history), lower_bound=p.lower_bound_seconds)
    line = ax.get_lines()[0]
    assert list(line.get_ydata()) == pytest.approx([h * 1e3 for h in p.history])
    assert len(ax.get_lines()) == 2  # history + lower bound


def test_benchmark_plot_writes_a_png(tmp_path):
    result = {
        "ideal_samples_per_second": 10.0,
        "cluster": {"speeds": [0.9, 0.3]},
        "strategies": {
            "even": {"samples_per_second": 5.0, "median_step_seconds": 1.6,
                     "busy_seconds_per_worker": {"0": 0.5, "1": 1.5}},
            "ga": {"samples_per_second": 9.5, "median_step_seconds": 0.84,
                   "busy_seconds_per_worker": {"0": 0.8, "1": 0.8}},
            "failed": {"error": "not measured"},
        },
    }
    path = viz.plot_benchmark(result, str(tmp_path / "bench.png"))
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG and len(data) > 1000


def test_benchmark_plot_and_table_without_the_even_split(tmp_path):
    """On 3 workers a workload may not split evenly: the even rows are skipped, and
    the plot and the table say so instead of failing (KeyError) or printing nan."""
    from meshpar.bench import hetero as bench_hetero

    skipped = {"skipped": "not expressible for this workload"}
    result = {
        "ideal_samples_per_second": 10.0, "standalone_samples_per_second": [5.0, 3.0, 2.0],
        "cluster": {"speeds": [0.9, 0.5, 0.3]},
        "strategies": {
            "even": skipped, "dp-even": skipped,
            "ga": {"samples_per_second": 9.0, "median_step_seconds": 0.9, "efficiency": 0.9,
                   "mesh_shape": "model:3", "busy_seconds_per_worker": {"0": 0.8, "1": 0.8}},
        },
    }
    path = viz.plot_benchmark(result, str(tmp_path / "bench.png"))
    with open(path, "rb") as f:
        assert f.read(8) == PNG
    table = bench_hetero.format_table(result)
    assert "nan" not in table and "not expressible" in table
    ga_row = next(line for line in table.splitlines() if line.startswith("ga "))
    assert ga_row.split()[4] == "-"  # vs even
