"""Measure devices with real TensorFlow kernels into a :class:`~meshpar.planning.cluster.ClusterSpec`.

Each device's speed is recorded as a function of work size: (FLOPs, FLOP/s)
points of a conv3d training step (forward, input grad, filter grad).
TensorFlow is imported when a profile runs, never at module import.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional, Sequence

import numpy as np

from meshpar.core.splits import integer_at_least, integers_at_least, true_or_false
from meshpar.planning.cluster import (DEFAULT_BANDWIDTH, DEFAULT_LATENCY, DEFAULT_MEMORY_BYTES,
                                      ClusterSpec, DeviceSpec)
from meshpar.runtime.timed_rounds import (interleaved_seconds, median_seconds, rescan_with,
                                          time_sizes, time_slices)


def _checked_sizes(sizes) -> list:
    """``sizes`` as tuples of four integers >= 1 ``(batch, spatial, c_in, c_out)``, at
    least one; checked before any timing (2.5 repeats or a size of three numbers failed
    once the first kernels had run, in range() or an unpacking)."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"profile sizes must be (batch, spatial, c_in, c_out) tuples, got "
                        f"{sizes!r}")
    out = []
    for i, size in enumerate(sizes):
        if isinstance(size, (str, bytes)) or not hasattr(size, "__len__") or len(size) != 4:
            raise ValueError(f"profile sizes[{i}] must be (batch, spatial, c_in, c_out), got "
                             f"{size!r}")
        out.append(integers_at_least(size, f"profile sizes[{i}]"))
    if not out:
        raise ValueError("profile sizes must not be empty")
    return out


def conv3d_step_flops(batch: int, spatial: int, c_in: int, c_out: int, kernel: int = 3) -> float:
    """FLOPs of a conv3d training step (forward, input grad, filter grad), 'SAME' padding."""
    forward = 2.0 * batch * spatial ** 3 * c_out * c_in * kernel ** 3
    return 3.0 * forward


DEFAULT_PROFILE_SIZES = ((1, 8, 8, 8), (2, 16, 16, 32), (4, 16, 32, 32))
#: A model-step profile also times the model split this many ways on one worker
#: (the speed of narrow slices; below 1/4 it is held at 1/4's, see the cost model).
SLICE_COUNTS = (2, 4)


