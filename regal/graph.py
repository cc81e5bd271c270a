"""The computation-graph data model (docs/design.md §3).

A `ComputationGraph` is a named tuple of read-only numpy arrays, built once by
`build_graph` (which validates everything) and shared by every consumer: the
simulator, the decoder, the policy's featurizer and the baselines.

Ids: ops are `0..n-1`; tensors are `0..t-1` and run in op order, then output
port, so the outputs of op `v` are `output_ptr[v]:output_ptr[v+1]`.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from typing import NamedTuple, Sequence

import numpy as np

__all__ = [
    "ComputationGraph", "GraphError", "build_graph", "summarize", "MAX_BYTES",
    "op_bytes", "group_leaders", "check_constraints", "check_pins", "MICROBATCH_SCOPE",
    "microbatch_of", "has_microbatches"
]


class GraphError(ValueError):
    """An invalid graph; the message names the offending op, tensor or field."""


# What a graph may hold: every byte count, every per-graph byte total (and all of them
# together), and the total compute cost. One device's peak memory is at most the sum of
# all three totals, so every byte figure the simulator, bounds and summaries form stays
# exact in int64 (2**63 - 1) and no time figure can reach infinity.
MAX_BYTES = 2**62
MAX_TOTAL_COST = 2.0**62  # microseconds (about 146,000 years)


class ComputationGraph(NamedTuple):
    # ops
    names: np.ndarray              # [n] str
    op_types: np.ndarray           # [n] str ('' when unknown)
    compute_cost: np.ndarray       # [n] float64, microseconds
    temporary_memory: np.ndarray   # [n] int64 bytes, held while the op runs
    persistent_memory: np.ndarray  # [n] int64 bytes, held for the whole run
    is_final: np.ndarray           # [n] bool (CostGraphDef's is_final; informational)
    # tensors
    tensor_producer: np.ndarray    # [t] int32, non-decreasing
    tensor_size: np.ndarray        # [t] int64 bytes
    tensor_alias: np.ndarray       # [t] int32, input tensor this one aliases, or -1
    output_ptr: np.ndarray         # [n+1] int32: outputs of v = output_ptr[v]:output_ptr[v+1]
    # data edges, in input-port order per consumer (a tensor may repeat)
    input_ptr: np.ndarray          # [n+1] int32
    input_tensor: np.ndarray       # [e] int32
    # control edges
    control_ptr: np.ndarray        # [n+1] int32: control predecessors of v
    control_pred: np.ndarray       # [c] int32
    # derived adjacency
    consumer_ptr: np.ndarray       # [t+1] int32
    consumer: np.ndarray           # unique consumers of each tensor, ascending
    succ_ptr: np.ndarray           # [n+1] int32
    succ: np.ndarray               # unique successors (data + control), ascending
    pred_ptr: np.ndarray           # [n+1] int32
    pred: np.ndarray               # unique predecessors (data + control), ascending
    topo_order: np.ndarray         # [n] int32
    # placement constraints (docs/design.md §3): ops of one colocation group run on one device
    colocation: np.ndarray         # [n] int32 group leader = lowest op id of v's group (a free op: v)
    pinned: np.ndarray             # [n] int32 device the group is pinned to, or -1 (same on every member)
    # the cost model's inputs, kept by the TensorFlow importer so an op can be timed on devices
    # of other speeds (regal.sim.speeds); None for CostGraphDefs, synthetic and older graphs.
    # Not part of fingerprint(): compute_cost already holds them at the reference speeds.
    op_flops: np.ndarray | None = None  # [n] float64 FLOP estimate
    op_bytes: np.ndarray | None = None  # [n] float64 bytes read and written

    # -- sizes -------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_tensors(self) -> int:
        return len(self.tensor_producer)

    @property
    def num_data_edges(self) -> int:
        return len(self.input_tensor)

    @property
    def num_control_edges(self) -> int:
        return len(self.control_pred)

    @property
    def tensor_port(self) -> np.ndarray:
        """Output port of every tensor on its producer."""
        return (np.arange(self.num_tensors, dtype=np.int32)
                - self.output_ptr[self.tensor_producer]).astype(np.int32)

    def outputs(self, v: int) -> np.ndarray:
        return np.arange(self.output_ptr[v], self.output_ptr[v + 1], dtype=np.int32)

    def inputs(self, v: int) -> np.ndarray:
        return self.input_tensor[self.input_ptr[v]:self.input_ptr[v + 1]]

    def control_inputs(self, v: int) -> np.ndarray:
        return self.control_pred[self.control_ptr[v]:self.control_ptr[v + 1]]

    def consumers(self, tensor: int) -> np.ndarray:
        return self.consumer[self.consumer_ptr[tensor]:self.consumer_ptr[tensor + 1]]

    def successors(self, v: int) -> np.ndarray:
        return self.succ[self.succ_ptr[v]:self.succ_ptr[v + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        return self.pred[self.pred_ptr[v]:self.pred_ptr[v + 1]]

    def index_of(self, name: str) -> int:
        hits = np.flatnonzero(self.names == name)
        if len(hits) == 0:
            raise KeyError(f"no op named {name!r}")
        return int(hits[0])

    @property
    def has_groups(self) -> bool:
        """Whether some op shares a colocation group with another."""
        return bool((self.colocation != np.arange(self.num_nodes)).any())

    @property
    def has_pins(self) -> bool:
        return bool((self.pinned >= 0).any())

    @property
    def constrained(self) -> bool:
        """Whether a placement must respect groups or pins (else every placement is allowed)."""
        return self.has_groups or self.has_pins

    def groups(self) -> dict[int, np.ndarray]:
        """Leader -> member op ids (ascending) of every group with more than one op."""
        leaders = self.colocation
        multi = np.flatnonzero(np.bincount(leaders, minlength=self.num_nodes) > 1)
        order = np.argsort(leaders, kind="stable")
        ptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(leaders, minlength=self.num_nodes), out=ptr[1:])
        return {int(L): order[ptr[L]:ptr[L + 1]] for L in multi}

    def levels(self) -> np.ndarray:
        """[n] int64: ops on the longest path that ends at each op, minus one (0 for an op
        without predecessors)."""
        level = np.zeros(self.num_nodes, dtype=np.int64)
        pp, pr = self.pred_ptr, self.pred
        for v in self.topo_order:
            a, b = pp[v], pp[v + 1]
            if b > a:
                level[v] = level[pr[a:b]].max() + 1
        return level

    def depth(self) -> int:
        """Number of ops on the longest path (1 for a single op)."""
        return int(self.levels().max()) + 1

    def fingerprint(self) -> str:
        """A stable hash of everything that defines the graph (solutions record it); the
        cost model's counts (op_flops, op_bytes) are left out, so keeping them changed no
        stored key, and so are the op types. Neither changes the objective on devices
        without speeds; the counts set op times on devices with speeds and the op types are
        features of the policy, so a cache of results that depend on them adds them to its
        own key (`regal.policy.reference.reference_for` adds the counts under speeds)."""
        h = hashlib.sha256()
        h.update("\0".join(self.names.tolist()).encode())
        for field in ("compute_cost", "temporary_memory", "persistent_memory",
                      "tensor_producer", "tensor_size", "tensor_alias", "input_ptr",
                      "input_tensor", "control_ptr", "control_pred"):
            arr = getattr(self, field)
            h.update(field.encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        # constraints only when there are some: an unconstrained graph keeps the hash it
        # had before constraints existed (stored records and solutions key on it)
        if self.has_groups:
            h.update(b"colocation")
            h.update(np.ascontiguousarray(self.colocation, dtype=np.int32).tobytes())
        if self.has_pins:
            h.update(b"pinned")
            h.update(np.ascontiguousarray(self.pinned, dtype=np.int32).tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"ComputationGraph(ops={self.num_nodes}, tensors={self.num_tensors}, "
                f"data_edges={self.num_data_edges}, control_edges={self.num_control_edges})")

    def equals(self, other: "ComputationGraph") -> bool:
        """Field-by-field array equality (NamedTuple's == would compare arrays elementwise);
        an absent field (None) equals only an absent one."""
        return all((a is None and b is None) if a is None or b is None else np.array_equal(a, b)
                   for a, b in zip(self, other))


# ---------------------------------------------------------------------------
# construction and validation


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _csr(keys: np.ndarray, values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Group `values` by `keys` (0..size-1), stable: returns (ptr, values in key order)."""
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=size), out=ptr[1:])
    return ptr.astype(np.int32), values[order].astype(np.int32)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique for 1-D ints by sorting (numpy 2.x's hash-based np.unique is ~5x slower)."""
    a = np.sort(a)
    keep = np.ones(len(a), dtype=bool)
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _unique_pairs(src: np.ndarray, dst: np.ndarray, num_src: int,
                  num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique (src, dst) pairs as a CSR over src (0..num_src-1) with ascending dst."""
    key = _sorted_unique(np.asarray(src, np.int64) * num_dst + np.asarray(dst, np.int64))
    s, d = key // num_dst, key % num_dst
    ptr = np.zeros(num_src + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=num_src), out=ptr[1:])
    return ptr.astype(np.int32), d.astype(np.int32)


def _as(name: str, values, dtype, length: int | None, what: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=dtype)  # a copy: the graph freezes it, not the caller's array
    except (TypeError, ValueError) as exc:
        raise GraphError(f"field {name!r}: cannot read as {np.dtype(dtype).name} ({exc})") from None
    if arr.ndim != 1:
        raise GraphError(f"field {name!r}: expected a 1-D array, got shape {arr.shape}")
    if length is not None and len(arr) != length:
        raise GraphError(f"field {name!r}: expected one value per {what} ({length}), got {len(arr)}")
    return arr


def _byte_counts(name: str, values, length: int, labels, kind: str) -> np.ndarray:
    """Byte counts as int64, each in 0..MAX_BYTES. Integers are read exactly (an int64
    above 2**53 must not round through a float, nor a uint64 wrap); floats truncate."""
    raw = np.asarray(values)
    exact = raw.dtype.kind in "iub"
    arr = _as(name, raw, np.float64 if not exact or raw.dtype.kind == "u" else np.int64,
              length, kind)
    bad = ~(arr >= 0)  # catches NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GraphError(f"{kind} {labels(i)}: {name} must be a non-negative number, got {arr[i]}")
    if not exact and not np.isfinite(arr).all():
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise GraphError(f"{kind} {labels(i)}: {name} must be finite, got {arr[i]}")
    big = (raw > MAX_BYTES) if exact else (arr > MAX_BYTES)  # unsigned compares unwrapped
    if big.any():
        i = int(np.flatnonzero(big)[0])
        value = int(raw[i]) if exact else arr[i]
        raise GraphError(f"{kind} {labels(i)}: {name} is {value} bytes, more than "
                         f"the 2**62 a graph may hold")
    return (raw if exact else arr).astype(np.int64)


def _exact_sum(arr: np.ndarray) -> int:
    """The exact sum of int64 counts each <= MAX_BYTES (numpy's would wrap)."""
    if not len(arr):
        return 0
    if float(arr.sum(dtype=np.float64)) < 2.0**61:  # far from int64's edge: numpy is exact
        return int(arr.sum())
    return sum(arr.tolist())


def _check_totals(fields) -> None:
    """Each per-graph byte total and their grand total <= MAX_BYTES; the message names the
    field and the op or tensor at which the running total first passes the limit."""
    grand = 0
    for name, arr, kind, label in fields:
        total = _exact_sum(arr)
        if total > MAX_BYTES:
            running = 0
            for i, value in enumerate(arr.tolist()):
                running += value
                if running > MAX_BYTES:
                    break
            raise GraphError(f"{kind} {label(i)}: the graph's total {name} passes 2**62 "
                             f"bytes here (in all {total}); a graph may hold at most 2**62")
        grand += total
    if grand > MAX_BYTES:
        raise GraphError(f"the graph holds {grand} bytes in all ("
                         + " + ".join(f"{_exact_sum(arr)} {name}" for name, arr, _, _ in fields)
                         + "), more than the 2**62 a graph may hold")


def _check_nonnegative(field: str, arr: np.ndarray, labels, kind: str) -> None:
    bad = ~(arr >= 0)  # catches NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GraphError(f"{kind} {labels(i)}: {field} must be a non-negative number, got {arr[i]}")


def build_graph(
    *,
    names: Sequence[str],
    compute_cost,
    tensor_producer,
    tensor_size,
    input_ptr,
    input_tensor,
    temporary_memory=None,
    persistent_memory=None,
    op_types: Sequence[str] | None = None,
    is_final=None,
    tensor_alias=None,
    control_src=(),
    control_dst=(),
    colocation=None,
    pinned=None,
    op_flops=None,
    op_bytes=None,
) -> ComputationGraph:
    """Validate raw arrays and derive the adjacency; raises `GraphError` on bad input.

    `tensor_producer` must be non-decreasing (tensors in op order, then port).
    `input_ptr`/`input_tensor` is a CSR of each op's input tensors in port order.
    `colocation` (leader of each op's group, the lowest id in it; default: every op free)
    and `pinned` (device of each op's group or -1; default: none) are in canonical form,
    as `group_leaders` makes them; `check_constraints` says what is enforced.
    `op_flops` and `op_bytes` (the cost model's FLOP and byte counts per op) come together
    or not at all.
    """
    names_arr = np.asarray(list(names), dtype=str)
    n = len(names_arr)
    if n == 0:
        raise GraphError("empty graph: it has no ops")
    if names_arr.ndim != 1:
        raise GraphError("field 'names': expected a list of op names")
    if len(set(names_arr.tolist())) != n:  # a set is ~10x faster than np.unique on strings
        uniq, counts = np.unique(names_arr, return_counts=True)
        raise GraphError(f"duplicate op name {str(uniq[np.argmax(counts > 1)])!r}")

    def op(i: int) -> str:
        return repr(str(names_arr[i]))

    cost = _as("compute_cost", compute_cost, np.float64, n, "op")
    _check_nonnegative("compute_cost", cost, op, "op")
    if not np.isfinite(cost).all():
        i = int(np.flatnonzero(~np.isfinite(cost))[0])
        raise GraphError(f"op {op(i)}: compute_cost must be finite, got {cost[i]}")
    with np.errstate(over="ignore"):  # a sum that overflows is inf, which fails the test
        running = np.cumsum(cost)
    if not running[-1] <= MAX_TOTAL_COST:
        i = int(np.searchsorted(running, MAX_TOTAL_COST, side="right"))
        raise GraphError(f"op {op(min(i, n - 1))}: the graph's total compute_cost passes 2**62 "
                         f"us here; a graph may hold at most 2**62 us of compute")
    temp = _byte_counts("temporary_memory",
                        np.zeros(n, np.int64) if temporary_memory is None else temporary_memory,
                        n, op, "op")
    pers = _byte_counts("persistent_memory",
                        np.zeros(n, np.int64) if persistent_memory is None else persistent_memory,
                        n, op, "op")
    types = np.asarray([""] * n if op_types is None else list(op_types), dtype=str)
    if len(types) != n:
        raise GraphError(f"field 'op_types': expected one value per op ({n}), got {len(types)}")
    final = _as("is_final", np.zeros(n, bool) if is_final is None else is_final, bool, n, "op")

    producer = _as("tensor_producer", tensor_producer, np.int64, None, "tensor")
    t = len(producer)
    alias = _as("tensor_alias", np.full(t, -1) if tensor_alias is None else tensor_alias,
                np.int64, t, "tensor")
    if t:
        bad = (producer < 0) | (producer >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise GraphError(f"tensor {i}: producer {producer[i]} is not an op (graph has {n} ops)")
        bad = np.diff(producer) < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            raise GraphError(f"tensor {i}: tensors must be ordered by producer, then port")

    def tensor(i: int) -> str:
        p = int(producer[i])
        return f"{i} (output of op {op(p)})"

    size = _byte_counts("size", tensor_size, t, tensor, "tensor")
    _check_totals([("temporary_memory", temp, "op", op), ("persistent_memory", pers, "op", op),
                   ("tensor size", size, "tensor", tensor)])

    iptr = _as("input_ptr", input_ptr, np.int64, n + 1, "op plus one")
    itensor = _as("input_tensor", input_tensor, np.int64, None, "data edge")
    if iptr[0] != 0 or (np.diff(iptr) < 0).any() or iptr[-1] != len(itensor):
        raise GraphError("field 'input_ptr': not a valid CSR offset array for 'input_tensor'")
    consumer_of_edge = np.repeat(np.arange(n, dtype=np.int64), np.diff(iptr))
    bad = (itensor < 0) | (itensor >= t)
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        v = int(consumer_of_edge[e])
        raise GraphError(f"op {op(v)}: input {e - iptr[v]} names a missing tensor ({itensor[e]})")

    csrc = _as("control_src", control_src, np.int64, None, "control edge")
    cdst = _as("control_dst", control_dst, np.int64, len(csrc), "control edge")
    for field, arr in (("control_src", csrc), ("control_dst", cdst)):
        bad = (arr < 0) | (arr >= n)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            other = cdst[k] if field == "control_src" else csrc[k]
            where = f"op {op(int(other))}" if 0 <= other < n else f"control edge {k}"
            raise GraphError(f"{where}: control edge names a missing op ({arr[k]})")

    # alias: must be an input tensor of the producing op
    aliased = np.flatnonzero(alias != -1)
    for i in aliased:
        p = int(producer[i])
        a = int(alias[i])
        if not (0 <= a < t) or a not in itensor[iptr[p]:iptr[p + 1]]:
            raise GraphError(f"tensor {tensor(int(i))}: alias_of names tensor {a}, "
                             f"which is not an input of op {op(p)}")

    output_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(producer, minlength=n), out=output_ptr[1:])

    consumer_ptr, consumer = _unique_pairs(itensor, consumer_of_edge, t, n)
    # node -> node edges (data + control), unique
    src = np.concatenate([producer[itensor], csrc])
    dst = np.concatenate([consumer_of_edge, cdst])
    self_loop = src == dst
    if self_loop.any():
        v = int(src[np.flatnonzero(self_loop)[0]])
        raise GraphError(f"cycle: op {op(v)} depends on itself")
    succ_ptr, succ = _unique_pairs(src, dst, n, n)
    pred_ptr, pred = _unique_pairs(dst, src, n, n)
    control_ptr, control_pred = _csr(cdst, csrc, n)

    topo = _topological_order(n, succ_ptr, succ, pred_ptr, pred, op)
    leaders = _as("colocation", np.arange(n) if colocation is None else colocation,
                  np.int64, n, "op")
    pins = _as("pinned", np.full(n, -1) if pinned is None else pinned, np.int64, n, "op")
    check_constraints(names_arr, leaders, pins)
    if (op_flops is None) != (op_bytes is None):
        raise GraphError("fields 'op_flops' and 'op_bytes': give both or neither")
    counts = {}
    if op_flops is not None:
        for field, values in (("op_flops", op_flops), ("op_bytes", op_bytes)):
            arr = _as(field, values, np.float64, n, "op")
            bad = ~(np.isfinite(arr) & (arr >= 0))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise GraphError(f"op {op(i)}: {field} must be a finite number >= 0, got {arr[i]}")
            counts[field] = _ro(arr)

    return ComputationGraph(
        names=_ro(names_arr), op_types=_ro(types), compute_cost=_ro(cost),
        temporary_memory=_ro(temp), persistent_memory=_ro(pers),
        is_final=_ro(final), tensor_producer=_ro(producer.astype(np.int32)),
        tensor_size=_ro(size), tensor_alias=_ro(alias.astype(np.int32)),
        output_ptr=_ro(output_ptr.astype(np.int32)), input_ptr=_ro(iptr.astype(np.int32)),
        input_tensor=_ro(itensor.astype(np.int32)), control_ptr=_ro(control_ptr),
        control_pred=_ro(control_pred), consumer_ptr=_ro(consumer_ptr), consumer=_ro(consumer),
        succ_ptr=_ro(succ_ptr), succ=_ro(succ), pred_ptr=_ro(pred_ptr), pred=_ro(pred),
        topo_order=_ro(topo), colocation=_ro(leaders.astype(np.int32)),
        pinned=_ro(pins.astype(np.int32)), **counts,
    )


def check_constraints(names, colocation: np.ndarray, pinned: np.ndarray,
                      num_devices: int | None = None) -> None:
    """Raises GraphError naming the op unless groups and pins are in canonical form.

    Every op's leader is an op with an id no higher than its own that leads itself (so
    the leader is the group's lowest id and each group has exactly one leader); every
    member carries its group's pin (-1 = none), so one group is never on two devices;
    with `num_devices`, pins lie in 0..num_devices-1.
    """
    n = len(colocation)

    def op(i) -> str:
        return repr(str(names[int(i)]))

    ids = np.arange(n)
    bad = (colocation < 0) | (colocation > ids)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(colocation[v])
        what = f"op {op(L)}, which has a higher id" if 0 <= L < n else f"{L}, not an op"
        raise GraphError(f"op {op(v)}: colocation leader is {what} (the leader is the lowest "
                         f"op id of the group)")
    bad = colocation[colocation] != colocation
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(colocation[v])
        raise GraphError(f"op {op(v)}: colocation leader {op(L)} is not in the group "
                         f"(its own leader is {op(colocation[L])})")
    bad = pinned < -1
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise GraphError(f"op {op(v)}: pinned to device {pinned[v]} (expected a device "
                         f">= 0, or -1 for none)")
    bad = pinned != pinned[colocation]
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(colocation[v])
        raise GraphError(f"op {op(v)}: pinned to device {pinned[v]}, but its colocation group "
                         f"(leader {op(L)}) is pinned to device {pinned[L]}; a group runs on "
                         f"one device")
    if num_devices is not None:
        check_pins(names, pinned, num_devices)


def check_pins(names, pinned: np.ndarray, num_devices: int) -> None:
    """GraphError naming the first op pinned outside devices 0..num_devices-1."""
    bad = pinned >= num_devices
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise GraphError(f"op {str(names[v])!r}: pinned to device {pinned[v]}, outside "
                         f"0..{num_devices - 1} ({num_devices} devices)")


def group_leaders(num_nodes: int, pairs) -> np.ndarray:
    """Union-find over (a, b) op pairs -> the canonical leader (lowest id) of every op's group."""
    parent = list(range(int(num_nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs:
        ra, rb = root(int(a)), root(int(b))
        if ra != rb:  # the lower id becomes the root, so every root is its group's minimum
            parent[max(ra, rb)] = min(ra, rb)
    return np.asarray([root(i) for i in range(int(num_nodes))], dtype=np.int32)


def _topological_order(n, succ_ptr, succ, pred_ptr, pred, op) -> np.ndarray:
    """Kahn's algorithm (FIFO, ids ascending among sources); names an op on a cycle."""
    indeg = np.diff(pred_ptr).tolist()
    sp, sc = succ_ptr.tolist(), succ.tolist()
    queue = deque(v for v in range(n) if indeg[v] == 0)
    order = []
    append, popleft = order.append, queue.popleft
    while queue:
        v = popleft()
        append(v)
        for w in sc[sp[v]:sp[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    if len(order) < n:
        # Every op left over has a predecessor left over: walk back until one repeats.
        left = np.asarray(indeg) > 0
        v = int(np.flatnonzero(left)[0])
        seen = set()
        while v not in seen:
            seen.add(v)
            ps = pred[pred_ptr[v]:pred_ptr[v + 1]]
            v = int(ps[left[ps]][0])
        raise GraphError(f"cycle: op {op(v)} lies on a cycle")
    return np.asarray(order, dtype=np.int32)


def op_bytes(graph: ComputationGraph) -> np.ndarray:
    """Bytes each op holds in a static accounting (Baechi's): its persistent and temporary
    memory and its non-alias outputs, int64. The balanced splits, m-topo, m-ETF and the
    colocation repair all weigh ops by it."""
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0).astype(np.int64)
    held = np.zeros(graph.num_nodes, np.int64)
    np.add.at(held, graph.tensor_producer, own)
    return (held + graph.temporary_memory.astype(np.int64)
            + graph.persistent_memory.astype(np.int64))


def summarize(graph: ComputationGraph) -> dict:
    """The figures `regal data info` prints."""
    sizes = graph.tensor_size
    return {
        "ops": graph.num_nodes,
        "tensors": graph.num_tensors,
        "data edges": graph.num_data_edges,
        "control edges": graph.num_control_edges,
        "total bytes": int(sizes.sum()),
        "largest tensor": int(sizes.max()) if len(sizes) else 0,
        "persistent bytes": int(graph.persistent_memory.sum()),
        "temporary bytes": int(graph.temporary_memory.sum()),
        "compute cost (us)": float(graph.compute_cost.sum()),
        "depth": graph.depth(),
    }


# the scope of one micro-batch's ops in a training step imported with `--microbatches K`
# (`regal.io.tensorflow.step`): microbatch0/..., microbatch1/..., also inside a gradients scope
MICROBATCH_SCOPE = re.compile(r"microbatch(\d+)")


def microbatch_of(names) -> np.ndarray:
    """The micro-batch of every op (its leading `microbatchM/` scope), -1 outside them."""
    out = np.full(len(names), -1, np.int64)
    for i, name in enumerate(names):
        found = MICROBATCH_SCOPE.fullmatch(str(name).split("/", 1)[0])
        if found and "/" in str(name):
            out[i] = int(found.group(1))
    return out


def has_microbatches(graph: ComputationGraph) -> bool:
    """Whether `graph` is a training step of two or more micro-batches."""
    batch = microbatch_of(graph.names)
    return len(np.unique(batch[batch >= 0])) >= 2
