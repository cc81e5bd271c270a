"""Chromosome layout and decoding (docs/design.md §5, SIM_RULES 12-13).

For `n` ops and `d` devices a chromosome holds `n * (d + 2)` keys in [0, 1]:

    keys[:n*d].reshape(n, d)   affinity: dev(v) = argmax_k affinity[v, k], ties to the lower k
    keys[n*d : n*d+n]          priority of op v (higher runs first)
    keys[n*d+n : n*d+2n]       transfer priority of every tensor v produces

Colocation groups and pins (SIM_RULES 13): a group's device is decided once, by its pin,
else by its leader's affinity row, and every member takes it; so any keys decode to a
placement that respects the graph's constraints. `respect_colocation` projects a
placement that does not (for methods that place ops directly).

Blocks are per node, so a policy's per-node parameters broadcast over them simply.
`encode` maps any method's solution back to keys, so it can seed the BRKGA.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from regal.graph import op_bytes

__all__ = ["num_genes", "num_devices", "split", "decode", "encode", "order_priority",
           "rank_normalize",
           "respect_colocation", "colocation_violation", "schedule_digests"]


def num_genes(num_nodes: int, num_devices: int) -> int:
    """Length of a chromosome for `num_nodes` ops on `num_devices` devices."""
    return int(num_nodes) * (int(num_devices) + 2)


def num_devices(devices) -> int:
    """Device count of a `regal.sim.DeviceSpec` or of a plain integer."""
    count = devices if isinstance(devices, (int, np.integer)) else getattr(devices, "count", None)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected a DeviceSpec or a positive device count, "
                         f"got {devices!r}")
    return int(count)


def split(keys: np.ndarray, num_nodes: int, d: int):
    """Views of the three blocks: affinity [..., n, d], priority [..., n], transfer [..., n]."""
    n = num_nodes
    lead = keys.shape[:-1]
    affinity = keys[..., :n * d].reshape(*lead, n, d)
    return affinity, keys[..., n * d:n * d + n], keys[..., n * d + n:n * (d + 2)]


def decode(keys, graph, devices):
    """Keys -> (placement int32, priority float64, transfer_priority float64).

    `keys` is one chromosome [G] or a batch [B, G]; the outputs gain the same
    leading batch axis. `devices` is a DeviceSpec or a device count.
    """
    d = num_devices(devices)
    n = graph.num_nodes
    keys = np.asarray(keys, dtype=np.float64)
    expected = num_genes(n, d)
    if keys.ndim not in (1, 2) or keys.shape[-1] != expected:
        raise ValueError(f"keys: expected {expected} genes ({n} ops x ({d} devices + 2)), "
                         f"got shape {keys.shape}")
    _, priority, transfer = split(keys, n, d)
    rows = keys[None] if keys.ndim == 1 else keys  # [B, G] (a view)
    placement = np.empty((rows.shape[0], n), np.int32)
    if graph.constrained:
        _check_pins(graph, d)
        # SIM_RULES 13: the leader's row decides for its group; a pin overrides the keys
        _place_kernel(rows, d, graph.colocation, graph.pinned, True, placement)
    else:
        none = np.empty(0, np.int32)
        _place_kernel(rows, d, none, none, False, placement)
    if keys.ndim == 1:
        placement = placement[0]
    return placement, priority.copy(), transfer.copy()


@njit(cache=True)
def _place_kernel(keys, d, leaders, pinned, constrained, out):
    """out[r, v] = argmax of op v's affinity row in keys[r] (with `constrained`: the row of
    its leader `leaders[v]`, and its pin `pinned[v]` when >= 0), exactly as np.argmax: the
    first maximum wins (-0.0 = 0.0), and the first NaN wins over any number."""
    rows, n = out.shape
    for r in range(rows):
        for v in range(n):
            if constrained:
                pin = pinned[v]
                if pin >= 0:
                    out[r, v] = pin
                    continue
                base = leaders[v] * d
            else:
                base = v * d
            best = keys[r, base]
            k = 0
            if best == best:                  # not NaN
                for j in range(1, d):
                    x = keys[r, base + j]
                    if x != x:                # NaN: np.argmax returns the first one
                        k = j
                        break
                    if x > best:
                        best = x
                        k = j
            out[r, v] = k


def schedule_digests(graph, placement, priority, transfer) -> list[bytes]:
    """One 16-byte digest per decoded solution [B, n]: equal digests, equal simulation.

    Why: a search that proposes the same schedule twice should not pay twice. The
    simulator compares priorities only among the ops of one device (SIM_RULES 3, ties by
    lower id) and transfer priorities only among the transfers of one channel (rule 5, ties
    by lower tensor id, and tensor ids follow their producers' ids). So a solution is
    determined by its placement, each device's ops in (priority, id) order, and each
    device's sending ops (a consumer elsewhere) in (transfer priority, id) order; the
    transfer keys of ops that send nothing never matter. Chromosomes that differ only in
    what these leave out simulate identically, whatever the objective or memory limits.

    The digest is MurmurHash3_x64_128 (seed 0) of these canonical bytes (`_schedule_words`):
    the placement, all ops by (device, priority descending, id), then the ops that send by
    (device, transfer priority descending, id) and the others by (device, id), as int32
    (numpy's order for the keys: -0.0 = 0.0, NaN last). Equal bytes, equal digests; unequal
    bytes collide only by chance, about 2^-128 a pair (~1e-27 for the million schedules of
    a long climb), and a collision could only make a climb reuse one score for another.

    How (compiled, `_digest_kernel`): a climb's batch is neighbours of one incumbent, each a
    few writes to its keys, so the kernel takes as its base the values at least two of rows
    0-2 share (mostly the incumbent), sorts the base's orders, and makes each row's from
    them by moving the few ops whose place changed. The base's orders start from the last
    call's (`_last_orders`: only a starting guess, any permutation gives the exact orders
    and a close one gives them in linear time, so a thread or another graph of n ops that
    replaced it costs time, never a digest). The digests match the earlier blake2b ones'
    equalities exactly (tests/test_schedule_digests.py keeps that implementation).
    """
    global _last_orders
    place, hashed, pbits, tbits = _digest_inputs(graph, placement, priority, transfer)
    rows, n = place.shape
    out = np.empty((rows, 2), np.uint64)
    if rows:
        hint = _last_orders if len(_last_orders[0]) == n else (np.empty(0, np.int64),) * 2
        _last_orders = _digest_kernel(*_digest_graph(graph), place, hashed, pbits, tbits, *hint,
                                      out, np.empty((1, 3 * n), np.uint32), False)
    raw = out.astype("<u8").tobytes()
    return [raw[16 * i:16 * i + 16] for i in range(rows)]


_last_orders = (np.empty(0, np.int64), np.empty(0, np.int64))  # the last base's run, send orders


def _schedule_words(graph, placement, priority, transfer, hint=None) -> np.ndarray:
    """[B, 3n] uint32: the canonical bytes `schedule_digests` hashes, one row each; `hint`
    (run order, send order: permutations of the ops) starts the base's orders (for tests)."""
    place, hashed, pbits, tbits = _digest_inputs(graph, placement, priority, transfer)
    rows, n = place.shape
    words = np.empty((rows, 3 * n), np.uint32)
    if rows:
        hint = (np.empty(0, np.int64),) * 2 if hint is None else \
            tuple(np.asarray(h, np.int64) for h in hint)
        _digest_kernel(*_digest_graph(graph), place, hashed, pbits, tbits, *hint,
                       np.empty((rows, 2), np.uint64), words, True)
    return words


def _digest_inputs(graph, placement, priority, transfer):
    placement = np.atleast_2d(np.asarray(placement))
    priority = np.atleast_2d(np.asarray(priority, np.float64))
    transfer = np.atleast_2d(np.asarray(transfer, np.float64))
    if placement.ndim != 2 or priority.shape != placement.shape \
            or transfer.shape != placement.shape or placement.shape[1] != graph.num_nodes:
        raise ValueError(f"placement, priority, transfer: expected three [B, {graph.num_nodes}] "
                         f"arrays, got {placement.shape}, {priority.shape}, {transfer.shape}")
    hashed = np.ascontiguousarray(placement, dtype=np.int32)  # as the bytes hold it
    place = hashed if placement.dtype == np.int32 else np.ascontiguousarray(placement, np.int64)
    return (place, hashed.view(np.uint32), np.ascontiguousarray(priority).view(np.uint64),
            np.ascontiguousarray(transfer).view(np.uint64))


def _digest_graph(graph):
    as32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    return (as32(graph.output_ptr), as32(graph.consumer_ptr), as32(graph.consumer),
            as32(graph.input_ptr), as32(graph.input_tensor), as32(graph.tensor_producer))


_SIGN = np.uint64(0x8000000000000000)
_ABS = np.uint64(0x7FFFFFFFFFFFFFFF)
_EXP = np.uint64(0x7FF0000000000000)
_TOP = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _descending(bits):
    """Ascending uint64 sort key of the float64 with these bits, in the order numpy sorts
    its negation: -0.0 = 0.0, and every NaN after every number (and equal to the others)."""
    if bits & _ABS > _EXP:
        return _TOP                       # NaN
    if bits & _ABS == np.uint64(0):
        return _SIGN                      # either zero
    neg = bits ^ _SIGN                    # bits of -x
    if neg & _SIGN:
        return ~neg
    return neg | _SIGN


@njit(cache=True, inline="always")
def _before(m1, k1, v1, m2, k2, v2):
    """(major, key, id) tuple order."""
    if m1 != m2:
        return m1 < m2
    if k1 != k2:
        return k1 < k2
    return v1 < v2


@njit(cache=True)
def _sort_items(ids, major, key):
    """Positions of `ids` (ascending) sorted by (major, key, id); `major`, `key` align with
    `ids`."""
    k = len(ids)
    if k <= 24:                           # insertion sort
        order = np.arange(k)
        for i in range(1, k):
            j, x = i, order[i]
            while j > 0 and _before(major[x], key[x], ids[x],
                                    major[order[j - 1]], key[order[j - 1]], ids[order[j - 1]]):
                order[j] = order[j - 1]
                j -= 1
            order[j] = x
        return order
    order = np.argsort(key, kind="mergesort")          # stable: ids stay ascending
    return order[np.argsort(major[order], kind="mergesort")]


@njit(cache=True)
def _sorted_from(hint, major, key):
    """All ops sorted by (major[v], key[v], v), starting from the permutation `hint` (empty:
    the identity): a run through it keeps an ascending subsequence, setting aside both ops
    of each descent it meets (at most twice the fewest ops whose moving sorts it), and the
    set-aside ops are sorted and merged back in. Exact whatever `hint`; linear when close."""
    n = len(major)
    kept = np.empty(n, np.int64)
    aside = np.empty(n, np.int64)
    top = na = 0
    for i in range(n):
        v = hint[i] if len(hint) == n else i
        if top and _before(major[v], key[v], v,
                           major[kept[top - 1]], key[kept[top - 1]], kept[top - 1]):
            top -= 1
            aside[na] = kept[top]
            aside[na + 1] = v
            na += 2
        else:
            kept[top] = v
            top += 1
    if na == 0:
        return kept
    ids = np.sort(aside[:na])
    ids = ids[_sort_items(ids, major[ids], key[ids])]
    out = np.empty(n, np.int64)
    i = j = 0
    for w in range(n):
        if j >= na or (i < top and _before(major[kept[i]], key[kept[i]], kept[i],
                                           major[ids[j]], key[ids[j]], ids[j])):
            out[w] = kept[i]
            i += 1
        else:
            out[w] = ids[j]
            j += 1
    return out


@njit(cache=True)
def _moved_into(base, base_major, base_key, pos_of, ids, major, key, dst):
    """`base` (op ids sorted by their tuples) with `ids` (ascending) taken out and put back
    by their new (major, key, id) tuples (`major`, `key` align with `ids`), into `dst`; the
    other ops keep their tuples, so a binary search on the base ones finds each place."""
    n, k = len(base), len(ids)
    order = _sort_items(ids, major, key)
    at = np.empty(k, np.int64)           # insert before base[at]
    for j in range(k):
        x = order[j]
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) >> 1
            u = base[mid]
            if _before(major[x], key[x], ids[x], base_major[u], base_key[u], u):
                hi = mid
            else:
                lo = mid + 1
        at[j] = lo
    skip = np.empty(k, np.int64)         # where the moved ops were
    for j in range(k):
        skip[j] = pos_of[ids[j]]
    skip.sort()
    w = i = a = b = 0
    while True:
        end = n
        if a < k and skip[a] < end:
            end = skip[a]
        if b < k and at[b] < end:
            end = at[b]
        dst[w:w + end - i] = base[i:end]
        w += end - i
        i = end
        if b < k and at[b] == i:
            dst[w] = ids[order[b]]
            w += 1
            b += 1
        elif a < k and skip[a] == i:
            i += 1
            a += 1
        elif i >= n:
            break


