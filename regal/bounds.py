"""Proven lower bounds on the peak-memory objective (max over devices of the simulated peak).

`lower_bound(graph, devices)` takes the max of five arguments, each valid for EVERY placement
that honours the graph's colocation groups and pins, and every priority order, under the rules
of regal/sim/SIM_RULES.md ([Rn] below). Shared facts:

- (F1) peak[k] >= live bytes on k at any instant: live bytes only grow by allocations, and each
  allocation is checked [R8]; at t = 0 live = persistent memory, which is the initial peak [R1].
- (F2) one copy per (tensor, device) [R4, R5]. The copy of T on its producer's device costs
  size(T), or 0 when T is an alias; a transferred copy costs size(T), alias or not [R5]. A copy
  on k is not freed before every consumer of T on k has finished [R6].
- (F3) alias chains. An input T of op v (v on k) is present on k and live while v runs. If T
  was produced on k and is an alias of T1, it costs 0 but holds T1's copy on k [R6], which is
  live and present on k (T's producer read it there): walk on to T1. The walk stops at the
  first tensor of the chain that is either transferred to k or not an alias, and that copy
  costs its size. Relaxation: each chain tensor chooses freely "passes" (an alias produced on
  k) or "stops" (transferred, which needs d >= 2; a non-alias tensor always stops). Real
  placements make consistent choices, so the relaxed minimum is <= the true one. Inputs whose
  chains meet share copies: the minimum cost over one alias tree is a small tree DP (`_tree`).

Arguments (bytes):

1. working_set: when op v starts, after its allocations [R4], its device holds v's temporary
   memory, its new (non-alias) outputs, its persistent memory and that of every op forced onto
   the same device (colocation group, or pinned to the same device), and the live copies of
   its distinct inputs [R2, R6], at least the alias-tree DP of (F3).
2. end_state: persistent memory [R1] and tensors without consumers (never freed [R6]) are all
   live once the last op has started. Items that share a device for sure are merged: per op
   (its persistent memory and its new unconsumed outputs), then per group / pin. An unconsumed
   alias output keeps its chain's copy alive forever: one item per alias tree, the cheapest
   chain cost (F3) among its unconsumed aliases. Packing these indivisible items into d
   devices: max load >= the largest, >= ceil(total / d), and for every m > d, some device
   holds ceil(m/d) of the m largest items, so >= the sum of the ceil(m/d) smallest of them
   (m = d + 1: the d-th plus the (d+1)-th largest).
3. op_start: when op v starts, besides its working set (one item on its device), these are
   live somewhere: every other op's persistent memory, and per alias tree other than v's input
   trees, the copy that (F4) below finds. Trees hold distinct copies, outside v's working set
   (its input trees are left out; its new outputs' trees have not started yet) and outside
   persistent memory, so no byte counts twice. Bound: ceil(total / d) for every op; the full
   packing bound of (2) for the few ops with the largest totals (a tree whose root has no
   consumer is held on its producer's device: it joins that op's class item).
   (F4) alias-tree layers. Give every tensor of a tree its chain cost (F3); with distinct
   costs c1 > ... > cm the tree gets m layers, layer j of weight c_j - c_(j+1) (c_(m+1) = 0),
   "produced" by the root's producer and "read" by every consumer of the tree's tensors of
   cost >= c_j (never freed if one of them has no consumer). Claim: if the producer p of layer
   j is a strict ancestor of v (it has started) and a reader r is a strict descendant of v (r
   has not started; r != v as v reads no tensor of the tree), or a tensor of cost >= c_j has
   no consumer, then some tensor of the tree with chain cost >= c_j holds a live copy of >= c_j
   bytes on one device. Walk from the tensor T0 that r reads (or the unconsumed one): if its
   producer has started, a copy of T0 is live (a consumer has not started: the producer's
   copy is kept for it, or its transfer has started and the destination copy waits for it
   [R5, R6]; an unconsumed tensor is never freed) and it holds >= chain_cost(T0) bytes on one
   device (F3); if not, that producer is a consumer of T0's source that has not started: walk
   on to the source, whose chain cost is no smaller (chain costs only grow towards the root),
   until the root, whose producer p has started. So the tree holds at least the largest c_j
   of its set layers, which is the sum of their weights. For a tree of one non-alias tensor
   this is the plain "produced by a strict ancestor, needed by a strict descendant (or never
   freed)". Only the `_COLUMNS` heaviest layers are tracked (dropping layers only lowers the
   sums), as bitsets propagated level by level over the DAG.
4. start_cut (regal/bounds_cut.py): argument 3's live set holds for every set of ops started
   before v; the least live bytes over each such set (an ideal of the DAG holding v's
   ancestors and none of its descendants) is a minimum s-t cut, one max flow per op, on as
   many ops as a work budget (or `time_limit`) allows. Its proof is that module's docstring.
5. last_start: on every device k that runs an op, let v be the op that starts last there.
   After v's allocations [R4] k holds, all at once and with no byte counted twice: the
   persistent memory of every op on k [R1]; the new non-alias outputs without consumers of
   every op on k, each allocated when its op started (all have: v is the last) and never freed
   [R6]; the copy each alias tree with an unconsumed alias produced on k holds forever there
   (2; at least the tree's end-state item); and v's transient working set X(v) = its
   temporary memory + its new non-alias outputs that have consumers + its inputs' copies (at
   least the F3 tree DP), both without the tensors of those held trees. The first three are
   the end-state items of (2) and are disjoint from X(v): persistent memory is no tensor, an
   unconsumed tensor is never an input, and every tensor of a held tree is left out of X(v).
   So peak[k] >= L_k + X(v_k), L_k = k's share of those items. Over the d' devices that run
   ops, the v_k are d' distinct ops, so with x_1 <= x_2 <= ... the sorted X of all ops:
   max_k peak[k] >= (sum of the items + x_1 + ... + x_d') / d' (the mean), taken at the
   worst d' in 1..d; and >= max_k L_k + x_1 >= the packing bound of the items + x_1. Why: on graphs whose outputs are mostly never freed the
   peak comes near the end, where each device also runs one last op on top of what it keeps.

Cost: O(n + e) numpy work plus O(n * _COLUMNS / 64) for the bitsets and a Python loop over
the (rare) ops that read two tensors of one alias tree; start_cut: a fixed budget of max-flow
work (about 0.1-1 s on graphs of thousands of ops), or `time_limit` seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from regal.units import format_bytes

__all__ = ["Bound", "lower_bound", "format_bound", "gap_to_bound", "packing_bound",
           "op_working_sets"]

_COLUMNS = 2048      # alias-tree layers tracked by the op_start bitsets (the heaviest ones)
_CANDIDATES = 32     # ops whose op_start items get the full packing bound

_DESCRIBE = {
    "working_set": "working set of one op",
    "end_state": "persistent memory and never-freed outputs",
    "op_start": "everything live when one op starts",
    "start_cut": "least live when one op starts, over every set of ops started before it",
    "last_start": "what a device keeps forever plus the working set of its last op",
}


@dataclass(frozen=True)
class Bound:
    """A lower bound on the peak-memory objective, in bytes.

    `source` names the argument that gave `value` (a key of `components`, which holds every
    argument's value); `proven` is whether that argument is a proof rather than an estimate;
    `detail` says which op or items it came from, for people.
    """

    value: int
    source: str
    proven: bool
    components: dict[str, int] = field(default_factory=dict)
    detail: str = ""


def packing_bound(items, devices: int) -> int:
    """Lower bound on the max load of `devices` bins holding the indivisible `items` (bytes).

    max(largest item, ceil(total / d), and for every m > d the sum of the ceil(m/d) smallest of
    the m largest items: pigeonhole puts that many of them on one device).
    """
    sizes = np.sort(np.asarray(items, dtype=np.int64))[::-1]
    sizes = sizes[sizes > 0]
    if len(sizes) == 0:
        return 0
    d = int(devices)
    best = max(int(sizes[0]), -(-int(sizes.sum()) // d))
    if len(sizes) > d:
        prefix = np.concatenate([[0], np.cumsum(sizes)])
        m = np.arange(d + 1, len(sizes) + 1)
        per_device = -(-m // d)
        best = max(best, int((prefix[m] - prefix[m - per_device]).max()))
    return best


def lower_bound(graph, devices, extra: Mapping[str, object] | None = None,
                time_limit: float | None = None) -> Bound:
    """The best proven lower bound on max_k peak[k] over every placement and order.

    `devices`: a regal.sim.DeviceSpec or a device count. `extra`: more bounds by name, each a
    number of bytes (a proven bound; floats are rounded up, less a 1e-9 relative tolerance) or
    a `Bound` (its `proven` flag is kept). The value is the max; `source` names its argument.
    `time_limit`: None (the default) keeps every argument cheap (start_cut tries the ops a
    fixed work budget allows); seconds let start_cut try every op until that time is spent (a
    tighter bound for more time, never a looser one).
    """
    from regal.bounds_cut import start_cut

    d = _device_count(devices)
    if time_limit is not None and (isinstance(time_limit, bool)
                                   or not isinstance(time_limit, (int, float, np.integer,
                                                                  np.floating))
                                   or not (math.isfinite(time_limit) and time_limit > 0)):
        raise ValueError(f"time_limit: expected seconds > 0, got {time_limit!r}")
    facts = _Facts(graph, d)
    working, working_op = _working_set(facts)
    end_value, end_detail = _end_state(facts)
    start_value, start_op = _op_start(facts)
    cut_value, cut_op, tried = start_cut(facts, time_limit)
    last_value, last_detail = _last_start(facts)
    components = {"working_set": working, "end_state": end_value, "op_start": start_value,
                  "start_cut": cut_value, "last_start": last_value}
    proven = {name: True for name in components}
    details = {"working_set": f"op {facts.name(working_op)}", "end_state": end_detail,
               "op_start": f"op {facts.name(start_op)}",
               "start_cut": f"op {facts.name(cut_op)}, {tried} of {facts.n} ops tried",
               "last_start": last_detail}
    for name, value in (extra or {}).items():
        if name in components:
            raise ValueError(f"extra: {name!r} is the name of a built-in argument")
        if isinstance(value, Bound):
            components[name], proven[name] = int(value.value), bool(value.proven)
            details[name] = value.detail
        else:
            components[name], proven[name] = _as_bytes(name, value), True
            details[name] = ""
    # the max; on a tie, a proven argument, then the first named
    source = max(components, key=lambda k: (components[k], proven[k]))
    return Bound(value=components[source], source=source, proven=proven[source],
                 components=components, detail=details[source])


def op_working_sets(graph, devices) -> np.ndarray:
    """Argument 1 for every op [n] int64: the bytes its device holds when it starts."""
    facts = _Facts(graph, _device_count(devices))
    _working_set(facts)
    return facts.working


def format_bound(bound: Bound) -> str:
    """One line for people: 'lower bound 1.50 GiB (working set of one op: op 'conv1')'."""
    what = _DESCRIBE.get(bound.source, bound.source)
    if bound.detail:
        what = f"{what}: {bound.detail}"
    proof = "" if bound.proven else ", not proven"
    return f"lower bound {format_bytes(bound.value)} ({what}{proof})"


def gap_to_bound(value: float, bound) -> float:
    """(value - bound) / bound: 0.05 is 'at most 5% above the optimum'.

    `bound` is a Bound or bytes. For a bound of 0: 0.0 when value is 0 too, else infinity.
    """
    b = float(bound.value if isinstance(bound, Bound) else bound)
    value = float(value)
    if b <= 0:
        return 0.0 if value <= 0 else math.inf
    return (value - b) / b


# ---------------------------------------------------------------------------


def _device_count(devices) -> int:
    count = getattr(devices, "count", devices)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected a DeviceSpec or a device count >= 1, got {devices!r}")
    return int(count)


def _as_bytes(name: str, value) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"extra: {name!r}: expected a number of bytes, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"extra: {name!r}: expected a finite number of bytes >= 0, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    return int(math.ceil(number - 1e-9 * max(1.0, number)))


def _segment_sum(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Exact int64 sums of values[ptr[i]:ptr[i+1]] for every i."""
    prefix = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return prefix[ptr[1:]] - prefix[ptr[:-1]]


class _Facts:
    """Per-graph arrays the three arguments share (all int64 bytes)."""

    def __init__(self, graph, d: int) -> None:
        self.graph, self.d = graph, d
        n, t = graph.num_nodes, graph.num_tensors
        self.n, self.t = n, t
        self.size = np.asarray(graph.tensor_size, dtype=np.int64)
        self.alias = np.asarray(graph.tensor_alias, dtype=np.int64)
        self.producer = np.asarray(graph.tensor_producer, dtype=np.int64)
        self.consumed = np.diff(graph.consumer_ptr) > 0
        self.persistent = np.asarray(graph.persistent_memory, dtype=np.int64)
        self.temporary = np.asarray(graph.temporary_memory, dtype=np.int64)
        self.root, self.chain_cost = self._chains()
        self.cls = self._classes()
        self.class_persistent = np.zeros(self.cls.max() + 1, dtype=np.int64)
        np.add.at(self.class_persistent, self.cls, self.persistent)
        self.new_output = np.where(self.alias < 0, self.size, 0)
        # distinct (op, input tensor) pairs [R2, R6: a tensor read on two ports counts once]
        edge_op = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.input_ptr))
        pair = np.unique(edge_op * max(t, 1) + np.asarray(graph.input_tensor, dtype=np.int64))
        self.in_op, self.in_tensor = pair // max(t, 1), pair % max(t, 1)
        self.kept = None     # argument 2's items (`_kept_items`), built on first use

    def name(self, v: int) -> str:
        return repr(str(self.graph.names[v])) if v >= 0 else "-"

    def _chains(self) -> tuple[np.ndarray, np.ndarray]:
        """root[T]: the non-alias end of T's alias chain; chain_cost[T]: the cheapest way to
        hold T on a device when T is read there alone (F3): the root's size on one device, the
        smallest size on the chain when transfers exist."""
        jump = np.where(self.alias >= 0, self.alias, np.arange(self.t))
        cost = self.size.copy()
        while True:
            if self.d >= 2:
                cost = np.minimum(cost, cost[jump])
            nxt = jump[jump]
            if np.array_equal(nxt, jump):
                break
            jump = nxt
        if self.d == 1:
            cost = self.size[jump]
        return jump, cost

    def _classes(self) -> np.ndarray:
        """Class id per op: ops of one class share a device in every allowed placement
        (one colocation group, or groups pinned to one device)."""
        n = self.n
        leader = getattr(self.graph, "colocation", None)
        leader = np.arange(n) if leader is None else np.asarray(leader, dtype=np.int64)
        leader = np.where(leader >= 0, leader, np.arange(n))  # -1 = free, in either convention
        pinned = getattr(self.graph, "pinned", None)
        key = leader + 0
        if pinned is not None:
            pinned = np.asarray(pinned, dtype=np.int64)
            key = np.where(pinned >= 0, n + pinned, leader)
        _, cls = np.unique(key, return_inverse=True)
        return cls.reshape(-1).astype(np.int64)


