"""Seeded random computation graphs and simulator inputs for tests.

The graphs are small (1-30 ops) but dense in the cases where simulators tend to disagree:
aliases (and alias chains), control edges, temporary and persistent memory, tensors without
consumers, tensors read by several ops on several devices, zero-cost ops, zero-size tensors,
one tensor read on two ports of the same op. Op ids are not in topological order, so that
tie-breaking by id is exercised independently of the dependency order. With `integer=True`
costs, sizes, bandwidth and latency are small integers, so that events coincide in time.
"""

from __future__ import annotations

import numpy as np

from regal.graph import ComputationGraph, GraphBuilder

__all__ = ["random_graph", "random_case"]


def _cost(rng, integer: bool) -> float:
    if rng.random() < 0.2:
        return 0.0
    return float(rng.integers(1, 5)) if integer else float(rng.uniform(0.1, 10.0))


def _bytes(rng, integer: bool, zero_p: float) -> int:
    if rng.random() < zero_p:
        return 0
    return int(rng.integers(1, 5)) * 8 if integer else int(rng.integers(1, 1000))


def random_graph(rng: np.random.Generator, num_ops: int | None = None,
                 integer: bool = False) -> ComputationGraph:
    """A random DAG built with GraphBuilder; `rng` drives everything (seed it)."""
    n = int(rng.integers(1, 31)) if num_ops is None else num_ops
    rank = rng.permutation(n)          # topological rank of op id v; edges go up in rank
    by_rank = np.argsort(rank)         # op id at each rank
    b = GraphBuilder()
    for v in range(n):
        b.add_op(f"op{v}", _cost(rng, integer),
                 temporary_memory=_bytes(rng, integer, 0.6),
                 persistent_memory=_bytes(rng, integer, 0.6))
    num_outputs = rng.integers(0, 4, size=n)
    # a few "hub" producers feed many consumers (several consumers on several devices)
    hubs = set(rng.choice(n, size=min(n, 3), replace=False).tolist())
    inputs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for r in range(1, n):
        v = int(by_rank[r])
        earlier = [int(u) for u in by_rank[:r] if num_outputs[u] > 0]
        if not earlier:
            continue
        weights = np.array([4.0 if u in hubs else 1.0 for u in earlier])
        for _ in range(int(rng.integers(0, 4))):
            u = int(rng.choice(earlier, p=weights / weights.sum()))
            port = int(rng.integers(0, num_outputs[u]))
            inputs[v].append((u, port))
            if rng.random() < 0.15:
                inputs[v].append((u, port))   # the same tensor on two input ports
        rng.shuffle(inputs[v])
    for v in range(n):
        for u, port in inputs[v]:
            b.add_input(v, u, port)
        for _ in range(int(num_outputs[v])):
            alias = int(rng.integers(0, len(inputs[v]))) if inputs[v] and rng.random() < 0.35 else -1
            b.add_output(v, _bytes(rng, integer, 0.15), alias)
    for _ in range(int(rng.integers(0, n // 3 + 2))):
        if n < 2:
            break
        lo, hi = sorted(rng.choice(n, size=2, replace=False).tolist())
        b.add_control(int(by_rank[lo]), int(by_rank[hi]))
    return b.build()


def random_case(rng: np.random.Generator, max_devices: int = 8) -> dict:
    """A random graph plus devices, placement and priorities (memory_limit left None)."""
    integer = bool(rng.random() < 0.6)
    graph = random_graph(rng, integer=integer)
    n = graph.num_nodes
    count = int(rng.integers(1, max_devices + 1))
    used = int(rng.integers(1, count + 1))   # often fewer busy devices than devices
    placement = rng.integers(0, used, size=n)
    if rng.random() < 0.5:    # ties in priorities: few distinct values
        priority = rng.integers(0, 3, size=n).astype(np.float64)
        transfer_priority = rng.integers(0, 3, size=n).astype(np.float64)
    else:
        priority = rng.random(n)
        transfer_priority = rng.random(n)
    if integer:
        bandwidth = float(rng.choice([1.0, 2.0, 4.0, 8.0]))
        latency = float(rng.choice([0.0, 1.0, 2.0]))
    else:
        bandwidth = float(rng.uniform(1.0, 100.0))
        latency = float(rng.uniform(0.0, 3.0))
    return dict(graph=graph, count=count, memory_limit=None, bandwidth=bandwidth,
                latency=latency, placement=placement.astype(np.int64),
                priority=priority, transfer_priority=transfer_priority)
