"""CP-SAT baseline: an exact constraint model of placement, per-device order and memory,
hinted with the best cheap heuristic.

Why: on small graphs it gives proven optima and lower bounds (a yardstick for every
heuristic); on larger ones it is the "exact solver under a time limit" baseline of the REGAL
paper. Its answer is never worse than the hint, because both are re-scored by the simulator
and the better one is returned.

What `solve` does
-----------------
1. The hint: single device, m-topo, gp-dfs, m-etf (graphs up to `_METF_MAX_OPS` ops) and a
   short BRKGA (at most `_HINT_BRKGA_MAX` evaluations, warm-started with the others), all
   through the registry; the best by the simulator's value. Every evaluation they make is
   counted in `evaluations`, as are the trace of the hint and the scoring of CP-SAT's
   answer (never more than `budget`; with `budget` <= 2 there is no hint).
2. The model (below), unless it is too large: above `_UNITS_PER_SECOND` x `time_limit`
   units (`_model_units`: (tensors + consumer edges) x devices), or `_MAX_UNITS`, building it
   alone would outlast the limit and its presolve the rest, so the hint is returned with
   status "HINT" and `extra["model_skipped"]` says why; so does a wall-clock run whose
   heuristics left less time than the build needs. On data/real with a 5 s limit the model
   is built for 4 graphs at 2 devices and 2 at 4 (120-400 ops; experiments/cpsat_check.py).
3. The hint enters the model complete: its simulated schedule, serialised by start time
   (peak mode) or replayed with the model's durations (makespan mode), fixed in a copy of
   the model that CP-SAT completes by propagation; that full assignment is the hint.
4. CP-SAT's answer, turned into priorities (earlier start = higher priority; a producer's
   transfer priority follows its earliest transfer), is re-scored; the better of it and the
   hint is returned (ties: the hint).

`Solution.extra`: `status` is "OPTIMAL" / "FEASIBLE" (CP-SAT's answer is returned; its model
proved optimal or not), "HINT" (the hint is returned: CP-SAT found nothing better in the
simulator's score, found nothing, or did not run) or "INFEASIBLE" (the model proves the
memory limits cannot be met; the answer is the least-memory one). `solver_status` is
CP-SAT's own; `model_objective` its incumbent's objective in the model (bytes or µs),
`cpsat_value` that incumbent re-scored by the simulator, `hint_value`/`hint_method` the
hint's, `heuristics` every heuristic's value; `bound` a proven lower bound on the
simulator's objective, or None (below); `stopped_by` "proof", "deterministic_time" or
"wall_clock".

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

The model (what its optimum means)
----------------------------------
Activities are the ops and the transfers. A transfer `(T, k)` exists iff some consumer of
tensor `T` is on device `k` and `T`'s producer is not. Every activity has a start time and a
duration of at least one tick (see the objectives). Constraints:

- each op is on exactly one device; ops on one device do not overlap; ops of a colocation
  group share their leader's device and a pinned op is on its device (`graph.colocation`,
  `graph.pinned`, when the graph has them);
- an op starts after every predecessor (data or control) ends; a consumer on `k` of a tensor
  produced elsewhere starts after the transfer `(T, k)` ends, which starts after the producer
  ends; transfers on one (src, dst) link do not overlap;
- memory of device `k`, a cumulative profile over half-open intervals `[start, end)`:
  * persistent memory of every op on `k`, for the whole run;
  * temporary memory of `v` while `v` runs;
  * the copy of `T` on its producer's device, from the producer's start until the last of:
    the producer's end, the end of every consumer on that device, the end of every transfer
    of `T`, and the end of every alias child's copy there (see below); forever if `T` has no
    consumer anywhere;
  * the copy of `T` on `k` made by transfer `(T, k)`, from the transfer's start until the last
    of: the transfer's end, the end of every consumer of `T` on `k`, the end of every alias
    child's copy on `k`;
  * an alias tensor (`tensor_alias >= 0`) costs 0 bytes on its producer's device (its own size
    when transferred), and keeps its source's copy on that device alive as long as itself;
  * a consumer reading one tensor on several ports counts once.
  These are the simulator's memory rules (docs/design.md §4, SIM_RULES 4-6); what the model drops is
  the list scheduler itself: start times are free, so a device may stay idle with ready work.
- objective `peak_memory`: minimise `max_k peak[k]`. The minimum is attained by a schedule that
  runs one activity at a time (serialising the activities by start time never adds a live
  item at any instant, because every activity lasts > 0), so this mode searches global
  sequences only: every activity lasts 1 slot and all activities share one no-overlap; the
  optimum is independent of the real durations. (tests/test_baselines.py checks it against an
  exhaustive search over placements x global activity orders.)
- memory limits: the model keeps those that change the ranking (`regal.sim.ranking_limits`:
  not one limit for every device under peak memory, which ranks solutions as no limit
  does, nor limits above every byte of the graph). Under peak memory
  with such limits the cumulative model is used, with `peak[k] <= memory_limit[k]` added;
  if the limits cannot be met, the model is re-solved without them and `status` says
  "INFEASIBLE".
- objective `makespan`: minimise the last end time subject to `peak[k] <= memory_limit[k]`;
  durations are the real ones, scaled to integer ticks (at least 1 tick each, so zero-cost
  ops still occupy their memory for an instant). If the limits cannot be met, the model is
  re-solved for `peak_memory` and `status` says "INFEASIBLE".

The model's objective against the simulator's (why they differ)
---------------------------------------------------------------
Peak memory: the model is a relaxation. Any simulated schedule, serialised by start time
(ties: the simulator's event order), is a model sequence whose memory at each allocation is
at most the simulator's (an activity that started earlier counts as finished, so at most
fewer items are live), and it has the same memory in the model's units: every byte count is
a multiple of the gcd unit, divided exactly. Canonical relabelling (below) is applied only
where devices are interchangeable (equal limits, no pins), and the model's memory does not
depend on device labels (the simulator's tie-breaks by device index play no part in it).
Hence: model optimum <= simulated optimum <= any re-score, so CP-SAT's best bound is a proven
lower bound (`extra["bound"]`, never below `closed_form_bound`; `lower_bound()` exposes it).
A re-score is usually above `model_objective`: the simulator runs devices in parallel, so
allocations on one device overlap work that the model's sequence had finished.

Makespan under limits: the model is not the list scheduler. Its start times are free, so it
may keep a device idle while an op is ready, e.g. to let memory be freed first; the
simulator starts the ready op, so the replay can take longer (model 21 µs, re-score 24 µs) or
break a limit the model met (tests/test_cpsat.py: model OPTIMAL at 26 µs, re-score 11 bytes
over). Priorities cannot forbid a list scheduler to start a ready op, so no conversion
reproduces every model schedule. Rounded durations (zero-cost ops take a tick) also let
the re-score come out below the model's objective. What is guaranteed instead: the answer is
the better of CP-SAT's and the hint's by the simulator, so a feasible hint is never replaced
by an infeasible answer; `model_objective` and `cpsat_value` are both in `extra`. The
makespan model's bound is a proven bound (`extra["bound"]`) only when every duration is a
positive multiple of the tick (then every feasible list schedule is a model schedule);
otherwise it is `extra["model_bound"]`, for information. Model infeasibility is always a
proof: a serialised feasible schedule would fit the model's horizon and limits.

Two formulations of the peak-memory model: `sequence` (small graphs; activities x tensors
below `_SEQUENCE_MAX`) writes device k's memory during activity b as a sum of boolean
"item i is live at b" literals over pairwise order literals, which CP-SAT's clause learning
proves quickly; `cumulative` (larger graphs, and the makespan mode) uses optional intervals
and one cumulative constraint per device, whose size is linear in the graph (its presolve
skips probing, which costs seconds before the hint is even reported). Redundant bounds: the
peak covers every op's inputs + outputs + temporaries and every device's persistent memory
+ unconsumed outputs.

Symmetric devices (same limits, no pins) are interchangeable, so the op at topological
position `i` may only use devices `0..i` (a canonical relabelling; the hint is relabelled
to match). One worker by default.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from regal.optimizers import Problem, Solution, check_budget, score
from regal.sim import DeviceSpec, ranking_limits

__all__ = ["solve", "lower_bound", "closed_form_bound", "best_heuristic", "build_model",
           "build_sequence_model", "CpModelHandles"]

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
           cp_model.INFEASIBLE: "INFEASIBLE", cp_model.MODEL_INVALID: "MODEL_INVALID",
           cp_model.UNKNOWN: "UNKNOWN"}
_MAX_TICKS = 2_000_000
_SEQUENCE_MAX = 20_000  # (activities x items) above which peak mode uses the cumulative model


@dataclass
class CpModelHandles:
    """The model and the variables a solution is read from."""

    model: cp_model.CpModel
    objective: str
    x: list              # x[v][k]: op v on device k (bool vars, or True when d == 1)
    start: list          # start[v]: op start (int var)
    transfer_start: dict  # (tensor, k) -> int var
    transfer_present: dict  # (tensor, k) -> bool var
    target: cp_model.IntVar  # objective variable (peak in memory units, or makespan ticks)
    memory_unit: int     # bytes per memory unit of the model
    tick: float          # µs per tick (makespan mode)
    formulation: str = "cumulative"  # or "sequence" (build_sequence_model)


def _unique_consumers(graph) -> list[np.ndarray]:
    return [graph.consumers(t) for t in range(graph.num_tensors)]


def _memory_unit(graph) -> int:
    """gcd of every byte count, so that the model's numbers stay small."""
    values = np.concatenate([graph.tensor_size, graph.temporary_memory,
                             graph.persistent_memory]).astype(np.int64)
    values = values[values > 0]
    return int(np.gcd.reduce(values)) if len(values) else 1