def _tree(inputs: set, alias: np.ndarray, size: np.ndarray, can_transfer: bool) -> int:
    """Min bytes of live copies on v's device for the distinct inputs `inputs` of one alias
    tree (F3, relaxed): each chain tensor passes (alias, 0 bytes, its source is reached) or
    stops (its size; an alias stops only by a transfer). F: the node passes; G: it does not
    pass (unreached, or reached and stops)."""
    parent = {}
    for x in inputs:
        while x not in parent:
            parent[x] = int(alias[x])
            if parent[x] < 0:
                break
            x = parent[x]
    children = {x: [] for x in parent}
    for x, p in parent.items():
        if p >= 0:
            children[p].append(x)
    root = next(x for x, p in parent.items() if p < 0)
    order, stack = [], [root]
    while stack:
        x = stack.pop()
        order.append(x)
        stack.extend(children[x])
    inf = math.inf
    F, G = {}, {}
    for x in reversed(order):  # children before parents
        kids = children[x]
        base = sum(min(F[c], G[c]) for c in kids)
        if x in inputs:
            reached = base
            unreached = inf
        else:
            reached = base + min((F[c] - min(F[c], G[c]) for c in kids), default=inf)
            unreached = sum(G[c] for c in kids)
        is_alias = alias[x] >= 0
        F[x] = reached if is_alias else inf
        stop = int(size[x]) + reached if (can_transfer or not is_alias) else inf
        G[x] = min(unreached, stop)
    return int(G[root])


