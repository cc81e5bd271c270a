"""User constraints on an existing graph (docs/design.md §3): colocation groups merged by op
name and pins by op name or pattern (`regal optimize --pin/--colocate`), checked and spread
over each group the way `regal.graph.build_graph` requires (`spread_pins`, which
`regal.graph_builder.GraphBuilder` uses too).

Imports `regal.graph` only; `regal.graph` never imports this module.
"""

from __future__ import annotations

import fnmatch
import re

import numpy as np

from regal.graph import ComputationGraph, GraphError, _ro, check_constraints, group_leaders

__all__ = ["with_constraints", "spread_pins"]


def _match_ops(graph: ComputationGraph, pattern: str) -> np.ndarray:
    """Op ids a pin pattern names: the exact name; else `re:REGEX` (full match) or a glob."""
    names = graph.names.tolist()
    if pattern in names:
        return np.asarray([names.index(pattern)])
    if pattern.startswith("re:"):
        try:
            regex = re.compile(pattern[3:])
        except re.error as exc:
            raise GraphError(f"pin {pattern!r}: bad regular expression ({exc})") from None
        hits = [v for v, name in enumerate(names) if regex.fullmatch(name)]
    elif any(c in pattern for c in "*?["):
        hits = [v for v, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)]
    else:
        raise GraphError(f"pin {pattern!r}: no op has that name (a pattern needs * ? [ or "
                         f"the prefix re:)")
    if not hits:
        raise GraphError(f"pin {pattern!r}: the pattern matches no op")
    return np.asarray(hits)


def with_constraints(graph: ComputationGraph, pins: dict | None = None, colocate=(),
                     num_devices: int | None = None) -> ComputationGraph:
    """`graph` with user constraints added to the groups and pins it already has.

    `pins` maps an op name or pattern (`*`/`?`/`[...]` glob, or `re:REGEX` matched against
    the whole name) to a device: the group of every matching op is pinned there. Each item
    of `colocate` lists two or more op names (exact) whose groups merge into one. GraphError
    (one line) on an unknown op, a group of fewer than two names, a pattern matching nothing,
    a group pinned to two devices, or (given `num_devices`) a device outside
    0..num_devices-1. A pure function: `graph` is unchanged.
    """
    n = graph.num_nodes
    index = {name: v for v, name in enumerate(graph.names.tolist())}
    pairs = [(v, int(graph.colocation[v])) for v in np.flatnonzero(
        graph.colocation != np.arange(n)).tolist()]
    for group in colocate or ():
        group = [group] if isinstance(group, str) else list(group)
        if len(group) < 2:  # colocate=["a", "b"] means two groups of one: a no-op
            raise GraphError(f"colocate: a group lists at least two op names, got {group!r} "
                             f"(colocate=[['a', 'b']] puts a and b on one device)")
        ids = []
        for name in group:
            if name not in index:
                raise GraphError(f"colocate: no op named {name!r}")
            ids.append(index[name])
        pairs.extend((ids[0], v) for v in ids[1:])
    leaders = group_leaders(n, pairs)
    wanted = {}
    for pattern, device in (pins or {}).items():
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)) or device < 0:
            raise GraphError(f"pin {pattern!r}: device {device!r}: expected an integer >= 0")
        if num_devices is not None and device >= num_devices:
            raise GraphError(f"pin {pattern!r}: device {device} is outside "
                             f"0..{num_devices - 1} ({num_devices} devices)")
        for v in _match_ops(graph, str(pattern)).tolist():
            if v in wanted and wanted[v] != device:
                raise GraphError(f"op {str(graph.names[v])!r}: pinned to devices "
                                 f"{wanted[v]} and {device} by two patterns")
            wanted[v] = int(device)
    pinned = spread_pins(graph.names, leaders, wanted, graph.pinned)
    check_constraints(graph.names, leaders, pinned.astype(np.int64), num_devices)
    return graph._replace(colocation=_ro(leaders), pinned=_ro(pinned))


def spread_pins(names, leaders: np.ndarray, pins: dict, pinned=None) -> np.ndarray:
    """Op -> device pins (plus an existing `pinned` array) -> every member's group pin.

    GraphError when two pins put one group on two devices, naming both ops.
    """
    n = len(leaders)
    group_pin = np.full(n, -1, dtype=np.int64)
    pinned_by = {}
    items = [] if pinned is None else [(v, int(pinned[v])) for v in
                                       np.flatnonzero(np.asarray(pinned) >= 0).tolist()]
    for v, k in items + list(pins.items()):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise GraphError(f"op {str(names[v])!r}: pin to device {k!r}: expected an "
                             f"integer device >= 0")
        L = int(leaders[v])
        if group_pin[L] >= 0 and group_pin[L] != k:
            u = pinned_by[L]
            raise GraphError(f"op {str(names[v])!r}: pinned to device {k}, but op "
                             f"{str(names[u])!r} of the same colocation group (leader "
                             f"{str(names[L])!r}) is pinned to device {group_pin[L]}")
        group_pin[L] = k
        pinned_by.setdefault(L, v)
    return group_pin[leaders].astype(np.int32)
