"""The cost model's step time as a mixed-integer program (``scipy.optimize.milp``, HiGHS).

One program per mesh shape ``batch:R;model:M`` and device placement (device
types on the grid). Its variables are the integer batch sizes ``b_r`` and the
integer split sizes ``c_dm`` of every laid-out dimension; the objective is
:class:`CostModel`'s step time, exactly, for devices of constant speed:

* per-sample compute of device ``(r, m)`` in a segment (layers between two
  collectives) is linear in ``c``: ``sum_l 3 f_l frac_lm / speed``; the row's
  segment time is an epigraph variable over its columns;
* per-sample collectives: an all-concat is linear in the smallest share
  ``mu_l <= c_dm/S_d``, an all-reduce is a constant (the layout is fixed:
  every dimension of size >= M on ``model``, see docs/planner.md);
* a row's time is ``b_r * g_r`` (everything in a row scales with its batch):
  linear where one of the two is fixed. A program has either the batch
  sizes as variables (one column: ``g_r`` is a constant) or fixed (the caller,
  :mod:`meshpar.planning.planners.exact`, enumerates the batch splits that a
  lower bound cannot rule out);
* memory ``b_r * E_m(c) + state_m(c) <= capacity`` the same way;
* the data-parallel all-reduce is linear in the largest column's bytes
  (parameter gradients, batch-norm statistics, the mean loss).

Every epigraph variable is only bounded from below and minimised, so the
optimum of the program is the cost model's value of its integer plan.
:func:`row_optimum` bounds a row from below: without memory a row's program
falls apart into small independent ones (a residual block's two
convolutions, one attention projection), each solved alone. Non-constant
speed profiles are not covered (see docs/planner.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint
from scipy.optimize import milp as _scipy_milp
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from meshpar.planning.cost_model import LOSS_ELEMS, CostModel, ring_allreduce_seconds


#: HiGHS's debugging traces, printed with C's printf whatever ``disp`` says: they tell
#: a user nothing, and made meshpar plan's one-line refusal two lines
_SOLVER_TRACE = re.compile(rb"HighsMipSolverData::")


@contextlib.contextmanager
def _solver_output_to_stderr():
    """Send what the solver prints on the process's standard output to its standard
    error once the block ends, less HiGHS's debugging traces. HiGHS (scipy 1.17)
    prints lines such as ``HighsMipSolverData::transformNewIntegerFeasibleSolution
    tmpSolver.run();`` with C's ``printf`` whatever ``disp`` says, which put them in
    front of ``meshpar plan --json``'s one JSON object (vgg-cifar, speeds
    1,0.5,0.3,0.2,0.1, batch 7), and on standard error in front of a refusal's one
    line (vgg-cifar-small, speeds 1,0.5,0.3,0.2, batch 10**6, --method exact)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (AttributeError, OSError, ValueError):  # no file descriptor 1: nothing to guard
        saved = None
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile() as caught:
        try:
            os.dup2(caught.fileno(), 1)
            yield
        finally:
            _flush_c_stdout()  # C's buffered lines into the file, not to stdout later
            os.dup2(saved, 1)
            os.close(saved)
            caught.seek(0)
            kept = b"".join(line for line in caught if not _SOLVER_TRACE.match(line))
            while kept:
                kept = kept[os.write(2, kept):]


def _flush_c_stdout() -> None:
    """``fflush(NULL)``: C's stdio buffers written out now."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (not POSIX)
        pass


def milp(*args, **kwargs):
    """``scipy.optimize.milp`` with HiGHS's own prints kept off standard output."""
    with _solver_output_to_stderr():
        return _scipy_milp(*args, **kwargs)


def not_linear(cost: CostModel) -> list:
    """What makes ``cost``'s step time nonlinear in the split sizes, so the
    program cannot price it (empty when the MILP covers it exactly)."""
    table = cost._log_speed
    return (["the work size"] * (not np.allclose(table, table[:, :1], rtol=0.0, atol=1e-12))
            + ["the slice share"] * cost.slices_priced
            + ["the wait for the slowest device"] * any(cost.sync_jitter.values()))