@njit(cache=True)
def _sends_of(v, place, out_ptr, consumer_ptr, consumer):
    """Whether op v has a consumer on another device."""
    home = place[v]
    for t in range(out_ptr[v], out_ptr[v + 1]):
        for e in range(consumer_ptr[t], consumer_ptr[t + 1]):
            if place[consumer[e]] != home:
                return True
    return False


@njit(cache=True)
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True)
def _murmur3(words):
    """MurmurHash3_x64_128, seed 0, of the little-endian bytes of `words` (uint32):
    (h1, h2), the digest's first and second 8 bytes."""
    c1, c2 = np.uint64(0x87C37B91114253D5), np.uint64(0x4CF5AD432745937F)
    h1 = h2 = np.uint64(0)
    m = len(words)
    blocks = m // 4
    for i in range(blocks):
        k1 = np.uint64(words[4 * i]) | (np.uint64(words[4 * i + 1]) << np.uint64(32))
        k2 = np.uint64(words[4 * i + 2]) | (np.uint64(words[4 * i + 3]) << np.uint64(32))
        k1 *= c1
        k1 = _rotl(k1, 31)
        k1 *= c2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= c2
        k2 = _rotl(k2, 33)
        k2 *= c1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = m - 4 * blocks
    if tail:
        at = 4 * blocks
        k1 = np.uint64(words[at])
        if tail > 1:
            k1 |= np.uint64(words[at + 1]) << np.uint64(32)
        if tail > 2:
            k2 = np.uint64(words[at + 2])
            k2 *= c2
            k2 = _rotl(k2, 33)
            k2 *= c1
            h2 ^= k2
        k1 *= c1
        k1 = _rotl(k1, 31)
        k1 *= c2
        h1 ^= k1
    length = np.uint64(4 * m)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@njit(cache=True)
