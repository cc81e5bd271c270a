"""Argument 4 of `regal.bounds.lower_bound`, start_cut: the least a schedule can hold when op v
starts, over every set of ops that may have started before it, by a minimum cut.

Proof (the facts F1-F3 and the alias-tree layers of regal/bounds.py). Fix any placement and
order, and the instant right after op v's allocations [R4]. Let I be the ops started before
that instant, v aside. I holds every predecessor of each of its ops (data or control: an op
starts only once they have finished [R2]), so it is an ideal of the DAG; it holds every strict
ancestor of v and no strict descendant of v (those wait for v to finish). Take an alias-tree
layer (weight w, cost c, producer p = the tree root's producer, readers = the consumers of the
tree's tensors of chain cost >= c) that is not one of v's input trees. If p is in I and some
reader r is not (r != v, as v reads none of the tree), or a tensor of cost >= c has no
consumer, then some tensor T of the tree with chain cost >= c holds a live copy of >= c bytes
on one device: start at the tensor T0 that r reads (or the unconsumed one); if its producer has
started, T0's copy is live (a consumer has not started; an unconsumed tensor is never freed
[R6]) and holds >= chain_cost(T0) bytes on one device (F3); if not, that producer is a consumer
of T0's source that has not started: walk on to the source, whose chain cost is no smaller
(chain costs only grow towards the root), until the root, whose producer p has started. So the
layers of one tree add up to at most the largest cost held, every tree's bytes are distinct
copies, outside v's working set (its own input trees are left out, its new outputs' trees have
not started) and outside persistent memory. The bytes live at that instant on all devices
together are then at least

    working(v) + persistent memory of the other classes + cut_v(I),
    cut_v(I) = sum of w over layers with p in I and (a reader outside I, or never freed),

and the busiest device holds at least ceil(that / d) (F1). The bound takes, for op v, the
minimum over all ideals I with anc(v) in I and v, desc(v) outside: a minimum s-t cut. Nodes:
ops (source side = in I) and one node y per layer (source side = "every reader is in I");
arcs u -> pred(u) of infinite capacity (ideal), p -> y of capacity w (cut when p is in I and y
is not), y -> r infinite for each reader r (y only when every reader is in I), y -> sink
infinite when the layer is never freed, source -> each predecessor of v and v -> sink infinite.
v's own input trees' layers get capacity 0. Any cut of finite capacity is an ideal I and its
capacity is cut_v(I); max flow = min cut (OR-Tools' SimpleMaxFlow, exact int64).

This is the single-device relaxation (one device, fixed order: the live set at v's start is
exactly the cut of the ops before it), taken per op: valid, and on graphs whose forced sets
are small (random DAGs) far above argument 3, whose live set is the cut's lower bound over
the one ideal shared by all (anc(v), every tensor forced both ways).

Cost: one max flow per op over O(n + e + layer reads) arcs; ops are tried in decreasing order
of argument 3's total (where the answer tends to be), all of them or as many as a work or time
budget allows.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["start_cut"]

_CHEAP_WORK = 400_000   # arcs x cuts the default bound spends on start_cut (~0.1 s)


def start_cut(f, time_limit: float | None = None) -> tuple[int, int, int]:
    """(bound, op, ops tried): argument 4 over the ops tried (`f`: regal.bounds._Facts after
    arguments 1 and 3). Without a time limit, as many ops as `_CHEAP_WORK` allows; with one,
    every op unless the time runs out first (the bound is valid whichever ops are tried)."""
    from ortools.graph.python import max_flow

    g, n, layers = f.graph, f.n, f.layers
    nl = layers.count
    if n == 0:
        return 0, -1, 0
    base = f.working + int(f.persistent.sum()) - f.class_persistent[f.cls]
    source, sink = n + nl, n + nl + 1
    infinite = int(layers.weight.sum()) + 1     # above every finite cut
    flow = max_flow.SimpleMaxFlow()
    pred_ptr = np.asarray(g.pred_ptr, dtype=np.int64)
    pred = np.asarray(g.pred, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(pred_ptr))
    arcs = len(pred)
    if arcs:
        flow.add_arcs_with_capacity(dst, pred, np.full(arcs, infinite, dtype=np.int64))
    layer_arc = np.zeros(0, dtype=np.int64)
    if nl:
        layer_arc = np.asarray(flow.add_arcs_with_capacity(
            layers.producer, n + np.arange(nl, dtype=np.int64), layers.weight))
        flow.add_arcs_with_capacity(n + layers.read_layer, layers.read_op,
                                    np.full(len(layers.read_op), infinite, dtype=np.int64))
        never = np.flatnonzero(layers.never_freed)
        flow.add_arcs_with_capacity(n + never, np.full(len(never), sink, dtype=np.int64),
                                    np.full(len(never), infinite, dtype=np.int64))
        arcs += 2 * nl + len(layers.read_op) + len(never)
    ops = np.arange(n, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.int64)
    from_source = np.asarray(flow.add_arcs_with_capacity(np.full(n, source), ops, zeros))
    to_sink = np.asarray(flow.add_arcs_with_capacity(ops, np.full(n, sink), zeros))
    arcs += 2 * n
    order = np.argsort(layers.own_op, kind="stable")
    own_op, own_layer = layers.own_op[order], layers.own_layer[order]
    own_ptr = np.searchsorted(own_op, np.arange(n + 1))

    candidates = np.argsort(-f.start_total, kind="stable")
    if time_limit is None:
        candidates = candidates[:max(1, _CHEAP_WORK // max(arcs, 1))]
        deadline = None
    else:
        deadline = time.monotonic() + float(time_limit)
    best, best_v, tried = 0, -1, 0
    for v in candidates.tolist():
        if deadline is not None and tried and time.monotonic() > deadline:
            break
        preds = pred[pred_ptr[v]:pred_ptr[v + 1]]
        own = layer_arc[own_layer[own_ptr[v]:own_ptr[v + 1]]] if nl else layer_arc
        flow.set_arcs_capacity(from_source[preds], np.full(len(preds), infinite, dtype=np.int64))
        flow.set_arc_capacity(int(to_sink[v]), infinite)
        flow.set_arcs_capacity(own, np.zeros(len(own), dtype=np.int64))
        status = flow.solve(source, sink)
        if status != flow.OPTIMAL:  # pragma: no cover - int64 sums stay far below overflow
            raise RuntimeError(f"start_cut: max flow failed ({status})")
        value = -(-(int(base[v]) + int(flow.optimal_flow())) // f.d)
        flow.set_arcs_capacity(from_source[preds], np.zeros(len(preds), dtype=np.int64))
        flow.set_arc_capacity(int(to_sink[v]), 0)
        if len(own):
            flow.set_arcs_capacity(own, layers.weight[own_layer[own_ptr[v]:own_ptr[v + 1]]])
        tried += 1
        if value > best:
            best, best_v = value, v
    return best, best_v, tried
