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
capacity is cut_v(I); max flow = min cut (OR-Tools' SimpleMaxFlow, exact int64). Every layer
takes part (argument 3's bitsets keep only the heaviest; here dropping none costs nothing).

The network is solved reduced (`_Cut`): anc(v) is inside every such I and desc(v) outside, so
their ops are merged into the source and the sink, a layer made in anc(v) and read in desc(v)
(or never freed) is a constant of the cut, and only the ops related to neither, with the
layers they touch, remain. The min cut is the same; the network is often far smaller (on a
training step, at the turn from the forward to the backward pass, almost empty, where the
whole network took seconds a max flow).

This is the single-device relaxation (one device, fixed order: the live set at v's start is
exactly the cut of the ops before it), taken per op: valid, and on graphs whose forced sets
are small (random DAGs) far above argument 3, whose live set is the cut's lower bound over
the one ideal shared by all (anc(v), every tensor forced both ways).

Cost per op: two graph walks (ancestors, descendants) and one max flow over the reduced
network, at most O(n + e + layer reads) arcs; ops are tried in decreasing order of argument
3's total (where the answer tends to be), all of them or as many as a work or time budget
allows.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["start_cut"]

_CHEAP_WORK = 400_000   # arcs (and walked ops / 8) the default bound spends on start_cut
                        # over its cuts (~0.1 s)


def start_cut(f, time_limit: float | None = None) -> tuple[int, int, int]:
    """(bound, op, ops tried): argument 4 over the ops tried (`f`: regal.bounds._Facts after
    arguments 1 and 3). Without a time limit, as many ops as `_CHEAP_WORK` allows; with one,
    every op unless the time runs out first (the bound is valid whichever ops are tried)."""
    from regal.bounds import _COLUMNS, _Layers

    n = f.n
    if n == 0:
        return 0, -1, 0
    # every layer, not only the op_start bitsets' heaviest: on a training step whose saved
    # activations are thousands of small tensors, those few miss most of the cut
    layers = f.layers if f.layers.count < _COLUMNS else _Layers(f, columns=None)
    cut = _Cut(f, layers)
    candidates = np.argsort(-f.start_total, kind="stable")
    deadline = None if time_limit is None else time.monotonic() + float(time_limit)
    best, best_v, tried, work = 0, -1, 0, 0
    for v in candidates.tolist():
        if tried and (work > _CHEAP_WORK if deadline is None else time.monotonic() > deadline):
            break
        live, arcs = cut.least_live(v)
        value = -(-(int(cut.base[v]) + live) // f.d)
        tried += 1
        work += arcs + n // 8          # the ancestor and descendant walks cost too
        if value > best:
            best, best_v = value, v
    return best, best_v, tried


class _Cut:
    """The minimum cut of one op, on a network reduced to what its ancestors and descendants
    leave open: ops of anc(v) are on the source side in every ideal, ops of desc(v) and v on
    the sink side, so they are merged into the source and the sink. A layer produced in
    anc(v) that a sink-side op reads (or that is never freed) is cut in every ideal: a
    constant. What is left is the ops related to neither and the layers they touch, often a
    small part of the graph (on a training step, at the turn from the forward pass to the
    backward one, almost nothing), where one max flow over the whole graph could take
    seconds."""

    def __init__(self, f, layers) -> None:
        from scipy.sparse import csr_matrix

        g, n = f.graph, f.n
        self.n = n
        self.base = f.working + int(f.persistent.sum()) - f.class_persistent[f.cls]
        ones = np.ones(len(g.pred), dtype=np.int8)
        self.up = csr_matrix((ones, np.asarray(g.pred), np.asarray(g.pred_ptr)), shape=(n, n))
        self.down = csr_matrix((np.ones(len(g.succ), dtype=np.int8), np.asarray(g.succ),
                                np.asarray(g.succ_ptr)), shape=(n, n))
        self.edge_dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.pred_ptr))
        self.edge_src = np.asarray(g.pred, dtype=np.int64)       # dst must follow src
        nl = layers.count
        self.weight = np.asarray(layers.weight, dtype=np.int64)
        self.infinite = int(self.weight.sum()) + 1               # above every finite cut
        order = np.argsort(layers.own_op, kind="stable")
        self.own_layer = layers.own_layer[order]
        self.own_ptr = np.searchsorted(layers.own_op[order], np.arange(n + 1))
        self.read_layer = np.asarray(layers.read_layer, dtype=np.int64)
        self.read_op = np.asarray(layers.read_op, dtype=np.int64)
        self.producer = np.asarray(layers.producer, dtype=np.int64)
        self.never = np.asarray(layers.never_freed, dtype=bool)
        self.nl = nl

    def least_live(self, v: int) -> tuple[int, int]:
        """(min over ideals I of cut_v(I), arcs of the reduced network)."""
        from ortools.graph.python import max_flow
        from scipy.sparse.csgraph import breadth_first_order

        if not self.nl:
            return 0, 0
        n = self.n
        side = np.zeros(n, dtype=np.int8)            # 0 free, 1 source side, 2 sink side
        side[breadth_first_order(self.up, v, return_predecessors=False)] = 1
        side[breadth_first_order(self.down, v, return_predecessors=False)] = 2   # v too
        weight = self.weight.copy()
        weight[self.own_layer[self.own_ptr[v]:self.own_ptr[v + 1]]] = 0   # v's input trees
        reader_side = side[self.read_op]
        sink_read = np.bincount(self.read_layer, weights=reader_side == 2,
                                minlength=self.nl) > 0
        must_out = sink_read | self.never             # the layer is cut if produced in I
        made = side[self.producer]
        constant = int(weight[(made == 1) & must_out].sum())
        # layers still open: made in anc(v) and only free (or source-side) readers, or
        # made by a free op
        open_layer = (weight > 0) & (((made == 1) & ~must_out) | (made == 0))
        free_ops = np.flatnonzero(side == 0)
        if not open_layer.any() or not len(free_ops):
            return constant, 0
        index = np.full(n, -1, dtype=np.int64)
        index[free_ops] = np.arange(len(free_ops))
        layer_ids = np.flatnonzero(open_layer)
        layer_node = np.full(self.nl, -1, dtype=np.int64)
        layer_node[layer_ids] = len(free_ops) + np.arange(len(layer_ids))
        source = len(free_ops) + len(layer_ids)
        sink = source + 1
        tails, heads, caps = [], [], []
        # ideal: a free op in I needs its free predecessors in I
        both = (side[self.edge_dst] == 0) & (side[self.edge_src] == 0)
        tails.append(index[self.edge_dst[both]])
        heads.append(index[self.edge_src[both]])
        caps.append(np.full(int(both.sum()), self.infinite, dtype=np.int64))
        # production: from the producer (or the source, for anc(v)) to the layer, its weight
        prod_node = np.where(made[layer_ids] == 1, source, index[self.producer[layer_ids]])
        tails.append(prod_node)
        heads.append(layer_node[layer_ids])
        caps.append(weight[layer_ids])
        # the layer is in I only with every free reader; never freed or read on the sink
        # side: never in I
        reads = open_layer[self.read_layer] & (reader_side == 0)
        tails.append(layer_node[self.read_layer[reads]])
        heads.append(index[self.read_op[reads]])
        caps.append(np.full(int(reads.sum()), self.infinite, dtype=np.int64))
        out = layer_ids[must_out[layer_ids]]
        tails.append(layer_node[out])
        heads.append(np.full(len(out), sink, dtype=np.int64))
        caps.append(np.full(len(out), self.infinite, dtype=np.int64))
        flow = max_flow.SimpleMaxFlow()
        tails, heads, caps = np.concatenate(tails), np.concatenate(heads), np.concatenate(caps)
        flow.add_arcs_with_capacity(tails, heads, caps)
        status = flow.solve(source, sink)
        if status != flow.OPTIMAL:  # pragma: no cover - int64 sums stay far below overflow
            raise RuntimeError(f"start_cut: max flow failed ({status})")
        return constant + int(flow.optimal_flow()), len(tails)