def _digest_kernel(out_ptr, consumer_ptr, consumer, in_ptr, in_tensor, producer,
                   place, hashed, pbits, tbits, hint_run, hint_send, out, words, keep_words):
    """Digests of every row into `out` [B, 2]; with `keep_words` the canonical words of every
    row into `words` [B, 3n] too (else `words` is one row of scratch). Returns the base's
    run and send orders (the next call's hints).

    An op's place in the run order is set by its tuple (device, priority key, id), in the
    send order by (device, plus span when it sends nothing; transfer key when it sends, else
    a constant; id). The base (below) is sorted from the hints (`_sorted_from`). In a row,
    the ops whose tuple differs from the base's are, in the run order, those with another
    device or priority key; in the send order, those with another device, sending status,
    or transfer key while sending, where the status changes only for moved ops and the
    producers of their inputs. A few such ops are moved (`_moved_into`); many (a row far
    from the others) and the row is sorted anew from the base's order."""
    rows, n = place.shape
    lo, hi = 0, 0
    for r in range(rows):
        for v in range(n):
            lo = min(lo, place[r, v])
            hi = max(hi, place[r, v])
    span = hi - lo + 1
    zero = _descending(np.uint64(0))
    many = n // 16 + 24                  # more changed ops than this: sort the row anew
    # the base: per op, the value at least two of rows 0-2 share (else row 1's), which for
    # neighbours of one incumbent, each a few writes to it, is mostly the incumbent itself
    base_place = np.empty(n, place.dtype)
    base_pbits = np.empty(n, np.uint64)
    base_tbits = np.empty(n, np.uint64)
    a, b, c = 0, min(1, rows - 1), min(2, rows - 1)
    for v in range(n):
        base_place[v] = place[a, v] if place[a, v] == place[b, v] or place[a, v] == place[c, v] \
            else place[b, v]
        base_pbits[v] = pbits[a, v] if pbits[a, v] == pbits[b, v] or pbits[a, v] == pbits[c, v] \
            else pbits[b, v]
        base_tbits[v] = tbits[a, v] if tbits[a, v] == tbits[b, v] or tbits[a, v] == tbits[c, v] \
            else tbits[b, v]
    # each op's tuples in the base's run order and send order
    run_major = np.empty(n, np.int64)
    run_key = np.empty(n, np.uint64)
    send_major = np.empty(n, np.int64)
    send_key = np.empty(n, np.uint64)
    sends = np.empty(n, np.bool_)
    for v in range(n):
        sends[v] = _sends_of(v, base_place, out_ptr, consumer_ptr, consumer)
        run_major[v] = base_place[v] - lo
        run_key[v] = _descending(base_pbits[v])
        send_major[v] = base_place[v] - lo + (0 if sends[v] else span)
        send_key[v] = _descending(base_tbits[v]) if sends[v] else zero
    run_order = _sorted_from(hint_run, run_major, run_key)
    send_order = _sorted_from(hint_send, send_major, send_key)
    run_pos = np.empty(n, np.int64)
    send_pos = np.empty(n, np.int64)
    for i in range(n):
        run_pos[run_order[i]] = i
        send_pos[send_order[i]] = i
    # scratch of the rows
    moved = np.empty(n, np.int64)        # ops on another device than in the base
    reprio = np.empty(n, np.int64)       # ops with another priority key
    retrans = np.empty(n, np.int64)      # ops with another transfer key
    changed = np.empty(n, np.int64)
    stamp = np.full(n, -1, np.int64)     # row r rechecked whether op v sends: stamp[v] == r
    sends_now = np.empty(n, np.bool_)
    touched = np.empty(n, np.int64)
    row_major = np.empty(n, np.int64)
    row_key = np.empty(n, np.uint64)
    for r in range(rows):
        buf = words[r] if keep_words else words[0]
        pr = place[r]
        buf[:n] = hashed[r]
        nm = nq = nt = 0
        for v in range(n):
            if pr[v] != base_place[v]:
                moved[nm] = v
                nm += 1
            bits = pbits[r, v]
            if bits != base_pbits[v] and _descending(bits) != run_key[v]:
                reprio[nq] = v
                nq += 1
            bits = tbits[r, v]
            if bits != base_tbits[v] and _descending(bits) != _descending(base_tbits[v]):
                retrans[nt] = v
                nt += 1
        # run order: the ops moved or with another priority key (both lists ascending)
        k = i = j = 0
        while i < nm or j < nq:
            if j >= nq or (i < nm and moved[i] < reprio[j]):
                changed[k] = moved[i]
                i += 1
            elif i >= nm or reprio[j] < moved[i]:
                changed[k] = reprio[j]
                j += 1
            else:
                changed[k] = moved[i]
                i += 1
                j += 1
            k += 1
        if k > many:
            for v in range(n):
                row_major[v] = pr[v] - lo
                row_key[v] = _descending(pbits[r, v])
            buf[n:2 * n] = _sorted_from(run_order, row_major, row_key)
        else:
            ids = changed[:k].copy()
            major = np.empty(k, np.int64)
            key = np.empty(k, np.uint64)
            for j in range(k):
                v = ids[j]
                major[j] = pr[v] - lo
                key[j] = _descending(pbits[r, v])
            _moved_into(run_order, run_major, run_key, run_pos, ids, major, key, buf[n:2 * n])
        # send order: whether an op sends changes only for moved ops and their inputs' producers
        nc = 0
        for i in range(nm):
            u = moved[i]
            if stamp[u] != r:
                stamp[u] = r
                touched[nc] = u
                nc += 1
            for e in range(in_ptr[u], in_ptr[u + 1]):
                w = producer[in_tensor[e]]
                if stamp[w] != r:
                    stamp[w] = r
                    touched[nc] = w
                    nc += 1
        k = 0
        for i in range(nc):
            v = touched[i]
            now = _sends_of(v, pr, out_ptr, consumer_ptr, consumer)
            sends_now[v] = now
            if pr[v] - lo + (0 if now else span) != send_major[v] or \
                    (_descending(tbits[r, v]) if now else zero) != send_key[v]:
                changed[k] = v
                k += 1
        for i in range(nt):
            v = retrans[i]
            if stamp[v] != r and sends[v]:
                changed[k] = v
                k += 1
        if k > many:
            for v in range(n):
                now = sends_now[v] if stamp[v] == r else sends[v]
                row_major[v] = pr[v] - lo + (0 if now else span)
                row_key[v] = _descending(tbits[r, v]) if now else zero
            buf[2 * n:] = _sorted_from(send_order, row_major, row_key)
        else:
            ids = np.sort(changed[:k])
            major = np.empty(k, np.int64)
            key = np.empty(k, np.uint64)
            for j in range(k):
                v = ids[j]
                now = sends_now[v] if stamp[v] == r else sends[v]
                major[j] = pr[v] - lo + (0 if now else span)
                key[j] = _descending(tbits[r, v]) if now else zero
            _moved_into(send_order, send_major, send_key, send_pos, ids, major, key, buf[2 * n:])
        out[r, 0], out[r, 1] = _murmur3(buf)
    return run_order, send_order


