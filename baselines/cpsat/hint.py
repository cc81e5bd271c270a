"""The hint: the best cheap heuristic by the simulator's score (`best_heuristic`), and its
simulated schedule entered into the model as a complete assignment (`_add_hint`), or a
partial default hint when no heuristic could be scored (`_default_hint`).

Why: CP-SAT's answer is never worse than the hint's (the better of the two by the simulator
is returned), and a complete, feasible hint gives CP-SAT a first incumbent at once.
"""

from __future__ import annotations

import math
import time

import numpy as np
from ortools.sat.python import cp_model

from baselines.cpsat.model import CpModelHandles, _colocation, _durations, _symmetric
from regal.optimizers import Problem, Solution, score

_HINT_BRKGA_MAX = 1000   # evaluations a hint's BRKGA may spend at most
_METF_MAX_OPS = 1000     # m-ETF's time grows about quadratically (~8 s at 2,900 ops)
_HINT_PIPELINE_MAX = 2000  # evaluations the hint's seeded-brkga run may spend at most
_HINT_PIPELINE_MIN = 200   # below this the pipeline's reference heuristics take it all
_HINT_PIPELINE_MAX_OPS = 1000  # larger graphs: the model is seldom built, the time is BRKGA's


def best_heuristic(problem: Problem, budget: int, seed: int, seconds: float | None = None
                   ) -> tuple[Solution | None, int, dict]:
    """The best (simulator's value) of single device, gp-dfs, m-topo, m-etf (up to
    `_METF_MAX_OPS` ops), a short BRKGA warm-started with them and a short seeded-brkga run
    (REGAL's pipeline without the policy; up to `_HINT_PIPELINE_MAX` evaluations, graphs up
    to `_HINT_PIPELINE_MAX_OPS` ops), spending at most `budget` evaluations; with `seconds`,
    BRKGA gets only the evaluations that fit in that time at the pace of the first one (a
    time-dependent count, so not with `reproducible`) and seeded-brkga what time is left.

    Returns (best or None when the budget allowed none, evaluations used, name -> value).
    Other methods run through the registry (baselines never import each other).
    """
    from regal.optimizers import single_device
    from regal.optimizers import solve as run_method

    found: list[Solution] = []
    used = 0
    values: dict = {}

    def keep(name: str, solution: Solution, cost: int) -> None:
        nonlocal used
        used += cost
        values[name] = float(solution.value)
        found.append(solution)

    began = time.perf_counter()
    pace = math.inf  # seconds per evaluation: the quickest one-evaluation heuristic's time
    if budget >= 1:
        keep("single-device", single_device(problem), 1)
        pace = time.perf_counter() - began
    runs = ["m-topo", "gp-dfs"] + (["m-etf"] if problem.graph.num_nodes <= _METF_MAX_OPS
                                   else [])
    for name in runs:
        if used + 1 > budget:
            break
        clock = time.perf_counter()
        solution = run_method(name, problem, 1, seed)
        pace = min(pace, time.perf_counter() - clock) if name == "m-topo" else pace
        keep(name, solution, max(1, int(solution.evaluations)))
    share = min(budget - used, _HINT_BRKGA_MAX)
    if seconds is not None:
        left = seconds - (time.perf_counter() - began)
        share = min(share, int(max(left, 0.0) / max(pace, 1e-6))) if pace < math.inf else 0
    if share >= 10:
        solution = run_method("brkga", problem, share, seed, population_size=min(100, share),
                              initial=list(found))
        keep("brkga", solution, int(solution.evaluations))
    # REGAL's pipeline without the policy (BRKGA seeded with the reference heuristics, then
    # the raced climbs): on small graphs it often finds what the plain BRKGA misses
    share = min(budget - used, _HINT_PIPELINE_MAX)
    timed = {}
    if seconds is not None:
        left = seconds - (time.perf_counter() - began)
        share = share if left > 0 else 0
        timed = {"time_limit": max(left, 1e-3)}
    if share >= _HINT_PIPELINE_MIN and problem.graph.num_nodes <= _HINT_PIPELINE_MAX_OPS:
        solution = run_method("seeded-brkga", problem, share, seed, **timed)
        keep("seeded-brkga", solution, int(solution.evaluations))
    leader, pinned = _colocation(problem.graph)
    found = [s for s in found if _respects(s.placement, leader, pinned)]
    if not found:
        return None, used, values
    best = min(found, key=lambda s: s.value)  # ties: the earlier, cheaper method
    return best, used, values


