"""The heterogeneous speed-up benchmark, on real TF gRPC workers.

``meshpar bench hetero`` (and ``benchmarks/hetero.py``):

1. start a :class:`~meshpar.runtime.local_cluster.LocalCluster` (default: CPU shares
   0.9 and 0.3, one single-threaded worker per core, pinned);
2. measure each worker's standalone throughput on the workload (the whole
   batch on that worker alone) at several filter-slice sizes; the ideal is the
   sum of the standalone throughputs;
3. measure, side by side in the same run, steady-state samples/s of
   ``single`` (fastest worker alone), ``even`` (Mesh-TF's own
   ``PlacementMeshImpl``, equal filter split), ``dp-even`` / ``dp-proportional``
   (batch split only), ``proportional`` (filter split by standalone speed) and
   ``ga`` (the GABRA planner's best plan per mesh shape from the measured speed
   profiles, each timed briefly on the cluster, the fastest kept);
4. print a table and write JSON and a PNG (no PNG with --no-plot).

The workload is a training step of a 3-D convolution (forward, filter
gradient, SGD update) whose input lives on the workers as a variable, so no
activation crosses the network each step (see docs/measuring.md).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

DEFAULT_SPEEDS = (0.9, 0.3)


@dataclass(frozen=True)
class Conv3dWorkload:
    """A 3-D convolution layer trained with SGD: ``batch x s^3 x c_in -> c_out``."""

    name: str = "conv3d"
    batch: int = 8
    spatial: int = 24
    c_in: int = 64
    c_out: int = 128
    kernel: int = 3

    @property
    def forward_flops_per_sample(self) -> float:
        """FLOPs of the convolution's forward pass for one sample (2 per multiply-add)."""
        return 2.0 * self.spatial ** 3 * self.kernel ** 3 * self.c_in * self.c_out

    def description(self):
        """The layer table the planner and cost model read."""
        from meshpar.planning.description import Layer, ModelDescription

        layer = Layer(name="conv", kind="conv3d", flops=self.forward_flops_per_sample,
                      params=self.kernel ** 3 * self.c_in * self.c_out,
                      in_elems=self.spatial ** 3 * self.c_in,
                      out_elems=self.spatial ** 3 * self.c_out,
                      split_dim="filters", split_size=self.c_out, comm=None)
        return ModelDescription(name=self.name, layers=(layer,), batch_dim="batch",
                                input_elems=self.spatial ** 3 * self.c_in)


WORKLOADS = {
    "conv3d": Conv3dWorkload(),
    "conv3d-quick": Conv3dWorkload(name="conv3d-quick", spatial=16),
    # for the test suite: exercises every step in seconds
    "conv3d-tiny": Conv3dWorkload(name="conv3d-tiny", batch=4, spatial=6, c_in=4, c_out=8),
}


@dataclass
class Strategy:
    """One way to run the workload: a mesh, a layout, devices and weights."""

    name: str
    mesh_shape: str
    layout: str
    devices: list
    split_weights: Optional[dict] = None
    upstream: bool = False  # Mesh-TF's own PlacementMeshImpl
    predicted_seconds: Optional[float] = None

    def mesh_impl(self):
        """The mesh implementation that runs this strategy: Mesh-TF's ``PlacementMeshImpl``
        when ``upstream``, else a ``HeterogeneousMeshImpl`` with ``split_weights``.
        """
        from meshpar.core.mesh_impl import HeterogeneousMeshImpl

        if self.upstream:
            from mesh_tensorflow import placement_mesh_impl

            return placement_mesh_impl.PlacementMeshImpl(self.mesh_shape, self.layout, self.devices)
        return HeterogeneousMeshImpl(self.mesh_shape, self.layout, self.devices,
                                     split_weights=self.split_weights)


