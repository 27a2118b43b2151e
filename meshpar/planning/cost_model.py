"""Predicted step time and per-device memory of a plan (numpy, no TensorFlow).

The model (see docs/cost_model.md) for a ``batch:R;model:M`` mesh:

* Device ``(r, m)`` (pnum ``r*M + m``) trains on ``b_r`` samples (the batch
  split over rows). For a layer whose ``split_dim`` is laid out on ``model``
  it computes ``c_m / split_size`` of the layer (its filter slice); a layer
  that is not split is replicated: every device of the row computes all of it.
* Compute time of a slice = ``3 * forward FLOPs`` (forward + two backward
  products) / the device's speed at that work size (its measured profile).
  With a model-step profile, the step's part that does not grow with the
  batch (the optimizer update, measured to grow with the parameters) is
  shared out by the parameters each slice holds instead of its FLOPs.
* The layout says which split dimensions are laid out on ``model`` (default:
  every one of size >= M); the others are replicated. Each collective the
  lowering runs belongs to the layer row of the dimension whose layout
  causes it, and costs only when that dimension is laid out (see
  docs/cost_model.md for how each was found in the lowered graph):
  ``comm="allconcat"`` gathers the layer's output forward (all-concat,
  ``(S - min piece)/bw + (M-1) lat``: every device receives what it lacks
  through its own link; its backward is a local slice);
  ``comm="allreduce"`` sums a split contraction's partial output forward;
  ``backward_allreduce_elems`` are all-reduced and
  ``backward_allconcat_elems`` gathered in the backward pass. An all-reduce
  of ``S`` bytes over ``k`` devices is a ring, ``2(k-1)/k * S/bw + (k-1) lat``.
* Within a row, devices synchronise at the forward collectives: between them
  a device runs ahead, so a row's compute is the sum over its segments of
  the slowest device (the critical path of the simple formula, sum over
  layers of the slowest device, refined: never larger).
* Step time = slowest row + the data-parallel all-reduce (ring over the
  ``R`` devices of a column, on the bytes the column holds: its parameter
  gradients, its share of the batch-norm statistics, the mean loss).
  With a model-step profile that timed even splits (``split_seconds``), the
  link formulas give way to a calibrated per-step work of splitting each
  axis, which every row pays at its slowest device's speed (``_calibrate``).
  With the profile's speed-weighted splits as well, the maxima over the
  devices that meet at a collective (columns in a segment, rows at the
  step's end) become expected maxima with a measured jitter: the wait for
  the slowest device where a split is balanced (``calibration.py``).
* :meth:`CostModel.traffic` gives the bytes every collective moves between
  devices per step: ``(k-1) S`` for an all-concat of ``S`` bytes over ``k``
  devices, ``2(k-1) S`` for an all-reduce, exactly what the lowered graph
  sends (``tests/test_collective_pricing.py`` counts them).
* Memory of a device: the tensors it holds (parameter slices; input and every
  layer's output kept for the backward pass, split outputs as the slice plus
  the gathered whole when all-concatenated) times the copies a worker keeps
  of each at its peak, plus a runtime base (``memory.MemoryTerms``, measured:
  parameters x (value, gradient, optimizer slots, update temporaries, and
  the gradient exchange where the batch axis is split)). A plan is
  infeasible if any device exceeds its memory.

Everything is evaluated for a whole population at once: arrays ``[P, ...]``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from meshpar.core.splits import integer_at_least, split_sizes_batch
from meshpar.planning.calibration import checked_splits, expected_max, fit_axis, timed_order
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.description import ModelDescription, check_priced_layout
from meshpar.planning.memory import MEASURED, MemoryTerms
from meshpar.planning.profiles import (fixed_step_seconds, lookup, nondecreasing_profile,
                                       slice_table)


#: ``Layer.comm`` -> code: none, all-concat, all-reduce.
COMM_CODES = {None: 0, "allconcat": 1, "allreduce": 2}
#: Elements all-reduced over the batch axis per step besides the gradients:
#: the mean loss (one number).
LOSS_ELEMS = 1


def ring_allreduce_seconds(nbytes, k: int, bandwidth: float, latency: float):
    """Time of a ring all-reduce of ``nbytes`` over ``k`` devices: every device
    sends and receives ``2(k-1)/k`` of the data, in ``k-1`` steps each way."""
    return 2.0 * (k - 1) / k * nbytes / bandwidth + (k - 1) * latency


@dataclass(frozen=True)
class Evaluation:
    """Cost-model output for P candidate plans on one mesh shape.

    seconds : [P] predicted step time (compute + collectives + gradient all-reduce)
    compute_seconds : [P] the compute part of the slowest row
    comm_seconds : [P] collectives on the slowest row plus the gradient all-reduce
    memory : [P, n] bytes per device in pnum order
    feasible : [P] bool, every device within its memory
    overflow : [P] largest memory / capacity ratio (<= 1 when feasible)
    device_seconds : [P, n] compute seconds per device (pnum order)
    row_seconds : [P, R] compute + collectives of each row (before the gradient all-reduce)
    dim_column_seconds : [P, D, M] per split dim, compute of that dim's layers on
        each column (slowest row); what a rebalancing step equalises
    """

    seconds: np.ndarray
    compute_seconds: np.ndarray
    comm_seconds: np.ndarray
    memory: np.ndarray
    feasible: np.ndarray
    overflow: np.ndarray
    device_seconds: np.ndarray
    row_seconds: np.ndarray
    dim_column_seconds: np.ndarray


def _check_types(model, cluster, memory_terms) -> None:
    """TypeError naming the argument of :class:`CostModel` that is not what it prices (a
    model name or a list of speeds ended in "'str' object has no attribute 'layers'")."""
    if not isinstance(model, ModelDescription):
        hint = (f"; for a model name, pass meshpar.models.describe_model({model!r})"
                if isinstance(model, str) else "; for a ModelSpec, its describe()"
                if callable(getattr(model, "describe", None)) else "")
        raise TypeError(f"model must be a ModelDescription, got {model!r}{hint}")
    if not isinstance(cluster, ClusterSpec):
        hint = "; for relative speeds, ClusterSpec.from_speeds(them)" * (
            isinstance(cluster, (list, tuple, np.ndarray)))
        raise TypeError(f"cluster must be a ClusterSpec, got {cluster!r}{hint}")
    if not isinstance(memory_terms, MemoryTerms):
        raise TypeError(f"memory_terms must be a MemoryTerms, got {memory_terms!r}")


class CostModel:
    """Cost model of one model, cluster and global batch size.

    Parameters
    ----------
    model : ModelDescription
    cluster : ClusterSpec
    batch : int
        Global batch size (split over the ``batch`` mesh axis).
    optimizer_slots : int
        Optimizer state per parameter (Adam: 2).
    memory_terms : MemoryTerms
        Copies a worker holds of each counted tensor, and its runtime base
        (default: measured on this repository's workers, ``memory.MEASURED``).
    """

    def __init__(self, model: ModelDescription, cluster: ClusterSpec, batch: int,
                 optimizer_slots: int = 2, memory_terms: MemoryTerms = MEASURED):
        _check_types(model, cluster, memory_terms)
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        if batch > 2 ** 53:  # float quotas (split_sizes_batch) split exactly up to 2**53
            raise ValueError(f"batch {batch} is too large to split (at most 2**53)")
        if not model.layers:
            raise ValueError(f"model {model.name!r} has no layers")
        self.model = model
        self.cluster = cluster
        self.batch = int(batch)
        # 2.5 was cut to 2, "2" read as 2
        self.optimizer_slots = integer_at_least(optimizer_slots, "optimizer_slots", 0)
        self.memory_terms = memory_terms
        self.n = len(cluster.devices)
        layers = model.layers
        self.dim_names = list(model.split_dims)  # insertion order of first use
        self.dim_sizes = np.array([model.split_dims[d] for d in self.dim_names], dtype=np.int64)
        self.layer_dim = np.array([self.dim_names.index(l.split_dim) if l.split_dim else -1
                                   for l in layers], dtype=np.int64)
        self.flops = np.array([l.flops for l in layers], dtype=float)
        self.params = np.array([l.params for l in layers], dtype=float)
        self.out_elems = np.array([l.out_elems for l in layers], dtype=float)
        self.comm = [l.comm for l in layers]
        # Collectives per layer row, paid when the row's split dim is laid out.
        self.comm_kind = np.array([COMM_CODES[c] for c in self.comm], dtype=np.int64)
        self.backward_allreduce = np.array([l.backward_allreduce_elems for l in layers], float)
        self.backward_allconcat = np.array([l.backward_allconcat_elems for l in layers], float)
        self.batch_allreduce = np.array([l.batch_allreduce_elems for l in layers], float)
        self.comm_layers = np.nonzero((self.layer_dim >= 0) & (
            (self.comm_kind > 0) | (self.backward_allreduce > 0)
            | (self.backward_allconcat > 0)))[0]
        self.layer_dim_onehot = np.zeros((len(layers), len(self.dim_names)))
        for i, d in enumerate(self.layer_dim):
            if d >= 0:
                self.layer_dim_onehot[i, d] = 1.0
        self.bytes = float(model.dtype_bytes)
        # Device types: devices with identical profiles share one row of the table.
        keys, types = {}, []
        for d in cluster.devices:
            types.append(keys.setdefault((d.profile, d.slice_efficiency), len(keys)))
        self.device_type = np.array(types, dtype=np.int64)
        # A profile of whole training steps of this very model (``meshpar profile
        # --model``) is looked up at each device's whole-step work; a kernel
        # profile at each layer slice's work.
        self.step_profile = (cluster.extra or {}).get("work") == "model-step"
        profiled = (cluster.extra or {}).get("model")
        if self.step_profile and profiled not in (model.name, None):
            raise ValueError(f"the device profile was measured on model {profiled!r}; "
                             f"profile {model.name!r} to plan it")
        profiles = [nondecreasing_profile(p) if self.step_profile else tuple(sorted(p))
                    for p, _ in keys]
        self._slice_grid, self._log_slice = slice_table([s for _, s in keys])
        # A step profile's fixed part, shared out by the parameters a slice
        # holds rather than by its FLOPs (see evaluate): per device type.
        self.fixed_seconds = np.array([fixed_step_seconds(p) if self.step_profile else 0.0
                                       for p, _ in keys])
        grid = sorted({np.log(s) for prof in profiles for s, _ in prof})
        self._grid = np.array(grid, dtype=float)
        self._log_speed = np.array([
            np.interp(self._grid, np.log([s for s, _ in prof]), np.log([f for _, f in prof]))
            for prof in profiles])
        # what a plan's count may take: the memory less the count's headroom
        self.memory_capacity = memory_terms.usable([d.memory_bytes for d in cluster.devices])
        self.max_speed = np.exp(self._log_speed.max(axis=1))[self.device_type]
        self.split_overhead = None
        self.sync_jitter = {"batch": 0.0, "model": 0.0}
        extra = cluster.extra or {}
        measured = extra.get("split_seconds") if self.step_profile else None
        known = extra.get("split_overhead_flops") if self.step_profile else None
        if known:  # already calibrated (:meth:`calibration`: a re-scaled profile, a subset)
            self.split_overhead = {"batch": float(known["batch"]), "model": float(known["model"])}
            self.sync_jitter = {axis: float((extra.get("sync_jitter") or {}).get(axis, 0.0))
                                for axis in ("batch", "model")}
        elif measured:
            self.split_overhead, self.sync_jitter = self._calibrate(measured)

    def calibration(self) -> dict:
        """The profile fields that carry this model's calibration of the cost of
        splitting to a cluster of fewer or re-scaled devices (``split_overhead_flops``,
        ``sync_jitter``; read before ``split_seconds``), none when not calibrated."""
        if self.split_overhead is None:
            return {}
        return {"split_overhead_flops": dict(self.split_overhead),
                "sync_jitter": dict(self.sync_jitter)}

    def _calibrate(self, measured: dict) -> tuple:
        """``(overhead, jitter)`` per mesh axis from the profile's timed splits:
        ``{"batch": s, "model": s, "batch_size": B, "balanced": {"weights": [..],
        "batch": s, "model": s}}`` (the even splits over all the profiled
        workers; the splits weighted by their speeds, optional), fitted by
        :func:`meshpar.planning.calibration.fit_axis`.

        Overhead is per-step work in FLOPs each device spends (priced at its
        top speed, see :meth:`overhead_seconds`): what synchronising costs
        (batch-norm statistics, gathers, gradient all-reduce, the barrier),
        which link formulas do not see. Why work and not seconds: the cost is
        paid on each worker's own CPU, and a fixed per-step cost runs 3x
        longer on a third of a core, so in an uneven split the slow row pays
        more than the fast one (measured, resattnet3d-small-local-bn at batch
        32 on 0.9/0.3 of a core: a constant added to the step predicted 24/8
        and 25/7 within 2% of each other, per-device work predicts 25/7 7%
        faster, measured 13% faster; docs/cost_model.md). Jitter is the wait
        for the slowest device where a split is balanced (calibration.py)."""
        batch = int(measured.get("batch_size", self.batch))
        drop = ("split_seconds", "split_overhead_flops", "sync_jitter")
        probe = CostModel(self.model, dataclasses.replace(
            self.cluster, extra={k: v for k, v in self.cluster.extra.items() if k not in drop}),
            batch, self.optimizer_slots, self.memory_terms)
        n = self.n
        ident = (timed_order(measured.get("device_names"), [d.name for d in self.cluster.devices])
                 if n > 1 else np.arange(n))
        balanced = measured.get("balanced") or {}
        weights = balanced.get("weights")
        if weights is not None and len(weights) != n:
            weights = None  # weighted over other workers than these: not this split
        checked = checked_splits(measured.get("checked") or {}, batch, n) if n > 1 else {}
        overhead, jitter = {"batch": 0.0, "model": 0.0}, {"batch": 0.0, "model": 0.0}
        for axis in ("batch", "model"):
            if n < 2 or not measured.get(axis) or (axis == "batch" and batch < n):
                continue

            def predict(work, c, which, axis=axis):
                probe.split_overhead = {**overhead, axis: work}
                probe.sync_jitter = {**jitter, axis: c}
                if which == "checked":
                    return float(probe.evaluate_plan(checked[axis][0]).seconds[0])
                w = np.ones((1, n)) if which == "even" else np.asarray(weights, float)[None, :]
                if axis == "batch":
                    return float(probe.evaluate_sizes(n, 1, ident, split_sizes_batch(batch, w)[0],
                                                      {}).seconds[0])
                dims = {name: split_sizes_batch(int(size), w)[0]
                        for name, size in zip(self.dim_names, self.dim_sizes) if size >= n}
                return float(probe.evaluate_sizes(1, n, ident, [batch], dims).seconds[0])

            top = float(measured[axis]) * float(self.max_speed.max())
            overhead[axis], jitter[axis] = fit_axis(
                predict, float(measured[axis]), balanced.get(axis) if weights else None, top,
                {"checked": checked[axis][1]} if axis in checked else None)
        return overhead, jitter

    def overhead_seconds(self, rows: int, cols: int, speed: np.ndarray) -> np.ndarray:
        """Seconds of the calibrated split work of each row, ``speed`` [..., R, M]
        the top FLOP/s of each row's devices: the work of every axis the mesh
        splits, at the row's slowest device (zeros when not calibrated)."""
        speed = np.asarray(speed, dtype=float)
        if self.split_overhead is None:
            return np.zeros(speed.shape[:-1])
        work = ((self.split_overhead["batch"] if rows > 1 else 0.0)
                + (self.split_overhead["model"] if cols > 1 else 0.0))
        return work / speed.min(axis=-1)

    # ------------------------------------------------------------------ helpers
    def shapes(self) -> list:
        """Mesh shapes ``(R, M)`` with ``R * M = n`` that this batch allows (R <= batch)."""
        return [(r, self.n // r) for r in range(1, self.n + 1)
                if self.n % r == 0 and r <= self.batch]

    def active_dims(self, model_size: int) -> np.ndarray:
        """Bool per split dim: laid out on ``model`` (size >= M and M > 1)."""
        return (self.dim_sizes >= model_size) & (model_size > 1)

    def speed(self, device_type: np.ndarray, work: np.ndarray) -> np.ndarray:
        """FLOP/s of devices of ``device_type`` for items of ``work`` FLOPs (broadcast)."""
        return lookup(self._grid, self._log_speed, device_type, np.log(np.maximum(work, 1.0)))

    @property
    def slices_priced(self) -> bool:
        """Whether a device's speed depends on the share of the dims its slice holds."""
        return self._slice_grid is not None

    def slice_efficiency(self, device_type: np.ndarray, fraction: np.ndarray) -> np.ndarray:
        """Speed on a slice holding ``fraction`` of its split dims, relative to the
        whole layer (broadcast; 1 where not measured, at most 1).

        Below the narrowest measured slice the measured trend goes on: log
        efficiency falls with log fraction at the slope of the two narrowest
        points (between 0, efficiency held, and 1, the slice's time held).
        Holding the efficiency made a narrow slice's time shrink in
        proportion to its share: resattnet3d-small's 7:1 filter split (1/8 on
        a 0.3-core worker profiled at 1/4 and 1/2) was predicted at 0.68-0.75
        of its measured step (docs/cost_model.md)."""
        fraction = np.asarray(fraction, dtype=float)
        if self._slice_grid is None:
            return np.ones(np.broadcast(np.asarray(device_type), fraction).shape)
        grid, table = self._slice_grid, self._log_slice
        x = np.log(np.clip(fraction, 1e-12, 1.0))
        efficiency = lookup(grid, table, device_type, x)
        if grid.size < 2:
            return efficiency
        slope = np.clip((table[:, 1] - table[:, 0]) / (grid[1] - grid[0]), 0.0, 1.0)
        return efficiency * np.exp(slope[device_type] * np.minimum(x - grid[0], 0.0))

    def lower_bound(self) -> float:
        """Total training work / total peak speed: no plan can be faster."""
        return float(3.0 * self.model.flops * self.batch / self.max_speed.sum())

    def layout_mask(self, cols: int, layout=None, count: int = 1) -> np.ndarray:
        """Bool [count, D]: which split dims are laid out on ``model``.

        ``layout`` is None (every dim the mesh can split: size >= M, M > 1),
        a bool array [D] or [count, D], or an iterable of dim names; a dim
        too small for ``cols`` pieces is never laid out."""
        active = self.active_dims(cols)
        if layout is None:
            mask = active
        elif isinstance(layout, np.ndarray) and layout.dtype == bool:
            mask = layout
        else:
            names = set(layout)
            unknown = names - set(self.dim_names)
            if unknown:
                raise ValueError(f"layout names dimension(s) {sorted(unknown)} that model "
                                 f"{self.model.name!r} does not split")
            mask = np.array([d in names for d in self.dim_names], dtype=bool)
        mask = np.atleast_2d(np.asarray(mask, dtype=bool)) & active[None, :]  # D may be 0
        return np.broadcast_to(mask, (count, self.dim_sizes.size))

    def _split_layers(self, lay: np.ndarray) -> np.ndarray:
        """Bool [P, L]: layer rows whose split dim is laid out (``lay`` [P, D])."""
        if not self.dim_sizes.size:
            return np.zeros((lay.shape[0], self.flops.size), dtype=bool)
        return lay[:, np.maximum(self.layer_dim, 0)] & (self.layer_dim >= 0)[None, :]

    def _fractions(self, split: np.ndarray, dim_sizes, M: int) -> np.ndarray:
        """[P, M, L]: share of each layer row computed (and held) by column m."""
        P, L = split.shape
        if not split.any():
            return np.ones((P, M, L))
        cs = np.asarray(dim_sizes, dtype=float).reshape(P, self.dim_sizes.size, M)
        share = cs / self.dim_sizes[None, :, None]                       # [P, D, M]
        per_layer = np.transpose(share[:, np.maximum(self.layer_dim, 0), :], (0, 2, 1))
        return np.where(split[:, None, :], per_layer, 1.0)

    def _fixed_part_shift(self, at, frac, dev_type) -> np.ndarray:
        """[P, R, M, L]: what each layer slice's seconds gain (or lose) when the
        step's fixed part is shared out by the parameters the slice holds
        instead of by its FLOPs.

        The step profile times the whole model's step at each batch; its part
        that does not grow with the batch (``fixed_seconds``) grows with the
        parameters (measured, :func:`fixed_step_seconds`). Priced by FLOPs, a
        slice holding a large share of the parameters but a small share of
        the FLOPs (vgg-cifar's late convolutions and fc1, which a memory
        budget pushes to a slow device) was predicted too fast. A replicated
        layer is charged its whole parameter share on every device (each
        updates it). The shifts of a device sum to zero where it holds every
        layer whole (alone, any batch split) and nearly so where every split
        dim has the same share (even, proportional: only the replicated
        layers move). A slice never goes below zero (the fixed part is at
        most the whole step)."""
        whole = at / self.speed(dev_type[..., None], at)               # [P, R, M, 1]
        fixed = np.minimum(self.fixed_seconds[dev_type][..., None], whole)
        shift = self.params / self.params.sum() - self.flops / self.flops.sum()
        return fixed * shift[None, None, None, :] * frac[:, None, :, :]

    def _row_compute(self, seconds: np.ndarray, split: np.ndarray) -> np.ndarray:
        """[P, R]: sum over the segments between forward collectives of the
        slowest column (the expected slowest, with the model axis's jitter),
        per row (candidates grouped by their segment ends)."""
        P, R, M, L = seconds.shape
        ends = split & (self.comm_kind > 0)[None, :]
        out = np.empty((P, R))
        patterns, inverse = np.unique(ends, axis=0, return_inverse=True)
        for k, pattern in enumerate(patterns):
            idx = np.nonzero(inverse.ravel() == k)[0]
            starts = np.concatenate([[0], np.nonzero(pattern)[0] + 1])
            seg = np.add.reduceat(seconds[idx], starts[starts < L], axis=3)
            out[idx] = expected_max(seg, self.sync_jitter["model"], axis=2).sum(axis=2)
        return out

    def _row_comm(self, split: np.ndarray, frac: np.ndarray, bs: np.ndarray,
                  M: int) -> np.ndarray:
        """[P, R]: seconds of the model-axis collectives of each row."""
        P, R = bs.shape
        bw, lat = self.cluster.bandwidth, self.cluster.latency
        out = np.zeros((P, R))
        nbytes = bs * self.bytes                                         # [P, R]
        for l in self.comm_layers:
            on = split[:, l]
            if not on.any():
                continue
            lacking = 1.0 - frac[:, :, l].min(axis=1)[:, None]           # [P, 1]
            t = np.zeros((P, R))
            if self.comm_kind[l] == 1:
                t += self.out_elems[l] * nbytes * lacking / bw + (M - 1) * lat
            elif self.comm_kind[l] == 2:
                t += ring_allreduce_seconds(self.out_elems[l] * nbytes, M, bw, lat)
            if self.backward_allreduce[l]:
                t += ring_allreduce_seconds(self.backward_allreduce[l] * nbytes, M, bw, lat)
            if self.backward_allconcat[l]:
                t += self.backward_allconcat[l] * nbytes * lacking / bw + (M - 1) * lat
            out += np.where(on[:, None], t, 0.0)
        return out

    def column_batch_bytes(self, frac: np.ndarray) -> np.ndarray:
        """[P, M]: bytes each column all-reduces over the batch axis per step:
        its parameter gradients, its share of the batch-norm statistics and
        the mean loss."""
        held = self.params + self.batch_allreduce
        return ((held[None, None, :] * frac).sum(axis=2) + LOSS_ELEMS) * self.bytes

    # ---------------------------------------------------------------- evaluate
    def evaluate(self, rows: int, cols: int, perm: np.ndarray, batch_sizes: np.ndarray,
                 dim_sizes: np.ndarray, layout=None) -> Evaluation:
        """Evaluate P plans of mesh shape ``batch:rows;model:cols``.

        Parameters
        ----------
        perm : int array [P, n]
            Device index (into ``cluster.devices``) at each pnum (row-major).
        batch_sizes : int array [P, rows]
            Samples per row (sum = batch).
        dim_sizes : int array [P, D, cols]
            Split sizes of every split dim over the model axis; ignored for
            dims that are not laid out.
        layout : bool array [P, D] or [D], optional
            Dims laid out on ``model`` (see :meth:`layout_mask`); default every
            dim of size >= cols.
        """
        R, M = int(rows), int(cols)
        if R * M != self.n:
            raise ValueError(f"mesh {R}x{M} does not have {self.n} devices")
        perm = np.asarray(perm, dtype=np.int64).reshape(-1, self.n)
        P = perm.shape[0]
        bs = np.asarray(batch_sizes, dtype=float).reshape(P, R)
        split = self._split_layers(self.layout_mask(M, layout, P))     # [P, L]
        frac = self._fractions(split, dim_sizes, M)                    # [P, M, L]
        work = 3.0 * self.flops[None, None, None, :] * bs[:, :, None, None] * frac[:, None, :, :]
        dev_type = self.device_type[perm].reshape(P, R, M)
        if self.step_profile and self._slice_grid is not None:
            # the whole model's step at the row's batch; how much slower a
            # narrow slice runs is the measured slice efficiency (below)
            at = 3.0 * self.flops.sum() * bs[:, :, None, None]
        elif self.step_profile:  # speeds measured per whole training step of this model
            at = work.sum(axis=3, keepdims=True)
        else:  # speeds measured per kernel: each layer slice at its own size
            at = work
        seconds = work / self.speed(dev_type[..., None], at)  # [P, R, M, L]
        if self.step_profile and self._slice_grid is not None and self.params.sum() > 0:
            seconds = seconds + self._fixed_part_shift(at, frac, dev_type)
        if self._slice_grid is not None:  # a narrow slice runs below the whole layer's speed
            seconds = seconds / self.slice_efficiency(dev_type[..., None], frac[:, None, :, :])
        device_seconds = seconds.sum(axis=3)
        row_compute = self._row_compute(seconds, split)
        row_comm = self._row_comm(split, frac, bs, M)
        bw, lat = self.cluster.bandwidth, self.cluster.latency
        param_bytes = (self.params[None, None, :] * frac).sum(axis=2) * self.bytes  # [P, M]
        if self.split_overhead is not None:
            # Measured per-step work of splitting over each axis (see _calibrate),
            # paid by every row at its own speed: it replaces the link formulas,
            # which miss synchronisation waits.
            row_comm = self.overhead_seconds(R, M, self.max_speed[perm].reshape(P, R, M))
            dp = np.zeros(P)
        elif R > 1:  # data-parallel all-reduce over each column's R devices
            dp = ring_allreduce_seconds(self.column_batch_bytes(frac).max(axis=1), R, bw, lat)
        else:
            dp = np.zeros(P)
        row_total = row_compute + row_comm
        slowest = np.argmax(row_total, axis=1)
        pick = np.arange(P)
        # rows meet at the data-parallel collectives: the expected slowest row
        total_seconds = expected_max(row_total, self.sync_jitter["batch"], axis=1) + dp
        # Memory per device [P, R, M]: a gathered output is kept whole and as
        # the slice; an output that stays split, as the slice.
        concat = split & (self.comm_kind == 1)[None, :]
        stays = split & (self.comm_kind == 0)[None, :]
        act_factor = np.where(concat[:, None, :], 1.0 + frac,
                              np.where(stays[:, None, :], frac, 1.0))
        act = (act_factor * self.out_elems[None, None, :]).sum(axis=2)  # [P, M]
        act_bytes = (act[:, None, :] + self.model.input_elems) * bs[:, :, None] * self.bytes
        memory = self.memory_terms.device_bytes(param_bytes[:, None, :], act_bytes,
                                                self.optimizer_slots, R > 1).reshape(P, self.n)
        ratio = memory / self.memory_capacity[perm]
        overflow = ratio.max(axis=1)
        return Evaluation(
            seconds=total_seconds,
            compute_seconds=row_compute[pick, slowest],
            comm_seconds=row_comm[pick, slowest] + dp,
            memory=memory,
            feasible=overflow <= 1.0,
            overflow=overflow,
            device_seconds=device_seconds.reshape(P, self.n),
            row_seconds=row_total,
            dim_column_seconds=np.transpose((seconds @ self.layer_dim_onehot).max(axis=1),
                                            (0, 2, 1)),
        )

    def traffic(self, rows: int, cols: int, batch_sizes: Sequence[int], dim_sizes: dict,
                layout=None) -> dict:
        """Bytes sent between devices in one training step of one plan, by collective.

        ``dim_sizes``: dim name -> sizes per column; ``layout``: dim names
        laid out on ``model`` (default every dim of size >= cols). An
        all-concat of ``S`` bytes over ``k`` devices sends ``(k-1) S`` (each
        device receives the pieces it lacks), an all-reduce ``2(k-1) S``
        (ring or two-way chain, see ``meshpar.core.collectives``). Returns
        ``{(layer name or "batch", kind): bytes}``; kinds ``allconcat``,
        ``allreduce``, ``backward_allreduce``, ``backward_allconcat``, and
        ``("batch", "allreduce")`` for the data-parallel all-reduce.
        """
        R, M = int(rows), int(cols)
        bs = np.asarray(batch_sizes, dtype=float).reshape(1, R)
        split = self._split_layers(self.layout_mask(M, layout))
        frac = self._fractions(split, self._sizes_array(M, dim_sizes), M)
        samples = float(bs.sum())
        out = {}
        for l in self.comm_layers:
            if not split[0, l] or M == 1:
                continue
            name = self.model.layers[l].name
            per_sample = {"allconcat": (M - 1) * self.out_elems[l] * (self.comm_kind[l] == 1),
                          "allreduce": 2 * (M - 1) * self.out_elems[l] * (self.comm_kind[l] == 2),
                          "backward_allreduce": 2 * (M - 1) * self.backward_allreduce[l],
                          "backward_allconcat": (M - 1) * self.backward_allconcat[l]}
            for kind, elems in per_sample.items():
                if elems:
                    out[(name, kind)] = float(elems * samples * self.bytes)
        if R > 1:
            out[("batch", "allreduce")] = float(2 * (R - 1) * self.column_batch_bytes(frac).sum())
        return out

    def _sizes_array(self, cols: int, dim_sizes: dict) -> np.ndarray:
        """[1, D, cols] split sizes from ``{dim name: sizes}`` (ones elsewhere)."""
        cs = np.ones((1, self.dim_sizes.size, cols))
        for j, name in enumerate(self.dim_names):
            if name in dim_sizes:
                cs[0, j, :] = dim_sizes[name]
        return cs

    def evaluate_sizes(self, rows: int, cols: int, perm: Sequence[int],
                       batch_sizes: Sequence[int], dim_sizes: dict,
                       layout=None) -> Evaluation:
        """Evaluate one plan given its integer sizes (``dim_sizes``: dim name -> list)
        and ``layout`` (dim names laid out on ``model``; default every dim of
        size >= cols)."""
        return self.evaluate(rows, cols, np.asarray(perm)[None, :],
                             np.asarray(batch_sizes)[None, :],
                             self._sizes_array(cols, dim_sizes), layout)

    def plan_layout(self, plan) -> list:
        """Names of the split dims a :class:`~meshpar.planning.plan.Plan` lays out on
        ``model`` (the others are replicated); ValueError for a rule the table cannot
        price (:func:`~meshpar.planning.description.check_priced_layout`)."""
        check_priced_layout(self.model, plan.layout, {a for a, _ in plan.mesh_shape})
        return [d for d, axis in plan.layout if axis == "model" and d in self.dim_names]

    def evaluate_plan(self, plan) -> Evaluation:
        """Evaluate a :class:`meshpar.planning.plan.Plan` made for this model and cluster."""
        axes = dict(plan.mesh_shape)
        rows, cols = axes.get("batch", 1), axes.get("model", 1)
        # pnum order is row-major over the plan's own shape; the cost model's is batch
        # row by batch row: a plan listing the model axis first is read transposed
        names = [a for a, _ in plan.mesh_shape]
        order = list(range(len(plan.devices)))
        if "batch" in names and "model" in names and names.index("model") < names.index(
                "batch"):
            order = [c * rows + r for r in range(rows) for c in range(cols)]
        index = {d.device: i for i, d in enumerate(self.cluster.devices)}
        try:
            perm = [index[plan.devices[p]] for p in order]
        except KeyError as err:
            raise ValueError(f"plan device {err} is not in the cluster") from err
        if len(perm) != self.n:  # the planners leave slow devices idle: such a plan is common
            raise ValueError(
                f"the plan runs on {len(perm)} of this cluster's {self.n} devices: price it "
                "with the cost model of those devices, "
                "meshpar.planning.planners.common.subset_cost(cost, devices)")
        batch_sizes = plan.split_sizes.get(self.model.batch_dim, [self.batch])
        evaluation = self.evaluate_sizes(rows, cols, perm, batch_sizes, plan.split_sizes,
                                         self.plan_layout(plan))
        back = np.argsort(order)  # per-device columns in the plan's pnum order again
        return dataclasses.replace(evaluation, memory=evaluation.memory[:, back],
                                   device_seconds=evaluation.device_seconds[:, back])


def penalised(evaluation: Evaluation) -> np.ndarray:
    """Fitness for search: seconds when the plan fits; otherwise a value above any
    feasible plan's that grows with the memory overflow alone, so a search
    among plans that do not fit moves toward fitting, not toward speed."""
    excess = np.maximum(evaluation.overflow - 1.0, 0.0)
    return np.where(excess > 0, 1e100 * (1.0 + excess), evaluation.seconds)
