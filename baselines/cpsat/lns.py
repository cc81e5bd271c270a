"""The `cpsat-lns` method (`solve`): large-neighbourhood search with CP-SAT, re-optimising
windows of an incumbent with the rest of it fixed (issue 39 item 3).

Why: the whole-graph model is only built for small graphs (`run._MAX_UNITS`), and on the
large training steps the search portfolio stalls (0.13% in 840 CPU-s per key). A window of
a few dozen ops is small enough for CP-SAT to prove optimal in a second or two, and an
exact answer there can make moves no local-search neighbour makes (several ops re-placed and
re-ordered at once). The model is never built for the whole graph, so graphs of 10k-50k ops
cost a window's model plus a few simulator scores per step.

One step
--------
1. The incumbent is traced once per change (`regal.sim.trace`) and its ops are put in one
   global sequence by start time (ties: topological position). Every predecessor of an op
   starts no later than it, so a contiguous window W of that sequence cuts the graph into
   ops before it (P), the window and ops after it (S), and every edge runs P -> W -> S.
2. The window becomes a small graph of its own (`_window_graph`), which the existing
   formulations (`cumulative`, `sequence`, picked by `run._build`) model unchanged: W's ops
   with their edges, aliases, temporary and persistent memory; per device k, a source op
   pinned to k whose persistent memory is what k holds through the window whatever W does
   (the persistent memory of every op outside W there, and the copies outside W live at
   the window's start) and whose outputs are the copies, live at the window's start, of
   the tensors made before W that W reads (at home, or where they were transferred
   already; an alias at home aliases an empty tensor of an anchor op, so it costs nothing
   there and its size where it is transferred); per device k, a sink op pinned to k that
   reads every tensor W touches that is still needed on k after the window (an op of S
   reads it there), so it stays live to the end. Control edges put the sources first and
   the sinks last. Ops of W whose colocation group reaches outside W, or that are pinned,
   keep their device; in a "reorder" window (`_REORDER_SHARE` of them) every op does.
   One constraint is added to the built model (`_floor_at_outside_peaks`): its peak is at
   least each device's peak outside the window plus the persistent memory of the window's
   ops placed there, so a move that only shifts bytes to another device's own peak, far
   from the window, does not look like a gain.
3. The window model is hinted with the incumbent's own window (its trace on the window
   graph, `hint._add_hint`) and solved under a short limit (`window_time`). Every incumbent
   CP-SAT reports below the hint is kept; the best in the model first, each is mapped back
   and scored on the WHOLE graph by the simulator (`_solve_window`, at most `_RESCORES`
   scores a window), as it is, with its order on the incumbent's devices, and with its
   order on one device alone: the window's ops take the model's devices and, of the
   priority values the window held in the incumbent, the ones the model's order gives
   them; every other op keeps its device and priority. The best re-score replaces the
   incumbent when it is lower (ties: a smaller sum of peaks).

The window model is a proxy: it counts the outside world as constants estimated from the
incumbent (a copy outside W live at the window's start is counted through the window; an
alias made before W that W reads no longer holds its source in the model) and relaxes the
list scheduler as the whole model does (`model`'s docstring). Worse, the list scheduler
replays a new order with other timings: an op of another device becomes ready earlier or
later and another one runs first there. So the model never decides: only the simulator's
score of the whole solution does, and the answer is never worse than the start.

Neighbourhoods (each step draws one; `_pick_window`)
------------------------------------------------------
- "peak": a window of the sequence around the busiest device's peak instant, at a random
  offset: the ops running then are the ones whose order and device set the peak;
- "lifetime": the lifetime (producer to last holder) of a large copy live at the peak,
  padded to the window size: reordering or moving its producer and consumers is what
  shortens it;
- "random": a window anywhere (a tenth of the steps): diversification once the peak's
  windows are exhausted, since a change upstream can shift what is live at the peak.

The window size adapts: it grows by a third when CP-SAT proves a window optimal within the
limit (there is room for a larger one), and shrinks by a quarter when it does not.

Budget: `budget` counts simulator evaluations of the whole graph (the incumbent's traces
and every re-score; a window that scores nothing still costs one, so a budget always ends);
`time_limit` is wall-clock seconds for the whole call; `should_stop()` is asked between
windows. Only the peak-memory objective (`makespan` is refused). Memory limits are left to
the simulator's ranking (the window model ignores them).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from baselines.cpsat.model import _colocation
from regal.optimizers import Problem, Solution, check_budget, score

_MIN_WINDOW = 8          # ops: below this a window rarely holds a better order
_MAX_WINDOW = 400        # ops: a window model this large seldom solves in a few seconds
_START_WINDOW = 32       # ops of the first window
_GROW, _SHRINK = 4 / 3, 3 / 4
_RESCORES = 12           # whole-graph scores of one window's CP-SAT answers, at most
_REORDER_SHARE = 0.3     # of the windows, the order only (every window op keeps its device)
_RULES = (("peak", 0.6), ("lifetime", 0.3), ("random", 0.1))
_TRIES = 3               # solves of one window of one incumbent (CP-SAT seeds differ): the
                         # model's optima replay differently in the list scheduler


@dataclass
class _Incumbent:
    """The current best (simulator's fields) and what each window reads off it."""

    fields: dict
    sequence: np.ndarray = None     # ops in start order (ties: topological position)
    position: np.ndarray = None     # [n] index of each op in `sequence`
    peak_position: int = 0          # ops started at or before the busiest device's peak
    home_hold: np.ndarray = None    # [t] last position holding the copy at home (inf: never freed)
    home_last: np.ndarray = None    # [t] same, also waiting for outgoing transfers
    remote_hold: np.ndarray = None  # [t, d] last position holding the copy on k (-1: none)
    remote_from: np.ndarray = None  # [t, d] first position once the copy on k was made
    starts: np.ndarray = None       # start time of each op of `sequence`
    memory: tuple = ()              # the trace's memory curve of each device
    version: int = 0

    @property
    def value(self) -> float:
        return float(self.fields["value"])


def _better(a: dict, b: dict) -> bool:
    """Lower value wins; at equal value a smaller sum of peaks (a plateau move)."""
    if a["value"] != b["value"]:
        return a["value"] < b["value"]
    return int(np.sum(a["peak"])) < int(np.sum(b["peak"]))


def _read_incumbent(problem: Problem, fields: dict, version: int) -> _Incumbent:
    """Traces `fields` and lays out the global sequence and each copy's holding span."""
    from regal.sim import trace

    graph, d = problem.graph, problem.devices.count
    placement = np.asarray(fields["placement"], np.int64)
    tr = trace(graph, problem.devices, placement, fields["priority"],
               fields["transfer_priority"])
    topo_rank = np.empty(graph.num_nodes, np.int64)
    topo_rank[graph.topo_order] = np.arange(graph.num_nodes)
    sequence = np.lexsort((topo_rank, tr.op_start))
    position = np.empty(graph.num_nodes, np.int64)
    position[sequence] = np.arange(graph.num_nodes)
    busiest = int(np.argmax(tr.result.peak))
    times, live = tr.memory[busiest]
    at = float(times[int(np.argmax(live))]) if len(times) else 0.0
    peak_position = int(np.searchsorted(tr.op_start[sequence], at, side="right"))
    home_hold, home_last, remote_hold, remote_from = _holding_spans(
        graph, placement, position, d, tr, tr.op_start[sequence])
    return _Incumbent(fields=fields, sequence=sequence, position=position,
                      peak_position=peak_position, home_hold=home_hold, home_last=home_last,
                      remote_hold=remote_hold, remote_from=remote_from,
                      starts=tr.op_start[sequence], memory=tr.memory, version=version)


def _holding_spans(graph, placement: np.ndarray, position: np.ndarray, d: int, tr,
                   starts: np.ndarray):
    """Per tensor, in sequence positions (`starts`: the sequence's start times): the last
    op holding its home copy (its producer, local consumers, alias children made there:
    `home_hold`), that or the last op started before its last transfer out ended
    (`home_last`), per device the last op holding a transferred copy there (`remote_hold`,
    -1 where there is none) and the first op started once that transfer began
    (`remote_from`). Tensors nobody reads are never freed (inf)."""
    t = graph.num_tensors
    producer = np.asarray(graph.tensor_producer, np.int64)
    counts = np.diff(np.asarray(graph.consumer_ptr, np.int64))
    edge_tensor = np.repeat(np.arange(t), counts)
    consumer = np.asarray(graph.consumer, np.int64)
    edge_device = placement[consumer]
    edge_pos = position[consumer].astype(np.float64)
    home = placement[producer]
    last_on = np.full((t, d), -1.0)
    np.maximum.at(last_on, (edge_tensor, edge_device), edge_pos)
    rows = np.arange(t)
    home_hold = np.maximum(position[producer].astype(np.float64), last_on[rows, home])
    home_hold[counts == 0] = np.inf
    remote_hold = last_on.copy()
    remote_hold[rows, home] = -1.0
    # an alias child holds its source where it is made: at home (same device) or in the
    # transferred copy there; children are made after their sources, so latest first
    alias = np.asarray(graph.tensor_alias, np.int64)
    children = np.flatnonzero(alias >= 0)
    children = children[np.argsort(-position[producer[children]], kind="stable")]
    for child in children.tolist():
        source = int(alias[child])
        k = int(placement[producer[child]])
        if k == home[source]:
            home_hold[source] = max(home_hold[source], home_hold[child])
        else:
            remote_hold[source, k] = max(remote_hold[source, k], home_hold[child])
    home_last = home_hold.copy()
    remote_from = np.full((t, d), np.inf)
    if len(tr.transfer_tensor):
        tensor = np.asarray(tr.transfer_tensor, np.int64)
        ended = np.searchsorted(starts, tr.transfer_end, side="left") - 1.0
        np.maximum.at(home_last, tensor, ended)
        began = np.searchsorted(starts, tr.transfer_start, side="left").astype(np.float64)
        np.minimum.at(remote_from, (tensor, np.asarray(tr.transfer_dst, np.int64)), began)
    return home_hold, home_last, remote_hold, remote_from


@dataclass
class _Window:
    """A window as a graph of its own, and the way back to the whole graph."""

    problem: Problem          # the window graph on the same devices, peak memory
    ops: np.ndarray           # whole-graph ids of the window's ops (window ids 0..w-1)
    hint: tuple               # (placement, priority, transfer) of the incumbent's window
    outside: np.ndarray       # [d] bytes device k peaks at outside the window, less the
    #                           persistent memory of the window's ops there (-inf: none)


def _window_graph(problem: Problem, inc: _Incumbent, first: int, last: int,
                  reorder: bool = False) -> _Window:
    """The window `sequence[first:last]` as a graph (this module's docstring, step 2);
    `reorder`: every window op keeps its device, only their order is free."""
    from regal.graph_builder import GraphBuilder
    from regal.sim import DeviceSpec

    graph, d = problem.graph, problem.devices.count
    placement = np.asarray(inc.fields["placement"], np.int64)
    ops = inc.sequence[first:last]
    w = len(ops)
    index = np.full(graph.num_nodes, -1, np.int64)
    index[ops] = np.arange(w)
    position = inc.position
    before = position < first
    inside = index >= 0
    producer = np.asarray(graph.tensor_producer, np.int64)
    size = np.asarray(graph.tensor_size, np.int64)
    alias = np.asarray(graph.tensor_alias, np.int64)
    counts = np.diff(np.asarray(graph.consumer_ptr, np.int64))
    edge_tensor = np.repeat(np.arange(graph.num_tensors), counts)
    consumer = np.asarray(graph.consumer, np.int64)
    read_inside = np.zeros(graph.num_tensors, bool)
    read_inside[edge_tensor[inside[consumer]]] = True
    made_before = before[producer]
    boundary = np.flatnonzero(made_before & read_inside)   # made before W, read by W

    # what each device holds through the window whatever W does
    base = np.bincount(placement[~inside], weights=graph.persistent_memory[~inside],
                       minlength=d).astype(np.float64)
    outside = made_before & ~read_inside
    home = placement[producer]
    own = np.where(alias < 0, size, 0)
    live_home = outside & (inc.home_last >= first)
    base += np.bincount(home[live_home], weights=own[live_home], minlength=d)
    live_remote = outside[:, None] & (inc.remote_hold >= first) & (inc.remote_from <= first)
    base += (live_remote * size[:, None]).sum(axis=0)

    b = GraphBuilder()
    for i, v in enumerate(ops.tolist()):
        b.add_op(f"w{i}", float(graph.compute_cost[v]),
                 temporary_memory=int(graph.temporary_memory[v]),
                 persistent_memory=int(graph.persistent_memory[v]))
    source = [b.add_op(f"source{k}", 0.0, persistent_memory=int(base[k])) for k in range(d)]
    sink = [b.add_op(f"sink{k}", 0.0) for k in range(d)]
    # an anchor per device feeds its source an empty tensor, which the source's alias
    # outputs alias: an alias costs nothing at home (its source is held, and counted, apart)
    # and its own size where it is transferred, as in the whole graph
    anchor = [b.add_op(f"anchor{k}", 0.0) for k in range(d)]
    for k in range(d):
        b.add_output(anchor[k], 0)
        b.add_input(source[k], anchor[k], 0)
    # the copies of each boundary tensor live when the window starts (home, and those
    # transferred already), each made by its device's source; a window op reads the copy on
    # its own device where there is one, else the home copy (or another live one)
    source_port = {}   # (tensor, device) -> output port of that device's source
    for t in boundary.tolist():
        k = int(home[t])
        copies = [j for j in range(d) if j != k and inc.remote_from[t, j] <= first
                  and inc.remote_hold[t, j] >= first]
        if inc.home_last[t] >= first or not copies:
            source_port[t, k] = b.add_output(source[k], int(size[t]), 0 if alias[t] >= 0 else -1)
        for j in copies:
            source_port[t, j] = b.add_output(source[j], int(size[t]))

    def copy_for(t: int, device: int) -> tuple[int, int]:
        """(source op, port) of the live copy of boundary tensor t that `device` reads."""
        for j in (device, int(home[t]), *range(d)):
            if (t, j) in source_port:
                return source[j], source_port[t, j]
        raise AssertionError("a boundary tensor without a copy")

    for i, v in enumerate(ops.tolist()):
        inputs = [int(t) for t in graph.inputs(v)]
        for t in inputs:
            p = int(producer[t])
            if inside[p]:
                b.add_input(i, int(index[p]), int(t - graph.output_ptr[p]))
            else:
                b.add_input(i, *copy_for(t, int(placement[v])))
        for t in graph.outputs(v).tolist():
            b.add_output(i, int(size[t]), inputs.index(int(alias[t])) if alias[t] >= 0 else -1)
    # sinks: what W touches that is still needed on k after the window
    needed = set()
    for t in boundary.tolist():
        if inc.home_hold[t] >= last:
            needed.add((t, int(home[t])))
        for k in np.flatnonzero(inc.remote_hold[t] >= last).tolist():
            needed.add((t, k))
    late = ~before & ~inside
    made_inside = inside[producer[edge_tensor]] & late[consumer]
    for t, k in zip(edge_tensor[made_inside].tolist(), placement[consumer[made_inside]].tolist()):
        needed.add((t, k))
    for t, k in sorted(needed):
        p = int(producer[t])
        if inside[p]:
            b.add_input(sink[k], int(index[p]), int(t - graph.output_ptr[p]))
        else:
            b.add_input(sink[k], *copy_for(t, k))
    for i, v in enumerate(ops.tolist()):
        for u in graph.control_inputs(v).tolist():
            if inside[u]:
                b.add_control(int(index[u]), i)
        for k in range(d):
            b.add_control(source[k], i)
            b.add_control(i, sink[k])
    # placement constraints: a group reaching outside W, or a pin, keeps its device
    leader, pinned = _colocation(graph)
    group_outside = np.zeros(graph.num_nodes, bool)
    np.logical_or.at(group_outside, leader, ~inside)
    for i, v in enumerate(ops.tolist()):
        if reorder or pinned[v] >= 0 or group_outside[leader[v]]:
            b.pin(i, int(placement[v]))
        elif leader[v] != v:
            b.colocate(i, int(index[leader[v]]))
    for k in range(d):
        b.pin(source[k], k)
        b.pin(sink[k], k)
        b.pin(anchor[k], k)
    sub = b.build()
    devices = DeviceSpec(d, None, problem.devices.bandwidth, problem.devices.latency)
    order = np.concatenate([np.arange(w + 2 * d, w + 3 * d), np.arange(w, w + d),
                            np.arange(w), np.arange(w + d, w + 2 * d)])
    from regal.decode import order_priority
    priority = order_priority(order)
    hint_placement = np.concatenate([placement[ops], np.arange(d), np.arange(d),
                                     np.arange(d)])
    return _Window(Problem(sub, devices, "peak_memory"), ops,
                   (hint_placement.astype(np.int32), priority, priority),
                   _outside_peaks(graph, inc, placement, ops, first, last, d))


def _outside_peaks(graph, inc: _Incumbent, placement, ops, first: int, last: int, d: int
                   ) -> np.ndarray:
    """Per device, the incumbent's peak before the window's first op starts and from the
    op after it on, less the persistent memory of the window's ops there: what the device
    holds then whatever the window does, but for the persistent memory the window moves
    onto or off it (why: a window op moved to another device takes its persistent memory
    along to that device's own peak, which may lie far from the window)."""
    t0 = inc.starts[first]
    t1 = inc.starts[last] if last < len(inc.starts) else np.inf
    mine = np.bincount(placement[ops], weights=graph.persistent_memory[ops], minlength=d)
    outside = np.full(d, -np.inf)
    for k in range(d):
        times, live = inc.memory[k]
        if not len(times):
            continue
        held = (times < t0) | (times >= t1)
        at_end = int(np.searchsorted(times, t1, side="left")) - 1
        if np.isfinite(t1) and at_end >= 0:
            held[at_end] = True              # the value that holds when the window ends
        if held.any():
            outside[k] = float(live[held].max()) - float(mine[k])
    return outside


def _whole(inc: _Incumbent, window: _Window, placement, priority, transfer,
           device: int | None = None) -> tuple:
    """A window answer as a whole-graph solution: the window's ops take its devices and, of
    the priority values they held in the incumbent, the ones its order gives them. With
    `device`, only the order of the window's ops on that device (in the incumbent) changes,
    and every op keeps its device."""
    ops = window.ops
    full_placement = np.asarray(inc.fields["placement"]).copy()
    chosen = np.arange(len(ops))
    if device is None:
        full_placement[ops] = np.asarray(placement)[:len(ops)]
    else:
        chosen = np.flatnonzero(full_placement[ops] == device)
    full_priority = np.asarray(inc.fields["priority"], np.float64).copy()
    full_transfer = np.asarray(inc.fields["transfer_priority"], np.float64).copy()
    mine_ops = ops[chosen]
    for full, mine in ((full_priority, priority), (full_transfer, transfer)):
        values = np.sort(full[mine_ops])                                # ascending
        ranked = np.lexsort((chosen, np.asarray(mine)[chosen]))          # lowest first
        full[mine_ops[ranked]] = values
    return full_placement, full_priority, full_transfer


def _floor_at_outside_peaks(handles, window: "_Window") -> None:
    """The window model's peak is at least each device's peak outside the window plus the
    persistent memory of the window's ops placed there (`_outside_peaks`)."""
    graph = window.problem.graph
    unit = handles.memory_unit
    w = len(window.ops)
    persistent = np.asarray(graph.persistent_memory[:w], np.int64) // unit
    for k, outside in enumerate(window.outside):
        if not np.isfinite(outside):
            continue
        moved = sum(int(persistent[v]) * handles.x[v][k] for v in range(w) if persistent[v])
        handles.model.add(handles.target >= int(math.ceil(outside / unit)) + moved)


class _WindowAnswers(cp_model.CpSolverSolutionCallback):
    """Keeps each window incumbent that beats the hint in the window model, as
    list-scheduler inputs (`run._priorities`); they are scored on the whole graph after the
    solve, best in the model first (`_solve_window`). Unlike `run._Rescorer` nothing stops
    at the window model's bound: that bound is on the proxy, not on the whole graph."""

    def __init__(self, handles, graph, d: int, hint_objective):
        super().__init__()
        self.handles, self.graph, self.d = handles, graph, d
        self.hint_objective = hint_objective
        self.answers = []

    def on_solution_callback(self) -> None:
        from baselines.cpsat.run import _priorities

        if self.hint_objective is None or self.objective_value < self.hint_objective:
            self.answers.append(_priorities(self, self.handles, self.graph, self.d))


def _solve_window(window: "_Window", limit: float, reproducible: bool, seed: int,
                  num_workers: int, rescore, left: int):
    """Builds the window model (`run._build`), hints it with the incumbent's window
    (`hint._add_hint`) and solves it for `limit` seconds, every better incumbent re-scored
    on the whole graph, the best in the model first, at most `left` of them: (CP-SAT
    status, the best by the simulator or None, how many were scored)."""
    from baselines.cpsat.hint import _add_hint
    from baselines.cpsat.run import _build, _solve_model
    from regal.sim import trace

    began = time.perf_counter()
    sub = window.problem
    placement, priority, transfer = window.hint
    hint_trace = trace(sub.graph, sub.devices, placement, priority, transfer)
    result = hint_trace.result
    hint = Solution(placement=placement, priority=priority, transfer_priority=transfer,
                    value=float(result.objective()), peak=result.peak,
                    makespan=result.makespan, feasible=True)
    handles = _build(sub, "auto")
    _floor_at_outside_peaks(handles, window)
    share = 0.2 * limit
    wall = 3 * limit + 10 if reproducible else limit
    hint_objective, spent = _add_hint(handles, sub, hint, hint_trace, share,
                                      wall if reproducible else share, seed)
    answers = _WindowAnswers(handles, sub.graph, sub.devices.count, hint_objective)
    floor = 0.1 * limit
    _, status = _solve_model(handles, max(limit - spent, floor),
                             max(wall - (time.perf_counter() - began), floor), seed,
                             num_workers, answers)
    scored = []
    devices = np.unique(window.hint[0][:len(window.ops)]).tolist()
    for placement, priority, transfer in answers.answers[::-1]:
        # the answer, its order alone on the window's own devices, and its order on one
        # device alone: the list scheduler replays an order faithfully where the transfers
        # and the other devices' orders stay (a changed order elsewhere shifts when ops
        # become ready there, and so what runs first)
        variants = [(placement, priority, transfer, None)]
        if not np.array_equal(placement, window.hint[0]):
            variants.append((window.hint[0], priority, transfer, None))
        if len(devices) > 1:
            variants += [(placement, priority, transfer, k) for k in devices]
        for variant in variants[:left - len(scored)]:
            scored.append(rescore(*variant))
        if len(scored) >= left:
            break
    best = None
    for fields in scored:
        if best is None or _better(fields, best):
            best = fields
    return status, best, len(scored)


def _pick_window(rng: np.random.Generator, problem: Problem, inc: _Incumbent, size: int
                 ) -> tuple[int, int, str]:
    """(first, last, rule): a window of `size` ops of the sequence (this module's
    docstring, "Neighbourhoods")."""
    n = problem.graph.num_nodes
    size = min(size, n)
    rule = _RULES[int(rng.choice(len(_RULES), p=[p for _, p in _RULES]))][0]
    centre = inc.peak_position
    if rule == "lifetime":
        # copies live at the peak on the busiest device, whose lifetime fits a window
        placement = np.asarray(inc.fields["placement"])
        busiest = int(np.argmax(inc.fields["peak"]))
        producer = problem.graph.tensor_producer
        born = inc.position[producer]
        own = np.where(problem.graph.tensor_alias < 0, problem.graph.tensor_size, 0)
        live = (placement[producer] == busiest) & (born < centre) \
            & (inc.home_hold >= centre) & (inc.home_hold - born < _MAX_WINDOW) & (own > 0)
        candidates = np.flatnonzero(live)
        if len(candidates):
            weights = own[candidates].astype(np.float64)
            t = int(rng.choice(candidates, p=weights / weights.sum()))
            lo, hi = int(born[t]), int(inc.home_hold[t]) + 1
            pad = max(0, size - (hi - lo))
            lo = max(0, lo - int(rng.integers(0, pad + 1)))
            hi = min(n, max(hi, lo + size))
            return lo, hi, rule
        rule = "peak"
    if rule == "random":
        lo = int(rng.integers(0, max(1, n - size + 1)))
        return lo, lo + size, rule
    lo = centre - int(round(size * rng.uniform(0.3, 0.9)))
    lo = min(max(0, lo), max(0, n - size))
    return lo, lo + size, "peak"


def _start(problem: Problem, initial, budget: int, seed: int) -> tuple[dict, int, str]:
    """(fields, evaluations, name) of the start: the best of `initial` (a Solution or
    several), else the best cheap heuristic (`hint.best_heuristic`: single device, m-topo,
    gp-dfs, m-etf on small graphs)."""
    from baselines.cpsat.hint import best_heuristic, rescored

    if initial is not None:
        found = rescored(problem, initial)
        best = None
        for solution, fields in found:
            if best is None or _better(fields, best[0]):
                best = (fields, solution.method or "initial")
        return best[0], len(found), best[1]

    hint, used, _ = best_heuristic(problem, max(1, min(budget - 2, 4)), seed)
    if hint is None:
        from regal.optimizers import single_device
        hint, used = single_device(problem), used + 1
    fields = score(problem, hint.placement, hint.priority, hint.transfer_priority)
    return fields, used + 1, hint.method or "heuristic"


def solve(problem: Problem, budget: int, seed: int = 0, *, initial=None,
          time_limit: float | None = None, window_time: float = 2.0,
          window: int = _START_WINDOW, max_window: int = _MAX_WINDOW,
          reproducible: bool = False, num_workers: int = 1, should_stop=None,
          progress=None) -> Solution:
    """Large-neighbourhood search with CP-SAT from `initial` (or the best cheap heuristic),
    at most `budget` whole-graph evaluations and `time_limit` wall seconds (this module's
    docstring). `window_time`: CP-SAT's limit per window (wall seconds; deterministic time
    too, and only that with `reproducible`, so a seed always gives the same run);
    `window`: the first window's size in ops, adapted between `_MIN_WINDOW` and
    `max_window`. `extra` records the windows tried, improved and proven, the window size
    reached and what each rule gained."""
    check_budget(budget)
    if problem.objective != "peak_memory":
        raise ValueError(f"cpsat-lns: objective {problem.objective!r} is not supported "
                         "(peak_memory only: the window model is the peak-memory model)")
    if not window_time > 0:
        raise ValueError(f"window_time must be positive, got {window_time}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    if int(max_window) < _MIN_WINDOW or int(window) < 1:
        raise ValueError(f"window sizes: expected window >= 1 and max_window >= "
                         f"{_MIN_WINDOW}, got {window} and {max_window}")
    began = time.perf_counter()
    deadline = math.inf if time_limit is None else began + float(time_limit)
    rng = np.random.default_rng(seed)
    fields, used, start_name = _start(problem, initial, budget, seed)
    start_value = float(fields["value"])
    inc = _read_incumbent(problem, fields, 0)
    used += 1
    size = int(min(max(window, _MIN_WINDOW), max_window, problem.graph.num_nodes))
    stats = {"windows": 0, "improved": 0, "proven": 0, "rules": {}, "cpsat_seconds": 0.0}
    tried = {}   # (incumbent version, first, last, reorder) -> solves without a gain

    def stop() -> bool:
        return used >= budget or time.perf_counter() >= deadline - 0.05 \
            or (should_stop is not None and should_stop())

    while not stop():
        first, last, rule = _pick_window(rng, problem, inc, size)
        reorder = bool(rng.random() < _REORDER_SHARE)
        if tried.get((inc.version, first, last, reorder), 0) >= _TRIES:
            first, last, rule = _pick_window(rng, problem, inc, size)
            if tried.get((inc.version, first, last, reorder), 0) >= _TRIES:
                used += 1  # a repeat costs one evaluation, so a budget always ends
                continue
        window_graph = _window_graph(problem, inc, first, last, reorder)
        limit = max(0.05, min(float(window_time), deadline - time.perf_counter()))
        clock = time.perf_counter()
        status, best, scored = _solve_window(
            window_graph, limit, reproducible, int(rng.integers(0, 2**31 - 1)), num_workers,
            lambda *answer: score(problem, *_whole(inc, window_graph, *answer)),
            max(1, min(_RESCORES, budget - used)))
        stats["cpsat_seconds"] += time.perf_counter() - clock
        used += max(1, scored)
        stats["windows"] += 1
        rule_stats = stats["rules"].setdefault(rule + ("/reorder" if reorder else ""),
                                               {"windows": 0, "improved": 0})
        rule_stats["windows"] += 1
        proven = status == cp_model.OPTIMAL
        stats["proven"] += int(proven)
        if best is not None and _better(best, inc.fields) and used < budget:
            inc = _read_incumbent(problem, best, inc.version + 1)
            used += 1
            stats["improved"] += 1
            rule_stats["improved"] += 1
        else:
            key = (inc.version, first, last, reorder)
            tried[key] = tried.get(key, 0) + 1
        size = int(min(max_window, problem.graph.num_nodes, math.ceil(size * _GROW))) \
            if proven else max(_MIN_WINDOW, int(size * _SHRINK))
        if progress is not None:
            progress(used, inc.value)
    extra = {**stats, "start": start_name, "start_value": start_value, "window_size": size,
             "time_limit": time_limit, "window_time": float(window_time),
             "stopped_by": ("budget" if used >= budget else "time_limit"
                            if time.perf_counter() >= deadline - 0.05 else "should_stop"),
             "wall_seconds": time.perf_counter() - began}
    answer = {k: inc.fields[k] for k in ("placement", "priority", "transfer_priority", "value",
                                         "peak", "makespan", "feasible", "overflow",
                                         "objective")}
    return Solution(**answer, evaluations=used, method="cpsat-lns", seed=seed,
                    extra=extra)