def constant_speeds(cost: CostModel) -> Optional[np.ndarray]:
    """FLOP/s of each device type when every profile is flat, slices run at the
    whole layer's speed and no synchronisation jitter is priced, else None
    (:func:`not_linear` says which)."""
    if not_linear(cost):
        return None
    return np.exp(cost._log_speed[:, 0])


class _Program:
    """Variables (bounds, integrality) and sparse constraint rows."""

    def __init__(self):
        self.lb, self.ub, self.integer = [], [], []
        self.rows, self.lo, self.hi = [], [], []

    def var(self, lb: float, ub: float, integer: bool = False) -> int:
        self.lb.append(float(lb))
        self.ub.append(float(ub))
        self.integer.append(1 if integer else 0)
        return len(self.lb) - 1

    def add(self, coefs: dict, lo: float = -np.inf, hi: float = np.inf) -> None:
        """``lo <= sum coefs[i] * x_i <= hi``."""
        self.rows.append(coefs)
        self.lo.append(lo)
        self.hi.append(hi)

    def matrix(self) -> csr_matrix:
        data, cols, ptr = [], [], [0]
        for row in self.rows:
            cols.extend(row)
            data.extend(row.values())
            ptr.append(len(cols))
        return csr_matrix((data, cols, ptr), shape=(len(self.rows), len(self.lb)))


def _plus(*terms: dict) -> dict:
    out: dict = {}
    for term in terms:
        for k, v in term.items():
            out[k] = out.get(k, 0.0) + v
    return out


@dataclass
class Formulation:
    """One (shape, placement) program: ``min objective @ x + offset``."""

    rows: int
    cols: int
    perm: np.ndarray
    program: _Program
    objective: np.ndarray
    unit: float             # seconds per objective unit (coefficients near 1 for HiGHS)
    offset: float
    batch_vars: Optional[list]   # variable per row, or None: batch sizes fixed
    batch_fixed: Optional[list]
    dim_vars: dict          # dim index -> [var per column]
    tau: int                # the slowest row's time (units)
    row_terms: list         # per row: its time (units) as (constant, {var: coef})

    def solve(self, cutoff: Optional[float], time_limit: Optional[float], gap: float,
              relax: bool = False):
        """HiGHS result; ``cutoff`` (seconds) adds ``step time <= cutoff`` (prunes
        programs that cannot beat it)."""
        prog = self.program
        A = prog.matrix()
        lo, hi = np.array(prog.lo, float), np.array(prog.hi, float)
        if cutoff is not None:
            A = _vstack(A, self.objective)
            lo = np.append(lo, -np.inf)
            hi = np.append(hi, (cutoff - self.offset) / self.unit)
        options = {"mip_rel_gap": gap, "presolve": True}
        if time_limit is not None:
            options["time_limit"] = max(float(time_limit), 1e-3)
        integrality = np.zeros(len(prog.lb)) if relax else np.array(prog.integer)
        return milp(self.objective, integrality=integrality,
                    bounds=Bounds(np.array(prog.lb), np.array(prog.ub)),
                    constraints=[LinearConstraint(A, lo, hi)] if A.shape[0] else None,
                    options=options)

    def least_row_time(self, step: float, time_limit: Optional[float], gap: float):
        """HiGHS result of the tie-break: among this program's plans of step time
        at most ``step`` seconds, the least total of the rows' times (one
        column: the least total device time, so no fast device idles while a
        slower one sets the step)."""
        total = np.zeros(len(self.program.lb))
        for _, lin in self.row_terms:
            for i, c in lin.items():
                total[i] += c
        prog = _Program()
        prog.lb, prog.ub, prog.integer = self.program.lb, self.program.ub, self.program.integer
        prog.rows = self.program.rows + [{i: float(c) for i, c in enumerate(self.objective) if c}]
        prog.lo = self.program.lo + [-np.inf]
        prog.hi = self.program.hi + [(step - self.offset) / self.unit * (1 + 1e-9)]
        return dataclasses.replace(self, program=prog, objective=total).solve(None, time_limit,
                                                                              gap)

    def seconds(self, value: float) -> float:
        """Step time of an objective value (or bound) of this program."""
        return float(value) * self.unit + self.offset

    def decode(self, x: np.ndarray, cost: CostModel):
        """Integer batch sizes [R] and split sizes {dim name: [M]} of a solution."""
        batch = (list(self.batch_fixed) if self.batch_vars is None
                 else [int(round(x[i])) for i in self.batch_vars])
        dims = {cost.dim_names[d]: [int(round(x[i])) for i in vs]
                for d, vs in self.dim_vars.items()}
        return batch, dims


