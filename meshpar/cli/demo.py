"""``meshpar demo``: the main demo (``make run``).

Shows, with numbers, what meshpar does on an emulated mesh of uneven devices:
1. the uneven split of a small conv net's filters across 4 devices of speeds
   0.8/0.5/0.3/0.2, and a check that its loss and gradients equal the
   one-device result;
2. the planners (even, proportional, GA) choosing mesh shape, placement and
   split weights for ``resattnet3d-small`` on that cluster;
3. training ``resattnet3d-small`` on synthetic NIfTI phantoms on the GA's
   planned uneven mesh (a batch split, a filter split or both, as it picks:
   for the default speeds, batch:4;model:1) through ``tf.estimator``, with
   held-out metrics.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from meshpar.cli.parsing import parse_speeds

DEFAULT_SPEEDS = "0.8,0.5,0.3,0.2"

EPILOG = """examples:
  meshpar demo                                   all three parts (what `make run` does)
  meshpar demo --skip-training                   the split check and the plans only
  meshpar demo --speeds 0.9,0.3 --steps 30       two devices, a shorter training run
"""


#: Most devices the demo takes: its smallest split layer (conv1_filters) has 13 filters.
MAX_DEVICES = 13

DEFAULT_STEPS, DEFAULT_SUBJECTS = 200, 96
#: The demo trains batches of 8; ``meshpar train`` holds out a quarter of each class
#: (at least one) for validation, which leaves 8 to train on from 10 phantoms (9: 7)
BATCH, MIN_SUBJECTS = 8, 10


def register(subparsers) -> None:
    """Add ``meshpar demo`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "demo", help="uneven split, planning and training on an emulated mesh",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speeds", default=DEFAULT_SPEEDS,
                        help="relative speeds of the emulated devices (default %(default)s)")
    # None: not given (with --skip-training they are refused, not ignored)
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training steps (default {DEFAULT_STEPS})")
    parser.add_argument("--subjects", type=int, default=None,
                        help=f"synthetic subjects to write, at least {MIN_SUBJECTS} "
                             f"(default {DEFAULT_SUBJECTS}), into a temporary directory: "
                             "refused before part 1 when they do not fit on its disk")
    parser.add_argument("--skip-training", action="store_true",
                        help="stop after the split check and the plans")
    parser.set_defaults(func=run)


def _small_conv_net(mesh, mtf, tf, np):
    """conv(13) -> relu -> conv(29) -> mean -> dense(5): a net no even split divides."""
    rng = np.random.RandomState(0)
    dims = [mtf.Dimension(n, s) for n, s in (("batch", 8), ("h", 12), ("w", 12), ("c", 3))]
    x = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(8, 12, 12, 3).astype(np.float32)),
                             mtf.Shape(dims))
    labels = mtf.import_tf_tensor(mesh, tf.constant(rng.randint(0, 5, 8).astype(np.int32)),
                                  mtf.Shape(dims[:1]))
    h = mtf.relu(mtf.layers.conv2d(x, mtf.Dimension("conv1_filters", 13), name="conv1",
                                   filter_initializer=tf.glorot_uniform_initializer(seed=1)))
    h = mtf.rename_dimension(h, "conv1_filters", "conv1_out")
    h = mtf.relu(mtf.layers.conv2d(h, mtf.Dimension("conv2_filters", 29), name="conv2",
                                   filter_initializer=tf.glorot_uniform_initializer(seed=2)))
    h = mtf.reduce_mean(h, reduced_dim=h.shape.dims[1])
    h = mtf.reduce_mean(h, reduced_dim=h.shape.dims[1])
    cls = mtf.Dimension("classes", 5)
    logits = mtf.layers.dense(h, cls, reduced_dims=h.shape.dims[-1:], name="dense",
                              kernel_initializer=tf.glorot_uniform_initializer(seed=3))
    xent = mtf.layers.softmax_cross_entropy_with_logits(logits, mtf.one_hot(labels, cls), cls)
    return mtf.reduce_mean(xent)


def show_uneven_split(speeds) -> float:
    """Part 1: split sizes per layer and the check against one device."""
    import numpy as np

    from meshpar.core.mesh_impl import HeterogeneousMeshImpl
    from meshpar.core.splits import split_sizes
    import meshpar  # noqa: F401
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    n = len(speeds)
    layout = "conv1_filters:model;conv2_filters:model"

    def loss_and_grads(impl):
        with tf.Graph().as_default():
            tf.set_random_seed(0)
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            loss = _small_conv_net(mesh, mtf, tf, np)
            variables = graph.trainable_variables
            grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
            lowering = mtf.Lowering(graph, {mesh: impl})
            outs = [lowering.export_to_tf_tensor(t) for t in [loss] + grads]
            config = tf.ConfigProto(intra_op_parallelism_threads=1,
                                    inter_op_parallelism_threads=1)
            with tf.Session(config=config) as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(lowering.copy_masters_to_slices())
                return sess.run(outs)

    uneven = HeterogeneousMeshImpl(f"model:{n}", layout, [""] * n,
                                   split_weights={"model": speeds})
    print(f"== 1. Uneven split on an emulated mesh model:{n}, device speeds {speeds}")
    print(f"   {'dimension':16s} {'size':>5s}  even split (Mesh-TF)      meshpar split")
    for name, size in (("conv1_filters", 13), ("conv2_filters", 29)):
        sizes = uneven.split_sizes(mtf.Dimension(name, size))
        even = "refused: not divisible" if size % n else str([size // n] * n)
        print(f"   {name:16s} {size:5d}  {even:24s}  {sizes}")
    work = [s / w for s, w in zip(uneven.split_sizes(mtf.Dimension("conv2_filters", 29)), speeds)]
    # an equal split of whole filters (meshpar's, where Mesh-TF refuses 29 / n): 29 / n
    # fractional filters per device would be no split at all, and beat meshpar's on
    # equal speeds (11.6 against 12.0 on five devices)
    even_time = max(s / w for s, w in zip(split_sizes(29, [1.0] * n), speeds))
    print(f"   conv2 time units (filters/speed): slowest device {max(work):.1f} with meshpar,"
          f" {even_time:.1f} with an equal split; ideal {29 / sum(speeds):.1f}")
    reference = loss_and_grads(HeterogeneousMeshImpl("all:1", "", [""]))
    result = loss_and_grads(uneven)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(reference, result))
    print(f"   loss one device {reference[0]:.6f}, uneven mesh {result[0]:.6f};"
          f" max |difference| over loss and all gradients: {diff:.2e}")
    return diff


def show_plans(speeds, batch: int):
    """Part 2: the planners on resattnet3d-small for this cluster."""
    from meshpar.planning.cluster import REFERENCE_FLOPS, ClusterSpec
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan as make_plan

    cluster = ClusterSpec.from_speeds(speeds)
    model = describe_model("resattnet3d-small")
    print(f"\n== 2. Plans for resattnet3d-small, batch {batch}, on {len(speeds)} devices"
          f" (cost model from speeds; proportional and ga, as `meshpar plan`, may leave"
          f" the slowest idle)")
    print(f"   relative speeds {', '.join(f'{s:g}' for s in speeds)}, speed 1 taken as"
          f" {REFERENCE_FLOPS:.0e} FLOP/s: the predicted steps compare the plans; they are"
          f" not this machine's step times (`meshpar profile` measures those)")
    plans = {}
    for method in ("even", "proportional", "ga"):  # the last two: what `meshpar plan` returns
        plans[method] = make_plan(model, cluster, batch, method=method, seed=0,
                                  subsets=method != "even")
    base = plans["even"].predicted_step_seconds
    print(f"   {'method':13s} {'mesh':22s} {'predicted step':>15s} {'vs even':>8s}")
    for method, p in plans.items():
        print(f"   {method:13s} {p.mesh_shape_string():22s} {p.predicted_step_seconds * 1000:12.2f} ms"
              f" {base / p.predicted_step_seconds:7.2f}x")
    return plans["ga"]


def train_on_plan(plan, steps: int, subjects: int, batch: int) -> int:
    """Part 3: synthetic phantoms -> estimator training on the planned mesh
    (through ``meshpar train``, which prints the held-out metrics table)."""
    from meshpar.cli import main as cli_main

    print(f"\n== 3. Training resattnet3d-small on {subjects} synthetic NIfTI phantoms (32^3),"
          f" on the GA plan's mesh {plan.mesh_shape_string()} with emulated devices,"
          f" {steps} steps of batch {batch}")
    with tempfile.TemporaryDirectory(prefix="meshpar-demo-") as tmp:
        path = os.path.join(tmp, "plan.json")
        plan.save(path)
        return cli_main(["train", "--synthetic", "--model", "resattnet3d-small", "--plan", path,
                         "--steps", str(steps), "--batch", str(batch),
                         "--n-synthetic", str(subjects), "--lr", "1e-3", "--threads", "2",
                         # one build of the mesh's graph: keep-best's chunks each rebuild it
                         # (a demo of the split, not of the recipe; measured 56 s instead of 139 s)
                         # no --model-dir: train's own scratch directory, which it says
                         # is removed when it ends (a path here would be gone by then)
                         "--no-keep-best"])


def run(args) -> int:
    """Run the three parts of the demo (split check, plans, training); returns 0.

    RuntimeError if the uneven mesh's results differ from one device's.
    """
    speeds = parse_speeds(args.speeds)
    if len(speeds) > MAX_DEVICES:  # refused before the header of part 1 is printed
        raise ValueError(f"--speeds lists {len(speeds)} devices; the demo splits a "
                         f"{MAX_DEVICES}-filter convolution over them, so at most "
                         f"{MAX_DEVICES} (every device needs at least one filter)")
    for flag, value in (("--steps", args.steps), ("--subjects", args.subjects)):
        if args.skip_training and value is not None:
            raise ValueError(f"{flag} goes with the training part; --skip-training leaves "
                             "it out, so this run would ignore it")
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    subjects = DEFAULT_SUBJECTS if args.subjects is None else args.subjects
    if steps < 1:
        raise ValueError(f"--steps must be >= 1, got {steps}")
    if subjects < MIN_SUBJECTS:  # was train's error after parts 1 and 2 had run
        raise ValueError(f"--subjects must be >= {MIN_SUBJECTS}, got {subjects}: training "
                         f"holds a quarter of them out for validation and needs {BATCH} "
                         f"for one batch")
    if not args.skip_training:  # its phantoms go to a temporary directory: said before
        import tempfile  # parts 1 and 2, not by train after them
        from pathlib import Path

        from meshpar.data.synth_checks import check_room

        check_room(Path(tempfile.gettempdir()) / "meshpar-demo", subjects, (32, 32, 32))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.time()
    diff = show_uneven_split(speeds)
    if diff > 1e-5:
        raise RuntimeError(f"uneven mesh differs from one device by {diff:.2e}")
    plan = show_plans(speeds, BATCH)
    if not args.skip_training:
        status = train_on_plan(plan, steps, subjects, BATCH)
        if status:
            return status
    print(f"\ndone in {time.time() - start:.0f} s")
    return 0
