"""Lower bounds from the CP-SAT side: on any solution's simulated peak memory, in closed form
(`closed_form_bound`) or from the peak-memory model (`lower_bound`), and whether the makespan
model's bound is one on the simulator's makespan (`_exact_durations`). Why each is valid:
`model`'s docstring, "The model's objective against the simulator's".
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from baselines.cpsat.model import _durations
from baselines.cpsat.run import _deadline, _model_fits, _run_model
from regal.optimizers import Problem


def closed_form_bound(problem: Problem) -> int:
    """A lower bound on any solution's simulated peak memory (max over devices), in bytes:
    while op v runs, its device holds v's temporaries, outputs, non-alias inputs and
    persistent memory; at the end, persistent memory and unconsumed outputs (never freed)
    fill the devices, so the busiest holds at least a 1/d share of them."""
    graph, d = problem.graph, problem.devices.count
    size = np.asarray(graph.tensor_size, np.int64)
    own = np.where(np.asarray(graph.tensor_alias) < 0, size, 0)
    best = 0
    for v in range(graph.num_nodes):
        inputs = sum(int(own[t]) for t in set(int(t) for t in graph.inputs(v)))
        outputs = sum(int(own[t]) for t in graph.outputs(v))
        best = max(best, inputs + outputs + int(graph.temporary_memory[v])
                   + int(graph.persistent_memory[v]))
    consumed = np.diff(np.asarray(graph.consumer_ptr)) > 0
    final = int(np.asarray(graph.persistent_memory, np.int64).sum()) + int(own[~consumed].sum())
    return max(best, -(-final // d))


def _exact_durations(problem: Problem) -> bool:
    """Whether the makespan model's ticks are the simulator's durations exactly (every
    duration a positive multiple of the tick): then the model relaxes the list scheduler."""
    op_ticks, tr_ticks, tick = _durations(problem, False)
    op = np.asarray(problem.graph.compute_cost, np.float64)
    tr = problem.devices.transfer_time(problem.graph.tensor_size)
    return bool(np.all(op > 0) and np.all(tr > 0) and np.all(op_ticks * tick == op)
                and np.all(tr_ticks * tick == tr))


def lower_bound(problem: Problem, time_limit: float = 10.0, seed: int = 0,
                num_workers: int = 1) -> tuple[float, bool]:
    """(bytes, proven): a lower bound on the simulated peak memory of every solution of
    `problem`'s graph and devices (whatever its objective), from the peak-memory model.

    `bytes` is always a valid bound (CP-SAT's best bound on a relaxation whose objective is
    bounded below by `regal.bounds`, or `regal.bounds` and `closed_form_bound` alone when the
    model is too large to build within `time_limit`);
    `proven` is True when CP-SAT proved its model optimal, so no better bound can come
    from this model. `time_limit` is wall-clock seconds (deterministic time too).
    """
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    from regal.bounds import lower_bound as regal_bound

    peak = Problem(problem.graph, problem.devices, "peak_memory")
    simple = float(regal_bound(peak.graph, peak.devices,
                               extra={"cpsat_closed_form": closed_form_bound(peak)}).value)
    if not _model_fits(peak, time_limit):
        return simple, False
    run = _run_model(peak, "auto", None, None, time_limit, _deadline(time_limit, False),
                     seed, num_workers, lower=simple)
    bound = float(run.solver.best_objective_bound) * run.handles.memory_unit
    return max(simple, bound), run.status == cp_model.OPTIMAL

