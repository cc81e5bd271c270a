"""The compiled event-driven list scheduler (DESIGN §4, to the letter of notes/SIM_RULES).

`prepare` turns a graph into static arrays once; `_run` simulates one individual in
O((n + e + transfers) log n + n d) time using per-thread work arrays that are allocated once
(`_alloc_work`) and reset in place, so evaluating a population allocates nothing per
individual. Everything is `cache=True`, so a second process loads machine code from disk.

Per individual:
  * device heaps of ready ops, keyed (priority desc, op id asc), pooled in one [n] array;
  * channel heaps of ready transfers, keyed (transfer priority desc, tensor id asc), pooled
    in one [e] array (e = distinct (tensor, consumer) pairs bounds the transfer count), with
    O(d^2) offsets only -- never an [n, d^2] array;
  * an event heap of running ops and transfers (at most d + d(d-1) = d^2 entries);
  * reference counts ("pending") for every tensor copy: the producer-side copy waits for its
    producer, its local consumers, its transfers and the alias tensors made from it there;
    a transferred copy waits for its consumers on the destination and the aliases made there.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

I32 = np.int32

# Indices into the `counters` work array.
_MEM_EVENTS = 0   # number of memory-curve points recorded (trace mode)
_TRANSFERS = 1    # number of transfers of the last individual
_DIRTY_DEVICES = 2  # length of the list of devices to look at in phase (b)


def prepare(graph, devices) -> tuple:
    """Static per-(graph, devices) arrays, computed once outside the per-individual loop."""
    n, t = graph.num_nodes, graph.num_tensors
    producer = np.ascontiguousarray(graph.tensor_producer, dtype=I32)
    size = np.ascontiguousarray(graph.tensor_size, dtype=np.int64)
    alias = np.ascontiguousarray(graph.tensor_alias, dtype=I32)
    consumer_ptr = np.ascontiguousarray(graph.consumer_ptr, dtype=I32)
    consumer = np.ascontiguousarray(graph.consumer, dtype=I32)

    # Distinct inputs of each op, with the position of that (tensor, op) pair in the
    # consumer CSR, so a finishing op finds the transfer it read from in O(1).
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

    producer_bytes = np.where(alias >= 0, 0, size).astype(np.int64)  # an alias costs 0 at home
    output_bytes = np.zeros(n, dtype=np.int64)
    np.add.at(output_bytes, producer, producer_bytes)
    # A tensor nobody reads is never freed: one extra reference nobody releases.
    forever = (np.diff(consumer_ptr) == 0).astype(I32)
    alias_list = np.flatnonzero(alias >= 0).astype(I32)
    transfer_time = devices.transfer_time(size)

    return (
        np.ascontiguousarray(graph.compute_cost, dtype=np.float64),
        np.ascontiguousarray(graph.temporary_memory, dtype=np.int64),
        np.ascontiguousarray(graph.persistent_memory, dtype=np.int64),
        output_bytes,
        producer, producer_bytes, size, alias, forever,
        np.ascontiguousarray(transfer_time, dtype=np.float64),
        np.ascontiguousarray(graph.output_ptr, dtype=I32),
        consumer_ptr, consumer,
        unique_input_ptr, unique_input, edge_position,
        control_succ_ptr, control_succ, wait0, alias_list,
    )


@njit(cache=True)
def _alloc_work(n, t, e, d, trace):
    """Every array one simulation needs; `trace` sizes the recording arrays (else empty)."""
    dd = d * d
    rec_n = n if trace else 0
    rec_e = e if trace else 0
    rec_m = (d + 2 * n + t + 2 * e) if trace else 0
    return (
        np.empty(n, np.int32),          # 0 wait: unmet inputs + control preds per op
        np.empty(n, np.int32),          # 1 op_heap: pooled device heaps
        np.empty(d + 1, np.int32),      # 2 dev_off
        np.empty(d, np.int32),          # 3 dev_size
        np.empty(d, np.bool_),          # 4 dev_busy
        np.empty(d, np.bool_),          # 5 dev_dirty
        np.empty(d, np.int32),          # 6 dirty_dev list
        np.empty(t + 1, np.int32),      # 7 tr_ptr: transfers of tensor T
        np.empty(e, np.int32),          # 8 tr_tensor
        np.empty(e, np.int32),          # 9 tr_dst
        np.empty(e, np.int32),          # 10 tr_pending
        np.empty(e, np.float64),        # 11 tr_key (transfer priority)
        np.empty(e, np.int32),          # 12 uin_tr: transfer an op's input slot reads, or -1
        np.empty(dd + 1, np.int32),     # 13 chan_off
        np.empty(dd, np.int32),         # 14 chan_size
        np.empty(e, np.int32),          # 15 chan_heap: pooled channel heaps
        np.empty(dd, np.bool_),         # 16 chan_busy
        np.empty(dd, np.bool_),         # 17 chan_dirty
        np.empty(dd, np.int32),         # 18 dirty_chan list
        np.empty(t, np.int32),          # 19 prod_pending
        np.empty(t, np.int32),          # 20 hold: alias target (-1-T1 home copy, or transfer)
        np.empty(d, np.int32),          # 21 mark_t
        np.empty(d, np.int32),          # 22 mark_tr
        np.empty(d, np.int64),          # 23 live
        np.empty(dd, np.float64),       # 24 ev_time
        np.empty(dd, np.int32),         # 25 ev_id (op v, or n + transfer)
        np.empty(rec_n, np.float64),    # 26 op_start
        np.empty(rec_n, np.float64),    # 27 op_end
        np.empty(rec_e, np.float64),    # 28 tr_start
        np.empty(rec_e, np.float64),    # 29 tr_end
        np.empty(rec_m, np.float64),    # 30 mem_t
        np.empty(rec_m, np.int32),      # 31 mem_d
        np.empty(rec_m, np.int64),      # 32 mem_v
        np.zeros(4, np.int64),          # 33 counters
        np.empty(n, np.int32),          # 34 dev (decoded placement, evaluate only)
        np.empty(n, np.float64),        # 35 op_heap_key
        np.empty(e, np.float64),        # 36 chan_heap_key
        np.empty(t, np.int32),          # 37 home: device of each tensor's producer
    )


# ---------------------------------------------------------------------------
# heaps of (key, item): a comes before b when key_a > key_b, ties by the lower item id.
# Keys live beside the items, so a comparison never chases an index into another array.


@njit(cache=True, inline="always")
def _heap_push(items, keys, off, size, item, key):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        pk = keys[off + parent]
        if key > pk or (key == pk and item < items[off + parent]):
            items[off + i] = items[off + parent]
            keys[off + i] = pk
            i = parent
        else:
            break
    items[off + i] = item
    keys[off + i] = key


@njit(cache=True, inline="always")
def _heap_pop(items, keys, off, size):
    """Removes and returns the top item of a heap of `size` > 0 items."""
    top = items[off]
    size -= 1
    if size > 0:
        last = items[off + size]
        lk = keys[off + size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            c = items[off + child]
            ck = keys[off + child]
            if child + 1 < size:
                r = items[off + child + 1]
                rk = keys[off + child + 1]
                if rk > ck or (rk == ck and r < c):
                    child += 1
                    c = r
                    ck = rk
            if ck > lk or (ck == lk and c < last):
                items[off + i] = c
                keys[off + i] = ck
                i = child
            else:
                break
        items[off + i] = last
        keys[off + i] = lk
    return top


@njit(cache=True, inline="always")
def _event_push(ev_time, ev_id, size, time, item):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if time < ev_time[parent]:
            ev_time[i] = ev_time[parent]
            ev_id[i] = ev_id[parent]
            i = parent
        else:
            break
    ev_time[i] = time
    ev_id[i] = item


@njit(cache=True, inline="always")
def _event_pop(ev_time, ev_id, size):
    """Removes the earliest of `size` > 0 events and returns its id."""
    top = ev_id[0]
    size -= 1
    if size > 0:
        lt = ev_time[size]
        li = ev_id[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and ev_time[child + 1] < ev_time[child]:
                child += 1
            if ev_time[child] < lt:
                ev_time[i] = ev_time[child]
                ev_id[i] = ev_id[child]
                i = child
            else:
                break
        ev_time[i] = lt
        ev_id[i] = li
    return top


# ---------------------------------------------------------------------------
# memory (helpers take arrays, never the work tuple: pulling arrays out of a tuple in the
# hot loop costs reference counting on every call)


@njit(cache=True, inline="always")
def _record(mem_t, mem_d, mem_v, counters, k, value, now):
    """Trace mode only: one point of device k's memory curve."""
    if mem_t.shape[0] > 0:
        m = counters[_MEM_EVENTS]
        mem_t[m] = now
        mem_d[m] = k
        mem_v[m] = value
        counters[_MEM_EVENTS] = m + 1