def _input_costs(f: _Facts, skip_roots: np.ndarray | None = None) -> np.ndarray:
    """Per op: min bytes its distinct inputs occupy on its device while it runs (F3); with
    `skip_roots`, leaving out the inputs of those alias trees."""
    cost = np.zeros(f.n, dtype=np.int64)
    in_op, in_tensor = f.in_op, f.in_tensor
    if skip_roots is not None and len(skip_roots):
        keep = ~np.isin(f.root[in_tensor], skip_roots)
        in_op, in_tensor = in_op[keep], in_tensor[keep]
    if len(in_op) == 0:
        return cost
    roots = f.root[in_tensor]
    key = in_op * max(f.t, 1) + roots
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    starts = np.flatnonzero(np.concatenate([[True], key_sorted[1:] != key_sorted[:-1]]))
    counts = np.diff(np.concatenate([starts, [len(key_sorted)]]))
    single = counts == 1
    first = order[starts[single]]
    np.add.at(cost, in_op[first], f.chain_cost[in_tensor[first]])
    for s, c in zip(starts[~single].tolist(), counts[~single].tolist()):
        members = order[s:s + c]
        v = int(in_op[members[0]])
        cost[v] += _tree(set(in_tensor[members].tolist()), f.alias, f.size, f.d >= 2)
    return cost


