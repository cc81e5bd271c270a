"""The move ranker's features computed densely in numpy over whole decoded neighbours, as
they were before they were compiled over the changed ops
(`regal.search.feature_kernels._features`): the reference the compiled features must equal
(tests/test_advantage.py). It reads the same per-incumbent `Context`."""

from __future__ import annotations

import numpy as np

from regal.decode import decode, split
from regal.search.move_features import F, FEATURES, incumbent_context


def move_features(climb, drawn: np.ndarray) -> np.ndarray:
    """[m, F] features (`FEATURES`) of each drawn neighbour's change from `climb`'s incumbent
    (`climb.current`, its placement and `PeakFacts` in `climb.moves`)."""
    c = incumbent_context(climb)
    graph, devices = climb.problem.graph, climb.problem.devices
    drawn = np.atleast_2d(np.asarray(drawn, np.float64))
    m, n, d, k = len(drawn), c.n, c.d, c.k
    out = np.zeros((m, F))
    if not m:
        return out
    place = decode(drawn, graph, devices)[0].astype(np.int64)     # [m, n]
    _, prio, tr = split(drawn, n, d)
    moved = place != c.place0
    col = {name: i for i, name in enumerate(FEATURES)}

    # live tensors at the peak that leave k, or whose producer leaves it but not the readers
    if len(c.live_bytes):
        stays = (place[:, c.wait_op] == k).astype(np.float64)     # [m, waiting edges]
        stay = np.zeros((m, len(c.live_bytes)))
        if len(c.wait_op):
            np.add.at(stay.T, c.wait_owner, stays.T)
        stay = stay > 0
        producer_off = place[:, c.live_producer] != k
        local = ~c.live_remote
        leave = np.where(local, producer_off & ~stay, c.has_waiting & ~stay)
        partial = local & producer_off & stay
        out[:, col["live_leave"]] = leave @ c.live_bytes
        out[:, col["live_partial"]] = partial @ c.live_bytes
    if len(c.ops_at_peak):
        out[:, col["ops_leave"]] = (place[:, c.ops_at_peak] != k) @ c.ops_bytes
    off_k = moved & (c.place0 == k)
    out[:, col["bytes_off_k"]] = off_k @ c.obytes
    out[:, col["bytes_onto_k"]] = (moved & (place == k)) @ c.obytes
    overflow = np.zeros(m)
    fill = np.zeros(m)
    for j in range(d):
        if j == k:
            continue
        onto = (moved & (place == j)) @ c.obytes
        overflow = np.maximum(overflow, np.maximum(c.over_room[j] + onto, 0.0))
        fill = np.maximum(fill, onto / c.headroom[j])
    out[:, col["overflow"]] = overflow
    out[:, col["fill"]] = np.minimum(fill, 10.0)
    rise = np.full(m, -np.inf)
    for j in range(d):
        onto = moved & (place == j)
        if j == k or not onto.any():
            continue
        base = np.where(onto, c.window[j], -np.inf).max(axis=1)
        est = base + onto @ c.obytes - c.room[j]
        rise = np.maximum(rise, est)
    some = np.isfinite(rise)
    out[:, col["overflow_t"]] = np.where(some, np.maximum(rise, 0.0), 0.0)
    out[:, col["rise_t"]] = np.where(some, rise, 0.0)
    any_moved = moved.any(axis=1)
    out[:, col["moved_ops"]] = moved.sum(axis=1) / n
    out[:, col["reorder"]] = ~any_moved

    # reorders: ops whose priority changed and whose device did not
    pchanged = (prio != c.prio0) & ~moved
    rows, ops = np.nonzero(pchanged)
    order_changed = np.zeros(m, bool)
    if len(rows):
        ranks = _device_ranks(place[np.unique(rows)], prio[np.unique(rows)])
        where = np.searchsorted(np.unique(rows), rows)
        new_rank = ranks[where, ops]
        delta = c.rank0[ops] - new_rank                 # > 0: runs earlier than before
        on_k = c.place0[ops] == k
        size = np.maximum(c.dev_count[c.place0[ops]], 1)
        jump = np.abs(delta) / size
        earlier, later = delta > 0, delta < 0
        good = earlier * c.cons_bytes[ops] + later * c.prod_bytes[ops]
        bad = later * c.cons_bytes[ops] + earlier * c.prod_bytes[ops]
        alloc = on_k & earlier & c.after_peak[ops] & (new_rank < c.peak_rank)
        np.add.at(out[:, col["good_reorder"]], rows, good)
        np.add.at(out[:, col["bad_reorder"]], rows, bad)
        np.add.at(out[:, col["alloc_before_peak"]], rows, alloc * c.out_bytes[ops])
        np.add.at(out[:, col["jump_k"]], rows, on_k * jump)
        np.add.at(out[:, col["jump_other"]], rows, ~on_k * jump)
        np.logical_or.at(order_changed, rows, delta != 0)
    transfer_changed = ((tr != c.tr0) & c.senders0).any(axis=1)
    out[:, col["transfer_keys"]] = transfer_changed
    out[:, col["noop"]] = ~any_moved & ~order_changed & ~transfer_changed

    # the cut and the compute load
    cross = place[:, c.edge_src] != place[:, c.edge_dst]
    out[:, col["cut_edges"]] = (cross.sum(axis=1) - c.cut0) / n
    out[:, col["cut_time"]] = cross @ c.edge_time - c.cut_time0
    load = np.zeros((m, d))
    for j in range(d):
        load[:, j] = (place == j) @ c.cost
    out[:, col["max_load"]] = (load.max(axis=1) - c.max_load0) / c.mean_load
    out[:, col["load_k"]] = (load[:, k] - c.load_k0) / c.mean_load
    return out


