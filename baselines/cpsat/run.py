"""The time a `solve` call gets, and one model run within it: pick and build the formulation,
hint it, solve it between a deterministic limit and a wall-clock deadline, and read the
model's schedule back as list-scheduler priorities.

Time limit
----------
`time_limit` is wall-clock seconds for the whole call: the heuristics get up to
`_HEURISTIC_SHARE` of it, or 80 % when the model is skipped (BRKGA's evaluations are cut
to fit, at the pace of a first evaluation); CP-SAT stops at the deadline, and gets at least
`_MIN_SOLVE` of the limit once its model is built (so a call overruns by at most that, plus
the build, the hint's completion and heuristics that cannot be interrupted; on a loaded
machine the 5 s runs of experiments/cpsat_check.py took up to 14 s, 20 s runs 20.4-20.8 s).
Deterministic time (the same number) also stops CP-SAT, but on a loaded machine the wall
clock comes first, so two runs may differ. `reproducible=True`
makes `time_limit` CP-SAT deterministic time only (a wall-clock guard at 3 x + 10 s) and
gives BRKGA its full share: a seed then always gives the same answer, whatever the load.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from baselines.cpsat.cumulative import build_model
from baselines.cpsat.hint import _add_hint, _default_hint
from baselines.cpsat.model import CpModelHandles, _durations, _model_limits
from baselines.cpsat.sequence import build_sequence_model
from regal.decode import order_priority
from regal.optimizers import Problem, Solution

_SEQUENCE_MAX = 20_000  # (activities x items) above which peak mode uses the cumulative model
_UNITS_PER_SECOND = 400    # model size (`_model_units`) that may be built per second of limit
_MAX_UNITS = 60_000         # never build a larger model (its presolve alone outlasts a minute)
_MIN_SOLVE = 0.1            # share of the time limit CP-SAT gets even when the rest is spent
_HEURISTIC_SHARE = 0.4      # of the time limit, for the heuristics (wall-clock mode)


def _model_units(problem: Problem) -> int:
    """(tensors + consumer edges) x devices: what the model's size and build time grow with
    (0.2 ms of Python per unit to build on an idle core, 1.3 ms on a loaded one; ~10
    constraints per unit)."""
    graph = problem.graph
    return (graph.num_tensors + int(graph.consumer_ptr[-1])) * problem.devices.count


def _largest_model(time_limit: float) -> int:
    """The largest model (`_model_units`) built under `time_limit` seconds."""
    return min(_MAX_UNITS, int(_UNITS_PER_SECOND * time_limit))


def _model_fits(problem: Problem, time_limit: float) -> bool:
    return _model_units(problem) <= _largest_model(time_limit)


class _Rescorer(cp_model.CpSolverSolutionCallback):
    """Re-scores every incumbent CP-SAT reports with the simulator (at most `left` of them)
    and keeps the best by the simulator's value: a later incumbent, better in the model, may
    re-score worse than an earlier one. Stops the search once a re-score meets a proven
    lower bound on the simulator's objective (`lower` bytes, or the peak model's own bound):
    that answer is optimal, whatever the model still has to prove."""

    def __init__(self, handles: CpModelHandles, graph, d: int, score, left: int,
                 lower: float | None) -> None:
        super().__init__()
        self.handles, self.graph, self.d, self.score = handles, graph, d, score
        self.left = int(left)
        self.lower = lower
        self.scored = 0
        self.best = None          # the simulator's fields of the best re-scored incumbent
        self.last = None          # those of the latest incumbent, None when not scored
        self.met_bound = False

    def on_solution_callback(self) -> None:
        if self.left <= 0:
            self.last = None
            return
        fields = self.score(*_priorities(self, self.handles, self.graph, self.d))
        self.left -= 1
        self.scored += 1
        self.last = fields
        if self.best is None or fields["value"] < self.best["value"]:
            self.best = fields
        if self.handles.objective == "peak_memory":
            bound = float(self.best_objective_bound) * self.handles.memory_unit
            if self.lower is not None:
                bound = max(bound, float(self.lower))
            if self.best["value"] <= bound:
                self.met_bound = True
                self.stop_search()


def _solve_model(handles: CpModelHandles, deterministic: float, wall: float, seed: int,
                 num_workers: int, callback: _Rescorer | None = None):
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_deterministic_time = float(deterministic)
    p.max_time_in_seconds = float(wall)
    if handles.formulation == "cumulative":
        # probing the larger models costs seconds of presolve before the hint is even
        # reported (vgg16, 4 devices: no solution in 7 s with it, the hint in 1.7 s without)
        p.cp_model_probing_level = 0
    p.num_workers = int(num_workers)
    p.random_seed = int(seed) % (2**31)
    p.log_search_progress = False
    status = solver.solve(handles.model, callback)
    return solver, status


def _priorities(solver, handles: CpModelHandles, graph, d: int):
    """The model's schedule as list-scheduler inputs: earlier start = higher priority; a
    producer's transfer priority follows its earliest transfer (else its own start)."""
    n = graph.num_nodes
    start = np.array([solver.value(s) for s in handles.start], np.int64)
    placement = np.zeros(n, np.int32)
    if d > 1:
        for v in range(n):
            placement[v] = next(k for k in range(d) if solver.boolean_value(handles.x[v][k]))
    order = np.lexsort((np.arange(n), start))          # earlier start first, ties by id
    priority = order_priority(order)
    first_transfer = np.full(n, np.iinfo(np.int64).max)
    for (t, k), ts in handles.transfer_start.items():
        if solver.boolean_value(handles.transfer_present[t, k]):
            p = int(graph.tensor_producer[t])
            first_transfer[p] = min(first_transfer[p], solver.value(ts))
    tr_key = np.where(first_transfer < np.iinfo(np.int64).max, first_transfer, start)
    tr_order = np.lexsort((np.arange(n), tr_key))
    transfer = order_priority(tr_order)
    return placement, priority, transfer


