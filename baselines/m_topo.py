"""m-TOPO (Baechi, SoCC 2020): memory-constrained topological placement.

Why: Baechi's simplest placer and a fast, model-free baseline. Reimplemented from the
paper's description: walk the ops in topological order and fill device 0 until its memory
share is used, then device 1, and so on; the last device takes what is left. An op's memory
is what it holds statically in Baechi's accounting: persistent memory, temporary memory and
the bytes of its non-alias outputs. The share of a device is total memory / d; when that
answer does not fit the memory limits, the walk runs again with each share capped by its
device's limit and the better answer is kept. Priorities follow the same topological order.

A colocation group is placed as one unit when the walk meets its first op: its whole
memory decides where it fits, and its later ops follow it; a pinned group goes to its pin
(outside the fill).
"""

from __future__ import annotations

import numpy as np

from regal.decode import order_priority, respect_colocation
from regal.graph import op_bytes
from regal.optimizers import Problem, Solution, check_budget, limit_free_first, score

__all__ = ["solve", "place"]


def shares(graph, devices, limits=None) -> np.ndarray:
    """Per-device memory share: total / d, capped by `limits` when given."""
    d = devices.count
    share = np.full(d, op_bytes(graph).sum() / d)
    if limits is not None:
        share = np.minimum(share, limits)
    return share


def place(graph, devices, limits=None) -> np.ndarray:
    """Device of every op: consecutive runs of the topological order, one share each."""
    memory = op_bytes(graph)
    share = shares(graph, devices, limits)
    d = devices.count
    leader, pinned = graph.colocation, graph.pinned
    group_memory = np.zeros(graph.num_nodes, np.int64)  # a free op is its own group
    np.add.at(group_memory, leader, memory)
    group_device = np.full(graph.num_nodes, -1, np.int64)
    placement = np.zeros(graph.num_nodes, np.int32)
    k, used = 0, 0
    for v in graph.topo_order:
        group = leader[v]
        if group_device[group] < 0 and pinned[v] >= 0:
            group_device[group] = pinned[v]
        if group_device[group] >= 0:  # the group was placed by an earlier op, or pinned
            placement[v] = group_device[group]
            continue
        # the next device while this one is full; one whose share is 0 takes nothing
        while k < d - 1 and (used > 0 or share[k] <= 0) \
                and used + group_memory[group] > share[k]:
            k, used = k + 1, 0
        placement[v] = group_device[group] = k
        used += group_memory[group]
    return placement


def solve(problem: Problem, budget: int, seed: int = 0, progress=None) -> Solution:
    """Places with shares total / d, orders topologically, scores; with shares capped by the
    limits too when that misses them (`regal.optimizers.limit_free_first`; `seed` is
    unused)."""
    check_budget(budget)
    graph = problem.graph
    priority = order_priority(graph.topo_order)

    def placed(limits) -> dict:
        placement = respect_colocation(graph, place(graph, problem.devices, limits))
        return dict(score(problem, placement, priority, priority),
                    extra={"share": shares(graph, problem.devices, limits).tolist()})
    found, used = limit_free_first(problem, budget, placed)
    return Solution(**found, evaluations=used, method="m-topo", seed=seed)