def _working_set(f: _Facts) -> tuple[int, int]:
    """Argument 1: per op, its working set plus persistent memory forced onto its device."""
    g = f.graph
    f.inputs_cost = _input_costs(f)
    f.working = (f.inputs_cost + f.temporary + _segment_sum(f.new_output, g.output_ptr)
                 + f.class_persistent[f.cls])
    v = int(np.argmax(f.working))
    return int(f.working[v]), v


def _end_items(f: _Facts) -> np.ndarray:
    """Per class: persistent memory plus never-freed new outputs of its ops (argument 2)."""
    unconsumed_new = np.where(~f.consumed, f.new_output, 0)
    per_op = f.persistent + _segment_sum(unconsumed_new, f.graph.output_ptr)
    items = np.zeros(f.cls.max() + 1, dtype=np.int64)
    np.add.at(items, f.cls, per_op)
    return items


def _alias_tree_items(f: _Facts) -> np.ndarray:
    """One item per alias tree with unconsumed aliases: the cheapest chain cost (F3) of the
    source of any of them (held forever on its producer's device [R6])."""
    held = np.flatnonzero(~f.consumed & (f.alias >= 0))
    if len(held) == 0:
        return np.zeros(0, dtype=np.int64)
    cost = f.chain_cost[f.alias[held]]
    roots = f.root[held]
    best = np.full(f.t, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, roots, cost)
    return best[np.unique(roots)]