def build_step(workload: Conv3dWorkload, strategy: Strategy, scope: str):
    """A tf.Graph with the workload's training step lowered on the strategy's mesh.

    Returns (graph, init_op, step_op). Variable names carry ``scope``: variables
    live on the servers, so each strategy needs its own.
    """
    import numpy as np

    import meshpar  # noqa: F401
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    from meshpar.core.optim import Sgd, race_free_update_ops

    graph_tf = tf.Graph()
    with graph_tf.as_default(), tf.variable_scope(scope):
        tf.set_random_seed(0)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        w = workload
        dims = [mtf.Dimension("batch", w.batch)] + [
            mtf.Dimension(n, w.spatial) for n in ("d", "h", "w")] + [mtf.Dimension("c", w.c_in)]
        # The input is a (non-trainable) variable: its slices live on the workers.
        rng = np.random.RandomState(0)
        data = rng.standard_normal((w.batch, w.spatial, w.spatial, w.spatial, w.c_in))
        x = mtf.get_variable(mesh, "input", mtf.Shape(dims), trainable=False,
                             initializer=tf.constant_initializer(data.astype(np.float32)))
        y = mtf.layers.conv3d(x, mtf.Dimension("filters", w.c_out),
                              filter_size=(w.kernel,) * 3, name="conv")
        loss = mtf.reduce_mean(mtf.square(y))
        updates = race_free_update_ops(graph, loss, Sgd(1e-3))
        lowering = mtf.Lowering(graph, {mesh: strategy.mesh_impl()})
        step = tf.group([lowering.lowered_operation(u) for u in updates]
                        + [lowering.export_to_tf_tensor(loss)])
        init = tf.group(tf.global_variables_initializer())
        with tf.control_dependencies([init]):
            copy = lowering.copy_masters_to_slices()
    return graph_tf, (init, copy), step


class StrategyRunner:
    """A session on the cluster with one strategy's graph, ready to time."""

    def __init__(self, target: str, workload, strategy: Strategy, scope: str):
        import tensorflow.compat.v1 as tf

        self.strategy = strategy
        self.graph, init, self.step = build_step(workload, strategy, scope)
        config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        self.session = tf.Session(target, graph=self.graph, config=config)
        self.session.run(init[0])
        self.session.run(init[1])

    def time_steps(self, warmup: int, steps: int) -> list:
        """Run ``warmup`` untimed steps, then return the wall seconds of ``steps`` steps."""
        for _ in range(warmup):
            self.session.run(self.step)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.session.run(self.step)
            times.append(time.perf_counter() - start)
        return times

    def busy_seconds(self) -> dict:
        """Per-device busy time of one traced step (sum of op run times)."""
        import tensorflow.compat.v1 as tf

        options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
        metadata = tf.RunMetadata()
        self.session.run(self.step, options=options, run_metadata=metadata)
        busy = {}
        for dev in metadata.step_stats.dev_stats:
            task = _task_of(dev.device)
            if task is None:
                continue
            total = sum(node.all_end_rel_micros for node in dev.node_stats) / 1e6
            busy[task] = busy.get(task, 0.0) + total
        return busy

    def close(self):
        """Close the session (the workers keep running)."""
        self.session.close()


def _task_of(device: str) -> Optional[int]:
    if "/job:worker" not in device or "/task:" not in device or "CPU" not in device.upper():
        return None
    return int(device.split("/task:")[1].split("/")[0])


def _median(times: Sequence[float]) -> float:
    return statistics.median(times)


