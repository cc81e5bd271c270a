"""The sequence formulation of the peak-memory model (`build_sequence_model`): memory as
boolean liveness sums over pairwise order literals, which CP-SAT's clause learning proves
quickly on small graphs; its size grows with activities x tensors, so `run` picks it only
below `run._SEQUENCE_MAX`.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from baselines.cpsat.model import (CpModelHandles, _final_state_bound, _memory_arrays,
                                   _placement_vars, _time_windows)
from regal.optimizers import Problem


def _reachability(graph) -> np.ndarray:
    """reach[u, v]: v is a strict descendant of u (data or control)."""
    n = graph.num_nodes
    reach = np.zeros((n, n), dtype=bool)
    for u in graph.topo_order[::-1]:
        for w in graph.successors(int(u)):
            reach[u, w] = True
            reach[u] |= reach[w]
    return reach


_FOREVER = -1


def _negate(value):
    return (not value) if isinstance(value, bool) else value.Not()


def build_sequence_model(problem: Problem) -> CpModelHandles:
    """Peak-memory model over global activity sequences, memory as boolean liveness sums.

    Same semantics as the cumulative formulation of `build_model` (`model`'s docstring), but the
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
    _time_windows(m, start, graph, horizon)

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