@njit(cache=True, inline="always")
def _release_transfer_copy(tr, tr_pending, tr_dst, tr_tensor, size, live,
                           mem_t, mem_d, mem_v, counters, now):
    """Drops one reference to a transferred copy; frees it at 0."""
    tr_pending[tr] -= 1
    if tr_pending[tr] == 0:
        k = tr_dst[tr]
        live[k] -= size[tr_tensor[tr]]
        _record(mem_t, mem_d, mem_v, counters, k, live[k], now)


@njit(cache=True, inline="always")
def _release_home_copy(T, home, producer_bytes, alias, hold, prod_pending,
                       tr_pending, tr_dst, tr_tensor, size, live,
                       mem_t, mem_d, mem_v, counters, now):
    """Drops one reference to T's copy on its producer's device; frees and cascades at 0."""
    while True:
        prod_pending[T] -= 1
        if prod_pending[T] != 0:
            return
        k = home[T]
        live[k] -= producer_bytes[T]
        _record(mem_t, mem_d, mem_v, counters, k, live[k], now)
        if alias[T] < 0:
            return
        h = hold[T]
        if h >= 0:
            _release_transfer_copy(h, tr_pending, tr_dst, tr_tensor, size, live,
                                   mem_t, mem_d, mem_v, counters, now)
            return
        T = -1 - h


