"""Independent pure-Python reference of the performance model (docs/design.md §4, regal/sim/SIM_RULES.md).

Written for clarity, not speed, and structured unlike an event-heap simulator: time advances
over the distinct instants at which something finishes, and at each instant every device and
every channel is scanned for work. Every rule of SIM_RULES is marked `[Rn]` where it is applied.
The compiled kernel in `regal.sim` must agree with this to the byte (tests/test_sim_agreement.py).

A reference, not a test helper: it is the independent truth that tests judge `regal.sim` by,
so it shares no code with `regal` beyond the graph it reads, and stays a module of its own
(the helpers are in tests/helpers.py). Its own hand-computed cases: tests/test_sim_reference.py.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["reference_simulate", "reference_objective", "reference_decode", "infeasible_offset"]


def _limits(memory_limit, count):
    """None (no limit) or a list of one limit per device; a scalar applies to every device."""
    if memory_limit is None:
        return None
    if np.ndim(memory_limit) == 0:
        return [memory_limit] * count
    limits = list(memory_limit)
    assert len(limits) == count
    return limits


def _static_structure(graph, placement):
    """Per-tensor facts that never change during a run: copies, their sizes, their frees."""
    n, t = graph.num_nodes, graph.num_tensors
    producer = [int(p) for p in graph.tensor_producer]
    size = [int(s) for s in graph.tensor_size]
    alias = [int(a) for a in graph.tensor_alias]
    dev = [int(k) for k in placement]
    # distinct consumers of each tensor, from the raw input lists
    # [R6: a consumer reading the same tensor on two ports counts once]
    consumers = {T: set() for T in range(t)}
    inputs = {v: set() for v in range(n)}
    for v in range(n):
        for T in graph.input_tensor[graph.input_ptr[v]:graph.input_ptr[v + 1]]:
            consumers[int(T)].add(v)
            inputs[v].add(int(T))  # [R2: "every distinct input tensor"]
    control_preds = {v: set() for v in range(n)}
    for v in range(n):
        for u in graph.control_pred[graph.control_ptr[v]:graph.control_ptr[v + 1]]:
            control_preds[v].add(int(u))
    # [R5] one transfer per (tensor, destination k != producer's device) with a consumer on k
    transfers = []
    for T in range(t):
        home = dev[producer[T]]
        for k in sorted({dev[c] for c in consumers[T]}):
            if k != home:
                transfers.append((T, k))
    # copies: (T, k) -> bytes it allocates on k
    copy_bytes = {}
    for T in range(t):
        # [R4/R6] an alias output costs 0 bytes on its producer's device
        copy_bytes[(T, dev[producer[T]])] = 0 if alias[T] >= 0 else size[T]
    for T, k in transfers:
        copy_bytes[(T, k)] = size[T]  # [R5] a transferred copy costs its own size, alias or not
    # [R6 alias] (T1, dev(v)) is held by (T2, dev(v)) for every alias T2 of T1 produced by v
    holders = {c: set() for c in copy_bytes}
    for T2 in range(t):
        if alias[T2] >= 0:
            k = dev[producer[T2]]
            holders[(alias[T2], k)].add((T2, k))
    return dict(producer=producer, size=size, alias=alias, dev=dev, consumers=consumers,
                inputs=inputs, control_preds=control_preds, transfers=transfers,
                copy_bytes=copy_bytes, holders=holders)


def reference_simulate(graph, count, memory_limit, bandwidth, latency, placement, priority,
                       transfer_priority, durations=None) -> dict:
    """Simulate one placement + schedule; returns dict(peak=list[int], makespan, feasible).

    `durations` [count][n]: op v's time on device k (device speeds, [R3]); default its
    compute_cost on every device."""
    n = graph.num_nodes
    s = _static_structure(graph, placement)
    producer, size, dev = s["producer"], s["size"], s["dev"]
    consumers, inputs, control_preds = s["consumers"], s["inputs"], s["control_preds"]
    copy_bytes, holders = s["copy_bytes"], s["holders"]
    if durations is None:
        cost = [float(c) for c in graph.compute_cost]
    else:  # [R3] with device speeds: the op's time on the device it is placed on
        cost = [float(durations[dev[v]][v]) for v in range(n)]
    prio = [float(p) for p in priority]
    tprio = [float(p) for p in transfer_priority]
    duration_of_transfer = {T: float(latency) + float(size[T]) / float(bandwidth)
                            for T, _ in s["transfers"]}  # [R5] latency + size / bandwidth

    # ---- state ------------------------------------------------------------
    live = [0] * count
    peak = [0] * count
    # [R1] persistent memory of every op is live on its device from t = 0
    for v in range(n):
        live[dev[v]] += int(graph.persistent_memory[v])
    for k in range(count):
        peak[k] = live[k]

    def allocate(k, nbytes):
        live[k] += nbytes
        peak[k] = max(peak[k], live[k])  # [R8] live bytes checked after every allocation

    not_started_ops = set(range(n))
    running_op = {}             # device -> (op, finish time)
    finished_ops = set()
    not_started_transfers = set(s["transfers"])
    running_transfer = {}       # (src, dst) channel -> ((T, k), finish time)
    finished_transfers = set()
    live_copies = set()         # copies (T, k) allocated and not yet freed
    freed_copies = set()
    finish_times = [0.0]        # [R9] makespan is 0.0 when everything has cost 0

    def present(T, k):
        """[R2a] T is on device k: produced there and finished, or its transfer there finished."""
        if dev[producer[T]] == k:
            return producer[T] in finished_ops
        return (T, k) in finished_transfers

    def op_ready(v):
        return (all(present(T, dev[v]) for T in inputs[v])               # [R2a]
                and control_preds[v] <= finished_ops)                     # [R2b] no transfer

    def transfer_ready(tr):
        return producer[tr[0]] in finished_ops  # [R5] ready when T's producer finishes

    def may_free(copy):
        T, k = copy
        if any(h not in freed_copies for h in holders[copy]):
            return False  # [R6 alias] held until every alias copy on k is freed (chains compose)
        here = {c for c in consumers[T] if dev[c] == k}
        if k == dev[producer[T]]:
            # [R6] producer-side copy: producer finished, consumers here finished, all transfers
            # of T finished; a tensor with no consumer anywhere is never freed
            if not consumers[T]:
                return False
            transfers_of_T = {tr for tr in s["transfers"] if tr[0] == T}
            return (producer[T] in finished_ops and here <= finished_ops
                    and transfers_of_T <= finished_transfers)
        return here <= finished_ops  # [R6] transferred copy: every consumer on k finished

    def free_what_can_be_freed():
        changed = True
        while changed:  # repeat: freeing an alias copy releases its hold on the aliased copy
            changed = False
            for copy in sorted(live_copies):
                if may_free(copy):
                    live_copies.remove(copy)
                    freed_copies.add(copy)
                    live[copy[1]] -= copy_bytes[copy]
                    changed = True

    # ---- time loop over distinct instants -----------------------------------
    now = 0.0
    while True:
        progress = True
        while progress:  # [R7c] repeat (a) and (b) at this instant until nothing changes
            progress = False
            # [R7a] everything whose finish time == now finishes (exact float equality) ...
            for k in range(count):
                if k in running_op and running_op[k][1] == now:
                    v, _ = running_op.pop(k)
                    finished_ops.add(v)
                    live[k] -= int(graph.temporary_memory[v])  # [R4] free temporary memory
                    progress = True
            for channel in sorted(running_transfer):
                if running_transfer[channel][1] == now:
                    tr, _ = running_transfer.pop(channel)
                    finished_transfers.add(tr)
                    progress = True
            # ... and all the frees it triggers happen
            free_what_can_be_freed()
            # [R7b] then idle devices start ops, in device index order
            for k in range(count):
                if k in running_op:
                    continue  # [R3] one op at a time, non-preemptive
                ready = [v for v in not_started_ops if dev[v] == k and op_ready(v)]
                if not ready:
                    continue
                v = min(ready, key=lambda u: (-prio[u], u))  # [R3] highest priority, then lower id
                not_started_ops.remove(v)
                finish = now + cost[v]  # [R3] duration = compute_cost (or its time on k)
                running_op[k] = (v, finish)
                finish_times.append(finish)
                allocate(k, int(graph.temporary_memory[v]))  # [R4] temporary memory
                for T in graph.outputs(v):
                    T = int(T)
                    live_copies.add((T, k))
                    allocate(k, copy_bytes[(T, k)])  # [R4] outputs (an alias output: 0 bytes)
                progress = True
            # [R7b] and idle channels start transfers, in (src, dst) order
            for src in range(count):
                for dst in range(count):
                    channel = (src, dst)
                    if src == dst or channel in running_transfer:
                        continue  # [R5] a channel serves one transfer at a time
                    ready = [tr for tr in not_started_transfers
                             if dev[producer[tr[0]]] == src and tr[1] == dst
                             and transfer_ready(tr)]
                    if not ready:
                        continue
                    # [R5] highest transfer priority (that of the producer op), then lower tensor id
                    tr = min(ready, key=lambda x: (-tprio[producer[x[0]]], x[0]))
                    not_started_transfers.remove(tr)
                    finish = now + duration_of_transfer[tr[0]]
                    running_transfer[channel] = (tr, finish)
                    finish_times.append(finish)
                    live_copies.add(tr)
                    allocate(dst, copy_bytes[tr])  # [R5] allocate size(T) on the destination
                    progress = True
        # advance to the next finish time
        pending = [f for _, f in running_op.values()] + [f for _, f in running_transfer.values()]
        if not pending:
            break
        now = min(pending)

    assert not not_started_ops and not not_started_transfers, "every op and transfer runs"
    limits = _limits(memory_limit, count)
    feasible = limits is None or all(peak[k] <= limits[k] for k in range(count))  # [R10]
    return dict(peak=[int(p) for p in peak], makespan=float(max(finish_times)),  # [R8] [R9]
                feasible=bool(feasible))


def infeasible_offset(graph, count, bandwidth, latency) -> float:
    """[R11] sum(compute_cost) + (d-1) * sum over tensors of (latency + size/bandwidth)."""
    per_tensor = sum(float(latency) + float(sz) / float(bandwidth) for sz in graph.tensor_size)
    return float(sum(float(c) for c in graph.compute_cost)) + (count - 1) * per_tensor


def reference_objective(result, graph, count, memory_limit, bandwidth, latency, name) -> float:
    """[R11] the two objectives, from a `reference_simulate` result."""
    if name not in ("peak_memory", "makespan"):
        raise ValueError(f"objective: unknown {name!r}")
    if name == "peak_memory":
        if result["feasible"]:
            return float(max(result["peak"]))
        limits = _limits(memory_limit, count)
        return float(max(limits) + max(p - lim for p, lim in zip(result["peak"], limits)))
    if result["feasible"]:
        return result["makespan"]
    limits = _limits(memory_limit, count)
    overflow = sum(max(0, p - lim) for p, lim in zip(result["peak"], limits))
    total_limit = sum(limits)
    if total_limit == 0:        # every limit 0 and some overflow: infinitely far over
        return float("inf")
    return (result["makespan"] * (1 + overflow / total_limit)
            + infeasible_offset(graph, count, bandwidth, latency))


def reference_decode(keys, n, count, colocation=None, pinned=None):
    """[R12] one chromosome -> (placement, priority, transfer_priority).

    [R13] with `colocation` (leader of each op) and `pinned` (-1 or a device per op): each
    group's device is decided once, by its pin, else by its leader's affinity row; every
    member takes it.
    """
    keys = np.asarray(keys, dtype=np.float64)
    assert keys.shape == (n * (count + 2),)
    affinity = keys[:n * count].reshape(n, count)

    def argmax_row(v):
        best = 0
        for k in range(1, count):
            if affinity[v, k] > affinity[v, best]:  # strict: ties go to the lower device index
                best = k
        return best

    if colocation is None:
        colocation = list(range(n))
    if pinned is None:
        pinned = [-1] * n
    members = {}
    for v in range(n):
        members.setdefault(int(colocation[v]), []).append(v)
    placement = [None] * n
    for leader, group in members.items():
        pins = {int(pinned[v]) for v in group}
        assert len(pins) == 1, "a group carries one pin"  # [R13] one device per group
        pin = pins.pop()
        device = pin if pin >= 0 else argmax_row(leader)  # [R13] the pin overrides the keys
        assert 0 <= device < count
        for v in group:
            placement[v] = device
    priority = keys[n * count:n * count + n].tolist()
    transfer = keys[n * count + n:n * count + 2 * n].tolist()
    return placement, priority, transfer


def relative_close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or a == b
