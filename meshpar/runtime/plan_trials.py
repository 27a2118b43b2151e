"""Timing a planner's candidate plans on the workers themselves (``meshpar plan --verify K``).

The cost model is fitted to a few timed splits of the profile (the even and the
speed-proportional one of each mesh axis) and extrapolates to the others. Where
its margin between two plans is within its error, the way to know which runs
faster is to run both: each candidate's whole training step, as a profile
times one (race-free Adam with train's default weight decay, the graph rewrites
of training's op determinism, the input sent from this client; a constant
learning rate where train's default schedule computes one a step) is timed on the
workers, the candidates taking turns round after round so that a slow spell of
a shared host hits them alike (as the profile times its splits,
``timed_rounds.interleaved_seconds``). Seen on resattnet3d-small at batch 8 (docs/benchmarks.rst,
stop 56): a 7/1 batch split predicted 2.5% faster than the fast worker alone ran
at 0.78x it.
"""
from __future__ import annotations

from typing import Optional, Sequence

from meshpar.core.splits import integer_at_least

#: Rounds in which every candidate is timed in turn.
VERIFY_ROUNDS = 3
#: Timed runs of each candidate in every round (the median over all rounds' runs
#: is its time).
VERIFY_REPEATS = 5


def time_plans(addresses: Sequence[str], model, batch: int, plans: Sequence,
               rounds: int = VERIFY_ROUNDS, repeats: int = VERIFY_REPEATS,
               log=None) -> list:
    """Seconds of each of ``plans``' whole training step on the TF workers at
    ``addresses`` (``meshpar worker`` tasks), in ``plans``' order: the median of
    ``rounds`` x ``repeats`` runs, the plans taking turns.

    ``model``: a registry name, a reference as ``--model`` takes it, or a
    :class:`~meshpar.models.ModelSpec`; ``batch``: the plans' global batch.
    Each plan's devices are placed on the workers as ``meshpar train --plan``
    places them (by the addresses the plan records, else by task number;
    :meth:`~meshpar.runtime.client.ClusterClient.place`)."""
    import tensorflow.compat.v1 as tf

    from meshpar.models import ModelSpec, resolve
    from meshpar.runtime import profiling
    from meshpar.runtime.client import ClusterClient, training_determinism
    from meshpar.runtime.timed_rounds import interleaved_seconds
    from meshpar.training.mesh_spec import MeshSpec

    rounds = integer_at_least(rounds, "rounds")
    repeats = integer_at_least(repeats, "repeats")
    batch = integer_at_least(batch, "batch")
    if not plans:
        raise ValueError("no plans to time")
    for p in plans:
        if p.batch != batch:
            raise ValueError(f"a plan for batch {p.batch} cannot be timed at batch {batch}")
    log = log or (lambda *a: None)
    spec = model if isinstance(model, ModelSpec) else resolve(model)
    client = ClusterClient(addresses)
    placed = [client.place(p.devices, plan_addresses=p.extra.get("worker_addresses"))
              for p in plans]
    client.check_devices(sorted({d for devices in placed for d in devices}))
    graph = tf.Graph()
    ops, copies = {}, []
    with graph.as_default():
        tf.set_random_seed(0)  # initialisers are random ops (and determinism wants a seed)
        for i, (p, devices) in enumerate(zip(plans, placed)):
            ops[i], copy = profiling._model_step_graph(  # pylint: disable=protected-access
                tf, spec, devices[0], batch, MeshSpec.from_plan(p, devices),
                input_device=client.client_device, tag=f"candidate{i}")
            copies.append(copy)
        init = tf.global_variables_initializer()
    config = client.session_config(tf.ConfigProto(allow_soft_placement=False),
                                   deterministic=training_determinism())
    log(f"timing {len(plans)} candidate plan(s) on {len(client.addresses)} worker(s): "
        f"{rounds} round(s) of {repeats} step(s) each")
    with tf.Session(client.target, graph=graph, config=config) as session:
        session.run(init)
        session.run(copies)
        timed = interleaved_seconds(session, ops, repeats, rounds)
    return [float(timed[i]) for i in range(len(plans))]


def pick_measured(plans: Sequence, seconds: Sequence[float],
                  rounds: Optional[int] = None) -> tuple:
    """``(plan, record)``: the plan of the least measured seconds (the first of equal
    ones: the one predicted faster, candidates being in predicted order), its
    ``extra["verified"]`` set to ``record``: every candidate's mesh, split sizes,
    predicted and measured step seconds, and the picked one's index."""
    if len(plans) != len(seconds) or not plans:
        raise ValueError(f"{len(seconds)} times for {len(plans)} plans")
    best = min(range(len(plans)), key=lambda i: (seconds[i], i))
    record = {"picked": best, "rounds": rounds, "candidates": [
        {"mesh": p.mesh_shape_string(), "devices": list(p.devices),
         "split_sizes": {k: list(v) for k, v in p.split_sizes.items()},
         "predicted_step_seconds": float(p.predicted_step_seconds),
         "measured_step_seconds": float(s)} for p, s in zip(plans, seconds)]}
    chosen = plans[best]
    chosen.extra["verified"] = record
    return chosen, record
