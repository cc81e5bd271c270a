"""The compiled event-driven list scheduler (docs/design.md §4, to the letter of regal/sim/SIM_RULES.md).

`prepare` turns a graph into static arrays once; `_run` simulates one individual in
O((n + e + transfers) log n + n d) time using per-thread work arrays that are allocated once
(`_alloc_work`) and reset in place, so evaluating a population allocates nothing per
individual. Everything is `cache=True`, so a second process loads machine code from disk.
One algorithm in one module (about 740 lines): the scheduler's state arrays, events and
decoder are used together by every compiled entry point, and keeping them beside each other
is what lets the agreement tests against tests/sim_reference.py point at one place.
`evaluate_batch_grouped` is `evaluate_batch` for graphs with colocation groups or pins
(SIM_RULES 13: a group's device is its pin or comes from its leader's keys), a separate entry
point so that the unconstrained path stays exactly as it was.

Per individual:
  * per device, its ready ops, ordered by (priority desc, op id asc): a list kept sorted by
    insertion (best last, so a start pops the end) while at most _LIST_MAX are queued
    (usually ~5), a heap beyond that; pooled in one [n] array;
  * channel heaps of ready transfers, keyed (transfer priority desc, tensor id asc); channel
    (p, q) holds at most the tensors produced on p, so they are pooled in one [d * t] array
    with O(d^2) offsets only -- never an [n, d^2] array;
  * transfers are made when their tensor's producer finishes, in the same pass over its
    consumers that counts down the local ones (no per-individual pass over all edges); a
    transfer is named by the consumer-CSR slot of its first consumer on the destination, so
    ids follow tensor order (the tie-break) and its copy's bytes are static; the other
    consumers on that destination are linked behind it (`next_reader`), so its arrival
    visits only its own readers;
  * the running ops and transfers (at most d + d(d-1) = d^2, ~3 at d = 2) in an array kept
    sorted latest-first: the next to finish is the last one;
  * one reference count per tensor *copy*: copies 0..t-1 are the producer-side copies,
    copies t + r the destination copies of transfer r. Each copy knows its device, its bytes
    and the copy it holds alive (an alias's home copy holds its source's copy there), so
    every free, with its alias cascade, is one short loop without case analysis. Count,
    device, hold and bytes sit side by side in `copy_state` (one cache line per release),
    as int32 unless some byte count of the graph needs int64.

Speed notes (measured with CPU time, one thread, vs the first version: 1.3x at every n, d;
making transfers lazily cut the per-individual setup from ~12 to ~2 µs at n=500, d=2, a
further 1.1-1.2x; a branch-free first free, interleaved copy state and short unsorted ready
lists ~5% more; then sorted ready lists, reader lists per transfer, the sorted event array
and the bytes inside the copy record 1.14x (d=2) to 1.24x (d=8); then one pass over all of a
finished op's consumers (its outputs are contiguous in the consumer CSR) and starting a transfer
at once on an idle, empty channel when its producer is the instant's last event 1.06x (d=2),
1.16x (d=4), 1.05x (d=8) on an idle but noisy machine (1.09-1.17x under load); then int32
byte counts (16-byte copy records) and one 8-field record per op 1.13x (d=2), 1.09x (d=4),
1.08x (d=8), 1.16x (n=2000) (median of 7 interleaved rounds, idle): the hot data is ~3x the
32 KB L1, so bytes saved there pay; tried without a measurable gain: a 6-field op record,
records per consumer slot, densely numbered destination copies, a per-op (wait, device,
priority) record, copying the priorities before the run, the cost inside the op record,
12-byte copy records (count and device in one word: 0.93x), transfer times recomputed from
sizes (0.96x), each slot's consumer device gathered up front, sorted lists for channels, no
branch on a consumer's device; identical kernels measure 0.99-1.07x in these A/Bs): the
loop is bound by data-dependent branches (cachegrind: ~29k branches, ~221k instructions per
n=500, d=2 individual) and dependent loads. So
every array index goes through `_u` (unsigned: no negative-index wraparound code, -13%),
frees are one loop over copies, and a device or channel enters the phase-(b) list only when
it can start something (became idle with work queued, or got its first item while idle).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from regal.sim.speeds import op_durations

I32 = np.int32

# Indices into the `counters` work array.
_MEM_EVENTS = 0   # number of memory-curve points recorded (trace mode)
_TRANSFERS = 1    # number of transfers of the last individual

# Index of the tensor sizes in `prepare`'s tuple: their dtype is the kernel's byte type.
S_SIZE = 4

# Indices into the work tuple that `api.trace` reads.
W_TR_TENSOR = 8
W_COPY_DEV = 9    # copy t + r lives on transfer r's destination
W_OP_START, W_OP_END, W_TR_START, W_TR_END = 20, 21, 22, 23
W_MEM_T, W_MEM_D, W_MEM_V, W_COUNTERS = 24, 25, 26, 27
W_DEV = 28


def prepare(graph, devices) -> tuple:
    """Static per-(graph, devices) arrays, computed once outside the per-individual loop."""
    n, t = graph.num_nodes, graph.num_tensors
    producer = np.ascontiguousarray(graph.tensor_producer, dtype=I32)
    size = np.ascontiguousarray(graph.tensor_size, dtype=np.int64)
    alias = np.ascontiguousarray(graph.tensor_alias, dtype=I32)
    consumer_ptr = np.ascontiguousarray(graph.consumer_ptr, dtype=I32)
    consumer = np.ascontiguousarray(graph.consumer, dtype=I32)

    # Distinct inputs of each op, with the position of that (tensor, op) pair in the
    # consumer CSR, so a producer can tell each input slot which copy it reads.
    edge_tensor = np.repeat(np.arange(t, dtype=I32), np.diff(consumer_ptr))
    by_consumer = np.argsort(consumer, kind="stable")
    unique_input = edge_tensor[by_consumer].astype(I32)
    edge_position = np.empty(len(consumer), dtype=I32)  # consumer-CSR slot -> input slot
    edge_position[by_consumer] = np.arange(len(consumer), dtype=I32)
    num_unique_inputs = np.bincount(consumer, minlength=n)
    unique_input_ptr = np.zeros(n + 1, dtype=I32)
    np.cumsum(num_unique_inputs, out=unique_input_ptr[1:])

    # Control successors, one entry per control edge (duplicates count twice on both sides).
    control_dst = np.repeat(np.arange(n, dtype=I32), np.diff(graph.control_ptr))
    control_src = np.asarray(graph.control_pred, dtype=I32)
    order = np.argsort(control_src, kind="stable")
    control_succ = control_dst[order].astype(I32)
    control_succ_ptr = np.zeros(n + 1, dtype=I32)
    np.cumsum(np.bincount(control_src, minlength=n), out=control_succ_ptr[1:])

    wait0 = (num_unique_inputs + np.diff(graph.control_ptr)).astype(I32)
    roots = np.flatnonzero(wait0 == 0).astype(I32)

    producer_bytes = np.where(alias >= 0, 0, size).astype(np.int64)  # an alias costs 0 at home
    output_bytes = np.zeros(n, dtype=np.int64)
    np.add.at(output_bytes, producer, producer_bytes)
    # A tensor nobody reads is never freed: one extra reference nobody releases.
    forever = (np.diff(consumer_ptr) == 0).astype(I32)
    # alias_slot[T2]: the input slot of T2's producer that reads the aliased tensor (or -1)
    alias_slot = np.full(t, -1, dtype=I32)
    for T2 in np.flatnonzero(alias >= 0):
        v = producer[T2]
        lo, hi = unique_input_ptr[v], unique_input_ptr[v + 1]
        slot = np.flatnonzero(unique_input[lo:hi] == alias[T2])
        if len(slot) == 0:
            raise ValueError(f"tensor {T2}: aliases tensor {alias[T2]}, not an input of op {v}")
        alias_slot[T2] = lo + slot[0]
    num_outputs = np.diff(graph.output_ptr).astype(I32)
    op_alias = np.zeros(n, dtype=np.bool_)  # ops with an alias output
    op_alias[producer[alias >= 0]] = True
    transfer_time = devices.transfer_time(size)
    temp = np.ascontiguousarray(graph.temporary_memory, dtype=np.int64)
    # Byte counts the loop reads (and the copy records) are int32 when every one of them
    # fits, as in all but the largest models: the hot data then fits the cache better
    # (with the op record below 1.13x at n=500, d=2). Sums (live, peak) stay int64 either way.
    fits = max(temp.max(initial=0), output_bytes.max(initial=0), size.max(initial=0)) < 2 ** 31
    byte_type = np.int32 if fits else np.int64
    # What the loop reads about an op, side by side (one cache line holds two ops): its
    # outputs' consumer-CSR slots [0, 1), its distinct input slots [2, 3), its control
    # successors [4, 5), temporary bytes, output bytes (1.03x over separate arrays in one
    # A/B: within the noise, where identical kernels measure 0.99-1.07x; kept as no slower)
    op_rec = np.empty((n, 8), dtype=byte_type)
    cptr = consumer_ptr[np.asarray(graph.output_ptr)]
    op_rec[:, 0] = cptr[:-1]
    op_rec[:, 1] = cptr[1:]
    op_rec[:, 2] = unique_input_ptr[:-1]
    op_rec[:, 3] = unique_input_ptr[1:]
    op_rec[:, 4] = control_succ_ptr[:-1]
    op_rec[:, 5] = control_succ_ptr[1:]
    op_rec[:, 6] = temp
    op_rec[:, 7] = output_bytes
    op_rec = op_rec.reshape(-1)

    # op v's time on device k is duration[k * stride + v], stride n when the devices have
    # speeds ([d, n] flattened, SIM_RULES 3) and 0 otherwise (the [n] compute costs: one
    # multiply-add per op start, no branch); last in the tuple, so the first 18 arrays are
    # what they always were (experiments/cpp/sim_port.cpp reads them)
    cost = np.ascontiguousarray(graph.compute_cost, dtype=np.float64)
    per_device = op_durations(graph, devices)
    duration = cost if per_device is None else np.ascontiguousarray(per_device.reshape(-1))

    return (
        cost,
        np.ascontiguousarray(graph.persistent_memory, dtype=np.int64),
        producer, producer_bytes.astype(byte_type), size.astype(byte_type), forever,
        np.ascontiguousarray(transfer_time, dtype=np.float64),
        np.ascontiguousarray(graph.output_ptr, dtype=I32),
        consumer, edge_position, control_succ, wait0, alias_slot,
        edge_tensor, roots, num_outputs,
        op_alias, op_rec, duration,
    )


@njit(cache=True)
def _alloc_work(S, d, trace):
    """Every array one simulation needs; `trace` sizes the recording arrays (else empty).

    The parts of the copy arrays that never change between individuals (bytes of every copy,
    holds of non-alias copies) are filled here, once. A transfer is named by the consumer-CSR
    slot of the first consumer of its tensor on its destination (so ids follow tensor order);
    its destination copy is copy t + that slot.
    """
    (cost, _, producer, producer_bytes, size, _, _, _,
     consumer, _, _, _, _, edge_tensor, _, _, _, _, _) = S
    n = cost.shape[0]
    t = producer.shape[0]
    e = consumer.shape[0]
    dd = d * d
    rec_n = n if trace else 0
    rec_e = e if trace else 0
    rec_c = (t + e) if trace else 0
    rec_m = (d + 2 * n + t + 2 * e) if trace else 0
    copy_state = np.empty(4 * (t + e), size.dtype)  # int32 or int64, like the byte counts
    for T in range(t):
        copy_state[4 * T + 2] = -1
        copy_state[4 * T + 3] = producer_bytes[T]
    for r in range(e):
        copy_state[4 * (t + r) + 2] = -1
        copy_state[4 * (t + r) + 3] = size[edge_tensor[r]]
    return (
        np.empty(n, np.int32),          # 0 wait: unmet inputs + control preds per op
        np.empty(n, np.int32),          # 1 op_heap: pooled device ready lists or heaps
        np.empty(n, np.float64),        # 2 op_heap_key
        np.empty(d + 1, np.int32),      # 3 dev_off
        np.empty(d, np.int32),          # 4 dev_size
        np.empty(d, np.bool_),          # 5 dev_busy
        np.empty(d, np.int32),          # 6 mark_t: tensor whose transfers were last made
        np.empty(d, np.int32),          # 7 mark_tr: its transfer to device k
        np.empty(rec_e, np.int32),      # 8 tr_tensor (trace: compacted at the end)
        np.empty(rec_c, np.int32),      # 9 trace: transfer destinations at t..
        np.empty(0, np.int32),          # 10 (unused)
        copy_state,                     # 11 per copy: references left, device, copy it holds, bytes
        np.empty(e, np.int32),          # 12 next_reader: next slot reading the same transfer
        np.empty(e, np.int32),          # 13 uin_copy: copy an op's input slot reads
        np.empty(dd + 1, np.int32),     # 14 chan_off
        np.empty(dd, np.int32),         # 15 chan_size
        np.empty(d * t, np.int32),      # 16 chan_heap: pooled channel heaps
        np.empty(d * t, np.float64),    # 17 chan_heap_key
        np.empty(dd, np.bool_),         # 18 chan_busy
        np.empty(dd, np.int32),         # 19 dirty_chan list
        np.empty(rec_n, np.float64),    # 20 op_start
        np.empty(rec_n, np.float64),    # 21 op_end
        np.full(rec_e, -1.0),           # 22 tr_start (-1: no such transfer)
        np.empty(rec_e, np.float64),    # 23 tr_end
        np.empty(rec_m, np.float64),    # 24 mem_t
        np.empty(rec_m, np.int32),      # 25 mem_d
        np.empty(rec_m, np.int64),      # 26 mem_v
        np.zeros(4, np.int64),          # 27 counters
        np.empty(n, np.int32),          # 28 dev (decoded placement, evaluate only)
        np.empty(d, np.int64),          # 29 live
        np.empty(dd, np.float64),       # 30 ev_time
        np.empty(dd, np.int32),         # 31 ev_id (op v, or n + transfer)
        np.empty(d, np.int32),          # 32 out_count: tensors produced per device
        np.empty(d, np.int32),          # 33 dirty_dev: devices that may start an op now
        np.empty(d, np.bool_),          # 34 dev_heap: device k's ready ops form a heap
        np.empty(d, np.int32),          # 35 mark_last: last consumer slot reading mark_tr
    )


@njit(cache=True, inline="always")
def _u(i):
    """An index as unsigned: numba then skips the negative-index wraparound code (measured
    -13% time at n=500 d=2). Only for indices known to be >= 0."""
    return np.uint64(i)


# ---------------------------------------------------------------------------
# heaps of (key, item): a comes before b when key_a > key_b, ties by the lower item id.
# Keys live beside the items, so a comparison never chases an index into another array.


@njit(cache=True, inline="always")
def _heap_push(items, keys, off, size, item, key):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        pk = keys[_u(off + parent)]
        if key > pk or (key == pk and item < items[_u(off + parent)]):
            items[_u(off + i)] = items[_u(off + parent)]
            keys[_u(off + i)] = pk
            i = parent
        else:
            break
    items[_u(off + i)] = item
    keys[_u(off + i)] = key


@njit(cache=True, inline="always")
def _heap_pop(items, keys, off, size):
    """Removes and returns the top item of a heap of `size` > 0 items."""
    top = items[_u(off)]
    size -= 1
    if size > 0:
        last = items[_u(off + size)]
        lk = keys[_u(off + size)]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            c = items[_u(off + child)]
            ck = keys[_u(off + child)]
            if child + 1 < size:
                r = items[_u(off + child + 1)]
                rk = keys[_u(off + child + 1)]
                if rk > ck or (rk == ck and r < c):
                    child += 1
                    c = r
                    ck = rk
            if ck > lk or (ck == lk and c < last):
                items[_u(off + i)] = c
                keys[_u(off + i)] = ck
                i = child
            else:
                break
        items[_u(off + i)] = last
        keys[_u(off + i)] = lk
    return top


@njit(cache=True, inline="always")
def _list_pop(items, keys, off, size):
    """Removes and returns the best of a sorted list of `size` > 0 items (best last)."""
    return items[_u(off + size - 1)]


@njit(cache=True, inline="always")
def _list_push(items, keys, off, size, item, key):
    """Inserts into a list kept sorted worst-first, so the best is popped from the end."""
    i = size
    while i > 0:
        pk = keys[_u(off + i - 1)]
        pi = items[_u(off + i - 1)]
        if pk > key or (pk == key and pi < item):
            items[_u(off + i)] = pi
            keys[_u(off + i)] = pk
            i -= 1
        else:
            break
    items[_u(off + i)] = item
    keys[_u(off + i)] = key


# A device's ready ops are an unsorted list while few (a pop scans them without branching,
# cheaper than a heap's unpredictable sift for the ~5 ops usually queued) and a heap once
# more than _LIST_MAX are queued, until it empties -- so a wide graph stays O(log) per op.
_LIST_MAX = 16


@njit(cache=True, inline="always")
def _ready_push(items, keys, is_heap, k, off, size, item, key):
    """Adds `item` to device k's ready ops (`size` before the push)."""
    if is_heap[_u(k)]:
        _heap_push(items, keys, off, size, item, key)
    else:
        _list_push(items, keys, off, size, item, key)
        if size + 1 > _LIST_MAX:
            for i in range(1, size + 1):
                _heap_push(items, keys, off, i, items[_u(off + i)], keys[_u(off + i)])
            is_heap[_u(k)] = True


