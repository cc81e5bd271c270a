"""The cumulative formulation of the model (`build_model`; semantics in `model`'s
docstring): optional intervals and one cumulative constraint per device, a size linear in the
graph. It serves larger graphs, peak memory under per-device limits, and the makespan mode;
with `timed`, the timed formulation (`timed`'s docstring): peak memory on the simulator's
exact durations, devices in parallel, with eager starts.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from baselines.cpsat.model import (CpModelHandles, _durations, _final_state_bound,
                                   _memory_arrays, _model_limits, _placement_vars,
                                   _time_windows)
from baselines.cpsat.timed import EagerInputs, add_eager_starts, timed_ticks
from regal.optimizers import Problem


def build_model(problem: Problem, timed: bool = False) -> CpModelHandles:
    """The CP-SAT model of `model`'s docstring for `problem` (not solved); with `timed`, the
    timed formulation of the peak-memory model (`timed`'s docstring)."""
    graph, devices = problem.graph, problem.devices
    n, d, num_t = graph.num_nodes, devices.count, graph.num_tensors
    peak_mode = problem.objective == "peak_memory"
    sequential = peak_mode and not timed
    if timed:
        op_dur, tr_dur, scale = timed_ticks(problem)
        tick = 1.0 / scale
    else:
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
    if sequential:
        _time_windows(m, start, graph, horizon)

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
    if peak_mode:
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
    if timed:
        add_eager_starts(m, EagerInputs(graph, d, op_dur, tr_dur, start, tr_start, tr_present,
                                        same, x), horizon)
    m.minimize(target)
    return CpModelHandles(model=m, objective=problem.objective, x=x, start=start,
                          transfer_start=tr_start, transfer_present=tr_present, target=target,
                          memory_unit=unit, tick=tick,
                          formulation="timed" if timed else "cumulative")
