"""Pieces every planner shares: mesh shapes, the speed-sorted placement,
proportional weights, turning a chromosome into a :class:`Plan`, and the
checks of the planners' options."""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Optional, Sequence

import numpy as np

from meshpar.planning.cost_model import CostModel
from meshpar.planning.plan import Plan
from meshpar.core.splits import integer_at_least, number_above, split_sizes

BATCH_AXIS = "batch"
MODEL_AXIS = "model"

#: The planners' integer options and their least values (tournament 0 and elite 0
#: are taken as 1 by the GA, so they are not errors).
INTEGER_OPTIONS = {"population": 1, "generations": 1, "max_candidates": 1, "tournament": 0,
                   "elite": 0, "patience": 0, "polish_every": 0}
#: The largest GA population: the whole population is held and evaluated each
#: generation, and before the first one (which no time limit stops). 10**5 took 13 s a
#: generation and 0.3 GiB (resattnet3d-tiny, two devices); 10**8 grew to 22 GiB in its
#: first 100 s, on its way to the system's out-of-memory killer. The default is 32.
MAX_POPULATION = 100_000
#: Options that are probabilities, in [0, 1].
RATE_OPTIONS = ("crossover_rate", "weight_rate", "swap_rate", "balance_rate", "unit_rate",
                "shape_rate", "layout_rate")
#: Options that are finite numbers >= 0.
SCALE_OPTIONS = ("blend_alpha", "weight_sigma")
#: Options that are True or False.
BOOL_OPTIONS = ("per_layer", "layout_gene", "progress")


def subset_cost(cost: CostModel, devices: Sequence) -> CostModel:
    """The cost model of a plan that runs on ``devices`` only (some of
    ``cost.cluster``'s, in the order given), the others idle.

    The cost of splitting keeps the calibration ``cost`` made from the profile's
    timed splits: those ran over all the profiled devices, each share on the
    device their ``device_names`` say, so a subset's model cannot fit them again
    (it took the N-way times for its own k-way split, shares in listing order)."""
    sub = cost.cluster.subset(devices)
    sub = dataclasses.replace(sub, extra={**(sub.extra or {}), **cost.calibration()})
    return CostModel(cost.model, sub, cost.batch, cost.optimizer_slots, cost.memory_terms)


def device_kinds(cost: CostModel) -> np.ndarray:
    """Index of each device's kind: interchangeable devices (same profile, same
    memory) share one."""
    _, kinds = np.unique(np.stack([cost.device_type, cost.memory_capacity], axis=1),
                         axis=0, return_inverse=True)
    return kinds.ravel()


def representative_speeds(cost: CostModel) -> np.ndarray:
    """Each device's FLOP/s at the work size of an even share of a training step."""
    size = 3.0 * cost.model.flops * cost.batch / cost.n
    return cost.cluster.speeds_at(max(size, 1.0))


def sorted_placement(speeds: np.ndarray, rows: int, cols: int,
                     by_rows: bool = False) -> np.ndarray:
    """Devices at each pnum so that columns are alike inside and rows alike each other.

    Devices sorted fastest first fill the grid column by column: column 0
    takes the R fastest, column 1 the next R, ... Each row then holds one
    device of every speed band (rows alike), and every column holds devices of
    near-equal speed (so one share per column suits all of them).
    With ``by_rows`` the sorted devices fill row by row instead (fast rows and
    slow rows, balanced by the batch split): the other natural arrangement.
    """
    order = np.argsort(-np.asarray(speeds), kind="stable")
    if by_rows:
        return order.copy()
    grid = order.reshape(cols, rows).T  # grid[r, m] = order[m*R + r]
    return grid.reshape(-1)


def proportional_weights(speeds: np.ndarray, perm: np.ndarray, rows: int, cols: int):
    """Per-axis weights balancing the grid ``perm`` for devices of ``speeds``.

    Model-axis weight of a column = its slowest device's speed (every device of
    a column gets that share). Batch-axis weight of a row = the rate at which
    the row finishes with those shares: ``1 / max_m (w_m / speed[r, m])``.
    """
    s = np.asarray(speeds, dtype=float)[np.asarray(perm)].reshape(rows, cols)
    model_w = s.min(axis=0)
    model_w = model_w / model_w.sum()
    batch_w = 1.0 / (model_w[None, :] / s).max(axis=1)
    batch_w = batch_w / batch_w.sum()
    return batch_w, model_w


