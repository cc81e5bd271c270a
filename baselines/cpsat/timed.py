"""The timed formulation of the peak-memory model (`build_model(problem, timed=True)`): the
cumulative model on the simulator's own durations, exactly, with the list scheduler's eager
starts (`add_eager_starts`).

Why: the other two formulations run one activity at a time (`model`'s docstring), so their
optimum drops the timing: on small graphs it is often far below anything the simulator can
reach (random_infer_40 at 2 devices: a sequence of peak 612 whose re-score is 846; this
model found 623 in five minutes, re-scored 623), and a solution they find may re-score
much worse. Here devices and
channels run in parallel on the real durations and never idle while work is ready, so a
solution's re-score is its model value in practice, and CP-SAT searches the simulator's
own schedules: an exact improving phase for small graphs, and still a proven lower bound.

Eager starts, as constraints every simulated schedule meets (SIM_RULES 2, 3, 5, 7):

- ready[v], the instant op v becomes ready, is the latest of: each control predecessor's end;
  each distinct input's arrival on v's device (its producer's end when produced there, else
  the end of its transfer to that device);
- (busy) if v starts after ready[v], its device is running another op u at ready[v]
  (start[u] <= ready[v] < end[u]): an idle device starts a ready op at once;
- (no gap) for every other op w of v's device that ends in [ready[v], start[v]), some op of
  that device starts at end[w]: the device never idles while v waits. Together the two say
  the device is busy throughout [ready[v], start[v]);
- the same two for transfers on a channel (src, dst), which are ready when their producer
  ends; and one producer's tensors cross a channel in tensor id order (they share its
  transfer priority and are ready at once).

Simultaneous events follow SIM_RULES 7: finishes first, then starts, so the half-open
intervals [start, end) of the constraints hold at ties. Durations are the simulator's, in
ticks of 1 / `scale` µs where every op's cost and every transfer time is an integer number of
ticks (`exact_ticks`; the formulation refuses graphs where none up to 1e9 ticks per µs is):
the simulator's float times are those integers up to rounding, and a tie broken either way
by rounding is a schedule this model also allows (both choices are non-delay). What the
model still relaxes: priorities are free per decision (the simulator keeps one order per
device, and one order of the producers' transfers shared by every channel), the frees at an
instant of a zero-duration op, and alias holds and late frees (ends may only be later, as in
the cumulative formulation).
tests/test_cpsat_timed.py fixes the model to simulated schedules of random graphs (every one
must be a solution, of model peak at most the simulator's) and checks its optimum against an
exhaustive search.

Size: O(n^2) pair literals and O(n^3) literals in the no-gap clauses for ops (the same for
the transfers into one device): 1 s to build at 70 ops, 26 s at 189 ops, so graphs above
`MAX_OPS` ops are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

MAX_OPS = 200            # larger graphs are refused: the build grows as n^3 (26 s, 1.8 M
                         # constraints at 189 ops and 4 devices)
_MAX_SCALE = 10**9       # ticks per µs tried at most (powers of ten)
_EXACT = 1e-6            # a duration is a whole number of ticks to within this (float noise)


def exact_ticks(problem) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(op ticks, transfer ticks, ticks per µs): the least power of ten per µs in which
    every op's compute cost and every tensor's transfer time is a whole number of ticks,
    or None when none up to `_MAX_SCALE` is."""
    op = np.asarray(problem.graph.compute_cost, np.float64)
    tr = np.asarray(problem.devices.transfer_time(problem.graph.tensor_size), np.float64)
    scale = 1
    while scale <= _MAX_SCALE:
        a, b = op * scale, tr * scale
        if np.all(np.abs(a - np.round(a)) <= _EXACT) and np.all(np.abs(b - np.round(b)) <= _EXACT):
            return np.round(a).astype(np.int64), np.round(b).astype(np.int64), scale
        scale *= 10
    return None


def timed_ticks(problem) -> tuple[np.ndarray, np.ndarray, int]:
    """`exact_ticks` of a problem the timed formulation can model; a ValueError that says
    why otherwise (another objective, more than `MAX_OPS` ops, inexact durations)."""
    if problem.objective != "peak_memory":
        raise ValueError(f"formulation timed: models peak memory only, not {problem.objective}")
    n = problem.graph.num_nodes
    if n > MAX_OPS:
        raise ValueError(f"formulation timed: graphs of at most {MAX_OPS} ops (its size grows "
                         f"as ops^3); this one has {n}: use formulation auto")
    ticks = exact_ticks(problem)
    if ticks is None:
        raise ValueError("formulation timed: the ops' costs and transfer times are not whole "
                         "numbers of ticks of 1e-9 µs or coarser")
    return ticks


@dataclass
class EagerInputs:
    """What `add_eager_starts` reads of the built model."""

    graph: object
    d: int
    op_dur: np.ndarray
    tr_dur: np.ndarray
    start: list                  # start[v]: int var
    transfer_start: dict         # (tensor, k) -> int var
    transfer_present: dict       # (tensor, k) -> bool var
    same: Callable               # same(u, v) -> literal "u and v on one device"
    x: list                      # x[v][k]


