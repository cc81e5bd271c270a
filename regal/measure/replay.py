"""The CPU replay: per-device peak memory rebuilt from a run's step statistics, because
logical CPUs share one allocator (the rules are in regal.measure's docstring)."""

from __future__ import annotations

import math
import re

import tensorflow as tf  # loaded by regal.measure's __init__, quietly and with Keras 2

from regal.measure.placed import _RECV_OPS, _SEND_OPS

__all__ = ["replay_step_stats"]


# ---------------------------------------------------------------------------
# the CPU replay


def _tensor_key(ref: str) -> tuple[str, int]:
    name, _, slot = ref.partition(":")
    return name, int(slot or 0)


def _device_index(name: str, kind: str) -> int | None:
    m = re.search(r"device:([A-Za-z_]+):(\d+)$", name)
    if not m or m.group(1).upper() != kind:
        return None
    return int(m.group(2))


def _nanos(node):
    start = node.all_start_nanos or node.all_start_micros * 1000
    dur = node.all_end_rel_nanos or node.all_end_rel_micros * 1000
    return start, start + dur


def replay_step_stats(metadata, count: int, fetches: list[str], kind: str = "CPU") -> dict:
    """Per-device peak bytes rebuilt from a traced run (see the module docstring).

    Returns {"peak": [count] int, "persistent": [count] int, "device_of": op -> index,
    "duration_us": op -> measured µs}.
    """
    pnodes = {}
    for pg in metadata.partition_graphs:
        for node in pg.node:
            pnodes[node.name] = node
    stats, device_of = {}, {}
    for dev in metadata.step_stats.dev_stats:
        k = _device_index(dev.device, kind)
        for ns in dev.node_stats:
            if ns.node_name in pnodes:
                stats[ns.node_name] = ns
                if k is not None:
                    device_of[ns.node_name] = k
    sends = {}  # rendezvous key -> source tensor
    for node in pnodes.values():
        if node.op in _SEND_OPS:
            sends[node.attr["tensor_name"].s] = _tensor_key(node.input[0])
    consumers: dict[tuple[str, tuple], list[str]] = {}
    for node in pnodes.values():
        for ref in node.input:
            if not ref.startswith("^"):
                consumers.setdefault(_tensor_key(ref), []).append(node.name)
    fetched = {_tensor_key(f) for f in fetches}
    times = {name: _nanos(ns) for name, ns in stats.items()}
    out_info = {}  # (name, slot) -> (bytes, ptr)
    for name, ns in stats.items():
        for out in ns.output:
            a = out.tensor_description.allocation_description
            out_info[(name, out.slot)] = (int(a.allocated_bytes or a.requested_bytes), int(a.ptr))

    # buffers: id -> [device, bytes, alloc time, tensor keys as seen on device, persistent?]
    buffers: list[list] = []
    where: dict[tuple[int, tuple], int] = {}  # (device, tensor key) -> buffer id
    persistent = [0] * count
    temp_events: list[tuple[int, int, int, int]] = []

    def resolve(k: int, key: tuple):
        """Buffer id of tensor `key` as an input on device k (a received tensor's copy)."""
        if (k, key) in where:
            return where[(k, key)]
        node = pnodes.get(key[0])
        if node is not None and node.op in _RECV_OPS:
            source = sends.get(node.attr["tensor_name"].s)
            size, _ = out_info.get(source, (0, 0))
            t0 = times.get(source[0], (0, 0))[1] if source else 0
            buffers.append([k, size, t0, [key], False])
            where[(k, key)] = len(buffers) - 1
            if source is not None and source in fetched:
                fetched.add(key)
            return where[(k, key)]
        return None

    for name in sorted(stats, key=lambda n: times[n]):
        k = device_of.get(name)
        node = pnodes[name]
        ns = stats[name]
        if k is None or k >= count:
            continue
        start, end = times[name]
        if node.op == "VarHandleOp":
            dtype = tf.as_dtype(node.attr["dtype"].type)
            dims = tf.TensorShape(node.attr["shape"].shape).as_list()
            persistent[k] += int(math.prod(dims)) * dtype.size
        persistent[k] += int(ns.memory_stats.persistent_memory_size)
        inputs = [_tensor_key(r) for r in node.input if not r.startswith("^")]
        in_bufs = {}
        for key in inputs:
            b = resolve(k, key)
            if b is not None:
                src = pnodes.get(key[0])
                if src is not None and src.op in _RECV_OPS:
                    s = sends.get(src.attr["tensor_name"].s)
                    ptr = out_info.get(s, (0, 0))[1]
                else:
                    ptr = out_info.get(key, (0, 0))[1]
                in_bufs.setdefault(ptr, b)
        allocated = sum(r.alloc_bytes for m in ns.memory for r in m.allocation_records
                        if r.alloc_bytes > 0)
        new_bytes = 0
        for out in ns.output:
            key = (name, out.slot)
            size, ptr = out_info[key]
            if ptr and ptr in in_bufs:  # forwarded input buffer: the same bytes
                b = in_bufs[ptr]
                buffers[b][3].append(key)
            elif allocated == 0 and node.op != "_Arg":  # a view of a variable or constant
                buffers.append([k, 0, start, [key], True])
                b = len(buffers) - 1
            else:
                buffers.append([k, size, start, [key], False])
                b = len(buffers) - 1
                new_bytes += size
            where[(k, key)] = b
        peak_here = sum(int(m.peak_bytes) for m in ns.memory)
        scratch = peak_here - new_bytes
        if scratch > 0:
            temp_events.append((k, start, end, scratch))

    events: list[list[tuple]] = [[] for _ in range(count)]  # (time, alloc?, bytes, scratch?)
    fetch_sends = _fetch_keys(pnodes, fetched)
    for k, start, end, size in temp_events:
        events[k] += [(start, 1, size, True), (end, 0, -size, True)]
    for b, (k, size, t0, keys, pers) in enumerate(buffers):
        if pers or size == 0:
            continue
        free = None
        ends = []
        for key in keys:
            if key in fetched:
                free = math.inf
            for c in consumers.get(key, []):
                cnode = pnodes[c]
                if cnode.op == "_Retval":
                    free = math.inf
                elif device_of.get(c) == k and c in times:
                    ends.append(times[c][1])
                elif cnode.op in _SEND_OPS and cnode.attr["tensor_name"].s in fetch_sends:
                    free = math.inf
        if free is None:
            free = max(ends) if ends else max(t0, times.get(keys[-1][0], (t0, t0))[1])
        if _only_fetch_copy(keys[0], pnodes, consumers):
            continue  # the client's copy of a fetched tensor is host memory, not a device's
        events[k].append((t0, 1, size, False))
        if free != math.inf:
            events[k].append((free, 0, -size, False))
    peaks, tensor_peaks = [], []
    for k in range(count):
        live = best = tensors = best_tensors = 0
        for _, _, delta, scratch in sorted(events[k]):  # at one instant, frees first
            live += delta
            tensors += 0 if scratch else delta
            best = max(best, live)
            best_tensors = max(best_tensors, tensors)
        peaks.append(persistent[k] + best)
        tensor_peaks.append(persistent[k] + best_tensors)
    duration = {n: (t[1] - t[0]) / 1000.0 for n, t in times.items()}
    return {"peak": peaks, "peak_without_scratch": tensor_peaks, "persistent": persistent,
            "device_of": device_of, "duration_us": duration}


def _fetch_keys(pnodes, fetched) -> set:
    """Rendezvous keys of sends that carry a fetched tensor to the client."""
    return {n.attr["tensor_name"].s for n in pnodes.values()
            if n.op in _SEND_OPS and _tensor_key(n.input[0]) in fetched}


def _only_fetch_copy(key, pnodes, consumers) -> bool:
    node = pnodes.get(key[0])
    if node is None or node.op not in _RECV_OPS:
        return False
    users = consumers.get(key, [])
    return bool(users) and all(pnodes[c].op == "_Retval" for c in users)
