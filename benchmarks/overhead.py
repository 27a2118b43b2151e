"""Overhead of HeterogeneousMeshImpl at even weights vs Mesh-TF's PlacementMeshImpl.

Both lower the same conv net on the same mesh; training steps (forward,
backward, SGD update) are timed alternately in one process, so the machine's
drift hits both alike. Prints the median step times and their ratio
(target <= 1.03) and writes JSON with --out.

    python benchmarks/overhead.py [--steps 30] [--mesh batch:2;model:2] [--out overhead.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import meshpar  # noqa: E402,F401  (import shim)
import mesh_tensorflow as mtf  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from mesh_tensorflow import placement_mesh_impl  # noqa: E402

from meshpar.core.mesh_impl import HeterogeneousMeshImpl  # noqa: E402
from meshpar.core.optim import Sgd, race_free_update_ops  # noqa: E402

tf.disable_eager_execution()


def build_step(impl_factory, mesh_shape, layout, batch, size, filters):
    """A tf.Graph with a conv net training step lowered on ``impl_factory``."""
    graph_tf = tf.Graph()
    with graph_tf.as_default():
        tf.set_random_seed(0)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        rng = np.random.RandomState(0)
        dims = [mtf.Dimension("batch", batch), mtf.Dimension("h", size),
                mtf.Dimension("w", size), mtf.Dimension("c", 8)]
        x = mtf.import_tf_tensor(
            mesh, tf.constant(rng.randn(batch, size, size, 8).astype(np.float32)), mtf.Shape(dims))
        h = x
        for i, f in enumerate(filters):
            h = mtf.relu(mtf.layers.conv2d(h, mtf.Dimension(f"f{i}", f), (3, 3), name=f"conv{i}"))
            h = mtf.rename_dimension(h, f"f{i}", f"in{i}")
        loss = mtf.reduce_mean(mtf.square(h))
        updates = race_free_update_ops(graph, loss, Sgd(0.01))
        n = mtf.convert_to_shape(mesh_shape).size
        impl = impl_factory(mesh_shape, layout, [""] * n)
        lowering = mtf.Lowering(graph, {mesh: impl})
        step = tf.group([lowering.lowered_operation(u) for u in updates]
                        + [lowering.export_to_tf_tensor(loss)])
        init = [tf.global_variables_initializer(), lowering.copy_masters_to_slices()]
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    sess = tf.Session(graph=graph_tf, config=config)
    sess.run(init[0])
    sess.run(init[1])
    return sess, step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--mesh", default="batch:2;model:2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=24)
    parser.add_argument("--filters", type=int, default=48)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    layout = "batch:batch;" + ";".join(f"f{i}:model" for i in range(3))
    filters = [args.filters] * 3
    impls = {
        "upstream PlacementMeshImpl": placement_mesh_impl.PlacementMeshImpl,
        "meshpar HeterogeneousMeshImpl (even)": HeterogeneousMeshImpl,
    }
    runs = {name: build_step(factory, args.mesh, layout, args.batch, args.size, filters)
            for name, factory in impls.items()}
    times = {name: [] for name in runs}
    for i in range(args.warmup + args.steps):
        for name, (sess, step) in runs.items():  # alternate: drift hits both alike
            start = time.perf_counter()
            sess.run(step)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    upstream, ours = medians.values()
    ratio = ours / upstream
    print(f"mesh {args.mesh}, conv2d x3 ({filters} filters), batch {args.batch}, "
          f"{args.size}x{args.size}, {args.steps} steps each, alternating")
    for name, m in medians.items():
        print(f"  {name:40s} median step {m * 1000:8.2f} ms")
    print(f"  ratio heterogeneous / upstream = {ratio:.3f} (target <= 1.03)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"mesh": args.mesh, "median_step_seconds": medians, "ratio": ratio,
                       "steps": args.steps}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