def _build(problem: Problem, formulation: str) -> CpModelHandles:
    if formulation == "timed":
        return build_model(problem, timed=True)
    if problem.objective != "peak_memory" or formulation == "cumulative" \
            or _model_limits(problem) is not None:  # only this one keeps per-device limits
        return build_model(problem)
    graph, d = problem.graph, problem.devices.count
    activities = graph.num_nodes + d * graph.num_tensors
    if formulation == "sequence" or activities * 2 * d * graph.num_tensors <= _SEQUENCE_MAX:
        return build_sequence_model(problem)
    return build_model(problem)


@dataclass
class _ModelRun:
    handles: CpModelHandles
    solver: cp_model.CpSolver
    status: int
    hint_objective: float | None  # the hint's objective in the model (model units)
    stopped_by: str               # "proof", "bound_met", "deterministic_time" or "wall_clock"
    rescorer: _Rescorer | None = None  # the incumbents re-scored by the simulator


def _run_model(problem: Problem, formulation: str, hint: Solution | None, hint_trace,
               time_limit: float, deadline: float, seed: int, num_workers: int,
               reproducible: bool = False, lower: float | None = None, score=None,
               evaluations: int = 0) -> _ModelRun:
    """Builds, hints and solves the model; CP-SAT stops at `time_limit` deterministic
    seconds or at the wall-clock `deadline`, whichever comes first (but gets at least
    `_MIN_SOLVE` of the limit).

    `lower`: a proven lower bound (bytes) on the simulated peak of every solution; the
    peak model's objective is bounded below by it (valid: the model's optimum may be below
    the simulator's, never the other way, and every simulated peak is a whole number of
    memory units). `score` (placement, priority, transfer priority -> the simulator's
    fields): re-scores up to `evaluations` incumbents during the search (`_Rescorer`),
    which stops once one meets the best proven bound."""
    handles = _build(problem, formulation)
    if lower is not None and handles.objective == "peak_memory" and lower > 0:
        handles.model.add(handles.target >= -(-int(math.ceil(lower)) // handles.memory_unit))
    sequential = problem.objective == "peak_memory" and handles.formulation != "timed"
    floor = _MIN_SOLVE * time_limit
    used = 0.0
    hint_objective = None
    if hint is not None:
        share = 0.2 * time_limit
        wall = max(deadline - time.perf_counter(), floor)
        hint_objective, used = _add_hint(handles, problem, hint, hint_trace, share,
                                         wall if reproducible else min(share, wall), seed)
    else:
        op_ticks, _, _ = _durations(problem, sequential)
        _default_hint(handles, problem.graph, sequential, op_ticks)
    wall = max(deadline - time.perf_counter(), floor)
    deterministic = max(time_limit - used, floor)
    rescorer = None
    if score is not None and evaluations > 0:
        rescorer = _Rescorer(handles, problem.graph, problem.devices.count, score,
                             evaluations, lower if problem.objective == "peak_memory" and
                             handles.objective == "peak_memory" else None)
    solver, status = _solve_model(handles, deterministic, wall, seed, num_workers, rescorer)
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        stopped_by = "proof"
    elif rescorer is not None and rescorer.met_bound:
        stopped_by = "bound_met"
    elif solver.wall_time >= 0.97 * wall:
        stopped_by = "wall_clock"
    else:
        stopped_by = "deterministic_time"
    return _ModelRun(handles, solver, status, hint_objective, stopped_by, rescorer)


def _deadline(time_limit: float, reproducible: bool) -> float:
    """The wall-clock instant CP-SAT must stop by (a loose guard when `reproducible`)."""
    wall = 3.0 * time_limit + 10.0 if reproducible else time_limit
    return time.perf_counter() + wall