def build_plan(method: str, cost: CostModel, rows: int, cols: int, perm: Sequence[int],
               batch_weights: Sequence[float], model_weights: Sequence[float],
               dim_weights: Optional[dict] = None, planning_seconds: float = 0.0,
               history: Sequence[float] = (), extra: Optional[dict] = None,
               layout=None) -> Plan:
    """Make a Plan from a chromosome, with integer sizes from :func:`split_sizes`.

    ``layout``: bool per split dim, laid out on ``model`` (default: every dim
    of size >= cols); the plan's layout lists exactly those, the others are
    replicated (``extra["replicated"]`` names the ones the mesh could split)."""
    model = cost.model
    active = cost.layout_mask(cols, layout)[0]
    perm = [int(i) for i in perm]
    batch_weights = [float(w) for w in batch_weights]
    model_weights = [float(w) for w in model_weights]
    if not any(active):  # weights that split nothing (a gene the search left free): even
        model_weights = [1.0] * len(model_weights)
    dim_weights = {k: [float(x) for x in v] for k, v in (dim_weights or {}).items()}
    layout = [(model.batch_dim, BATCH_AXIS)]
    sizes = {model.batch_dim: split_sizes(cost.batch, batch_weights, model.batch_dim)}
    splittable = cost.active_dims(cols)
    for name, size, on in zip(cost.dim_names, cost.dim_sizes, active):
        if not on:
            continue
        layout.append((name, MODEL_AXIS))
        sizes[name] = split_sizes(int(size), dim_weights.get(name, model_weights), name)
    dim_weights = {k: v for k, v in dim_weights.items() if k in sizes}
    ev = cost.evaluate_sizes(rows, cols, perm, sizes[model.batch_dim], sizes, active)
    extra = dict(extra or {})
    replicated = [n for n, s, on in zip(cost.dim_names, splittable, active) if s and not on]
    if replicated:
        extra["replicated"] = replicated
    return Plan(
        method=method, model=model.name, batch=cost.batch,
        mesh_shape=((BATCH_AXIS, rows), (MODEL_AXIS, cols)),
        layout=tuple(layout),
        devices=tuple(cost.cluster.devices[i].device for i in perm),
        split_weights={BATCH_AXIS: batch_weights, MODEL_AXIS: model_weights},
        dim_split_weights=dim_weights,
        split_sizes=sizes,
        predicted_step_seconds=float(ev.seconds[0]),
        planning_seconds=float(planning_seconds),
        memory_per_device=tuple(float(m) for m in ev.memory[0]),
        feasible=bool(ev.feasible[0]),
        history=tuple(history) if history else (float(ev.seconds[0]),),
        lower_bound_seconds=cost.lower_bound(),
        extra=extra,
    )


def population_too_large(value, name: str = "population") -> str:
    """The refusal of a GA population over :data:`MAX_POPULATION`."""
    return (f"{name} must be at most {MAX_POPULATION}, got {value}: every individual is "
            "held and evaluated each generation, and the first one is not stopped by a "
            "time limit (the default is 32)")


def check_options(options: dict) -> None:
    """TypeError or ValueError naming the first planner option (keyword of
    :func:`meshpar.planning.planners.plan`) of the wrong type or out of range,
    before a planner turns it into a silent wrong result (``int(2.5)``, a NaN
    time limit that never stops) or a numpy error."""
    for name, value in options.items():
        if name in INTEGER_OPTIONS:
            integer_at_least(value, name, INTEGER_OPTIONS[name])
            if name == "population" and value > MAX_POPULATION:
                raise ValueError(population_too_large(value, name))
        elif name in RATE_OPTIONS and not 0 <= number_above(value, name, -math.inf) <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        elif name in SCALE_OPTIONS and number_above(value, name, -math.inf) < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
        elif name == "time_limit" and value is not None:
            number_above(value, "time_limit (seconds)")
        elif name == "mip_rel_gap" and not 0 <= number_above(value, name, -math.inf) < 1:
            raise ValueError(f"mip_rel_gap must be in [0, 1), got {value!r}")
        elif name in BOOL_OPTIONS and not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {value!r}")


def better(a: Plan, b: Plan) -> bool:
    """True if plan ``a`` beats ``b``: feasible first, then faster."""
    return (a.feasible, -a.predicted_step_seconds) > (b.feasible, -b.predicted_step_seconds)


def allowed_shapes(cost: CostModel, shapes: Optional[Sequence[tuple]] = None) -> list:
    """Mesh shapes ``(R, M)`` to search: all the cost model allows, or ``shapes``
    (checked: ``R * M`` must be the device count and ``R <= batch``)."""
    if shapes is None:
        return cost.shapes()
    out = []
    for shape in shapes:
        try:
            rows, cols = shape
        except (TypeError, ValueError) as err:
            raise ValueError(f"mesh shape must be (rows, cols), got {shape!r}") from err
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                   for x in (rows, cols)):  # (1.5, 2) was cut to 1x2, "2" read as 2
            raise ValueError(f"mesh shape must be (rows, cols) of integers, got {shape!r}")
        rows, cols = int(rows), int(cols)
        if rows < 1 or cols < 1 or rows * cols != cost.n:
            raise ValueError(f"mesh shape {rows}x{cols} does not have {cost.n} devices")
        if rows > cost.batch:
            raise ValueError(f"mesh shape {rows}x{cols}: {rows} batch rows but batch "
                             f"is only {cost.batch}")
        out.append((rows, cols))
    if not out:
        raise ValueError("no mesh shapes to search")
    return out


def best_over_shapes(method: str, cost: CostModel, make,
                     shapes: Optional[Sequence[tuple]] = None) -> Plan:
    """Build ``make(rows, cols) -> Plan`` for every allowed mesh shape, keep the best."""
    best = None
    for rows, cols in allowed_shapes(cost, shapes):
        candidate = make(rows, cols)
        if best is None or better(candidate, best):
            best = candidate
    return best