@njit(cache=True, inline="always")
def _ready_pop(items, keys, is_heap, k, off, size):
    """Removes and returns device k's best ready op (`size` > 0 before the pop)."""
    if is_heap[_u(k)]:
        if size == 1:
            is_heap[_u(k)] = False
        return _heap_pop(items, keys, off, size)
    return _list_pop(items, keys, off, size)


@njit(cache=True, inline="always")
def _count_down(w, k, wait, items, keys, is_heap, dev_off, dev_size, dev_busy, dirty_dev,
                n_dirty_dev, prio):
    """Op w (on device k) has one wait fewer; at none it joins k's ready ops, and k enters
    the phase-(b) list if that was its first queued op while idle. Returns the list's size."""
    left = wait[_u(w)] - 1
    wait[_u(w)] = left
    if left == 0:
        _ready_push(items, keys, is_heap, k, dev_off[_u(k)], dev_size[_u(k)], w, prio[_u(w)])
        dev_size[_u(k)] += 1
        if dev_size[_u(k)] == 1 and not dev_busy[_u(k)]:
            dirty_dev[_u(n_dirty_dev)] = k
            n_dirty_dev += 1
    return n_dirty_dev


@njit(cache=True, inline="always")
def _event_push(ev_time, ev_id, size, time, item):
    """Events sorted latest-first, so the earliest is at the end (few run at once)."""
    i = size
    while i > 0 and ev_time[_u(i - 1)] < time:
        ev_time[_u(i)] = ev_time[_u(i - 1)]
        ev_id[_u(i)] = ev_id[_u(i - 1)]
        i -= 1
    ev_time[_u(i)] = time
    ev_id[_u(i)] = item


