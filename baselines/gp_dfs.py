"""GP+DFS baseline: METIS partition balanced by memory, then a depth-first topological order.

Why: the REGAL paper's "graph partitioning + DFS" baseline — the classic way to split a model
across devices without a performance model. METIS (via pymetis) cuts the undirected data-flow
graph into `d` parts of near-equal memory (vertex weight = bytes an op allocates: its
temporary memory, its non-alias outputs and its persistent memory) while minimising the bytes
that cross parts (edge weight = bytes of the tensors between two ops). Priorities follow a
DFS topological order: a ready stack, so a chain is finished before another one starts,
which keeps few tensors alive at once. It never calls the model except to score its answer.

Colocation groups are partitioned as one vertex each (their ops' weights summed, edges
between groups merged), so METIS never splits one; pinned groups then go to their pin
(`regal.decode.respect_colocation`), as METIS cannot fix a vertex's part.
"""

from __future__ import annotations

import numpy as np

from regal.decode import order_priority, respect_colocation
from regal.c_output import silenced
from regal.optimizers import Problem, Solution, check_budget, score

__all__ = ["solve", "partition", "dfs_order"]

_METIS_MAX_WEIGHT = 2**24  # keep METIS's int32 sums far from overflow


def _memory_weights(graph) -> np.ndarray:
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0)
    out = np.zeros(graph.num_nodes, np.int64)
    np.add.at(out, graph.tensor_producer, own.astype(np.int64))
    return out + graph.temporary_memory.astype(np.int64) + graph.persistent_memory.astype(np.int64)


def _scaled(weights: np.ndarray, total_cap: int) -> np.ndarray:
    """Positive integers proportional to `weights` whose sum stays below `total_cap`."""
    weights = np.asarray(weights, np.float64)
    total = weights.sum()
    scale = min(1.0, total_cap / total) if total > 0 else 1.0
    return np.maximum(1, np.round(weights * scale)).astype(np.int64)


def _edges(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected producer-consumer pairs with the bytes that flow between them."""
    n = graph.num_nodes
    src, dst, w = [], [], []
    for t in range(graph.num_tensors):
        p = int(graph.tensor_producer[t])
        for c in graph.consumers(t):
            if int(c) != p:
                src.append(p)
                dst.append(int(c))
                w.append(int(graph.tensor_size[t]))
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    a, b = np.minimum(src, dst), np.maximum(src, dst)
    key = a.astype(np.int64) * n + b
    uniq, inverse = np.unique(key, return_inverse=True)
    weight = np.zeros(len(uniq), np.int64)
    np.add.at(weight, inverse, np.asarray(w, np.int64))
    return uniq // n, uniq % n, weight


def _units(graph) -> tuple[np.ndarray, int]:
    """Unit (0..u-1) of every op: one per colocation group, numbered in leader order."""
    if not graph.has_groups:
        return np.arange(graph.num_nodes), graph.num_nodes
    leaders, unit = np.unique(graph.colocation, return_inverse=True)
    return unit.reshape(-1), len(leaders)


def partition(graph, d: int, seed: int = 0) -> np.ndarray:
    """Device of every op: METIS k-way cut into `d` memory-balanced parts, whole groups."""
    import pymetis

    n = graph.num_nodes
    if d == 1 or n == 1:
        return np.zeros(n, np.int32)
    unit, u = _units(graph)
    if u <= d:
        return np.arange(u, dtype=np.int32)[unit]
    a, b, w = _edges(graph)
    if u < n:  # contract each group into one vertex: drop inner edges, merge parallel ones
        a, b = unit[a], unit[b]
        keep = a != b
        lo, hi = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
        key, inverse = np.unique(lo.astype(np.int64) * u + hi, return_inverse=True)
        w_sum = np.zeros(len(key), np.int64)
        np.add.at(w_sum, inverse.reshape(-1), w[keep])
        a, b, w = key // u, key % u, w_sum
    # symmetric CSR for METIS
    rows = np.concatenate([a, b])
    cols = np.concatenate([b, a])
    weights = np.concatenate([w, w])
    order = np.lexsort((cols, rows))
    rows, cols, weights = rows[order], cols[order], weights[order]
    xadj = np.zeros(u + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=u), out=xadj[1:])
    memory = _memory_weights(graph)
    if u < n:
        memory = np.bincount(unit, weights=memory, minlength=u)
    vweights = _scaled(memory, _METIS_MAX_WEIGHT)
    eweights = _scaled(weights, _METIS_MAX_WEIGHT) if len(weights) else weights
    options = pymetis.Options(seed=int(seed) % (2**31))
    adjacency = pymetis.CSRAdjacency(xadj.tolist(), cols.tolist())
    # METIS prints its complaints about degenerate sub-bisections ("Cannot bisect a graph
    # with 0 vertices", e.g. vgg16_infer_b1 at 8 devices) with C printf into the user's
    # output or a --json stream, and still returns a usable partition
    with silenced(1):
        _, parts = pymetis.part_graph(d, adjacency, vweights=vweights.tolist(),
                                      eweights=eweights.tolist() if len(weights) else None,
                                      options=options)
    return np.asarray(parts, dtype=np.int32)[unit]


def dfs_order(graph) -> np.ndarray:
    """A topological order that goes deep first: the most recently readied op runs next."""
    n = graph.num_nodes
    missing = np.diff(graph.pred_ptr).astype(np.int64)
    stack = [int(v) for v in np.flatnonzero(missing == 0)[::-1]]  # lowest id on top
    order = []
    while stack:
        v = stack.pop()
        order.append(v)
        ready = []
        for w in graph.successors(v):
            missing[w] -= 1
            if missing[w] == 0:
                ready.append(int(w))
        stack.extend(reversed(ready))  # lowest id first among the new ones
    if len(order) != n:
        raise RuntimeError("graph has a cycle")  # build_graph rejects cycles; defensive
    return np.asarray(order, dtype=np.int64)


def solve(problem: Problem, budget: int, seed: int = 0, progress=None) -> Solution:
    """Partition, order, score once (evaluations = 1)."""
    check_budget(budget)
    graph = problem.graph
    placement = respect_colocation(graph, partition(graph, problem.devices.count, seed))
    priority = order_priority(dfs_order(graph))
    return Solution(**score(problem, placement, priority, priority), evaluations=1,
                    method="gp-dfs", seed=seed)
