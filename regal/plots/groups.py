"""Ops grouped by name scope for a legend a reader can follow: `group_ops` cuts the tree of
name scopes (TensorFlow's `layer/op` names) into at most `MAX_GROUPS` groups of similar
compute time, ranges of sibling layers where a scope has too many children, and contiguous
runs of the dataflow order where names carry no scope (synthetic graphs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from regal.plots.figure import _LABEL_CHARS, MAX_GROUPS

__all__ = ["OpGroups", "op_levels", "group_ops"]


# ---------------------------------------------------------------------------
# grouping ops by name scope


@dataclass(frozen=True)
class OpGroups:
    """A partition of the ops: `of_op[i]` is op i's group, groups numbered in dataflow order
    (the weighted mean order key of their ops); `labels[g]` names group g in full, `short[g]`
    by its distinguishing tail (for text inside a bar)."""

    of_op: np.ndarray       # [n] int32
    labels: tuple
    short: tuple

    @property
    def count(self) -> int:
        return len(self.labels)


def op_levels(graph) -> np.ndarray:
    """[n] int64: the number of ops on the longest path that ends at each op, minus one
    (0 for an op without predecessors): the dataflow position groups are ordered by."""
    return graph.levels()


class _Scope:
    """A node of the name-scope tree: the ops named directly in it and its child scopes."""

    __slots__ = ("path", "own", "children", "units", "unit_weight", "weight", "key_sum",
                 "count")  # key_sum: sum of order key x weight over the scope's ops

    def __init__(self, path: tuple) -> None:
        self.path = path
        self.own: list[int] = []
        self.children: dict[str, _Scope] = {}


def _scope_tree(names, order_key: np.ndarray, weights: np.ndarray) -> _Scope:
    """The tree of name scopes ('a/b/op' lies in scope a/b), each node's sibling units (its own
    ops as one unit, and each child) sorted by the weighted mean order key of their ops: where
    a layer's work happens, not where its free bookkeeping ops sit."""
    root = _Scope(())
    for i, name in enumerate(names):
        parts = [p for p in str(name).split("/") if p]
        node = root
        for part in parts[:-1]:
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Scope(node.path + (part,))
            node = child
        node.own.append(i)

    post_order, stack = [], [root]   # children before parents, without recursion
    while stack:
        node = stack.pop()
        post_order.append(node)
        stack.extend(node.children.values())
    for node in reversed(post_order):
        units = []
        if node.own:
            own = np.asarray(node.own)
            key_sum = float((order_key[own] * weights[own]).sum())
            units.append((key_sum / float(weights[own].sum()), "", "own",
                          float(weights[own].sum()), len(own), key_sum))
        for name, child in node.children.items():
            units.append((child.key_sum / child.weight, name, child, child.weight, child.count,
                          child.key_sum))
        units.sort(key=lambda u: (u[0], u[1]))
        node.units = [u[2] for u in units]
        node.unit_weight = np.cumsum([0.0] + [u[3] for u in units])
        node.weight = float(node.unit_weight[-1])
        node.count = sum(u[4] for u in units)
        node.key_sum = sum(u[5] for u in units)
    return root


def _shorten(text: str, width: int = _LABEL_CHARS) -> str:
    """Cuts the middle of a long text: 'gradients/mobil…ject … block_9'."""
    if len(text) <= width:
        return text
    head = width // 3
    return text[:head] + "…" + text[-(width - head - 1):]


def _labels(parts: list, width: int = _LABEL_CHARS) -> list[str]:
    """Group names (scope path, separator, tail) within `width` characters, abbreviated alike:
    the tail (the layers a group holds) stays whole as long as it can; first every long scope
    name is cut ('mobilenetv2_1…'), then the middle scopes become '…'; a name still too long
    loses its middle."""
    def joined(path, sep, tail, cap, keep_middle):
        path = [p if cap is None or len(p) <= cap else p[:cap - 1] + "…" for p in path]
        if not keep_middle and len(path) > 2:
            path = [path[0], "…", path[-1]]
        return "/".join(path) + sep + tail if path else tail

    for cap, keep_middle in ((None, True), (14, True), (10, True), (10, False)):
        out = [joined(*p, cap, keep_middle) for p in parts]
        if all(len(x) <= width for x in out):
            return out
    return [_shorten(x, width) for x in out]


def _unit_name(unit, node) -> str:
    if unit == "own":  # the ops named directly in `node`
        return "(ops)" if node.path else "(top-level ops)"
    return unit.path[-1]


class _Range:
    """Units a..b-1 of one scope."""

    def __init__(self, node: _Scope, a: int, b: int) -> None:
        self.node, self.a, self.b = node, a, b
        self.weight = float(node.unit_weight[b] - node.unit_weight[a])

    def splittable(self) -> bool:
        return self.b - self.a >= 2

    def split(self):
        w = self.node.unit_weight
        cut = np.arange(self.a + 1, self.b)
        m = int(cut[np.argmin(np.abs(2 * w[cut] - w[self.a] - w[self.b]))])
        return _Range(self.node, self.a, m), _Range(self.node, m, self.b)

    def ops(self) -> np.ndarray:
        found, stack = [], []
        for unit in self.node.units[self.a:self.b]:
            if unit == "own":
                found.extend(self.node.own)
            else:
                stack.append(unit)
        while stack:  # every op in the subtrees of the range's child scopes
            scope = stack.pop()
            found.extend(scope.own)
            stack.extend(scope.children.values())
        return np.sort(np.asarray(found, dtype=np.int64))

    def labels(self, names) -> tuple[tuple, str, str]:
        """(scope path, separator, tail): the group's name is path + separator + tail."""
        path = self.node.path
        if self.a == 0 and self.b == len(self.node.units):
            return (path[:-1], "/", path[-1]) if path else ((), "", "(top level)")
        first = _unit_name(self.node.units[self.a], self.node)
        last = _unit_name(self.node.units[self.b - 1], self.node)
        return path, "/", first if self.b - self.a == 1 else f"{first} … {last}"