def _vstack(A: csr_matrix, row: np.ndarray) -> csr_matrix:
    from scipy.sparse import vstack

    return vstack([A, csr_matrix(row[None, :])]).tocsr()


def formulate(cost: CostModel, speeds: np.ndarray, rows: int, cols: int, perm: np.ndarray,
              batch_sizes: Optional[Sequence[int]] = None, memory: bool = True) -> Formulation:
    """The program of shape ``rows x cols`` with devices ``perm`` (pnum order).

    ``batch_sizes`` fixes the rows' batch sizes (required when ``rows > 1`` and
    ``cols > 1``: the row time is then linear); without ``memory`` the
    capacity constraints are left out (a relaxation, for lower bounds)."""
    R, M, B = int(rows), int(cols), cost.batch
    if batch_sizes is None and R == 1:
        batch_sizes = [B]
    if batch_sizes is None and M > 1:
        raise ValueError("a program with variable batch sizes needs one column")
    prog = _Program()
    speed = speeds[cost.device_type[np.asarray(perm)]].reshape(R, M)
    active = cost.active_dims(M)
    split = (cost.layer_dim >= 0) & active[np.maximum(cost.layer_dim, 0)] \
        if cost.dim_sizes.size else np.zeros(cost.flops.size, bool)
    col_sym = identical_neighbours(speed.T, cost.memory_capacity[perm].reshape(R, M).T)
    row_sym = identical_neighbours(speed, cost.memory_capacity[perm].reshape(R, M))
    # c_dm: integer split sizes of each laid-out dimension.
    dim_vars = {}
    for d in np.nonzero(active)[0]:
        size = int(cost.dim_sizes[d])
        dim_vars[d] = [prog.var(1, size - M + 1, True) for _ in range(M)]
        prog.add({v: 1.0 for v in dim_vars[d]}, size, size)
    if dim_vars:  # identical columns are interchangeable: order them by one dim
        first = dim_vars[min(dim_vars)]
        for m in col_sym:
            prog.add({first[m]: 1.0, first[m + 1]: -1.0}, lo=0.0)

    def frac(l: int, m: int) -> tuple:
        """(constant, {var: coef}) of layer l's share on column m."""
        if not split[l]:
            return 1.0, {}
        d = int(cost.layer_dim[l])
        return 0.0, {dim_vars[d][m]: 1.0 / float(cost.dim_sizes[d])}

    unit = cost.lower_bound()
    row_ps, lat = _row_per_sample(cost, prog, speed, split, frac, M, unit, dim_vars)
    # Parameters of each column (bytes), for the gradient all-reduce and memory.
    params = _column_bytes(cost, M, frac, cost.params)
    # What each column all-reduces over the batch axis: gradients, batch-norm
    # statistics, the mean loss (CostModel.column_batch_bytes).
    synced = _column_bytes(cost, M, frac, cost.params + cost.batch_allreduce,
                           LOSS_ELEMS * cost.bytes)
    objective_terms: dict = {}
    offset = lat
    overhead = cost.split_overhead
    batch_vars = None if batch_sizes is not None else _batch_variables(prog, R, B, row_sym)
    tau = prog.var(0.0, np.inf)
    objective_terms[tau] = 1.0
    row_terms = []
    # The calibrated work of splitting, each row at its own speed (CostModel).
    row_overhead = cost.overhead_seconds(R, M, speed) / unit
    for r in range(R):
        p_const, p_lin = _times_batch(batch_sizes, batch_vars, r, *row_ps[r])
        prog.add(_plus({tau: 1.0}, {i: -c for i, c in p_lin.items()}),
                 lo=p_const + row_overhead[r])
        row_terms.append((p_const, p_lin))
    if R > 1:
        if overhead is None:
            pi = prog.var(0.0, np.inf)  # the all-reduce's bandwidth term, in units
            k = 2.0 * (R - 1) / R / cost.cluster.bandwidth / unit
            for const, lin in synced:
                prog.add(_plus({pi: 1.0}, {i: -k * c for i, c in lin.items()}), lo=k * const)
            objective_terms[pi] = 1.0
            offset += (R - 1) * cost.cluster.latency
    if memory:
        _memory_constraints(cost, prog, R, M, perm, (batch_sizes, batch_vars), split, frac,
                            params)
    objective = np.zeros(len(prog.lb))
    for i, c in objective_terms.items():
        objective[i] = c
    return Formulation(R, M, np.asarray(perm), prog, objective, unit, offset, batch_vars,
                       None if batch_sizes is None else [int(b) for b in batch_sizes],
                       dim_vars, tau, row_terms)