def _check_pins(graph, d: int) -> None:
    from regal.graph import check_pins
    check_pins(graph.names, graph.pinned, d)


def colocation_violation(graph, placement) -> tuple[int, str] | None:
    """(op, reason) for the first op whose device breaks its group or pin, else None."""
    if not graph.constrained:
        return None
    placement = np.asarray(placement)
    pinned = graph.pinned
    bad = (pinned >= 0) & (placement != pinned)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(graph.colocation[v])
        group = "" if L == v else f" (colocation group of {str(graph.names[L])!r})"
        return v, (f"op {str(graph.names[v])!r} is on device {placement[v]}, but its group"
                   f"{group} is pinned to device {pinned[v]}")
    bad = placement != placement[graph.colocation]
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(graph.colocation[v])
        return v, (f"op {str(graph.names[v])!r} is on device {placement[v]}, but its "
                   f"colocation group leader {str(graph.names[L])!r} is on device "
                   f"{placement[L]}; a group runs on one device")
    return None


def respect_colocation(graph, placement) -> np.ndarray:
    """`placement` with every group on one device and every pin kept, moving few bytes.

    Each group goes to its pin; else to the device holding most of its members' bytes
    (persistent + temporary + outputs), which moves the fewest of them; by op count when
    the group holds no bytes; ties go to the leader's device when it is among the best,
    else to the lowest. A conforming placement comes back unchanged.
    Pins are not range-checked here (the simulator and `decode` check them against d).
    """
    placement = np.asarray(placement)
    if placement.shape != (graph.num_nodes,) or not np.issubdtype(placement.dtype, np.integer):
        raise ValueError(f"placement: expected one integer device per op "
                         f"({graph.num_nodes}), got {placement.dtype} shape {placement.shape}")
    placement = placement.astype(np.int32)
    if colocation_violation(graph, placement) is None:
        return placement
    leaders = graph.colocation
    d = int(max(placement.max(initial=0), graph.pinned.max(initial=-1))) + 1
    weight = op_bytes(graph)  # each op votes with the bytes it holds
    votes = np.zeros((graph.num_nodes, d))
    np.add.at(votes, (leaders, placement), weight)
    counts = np.zeros((graph.num_nodes, d))
    np.add.at(counts, (leaders, placement), 1.0)
    empty = votes.sum(axis=1) == 0
    votes[empty] = counts[empty]
    best = votes.max(axis=1, keepdims=True)
    choice = np.argmax(votes == best, axis=1)  # lowest device among the best
    # row L of `votes` is group L's: its leader's own device wins a tie
    keep_leader = votes[np.arange(graph.num_nodes), placement] == best[:, 0]
    choice = np.where(keep_leader, placement, choice)
    result = choice[leaders]
    result = np.where(graph.pinned >= 0, graph.pinned, result)
    return result.astype(np.int32)