@njit(cache=True, inline="always")
def _event_pop(ev_time, ev_id, size):
    """Removes the earliest of `size` > 0 events and returns its id."""
    return ev_id[_u(size - 1)]


# ---------------------------------------------------------------------------
# memory (helpers take arrays, never the work tuple: pulling arrays out of a tuple in the
# hot loop costs reference counting on every call)


@njit(cache=True, inline="always")
def _record(mem_t, mem_d, mem_v, counters, k, value, now):
    """Trace mode only: one point of device k's memory curve."""
    if mem_t.shape[_u(0)] > 0:
        m = counters[_MEM_EVENTS]
        mem_t[_u(m)] = now
        mem_d[_u(m)] = k
        mem_v[_u(m)] = value
        counters[_MEM_EVENTS] = m + 1


@njit(cache=True, inline="always")
def _release(c, copy_state, live,
             mem_t, mem_d, mem_v, counters, now):
    """Drops one reference to copy c; at 0 frees it and drops the reference it held.

    Whether the count hit 0 is data-dependent and about even odds, so the first free is
    done without a branch (subtracting bytes * freed); only the rare alias cascade branches.
    """
    left = copy_state[_u(4 * c)] - 1
    copy_state[_u(4 * c)] = left
    freed = left == 0
    k = copy_state[_u(4 * c + 1)]
    live[_u(k)] -= copy_state[_u(4 * c + 3)] * freed
    if mem_t.shape[_u(0)] > 0 and freed:
        _record(mem_t, mem_d, mem_v, counters, k, live[_u(k)], now)
    h = copy_state[_u(4 * c + 2)]
    if h >= 0 and freed:
        c = h
        while c >= 0:
            left = copy_state[_u(4 * c)] - 1
            copy_state[_u(4 * c)] = left
            if left != 0:
                return
            k = copy_state[_u(4 * c + 1)]
            live[_u(k)] -= copy_state[_u(4 * c + 3)]
            _record(mem_t, mem_d, mem_v, counters, k, live[_u(k)], now)
            c = copy_state[_u(4 * c + 2)]