# the per-incumbent arrays the compiled Context computes otherwise


def _window_memory(problem, placement, priority, transfer) -> np.ndarray:
    """[d, n]: the most bytes live on each device while each op ran (from its start to its
    end) in the incumbent, traced again (`regal.sim.trace`: a re-run of a solution already
    scored, as the climb's own `peak_facts`, no evaluation)."""
    from regal.sim import trace

    graph, devices = problem.graph, problem.devices
    tr = trace(graph, devices, placement, priority, transfer)
    n = graph.num_nodes
    out = np.zeros((devices.count, n))
    for j, (times, live) in enumerate(tr.memory):
        if not len(times):
            continue
        # the curve's value at t: the last point at or before t; over [start, end]: the most
        # of the value at start and every point inside
        live = live.astype(np.float64)
        lo = np.maximum(np.searchsorted(times, tr.op_start, side="right") - 1, 0)
        hi = np.maximum(np.searchsorted(times, tr.op_end, side="left"), lo + 1)
        running = _range_max(live, lo, hi)
        out[j] = np.where(np.searchsorted(times, tr.op_start, side="right") > 0, running, 0.0)
    return out


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo[i]:hi[i]]) for each i (hi > lo), by a sparse table."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    length = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo))
    for L in np.unique(level):
        sel = level == L
        row = table[L]
        out[sel] = np.maximum(row[lo[sel]], row[hi[sel] - (1 << L)])
    return out


def _device_ranks(place: np.ndarray, prio: np.ndarray) -> np.ndarray:
    """[m, n] each op's rank in its device's run order by priority (higher first, ties to the
    lower id), for every row."""
    m, n = place.shape
    ids = np.broadcast_to(np.arange(n), (m, n))
    order = np.lexsort((ids, -prio, place), axis=-1)
    rows = np.arange(m)[:, None]
    sorted_place = place[rows, order]
    first = np.zeros((m, n), np.int64)
    # index of the first op of each device's block in the sorted order
    new_block = np.ones((m, n), bool)
    new_block[:, 1:] = sorted_place[:, 1:] != sorted_place[:, :-1]
    idx = np.where(new_block, np.arange(n), 0)
    np.maximum.accumulate(idx, axis=1, out=first)
    ranks = np.empty((m, n), np.int64)
    ranks[rows, order] = np.arange(n) - first
    return ranks


def context_arrays(climb) -> dict:
    """The per-incumbent arrays `Context` computes in one compiled pass
    (`regal.search.feature_kernels._context_arrays`), in numpy as it computed them before: from
    the climb's placement, keys and `PeakFacts`, over the same scale `P`."""
    from regal.search.move_features import incumbent_context

    c = incumbent_context(climb)
    graph, facts, n, d, k, P = climb.problem.graph, climb.moves.facts, c.n, c.d, c.k, c.P
    place0, prio0 = c.place0, c.prio0
    tensors = np.asarray(facts.tensors, np.int64)
    tbytes = np.asarray(facts.tensor_bytes, np.float64) / P
    producer = graph.tensor_producer[tensors].astype(np.int64)
    cptr = graph.consumer_ptr
    counts = (cptr[tensors + 1] - cptr[tensors]).astype(np.int64)
    owner = np.repeat(np.arange(len(tensors)), counts)
    starts = np.repeat(cptr[tensors].astype(np.int64), counts)
    offset = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
    cons = graph.consumer[starts + offset].astype(np.int64)
    waiting = (place0[cons] == k) & (facts.end[cons] > facts.time)
    wait_owner, wait_op = owner[waiting], cons[waiting]
    out = dict(wait_owner=wait_owner, wait_op=wait_op)
    out["has_waiting"] = np.bincount(wait_owner, minlength=len(tensors)) > 0
    out["cons_bytes"] = np.zeros(n)
    np.add.at(out["cons_bytes"], wait_op, tbytes[wait_owner])
    out["prod_bytes"] = np.zeros(n)
    np.add.at(out["prod_bytes"], producer, tbytes)
    out["after_peak"] = after = facts.start > facts.time
    out["peak_rank"] = int(np.sum((place0 == k) & ~after))
    out["dev_count"] = count = np.bincount(place0, minlength=d).astype(np.int64)
    order = np.lexsort((np.arange(n), -prio0, place0))
    out["run_ptr"] = np.concatenate([[0], np.cumsum(count)])
    out["run_order"] = order
    edge_src, edge_dst = c.edge_src, c.edge_dst
    cross = place0[edge_src] != place0[edge_dst]
    out["cut0"] = float(cross.sum())
    out["cut_time0"] = float(c.edge_time[cross].sum())
    out["senders0"] = np.zeros(n, bool)
    out["senders0"][edge_src[cross]] = True
    out["load0"] = load = np.bincount(place0, weights=c.cost, minlength=d)
    out["max_load0"], out["load_k0"] = float(load.max()), float(load[k])
    out["is_peak"] = np.zeros(n, bool)
    out["is_peak"][facts.ops] = True
    out["peak_bytes"] = np.zeros(n)
    out["peak_bytes"][facts.ops] = np.asarray(facts.op_bytes, np.float64) / P

    def grouped(keys, values):
        order = np.argsort(keys, kind="stable")
        return np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=n))]), values[order]

    out["prod_ptr"], out["prod_live"] = grouped(producer, np.arange(len(tensors)))
    out["waitby_ptr"], out["waitby_live"] = grouped(wait_op, wait_owner)
    out["wait_ptr"] = np.concatenate([[0], np.cumsum(np.bincount(wait_owner,
                                                                 minlength=len(tensors)))])
    return out
