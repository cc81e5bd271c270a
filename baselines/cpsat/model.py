"""The CP-SAT model of placement, per-device order and memory: what it means, and what its
two formulations (`cumulative`, `sequence`) share (the handles a solution is read from,
memory units and ticks, placement variables, a redundant bound).

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
  the list scheduler itself: start times are free, so a device may stay idle with ready work
  and a transfer may start after its producer has ended on an idle channel (which the
  simulator never does: tests/test_exact.py meets both on 7-op graphs).
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

The timed formulation (`timed`'s docstring; `formulation="timed"`, never picked by "auto")
is a third, tighter relaxation of the peak-memory objective: the cumulative model on the
simulator's exact durations, devices and channels in parallel, with eager starts, and none
of the one-at-a-time sequencing below.

Two formulations of the one-at-a-time peak-memory model: `sequence` (small graphs;
activities x tensors below `run._SEQUENCE_MAX`) writes device k's memory during activity b
as a sum of boolean "item i is live at b" literals over pairwise order literals, which
CP-SAT's clause learning proves quickly; `cumulative` (larger graphs, and the makespan mode)
uses optional intervals and one cumulative constraint per device, whose size is linear in
the graph (its presolve skips probing, which costs seconds before the hint is even
reported). Redundant bounds: the peak covers every op's inputs + outputs + temporaries and
every device's persistent memory + unconsumed outputs.

Symmetric devices (same limits, no pins) are interchangeable, so devices are numbered by
first use along the topological order (value precedence: device k > 0 takes an op only
after an earlier op took device k - 1; a canonical relabelling, and the hint is relabelled
to match). Peak mode adds time windows: in the unit-slot sequence an op's slot is at least
its number of strict ancestors and at most the horizon less its strict descendants
(`_time_windows`). Both, like the lower bound `method` puts on the peak, remove no
serialised simulator schedule up to relabelling, so the model's bound stays a proven bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from regal.optimizers import Problem
from regal.sim import ranking_limits

_MAX_TICKS = 2_000_000
_WINDOW_MAX_OPS = 3000   # time windows need a bitset of descendants per op


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
    # moves a whole group together): devices numbered by first use along the topological
    # order, so device k > 0 takes an op only after some earlier op took device k - 1
    # (value precedence; `hint._canonical_labels` relabels the hint the same way)
    if _symmetric(problem):
        used = None  # used[k]: some op up to this position is on device k
        for pos, v in enumerate(graph.topo_order):
            for k in range(pos + 1, d):
                m.add(x[v][k] == 0)
            if used is not None:
                for k in range(1, min(pos, d - 1) + 1):
                    m.add_implication(x[v][k], used[k - 1])
            if pos + 1 >= n:
                break
            now = []
            for k in range(d):
                if k > pos:
                    now.append(None)       # no op up to here can be on k
                    continue
                if used is None or used[k] is None:
                    now.append(x[v][k])
                    continue
                lit = m.new_bool_var(f"used{pos}_{k}")
                m.add_bool_or([used[k], x[v][k]]).only_enforce_if(lit)
                m.add_implication(used[k], lit)
                m.add_implication(x[v][k], lit)
                now.append(lit)
            used = now
    return x


def _time_windows(m, start: list, graph, horizon: int) -> None:
    """Redundant, for the unit-slot (peak-memory) models, where every activity has a slot of
    its own in 0..horizon-1: an op starts after each of its strict ancestors and before each
    of its strict descendants, so ancestors(v) <= start[v] <= horizon - 1 - descendants(v)
    (ASAP / ALAP positions). Skipped above `_WINDOW_MAX_OPS` ops (a bitset per op)."""
    n = graph.num_nodes
    if n > _WINDOW_MAX_OPS:
        return
    ancestors, descendants = _ancestor_counts(graph)
    for v in range(n):
        lo, hi = int(ancestors[v]), horizon - 1 - int(descendants[v])
        if lo > 0:
            m.add(start[v] >= lo)
        if hi < horizon - 1:
            m.add(start[v] <= hi)


def _ancestor_counts(graph) -> tuple[np.ndarray, np.ndarray]:
    """(strict ancestors, strict descendants) of every op, data and control edges."""
    n = graph.num_nodes
    words = (n + 63) // 64
    below = np.zeros((n, words), np.uint64)   # descendants as bitsets
    bit = np.zeros((n, words), np.uint64)
    bit[np.arange(n), np.arange(n) // 64] = np.left_shift(np.uint64(1),
                                                         (np.arange(n) % 64).astype(np.uint64))
    for u in graph.topo_order[::-1]:
        for w in graph.successors(int(u)):
            below[u] |= below[w] | bit[w]
    counts = np.unpackbits(below.view(np.uint8), axis=1).sum(axis=1)
    above = np.zeros(n, np.int64)
    for u in range(n):
        rows = np.unpackbits(below[u].view(np.uint8), bitorder="little")[:n]
        above += rows
    return above, counts.astype(np.int64)


def _final_state_bound(m, peak, persistent, x, graph, size, d: int) -> None:
    """Redundant: the last activity on k sees k's persistent memory and every graph output
    produced on k (never freed); a linear bound that makes balancing them cheap to prove."""
    forever = [t for t in range(graph.num_tensors)
               if len(graph.consumers(t)) == 0 and graph.tensor_alias[t] < 0 and size[t] > 0]
    for k in range(d):
        m.add(peak >= persistent[k] + sum(int(size[t]) * x[int(graph.tensor_producer[t])][k]
                                          for t in forever))

