"""The compiled side of a move ranker's features (`regal.search.move_features` builds what
these read, per climb and per incumbent, and calls them): `FEATURES` and their order, the
per-incumbent arrays in one pass (`_context_arrays`), a row's features from its changed ops
(`_features`), and the same split over numba's threads (`_lane_features`), with the hub and
order-window helpers they share. Why a module of their own: they are one job (numbers from
arrays, no Python objects), and the Python side stays readable beside them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from regal.search.draw_kernel import change_capacity, changes_into

__all__ = ["FEATURES", "F"]

FEATURES = (
    "live_leave",        # bytes live at the peak on the critical device k that leave k / P
    "live_partial",      # live local bytes whose producer leaves k while a waiting consumer stays
    "ops_leave",         # persistent + running temporary bytes held at the peak, moved off k / P
    "bytes_off_k",       # op_bytes (persistent, temporary, own outputs) of all ops moved off k / P
    "bytes_onto_k",      # op_bytes of ops moved onto k / P
    "overflow",          # max over j != k of (peak_j + bytes moved onto j - room_j)+ / P
    "fill",              # max over j != k of bytes moved onto j / max(room_j - peak_j, P/50)
    "overflow_t",        # the same as overflow with j's memory while the moved ops ran (its
                         # trace) in place of j's peak: max_j (mem_j + moved onto j - room_j)+ / P
    "rise_t",            # max over targets j of (mem_j while the moved ops ran + moved onto j
                         # - room_j) / P, signed (0 without a move)
    "moved_ops",         # ops whose device changed / n
    "reorder",           # 1 when no op changed device (priorities or transfer keys only)
    "good_reorder",      # live bytes: a waiting consumer runs earlier, a producer later / P
    "bad_reorder",       # live bytes: a waiting consumer runs later, a producer earlier / P
    "alloc_before_peak", # own output bytes of an op on k moved from after the peak to before / P
    "jump_k",            # |change of run-order rank| of reordered ops on k / ops on k
    "jump_other",        # the same on the other devices / their op count
    "noop",              # 1 when neither a device, a run order nor a sender's key changed
    "transfer_keys",     # 1 when a sending op's transfer key changed
    "cut_edges",         # change in cross-device data edges / n
    "cut_time",          # change in summed transfer time of cross-device edges / mean load
    "max_load",          # change in the largest device's summed compute cost / mean load
    "load_k",            # change in k's summed compute cost / mean load
)
F = len(FEATURES)

@njit(cache=True)
def _context_arrays(n, d, k, place0, order, tensors, tbytes, producer, cptr, consumer, end,
                    start, at, cost, edge_src, edge_dst, ops_at_peak, ops_bytes):
    """The integer and sequentially summed per-incumbent arrays of `Context`, in one compiled
    pass (each as the numpy it replaced computed it: the waiting consumers in tensor then
    consumer order, sums in index order, run orders by key descending with ties to the lower
    id, the CSR lists stable). `order` is every op by priority key descending, ties to the
    lower id (the climb's moves sort it once per incumbent): each device's run order is its
    ops in that order."""
    T = len(tensors)
    # waiting consumers of each live tensor on k (consumers not finished by the peak)
    total = 0
    for i in range(T):
        t = tensors[i]
        total += cptr[t + 1] - cptr[t]
    wait_owner = np.empty(total, np.int64)
    wait_op = np.empty(total, np.int64)
    w = 0
    for i in range(T):
        t = tensors[i]
        for c in range(cptr[t], cptr[t + 1]):
            u = consumer[c]
            if place0[u] == k and end[u] > at:
                wait_owner[w], wait_op[w] = i, u
                w += 1
    wait_owner, wait_op = wait_owner[:w], wait_op[:w]
    wait_ptr = np.zeros(T + 1, np.int64)
    for i in range(w):
        wait_ptr[wait_owner[i] + 1] += 1
    for i in range(T):
        wait_ptr[i + 1] += wait_ptr[i]
    has_waiting = np.zeros(T, np.bool_)
    for i in range(T):
        has_waiting[i] = wait_ptr[i + 1] > wait_ptr[i]
    cons_bytes = np.zeros(n)
    for i in range(w):
        cons_bytes[wait_op[i]] += tbytes[wait_owner[i]]
    prod_bytes = np.zeros(n)
    for i in range(T):
        prod_bytes[producer[i]] += tbytes[i]
    after_peak = np.empty(n, np.bool_)
    dev_count = np.zeros(d, np.int64)
    peak_rank = 0
    load0 = np.zeros(d)
    for v in range(n):
        after_peak[v] = start[v] > at
        dev_count[place0[v]] += 1
        if place0[v] == k and not after_peak[v]:
            peak_rank += 1
        load0[place0[v]] += cost[v]
    # each device's run order: keys descending, ties to the lower id
    run_ptr = np.zeros(d + 1, np.int64)
    for j in range(d):
        run_ptr[j + 1] = run_ptr[j] + dev_count[j]
    run_order = np.empty(n, np.int64)
    fill = run_ptr[:d].copy()
    for i in range(n):                       # `order` split by device, stably
        v = order[i]
        run_order[fill[place0[v]]] = v
        fill[place0[v]] += 1
    rank0 = np.empty(n, np.int64)
    for i in range(n):
        v = run_order[i]
        rank0[v] = i - run_ptr[place0[v]]
    # the cut
    cross0 = np.empty(len(edge_src), np.bool_)
    senders0 = np.zeros(n, np.bool_)
    cut0 = 0
    for e in range(len(edge_src)):
        cross0[e] = place0[edge_src[e]] != place0[edge_dst[e]]
        if cross0[e]:
            cut0 += 1
            senders0[edge_src[e]] = True
    is_peak = np.zeros(n, np.bool_)
    peak_bytes = np.zeros(n)
    for i in range(len(ops_at_peak)):
        is_peak[ops_at_peak[i]] = True
        peak_bytes[ops_at_peak[i]] = ops_bytes[i]
    prod_ptr, prod_live = _csr_kernel(producer, n, np.arange(T))
    waitby_ptr, waitby_live = _csr_kernel(wait_op, n, wait_owner)
    return (wait_owner, wait_op, wait_ptr, has_waiting, cons_bytes, prod_bytes, after_peak,
            dev_count, peak_rank, load0, run_ptr, run_order, rank0, cross0, cut0, senders0,
            is_peak, peak_bytes, prod_ptr, prod_live, waitby_ptr, waitby_live)


@njit(cache=True)
def _csr_kernel(keys, n, values):
    """(ptr [n + 1], items): `values` grouped by key 0..n-1, in their order within a key."""
    ptr = np.zeros(n + 1, np.int64)
    for i in range(len(keys)):
        ptr[keys[i] + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    fill = ptr[:n].copy()
    items = np.empty(len(keys), np.int64)
    for i in range(len(keys)):
        items[fill[keys[i]]] = values[i]
        fill[keys[i]] += 1
    return ptr, items


@njit(cache=True)
def _window_at(curve_ptr, curve_times, curve_live, op_start, op_end, j, v):
    """The most bytes live on device j while op v ran in the incumbent: its step curve's value
    at op_start[v] (the last point at or before it) and at every point before op_end[v];
    0 when op_start[v] is before the curve's first point."""
    a, b = curve_ptr[j], curve_ptr[j + 1]
    first = a
    while a < b:                              # first point after op_start[v]
        mid = (a + b) // 2
        if curve_times[mid] <= op_start[v]:
            a = mid + 1
        else:
            b = mid
    if a == first:
        return 0.0
    lo = a - 1
    best = curve_live[lo]
    for p in range(lo + 1, curve_ptr[j + 1]):
        if curve_times[p] >= op_end[v]:
            break
        best = max(best, curve_live[p])
    return best


(_LIVE_LEAVE, _LIVE_PARTIAL, _OPS_LEAVE, _OFF_K, _ONTO_K, _OVERFLOW, _FILL, _OVERFLOW_T,
 _RISE_T, _MOVED, _REORDER, _GOOD, _BAD, _ALLOC, _JUMP_K, _JUMP_OTHER, _NOOP, _TRANSFER,
 _CUT_EDGES, _CUT_TIME, _MAX_LOAD, _LOAD_K) = range(F)


@njit(cache=True, inline="always")
def _beats(key_u, u, key_v, v) -> bool:
    """u runs before v on a device: higher priority key, ties to the lower id."""
    return key_u > key_v or (key_u == key_v and u < v)


@njit(cache=True)
def _live_tensor_leaves(i, k, t, tag, new_dev, place0, wait_ptr, wait_op, live_producer,
                        live_remote, has_waiting, live_bytes):
    """(bytes that leave k, bytes partly leaving k) of live tensor i at the peak, under the
    neighbour `t` (an op's device is `new_dev` where `tag` says t moved it, else `place0`)."""
    stay = False
    for w in range(wait_ptr[i], wait_ptr[i + 1]):
        u = wait_op[w]
        if (new_dev[u] if tag[u] == t else place0[u]) == k:
            stay = True
            break
    u = live_producer[i]
    off = (new_dev[u] if tag[u] == t else place0[u]) != k
    size = float(live_bytes[i])
    if not live_remote[i]:
        if off and not stay:
            return size, 0.0
        if off and stay:
            return 0.0, size
        return 0.0, 0.0
    if has_waiting[i] and not stay:
        return size, 0.0
    return 0.0, 0.0


@njit(cache=True)
def _touches(v, i, live_producer, wait_ptr, wait_op) -> bool:
    """Op v produces live tensor i or waits on it."""
    if live_producer[i] == v:
        return True
    for w in range(wait_ptr[i], wait_ptr[i + 1]):
        if wait_op[w] == v:
            return True
    return False


@njit(cache=True)
def _hub_live(v, k, t, tag, new_dev, prod_ptr, prod_live, waitby_ptr, waitby_live, place0,
              wait_ptr, wait_op, live_producer, live_remote, has_waiting, live_size,
              part=0, parts=1):
    """(bytes leaving k, bytes partly leaving k) over the live tensors v touches when v alone
    moves to `new_dev[v]` (row `t`'s; only whether it is k matters), v's tag t again after.
    Each tensor is seen once: v is not its own reader, and a tensor's readers are distinct.
    `part` of `parts`: only that share of the tensors (those it produces, then those it
    waits on), so lanes can split one hub's (`_lane_features`; whole bytes: exact sums)."""
    tag[v] = -1
    leave = partial = 0.0
    produced = prod_ptr[v + 1] - prod_ptr[v]
    total = produced + waitby_ptr[v + 1] - waitby_ptr[v]
    for q in range(total * part // parts, total * (part + 1) // parts):
        i = prod_live[prod_ptr[v] + q] if q < produced \
            else waitby_live[waitby_ptr[v] + q - produced]
        x, y = _live_tensor_leaves(i, k, -1, tag, new_dev, place0, wait_ptr, wait_op,
                                   live_producer, live_remote, has_waiting, live_size)
        leave += x
        partial += y
    tag[v] = t
    return leave, partial


@njit(cache=True)
def _row_hub(lo, hi, ops, dev, place0, prod_ptr, waitby_ptr, out_ptr, in_ptr, hub_touches):
    """(op, its new device) of a row's moved op that touches most (its live tensors and data
    edges; the first of ties), when that is at least `hub_touches`; (-1, -1) if none."""
    hub, most, hub_dev = -1, hub_touches - 1, -1
    for p in range(lo, hi):
        v = ops[p]
        if dev[p] != place0[v]:
            touches = prod_ptr[v + 1] - prod_ptr[v] + waitby_ptr[v + 1] - waitby_ptr[v] \
                + out_ptr[v + 1] - out_ptr[v] + in_ptr[v + 1] - in_ptr[v]
            if touches > most:
                hub, most, hub_dev = v, touches, dev[p]
    return hub, hub_dev


@njit(cache=True)
def _hub_edges(v, place0, out_ptr, in_ptr, in_edges, edge_src, edge_dst, edge_size, count,
               size):
    """`count` [d], `size` [d]: v's data edges (in and out) by the device of their other
    op in the incumbent, and their bytes."""
    count[:] = 0
    size[:] = 0.0
    for e in range(out_ptr[v], out_ptr[v + 1]):
        count[place0[edge_dst[e]]] += 1
        size[place0[edge_dst[e]]] += edge_size[e]
    for q in range(in_ptr[v], in_ptr[v + 1]):
        e = in_edges[q]
        count[place0[edge_src[e]]] += 1
        size[place0[edge_src[e]]] += edge_size[e]


@njit(cache=True)
def _features(base, tag, new_dev, solo_mark, solo_row, live_tag, stamp, hub_touches,
              hub_mark, hub_live, hub_cut, hub_size, ptr, ops, dev, prio, transfer, n, d, k,
              place0, prio0, obytes, over_room, headroom, room, curve_ptr, curve_times,
              curve_live, op_start, op_end, P, cost, mean_load, load0, max_load0, load_k0,
              is_peak, peak_bytes, live_size, live_remote, live_producer, has_waiting,
              wait_ptr, wait_op, prod_ptr, prod_live, waitby_ptr, waitby_live, out_ptr, in_ptr,
              in_edges, edge_src, edge_dst, edge_size, latency, bandwidth, run_ptr, run_order,
              rank0, dev_count, cons_bytes, prod_bytes, out_bytes, after_peak, peak_rank,
              window_mark, window_value):
    """The features (`FEATURES`) of each neighbour from the ops it changes (row `r`: `ops`
    [ptr[r]:ptr[r + 1]] ascending, with their new `dev` and `prio`; `transfer[r]`): every
    feature is the incumbent's (zero, or its cut and loads) plus what the changed ops touch
    (their live tensors, their data edges, their device's run order). `tag` [n] and
    `live_tag` [live tensors] are marks reused from call to call (`base + r + 1` while row
    r is read: `base` past every mark used before), `new_dev` [n] scratch.

    A row that moves one op alone to another device has features that depend on that op and
    device only (a moved op's new key is not read): the draw repeats such rows for ops that
    hold much at the peak, so each is computed once per call and copied (`solo_mark`,
    `solo_row` [n * d]: the call's mark `base + 1` and the row where it was computed).

    A row's hub, the moved op touching the most live tensors and data edges when that is at
    least `hub_touches`, is not walked: its lone move's live sums and its edges counted by the
    device of their other op are kept per incumbent (`hub_mark` [3, n] the incumbent's
    `stamp` for each, `hub_live` [2, 2, n], `hub_cut` and `hub_size` [n, d]), and the other
    moved ops' walks take back the hub's share of each live tensor or edge they share with
    it. Why: one op of a random training step touched 1,792 of the 2,729 tensors live at the
    peak, and the draw aims move after move at it. The live bytes and the edges' bytes are
    summed as whole numbers (exact in any order) and divided once, so a hub changes no
    feature.

    `window_mark`, `window_value` [n * d]: what `_window_at` gave for (op, device) under the
    incumbent `stamp`, looked up once per incumbent (the windows drawn around the peak move the
    same ops again and again)."""
    m = len(ptr) - 1
    out = np.zeros((m, F))
    onto = np.zeros(d)
    any_onto = np.zeros(d, np.bool_)
    top = np.zeros(d)
    load = np.zeros(d)
    for r in range(m):
        t = base + r + 1
        lo, hi = ptr[r], ptr[r + 1]
        if hi - lo == 1 and dev[lo] != place0[ops[lo]]:
            key = ops[lo] * d + dev[lo]
            if solo_mark[key] == base + 1:
                out[r] = out[solo_row[key]]
                out[r, _TRANSFER] = 1.0 if transfer[r] else 0.0
                continue
            solo_mark[key] = base + 1
            solo_row[key] = r
        for p in range(lo, hi):
            v = ops[p]
            tag[v] = t
            new_dev[v] = dev[p]
        onto[:] = 0.0
        any_onto[:] = False
        top[:] = -np.inf
        load[:] = load0
        moved = 0
        live_leave = live_partial = ops_leave = off_k = onto_k = 0.0
        cut = 0
        cut_size = 0.0
        # the moved op that touches most (its live tensors and data edges), when that is
        # much: its sums come from the lone move's, kept for the incumbent (`hub_*`)
        hub = _row_hub(lo, hi, ops, dev, place0, prod_ptr, waitby_ptr, out_ptr, in_ptr,
                       hub_touches)[0]
        for p in range(lo, hi):
            v = ops[p]
            j, j0 = dev[p], place0[v]
            if j == j0:
                continue
            moved += 1
            if j0 == k:
                off_k += obytes[v]
            if j == k:
                onto_k += obytes[v]
            onto[j] += obytes[v]
            any_onto[j] = True
            key = v * d + j
            if window_mark[key] != stamp:
                window_mark[key] = stamp
                window_value[key] = _window_at(curve_ptr, curve_times, curve_live, op_start,
                                               op_end, j, v) / P
            top[j] = max(top[j], window_value[key])
            load[j0] -= cost[v]
            load[j] += cost[v]
            if is_peak[v]:
                ops_leave += peak_bytes[v]
            if v == hub:                     # its lone move's sums, corrected below
                side = 1 if j == k else 0
                if hub_mark[side, v] != stamp:
                    hub_mark[side, v] = stamp
                    hub_live[side, 0, v], hub_live[side, 1, v] = _hub_live(
                        v, k, t, tag, new_dev, prod_ptr, prod_live, waitby_ptr, waitby_live,
                        place0, wait_ptr, wait_op, live_producer, live_remote, has_waiting,
                        live_size)
                if hub_mark[2, v] != stamp:
                    hub_mark[2, v] = stamp
                    _hub_edges(v, place0, out_ptr, in_ptr, in_edges, edge_src, edge_dst,
                               edge_size, hub_cut[v], hub_size[v])
                live_leave += hub_live[side, 0, v]
                live_partial += hub_live[side, 1, v]
                cut += hub_cut[v, j0] - hub_cut[v, j]
                cut_size += hub_size[v, j0] - hub_size[v, j]
                continue
            # live tensors at the peak whose producer or waiting consumer this is (one the
            # hub also touches: its share in the hub's sums taken back)
            for h in range(2):
                a, b = (prod_ptr[v], prod_ptr[v + 1]) if h == 0 \
                    else (waitby_ptr[v], waitby_ptr[v + 1])
                for q in range(a, b):
                    i = prod_live[q] if h == 0 else waitby_live[q]
                    if live_tag[i] == t:
                        continue
                    live_tag[i] = t
                    leave, partial = _live_tensor_leaves(
                        i, k, t, tag, new_dev, place0, wait_ptr, wait_op, live_producer,
                        live_remote, has_waiting, live_size)
                    live_leave += leave
                    live_partial += partial
                    if hub >= 0 and _touches(hub, i, live_producer, wait_ptr, wait_op):
                        tag[hub] = -1
                        leave, partial = _live_tensor_leaves(
                            i, k, -1, tag, new_dev, place0, wait_ptr, wait_op, live_producer,
                            live_remote, has_waiting, live_size)
                        tag[hub] = t
                        live_leave -= leave
                        live_partial -= partial
            # data edges out of v, and into v from an op that did not move (counted there);
            # an edge to or from the hub: what the hub's sums counted for it taken back
            for e in range(out_ptr[v], out_ptr[v + 1]):
                u = edge_dst[e]
                ju = new_dev[u] if tag[u] == t else place0[u]
                change = int(ju != j) - int(place0[u] != j0)
                if u == hub:
                    change -= int(j0 != ju) - int(j0 != place0[u])
                cut += change
                cut_size += change * edge_size[e]
            for q in range(in_ptr[v], in_ptr[v + 1]):
                e = in_edges[q]
                u = edge_src[e]
                if u == hub:
                    change = int(j != new_dev[u]) - int(j0 != new_dev[u])
                elif tag[u] == t and new_dev[u] != place0[u]:
                    continue
                else:
                    change = int(place0[u] != j) - int(place0[u] != j0)
                cut += change
                cut_size += change * edge_size[e]
        row = out[r]
        row[_LIVE_LEAVE] = live_leave / P
        row[_LIVE_PARTIAL] = live_partial / P
        row[_OPS_LEAVE] = ops_leave
        row[_OFF_K] = off_k
        row[_ONTO_K] = onto_k
        overflow = fill = 0.0
        rise = -np.inf
        for j in range(d):
            if j == k:
                continue
            overflow = max(overflow, max(over_room[j] + onto[j], 0.0))
            fill = max(fill, onto[j] / headroom[j])
            if any_onto[j]:
                rise = max(rise, top[j] + onto[j] - room[j])
        row[_OVERFLOW] = overflow
        row[_FILL] = min(fill, 10.0)
        if rise > -np.inf:
            row[_OVERFLOW_T] = max(rise, 0.0)
            row[_RISE_T] = rise
        row[_MOVED] = moved / n
        row[_REORDER] = 1.0 if moved == 0 else 0.0
        # reorders: ops whose key changed on the device they stay on, by their new rank there
        order_changed = False
        for p in range(lo, hi):
            v = ops[p]
            D = place0[v]
            if dev[p] != D:
                continue
            key = prio[p]
            # the incumbent's ops on D ahead of (key, v): a prefix of its run order
            a, b = run_ptr[D], run_ptr[D + 1]
            while a < b:
                mid = (a + b) // 2
                u = run_order[mid]
                if _beats(prio0[u], u, key, v):
                    a = mid + 1
                else:
                    b = mid
            rank = a - run_ptr[D]
            if prio0[v] > key:
                rank -= 1                              # v itself, at its old key
            for q in range(lo, hi):                    # the other ops this row changes
                u = ops[q]
                if u == v:
                    continue
                if place0[u] == D and _beats(prio0[u], u, key, v):
                    rank -= 1
                if dev[q] == D and _beats(prio[q], u, key, v):
                    rank += 1
            delta = rank0[v] - rank                    # > 0: runs earlier than before
            on_k = D == k
            jump = abs(delta) / max(dev_count[D], 1)
            if delta > 0:
                row[_GOOD] += cons_bytes[v]
                row[_BAD] += prod_bytes[v]
                if on_k and after_peak[v] and rank < peak_rank:
                    row[_ALLOC] += out_bytes[v]
            elif delta < 0:
                row[_GOOD] += prod_bytes[v]
                row[_BAD] += cons_bytes[v]
            if on_k:
                row[_JUMP_K] += jump
            else:
                row[_JUMP_OTHER] += jump
            if delta != 0:
                order_changed = True
        row[_TRANSFER] = 1.0 if transfer[r] else 0.0
        row[_NOOP] = 1.0 if moved == 0 and not order_changed and not transfer[r] else 0.0
        row[_CUT_EDGES] = cut / n
        row[_CUT_TIME] = (latency * cut + cut_size / bandwidth) / mean_load
        row[_MAX_LOAD] = (load.max() - max_load0) / mean_load
        row[_LOAD_K] = (load[k] - load_k0) / mean_load
    return out


@njit(cache=True, parallel=True)
def _lane_features(bounds, base, row_ptr, kind, op, value, tr0, senders0, pinned, grouped,
                   colocation, member_ptr, members, scratch, scratch_f, solo, live_tag, stamp,
                   hub_touches, hub_mark, hub_live, hub_cut, hub_size, window_mark,
                   window_value, n, d, k, place0, prio0, *shared):
    """`changes` then `_features` of rows bounds[i]:bounds[i + 1] on lane i, in three
    parallel passes over the lanes (`_features_in_lanes`):

    1. each lane's rows' changed ops (`changes_into`, the lane's marks `base` + row + 1,
       into its part of one buffer);
    2. the per-incumbent caches those rows will read (the memory window of each moved op
       on its new device; each row's hub's lone-move sums and edges), listed once each in
       one pass on this thread and computed spread over the lanes (a hub's live tensors
       split between them: one op may touch most of what is live at the peak);
    3. each lane's rows' `_features` (marks `base` + m + row + 1), reading the caches
       only: no lane writes what another reads."""
    (obytes, over_room, headroom, room, curve_ptr, curve_times, curve_live, op_start, op_end,
     P, cost, mean_load, load0, max_load0, load_k0, is_peak, peak_bytes, live_size,
     live_remote, live_producer, has_waiting, wait_ptr, wait_op, prod_ptr, prod_live,
     waitby_ptr, waitby_live, out_ptr, in_ptr, in_edges, edge_src, edge_dst, edge_size,
     latency, bandwidth, run_ptr, run_order, rank0, dev_count, cons_bytes, prod_bytes,
     out_bytes, after_peak, peak_rank) = shared
    m = len(row_ptr) - 1
    lanes = len(bounds) - 1
    start = np.zeros(lanes + 1, np.int64)
    for lane in range(lanes):
        start[lane + 1] = start[lane] + change_capacity(
            row_ptr[bounds[lane]], row_ptr[bounds[lane + 1]], kind, op, grouped, member_ptr)
    c_op = np.empty(start[lanes], np.int64)
    c_dev = np.empty(start[lanes], np.int64)
    c_prio = np.empty(start[lanes], np.float64)
    ptr = np.zeros(m + lanes, np.int64)   # lane i's rows: ptr[bounds[i] + i:bounds[i + 1] + i + 1]
    transfer = np.zeros(m, np.bool_)
    for lane in prange(lanes):
        r0, r1 = bounds[lane], bounds[lane + 1]
        ptr[r0 + lane] = start[lane]
        changes_into(n, row_ptr[r0:r1 + 1], kind, op, value, place0, prio0, tr0, senders0,
                     pinned, grouped, colocation, member_ptr, members, scratch[lane, :5],
                     scratch_f[lane], base + r0, ptr[r0 + lane:r1 + lane + 1], c_op, c_dev,
                     c_prio, transfer[r0:r1])
    # the cache entries missing for this incumbent (marked now, filled below)
    windows = np.empty(start[lanes], np.int64)
    hubs = np.empty(2 * m, np.int64)                        # hub * 3 + (side, or 2: edges)
    n_windows = n_hubs = 0
    for lane in range(lanes):
        for r in range(bounds[lane], bounds[lane + 1]):
            lo, hi = ptr[r + lane], ptr[r + lane + 1]
            for p in range(lo, hi):
                v, j = c_op[p], c_dev[p]
                key = v * d + j
                if j != place0[v] and window_mark[key] != stamp:
                    window_mark[key] = stamp
                    windows[n_windows] = key
                    n_windows += 1
            hub, hub_dev = _row_hub(lo, hi, c_op, c_dev, place0, prod_ptr, waitby_ptr, out_ptr,
                                    in_ptr, hub_touches)
            if hub >= 0:
                for what in (1 if hub_dev == k else 0, 2):
                    if hub_mark[what, hub] != stamp:
                        hub_mark[what, hub] = stamp
                        hubs[n_hubs] = hub * 3 + what
                        n_hubs += 1
    # windows spread over the lanes; each hub's live tensors split between them (its sums
    # are of whole bytes: exact in any order)
    sums = np.zeros((lanes, max(n_hubs, 1), 2))
    for lane in prange(lanes):
        tag, new_dev = scratch[lane, 5], scratch[lane, 6]
        for i in range(lane, n_windows, lanes):
            key = windows[i]
            window_value[key] = _window_at(curve_ptr, curve_times, curve_live, op_start,
                                           op_end, key % d, key // d) / P
        for i in range(n_hubs):
            v, what = hubs[i] // 3, hubs[i] % 3
            if what == 2:
                if i % lanes == lane:
                    _hub_edges(v, place0, out_ptr, in_ptr, in_edges, edge_src, edge_dst,
                               edge_size, hub_cut[v], hub_size[v])
                continue
            new_dev[v] = k if what == 1 else (k + 1) % d    # only whether it is k matters
            sums[lane, i, 0], sums[lane, i, 1] = _hub_live(
                v, k, 0, tag, new_dev, prod_ptr, prod_live, waitby_ptr, waitby_live, place0,
                wait_ptr, wait_op, live_producer, live_remote, has_waiting, live_size, lane,
                lanes)
    for i in range(n_hubs):
        v, what = hubs[i] // 3, hubs[i] % 3
        if what < 2:
            hub_live[what, 0, v] = sums[:, i, 0].sum()
            hub_live[what, 1, v] = sums[:, i, 1].sum()
    out = np.zeros((m, F))
    for lane in prange(lanes):
        r0, r1 = bounds[lane], bounds[lane + 1]
        out[r0:r1] = _features(
            base + m + r0, scratch[lane, 5], scratch[lane, 6], solo[lane, 0], solo[lane, 1],
            live_tag[lane], stamp, hub_touches, hub_mark, hub_live, hub_cut, hub_size,
            ptr[r0 + lane:r1 + lane + 1], c_op, c_dev, c_prio, transfer[r0:r1], n, d, k,
            place0, prio0, *shared, window_mark, window_value)
    return out