def add_eager_starts(m, inputs: EagerInputs, horizon: int) -> None:
    """Adds the module docstring's eager-start constraints for ops and transfers."""
    graph, d = inputs.graph, inputs.d
    ready = _ready_times(m, inputs, horizon)
    _eager(m, list(range(graph.num_nodes)), inputs.start, inputs.op_dur, ready,
           present=lambda v: None, together=inputs.same, label="op")
    if d == 1:
        return
    producer = graph.tensor_producer
    for k in range(d):
        keys = [key for key in inputs.transfer_start if key[1] == k]
        if len(keys) < 2:
            continue
        start = {key: inputs.transfer_start[key] for key in keys}
        duration = {key: int(inputs.tr_dur[key[0]]) for key in keys}
        src_end = {key: inputs.start[int(producer[key[0]])]
                   + int(inputs.op_dur[int(producer[key[0]])]) for key in keys}

        def together(a, b):
            pa, pb = int(producer[a[0]]), int(producer[b[0]])
            return None if pa == pb else inputs.same(pa, pb)

        _eager(m, keys, start, duration, src_end,
               present=lambda key: inputs.transfer_present[key], together=together,
               label=f"tr{k}_")
        # one producer's tensors share its transfer priority and are ready together, so a
        # channel sends them by tensor id (SIM_RULES 5)
        by_producer: dict = {}
        for key in sorted(keys):
            by_producer.setdefault(int(producer[key[0]]), []).append(key)
        for group in by_producer.values():
            for a, b in zip(group, group[1:]):
                m.add(start[b] >= start[a] + duration[a]).only_enforce_if(
                    [inputs.transfer_present[a], inputs.transfer_present[b]])


def _ready_times(m, inputs: EagerInputs, horizon: int) -> list:
    """ready[v] (an int var, a linear expression or 0): when v's inputs are all on its
    device and its control predecessors have ended."""
    graph, d = inputs.graph, inputs.d
    start, op_dur, x = inputs.start, inputs.op_dur, inputs.x
    producer = graph.tensor_producer
    ready = []
    for v in range(graph.num_nodes):
        terms = [start[int(u)] + int(op_dur[int(u)]) for u in graph.control_inputs(v)]
        for t in sorted(set(int(t) for t in graph.inputs(v))):
            p = int(producer[t])
            produced = start[p] + int(op_dur[p])
            if d == 1:
                terms.append(produced)
                continue
            arrival = m.new_int_var(0, horizon, f"arrival{t}_{v}")
            m.add(arrival == produced).only_enforce_if(inputs.same(p, v))
            for k in range(d):
                if (t, k) in inputs.transfer_start:
                    m.add(arrival == inputs.transfer_start[t, k] + int(inputs.tr_dur[t])
                          ).only_enforce_if([x[v][k], x[p][k].Not()])
            terms.append(arrival)
        if not terms:
            ready.append(0)
        elif len(terms) == 1:
            ready.append(terms[0])
        else:
            r = m.new_int_var(0, horizon, f"ready{v}")
            m.add_max_equality(r, terms)
            ready.append(r)
    return ready


def _eager(m, items: list, start, duration, ready, present, together, label: str) -> None:
    """Busy and no-gap constraints for `items` sharing one resource when
    `together(a, b)` (a literal, or None: always) and both are present (`present(a)`: a
    literal, or None: always)."""
    def lits(*keys):
        out = []
        for key in keys:
            lit = present(key)
            if lit is not None:
                out.append(lit)
        return out

    def pair(a, b):
        lit = together(a, b)
        return ([] if lit is None else [lit]) + lits(a, b)

    starts_at: dict = {}

    def start_at(a, b):      # a starts at b's end, on b's resource
        if (a, b) not in starts_at:
            lit = m.new_bool_var(f"{label}at_{a}_{b}")
            m.add(start[a] == start[b] + int(duration[b])).only_enforce_if(lit)
            for need in pair(a, b):
                m.add_implication(lit, need)
            starts_at[a, b] = lit
        return starts_at[a, b]

    positive = [a for a in items if int(duration[a]) > 0]
    for a in items:
        absent = [lit.Not() for lit in lits(a)]
        now = m.new_bool_var(f"{label}now_{a}")
        m.add(start[a] <= ready[a]).only_enforce_if(now)
        busy = []
        for b in positive:
            if b == a:
                continue
            lit = m.new_bool_var(f"{label}busy_{b}_{a}")
            m.add(start[b] <= ready[a]).only_enforce_if(lit)
            m.add(start[b] + int(duration[b]) >= ready[a] + 1).only_enforce_if(lit)
            for need in pair(a, b):
                m.add_implication(lit, need)
            busy.append(lit)
        m.add_bool_or(absent + [now] + busy)
        for w in items:
            if w == a:
                continue
            w_end = start[w] + int(duration[w])
            before = m.new_bool_var(f"{label}before_{w}_{a}")       # w ends before a is ready
            m.add(w_end + 1 <= ready[a]).only_enforce_if(before)
            after = m.new_bool_var(f"{label}after_{w}_{a}")         # ... or once a started
            m.add(w_end >= start[a]).only_enforce_if(after)
            apart = [lit.Not() for lit in pair(a, w)]
            m.add_bool_or(apart + [before, after]
                          + [start_at(u, w) for u in items if u != w and u != a])
