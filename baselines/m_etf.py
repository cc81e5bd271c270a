"""m-ETF (Baechi, SoCC 2020): memory-constrained earliest-task-first list scheduling.

Why: Baechi's scheduling-aware placer, reimplemented from the paper's description. Ops become
ready when all their predecessors are scheduled; at every step the (ready op, device) pair
with the earliest possible start is scheduled, among devices with enough memory left for the
op. The start on device k is the later of k becoming free and every predecessor's end, plus
the transfer time (latency + size / bandwidth) of each input produced on another device
(links are assumed uncontended, as in ETF). Ties go to the op with the longer path to a sink
(its static level), then the lower op id, then the lower device.

Memory is Baechi's static accounting: an op charges its persistent and temporary memory and
its non-alias outputs to its device for good. The capacity of a device is (1 + slack) x
total / d when the objective is peak memory (so the placer balances memory) and unbounded
for makespan; when that answer does not fit the memory limits, it runs again with each
device's limit as its capacity and keeps the better answer. When no device has room for a
ready op, it may go to the devices with the most room left. Priorities follow the scheduled
starts.

Devices of different speeds (`DeviceSpec.flops`, `memory_bandwidth`): each ready op's device
is the one where it would finish first (its start there plus its time there,
`regal.sim.speeds.op_durations`; ties: the earlier start, then the lower device), and the op
scheduled next is still the one with the earliest start on its device; static levels use an
op's mean time over the devices (as HEFT's upward rank does). With equal devices this is the
rule above exactly.

Colocation groups: the first op of a group to be scheduled chooses the group's device (a
pinned group's is its pin) and every later op of the group may start only there.
"""

from __future__ import annotations

import numpy as np

from regal.decode import order_priority, respect_colocation
from regal.graph import op_bytes
from regal.optimizers import Problem, Solution, check_budget, limit_free_first, score
from regal.sim.speeds import op_durations

__all__ = ["solve", "schedule"]


def _static_level(graph, durations=None) -> np.ndarray:
    """Longest compute-cost path from each op to a sink, itself included (with device
    speeds: each op's mean time over the devices)."""
    level = np.asarray(graph.compute_cost if durations is None else durations.mean(axis=0),
                       np.float64).copy()
    for v in graph.topo_order[::-1]:
        succ = graph.successors(int(v))
        if len(succ):
            level[v] += level[succ].max()
    return level


def _input_delays(graph, devices) -> list[list[tuple[int, float]]]:
    """Per op: (predecessor, transfer time when on another device) pairs."""
    n = graph.num_nodes
    delay: list[dict[int, float]] = [dict() for _ in range(n)]
    times = devices.transfer_time(graph.tensor_size)
    for v in range(n):
        for t in set(int(t) for t in graph.inputs(v)):
            p = int(graph.tensor_producer[t])
            delay[v][p] = max(delay[v].get(p, 0.0), float(times[t]))
        for u in graph.control_inputs(v):
            delay[v].setdefault(int(u), 0.0)
    return [sorted(dl.items()) for dl in delay]


def capacities(problem: Problem, slack: float, limits=None) -> np.ndarray:
    """Each device's capacity: `limits` when given, else the limit-free capacity."""
    devices = problem.devices
    if limits is not None:
        return np.asarray(limits, np.float64)
    if problem.objective == "makespan":
        return np.full(devices.count, np.inf)
    return np.full(devices.count, (1.0 + slack) * op_bytes(problem.graph).sum() / devices.count)


def schedule(problem: Problem, slack: float = 0.1,
             limits=None) -> tuple[np.ndarray, np.ndarray]:
    """(placement, start time of every op in ETF's own schedule), for capacities `limits`
    (default: the limit-free ones)."""
    graph = problem.graph
    n, d = graph.num_nodes, problem.devices.count
    memory = op_bytes(graph)
    capacity = capacities(problem, slack, limits)
    durations = op_durations(graph, problem.devices)  # [d, n], or None: equal devices
    level = _static_level(graph, durations)
    inputs = _input_delays(graph, problem.devices)
    missing = np.diff(graph.pred_ptr).astype(np.int64)
    ready = set(int(v) for v in np.flatnonzero(missing == 0))
    free_at = np.zeros(d)
    used = np.zeros(d)
    placement = np.full(n, -1, np.int32)
    start = np.zeros(n)
    finish = np.zeros(n)
    leader = graph.colocation
    group_device = np.array(graph.pinned, np.int64)  # per leader: -1 = not decided yet
    while ready:
        best = None
        for v in ready:
            if group_device[leader[v]] >= 0:  # the group's device is decided (or pinned)
                fits = group_device[leader[v]:leader[v] + 1]
            else:
                fits = np.flatnonzero(used + memory[v] <= capacity)
                if len(fits) == 0:
                    room = capacity - used
                    fits = np.flatnonzero(room == room.max())
            chosen = None  # v's device: the earliest finish (equal devices: earliest start)
            for k in fits:
                est = free_at[k]
                for u, delay in inputs[v]:
                    est = max(est, finish[u] + (delay if placement[u] != k else 0.0))
                mine = (est, int(k)) if durations is None else \
                    (est + durations[k, v], est, int(k))
                if chosen is None or mine < chosen:
                    chosen = mine
            est, k = chosen[-2], chosen[-1]
            key = (est, -level[v], v, k)
            if best is None or key < best:
                best = key
        est, _, v, k = best
        ready.remove(v)
        placement[v], start[v] = k, est
        group_device[leader[v]] = k
        finish[v] = est + (graph.compute_cost[v] if durations is None else durations[k, v])
        free_at[k] = finish[v]
        used[k] += memory[v]
        for w in graph.successors(v):
            missing[w] -= 1
            if missing[w] == 0:
                ready.add(int(w))
    return placement, start


def _scheduled(problem: Problem, slack: float, limits) -> dict:
    graph = problem.graph
    n = graph.num_nodes
    placement, start = schedule(problem, slack, limits)
    placement = respect_colocation(graph, placement)  # already conforming: a safety net
    order = np.lexsort((np.arange(n), start))
    priority = order_priority(order)
    return score(problem, placement, priority, priority)


def solve(problem: Problem, budget: int, seed: int = 0, *, slack: float = 0.1,
          progress=None) -> Solution:
    """Schedules with m-ETF's limit-free capacities, and with the limits as capacities when
    that misses them (`regal.optimizers.limit_free_first`; `seed` is unused)."""
    check_budget(budget)
    if not slack >= 0:
        raise ValueError(f"slack must be >= 0, got {slack}")
    found, used = limit_free_first(problem, budget,
                                   lambda limits: _scheduled(problem, slack, limits))
    return Solution(**found, evaluations=used, method="m-etf", seed=seed)
