"""CP-SAT baseline: an exact constraint model of placement, per-device order and memory.

Why: on small graphs it gives proven optima (a yardstick for every heuristic); on larger ones
it is the "exact solver under a time limit" baseline of the REGAL paper (its answer re-scored
by the simulator). It does not call the performance model: `evaluations` is 1 (the final
scoring) and its time limit is recorded in `Solution.extra`.

The model (what its optimum means)
----------------------------------
Activities are the ops and the transfers. A transfer `(T, k)` exists iff some consumer of
tensor `T` is on device `k` and `T`'s producer is not. Every activity has a start time and a
duration of at least one tick (see the objectives). Constraints:

- each op is on exactly one device; ops on one device do not overlap;
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
  These are the simulator's memory rules (DESIGN §4, SIM_RULES 4-6); what the model drops is
  the list scheduler itself: start times are free, so a device may stay idle with ready work.
- objective `peak_memory`: minimise `max_k peak[k]`. The minimum is attained by a schedule that
  runs one activity at a time (serialising the activities by start time never adds a live
  item at any instant, because every activity lasts > 0), so this mode searches global
  sequences only: every activity lasts 1 slot and all activities share one no-overlap; the
  optimum is independent of the real durations. (tests/test_baselines.py checks it against an
  exhaustive search over placements x global activity orders.)
- objective `makespan`: minimise the last end time subject to `peak[k] <= memory_limit[k]`;
  durations are the real ones, scaled to integer ticks (at least 1 tick each, so zero-cost
  ops still occupy their memory for an instant). If the limits cannot be met, the model is
  re-solved for `peak_memory` and `status` says "INFEASIBLE".

Any list schedule of the simulator is a schedule of this model with the same memory or more
at every allocation, so for peak memory the model's optimum is a lower bound on the
simulator's (the tests check this on tiny graphs, too).

Two formulations of the peak-memory model: `sequence` (small graphs; activities x tensors
below `_SEQUENCE_MAX`) writes device k's memory during activity b as a sum of boolean
"item i is live at b" literals over pairwise order literals, which CP-SAT's clause learning
proves quickly; `cumulative` (larger graphs, and the makespan mode) uses optional intervals
and one cumulative constraint per device, whose size is linear in the graph. Redundant
bounds: the peak covers every op's inputs + outputs + temporaries and every device's
persistent memory + unconsumed outputs.

Symmetric devices (same limits) are interchangeable, so the op at topological position `i`
may only use devices `0..i` (a canonical relabelling). The start times become priorities
(earlier start = higher priority; a transfer's earliest start gives its producer's transfer
priority) and the simulator scores the result.

`time_limit` is CP-SAT deterministic time (about CPU seconds, but reproducible), so a seed
always gives the same answer; one worker by default. A wall-clock cap of 10 x the limit
+ 30 s guards against a runaway. Without an incumbent (status UNKNOWN) the answer is the
hint: every op on device 0 in topological order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from regal.optimizers import Problem, Solution, score

__all__ = ["solve", "build_model", "CpModelHandles"]

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


def _symmetric(problem: Problem) -> bool:
    limits = problem.devices.limits
    return limits is None or bool(np.all(limits == limits[0]))


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
        for k in range(d):
            cap = m.new_int_var(0, total, f"cap{k}")
            m.add(cap == target - persistent[k])
            m.add(target >= persistent[k])
            items = mem_items[k]
            if items:
                m.add_cumulative([iv for iv, _ in items], [dm for _, dm in items], cap)
    else:
        target = m.new_int_var(0, horizon, "makespan")
        for v in range(n):
            m.add(target >= end[v])
        for (t, k), ts in tr_start.items():
            m.add(target >= ts + int(tr_dur[t])).only_enforce_if(tr_present[t, k])
        limits = devices.limits
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
                          memory_unit=unit, tick=1.0)


def _final_state_bound(m, peak, persistent, x, graph, size, d: int) -> None:
    """Redundant: the last activity on k sees k's persistent memory and every graph output
    produced on k (never freed); a linear bound that makes balancing them cheap to prove."""
    forever = [t for t in range(graph.num_tensors)
               if len(graph.consumers(t)) == 0 and graph.tensor_alias[t] < 0 and size[t] > 0]
    for k in range(d):
        m.add(peak >= persistent[k] + sum(int(size[t]) * x[int(graph.tensor_producer[t])][k]
                                          for t in forever))


def _hint(handles: CpModelHandles, graph, sequential: bool, op_ticks) -> None:
    """A feasible start: everything on device 0, one op at a time in topological order."""
    m = handles.model
    clock = 0
    for v in graph.topo_order:
        v = int(v)
        if len(handles.x[v]) > 1:
            for k, lit in enumerate(handles.x[v]):
                m.add_hint(lit, k == 0)
        m.add_hint(handles.start[v], clock)
        clock += 1 if sequential else int(op_ticks[v])


def _solve_model(handles: CpModelHandles, time_limit: float, seed: int, num_workers: int):
    solver = cp_model.CpSolver()
    p = solver.parameters
    # deterministic time bounds the search so that a seed gives one answer; the wall-clock
    # cap only guards against deterministic time running much slower than real time
    p.max_deterministic_time = float(time_limit)
    p.max_time_in_seconds = 10.0 * float(time_limit) + 30.0
    p.num_workers = int(num_workers)
    p.random_seed = int(seed) % (2**31)
    p.log_search_progress = False
    status = solver.solve(handles.model)
    return solver, status


def _priorities(solver, handles: CpModelHandles, graph, d: int):
    n = graph.num_nodes
    start = np.array([solver.value(s) for s in handles.start], np.int64)
    placement = np.zeros(n, np.int32)
    if d > 1:
        for v in range(n):
            placement[v] = next(k for k in range(d) if solver.boolean_value(handles.x[v][k]))
    order = np.lexsort((np.arange(n), start))          # earlier start first, ties by id
    priority = np.empty(n)
    priority[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    # a producer's transfer priority: the earliest start of its transfers (else its own start)
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


def _balanced_runs(graph, d: int) -> np.ndarray:
    """The topological order cut into d consecutive runs of about equal memory."""
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0).astype(np.int64)
    memory = np.zeros(graph.num_nodes, np.int64)
    np.add.at(memory, graph.tensor_producer, own)
    memory += graph.temporary_memory.astype(np.int64) + graph.persistent_memory.astype(np.int64)
    mid = np.cumsum(memory[graph.topo_order]) - memory[graph.topo_order] / 2
    total = max(int(memory.sum()), 1)
    placement = np.empty(graph.num_nodes, np.int32)
    placement[graph.topo_order] = np.minimum((d * mid / total).astype(int), d - 1)
    return placement


def _warm_start(handles: CpModelHandles, problem: Problem, time_limit: float, seed: int,
                num_workers: int) -> tuple[float | None, float]:
    """Hints every variable with a first solution for a memory-balanced split placement.

    Why: the single-device hint is a poor incumbent on large graphs, and a partial hint with
    transfers is hard for CP-SAT to complete; a copy of the model with the placement fixed
    finds a complete solution quickly. Returns (its objective or None, deterministic time).
    """
    d = problem.devices.count
    if d == 1:
        return None, 0.0
    placement = _balanced_runs(problem.graph, d)
    if _symmetric(problem):  # the canonical labelling: first op on device 0
        first = placement[problem.graph.topo_order[0]]
        placement = np.where(placement == first, 0, np.where(placement == 0, first, placement))
    fixed = handles.model.clone()
    for v, row in enumerate(handles.x):
        for k, lit in enumerate(row):
            fixed.add(fixed.get_int_var_from_proto_index(lit.index) == int(placement[v] == k))
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_deterministic_time = 0.2 * float(time_limit)
    params.max_time_in_seconds = 2.0 * float(time_limit) + 10.0
    params.stop_after_first_solution = True
    params.num_workers = int(num_workers)
    params.random_seed = int(seed) % (2**31)
    status = solver.solve(fixed)
    used = float(solver.deterministic_time)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, used
    model = handles.model
    model.clear_hints()
    for i, value in enumerate(solver.response_proto.solution):
        model.add_hint(model.get_int_var_from_proto_index(i), value)
    return float(solver.objective_value), used


def _run(problem: Problem, formulation: str, time_limit: float, seed: int, num_workers: int):
    handles = _build(problem, formulation)
    sequential = problem.objective == "peak_memory"
    op_ticks, _, _ = _durations(problem, sequential)
    _hint(handles, problem.graph, sequential, op_ticks)
    warm, used = _warm_start(handles, problem, time_limit, seed, num_workers)
    solver, status = _solve_model(handles, max(time_limit - used, 0.05 * time_limit), seed,
                                  num_workers)
    scale = handles.memory_unit if sequential else handles.tick
    return handles, solver, status, None if warm is None else warm * scale


def _build(problem: Problem, formulation: str) -> CpModelHandles:
    if formulation not in ("auto", "sequence", "cumulative"):
        raise ValueError(f"formulation: expected auto, sequence or cumulative, got "
                         f"{formulation!r}")
    if problem.objective != "peak_memory" or formulation == "cumulative":
        return build_model(problem)
    graph, d = problem.graph, problem.devices.count
    activities = graph.num_nodes + d * graph.num_tensors
    if formulation == "sequence" or activities * 2 * d * graph.num_tensors <= _SEQUENCE_MAX:
        return build_sequence_model(problem)
    return build_model(problem)


def solve(problem: Problem, budget: int, seed: int = 0, *, time_limit: float = 10.0,
          num_workers: int = 1, formulation: str = "auto", progress=None) -> Solution:
    """Solves the model within `time_limit` (deterministic seconds) and scores the answer.

    `extra` records status (OPTIMAL / FEASIBLE / INFEASIBLE / UNKNOWN), the model's objective
    and bound (bytes for peak_memory, µs for makespan), and the time limit.
    """
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    graph = problem.graph
    began = time.perf_counter()
    solved_objective = problem.objective
    handles, solver, status, warm = _run(problem, formulation, time_limit, seed, num_workers)
    infeasible = status == cp_model.INFEASIBLE
    if infeasible and problem.objective == "makespan":
        # the limits cannot be met: the least-memory answer is the next best thing
        solved_objective = "peak_memory"
        fallback = Problem(graph, problem.devices, "peak_memory")
        handles, solver, status, warm = _run(fallback, formulation, time_limit, seed,
                                             num_workers)

    extra = {"time_limit": float(time_limit), "status": _STATUS.get(status, str(status)),
             "model_objective_name": solved_objective, "num_workers": int(num_workers),
             "warm_start_objective": warm}
    if infeasible:
        extra["status"] = "INFEASIBLE"
        extra["fallback_status"] = _STATUS.get(status, str(status))
    scale = handles.memory_unit if solved_objective == "peak_memory" else handles.tick
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        placement, priority, transfer = _priorities(solver, handles, graph,
                                                    problem.devices.count)
        extra["model_objective"] = float(solver.objective_value) * scale
        extra["bound"] = float(solver.best_objective_bound) * scale
    else:  # no incumbent in time: the hint's answer
        placement = np.zeros(graph.num_nodes, np.int32)
        priority = np.empty(graph.num_nodes)
        priority[graph.topo_order] = np.linspace(1.0, 0.0, graph.num_nodes) \
            if graph.num_nodes > 1 else 0.5
        transfer = priority.copy()
        extra["model_objective"] = None
        extra["bound"] = float(solver.best_objective_bound) * scale \
            if status == cp_model.UNKNOWN else None
    extra["solver_wall_time"] = time.perf_counter() - began
    return Solution(**score(problem, placement, priority, transfer), evaluations=1,
                    method="cpsat", seed=seed, extra=extra)