class _Leaf:
    """Ops named directly in one scope, in dataflow order: `ops[a:b]` of them."""

    def __init__(self, node: _Scope, ops: np.ndarray, weights: np.ndarray, a: int, b: int):
        self.node, self.all, self.weights, self.a, self.b = node, ops, weights, a, b
        self.weight = float(weights[ops[a:b]].sum())

    def splittable(self) -> bool:
        return self.b - self.a >= 2

    def split(self):
        c = np.cumsum(np.concatenate([[0.0], self.weights[self.all[self.a:self.b]]]))
        cut = np.arange(1, self.b - self.a)
        m = self.a + int(cut[np.argmin(np.abs(2 * c[cut] - c[-1]))])
        return (_Leaf(self.node, self.all, self.weights, self.a, m),
                _Leaf(self.node, self.all, self.weights, m, self.b))

    def ops(self) -> np.ndarray:
        return np.sort(self.all[self.a:self.b])

    def labels(self, names) -> tuple[tuple, str, str]:
        path = self.node.path
        if self.a == 0 and self.b == len(self.all):
            if self.node.children:
                return (path, "/", "(ops)") if path else ((), "", "(top-level ops)")
            return (path[:-1], "/", path[-1]) if path else ((), "", "(all ops)")

        def short(i):
            return str(names[i]).split("/")[-1] or str(names[i])
        first, last = short(self.all[self.a]), short(self.all[self.b - 1])
        return path, ": ", first if self.b - self.a == 1 else f"{first} … {last}"


def _short_label(tail: str, width: int = 28) -> str:
    """What fits inside a bar: the tail, or where its range starts ('block_4_expand …')."""
    if len(tail) <= width:
        return tail
    first, sep, _ = tail.partition(" … ")
    return _shorten(first, width - 2) + " …" if sep else _shorten(tail, width)


def _normalized(group, order_key, weights):
    """A range of one unit is that unit: a child scope (all of it) or the scope's own ops."""
    while isinstance(group, _Range) and group.b - group.a == 1:
        unit = group.node.units[group.a]
        if unit == "own":
            own = np.asarray(group.node.own, dtype=np.int64)
            own = own[np.lexsort((own, order_key[own]))]   # dataflow order, ties by op id
            return _Leaf(group.node, own, weights, 0, len(own))
        group = _Range(unit, 0, len(unit.units))
    return group


def group_ops(names, order_key=None, weights=None, cap: int = MAX_GROUPS) -> OpGroups:
    """Partitions ops into at most `cap` groups by name scope, for a readable chart.

    Starting from one group of all ops, repeatedly splits the heaviest group (by `weights`,
    e.g. compute time; each op also counts a little, so free ops are not lost) in two: a run
    of sibling scopes at the weight-balanced cut, a single scope into its children. Only
    when no scope is left to split are the ops named directly in one scope cut into
    contiguous runs of the dataflow order (`order_key`, e.g. `op_levels`; ties by op id),
    which is all there is to cut for names without scopes. Pure and deterministic: the
    same names, keys and weights give the same groups."""
    names = [str(x) for x in names]
    n = len(names)
    if not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"cap: expected a positive number of groups, got {cap!r}")
    order_key = np.arange(n, dtype=np.float64) if order_key is None else \
        np.asarray(order_key, dtype=np.float64)
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if order_key.shape != (n,) or weights.shape != (n,):
        raise ValueError(f"order_key and weights: expected one value per op ({n})")
    if not np.all(np.isfinite(order_key)):
        raise ValueError("order_key: expected finite numbers")
    if n == 0:
        return OpGroups(np.zeros(0, dtype=np.int32), (), ())
    weights = np.where(np.isfinite(weights) & (weights > 0), weights, 0.0)
    floor = weights.mean() if weights.sum() > 0 else 1.0
    weights = weights + 0.02 * floor
    root = _scope_tree(names, order_key, weights)
    groups = [_normalized(_Range(root, 0, len(root.units)), order_key, weights)]
    while len(groups) < cap:
        for kind in (_Range, _Leaf):   # scopes first, runs of one scope's ops last
            candidates = [i for i, g in enumerate(groups)
                          if isinstance(g, kind) and g.splittable()]
            if candidates:
                break
        else:
            break
        i = max(candidates, key=lambda j: (groups[j].weight, -j))
        left, right = groups[i].split()
        groups[i:i + 1] = [_normalized(left, order_key, weights),
                           _normalized(right, order_key, weights)]
    members = [g.ops() for g in groups]
    labelled = [g.labels(names) for g in groups]
    rank = sorted(range(len(groups)),
                  key=lambda j: (float(np.average(order_key[members[j]],
                                                  weights=weights[members[j]])), labelled[j],
                                 int(members[j][0])))
    of_op = np.empty(n, dtype=np.int32)
    for g, j in enumerate(rank):
        of_op[members[j]] = g
    return OpGroups(of_op, tuple(_labels([labelled[j] for j in rank])),
                    tuple(_short_label(labelled[j][2]) for j in rank))