# ---------------------------------------------------------------------------
# one individual


# _nrt=False: `_run` allocates nothing, so it needs no reference counting; with it, numba
# emitted atomic incref/decref pairs around every inlined helper call, which took half the
# time (measured: 330 -> 50 µs per n=500 individual).
@njit(cache=True, _nrt=False)
def _run(S, d, dev, prio, tprio, W, peak):
    """Simulates one individual; writes `peak` [d] and returns the makespan (-1 on a bug)."""
    (cost, pers, producer, producer_bytes, size, forever, transfer_time, output_ptr,
     consumer, edge_position, csucc, wait0, alias_slot, edge_tensor, roots, num_outputs,
     op_alias, op_rec, duration) = S
    wait, op_heap, op_heap_key, dev_off, dev_size, dev_busy, mark_t, mark_tr = W[0:8]
    tr_tensor, copy_dev, _, copy_state, next_reader, uin_copy = W[8:14]
    chan_off, chan_size, chan_heap, chan_heap_key, chan_busy, dirty_chan = W[14:20]
    op_start, op_end, tr_start, tr_end, mem_t, mem_d, mem_v, counters = W[20:28]
    live, ev_time, ev_id, out_count, dirty_dev, dev_heap, mark_last = W[29:36]
    tracing = op_start.shape[_u(0)] > 0

    n = cost.shape[_u(0)]
    t = producer.shape[_u(0)]
    dd = d * d
    stride = n if duration.shape[_u(0)] != n else 0  # SIM_RULES 3: per-device durations
    counters[_u(0)] = 0
    counters[_u(1)] = 0

    # devices: heap offsets, tensor counts (they bound channel queues), persistent memory
    for k in range(d + 1):
        dev_off[_u(k)] = 0
    for k in range(d):
        live[_u(k)] = 0
        out_count[_u(k)] = 0
    for v in range(n):
        k = dev[_u(v)]
        dev_off[_u(k + 1)] += 1
        out_count[_u(k)] += num_outputs[_u(v)]
        live[_u(k)] += pers[_u(v)]
    for k in range(d):
        dev_off[_u(k + 1)] += dev_off[_u(k)]
        dev_size[_u(k)] = 0
        dev_busy[_u(k)] = False
        dev_heap[_u(k)] = False
        mark_t[_u(k)] = -1
        peak[_u(k)] = live[_u(k)]
        _record(mem_t, mem_d, mem_v, counters, k, live[_u(k)], 0.0)
    # channel (p, q) queues at most the tensors produced on p: pooled in d * t slots
    base = 0
    for p in range(d):
        for q in range(d):
            chan_off[_u(p * d + q)] = base
            chan_size[_u(p * d + q)] = 0
            chan_busy[_u(p * d + q)] = False
            base += out_count[_u(p)]
    chan_off[_u(dd)] = base

    # producer-side copies count their references up as their consumers are met
    for T in range(t):
        copy_state[_u(4 * T)] = forever[_u(T)]
    # ops with nothing to wait for
    for v in range(n):
        wait[_u(v)] = wait0[_u(v)]
    for i in range(roots.shape[_u(0)]):
        v = roots[_u(i)]
        k = dev[_u(v)]
        _ready_push(op_heap, op_heap_key, dev_heap, k, dev_off[_u(k)], dev_size[_u(k)], v,
                    prio[_u(v)])
        dev_size[_u(k)] += 1
    # a device is looked at in phase (b) only when it may start something: it became idle
    # with ops queued, or got its first queued op while idle (so never listed twice)
    n_dirty_dev = 0
    for k in range(d):
        if dev_size[_u(k)] > 0:
            dirty_dev[_u(n_dirty_dev)] = k
            n_dirty_dev += 1

    nev = 0
    n_dirty_chan = 0
    done = 0
    now = 0.0
    while True:
        # (b) idle devices start their best ready op, idle channels their best transfer
        for i in range(n_dirty_dev):
            k = dirty_dev[_u(i)]
            if not dev_busy[_u(k)] and dev_size[_u(k)] > 0:
                v = _ready_pop(op_heap, op_heap_key, dev_heap, k, dev_off[_u(k)],
                               dev_size[_u(k)])
                dev_size[_u(k)] -= 1
                dev_busy[_u(k)] = True
                x = live[_u(k)] + op_rec[_u(8 * v + 6)] + op_rec[_u(8 * v + 7)]
                live[_u(k)] = x
                peak[_u(k)] = max(peak[_u(k)], x)
                _record(mem_t, mem_d, mem_v, counters, k, x, now)
                _event_push(ev_time, ev_id, nev, now + duration[_u(k * stride + v)], v)
                nev += 1
                if tracing:
                    op_start[_u(v)] = now
        for i in range(n_dirty_chan):
            c = dirty_chan[_u(i)]
            if chan_size[_u(c)] > 0 and not chan_busy[_u(c)]:
                tr = _heap_pop(chan_heap, chan_heap_key, chan_off[_u(c)], chan_size[_u(c)])
                chan_size[_u(c)] -= 1
                chan_busy[_u(c)] = True
                k = copy_state[_u(4 * (t + tr) + 1)]
                T = edge_tensor[_u(tr)]
                x = live[_u(k)] + size[_u(T)]
                live[_u(k)] = x
                peak[_u(k)] = max(peak[_u(k)], x)
                _record(mem_t, mem_d, mem_v, counters, k, x, now)
                _event_push(ev_time, ev_id, nev, now + transfer_time[_u(T)], n + tr)
                nev += 1
                if tracing:
                    tr_start[_u(tr)] = now
        n_dirty_chan = 0
        n_dirty_dev = 0

        if nev == 0:
            break
        # (a) everything that finishes at the next instant finishes, with its frees
        now = ev_time[_u(nev - 1)]
        while nev > 0 and ev_time[_u(nev - 1)] == now:
            item = _event_pop(ev_time, ev_id, nev)
            nev -= 1
            if item < n:
                v = item
                k = dev[_u(v)]
                done += 1
                if tracing:
                    op_end[_u(v)] = now
                dev_busy[_u(k)] = False
                if dev_size[_u(k)] > 0:
                    dirty_dev[_u(n_dirty_dev)] = k
                    n_dirty_dev += 1
                # v is the last to finish at `now`: a transfer it makes on an idle, empty
                # channel would be that channel's only candidate in phase (b), and nothing
                # on its destination is freed before then, so it starts at once
                fast = not tracing and (nev == 0 or ev_time[_u(nev - 1)] != now)
                live[_u(k)] -= op_rec[_u(8 * v + 6)]
                _record(mem_t, mem_d, mem_v, counters, k, live[_u(k)], now)
                # one pass over the consumers of all of v's outputs (contiguous in the CSR):
                # consumers here lose one wait; the first consumer on each other device
                # makes the transfer there (named by its slot), which all of them read
                for j in range(op_rec[_u(8 * v)], op_rec[_u(8 * v + 1)]):
                    T = edge_tensor[_u(j)]
                    copy_state[_u(4 * T + 1)] = k
                    w = consumer[_u(j)]
                    kw = dev[_u(w)]
                    if kw == k:
                        uin_copy[_u(edge_position[_u(j)])] = T
                        copy_state[_u(4 * T)] += 1
                        n_dirty_dev = _count_down(w, k, wait, op_heap, op_heap_key, dev_heap,
                                                  dev_off, dev_size, dev_busy, dirty_dev,
                                                  n_dirty_dev, prio)
                    else:
                        next_reader[_u(j)] = -1
                        if mark_t[_u(kw)] != T:
                            mark_t[_u(kw)] = T
                            mark_tr[_u(kw)] = j
                            copy_state[_u(4 * T)] += 1
                            copy_state[_u(4 * (t + j) + 1)] = kw
                            copy_state[_u(4 * (t + j))] = 0
                            c = k * d + kw
                            te = now + transfer_time[_u(T)]
                            if fast and not chan_busy[_u(c)] and chan_size[_u(c)] == 0 \
                                    and te != now:
                                # phase (b)'s transfer start, inline: a shared helper measured
                                # 3-7% slower at d = 4..8
                                chan_busy[_u(c)] = True
                                x = live[_u(kw)] + size[_u(T)]
                                live[_u(kw)] = x
                                peak[_u(kw)] = max(peak[_u(kw)], x)
                                _event_push(ev_time, ev_id, nev, te, n + j)
                                nev += 1
                            else:
                                _heap_push(chan_heap, chan_heap_key, chan_off[_u(c)],
                                           chan_size[_u(c)], j, tprio[_u(v)])
                                chan_size[_u(c)] += 1
                                if not chan_busy[_u(c)] and chan_size[_u(c)] == 1:
                                    dirty_chan[_u(n_dirty_chan)] = c
                                    n_dirty_chan += 1
                        else:
                            next_reader[_u(mark_last[_u(kw)])] = j
                        mark_last[_u(kw)] = j
                        r = t + mark_tr[_u(kw)]
                        copy_state[_u(4 * r)] += 1
                        uin_copy[_u(edge_position[_u(j)])] = r
                if op_alias[_u(v)]:
                    for T in range(output_ptr[_u(v)], output_ptr[_u(v + 1)]):
                        s = alias_slot[_u(T)]
                        if s >= 0:
                            # the aliased input's copy here lives until this copy is freed
                            copy_state[_u(4 * T + 1)] = k
                            h = uin_copy[_u(s)]
                            copy_state[_u(4 * h)] += 1
                            copy_state[_u(4 * T + 2)] = h
                for j in range(op_rec[_u(8 * v + 4)], op_rec[_u(8 * v + 5)]):
                    w = csucc[_u(j)]
                    n_dirty_dev = _count_down(w, dev[_u(w)], wait, op_heap, op_heap_key, dev_heap,
                                              dev_off, dev_size, dev_busy, dirty_dev,
                                              n_dirty_dev, prio)
                for j in range(op_rec[_u(8 * v + 2)], op_rec[_u(8 * v + 3)]):
                    _release(uin_copy[_u(j)], copy_state, live,
                             mem_t, mem_d, mem_v, counters, now)
            else:
                tr = item - n
                T = edge_tensor[_u(tr)]
                k = copy_state[_u(4 * (t + tr) + 1)]
                if tracing:
                    tr_end[_u(tr)] = now
                c = copy_state[_u(4 * T + 1)] * d + k
                chan_busy[_u(c)] = False
                if chan_size[_u(c)] > 0:
                    dirty_chan[_u(n_dirty_chan)] = c
                    n_dirty_chan += 1
                _release(T, copy_state, live,
                         mem_t, mem_d, mem_v, counters, now)
                # the consumers reading this transfer (linked when it was made) lose one wait
                j = tr
                while j >= 0:
                    w = consumer[_u(j)]
                    j = next_reader[_u(j)]
                    n_dirty_dev = _count_down(w, k, wait, op_heap, op_heap_key, dev_heap,
                                              dev_off, dev_size, dev_busy, dirty_dev,
                                              n_dirty_dev, prio)
    if tracing:
        # transfers in slot order (= tensor order, then first consumer), packed to the front
        m = 0
        for j in range(tr_start.shape[_u(0)]):
            if tr_start[_u(j)] >= 0.0:
                tr_tensor[_u(m)] = edge_tensor[_u(j)]
                copy_dev[_u(t + m)] = copy_state[_u(4 * (t + j) + 1)]
                tr_start[_u(m)] = tr_start[_u(j)]
                tr_end[_u(m)] = tr_end[_u(j)]
                m += 1
        counters[_TRANSFERS] = m
    if done != n:
        return -1.0
    return now