def _column_bytes(cost, M, frac, per_layer, extra: float = 0.0) -> list:
    """Per column, ``sum_l per_layer[l] * share * bytes + extra`` as (const, {var: coef})."""
    out = []
    for m in range(M):
        const, lin = extra, {}
        for l in range(cost.flops.size):
            k, v = frac(l, m)
            const += per_layer[l] * cost.bytes * k
            lin = _plus(lin, {i: per_layer[l] * cost.bytes * c for i, c in v.items()})
        out.append((const, lin))
    return out


def identical_neighbours(speed: np.ndarray, memory: np.ndarray) -> list:
    """Indices i of lines (rows of the arrays) equal to line i + 1."""
    return [i for i in range(speed.shape[0] - 1)
            if np.array_equal(speed[i], speed[i + 1]) and np.array_equal(memory[i], memory[i + 1])]


def _row_per_sample(cost, prog, speed, split, frac, M, unit, dim_vars):
    """Per row: per-sample time ``g_r`` in ``unit`` seconds as (const, {var: coef}),
    and the latency terms of the row's collectives in seconds (the
    same for every row)."""
    R = speed.shape[0]
    L = cost.flops.size
    sync = split & np.array([c is not None for c in cost.comm])
    ends = list(np.nonzero(sync)[0])
    starts = sorted({0, *[e + 1 for e in ends if e + 1 < L]})
    bounds = list(zip(starts, starts[1:] + [L]))
    bw, lat = cost.cluster.bandwidth * unit, cost.cluster.latency
    speed = speed * unit  # FLOPs per unit of time
    comm_const, comm_lin, lat_total = 0.0, {}, 0.0
    if cost.split_overhead is None:  # else: the calibrated work, per row (formulate)
        for l in cost.comm_layers:
            if not split[l]:
                continue
            # Gathered bytes per sample: (1 - mu) S / bw with mu <= every column's share.
            gathered = (cost.out_elems[l] * (cost.comm_kind[l] == 1)
                        + cost.backward_allconcat[l]) * cost.bytes
            reduced = (cost.out_elems[l] * (cost.comm_kind[l] == 2)
                       + cost.backward_allreduce[l]) * cost.bytes
            if gathered:
                mu = prog.var(0.0, 1.0)
                for m in range(M):
                    k, v = frac(l, m)
                    prog.add(_plus({mu: -1.0}, v), lo=-k)
                comm_const += gathered / bw
                comm_lin[mu] = comm_lin.get(mu, 0.0) - gathered / bw
            comm_const += ring_allreduce_seconds(reduced, M, bw, 0.0)  # latency: lat_total
            count = int(cost.comm_kind[l] > 0) + int(cost.backward_allreduce[l] > 0) \
                + int(cost.backward_allconcat[l] > 0)
            lat_total += count * (M - 1) * lat
    out = []
    for r in range(R):
        lin, const = dict(comm_lin), comm_const
        for lo_l, hi_l in bounds:
            if M == 1:
                const += sum(3.0 * cost.flops[l] / speed[r, 0] for l in range(lo_l, hi_l))
                continue
            u = prog.var(0.0, np.inf)
            lin[u] = 1.0
            columns = []
            for m in range(M):
                k_tot, v_tot = 0.0, {}
                for l in range(lo_l, hi_l):
                    k, v = frac(l, m)
                    scale = 3.0 * cost.flops[l] / speed[r, m]
                    k_tot += scale * k
                    v_tot = _plus(v_tot, {i: scale * c for i, c in v.items()})
                prog.add(_plus({u: 1.0}, {i: -c for i, c in v_tot.items()}), lo=k_tot)
                columns.append((k_tot, v_tot))
            prog.lb[u] = _segment_floor(columns, dim_vars, cost.dim_sizes)
        out.append((const, lin))
    return out, lat_total