def order_priority(order) -> np.ndarray:
    """Priority keys that run the ops in `order` (a permutation of 0..n-1) first to last:
    the first gets 1.0, the last 0.0, evenly spaced and distinct (one op: 0.5)."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    keys = np.empty(n)
    keys[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return keys


def rank_normalize(values) -> np.ndarray:
    """Order-preserving map to [0, 1]: equal values stay equal, so tie-breaks by id survive.

    Distinct values are spread evenly by their dense rank (lowest 0, highest 1);
    a single distinct value maps to 0.5.
    """
    values = np.asarray(values, dtype=np.float64)
    unique, rank = np.unique(values, return_inverse=True)
    if len(unique) == 1:
        return np.full(values.shape, 0.5)
    return rank.reshape(values.shape) / (len(unique) - 1)


def _unit_keys(name: str, values, n: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ValueError(f"{name}: expected one value per op ({n}), got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name}: values must be finite")
    if ((values >= 0.0) & (values <= 1.0)).all():
        return values
    return rank_normalize(values)


def encode(placement, priority, transfer_priority, num_devices: int,
           graph=None) -> np.ndarray:
    """A solution -> one chromosome that decodes back to it.

    The affinity block is one-hot (1.0 on the chosen device, 0.0 elsewhere).
    Priorities already in [0, 1] are stored as they are, so decode(encode(x)) == x;
    any other priority vector is rank-normalised first, which keeps the order
    and the ties (hence the schedule the simulator builds) but not the values.
    Keys always decode to a placement that respects the graph's groups and pins (the
    leader's row decides); given `graph`, a placement that breaks them is first projected
    by `respect_colocation`, so the keys decode to that projection.
    """
    d = int(num_devices)
    if d < 1:
        raise ValueError(f"num_devices must be positive, got {num_devices}")
    placement = np.asarray(placement)
    if placement.ndim != 1 or not np.issubdtype(placement.dtype, np.integer):
        raise ValueError(f"placement: expected a 1-D integer array, got {placement.dtype} "
                         f"shape {placement.shape}")
    n = len(placement)
    bad = (placement < 0) | (placement >= d)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise ValueError(f"placement: op {v} is on device {placement[v]}, "
                         f"outside 0..{d - 1}")
    if graph is not None:
        placement = respect_colocation(graph, placement)
    keys = np.zeros(num_genes(n, d))
    affinity, prio, transfer = split(keys, n, d)
    affinity[np.arange(n), placement] = 1.0
    prio[:] = _unit_keys("priority", priority, n)
    transfer[:] = _unit_keys("transfer_priority", transfer_priority, n)
    return keys
