"""Node and edge features of a computation graph for the policy (numpy only).

Every feature is either a log of a physical quantity scaled by a fixed constant
or a ratio that does not grow with the graph (depth fractions, z-scores within
the graph), so a policy trained on 500-op graphs sees familiar numbers on a
50,000-op graph. Messages flow both ways: every edge appears twice, once
forward (direction 0) and once reversed (direction 1).

The last `REFERENCE_FEATURES` columns describe the graph's reference solution
(`regal.policy.reference`), which the placement and order actions are relative to:
where the op sits in it, whether its neighbours share its device, how loaded that
device is. They use canonical labels only, so they do not change when devices are renamed.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import numpy as np

from regal.graph import ComputationGraph

__all__ = [
    "GraphFeatures", "NODE_FEATURES", "EDGE_FEATURES", "OP_TYPE_BUCKETS",
    "graph_features", "op_type_ids", "device_context", "longest_path_levels",
    "REFERENCE_FEATURES", "reference_columns",
]

OP_TYPE_BUCKETS = 64  # id 0 = unknown op type; 1..63 = hashed buckets

# fixed scales: log1p(bytes) / 25 is ~1 for tens of GB; log1p(us) / 15 is ~1 for 1e6 us
BYTES_SCALE = 25.0
COST_SCALE = 15.0
COUNT_SCALE = 5.0    # log1p(degree) / 5: ~1 at 150 neighbours
SIZE_SCALE = 12.0    # log1p(ops) / 12: ~1 at 160k ops

NODE_FEATURES = (
    "log_compute_cost", "log_input_bytes", "log_output_bytes", "log_persistent_bytes",
    "log_temporary_bytes", "log_data_in_degree", "log_data_out_degree",
    "log_control_in_degree", "log_control_out_degree", "depth_fraction",
    "reverse_depth_fraction", "z_log_compute_cost", "z_log_output_bytes",
    # graph-level context, the same on every node
    "log_num_devices", "inv_num_devices", "has_memory_limit", "memory_limit_over_total_bytes",
    "log_num_ops",
    # the reference solution (see the module docstring)
    "ref_label_fraction", "ref_same_device_inputs", "ref_same_device_outputs",
    "ref_order_fraction", "ref_device_peak_ratio", "ref_on_peak_device",
)
REFERENCE_FEATURES = NODE_FEATURES[NODE_FEATURES.index("ref_label_fraction"):]
EDGE_FEATURES = ("log_tensor_bytes", "is_control", "is_reversed")


class GraphFeatures(NamedTuple):
    """What the GNN reads: float32 node/edge features and int edge endpoints."""

    nodes: np.ndarray       # [n, len(NODE_FEATURES)] float32
    op_type: np.ndarray     # [n] int32 in 0..OP_TYPE_BUCKETS-1
    edge_index: np.ndarray  # [m, 2] int64: (sender, receiver), both directions
    edges: np.ndarray       # [m, len(EDGE_FEATURES)] float32
    num_devices: int
    reference: object = None  # regal.policy.reference.Reference the actions are relative to

    @property
    def num_nodes(self) -> int:
        return len(self.op_type)


def op_type_ids(op_types: np.ndarray, buckets: int = OP_TYPE_BUCKETS) -> np.ndarray:
    """Stable hash (crc32, not Python's salted hash) of each op type into 1..buckets-1; 0 if empty."""
    ids = np.zeros(len(op_types), dtype=np.int32)
    cache: dict[str, int] = {}
    for i, t in enumerate(op_types.tolist()):
        if t:
            if t not in cache:
                cache[t] = 1 + zlib.crc32(t.encode()) % (buckets - 1)
            ids[i] = cache[t]
    return ids


def device_context(devices) -> tuple[int, float | None]:
    """(device count, smallest memory limit or None) from an int or a DeviceSpec-like object."""
    if isinstance(devices, (int, np.integer)):
        d, limit = int(devices), None
    else:
        d = None
        for attr in ("count", "num_devices", "d"):
            if getattr(devices, attr, None) is not None:
                d = int(getattr(devices, attr))
                break
        limit = getattr(devices, "memory_limit", None)
        if d is None and limit is not None and np.ndim(limit) == 1:
            d = len(limit)
        if d is None:
            raise ValueError(f"devices: cannot read a device count from {devices!r}")
        if limit is not None:
            limit = float(np.min(limit))
    if d < 1:
        raise ValueError(f"devices: need at least one device, got {d}")
    return d, limit


def longest_path_levels(graph: ComputationGraph) -> tuple[np.ndarray, np.ndarray]:
    """(depth, reverse depth): ops on the longest path from any source / to any sink, minus one."""
    n = graph.num_nodes
    pp, pr = graph.pred_ptr.tolist(), graph.pred.tolist()
    sp, sc = graph.succ_ptr.tolist(), graph.succ.tolist()
    order = graph.topo_order.tolist()
    depth = [0] * n
    for v in order:
        a, b = pp[v], pp[v + 1]
        if b > a:
            depth[v] = max(depth[u] for u in pr[a:b]) + 1
    rdepth = [0] * n
    for v in reversed(order):
        a, b = sp[v], sp[v + 1]
        if b > a:
            rdepth[v] = max(rdepth[w] for w in sc[a:b]) + 1
    return np.asarray(depth, np.int64), np.asarray(rdepth, np.int64)


def _zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-9 else np.zeros_like(x)


def reference_columns(graph: ComputationGraph, reference) -> list[np.ndarray]:
    """The REFERENCE_FEATURES columns (float64 [n] each) of `reference` on `graph`."""
    labels = np.asarray(reference.labels, np.int64)
    d = reference.num_devices
    n = graph.num_nodes

    def same_share(ptr, nbr):
        count = np.diff(ptr)
        owner = np.repeat(np.arange(n), count)
        same = np.bincount(owner, weights=(labels[nbr] == labels[owner]).astype(np.float64),
                           minlength=n)
        return np.where(count > 0, same / np.maximum(count, 1), 1.0)

    peak = np.asarray(reference.peak, np.float64)
    top = peak.max() if peak.max() > 0 else 1.0
    ratio = peak[labels] / top
    return [labels / max(d - 1, 1), same_share(graph.pred_ptr, graph.pred),
            same_share(graph.succ_ptr, graph.succ), np.asarray(reference.priority, np.float64),
            ratio, (ratio >= 1.0).astype(np.float64)]


def graph_features(graph: ComputationGraph, devices, objective: str = "peak_memory",
                   reference=None) -> GraphFeatures:
    """Features of every op and every (doubled) edge; `devices` is an int or a DeviceSpec.
    `reference` defaults to `reference_for(graph, devices, objective)` (cached)."""
    d, limit = device_context(devices)
    if limit is not None and not isinstance(devices, (int, np.integer)):
        from regal.policy.reference import as_device_spec
        from regal.sim import ranking_limits
        if ranking_limits(graph, as_device_spec(devices), objective) is None:
            limit = None  # a limit that changes no ranking (SIM_RULES 11) is not a feature
    if reference is None:
        from regal.policy.reference import reference_for
        reference = reference_for(graph, devices, objective)
    if reference.num_devices != d or len(reference.labels) != graph.num_nodes:
        raise ValueError(f"reference: made for {len(reference.labels)} ops on "
                         f"{reference.num_devices} devices, not {graph.num_nodes} on {d}")
    n, t = graph.num_nodes, graph.num_tensors
    size = graph.tensor_size.astype(np.float64)

    # unique (tensor, consumer) pairs: one data edge each
    cons_counts = np.diff(graph.consumer_ptr)
    pair_tensor = np.repeat(np.arange(t), cons_counts)
    pair_consumer = graph.consumer.astype(np.int64)
    pair_producer = graph.tensor_producer[pair_tensor].astype(np.int64)
    pair_bytes = size[pair_tensor]

    input_bytes = np.bincount(pair_consumer, weights=pair_bytes, minlength=n)
    output_bytes = np.bincount(graph.tensor_producer, weights=size, minlength=n)
    data_in = np.bincount(pair_consumer, minlength=n).astype(np.float64)
    data_out = np.bincount(pair_producer, minlength=n).astype(np.float64)
    ctrl_dst = np.repeat(np.arange(n), np.diff(graph.control_ptr))
    ctrl_src = graph.control_pred.astype(np.int64)
    ctrl_in = np.diff(graph.control_ptr).astype(np.float64)
    ctrl_out = np.bincount(ctrl_src, minlength=n).astype(np.float64)

    depth, rdepth = longest_path_levels(graph)
    longest = max(int(depth.max()), 1)

    log_cost = np.log1p(graph.compute_cost)
    log_out = np.log1p(output_bytes)
    total_bytes = float(size.sum() + graph.persistent_memory.sum())
    mem_ratio = 0.0 if limit is None else min(limit / max(total_bytes, 1.0), 10.0)

    cols = [
        log_cost / COST_SCALE,
        np.log1p(input_bytes) / BYTES_SCALE,
        log_out / BYTES_SCALE,
        np.log1p(graph.persistent_memory) / BYTES_SCALE,
        np.log1p(graph.temporary_memory) / BYTES_SCALE,
        np.log1p(data_in) / COUNT_SCALE,
        np.log1p(data_out) / COUNT_SCALE,
        np.log1p(ctrl_in) / COUNT_SCALE,
        np.log1p(ctrl_out) / COUNT_SCALE,
        depth / longest,
        rdepth / longest,
        _zscore(log_cost),
        _zscore(log_out),
    ]
    context = [np.log(d) / np.log(8.0), 1.0 / d, float(limit is not None), mem_ratio,
               np.log1p(n) / SIZE_SCALE]
    nodes = np.empty((n, len(NODE_FEATURES)), dtype=np.float32)
    for j, col in enumerate(cols):
        nodes[:, j] = col
    nodes[:, len(cols):len(cols) + len(context)] = np.asarray(context, dtype=np.float32)
    for j, col in enumerate(reference_columns(graph, reference)):
        nodes[:, len(cols) + len(context) + j] = col

    src = np.concatenate([pair_producer, ctrl_src])
    dst = np.concatenate([pair_consumer, ctrl_dst])
    ebytes = np.concatenate([pair_bytes, np.zeros(len(ctrl_src))])
    is_ctrl = np.concatenate([np.zeros(len(pair_producer)), np.ones(len(ctrl_src))])
    m = len(src)
    edge_index = np.empty((2 * m, 2), dtype=np.int64)
    edge_index[:m, 0], edge_index[:m, 1] = src, dst
    edge_index[m:, 0], edge_index[m:, 1] = dst, src
    edges = np.empty((2 * m, len(EDGE_FEATURES)), dtype=np.float32)
    edges[:, 0] = np.tile(np.log1p(ebytes) / BYTES_SCALE, 2)
    edges[:, 1] = np.tile(is_ctrl, 2)
    edges[:, 2] = np.repeat([0.0, 1.0], m)
    return GraphFeatures(nodes=nodes, op_type=op_type_ids(graph.op_types), edge_index=edge_index,
                         edges=edges, num_devices=d, reference=reference)