@njit(cache=True, inline="always")
def _decode_placement(row, n, d, dev):
    """dev[v] = argmax_k affinity[v, k], ties to the lower k (SIM_RULES 12)."""
    for v in range(n):
        base = v * d
        best = 0
        best_key = row[_u(base)]
        for k in range(1, d):
            if row[_u(base + k)] > best_key:
                best_key = row[_u(base + k)]
                best = k
        dev[_u(v)] = best


@njit(cache=True, inline="always")
def _decode_grouped(row, n, d, leader, pin, dev):
    """SIM_RULES 13: a group's device is its pin, else the argmax of its leader's row (ties
    to the lower k); members take it. The leader is the group's lowest id, so one pass in id
    order decides each leader before any member reads it."""
    for v in range(n):
        L = leader[_u(v)]
        if L != v:
            dev[_u(v)] = dev[_u(L)]
        elif pin[_u(v)] >= 0:
            dev[_u(v)] = pin[_u(v)]
        else:
            base = v * d
            best = 0
            best_key = row[_u(base)]
            for k in range(1, d):
                if row[_u(base + k)] > best_key:
                    best_key = row[_u(base + k)]
                    best = k
            dev[_u(v)] = best


@njit(cache=True)
def simulate_one(S, d, dev, prio, tprio, trace):
    """One individual; returns (makespan, peak, work arrays) -- the work holds the trace."""
    W = _alloc_work(S, d, trace)
    peak = np.empty(d, np.int64)
    makespan = _run(S, d, dev, prio, tprio, W, peak)
    return makespan, peak, W