@njit(cache=True, inline="always")
def _make_ready(w, dev, prio, op_heap, op_heap_key, dev_off, dev_size, dev_dirty, dirty_dev,
                counters):
    """Op w has no unmet dependency left: queue it on its device."""
    k = dev[w]
    _heap_push(op_heap, op_heap_key, dev_off[k], dev_size[k], w, prio[w])
    dev_size[k] += 1
    if not dev_dirty[k]:
        dev_dirty[k] = True
        dirty_dev[counters[_DIRTY_DEVICES]] = k
        counters[_DIRTY_DEVICES] += 1


# ---------------------------------------------------------------------------
# one individual


# _nrt=False: `_run` allocates nothing, so it needs no reference counting; with it, numba
# emitted atomic incref/decref pairs around every inlined helper call, which took half the
# time (measured: 330 -> 50 µs per n=500 individual).
@njit(cache=True, _nrt=False)
def _run(S, d, dev, prio, tprio, W, peak):
    """Simulates one individual; writes `peak` [d] and returns the makespan (-1 on a bug)."""
    (cost, temp, pers, output_bytes, producer, producer_bytes, size, alias, forever,
     transfer_time, output_ptr, consumer_ptr, consumer, uin_ptr, uin, edge_position,
     csucc_ptr, csucc, wait0, alias_list) = S
    wait, op_heap, dev_off, dev_size, dev_busy, dev_dirty, dirty_dev = W[0:7]
    tr_ptr, tr_tensor, tr_dst, tr_pending, tr_key, uin_tr = W[7:13]
    chan_off, chan_size, chan_heap, chan_busy, chan_dirty, dirty_chan = W[13:19]
    prod_pending, hold, mark_t, mark_tr, live, ev_time, ev_id = W[19:26]
    op_start, op_end, tr_start, tr_end, mem_t, mem_d, mem_v, counters = W[26:34]
    op_heap_key, chan_heap_key, home = W[35], W[36], W[37]
    tracing = op_start.shape[0] > 0

    n = cost.shape[0]
    t = producer.shape[0]
    dd = d * d
    counters[:] = 0

    # devices: heap offsets, persistent memory from t = 0
    for k in range(d + 1):
        dev_off[k] = 0
    for v in range(n):
        dev_off[dev[v] + 1] += 1
    for k in range(d):
        dev_off[k + 1] += dev_off[k]
        dev_size[k] = 0
        dev_busy[k] = False
        dev_dirty[k] = False
        live[k] = 0
        mark_t[k] = -1
    for v in range(n):
        live[dev[v]] += pers[v]
    for k in range(d):
        peak[k] = live[k]
        _record(mem_t, mem_d, mem_v, counters, k, live[k], 0.0)

    # transfers: one per (tensor, remote device with a consumer), in tensor order
    for c in range(dd + 1):
        chan_off[c] = 0
    ntr = 0
    tr_ptr[0] = 0
    for T in range(t):
        p = dev[producer[T]]
        home[T] = p
        key = tprio[producer[T]]
        local = 0
        for j in range(consumer_ptr[T], consumer_ptr[T + 1]):
            k = dev[consumer[j]]
            if k == p:
                local += 1
                uin_tr[edge_position[j]] = -1
            elif mark_t[k] == T:
                tr = mark_tr[k]
                tr_pending[tr] += 1
                uin_tr[edge_position[j]] = tr
            else:
                mark_t[k] = T
                mark_tr[k] = ntr
                tr_tensor[ntr] = T
                tr_dst[ntr] = k
                tr_pending[ntr] = 1
                tr_key[ntr] = key
                chan_off[p * d + k + 1] += 1
                uin_tr[edge_position[j]] = ntr
                ntr += 1
        tr_ptr[T + 1] = ntr
        prod_pending[T] = 1 + local + (ntr - tr_ptr[T]) + forever[T]
    counters[_TRANSFERS] = ntr
    for c in range(dd):
        chan_off[c + 1] += chan_off[c]
        chan_size[c] = 0
        chan_busy[c] = False
        chan_dirty[c] = False

    # alias holds: T1's copy on dev(producer of T2) lives until T2's home copy is freed
    for i in range(alias_list.shape[0]):
        T2 = alias_list[i]
        T1 = alias[T2]
        q = dev[producer[T2]]
        if home[T1] == q:
            prod_pending[T1] += 1
            hold[T2] = -1 - T1
        else:
            tr = tr_ptr[T1]
            while tr_dst[tr] != q:
                tr += 1
            tr_pending[tr] += 1
            hold[T2] = tr

    # ops with nothing to wait for
    for v in range(n):
        wait[v] = wait0[v]
        if wait0[v] == 0:
            _make_ready(v, dev, prio, op_heap, op_heap_key, dev_off, dev_size, dev_dirty, dirty_dev, counters)

    nev = 0
    n_dirty_chan = 0
    done = 0
    now = 0.0
    while True:
        # (b) idle devices start their best ready op, idle channels their best transfer
        for i in range(counters[_DIRTY_DEVICES]):
            k = dirty_dev[i]
            dev_dirty[k] = False
            if not dev_busy[k] and dev_size[k] > 0:
                v = _heap_pop(op_heap, op_heap_key, dev_off[k], dev_size[k])
                dev_size[k] -= 1
                dev_busy[k] = True
                live[k] += temp[v] + output_bytes[v]
                if live[k] > peak[k]:
                    peak[k] = live[k]
                _record(mem_t, mem_d, mem_v, counters, k, live[k], now)
                _event_push(ev_time, ev_id, nev, now + cost[v], v)
                nev += 1
                if tracing:
                    op_start[v] = now
        counters[_DIRTY_DEVICES] = 0
        for i in range(n_dirty_chan):
            c = dirty_chan[i]
            chan_dirty[c] = False
            if not chan_busy[c] and chan_size[c] > 0:
                tr = _heap_pop(chan_heap, chan_heap_key, chan_off[c], chan_size[c])
                chan_size[c] -= 1
                chan_busy[c] = True
                k = tr_dst[tr]
                T = tr_tensor[tr]
                live[k] += size[T]
                if live[k] > peak[k]:
                    peak[k] = live[k]
                _record(mem_t, mem_d, mem_v, counters, k, live[k], now)
                _event_push(ev_time, ev_id, nev, now + transfer_time[T], n + tr)
                nev += 1
                if tracing:
                    tr_start[tr] = now
        n_dirty_chan = 0

        if nev == 0:
            break
        # (a) everything that finishes at the next instant finishes, with its frees
        now = ev_time[0]
        while nev > 0 and ev_time[0] == now:
            item = _event_pop(ev_time, ev_id, nev)
            nev -= 1
            if item < n:
                v = item
                k = dev[v]
                done += 1
                if tracing:
                    op_end[v] = now
                dev_busy[k] = False
                if not dev_dirty[k]:
                    dev_dirty[k] = True
                    dirty_dev[counters[_DIRTY_DEVICES]] = k
                    counters[_DIRTY_DEVICES] += 1
                live[k] -= temp[v]
                _record(mem_t, mem_d, mem_v, counters, k, live[k], now)
                for T in range(output_ptr[v], output_ptr[v + 1]):
                    _release_home_copy(T, home, producer_bytes, alias, hold,
                                       prod_pending, tr_pending, tr_dst, tr_tensor, size, live,
                                       mem_t, mem_d, mem_v, counters, now)
                    for j in range(consumer_ptr[T], consumer_ptr[T + 1]):
                        w = consumer[j]
                        if dev[w] == k:
                            wait[w] -= 1
                            if wait[w] == 0:
                                _make_ready(w, dev, prio, op_heap, op_heap_key, dev_off, dev_size,
                                            dev_dirty, dirty_dev, counters)
                    for tr in range(tr_ptr[T], tr_ptr[T + 1]):
                        c = k * d + tr_dst[tr]
                        _heap_push(chan_heap, chan_heap_key, chan_off[c], chan_size[c], tr, tr_key[tr])
                        chan_size[c] += 1
                        if not chan_dirty[c]:
                            chan_dirty[c] = True
                            dirty_chan[n_dirty_chan] = c
                            n_dirty_chan += 1
                for j in range(csucc_ptr[v], csucc_ptr[v + 1]):
                    w = csucc[j]
                    wait[w] -= 1
                    if wait[w] == 0:
                        _make_ready(w, dev, prio, op_heap, op_heap_key, dev_off, dev_size,
                                    dev_dirty, dirty_dev, counters)
                for j in range(uin_ptr[v], uin_ptr[v + 1]):
                    tr = uin_tr[j]
                    if tr < 0:
                        _release_home_copy(uin[j], home, producer_bytes, alias, hold,
                                           prod_pending, tr_pending, tr_dst, tr_tensor, size,
                                           live, mem_t, mem_d, mem_v, counters, now)
                    else:
                        _release_transfer_copy(tr, tr_pending, tr_dst, tr_tensor, size, live,
                                               mem_t, mem_d, mem_v, counters, now)
            else:
                tr = item - n
                T = tr_tensor[tr]
                k = tr_dst[tr]
                if tracing:
                    tr_end[tr] = now
                c = home[T] * d + k
                chan_busy[c] = False
                if not chan_dirty[c]:
                    chan_dirty[c] = True
                    dirty_chan[n_dirty_chan] = c
                    n_dirty_chan += 1
                _release_home_copy(T, home, producer_bytes, alias, hold, prod_pending,
                                   tr_pending, tr_dst, tr_tensor, size, live,
                                   mem_t, mem_d, mem_v, counters, now)
                for j in range(consumer_ptr[T], consumer_ptr[T + 1]):
                    w = consumer[j]
                    if dev[w] == k:
                        wait[w] -= 1
                        if wait[w] == 0:
                            _make_ready(w, dev, prio, op_heap, op_heap_key, dev_off, dev_size,
                                        dev_dirty, dirty_dev, counters)
    if done != n:
        return -1.0
    return now


@njit(cache=True, inline="always")
def _decode_placement(row, n, d, dev):
    """dev[v] = argmax_k affinity[v, k], ties to the lower k (SIM_RULES 12)."""
    for v in range(n):
        base = v * d
        best = 0
        best_key = row[base]
        for k in range(1, d):
            if row[base + k] > best_key:
                best_key = row[base + k]
                best = k
        dev[v] = best


@njit(cache=True)
def simulate_one(S, d, dev, prio, tprio, trace):
    """One individual; returns (makespan, peak, work arrays) -- the work holds the trace."""
    n = S[0].shape[0]
    t = S[4].shape[0]
    e = S[12].shape[0]
    W = _alloc_work(n, t, e, d, trace)
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
    t = S[4].shape[0]
    e = S[12].shape[0]
    pop = keys.shape[0]
    for c in prange(chunks):
        lo = c * pop // chunks
        hi = (c + 1) * pop // chunks
        W = _alloc_work(n, t, e, d, False)
        dev = W[34]
        for i in range(lo, hi):
            row = keys[i]
            _decode_placement(row, n, d, dev)
            makespans[i] = _run(S, d, dev, row[n * d:n * d + n], row[n * d + n:n * d + 2 * n],
                                W, peaks[i])