def _kept_items(f: _Facts) -> np.ndarray:
    """The items of argument 2 (per class, then per held alias tree), built once per facts:
    arguments 2 and 5 both pack them."""
    if f.kept is None:
        f.kept = np.concatenate([_end_items(f), _alias_tree_items(f)])
    return f.kept


def _end_state(f: _Facts) -> tuple[int, str]:
    items = _kept_items(f)
    return packing_bound(items, f.d), f"{int((items > 0).sum())} items on {f.d} devices"


def _last_start(f: _Facts) -> tuple[int, str]:
    """Argument 5 (see the module docstring); after `_working_set` (its input costs serve
    when no alias tree is held)."""
    if f.n == 0:
        return 0, "no ops"
    held = np.unique(f.root[~f.consumed & (f.alias >= 0)])   # trees held forever
    consumed_new = np.where(f.consumed, f.new_output, 0)
    consumed_new[held] = 0
    inputs = _input_costs(f, held) if len(held) else f.inputs_cost
    transient = np.sort(inputs + f.temporary + _segment_sum(consumed_new, f.graph.output_ptr))
    items = _kept_items(f)
    total = int(items.sum())
    prefix = np.cumsum(transient[:min(f.d, f.n)])
    mean = min(-(-(total + int(prefix[used - 1])) // used) for used in range(1, len(prefix) + 1))
    value = max(mean, packing_bound(items, f.d) + int(transient[0]))
    return value, (f"{int((items > 0).sum())} kept items on {f.d} devices, the smallest last "
                   f"working set {int(transient[0])}")


def _levels(g) -> np.ndarray:
    """Longest-path level of every op (sources 0); every edge goes to a higher level."""
    level = [0] * g.num_nodes
    pp, pr = g.pred_ptr.tolist(), g.pred.tolist()
    for v in g.topo_order.tolist():
        a, b = pp[v], pp[v + 1]
        if b > a:
            level[v] = max(level[u] for u in pr[a:b]) + 1
    return np.asarray(level, dtype=np.int64)


def _propagate(level: np.ndarray, src: np.ndarray, dst: np.ndarray, own: np.ndarray,
               descending: bool) -> np.ndarray:
    """R[v] = OR over edges (u -> v) of R[u] | own[u], levels in order (bitset rows)."""
    reach = np.zeros_like(own)
    if len(src) == 0:
        return reach
    order = np.lexsort((dst, level[dst]))
    if descending:
        order = order[::-1]
    src, dst = src[order], dst[order]
    lv = level[dst]
    bounds = np.flatnonzero(np.concatenate([[True], lv[1:] != lv[:-1], [True]]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        s, t = src[a:b], dst[a:b]
        vals = reach[s] | own[s]
        cut = np.flatnonzero(np.concatenate([[True], t[1:] != t[:-1]]))
        reach[t[cut]] = np.bitwise_or.reduceat(vals, cut, axis=0)
    return reach


def _ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start[i], start[i] + count[i]) over i (int64)."""
    count = np.asarray(count, dtype=np.int64)
    offset = (np.arange(int(count.sum()), dtype=np.int64)
              - np.repeat(np.cumsum(count) - count, count))
    return np.repeat(np.asarray(start, dtype=np.int64), count) + offset


class _Layers:
    """The alias-tree "layers" of argument 3. A tree whose tensors (of chain cost > 0) have the
    distinct chain costs c1 > c2 > ... > cm gets m layers; layer j weighs c_j - c_(j+1)
    (c_(m+1) = 0), is produced by the tree root's producer, and is read by every consumer of
    the tree's tensors of cost >= c_j (never freed when one of them has no consumer). Only the
    `columns` heaviest layers are kept (dropping layers only lowers the bound; None keeps
    every one: start_cut's max flows need no bitsets)."""

    def __init__(self, f: _Facts, columns: int | None = None) -> None:
        member = np.flatnonzero(f.chain_cost > 0)
        member = member[np.lexsort((-f.chain_cost[member], f.root[member]))]
        roots, cost = f.root[member], f.chain_cost[member]
        new_tree = np.concatenate([[True], roots[1:] != roots[:-1]])[:len(member)]
        new_cost = new_tree | np.concatenate([[True], cost[1:] != cost[:-1]])[:len(member)]
        index = np.cumsum(new_cost) - 1                  # member -> its own cost's layer
        first = np.flatnonzero(new_cost)
        layer_root, layer_cost = roots[first], cost[first]
        lower = np.zeros(len(first), dtype=np.int64)     # the next layer's cost in the tree
        if len(first) > 1:
            lower[:-1] = np.where(layer_root[1:] == layer_root[:-1], layer_cost[1:], 0)
        weight = layer_cost - lower
        # a member of cost c_i belongs to layers i..m of its tree (cost >= c_j)
        tree_end = np.concatenate([np.flatnonzero(np.diff(layer_root) != 0) + 1, [len(first)]])
        tree_of_layer = np.cumsum(np.concatenate([[True], layer_root[1:] != layer_root[:-1]])
                                  [:len(first)]) - 1
        end = tree_end[tree_of_layer[index]]
        count = end - index
        m_tensor = np.repeat(member, count)
        m_layer = _ranges(index, count)
        keep = np.zeros(len(first), dtype=bool)
        keep[np.argsort(-weight, kind="stable")[:columns]] = True
        keep &= weight > 0
        renumber = np.cumsum(keep) - 1
        sel = keep[m_layer]
        self.tensor, self.layer = m_tensor[sel], renumber[m_layer[sel]]  # (member, layer) pairs
        self.root, self.weight = layer_root[keep], weight[keep].astype(np.int64)
        self.producer = f.producer[self.root]
        self.count = int(keep.sum())
        never = np.zeros(self.count, dtype=bool)
        never[self.layer[~f.consumed[self.tensor]]] = True
        self.never_freed = never
        # (op, layer): op reads a tensor of the layer
        cptr = np.asarray(f.graph.consumer_ptr, dtype=np.int64)
        ccount = cptr[self.tensor + 1] - cptr[self.tensor]
        consumer = np.asarray(f.graph.consumer, dtype=np.int64)[_ranges(cptr[self.tensor], ccount)]
        pair = np.unique(consumer * max(self.count, 1) + np.repeat(self.layer, ccount))
        self.read_op, self.read_layer = pair // max(self.count, 1), pair % max(self.count, 1)
        # (op, layer) pairs to clear: v's own input trees are in its working set
        tree = np.full(f.t, -1, dtype=np.int64)
        first_of_tree = np.flatnonzero(np.concatenate([[True], self.root[1:] != self.root[:-1]])
                                       [:self.count])
        tree[self.root[first_of_tree]] = np.arange(len(first_of_tree))
        lo = first_of_tree
        hi = np.concatenate([first_of_tree[1:], [self.count]])
        pairs = np.unique(f.in_op * max(f.t, 1) + f.root[f.in_tensor])
        p_op, p_tree = pairs // max(f.t, 1), tree[pairs % max(f.t, 1)]
        ok = p_tree >= 0
        p_op, p_tree = p_op[ok], p_tree[ok]
        span = hi[p_tree] - lo[p_tree]
        self.own_op = np.repeat(p_op, span)
        self.own_layer = _ranges(lo[p_tree], span)
        self.tree_start = first_of_tree


def _op_start(f: _Facts) -> tuple[int, int]:
    """Argument 3 (see the module docstring)."""
    g, n = f.graph, f.n
    layers = f.layers = _Layers(f, _COLUMNS)
    cols = layers.count
    words = max(1, -(-cols // 64))

    def bits(ops: np.ndarray, c: np.ndarray, rows: int = n) -> np.ndarray:
        out = np.zeros((rows, words), dtype=np.uint64)
        one = np.left_shift(np.uint64(1), (c % 64).astype(np.uint64))
        np.bitwise_or.at(out, (ops, c // 64), one)
        return out

    column = np.arange(cols, dtype=np.int64)
    produced = bits(layers.producer, column)
    read = bits(layers.read_op, layers.read_layer)
    never = column[layers.never_freed]
    never_freed = bits(np.zeros(len(never), dtype=np.int64), never, rows=1)[0]
    level = _levels(g)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.pred_ptr))
    src = np.asarray(g.pred, dtype=np.int64)
    before = _propagate(level, src, dst, produced, descending=False)   # by strict ancestors
    after = _propagate(level, dst, src, read, descending=True)         # read by strict descendants
    live = before & (after | never_freed)
    mask = np.left_shift(np.uint64(1), (layers.own_layer % 64).astype(np.uint64))
    np.bitwise_and.at(live, (layers.own_op, layers.own_layer // 64), ~mask)
    f.live = live
    live_bytes = _weighted_popcount(live, layers.weight)

    total_persistent = int(f.persistent.sum())
    total = f.working + total_persistent - f.class_persistent[f.cls] + live_bytes
    f.start_total = total
    per_op = -(-total // f.d)
    best_v = int(np.argmax(per_op))
    best = int(per_op[best_v])
    if cols == 0:
        return best, best_v
    tree_root = layers.root[layers.tree_start]
    # a tree whose root has no consumer holds the root's copy on its producer's device forever
    anchored_tree = ~f.consumed[tree_root]
    # the full packing bound for the ops with the largest totals
    for v in np.argsort(-total, kind="stable")[:_CANDIDATES].tolist():
        if total[v] <= best:  # a packing bound never exceeds the total it packs
            break
        row = np.unpackbits(live[v].astype("<u8").view(np.uint8), bitorder="little")[:cols]
        held = np.add.reduceat(np.where(row.astype(bool), layers.weight, 0), layers.tree_start)
        anchored = anchored_tree & (held > 0)
        items = f.class_persistent.copy()
        np.add.at(items, f.cls[f.producer[tree_root[anchored]]], held[anchored])
        items[f.cls[v]] += f.working[v] - f.class_persistent[f.cls[v]]
        value = packing_bound(np.concatenate([items, held[~anchored]]), f.d)
        if value > best:
            best, best_v = value, v
    return best, best_v


def _weighted_popcount(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row of a bitset [n, words] uint64: the sum of weights[j] over its set bits j."""
    n, words = rows.shape
    padded = np.zeros(words * 64, dtype=np.int64)
    padded[:len(weights)] = weights
    byte_weights = padded.reshape(words * 8, 8)                    # bit j of byte b: column 8b+j
    patterns = (np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1  # [256, 8]
    table = byte_weights @ patterns.T                              # [bytes, 256] int64
    as_bytes = rows.astype("<u8").view(np.uint8).reshape(n, words * 8)  # byte b: bits 8b..8b+7
    return table[np.arange(words * 8)[None, :], as_bytes].sum(axis=1)