@njit(cache=True, parallel=True)
def evaluate_batch(S, d, keys, chunks, peaks, makespans):
    """Decodes and simulates every row of `keys` [pop, n(d+2)] into peaks [pop, d], makespans.

    `chunks` contiguous slices of the population run in parallel; each allocates its work
    arrays once and reuses them for every individual in it.
    """
    n = S[0].shape[0]
    pop = keys.shape[0]
    for c in prange(chunks):
        lo = c * pop // chunks
        hi = (c + 1) * pop // chunks
        W = _alloc_work(S, d, False)
        dev = W[W_DEV]
        for i in range(lo, hi):
            row = keys[i]
            _decode_placement(row, n, d, dev)
            makespans[i] = _run(S, d, dev, row[n * d:n * d + n], row[n * d + n:n * d + 2 * n],
                                W, peaks[i])


@njit(cache=True, parallel=True)
def evaluate_batch_grouped(S, leader, pin, d, keys, chunks, peaks, makespans):
    """`evaluate_batch` for a graph with colocation groups or pins (SIM_RULES 13): `leader`
    [n] int32 is each op's group leader, `pin` [n] int32 its group's device or -1. A separate
    entry point, so the unconstrained path stays exactly as it was."""
    n = S[0].shape[0]
    pop = keys.shape[0]
    for c in prange(chunks):
        lo = c * pop // chunks
        hi = (c + 1) * pop // chunks
        W = _alloc_work(S, d, False)
        dev = W[W_DEV]
        for i in range(lo, hi):
            row = keys[i]
            _decode_grouped(row, n, d, leader, pin, dev)
            makespans[i] = _run(S, d, dev, row[n * d:n * d + n], row[n * d + n:n * d + 2 * n],
                                W, peaks[i])