def rescored(problem: Problem, initial) -> list[tuple[Solution, dict]]:
    """(solution, the simulator's fields on `problem`) for each of `initial` (a Solution or
    several): the starts a caller gives `cpsat` or `cpsat-lns`."""
    found = [initial] if isinstance(initial, Solution) else list(initial)
    if not found:
        raise ValueError("initial: no solution given")
    return [(solution, score(problem, solution.placement, solution.priority,
                             solution.transfer_priority)) for solution in found]


def _respects(placement: np.ndarray, leader: np.ndarray, pinned: np.ndarray) -> bool:
    """Whether a placement keeps every colocation group together and every pin."""
    placement = np.asarray(placement)
    return bool(np.all(placement == placement[leader])
                and np.all((pinned < 0) | (placement == pinned)))


def _canonical_labels(placement: np.ndarray, graph, d: int) -> np.ndarray:
    """old device -> new device, numbering devices by first use along the topological
    order (the canonical labelling the model requires of interchangeable devices)."""
    relabel = np.full(d, -1, np.int64)
    nxt = 0
    for v in graph.topo_order:
        k = int(placement[v])
        if relabel[k] < 0:
            relabel[k], nxt = nxt, nxt + 1
    for k in range(d):
        if relabel[k] < 0:
            relabel[k], nxt = nxt, nxt + 1
    return relabel


def _schedule_of(problem: Problem, handles: CpModelHandles, sim_trace, relabel: np.ndarray,
                 sequential: bool) -> tuple[dict, dict]:
    """Model start times (ops, present transfers) that follow a simulated schedule.

    Activities keep the simulator's start order (ties: producers before their transfers
    before consumers). Peak mode gives them consecutive slots; makespan mode starts each as
    early as its predecessors and its device or channel allow with the model's durations, so
    precedence and no-overlap hold (memory limits may not, with rounded durations). The
    timed formulation takes the simulator's own times, in its exact ticks.
    """
    graph = problem.graph
    n = graph.num_nodes
    if handles.formulation == "timed":
        scale = round(1.0 / handles.tick)
        op_start = {v: int(round(float(sim_trace.op_start[v]) * scale)) for v in range(n)}
        transfer_start = {}
        for i, t in enumerate(sim_trace.transfer_tensor):
            key = (int(t), int(relabel[sim_trace.transfer_dst[i]]))
            transfer_start[key] = int(round(float(sim_trace.transfer_start[i]) * scale))
        return op_start, transfer_start
    producer = graph.tensor_producer
    position = np.empty(n, np.int64)
    position[graph.topo_order] = np.arange(n)
    placement = relabel[np.asarray(sim_trace.op_device)]
    events = [(float(sim_trace.op_start[v]), 2 * int(position[v]), v) for v in range(n)]
    for i, t in enumerate(sim_trace.transfer_tensor):
        key = (int(t), int(relabel[sim_trace.transfer_dst[i]]))
        if key in handles.transfer_start:
            events.append((float(sim_trace.transfer_start[i]),
                           2 * int(position[producer[key[0]]]) + 1, key))
    events.sort(key=lambda e: (e[0], e[1]))
    op_start: dict = {}
    transfer_start: dict = {}
    if sequential:
        for slot, (_, _, key) in enumerate(events):
            (transfer_start if isinstance(key, tuple) else op_start)[key] = slot
        return op_start, transfer_start
    op_ticks, tr_ticks, _ = _durations(problem, False)
    op_end: dict = {}
    transfer_end: dict = {}
    device_free = np.zeros(problem.devices.count, np.int64)
    channel_free: dict = {}
    for _, _, key in events:
        if isinstance(key, tuple):
            t, k = key
            p = int(producer[t])
            channel = (int(placement[p]), k)
            begin = max(op_end[p], channel_free.get(channel, 0))
            transfer_start[key] = begin
            transfer_end[key] = channel_free[channel] = begin + int(tr_ticks[t])
            continue
        v, k = key, int(placement[key])
        ready = max([op_end[int(u)] for u in graph.predecessors(v)], default=0)
        for t in set(int(t) for t in graph.inputs(v)):
            if int(placement[producer[t]]) != k:
                ready = max(ready, transfer_end[t, k])
        op_start[v] = max(ready, int(device_free[k]))
        op_end[v] = device_free[k] = op_start[v] + int(op_ticks[v])
    return op_start, transfer_start