def _memory_arrays(graph):
    """Byte counts in the model's memory unit, plus the tensor structure both formulations read."""
    unit = _memory_unit(graph)
    size = np.asarray(graph.tensor_size, np.int64) // unit
    temp = np.asarray(graph.temporary_memory, np.int64) // unit
    pers = np.asarray(graph.persistent_memory, np.int64) // unit
    return (unit, size, temp, pers, np.asarray(graph.tensor_producer),
            np.asarray(graph.tensor_alias), _unique_consumers(graph))


def _durations(problem: Problem, sequential: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Integer durations of ops and transfers (>= 1 tick) and the µs per tick."""
    graph, devices = problem.graph, problem.devices
    if sequential:
        return (np.ones(graph.num_nodes, np.int64), np.ones(graph.num_tensors, np.int64), 1.0)
    op = np.asarray(graph.compute_cost, np.float64)
    tr = devices.transfer_time(graph.tensor_size)
    total = op.sum() + (devices.count - 1) * tr.sum() + graph.num_nodes + graph.num_tensors
    integral = np.all(op == np.round(op)) and np.all(tr == np.round(tr))
    tick = 1.0 if integral and total <= _MAX_TICKS else max(total / _MAX_TICKS, 1e-12)
    if integral and total > _MAX_TICKS:
        tick = math.ceil(tick)
    as_ticks = lambda a: np.maximum(1, np.round(a / tick)).astype(np.int64)  # noqa: E731
    return as_ticks(op), as_ticks(tr), tick


def _colocation(graph) -> tuple[np.ndarray, np.ndarray]:
    """(leader of each op's colocation group, pinned device or -1); free ops if the graph
    predates placement constraints."""
    n = graph.num_nodes
    leader = getattr(graph, "colocation", None)
    pinned = getattr(graph, "pinned", None)
    leader = np.arange(n) if leader is None else np.asarray(leader, np.int64)
    pinned = np.full(n, -1) if pinned is None else np.asarray(pinned, np.int64)
    return leader, pinned


def _model_limits(problem: Problem) -> np.ndarray | None:
    """The memory limits the model keeps: those that change the ranking."""
    return ranking_limits(problem.graph, problem.devices, problem.objective)


def _symmetric(problem: Problem) -> bool:
    """Devices are interchangeable: equal limits (of those the model keeps) and no op pinned
    to a device."""
    limits = _model_limits(problem)
    if limits is not None and not bool(np.all(limits == limits[0])):
        return False
    return not bool((_colocation(problem.graph)[1] >= 0).any())


def build_model(problem: Problem) -> CpModelHandles:
    """The CP-SAT model of the module docstring for `problem` (not solved)."""
    graph, devices = problem.graph, problem.devices
    n, d, num_t = graph.num_nodes, devices.count, graph.num_tensors
    sequential = problem.objective == "peak_memory"
    op_dur, tr_dur, tick = _durations(problem, sequential)
    unit, size, temp, pers, producer, alias, consumers = _memory_arrays(graph)
    horizon = int(op_dur.sum() + (d - 1) * tr_dur.sum())

    m = cp_model.CpModel()
    x = _placement_vars(m, problem)

    start = [m.new_int_var(0, horizon - int(op_dur[v]), f"s{v}") for v in range(n)]
    end = [start[v] + int(op_dur[v]) for v in range(n)]
    op_iv = [[m.new_optional_fixed_size_interval_var(start[v], int(op_dur[v]), x[v][k],
                                                     f"op{v}_{k}") for k in range(d)]
             for v in range(n)]
    for k in range(d):
        m.add_no_overlap([op_iv[v][k] for v in range(n)])
    for v in range(n):
        for u in graph.predecessors(v):
            m.add(start[v] >= end[u])

    # same[(u, v)]: u and v on one device
    same_cache: dict = {}

    def same(u: int, v: int):
        if d == 1:
            return m.new_constant(1)
        key = (min(u, v), max(u, v))
        if key not in same_cache:
            lit = m.new_bool_var(f"same{key[0]}_{key[1]}")
            for k in range(d):
                m.add_bool_or([x[u][k].Not(), x[v][k].Not(), lit])   # both on k -> same
                m.add_implication(lit, x[v][k]).only_enforce_if(x[u][k])  # same & u on k -> v on k
            same_cache[key] = lit
        return same_cache[key]

    # tensors: the home copy (one end variable; the producer fixes the device) and transfers
    home_end = [m.new_int_var(0, horizon, f"home_end{t}") for t in range(num_t)]
    copy_end: dict = {}        # (t, k) -> end of the transferred copy on k
    tr_start: dict = {}
    tr_present: dict = {}
    activity_iv = [m.new_fixed_size_interval_var(start[v], int(op_dur[v]), f"act{v}")
                   for v in range(n)] if sequential else []
    channel: dict = {}         # (src, dst) -> intervals
    mem_items: list[list] = [[] for _ in range(d)]  # per device: (interval, demand)

    for t in range(num_t):
        p = int(producer[t])
        cons = consumers[t]
        m.add(home_end[t] >= end[p])
        if len(cons) == 0:
            m.add(home_end[t] == horizon)
        for c in cons:
            m.add(home_end[t] >= end[int(c)]).only_enforce_if(same(p, int(c)))
        if d == 1 or len(cons) == 0:
            continue
        for k in range(d):
            here = [x[int(c)][k] for c in cons]
            z = m.new_bool_var(f"z{t}_{k}")
            m.add_implication(z, x[p][k].Not())
            m.add_bool_or(here).only_enforce_if(z)
            for lit in here:
                m.add_bool_or([lit.Not(), x[p][k], z])
            ts = m.new_int_var(0, horizon - int(tr_dur[t]), f"ts{t}_{k}")
            te = ts + int(tr_dur[t])
            ce = m.new_int_var(0, horizon, f"copy_end{t}_{k}")
            m.add(ts >= end[p])
            m.add(home_end[t] >= te).only_enforce_if(z)
            m.add(ce >= te)
            for c in cons:
                c = int(c)
                m.add(start[c] >= te).only_enforce_if([x[c][k], z])
                m.add(ce >= end[c]).only_enforce_if(x[c][k])
            tr_start[t, k], tr_present[t, k], copy_end[t, k] = ts, z, ce
            iv = m.new_optional_fixed_size_interval_var(ts, int(tr_dur[t]), z, f"tr{t}_{k}")
            if sequential:
                activity_iv.append(iv)
            for src in range(d):
                if src == k:
                    continue
                if d == 2:
                    channel.setdefault((src, k), []).append(iv)
                    continue
                w = m.new_bool_var(f"w{t}_{src}_{k}")
                m.add_bool_and([z, x[p][src]]).only_enforce_if(w)
                m.add_bool_or([z.Not(), x[p][src].Not(), w])
                channel.setdefault((src, k), []).append(
                    m.new_optional_fixed_size_interval_var(ts, int(tr_dur[t]), w,
                                                           f"ch{t}_{src}_{k}"))
            if size[t] > 0:
                length = m.new_int_var(0, horizon, f"copy_len{t}_{k}")
                mem_items[k].append((m.new_optional_interval_var(ts, length, ce, z,
                                                                 f"copy{t}_{k}"), int(size[t])))

    # aliases: the source's copy on the child's device lives as long as the child's copy there
    for t2 in range(num_t):
        t1 = int(alias[t2])
        if t1 < 0:
            continue
        v, p1 = int(producer[t2]), int(producer[t1])
        m.add(home_end[t1] >= home_end[t2]).only_enforce_if(same(p1, v))
        for k in range(d):
            if (t1, k) in copy_end:
                m.add(copy_end[t1, k] >= home_end[t2]).only_enforce_if(
                    [x[v][k], tr_present[t1, k]])

    for (src, dst), ivs in channel.items():
        m.add_no_overlap(ivs)
    if sequential:
        m.add_no_overlap(activity_iv)

    # home copies and temporaries on each device
    for t in range(num_t):
        p = int(producer[t])
        demand = 0 if alias[t] >= 0 else int(size[t])
        if demand == 0:
            continue
        for k in range(d):
            length = m.new_int_var(0, horizon, f"home_len{t}_{k}")
            iv = m.new_optional_interval_var(start[p], length, home_end[t], x[p][k],
                                             f"home{t}_{k}")
            mem_items[k].append((iv, demand))
    for v in range(n):
        if temp[v] > 0:
            for k in range(d):
                mem_items[k].append((op_iv[v][k], int(temp[v])))

    persistent = [sum(int(pers[v]) * x[v][k] for v in range(n) if pers[v] > 0)
                  for k in range(d)]
    if sequential:
        total = int(size.sum() + temp.sum() + pers.sum())
        target = m.new_int_var(0, total, "peak")
        _final_state_bound(m, target, persistent, x, graph, size, d)
        # redundant: while v runs, its inputs, outputs and temporaries are all on dev(v)
        # (alias inputs left out: on dev(v) they may cost nothing)
        for v in range(n):
            ins = set(int(t) for t in graph.inputs(v) if alias[t] < 0)
            here = int(temp[v]) + sum(int(size[t]) for t in ins) + sum(
                int(size[t]) for t in graph.outputs(v) if alias[t] < 0)
            for k in range(d):
                m.add(target >= persistent[k] + here).only_enforce_if(x[v][k])
        limits = _model_limits(problem)
        for k in range(d):
            cap = m.new_int_var(0, total, f"cap{k}")
            m.add(target >= persistent[k])
            if limits is None:
                m.add(cap == target - persistent[k])
            else:  # below the peak and below the device's own limit
                cap_k = int(limits[k]) // unit  # floor: demands are whole units
                m.add(persistent[k] <= cap_k)
                m.add(cap <= target - persistent[k])
                m.add(cap <= cap_k - persistent[k])
            items = mem_items[k]
            if items:
                m.add_cumulative([iv for iv, _ in items], [dm for _, dm in items], cap)
    else:
        target = m.new_int_var(0, horizon, "makespan")
        for v in range(n):
            m.add(target >= end[v])
        for (t, k), ts in tr_start.items():
            m.add(target >= ts + int(tr_dur[t])).only_enforce_if(tr_present[t, k])
        limits = _model_limits(problem)
        if limits is not None:
            for k in range(d):
                cap_k = int(limits[k]) // unit  # floor: demands are whole units
                m.add(persistent[k] <= cap_k)
                items = mem_items[k]
                if items:
                    cap = m.new_int_var(0, cap_k, f"cap{k}")
                    m.add(cap == cap_k - persistent[k])
                    m.add_cumulative([iv for iv, _ in items], [dm for _, dm in items], cap)
    m.minimize(target)
    return CpModelHandles(model=m, objective=problem.objective, x=x, start=start,
                          transfer_start=tr_start, transfer_present=tr_present, target=target,
                          memory_unit=unit, tick=tick)


def _reachability(graph) -> np.ndarray:
    """reach[u, v]: v is a strict descendant of u (data or control)."""
    n = graph.num_nodes
    reach = np.zeros((n, n), dtype=bool)
    for u in graph.topo_order[::-1]:
        for w in graph.successors(int(u)):
            reach[u, w] = True
            reach[u] |= reach[w]
    return reach


def _placement_vars(m: cp_model.CpModel, problem: Problem) -> list:
    graph, d = problem.graph, problem.devices.count
    n = graph.num_nodes
    if d == 1:
        return [[m.new_constant(1)] for _ in range(n)]
    x = [[m.new_bool_var(f"x{v}_{k}") for k in range(d)] for v in range(n)]
    for v in range(n):
        m.add_exactly_one(x[v])
    # colocation groups share their leader's device; pins fix it
    leader, pinned = _colocation(graph)
    for v in range(n):
        if leader[v] != v:
            for k in range(d):
                m.add(x[v][k] == x[int(leader[v])][k])
        if pinned[v] >= d:
            raise ValueError(f"op {str(graph.names[v])!r}: pinned to device {pinned[v]}, "
                             f"outside 0..{d - 1}")
        if pinned[v] >= 0:
            m.add(x[v][int(pinned[v])] == 1)
    # canonical relabelling of interchangeable devices (groups keep it valid: a relabelling
    # moves a whole group together)
    if _symmetric(problem):
        for pos, v in enumerate(graph.topo_order):
            for k in range(pos + 1, d):
                m.add(x[v][k] == 0)
    return x


_FOREVER = -1


def _negate(value):
    return (not value) if isinstance(value, bool) else value.Not()


def build_sequence_model(problem: Problem) -> CpModelHandles:
    """Peak-memory model over global activity sequences, memory as boolean liveness sums.

    Same semantics as the cumulative formulation of `build_model` (module docstring), but the
    memory of device k during activity b is written out: item i counts at b when its
    allocating activity starts no later than b and some holder of it has not run before b.
    Pure boolean/linear structure lets CP-SAT learn clauses, which proves small graphs much
    faster; its size grows with (activities x tensors), so it is meant for small graphs.
    """
    graph, devices = problem.graph, problem.devices
    n, d, num_t = graph.num_nodes, devices.count, graph.num_tensors
    unit, size, temp, pers, producer, alias, consumers = _memory_arrays(graph)
    reach = _reachability(graph)
    children: list[list[int]] = [[] for _ in range(num_t)]
    for t2 in range(num_t):
        if alias[t2] >= 0:
            children[int(alias[t2])].append(t2)

    m = cp_model.CpModel()
    x = _placement_vars(m, problem)
    transfers = [(t, k) for t in range(num_t) if len(consumers[t]) and d > 1 for k in range(d)]
    horizon = n + (d - 1) * sum(1 for t in range(num_t) if len(consumers[t]))
    start = [m.new_int_var(0, horizon - 1, f"s{v}") for v in range(n)]
    intervals = [m.new_fixed_size_interval_var(start[v], 1, f"act{v}") for v in range(n)]
    for v in range(n):
        for u in graph.predecessors(v):
            m.add(start[v] >= start[u] + 1)

    tr_index, tr_start, tr_present = {}, {}, {}
    act_start = list(start)
    act_present = [None] * n         # None = always present
    act_anchor = list(range(n))      # the op an activity runs after (itself for ops)
    for t, k in transfers:
        p = int(producer[t])
        here = [x[int(c)][k] for c in consumers[t]]
        z = m.new_bool_var(f"z{t}_{k}")
        m.add_implication(z, x[p][k].Not())
        m.add_bool_or(here).only_enforce_if(z)
        for lit in here:
            m.add_bool_or([lit.Not(), x[p][k], z])
        ts = m.new_int_var(0, horizon - 1, f"ts{t}_{k}")
        m.add(ts >= start[p] + 1).only_enforce_if(z)
        for c in consumers[t]:
            m.add(start[int(c)] >= ts + 1).only_enforce_if([x[int(c)][k], z])
        intervals.append(m.new_optional_fixed_size_interval_var(ts, 1, z, f"tr{t}_{k}"))
        tr_index[t, k] = len(act_start)
        tr_start[t, k], tr_present[t, k] = ts, z
        act_start.append(ts)
        act_present.append(z)
        act_anchor.append(p)
    m.add_no_overlap(intervals)
    num_act = len(act_start)

    order: dict = {}

    def before(a: int, b: int):
        """True / False / a literal: activity a runs before activity b."""
        if a == b:
            raise ValueError("an activity is not before itself")
        ua, ub = act_anchor[a], act_anchor[b]
        if a < n and b < n:
            if reach[a, b]:
                return True
            if reach[b, a]:
                return False
        elif a < n:  # b is a transfer: it runs after its producer ub
            if a == ub or reach[a, ub]:
                return True
        elif b < n:
            if b == ua or reach[b, ua]:
                return False
        key = (min(a, b), max(a, b))
        if key not in order:
            lit = m.new_bool_var(f"b{key[0]}_{key[1]}")
            lo, hi = key
            both = [p for p in (act_present[lo], act_present[hi]) if p is not None]
            m.add(act_start[lo] + 1 <= act_start[hi]).only_enforce_if([lit, *both])
            m.add(act_start[hi] + 1 <= act_start[lo]).only_enforce_if([lit.Not(), *both])
            order[key] = lit
        lit = order[key]
        return lit if a == key[0] else lit.Not()

    def home_holders(t: int, k: int) -> list:
        """(activity, conditions) pairs that keep the copy of t on its producer's device k."""
        p = int(producer[t])
        out = [(p, [])]
        if len(consumers[t]) == 0:
            out.append((_FOREVER, []))
        for c in consumers[t]:
            out.append((int(c), [x[int(c)][k]]))
        for k2 in range(d):
            if (t, k2) in tr_index:
                out.append((tr_index[t, k2], [tr_present[t, k2]]))
        out += alias_holders(t, k)
        return out

    def alias_holders(t: int, k: int) -> list:
        out = []
        for t2 in children[t]:
            v = int(producer[t2])
            out += [(h, [x[v][k], *conds]) for h, conds in home_holders(t2, k)]
        return out

    # items: (device, size, allocating activity, presence, holders)
    items = []
    for t in range(num_t):
        p = int(producer[t])
        home_size = 0 if alias[t] >= 0 else int(size[t])
        for k in range(d):
            if home_size > 0:
                items.append((k, home_size, p, x[p][k], home_holders(t, k)))
            if (t, k) in tr_index and size[t] > 0:
                a = tr_index[t, k]
                holders = [(a, [])] + [(int(c), [x[int(c)][k]]) for c in consumers[t]]
                items.append((k, int(size[t]), a, tr_present[t, k],
                              holders + alias_holders(t, k)))

    total = int(size.sum() + temp.sum() + pers.sum())
    peak = m.new_int_var(0, total, "peak")
    persistent = [sum(int(pers[v]) * x[v][k] for v in range(n) if pers[v] > 0)
                  for k in range(d)]
    _final_state_bound(m, peak, persistent, x, graph, size, d)

    def lits(values) -> list | None:
        """Drop constant True; None if some value is constant False."""
        out = []
        for value in values:
            if value is False:
                return None
            if value is not True:
                out.append(value)
        return out

    for b in range(num_act):
        terms = [[] for _ in range(d)]
        for k, amount, alloc, present, holders in items:
            started = True if alloc == b else before(alloc, b)
            if started is False:
                continue
            count = None
            for h, conds in holders:
                pending = True if h in (b, _FOREVER) else _negate(before(h, b))
                cond = lits([present, started, pending, *conds])
                if cond is None:
                    continue
                if count is None:
                    count = m.new_bool_var("")
                m.add_bool_or([lit.Not() for lit in cond] + [count])
            if count is not None:
                terms[k].append(amount * count)
        if b < n:
            for k in range(d):
                m.add(sum(terms[k]) + int(temp[b]) + persistent[k] <= peak).only_enforce_if(
                    x[b][k])
        else:
            t, k = transfers[b - n]
            m.add(sum(terms[k]) + persistent[k] <= peak).only_enforce_if(tr_present[t, k])
    m.minimize(peak)
    return CpModelHandles(model=m, objective="peak_memory", x=x, start=start,
                          transfer_start=tr_start, transfer_present=tr_present, target=peak,
                          memory_unit=unit, tick=1.0, formulation="sequence")


def _final_state_bound(m, peak, persistent, x, graph, size, d: int) -> None:
    """Redundant: the last activity on k sees k's persistent memory and every graph output
    produced on k (never freed); a linear bound that makes balancing them cheap to prove."""
    forever = [t for t in range(graph.num_tensors)
               if len(graph.consumers(t)) == 0 and graph.tensor_alias[t] < 0 and size[t] > 0]
    for k in range(d):
        m.add(peak >= persistent[k] + sum(int(size[t]) * x[int(graph.tensor_producer[t])][k]
                                          for t in forever))


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


# ---------------------------------------------------------------------------
# the hint: the best cheap heuristic by the simulator's score

_HINT_BRKGA_MAX = 1000   # evaluations a hint's BRKGA may spend at most
_METF_MAX_OPS = 1000     # m-ETF's time grows about quadratically (~8 s at 2,900 ops)
_RESERVED = 2            # evaluations kept back: tracing the hint, scoring CP-SAT's answer
_HEURISTIC_SHARE = 0.4   # of the time limit, for the heuristics (wall-clock mode)


def best_heuristic(problem: Problem, budget: int, seed: int, seconds: float | None = None
                   ) -> tuple[Solution | None, int, dict]:
    """The best (simulator's value) of single device, gp-dfs, m-topo, m-etf (up to
    `_METF_MAX_OPS` ops) and a short BRKGA warm-started with them, spending at most `budget`
    evaluations; with `seconds`, BRKGA gets only the evaluations that fit in that time at
    the pace of the first one (a time-dependent count, so not with `reproducible`).

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
    leader, pinned = _colocation(problem.graph)
    found = [s for s in found if _respects(s.placement, leader, pinned)]
    if not found:
        return None, used, values
    best = min(found, key=lambda s: s.value)  # ties: the earlier, cheaper method
    return best, used, values


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
    precedence and no-overlap hold (memory limits may not, with rounded durations).
    """
    graph = problem.graph
    n = graph.num_nodes
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
    sequential = handles.objective == "peak_memory"
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


# ---------------------------------------------------------------------------
# solving

_UNITS_PER_SECOND = 400    # model size (`_model_units`) that may be built per second of limit
_MAX_UNITS = 60_000         # never build a larger model (its presolve alone outlasts a minute)
_MIN_SOLVE = 0.1            # share of the time limit CP-SAT gets even when the rest is spent


def _model_units(problem: Problem) -> int:
    """(tensors + consumer edges) x devices: what the model's size and build time grow with
    (0.2 ms of Python per unit to build on an idle core, 1.3 ms on a loaded one; ~10
    constraints per unit)."""
    graph = problem.graph
    return (graph.num_tensors + int(graph.consumer_ptr[-1])) * problem.devices.count


def _model_fits(problem: Problem, time_limit: float) -> bool:
    return _model_units(problem) <= min(_MAX_UNITS, _UNITS_PER_SECOND * time_limit)


def _solve_model(handles: CpModelHandles, deterministic: float, wall: float, seed: int,
                 num_workers: int):
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
    status = solver.solve(handles.model)
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
    priority = np.empty(n)
    priority[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    first_transfer = np.full(n, np.iinfo(np.int64).max)
    for (t, k), ts in handles.transfer_start.items():
        if solver.boolean_value(handles.transfer_present[t, k]):
            p = int(graph.tensor_producer[t])
            first_transfer[p] = min(first_transfer[p], solver.value(ts))
    tr_key = np.where(first_transfer < np.iinfo(np.int64).max, first_transfer, start)
    tr_order = np.lexsort((np.arange(n), tr_key))
    transfer = np.empty(n)
    transfer[tr_order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return placement, priority, transfer


def _build(problem: Problem, formulation: str) -> CpModelHandles:
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
    stopped_by: str               # "proof", "deterministic_time" or "wall_clock"


def _run_model(problem: Problem, formulation: str, hint: Solution | None, hint_trace,
               time_limit: float, deadline: float, seed: int, num_workers: int,
               reproducible: bool = False) -> _ModelRun:
    """Builds, hints and solves the model; CP-SAT stops at `time_limit` deterministic
    seconds or at the wall-clock `deadline`, whichever comes first (but gets at least
    `_MIN_SOLVE` of the limit)."""
    handles = _build(problem, formulation)
    sequential = problem.objective == "peak_memory"
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
    solver, status = _solve_model(handles, deterministic, wall, seed, num_workers)
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        stopped_by = "proof"
    elif solver.wall_time >= 0.97 * wall:
        stopped_by = "wall_clock"
    else:
        stopped_by = "deterministic_time"
    return _ModelRun(handles, solver, status, hint_objective, stopped_by)


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

    `bytes` is always a valid bound (CP-SAT's best bound on a relaxation, or
    `closed_form_bound` when the model is too large to build within `time_limit`);
    `proven` is True when CP-SAT proved its model optimal, so no better bound can come
    from this model. `time_limit` is wall-clock seconds (deterministic time too).
    """
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    peak = Problem(problem.graph, problem.devices, "peak_memory")
    simple = float(closed_form_bound(peak))
    if not _model_fits(peak, time_limit):
        return simple, False
    run = _run_model(peak, "auto", None, None, time_limit, _deadline(time_limit, False),
                     seed, num_workers)
    bound = float(run.solver.best_objective_bound) * run.handles.memory_unit
    return max(simple, bound), run.status == cp_model.OPTIMAL


def _deadline(time_limit: float, reproducible: bool) -> float:
    """The wall-clock instant CP-SAT must stop by (a loose guard when `reproducible`)."""
    wall = 3.0 * time_limit + 10.0 if reproducible else time_limit
    return time.perf_counter() + wall


def solve(problem: Problem, budget: int, seed: int = 0, *, time_limit: float = 10.0,
          reproducible: bool = False, num_workers: int = 1, formulation: str = "auto",
          progress=None) -> Solution:
    """The better (simulator's score) of the best cheap heuristic and CP-SAT's answer hinted
    with it, within about `time_limit` wall-clock seconds.

    With `reproducible`, `time_limit` is CP-SAT deterministic time instead (a seed then
    always gives the same answer; the wall clock only guards at 3 x the limit + 10 s).

    `evaluations` counts every model evaluation: the heuristics', the hint's BRKGA, the
    trace of the hint and the scoring of CP-SAT's answer (never more than `budget`).
    `extra` records status (OPTIMAL / FEASIBLE: CP-SAT's answer; HINT: the hint's, CP-SAT
    found nothing better or did not run; INFEASIBLE: the memory limits cannot be met), the
    solver's own status, the model's objective and bound, the time limit and what stopped
    the solver (module docstring).
    """
    from regal.sim import trace

    check_budget(budget)
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    if formulation not in ("auto", "sequence", "cumulative"):
        raise ValueError(f"formulation: expected auto, sequence or cumulative, got "
                         f"{formulation!r}")
    graph, devices = problem.graph, problem.devices
    began = time.perf_counter()
    deadline = _deadline(float(time_limit), reproducible)
    fits = _model_fits(problem, time_limit)
    # without a model to solve, the hint's BRKGA may use most of the time
    share = _HEURISTIC_SHARE if fits else 0.8
    hint, used, heuristics = best_heuristic(
        problem, budget - _RESERVED if budget > _RESERVED else 0, seed,
        None if reproducible else share * time_limit)
    heuristics_seconds = time.perf_counter() - began
    extra = {"time_limit": float(time_limit), "reproducible": bool(reproducible),
             "num_workers": int(num_workers), "heuristics_seconds": heuristics_seconds,
             "heuristics": heuristics, "hint_method": None if hint is None else hint.method,
             "hint_value": None if hint is None else float(hint.value),
             "solver_status": None, "model_objective": None, "model_objective_name": None,
             "cpsat_value": None, "bound": None, "stopped_by": None, "model_skipped": None}
    if problem.objective == "peak_memory":
        extra["bound"] = float(closed_form_bound(problem))
    if not fits:
        extra["model_skipped"] = (f"model size {_model_units(problem)} > "
                                  f"{min(_MAX_UNITS, int(_UNITS_PER_SECOND * time_limit))}")
    elif not reproducible and (deadline - time.perf_counter()) * _UNITS_PER_SECOND < \
            _model_units(problem):
        extra["model_skipped"] = "the heuristics left too little time to build the model"
    hint_trace = None
    if hint is not None and extra["model_skipped"] is None:
        hint_trace = trace(graph, devices, hint.placement, hint.priority,
                           hint.transfer_priority)
        used += 1

    run, answer, infeasible = None, None, False
    if extra["model_skipped"] is None:
        run = _run_model(problem, formulation, hint, hint_trace, time_limit, deadline, seed,
                         num_workers, reproducible)
        infeasible = run.status == cp_model.INFEASIBLE
        extra["model_objective_name"] = problem.objective
        if infeasible:
            # the limits cannot be met: the least-memory answer is the next best thing
            extra["infeasible_status"] = _STATUS[run.status]
            extra["model_objective_name"] = "peak_memory"
            fallback = Problem(graph, DeviceSpec(devices.count, None, devices.bandwidth,
                                                 devices.latency), "peak_memory")
            run = _run_model(fallback, formulation, hint, hint_trace, time_limit,
                             max(deadline, time.perf_counter() + _MIN_SOLVE * time_limit),
                             seed, num_workers, reproducible)
        extra["solver_status"] = _STATUS.get(run.status, str(run.status))
        extra["stopped_by"] = run.stopped_by
        extra["formulation"] = run.handles.formulation
        _record_model(extra, problem, run)
        if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and used < budget:
            fields = score(problem, *_priorities(run.solver, run.handles, graph,
                                                 devices.count))
            used += 1
            extra["cpsat_value"] = fields["value"]
            if hint is None or fields["value"] < hint.value:
                answer = fields
    if answer is not None:
        status = "OPTIMAL" if run.status == cp_model.OPTIMAL else "FEASIBLE"
    else:
        status = "HINT"
        if hint is None:  # a tiny budget and no CP-SAT answer: the single-device answer
            from regal.optimizers import single_device
            hint = single_device(problem)
            used += 1
            extra["hint_method"], extra["hint_value"] = "single-device", float(hint.value)
        answer = score(problem, hint.placement, hint.priority, hint.transfer_priority)
    extra["status"] = "INFEASIBLE" if infeasible else status
    extra["solver_wall_time"] = time.perf_counter() - began
    if progress is not None:
        progress(used, float(answer["value"]))
    return Solution(**answer, evaluations=used, method="cpsat", seed=seed, extra=extra)


def _record_model(extra: dict, problem: Problem, run: _ModelRun) -> None:
    """The model's objective and bound in bytes or µs; `bound` only where it is a proven
    lower bound on the simulator's objective (module docstring)."""
    handles, solver = run.handles, run.solver
    peak_model = handles.objective == "peak_memory"
    scale = handles.memory_unit if peak_model else handles.tick
    if run.hint_objective is not None:
        extra["hint_model_objective"] = run.hint_objective * scale
    if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        extra["model_objective"] = float(solver.objective_value) * scale
    if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        model_bound = float(solver.best_objective_bound) * scale
        extra["model_bound"] = model_bound
        if peak_model:
            key = "bound" if problem.objective == "peak_memory" else "peak_bound"
            extra[key] = max(extra.get(key) or 0.0, model_bound)
        elif _exact_durations(problem):
            extra["bound"] = model_bound