# ------------------------------------------------------------------ planning
def profile_cluster(cluster, workload, runner_factory, warmup, steps, fractions, log):
    """Measure each worker alone at several filter-slice sizes -> ClusterSpec.

    The profile points are (FLOPs of the work item, FLOP/s), in the cost
    model's convention (3 x forward FLOPs), so the cost model reproduces the
    measured time of each slice.
    """
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    devices, standalone = [], []
    for i, device in enumerate(cluster.devices):
        points = []
        for fraction in fractions:
            c_out = max(1, int(round(workload.c_out * fraction)))
            sub = Conv3dWorkload(workload.name, workload.batch, workload.spatial,
                                 workload.c_in, c_out, workload.kernel)
            runner = runner_factory(sub, Strategy(f"alone{i}", "all:1", "", [device]),
                                    f"profile_w{i}_c{c_out}")
            seconds = _median(runner.time_steps(warmup, steps))
            runner.close()
            flops = 3.0 * sub.forward_flops_per_sample * sub.batch
            points.append((flops, flops / seconds))
            if fraction == 1.0:
                standalone.append(workload.batch / seconds)
            log(f"  worker {i} alone, {c_out:4d} filters: {seconds * 1000:8.1f} ms/step")
        devices.append(DeviceSpec(name=f"w{i}", device=device, profile=tuple(points)))
    return ClusterSpec(devices=tuple(devices)), standalone