def _segment_floor(columns: list, dim_vars: dict, dim_sizes: np.ndarray) -> float:
    """Least integer value of ``max_m (k_m + a_m c_dm)`` for a segment whose split
    layers all split one dim ``d`` (0 otherwise): a bound the LP relaxation's
    fractional split would undercut. Greedy (each unit to the column that then
    finishes first) is optimal for a minimum of a maximum of increasing terms."""
    owner = {v: d for d, vs in dim_vars.items() for v in vs}
    dims = {owner.get(v) for _, lin in columns for v in lin}
    if len(dims) != 1 or None in dims or any(len(lin) != 1 for _, lin in columns):
        return 0.0
    d = dims.pop()
    k = np.array([col[0] for col in columns])
    a = np.array([col[1][dim_vars[d][m]] for m, col in enumerate(columns)])
    c = np.ones(len(columns))
    for _ in range(int(dim_sizes[d]) - len(columns)):
        m = int(np.argmin(k + a * (c + 1)))
        c[m] += 1
    return float(np.max(k + a * c)) * (1 - 1e-9)  # a hair below: never cut the optimum


def _batch_variables(prog, R, B, row_sym) -> list:
    """Integer ``b_r`` per row, summing to B, ordered over identical rows."""
    top = B - R + 1
    batch_vars = [prog.var(1, top, True) for _ in range(R)]
    prog.add({b: 1.0 for b in batch_vars}, B, B)
    for r in row_sym:  # identical rows are interchangeable
        prog.add({batch_vars[r]: 1.0, batch_vars[r + 1]: -1.0}, lo=0.0)
    return batch_vars


def _times_batch(batch_sizes, batch_vars, r, const: float, lin: dict):
    """``b_r * (const + lin @ x)`` as (constant, {var: coef}): linear since either
    the batch size is fixed or (one column) the bracket is a constant."""
    if batch_sizes is not None:
        b = float(batch_sizes[r])
        return b * const, {i: b * c for i, c in lin.items()}
    if lin:
        raise ValueError("a variable batch size times a variable row time")
    return 0.0, {batch_vars[r]: const}


def _memory_constraints(cost, prog, R, M, perm, batch, split, frac, params):
    """``base + a * b_r * (input + kept outputs)(c) * bytes + s * params(c) <=
    capacity`` per device (``a``, ``s``: the copies of :class:`MemoryTerms`, as
    in :meth:`CostModel.evaluate`), scaled by the capacity; skipped where even
    the largest share fits."""
    B = cost.batch
    terms = cost.memory_terms
    scale = cost.memory_capacity[np.asarray(perm)].reshape(R, M)
    cap = scale - terms.base_bytes  # what the plan's tensors may take
    slots = terms.state_copies(cost.optimizer_slots, R > 1)
    copies = terms.activation_copies
    top_batch = B - R + 1
    for m in range(M):
        const, lin, upper = cost.model.input_elems * cost.bytes, {}, 0.0
        for l in range(cost.flops.size):
            size = cost.out_elems[l] * cost.bytes
            if split[l] and cost.comm[l] == "allconcat":
                k, v = frac(l, m)
                const += size * (1.0 + k)
                lin = _plus(lin, {i: size * c for i, c in v.items()})
            elif split[l] and cost.comm[l] is None:
                k, v = frac(l, m)
                const += size * k
                lin = _plus(lin, {i: size * c for i, c in v.items()})
            else:
                const += size
        const, lin = copies * const, {i: copies * c for i, c in lin.items()}
        upper = const + sum(c * prog.ub[i] for i, c in lin.items())
        p_const, p_lin = params[m]
        p_upper = p_const + sum(c * prog.ub[i] for i, c in p_lin.items())
        for r in range(R):
            b_top = top_batch if batch[0] is None else batch[0][r]
            if b_top * upper + slots * p_upper <= cap[r, m]:
                continue
            a_const, a_lin = _times_batch(*batch, r, const, lin)
            row = _plus(a_lin, {i: slots * c for i, c in p_lin.items()})
            prog.add({i: c / scale[r, m] for i, c in row.items()},
                     hi=(cap[r, m] - a_const - slots * p_const) / scale[r, m])