def _complete(handles: CpModelHandles, fixed: dict, time_limit: float, wall: float,
              seed: int) -> tuple[cp_model.CpSolver | None, float]:
    """Solves a copy of the model with `fixed` variables (var -> value) up to a first
    solution: (the solver, or None when it found none in time; deterministic time used)."""
    copy = handles.model.clone()
    for var, value in fixed.items():
        copy.add(copy.get_int_var_from_proto_index(var.index) == int(value))
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_deterministic_time = float(time_limit)
    params.max_time_in_seconds = max(float(wall), 0.01)
    params.stop_after_first_solution = True
    params.num_workers = 1
    params.random_seed = int(seed) % (2**31)
    status = solver.solve(copy)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return (solver if found else None), float(solver.deterministic_time)


def _add_hint(handles: CpModelHandles, problem: Problem, hint: Solution, sim_trace,
              time_limit: float, wall: float, seed: int) -> tuple[float | None, float]:
    """Hints every model variable with the hint's placement and schedule.

    CP-SAT uses a hint best when it is complete and feasible, so a copy of the model with
    the placement (canonically relabelled) and the start times fixed is solved to its
    first solution (propagation only), and that solution becomes the hint; if the rounded
    durations break a memory limit, the start times are left free. Returns (the hint's
    model objective, in the model's units, or None; deterministic time used).
    """
    graph, d = problem.graph, problem.devices.count
    sequential = handles.objective == "peak_memory" and handles.formulation != "timed"
    relabel = _canonical_labels(hint.placement, graph, d) if _symmetric(problem) \
        else np.arange(d)
    placement = relabel[hint.placement]
    op_start, transfer_start = _schedule_of(problem, handles, sim_trace, relabel, sequential)
    fixed = {}
    if d > 1:
        for v in range(graph.num_nodes):
            for k in range(d):
                fixed[handles.x[v][k]] = int(placement[v] == k)
    placed = dict(fixed)
    for v, begin in op_start.items():
        fixed[handles.start[v]] = begin
    for key, begin in transfer_start.items():
        fixed[handles.transfer_start[key]] = begin
    solver, used = _complete(handles, fixed, time_limit, wall, seed)
    if solver is None and placed:
        solver, more = _complete(handles, placed, time_limit, wall, seed)
        used += more
    model = handles.model
    if solver is None:  # a partial hint: the placement and the start times
        for var, value in fixed.items():
            model.add_hint(var, value)
        return None, used
    model.clear_hints()
    for i, value in enumerate(solver.response_proto.solution):
        model.add_hint(model.get_int_var_from_proto_index(i), value)
    return float(solver.objective_value), used


def _default_hint(handles: CpModelHandles, graph, sequential: bool, op_ticks) -> None:
    """A partial hint when no heuristic could be scored (a tiny budget): every op on device
    0, one at a time in topological order."""
    m = handles.model
    clock = 0
    for v in graph.topo_order:
        v = int(v)
        if len(handles.x[v]) > 1:
            for k, lit in enumerate(handles.x[v]):
                m.add_hint(lit, k == 0)
        m.add_hint(handles.start[v], clock)
        clock += 1 if sequential else int(op_ticks[v])