# ------------------------------------------------------------------- driver
def run_benchmark(speeds: Sequence[float] = DEFAULT_SPEEDS, quick: bool = False,
                  workload_name: Optional[str] = None, throttle: str = "auto",
                  steps: Optional[int] = None, seed: int = 0, log=print,
                  cluster_file: Optional[str] = None, only_ga: bool = False,
                  period_us: Optional[int] = None) -> dict:
    """Run the whole benchmark; return the results as a JSON-ready dict.

    With ``cluster_file`` (or ``"TF_CONFIG"``) it runs on existing workers
    instead of starting a LocalCluster of ``speeds``. ``only_ga`` measures the
    planned strategy alone (used by the scaling benchmark). ``period_us``: the
    LocalCluster throttle's period (None: its default).
    """
    from meshpar.runtime.cluster_files import ExistingCluster
    from meshpar.runtime.local_cluster import LocalCluster

    workload = WORKLOADS[workload_name or ("conv3d-quick" if quick else "conv3d")]
    warmup, steps = (1, steps or 3) if quick else (2, steps or 7)
    fractions = (1.0, 0.5, 0.25) if quick else (1.0, 0.75, 0.5, 0.25)
    started = time.time()
    if cluster_file:
        context = ExistingCluster(cluster_file)
        speeds = context.speeds
    else:
        context = LocalCluster(speeds, throttle=throttle, period_us=period_us)
    with context as cluster:
        log(f"cluster: {cluster.describe()}")
        log(f"workload: {workload}")

        def runner(w, strategy, scope):
            return StrategyRunner(cluster.target, w, strategy, scope)

        log("profiling each worker alone (speed as a function of slice size):")
        cluster_spec, standalone = profile_cluster(cluster, workload, runner, warmup, steps,
                                                   fractions, log)
        ideal = sum(standalone)
        model = workload.description()
        n = len(speeds)
        log("planning (GA per mesh shape, each candidate measured):")
        devs = cluster.devices
        fastest = max(range(n), key=lambda i: standalone[i])
        plan, candidates = choose_plan_by_measurement(
            model, cluster_spec, workload, runner, seed, warmup, max(2, steps // 2), log)
        plan_devices = list(plan.devices)
        strategies = [
            Strategy("single", "all:1", "", [devs[fastest]]),
            Strategy("even", f"model:{n}", "filters:model", devs, upstream=True),
            Strategy("dp-even", f"batch:{n}", "batch:batch", devs, upstream=True),
            Strategy("dp-proportional", f"batch:{n}", "batch:batch", devs,
                     split_weights={"batch": standalone}),
            Strategy("proportional", f"model:{n}", "filters:model", devs,
                     split_weights={"model": standalone}),
            Strategy("ga", plan.mesh_shape_string(), plan.layout_string(), plan_devices,
                     split_weights={k: list(v) for k, v in plan.split_weights.items()}),
        ]
        results = {}
        if only_ga:
            strategies = [s for s in strategies if s.name == "ga"]
        runners = {s.name: runner(workload, s, f"strategy_{s.name.replace('-', '_')}")
                   for s in strategies if _expressible(s, workload)}
        # Interleave the strategies' timed steps so drift hits all alike.
        times = {name: [] for name in runners}
        for name, r in runners.items():
            r.time_steps(warmup, 0)
        for _ in range(steps):
            for name, r in runners.items():
                times[name].extend(r.time_steps(0, 1))
        for s in strategies:
            if s.name not in runners:
                results[s.name] = {"skipped": "not expressible for this workload"}
                continue
            seconds = _median(times[s.name])
            rate = workload.batch / seconds
            results[s.name] = {
                "mesh_shape": s.mesh_shape, "layout": s.layout,
                "split_weights": s.split_weights, "devices": s.devices,
                "median_step_seconds": seconds, "step_seconds": times[s.name],
                "samples_per_second": rate, "efficiency": rate / ideal,
            }
        for name in ("even", "ga"):
            if name in runners and not only_ga:
                results[name]["busy_seconds_per_worker"] = runners[name].busy_seconds()
        for r in runners.values():
            r.close()
    even_rate = results.get("even", {}).get("samples_per_second")
    for name, r in results.items():
        if "samples_per_second" in r and even_rate:
            r["speedup_vs_even"] = r["samples_per_second"] / even_rate
    for s in strategies:
        if s.name in runners:
            pred = _predict(model, cluster_spec, workload.batch, s, plan)
            if pred is not None:
                results[s.name]["predicted_step_seconds"] = pred
                results[s.name]["predicted_over_measured"] = (
                    pred / results[s.name]["median_step_seconds"])
    return {
        "cluster": {"speeds": list(speeds), "throttle": cluster.throttle,
                    "pinned": cluster.pin, "description": cluster.describe()},
        "workload": asdict(workload),
        "standalone_samples_per_second": standalone,
        "ideal_samples_per_second": ideal,
        "plan": plan.to_dict(),
        "ga_candidates": candidates,
        "strategies": results,
        "quick": quick, "steps": steps, "warmup": warmup,
        "seconds": time.time() - started,
    }


def choose_plan_by_measurement(model, cluster_spec, workload, runner, seed, warmup, steps, log):
    """GA plan per mesh shape, then keep the one that measures fastest.

    The cost model is built from each worker's speed measured alone; workers
    that run at the same time share caches and memory bandwidth, which it does
    not see (docs/measuring.md: a plan must check itself by measuring). So the GA
    proposes its best plan for every mesh shape, each is timed briefly on the
    cluster, and the fastest is the ``ga`` strategy. Returns (plan, candidates).
    """
    from meshpar.planning.cost_model import CostModel
    from meshpar.planning.planners import plan as make_plan

    candidates, best, best_seconds = [], None, None
    for rows, cols in CostModel(model, cluster_spec, workload.batch).shapes():
        p = make_plan(model, cluster_spec, workload.batch, method="ga", seed=seed,
                      shapes=[(rows, cols)])
        strategy = Strategy("ga-candidate", p.mesh_shape_string(), p.layout_string(),
                            list(p.devices),
                            split_weights={k: list(v) for k, v in p.split_weights.items()})
        r = runner(workload, strategy, f"candidate_{rows}x{cols}")
        seconds = _median(r.time_steps(warmup, steps))
        r.close()
        candidates.append({"mesh_shape": p.mesh_shape_string(), "split_sizes": p.split_sizes,
                           "predicted_step_seconds": p.predicted_step_seconds,
                           "measured_step_seconds": seconds})
        log(f"  GA candidate {p.mesh_shape_string():18s} sizes {p.split_sizes}:"
            f" predicted {p.predicted_step_seconds * 1000:.0f} ms, measured {seconds * 1000:.0f} ms")
        if best is None or seconds < best_seconds:
            best, best_seconds = p, seconds
    by_model = min(candidates, key=lambda c: c["predicted_step_seconds"])
    log(f"  cost model alone would pick {by_model['mesh_shape']}; measured best:"
        f" {best.mesh_shape_string()}")
    return best, candidates


def _expressible(strategy: Strategy, workload) -> bool:
    """Mesh-TF's even split needs divisibility."""
    if not strategy.upstream:
        return True
    n = len(strategy.devices)
    size = workload.c_out if "filters" in strategy.layout else workload.batch
    return size % n == 0


def _predict(model, cluster_spec, batch, strategy: Strategy, plan) -> Optional[float]:
    """The cost model's step time for a strategy (the GA's own prediction for ga)."""
    from meshpar.planning.cost_model import CostModel
    from meshpar.core.splits import split_sizes

    if strategy.name == "ga":
        return plan.predicted_step_seconds
    axes = dict((a.split(":")[0], int(a.split(":")[1])) for a in strategy.mesh_shape.split(";"))
    rows, cols = axes.get("batch", 1), axes.get("model", 1)
    by_device = {d.device: d for d in cluster_spec.devices}
    if len(strategy.devices) != len(cluster_spec.devices):  # e.g. single: a sub-cluster
        cluster_spec = dataclasses.replace(
            cluster_spec, devices=tuple(by_device[d] for d in strategy.devices))
    index = {d.device: i for i, d in enumerate(cluster_spec.devices)}
    perm = [index[d] for d in strategy.devices]
    weights = strategy.split_weights or {}
    batch_sizes = split_sizes(batch, weights.get("batch", [1.0] * rows))
    dims = {}
    for layer in model.layers:
        if layer.split_dim:
            dims[layer.split_dim] = split_sizes(layer.split_size, weights.get("model", [1.0] * cols))
    cost = CostModel(model, cluster_spec, batch)
    return float(cost.evaluate_sizes(rows, cols, perm, batch_sizes, dims).seconds[0])


def format_table(result: dict) -> str:
    """The benchmark result as a text table: one row per strategy with throughput,
    fraction of ideal, speed-up over ``even`` and predicted against measured step time.
    """
    lines = [
        f"ideal (sum of standalone throughputs): {result['ideal_samples_per_second']:.2f} samples/s"
        f"  (standalone: " + ", ".join(f"{r:.2f}" for r in result["standalone_samples_per_second"])
        + ")",
        f"{'strategy':16s} {'mesh':18s} {'samples/s':>10s} {'of ideal':>9s} {'vs even':>8s}"
        f" {'predicted':>10s} {'measured':>9s} {'pred/meas':>9s}",
    ]
    for name, r in result["strategies"].items():
        if "samples_per_second" not in r:
            lines.append(f"{name:16s} {r.get('skipped', '')}")
            continue
        pred = r.get("predicted_step_seconds")
        vs_even = r.get("speedup_vs_even")  # none where the even split was skipped
        lines.append(
            f"{name:16s} {r['mesh_shape']:18s} {r['samples_per_second']:10.2f}"
            f" {r['efficiency']:9.2f} {'-' if vs_even is None else f'{vs_even:7.2f}x':>8s}"
            f" {'' if pred is None else f'{pred * 1000:8.0f}ms':>10s}"
            f" {r['median_step_seconds'] * 1000:7.0f}ms"
            f" {'' if pred is None else format(r['predicted_over_measured'], '.2f'):>9s}")
    for c in result.get("ga_candidates", []):
        lines.append(f"  GA candidate {c['mesh_shape']:18s} predicted"
                     f" {c['predicted_step_seconds'] * 1000:6.0f} ms, measured"
                     f" {c['measured_step_seconds'] * 1000:6.0f} ms")
    return "\n".join(lines)


def save(result: dict, out_dir: str, plot: bool = True) -> list:
    """Write hetero.json (and hetero.png) into ``out_dir``; return the paths."""
    from meshpar.bench.results import save_result
    from meshpar.viz import plot_benchmark

    return save_result(result, out_dir, "hetero", plot_benchmark if plot else None)