@dataclass(frozen=True)
class RowOptimum:
    """One row's least per-sample time over all splits, memory left out.

    lower : seconds no split beats (HiGHS's proven bounds, summed)
    seconds : seconds of ``dims``, the split found (``>= lower``)
    dims : {dim index: sizes per column}
    latency : the row's collective latencies (seconds, per step)
    """

    lower: float
    seconds: float
    dims: dict
    latency: float


def row_optimum(cost: CostModel, speeds: np.ndarray, line: Sequence[int],
                gap: float = 1e-7) -> RowOptimum:
    """:class:`RowOptimum` of the row of devices ``line`` (one sample).

    Without memory, a row's time is a sum of terms (segments, collectives)
    that each involve a few dimensions (a residual block's two convolutions,
    one attention projection), so the program falls apart into independent
    small ones: each is solved alone, fast and to a tight gap, where the
    whole program's branch and bound would crawl. A row with ``b`` samples
    takes at least ``b * lower``, whatever the other rows need."""
    form = formulate(cost, speeds, 1, len(line), np.asarray(line), batch_sizes=[1],
                     memory=False)
    prog = form.program
    const, lin = form.row_terms[0]
    A = prog.matrix()
    keep = np.asarray(A[:, form.tau].todense()).ravel() == 0  # the row-time epigraph
    A = A[np.nonzero(keep)[0]]
    lo, hi = np.array(prog.lo)[keep], np.array(prog.hi)[keep]
    c = np.zeros(len(prog.lb))
    for i, v in lin.items():
        c[i] = v
    pattern = (A != 0).astype(np.int8)
    _, label = connected_components(csr_matrix(pattern.T @ pattern), directed=False)
    x = np.zeros(len(prog.lb))
    lower = value = const
    lb, ub, integer = np.array(prog.lb), np.array(prog.ub), np.array(prog.integer)
    for k in np.unique(label[np.arange(len(prog.lb)) != form.tau]):
        cols = np.nonzero(label == k)[0]
        rows = np.nonzero(pattern[:, cols].getnnz(axis=1))[0]
        if not rows.size:  # a free variable (none in practice): its least cost
            x[cols] = np.where(c[cols] >= 0, lb[cols], ub[cols])
            continue
        res = milp(c[cols], integrality=integer[cols], bounds=Bounds(lb[cols], ub[cols]),
                   constraints=[LinearConstraint(A[rows][:, cols], lo[rows], hi[rows])],
                   options={"mip_rel_gap": gap})
        if res.x is None:
            raise ValueError(f"row optimum: HiGHS ended with status {res.status}: "
                             f"{res.message}")
        x[cols] = res.x
        value += res.fun
        lower += res.fun if res.mip_dual_bound is None else min(res.mip_dual_bound, res.fun)
    dims = {d: [int(round(x[i])) for i in vs] for d, vs in form.dim_vars.items()}
    return RowOptimum(lower * form.unit, value * form.unit, dims, form.offset)


def row_overheads(cost: CostModel, speeds: np.ndarray, rows: int, cols: int,
                  perm: np.ndarray) -> np.ndarray:
    """Seconds [R] of each row's calibrated work of splitting
    (:meth:`CostModel.overhead_seconds`; zeros without a calibration)."""
    speed = speeds[cost.device_type[np.asarray(perm)]].reshape(rows, cols)
    return cost.overhead_seconds(rows, cols, speed)


def allreduce_bound(cost: CostModel, rows: int, cols: int) -> float:
    """Least data-parallel gradient all-reduce time over all splits of ``rows x cols``
    (the largest column holds at least the mean of the columns' parameters)."""
    if rows == 1 or cost.split_overhead is not None:  # calibrated: see row_overheads
        return 0.0
    active = cost.active_dims(cols)
    split = (cost.layer_dim >= 0) & active[np.maximum(cost.layer_dim, 0)] \
        if cost.dim_sizes.size else np.zeros(cost.flops.size, bool)
    held = cost.params + cost.batch_allreduce
    mean = (held[split].sum() / cols + held[~split].sum() + LOSS_ELEMS) * cost.bytes
    return (2.0 * (rows - 1) / rows * mean / cost.cluster.bandwidth
            + (rows - 1) * cost.cluster.latency)