def profile_local_devices(sizes: Sequence[tuple] = DEFAULT_PROFILE_SIZES, repeats: int = 3,
                          bandwidth: float = DEFAULT_BANDWIDTH,
                          latency: float = DEFAULT_LATENCY,
                          memory_bytes: Optional[float] = None) -> ClusterSpec:
    """Time real conv3d training kernels on each local device; return a ClusterSpec.

    For each device (the CPU and each visible GPU) and each ``(batch, spatial,
    c_in, c_out)`` in ``sizes`` it runs a 3x3x3 conv3d forward plus its input and
    filter gradients, once to warm up and then ``repeats`` times, and records
    the median as one (FLOPs, FLOP/s) point of the device's profile.

    TensorFlow is imported here, never at module import.
    """
    sizes, repeats = _checked_sizes(sizes), integer_at_least(repeats, "repeats")
    import tensorflow as tf  # lazy: ~9 s
    physical = [("cpu0", "/device:CPU:0", "CPU")]
    for i, _ in enumerate(tf.config.list_physical_devices("GPU")):
        physical.append((f"gpu{i}", f"/device:GPU:{i}", "GPU"))
    devices = []
    for name, device, kind in physical:
        points = {}
        for size in sizes:
            batch, spatial, c_in, c_out = (int(v) for v in size)
            flops = conv3d_step_flops(batch, spatial, c_in, c_out)
            with tf.device(device):
                x = tf.random.stateless_normal((batch, spatial, spatial, spatial, c_in), seed=(1, 2))
                w = tf.random.stateless_normal((3, 3, 3, c_in, c_out), seed=(3, 4))

                @tf.function
                def step(x, w):
                    with tf.GradientTape() as tape:
                        tape.watch([x, w])
                        y = tf.nn.conv3d(x, w, strides=[1, 1, 1, 1, 1], padding="SAME")
                        loss = tf.reduce_sum(y)
                    gx, gw = tape.gradient(loss, [x, w])
                    return tf.reduce_sum(gx) + tf.reduce_sum(gw)

                float(step(x, w))  # trace + warm up
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    float(step(x, w))  # float() waits for the result
                    times.append(time.perf_counter() - t0)
            seconds = float(np.median(times))
            points[flops] = flops / max(seconds, 1e-9)
        if memory_bytes is not None:
            mem = memory_bytes
        elif kind == "GPU":
            mem = _gpu_memory(tf, device)
        else:
            mem = _host_memory()
        devices.append(DeviceSpec(name=name, device=device,
                                  profile=tuple(sorted(points.items())), memory_bytes=mem))
    return ClusterSpec(tuple(devices), bandwidth=bandwidth, latency=latency,
                       extra={"profiled_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "kernel": "conv3d 3x3x3 fwd+input grad+filter grad"})


def _host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return DEFAULT_MEMORY_BYTES


def _gpu_memory(tf, device: str) -> int:
    try:
        info = tf.config.experimental.get_memory_info(device.replace("/device:", ""))
        # get_memory_info has no total; fall back to the default when unknown.
        return int(info.get("limit", DEFAULT_MEMORY_BYTES)) or DEFAULT_MEMORY_BYTES
    except (ValueError, RuntimeError, AttributeError):
        return DEFAULT_MEMORY_BYTES


# --------------------------------------------------------------------------- remote workers

#: The most the memory count (:data:`meshpar.planning.memory.MEASURED`) has been over a
#: measured peak (1.56x; docs/cost_model.md): :func:`check_profile_fits` divides it out.
COUNT_OVER_NEED = 1.56


def _on_this_host(address: str) -> bool:
    """Whether a worker's ``host:port`` is on this machine (loopback or its host name)."""
    import socket

    host = str(address).rsplit(":", 1)[0].strip("[]").lower()
    return (host in ("localhost", "::1", "0.0.0.0", socket.gethostname().lower())
            or host.startswith("127."))


def check_profile_fits(model, batch: int, addresses: Sequence[str] = (), local: int = 0,
                       what: str = "batch", split: bool = False) -> None:
    """ValueError when the workers of this host cannot hold a model-step profile at
    ``batch`` (the largest batch timed) before any of them is asked: each worker
    builds a whole training step of ``model`` at that batch (more besides: a step per
    smaller batch, the slices), so the cost model's count of one such step on one
    device (:data:`meshpar.planning.memory.MEASURED` terms) divided by
    :data:`COUNT_OVER_NEED` is the least it needs;
    ``local`` workers plus those of ``addresses`` on this host together may need no
    more than its physical memory. Workers elsewhere are not counted (their memory is
    not known here). Seen: batch 10**7 of resattnet3d-tiny on one local worker ran
    four minutes before the system's out-of-memory killer ended the worker and the
    profile stopped with a traceback. ``split``: the workers share one step instead
    (``bench memory`` trains a split of it), so the count of the whole step is the
    least they need together."""
    from meshpar.data.synth_checks import bytes_text
    from meshpar.models import ModelSpec, resolve
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan

    here = int(local) + sum(_on_this_host(a) for a in addresses)
    if here < 1 or batch < 1:  # a batch below 1: model_batch_sizes says so
        return
    spec = model if isinstance(model, ModelSpec) else resolve(model)
    # the count has been up to COUNT_OVER_NEED times a measured need: less that, it is a
    # need no run below it has shown (docs/cost_model.md, "Memory: the count against the
    # measured peak")
    need = plan(spec.describe(), ClusterSpec.from_speeds([1.0]), int(batch),
                method="even").memory_per_device[0] / COUNT_OVER_NEED
    memory = _host_memory()
    if split and need > memory:
        raise ValueError(
            f"{what} {batch}: one training step of {spec.name} at batch {batch} needs at "
            f"least {bytes_text(need)} (the cost model's count on one device, less its "
            f"largest overstatement), more than this host's {bytes_text(memory)} of memory, "
            f"which its {here} worker(s) share; give a smaller {what}")
    if not split and here * need > memory:
        workers = "the worker" if here == 1 else f"the {here} workers"
        raise ValueError(
            f"{what} {batch}: one training step of {spec.name} at batch {batch} needs at "
            f"least {bytes_text(need)} on a worker (the cost model's count, less its largest "
            f"overstatement), more than {workers} on this host can hold "
            f"({bytes_text(memory)} of memory{'' if here == 1 else ' between them'}); give "
            f"a smaller {what}")


def profile_cluster_workers(addresses: Sequence[str], device_type: str = "CPU",
                            sizes: Sequence[tuple] = DEFAULT_PROFILE_SIZES, repeats: int = 3,
                            transfer_bytes: int = 4 * 2**20,
                            memory_bytes: float = DEFAULT_MEMORY_BYTES,
                            model=None, batch: int = 8,
                            log=None, batch_flag: str = "batch",
                            deterministic: Optional[bool] = None) -> ClusterSpec:
    """Profile every worker of a TF gRPC cluster (``meshpar worker`` tasks) from here.

    The same conv3d training kernel as :func:`profile_local_devices` runs on
    each worker's own device with its data resident there, at each size of
    ``sizes``: first on one worker at a time (``alone``), then on all workers
    at once (``together``: what each worker does while the others run, with
    the contention for shared cores, caches and memory that running alone
    cannot show). The profile the planner reads is the ``together`` one; both
    are kept in ``extra``. Links: a ``transfer_bytes`` tensor and a 4-byte one
    sent from each worker to the next give bandwidth and latency (medians over
    the pairs). Devices are named ``/job:worker/task:i/device:TYPE:0``, so a
    plan made from this file places its slices on those tasks.

    With ``model`` (a registry name, a reference to a network of one's own as
    ``--model`` takes it (:func:`meshpar.models.resolve`; recorded under
    ``extra["model_ref"]``), or a :class:`~meshpar.models.ModelSpec`, whose
    module then gives ``input_shape(config)``) the work items are that model's whole
    training steps (race-free Adam, data resident on the worker) of
    ``b`` samples for ``b`` in :func:`model_batch_sizes` ``(batch)``, instead
    of the conv3d kernel: a profile of what the planner will split (per-op
    and per-step costs included), marked ``extra["work"] = "model-step"`` so
    the cost model looks speeds up at each device's whole-step work. It also
    times the model's even ``batch:n`` and ``model:n`` splits over all the
    workers, and the same splits weighted by the workers' measured speeds
    (``extra["split_seconds"]``, the weighted ones under ``"balanced"``, the
    workers in the order their shares went to under ``"device_names"``), and
    per axis the split over all the workers that the cost model fitted to a
    first timing of those predicts fastest (under ``"checked"``: its plan and
    time; :func:`_checked_splits`), all
    timed in turns with the size scan's steps, whose speeds the profile then
    keeps (:func:`~meshpar.runtime.timed_rounds.rescan_with`: one host for both),
    from which the cost model learns what synchronising costs per step and
    how long devices wait for each other near balance, and each worker's speed on slices of
    ``1/k`` of every split dim for ``k`` in :func:`slice_counts` (the model
    split ``k`` ways on that worker alone, all workers at once), relative to
    its whole step at ``batch`` (``DeviceSpec.slice_efficiency``): narrow
    convolutions and per-slice op costs make a small filter share slower per
    FLOP than the whole layer. A ``batch`` this host's workers cannot hold is
    refused first (:func:`check_profile_fits`), naming it as ``batch_flag``.

    ``deterministic`` (default: as ``meshpar train`` will run,
    :func:`meshpar.runtime.client.training_determinism`) sets the session's graph
    rewrites as a training session's: with op determinism, Grappler's arithmetic
    optimizer is off, and a profile timed with it on measured resattnet3d-small's
    batch-8 step 4-7% faster than training runs it (docs/measuring.md).
    Recorded as ``extra["deterministic"]``.
    """
    import tensorflow.compat.v1 as tf

    from meshpar.runtime.client import ClusterClient, training_determinism
    from meshpar.training.recipe import DEFAULT_WEIGHT_DECAY

    sizes, repeats = _checked_sizes(sizes), integer_at_least(repeats, "repeats")
    deterministic = (training_determinism() if deterministic is None
                     else true_or_false(deterministic, "deterministic"))
    log = log or (lambda *a: None)
    if model is not None:  # before any worker is asked (or sent a graph it cannot hold)
        check_profile_fits(model, batch, addresses, what=batch_flag)
    client = ClusterClient(addresses, device_type)
    client.check_devices(client.devices)  # a GPU a worker lacks: one line, not a traceback
    n = len(client.devices)
    spec = None
    if model is not None:
        from meshpar.models import ModelSpec, resolve

        spec = model if isinstance(model, ModelSpec) else resolve(model)
        table = spec.describe()  # built once: the layer table walks the whole config
        sizes = [(b,) for b in model_batch_sizes(batch)]
        flops_of = {size: 3.0 * table.flops * size[0] for size in sizes}
    else:
        flops_of = {tuple(s): conv3d_step_flops(*(int(v) for v in s)) for s in sizes}
    graph, steps, splits, slices, sends, init, copies = _profile_graph(
        tf, client, spec, sizes, batch, transfer_bytes)
    config = client.session_config(tf.ConfigProto(allow_soft_placement=False),
                                   deterministic=deterministic)
    with tf.Session(client.target, graph=graph, config=config) as session:
        session.run(init)
        session.run(copies)
        alone, together = time_sizes(session, steps, sizes, flops_of, n, repeats, log,
                                     "batch" if model is not None else "size")
        efficiency = time_slices(session, slices, [steps[task, (batch,)] for task in range(n)]
                                 if slices else [], n, repeats, log)
        # links first: the cost model that picks the checked splits prices them
        bandwidth, latency = _link(session, sends, transfer_bytes, repeats)
        split_seconds = {}
        if splits:
            weights = [together[t][flops_of[(batch,)]] for t in range(n)]
            balanced = _balanced_splits(tf, session, graph, client, spec, batch,
                                        list(splits), weights)
            split_ops = {**{("even", a): op for a, op in splits.items()},
                         **{("balanced", a): op for a, op in balanced.items()}}
            checked = _checked_splits(
                tf, session, graph, client, spec, table, batch, split_ops, weights,
                ClusterSpec(_device_specs(client, together, efficiency, memory_bytes),
                            bandwidth=bandwidth, latency=latency), repeats, log)
            # the scan timed again in the splits' rounds: speeds and splits of one host
            alone, together, timed, spread = rescan_with(
                session, steps, sizes, flops_of, n,
                {**split_ops, **{("checked", a): op for a, (_, op) in checked.items()}},
                repeats)
            split_seconds = {axis: timed["even", axis] for axis in splits}
            # how far apart each split's timed runs fell: the cost model is fitted to
            # their medians, which a plan's margin over another may be within
            split_seconds["spread"] = {}
            for (kind, axis), value in spread.items():
                split_seconds["spread"].setdefault(kind, {})[axis] = value
            log("even split over all workers: " + ", ".join(
                f"{axis}:{n} {split_seconds[axis] * 1e3:.1f} ms" for axis in splits)
                + " (timed in turns with the size scan, whose speeds are these rounds')")
            if balanced:
                split_seconds["balanced"] = {"weights": [float(w) for w in weights], **{
                    axis: timed["balanced", axis] for axis in balanced}}
                log("split by speed over all workers: " + ", ".join(
                    f"{axis}:{n} {timed['balanced', axis] * 1e3:.1f} ms" for axis in splits))
            if checked:
                split_seconds["checked"] = {
                    axis: {"plan": plan.to_dict(), "seconds": timed["checked", axis]}
                    for axis, (plan, _) in checked.items()}
                log("predicted fastest over all workers: " + ", ".join(
                    f"{_split_text(plan)} {timed['checked', axis] * 1e3:.1f} ms"
                    for axis, (plan, _) in checked.items()))
    devices = _device_specs(client, together, efficiency, memory_bytes)
    kernel = (f"{spec.name} training step (Adam, weight decay {DEFAULT_WEIGHT_DECAY:g}; batch "
              f"{', '.join(str(s[0]) for s in sizes)})"
              if model is not None else "conv3d 3x3x3 fwd+input grad+filter grad")
    return ClusterSpec(devices, bandwidth=bandwidth, latency=latency, extra={
        "profiled_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "kernel": kernel, "work": "model-step" if model is not None else "layer",
        **({"model": table.name,
            # a network of one's own: what finds it again (`meshpar plan --profile`)
            **({"model_ref": spec.reference} if spec.reference else {}),
            "split_seconds": {**split_seconds, "batch_size": batch,
                              "device_names": [d.name for d in devices]}} if model is not None
           else {}),
        "profile": "measured on all workers at once (contention included)",
        "alone_profile": {client.devices[t]: sorted(alone[t].items()) for t in range(n)},
        "addresses": list(addresses), "memory": "not measured (default)",
        "deterministic": deterministic})


def _device_specs(client, together: dict, efficiency: dict, memory_bytes: float) -> tuple:
    """The profile's DeviceSpecs: each worker's speeds at every size, all at once."""
    return tuple(DeviceSpec(name=f"w{t}", device=device,
                            profile=tuple(sorted(together[t].items())),
                            memory_bytes=memory_bytes,
                            slice_efficiency=tuple(sorted(efficiency[t].items())))
                 for t, device in enumerate(client.devices))


def _profile_graph(tf, client, spec, sizes, batch: int, transfer_bytes: int):
    """The profile's graph: a step per (task, size), the even splits over all workers
    (model profiles), the link transfers; with the initialiser and the master ->
    slice copies of the model variables."""
    n = len(client.devices)
    graph = tf.Graph()
    steps = {}  # (task, size) -> op
    copies = []  # master -> slice copies of model variables, after initialisation
    with graph.as_default():
        tf.set_random_seed(0)  # initialisers are random ops (and TF_DETERMINISTIC_OPS wants a seed)
        for task, device in enumerate(client.devices):
            for size in sizes:
                if spec is not None:
                    steps[task, tuple(size)], copy = _model_step_graph(tf, spec, device, size[0])
                    copies.append(copy)
                else:
                    steps[task, tuple(size)] = _conv3d_step_graph(tf, device, size)
        splits = {}  # "batch" / "model" -> the even split of the model over all workers
        slices = {}  # (task, k) -> the model split k ways on that task's device alone
        if spec is not None:
            from meshpar.training.estimator import MeshSpec

            for task, device in enumerate(client.devices):
                for k in slice_counts(spec.describe()):
                    slices[task, k], copy = _model_step_graph(
                        tf, spec, device, batch, MeshSpec(f"model:{k}", devices=[device] * k),
                        tag="slices")
                    copies.append(copy)
        if spec is not None and n > 1:
            for axis in ("batch", "model"):
                if axis == "batch" and batch < n:
                    continue
                mesh = MeshSpec(f"{axis}:{n}", devices=client.devices)
                splits[axis], copy = _model_step_graph(tf, spec, client.devices[0], batch, mesh,
                                                       input_device=client.client_device)
                copies.append(copy)
        sends = _transfer_graph(tf, client.devices, transfer_bytes)
        init = tf.global_variables_initializer()
    return graph, steps, splits, slices, sends, init, copies


#: Workers whose speeds differ by less than this factor are profiled at the even
#: split only: it is already the balanced one.
BALANCED_MIN_RATIO = 1.1


def _balanced_splits(tf, session, graph, client, spec, batch: int, axes, weights) -> dict:
    """``{axis: step op}``: the model split over ``axes`` of all the workers in
    proportion to their measured speeds ``weights``, to be timed with the even
    splits; empty when the speeds are within :data:`BALANCED_MIN_RATIO` of each
    other. Built after the speeds are known, so it extends the session's graph
    (new variables initialised here). From it the cost model learns the wait
    for the slowest device where the devices are balanced
    (meshpar.planning.calibration)."""
    from meshpar.training.estimator import MeshSpec

    if not axes or max(weights) < BALANCED_MIN_RATIO * min(weights):
        return {}
    n = len(client.devices)
    with graph.as_default():
        known = set(tf.global_variables())
        ops, copies = {}, []
        for axis in axes:
            mesh = MeshSpec(f"{axis}:{n}", devices=client.devices,
                            split_weights={axis: list(weights)})
            ops[axis], copy = _model_step_graph(tf, spec, client.devices[0], batch, mesh,
                                                input_device=client.client_device,
                                                tag="balanced")
            copies.append(copy)
        init = tf.variables_initializer([v for v in tf.global_variables() if v not in known])
    session.run(init)
    session.run(copies)
    return ops


def _checked_splits(tf, session, graph, client, spec, table, batch: int, split_ops: dict,
                    weights, devices: ClusterSpec, repeats: int, log) -> dict:
    """``{axis: (plan, step op)}``: per mesh axis of ``split_ops`` (the even and
    balanced splits, ``{(kind, axis): op}``), the split over all the workers
    that the cost model, fitted to a first timing of those (one round), predicts
    fastest: what the planner (GA, seed 0) picks on that axis alone. Timed
    with them, it is fitted too (:func:`meshpar.planning.calibration.fit_axis`):
    two splits fit two parameters exactly and say little of a third, and the
    plan worth the most is the one the planner will choose (resattnet3d-small,
    batch 8, 0.9/0.3: fitted to 4/4 and 6/2, the cost model put 7/1 2.5% ahead
    of the fast worker alone; it ran at 0.78x it). Built into the session's
    graph like :func:`_balanced_splits`."""
    from meshpar.planning.planners import plan as make_plan
    from meshpar.training.estimator import MeshSpec

    n = len(client.devices)
    first = interleaved_seconds(session, split_ops, repeats, rounds=1)
    axes = sorted({axis for _, axis in split_ops})
    measured = {**{axis: first["even", axis] for axis in axes}, "batch_size": batch,
                "device_names": [d.name for d in devices.devices]}
    if ("balanced", axes[0]) in first:
        measured["balanced"] = {"weights": [float(w) for w in weights],
                                **{a: first["balanced", a] for a in axes}}
    fitted = dataclasses.replace(devices, extra={"work": "model-step",
                                                 "split_seconds": measured})
    picks = {axis: make_plan(table, fitted, batch, shapes=[(n, 1) if axis == "batch" else (1, n)])
             for axis in axes}
    with graph.as_default():
        known = set(tf.global_variables())
        ops, copies = {}, []
        for axis, picked in picks.items():
            op, copy = _model_step_graph(tf, spec, client.devices[0], batch,
                                         MeshSpec.from_plan(picked), tag=f"checked_{axis}",
                                         input_device=client.client_device)
            ops[axis] = (picked, op)
            copies.append(copy)
        init = tf.variables_initializer([v for v in tf.global_variables() if v not in known])
    session.run(init)
    session.run(copies)
    log("the cost model's fastest split of each axis, to be timed too: " + ", ".join(
        f"{_split_text(p)} (predicted {p.predicted_step_seconds * 1e3:.1f} ms)"
        for p in picks.values()))
    return ops


def _split_text(plan) -> str:
    """``batch:2 batch 7/1``, ``model:2 stem_filters 6/2 ...``: a plan's mesh and its
    first split dim's shares."""
    split = [(dim, sizes) for dim, sizes in plan.split_sizes.items() if len(sizes) > 1]
    if not split:
        return plan.mesh_shape_string()
    (dim, sizes), more = split[0], " ..." if len(split) > 1 else ""
    return f"{plan.mesh_shape_string()} {dim} {'/'.join(map(str, sizes))}{more}"


def slice_counts(description) -> list:
    """How many ways a slice profile splits the model: each of :data:`SLICE_COUNTS`
    that every split dim of ``description`` allows (a whole slice per device)."""
    smallest = min(description.split_dims.values(), default=0)
    return [k for k in SLICE_COUNTS if k <= smallest]


def model_batch_sizes(batch: int) -> list:
    """Batch sizes a model-step profile measures: 1, 2, 4, ... up to ``batch``."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    sizes, b = [], 1
    while b < batch:
        sizes.append(b)
        b *= 2
    return sizes + [batch]


def _model_step_graph(tf, spec, device: str, batch: int, mesh=None, input_device=None,
                      tag: str = "profile"):
    """``(step, init)``: one race-free training step of ``spec`` on ``device`` (or on
    ``mesh``, a MeshSpec), its input resident on ``input_device`` (default: the
    device), the fetched loss making the step run whole; and the op that copies
    the initialised master variables to their slices."""
    from meshpar.training.estimator import MeshSpec, lower_model
    from meshpar.training.recipe import DEFAULT_WEIGHT_DECAY, Recipe

    mesh = mesh or MeshSpec("all:1", devices=[device])
    shape = (batch,) + tuple(spec.input_shape)
    with tf.device(input_device or device):
        x = tf.Variable(tf.random.stateless_normal(shape, seed=(5, batch)), trainable=False)
        y = tf.Variable(tf.zeros([batch], tf.int32), trainable=False)
    scope = f"{tag}_{mesh.mesh_shape}_{device}_{batch}"
    with tf.variable_scope("".join(c if c.isalnum() else "_" for c in scope)):
        # the default recipe's weight decay: a pass of its own over each kernel, which
        # `meshpar train` runs every step (3% of vgg-cifar-pairs' batch-8 step)
        lowering, _, loss, updates = lower_model(
            spec, x.read_value(), y.read_value(), mesh, True,
            recipe=Recipe(weight_decay=DEFAULT_WEIGHT_DECAY))
        with tf.control_dependencies(updates):
            step = tf.identity(lowering.export_to_tf_tensor(loss))
    return step, lowering.copy_masters_to_slices()


def _conv3d_step_graph(tf, device: str, size: tuple):
    """One conv3d training step on ``device`` with its data resident there."""
    batch, spatial, c_in, c_out = (int(v) for v in size)
    with tf.device(device):
        x = tf.Variable(tf.random.stateless_normal((batch, spatial, spatial, spatial, c_in),
                                                   seed=(1, 2)), trainable=False)
        w = tf.Variable(tf.random.stateless_normal((3, 3, 3, c_in, c_out), seed=(3, 4)),
                        trainable=False)
        y = tf.nn.conv3d(x, w, strides=[1, 1, 1, 1, 1], padding="SAME")
        gx, gw = tf.gradients(tf.reduce_sum(y * y), [x, w])
        # A fetched scalar (4 bytes back): a step that is only grouped can be
        # pruned by TF's graph optimizer and would time nothing.
        return tf.reduce_sum(gx) + tf.reduce_sum(gw)


#: Hops of the link chains (:func:`_transfer_graph`): a tensor passed back and
#: forth between two workers this many times in one run, so that the session's
#: own round trip (client -> workers -> client, ~0.5-1 ms here) is divided out
LINK_HOPS = {"small": 41, "big": 9}


def _transfer_graph(tf, devices, nbytes: int) -> list:
    """``[{(kind, hops): op}]`` per pair of neighbouring workers (task i and i+1; for
    more than two, the last and the first too): a 4-byte (``small``) and an
    ``nbytes`` (``big``) tensor passed back and forth between the two, 1 hop or
    :data:`LINK_HOPS` hops in one op. Each hop is a cross-worker transfer and an
    add on the receiving worker, as a collective's step runs."""
    if len(devices) < 2:
        return []
    pairs = []
    for i in range(len(devices) if len(devices) > 2 else 1):
        ends = (devices[i], devices[(i + 1) % len(devices)])
        chains = {}
        ones = []  # a variable, not a constant: grappler cannot fold the chains' adds
        for end in ends:
            with tf.device(end):
                ones.append(tf.Variable(1.0, trainable=False))
        for kind, elems in (("small", 1), ("big", max(nbytes // 4, 1))):
            with tf.device(ends[0]):
                start = tf.Variable(tf.zeros([elems]), trainable=False)
            for hops in (1, LINK_HOPS[kind]):
                with tf.device(ends[0]):  # not wherever the placer puts a bare read
                    x = start.read_value()
                for h in range(hops):
                    with tf.device(ends[(h + 1) % 2]):
                        x = x + ones[(h + 1) % 2]  # the receiver really gets the bytes
                with tf.device(ends[hops % 2]):
                    # a scalar back to the client: the chain itself is timed
                    chains[kind, hops] = tf.reduce_sum(x[:1])
        pairs.append(chains)
    return pairs


def link_from_chains(seconds: dict, nbytes: int) -> tuple:
    """``(bandwidth bytes/s, latency s)`` of one link from the median seconds of its
    chains (``{(kind, hops): s}``, :func:`_transfer_graph`): the latency is the
    small chain's time per extra hop, the bandwidth ``nbytes`` over the big chain's
    time per extra hop less that latency. Differencing two chains removes what
    every run pays once (the client's round trip, reading the result)."""
    per_hop = {}
    for kind in ("small", "big"):
        hops = LINK_HOPS[kind]
        per_hop[kind] = (seconds[kind, hops] - seconds[kind, 1]) / (hops - 1)
    latency = max(per_hop["small"], 1e-9)
    bandwidth = nbytes / max(per_hop["big"] - latency, 1e-9)
    return float(bandwidth), float(latency)


def _link(session, pairs, nbytes: int, repeats: int) -> tuple:
    """(bandwidth bytes/s, latency s): medians over the worker pairs of
    :func:`link_from_chains`, each chain timed alone."""
    if not pairs:
        return DEFAULT_BANDWIDTH, DEFAULT_LATENCY
    bandwidths, latencies = [], []
    for chains in pairs:
        keys = sorted(chains)
        times = [median_seconds(session, [chains[k]], max(repeats, 5))[0] for k in keys]
        bandwidth, latency = link_from_chains(dict(zip(keys, times)), nbytes)
        bandwidths.append(bandwidth)
        latencies.append(latency)
    return float(np.median(bandwidths)), float(np.median(latencies))
