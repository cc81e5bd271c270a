"""The compiled drawing of a climb's neighbours (`regal.search.moves.Moves.draw`).

Why: a climb draws its neighbours one at a time, and in Python each one cost a copy of the
whole chromosome and tens of microseconds of interpreter work; with a move ranker drawing
4x the batch that was most of a climb's wall time (experiments/results/move_ranker.md).
Here the same moves, with the same random draws from the same `numpy.random.Generator`
(numba's Generator methods consume its bit stream exactly as numpy's do), are compiled, and
each neighbour is a short list of *writes* to the incumbent's keys instead of a copy:

    kind 0: op's affinity row one-hot on device `value`;
    kind 1: op's priority key = `value`;   kind 2: op's transfer key = `value`.

Applied in order to a copy of the incumbent (`materialise`), the writes of row `i` give
exactly the keys the Python moves gave (tests/move_reference.py keeps them and
tests/test_climb.py checks the two agree). `changes` reads the writes as what a move
ranker needs: per neighbour the ops whose decoded device or priority changed, and whether
a sending op's transfer key changed, without decoding whole chromosomes.

The moves themselves (which op, which device, which jump) are documented in
`regal.search.climb` and `regal.search.moves`; this file only repeats them, line by line.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["draw_neighbours", "materialise", "changes"]

ASSIGN, PRIORITY, TRANSFER = 0, 1, 2
# `changes` lists a row's many changed ops in id order by scanning its marks over the ids they
# span when that span is under this many times their count (cheaper than sorting them: the
# windows a climb draws around the peak change hundreds of ops of a 10,000-op graph)
SCAN_SPAN = 16


@njit(cache=True)
def _grow_i(a, need):
    """`a` (int64), or a copy with room for `need` items."""
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), np.int64)
    b[:len(a)] = a
    return b


@njit(cache=True)
def _grow_f(a, need):
    """`a` (float64), or a copy with room for `need` items."""
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), np.float64)
    b[:len(a)] = a
    return b


@njit(cache=True)
def _uniform(rng):
    """rng.random() (one compiled copy, called from every draw site)."""
    return rng.random()


@njit(cache=True)
def _below(rng, high):
    """rng.integers(high) as numpy draws it (one compiled copy)."""
    return rng.integers(0, high)


@njit(cache=True)
def _between(rng, low, high):
    return rng.integers(low, high)


@njit(cache=True)
def _geometric(rng, p):
    return rng.geometric(p)


@njit(cache=True)
def _target(rng, avoid, d, peaks, limits, has_limits):
    """Moves._target: the lowest peak (most room under limits), sometimes a random other."""
    if _uniform(rng) < 0.3:
        j = _below(rng, d - 1)
        return j if j < avoid else j + 1
    over = False
    if has_limits:
        for j in range(d):
            if peaks[j] > limits[j]:
                over = True
    best, best_value = -1, np.inf
    for j in range(d):
        if j == avoid:
            continue
        value = peaks[j] - limits[j] if over else peaks[j]
        if best < 0 or value < best_value:
            best, best_value = j, value
    return best


@njit(cache=True)
def _group(ops, count, device, placement, grouped, leaders, member_ptr, members, movable,
           stamp, mark, out):
    """Moves._group_of then the filter of Moves._assign: the distinct movable ops of the
    groups of `ops[:count]` not already on `device`, into `out`; their count."""
    stamp += 1
    found = 0
    for i in range(count):
        v = ops[i]
        if grouped:
            L = leaders[v]
            if mark[L] == stamp:
                continue
            mark[L] = stamp
            for p in range(member_ptr[L], member_ptr[L + 1]):
                u = members[p]
                if movable[u] and placement[u] != device:
                    out[found] = u
                    found += 1
        else:
            if mark[v] == stamp:
                continue
            mark[v] = stamp
            if movable[v] and placement[v] != device:
                out[found] = v
                found += 1
    return found, stamp


@njit(cache=True)
def _priority_now(v, prio, w_kind, w_op, w_val, row_start, size):
    """The candidate's priority key of op v: its last write in this row, else the incumbent's."""
    for p in range(size - 1, row_start - 1, -1):
        if w_kind[p] == PRIORITY and w_op[p] == v:
            return w_val[p]
    return prio[v]


@njit(cache=True)
def draw_neighbours(rng, count, directed_share, has_facts, n, d, k, weights, live_tensors,
                    live_remote, peak_ops, peaks, limits, has_limits, at_time, end, position,
                    order_ptr, orders, placement, prio, tr, prio_order, tr_order, log2_table,
                    tensor_producer, consumer_ptr, consumer, output_ptr, grouped, leaders,
                    member_ptr, members, movable):
    """`count` neighbours of the incumbent (`placement`, keys `prio`, `tr`; `prio_order`,
    `tr_order` the stable argsorts of minus each block) as writes: (row_ptr [count + 1],
    kind, op, value). Moves.neighbours, step for step (tests/move_reference.py)."""
    row_ptr = np.zeros(count + 1, np.int64)
    w_kind = np.empty(64, np.int64)
    w_op = np.empty(64, np.int64)
    w_val = np.empty(64, np.float64)
    size = 0
    # ops handed to _group: a run-order window (<= n), an op's readers or a tensor's
    # consumers (<= the data edges) and one more
    scratch = np.empty(max(n, len(consumer)) + 1, np.int64)
    chosen = np.empty(n, np.int64)           # _group's answer
    mark = np.zeros(n, np.int64)
    stamp = 0
    n_live = len(live_tensors)
    n_ops = len(peak_ops)
    multi = d > 1
    spacing = 1.0 / (2.0 * n + 2.0)
    k_start = order_ptr[k]
    k_len = order_ptr[k + 1] - k_start
    for row in range(count):
        row_start = size
        ok = False
        if has_facts and _uniform(rng) < directed_share:
            # the first change, then now and then one or two more on top of it
            changes = 1
            extra = -1
            while True:
                done = False
                # ---- one peak-directed change (Moves.directed_neighbour)
                r = _uniform(rng)
                if n_live == 0 and n_ops == 0:
                    done = False
                else:
                    # _pick: a live item by its bytes
                    total = weights[len(weights) - 1]
                    if total <= 0:
                        i = _below(rng, len(weights))
                    else:
                        i = np.searchsorted(weights, _uniform(rng) * total, side="right")
                        i = min(i, len(weights) - 1)
                    assign_count = -1           # ops in scratch to assign to `target`
                    target = -1
                    reorder_op = -1
                    earlier = False
                    if i >= n_live:
                        v = peak_ops[i - n_live]
                        s = _uniform(rng)
                        if multi and s < 0.35:
                            target = _target(rng, k, d, peaks, limits, has_limits)
                            scratch[0] = v
                            assign_count = 1
                        elif multi and s < 0.7:
                            m = 0
                            for x in range(output_ptr[v], output_ptr[v + 1]):
                                for p in range(consumer_ptr[x], consumer_ptr[x + 1]):
                                    c = consumer[p]
                                    if placement[c] == k:
                                        scratch[m] = c
                                        m += 1
                            scratch[m] = v
                            assign_count = m + 1
                            target = _target(rng, k, d, peaks, limits, has_limits)
                        else:
                            earlier = _uniform(rng) < 0.5
                            reorder_op = v
                    else:
                        tensor = live_tensors[i]
                        remote = live_remote[i]
                        producer = tensor_producer[tensor]
                        if multi and r < 0.55:
                            s = _uniform(rng)
                            if remote:
                                m = 0
                                for p in range(consumer_ptr[tensor], consumer_ptr[tensor + 1]):
                                    c = consumer[p]
                                    if placement[c] == k:
                                        scratch[m] = c
                                        m += 1
                                home = placement[producer]
                                target = home if s < 0.6 else _target(rng, k, d, peaks, limits,
                                                                       has_limits)
                                assign_count = m
                            elif s < 0.5:
                                m = 0
                                for p in range(consumer_ptr[tensor], consumer_ptr[tensor + 1]):
                                    c = consumer[p]
                                    if placement[c] == k:
                                        scratch[m] = c
                                        m += 1
                                scratch[m] = producer
                                assign_count = m + 1
                                target = _target(rng, k, d, peaks, limits, has_limits)
                            elif s < 0.7:
                                scratch[0] = producer
                                assign_count = 1
                                target = _target(rng, k, d, peaks, limits, has_limits)
                            else:
                                at = position[producer]
                                width = max(1, int(2.0 ** (_uniform(rng)
                                                           * log2_table[max(2, k_len)])))
                                lo = max(0, at - _below(rng, width))
                                hi = min(lo + width, k_len)
                                m = 0
                                for p in range(lo, hi):
                                    scratch[m] = orders[k_start + p]
                                    m += 1
                                assign_count = m
                                target = _target(rng, k, d, peaks, limits, has_limits)
                        else:
                            # consumers on k that still hold the tensor, in consumer order
                            n_wait = 0
                            best_wait, best_end = -1, -np.inf
                            for p in range(consumer_ptr[tensor], consumer_ptr[tensor + 1]):
                                c = consumer[p]
                                if placement[c] == k and end[c] > at_time:
                                    scratch[n_wait] = c
                                    if best_wait < 0 or end[c] > best_end:
                                        best_wait, best_end = c, end[c]
                                    n_wait += 1
                            if remote and (n_wait == 0 or _uniform(rng) < 0.5):
                                reorder_op, earlier = producer, False
                            elif n_wait > 0 and (remote or _uniform(rng) < 0.6):
                                v = best_wait
                                if _uniform(rng) < 0.3:
                                    v = scratch[_below(rng, n_wait)]
                                reorder_op, earlier = v, True
                            elif not remote:
                                reorder_op, earlier = producer, False
                    if assign_count >= 0:
                        found, stamp = _group(scratch, assign_count, target, placement, grouped,
                                              leaders, member_ptr, members, movable, stamp,
                                              mark, chosen)
                        if found > 0:
                            w_kind = _grow_i(w_kind, size + found)
                            w_op = _grow_i(w_op, size + found)
                            w_val = _grow_f(w_val, size + found)
                            for p in range(found):
                                w_kind[size] = ASSIGN
                                w_op[size] = chosen[p]
                                w_val[size] = target
                                size += 1
                            done = True
                    elif reorder_op >= 0:
                        # Moves._reorder: a random jump in the op's device's run order
                        v = reorder_op
                        device = placement[v]
                        start = order_ptr[device]
                        length = order_ptr[device + 1] - start
                        here = position[v]
                        room = here if earlier else length - 1 - here
                        if room > 0:
                            jump = min(room, max(1, int(2.0 ** (_uniform(rng)
                                                                 * log2_table[room + 1]))))
                            other = orders[start + (here - jump if earlier else here + jump)]
                            value = _priority_now(other, prio, w_kind, w_op, w_val, row_start,
                                                  size) + (spacing if earlier else -spacing)
                            if value != _priority_now(v, prio, w_kind, w_op, w_val, row_start,
                                                      size):
                                w_kind = _grow_i(w_kind, size + 1)
                                w_op = _grow_i(w_op, size + 1)
                                w_val = _grow_f(w_val, size + 1)
                                w_kind[size] = PRIORITY
                                w_op[size] = v
                                w_val[size] = value
                                size += 1
                                done = True
                # ---- after the first change: how many more (drawn whatever it gave)
                if extra < 0:
                    more = _uniform(rng) < 0.25
                    extra = (1 if more else 0) * _between(rng, 1, 3)
                if not done:
                    break
                if changes > extra:
                    ok = True
                    break
                changes += 1
            if not ok:
                size = row_start                    # a failed change: no directed neighbour
        if not ok:
            # ---- a uniformly random neighbour (Moves.random_neighbour)
            r = _uniform(rng)
            if d > 1 and r < 0.4:
                v = _below(rng, n)
                now = placement[v]
                j = _below(rng, d - 1)
                j = j + 1 if j >= now else j
                scratch[0] = v
                found, stamp = _group(scratch, 1, j, placement, grouped, leaders, member_ptr,
                                      members, movable, stamp, mark, chosen)
                w_kind = _grow_i(w_kind, size + found)
                w_op = _grow_i(w_op, size + found)
                w_val = _grow_f(w_val, size + found)
                for p in range(found):
                    w_kind[size] = ASSIGN
                    w_op[size] = chosen[p]
                    w_val[size] = j
                    size += 1
            elif n >= 2:
                transfer = r >= 0.85
                block_order = tr_order if transfer else prio_order
                i = _below(rng, n)
                step = min(_geometric(rng, 0.3), n - 1)
                if i + step < n and (i - step < 0 or _uniform(rng) < 0.5):
                    j = i + step
                else:
                    j = i - step
                    if j < 0:                       # Python's negative index
                        j += n
                a, b = block_order[i], block_order[j]
                w_kind = _grow_i(w_kind, size + 2)
                w_op = _grow_i(w_op, size + 2)
                w_val = _grow_f(w_val, size + 2)
                kind = TRANSFER if transfer else PRIORITY
                values = tr if transfer else prio
                w_kind[size], w_op[size], w_val[size] = kind, a, values[b]
                w_kind[size + 1], w_op[size + 1], w_val[size + 1] = kind, b, values[a]
                size += 2
        row_ptr[row + 1] = size
    return row_ptr, w_kind[:size].copy(), w_op[:size].copy(), w_val[:size].copy()


@njit(cache=True)
def materialise(keys, n, d, rows, row_ptr, w_kind, w_op, w_val):
    """[len(rows), len(keys)]: the incumbent `keys` with each chosen row's writes applied."""
    out = np.empty((len(rows), len(keys)))
    for i in range(len(rows)):
        out[i] = keys
        row = rows[i]
        for p in range(row_ptr[row], row_ptr[row + 1]):
            v = w_op[p]
            if w_kind[p] == ASSIGN:
                for j in range(d):
                    out[i, v * d + j] = 0.0
                out[i, v * d + int(w_val[p])] = 1.0
            elif w_kind[p] == PRIORITY:
                out[i, n * d + v] = w_val[p]
            else:
                out[i, n * d + n + v] = w_val[p]
    return out


@njit(cache=True)
def changes(n, row_ptr, w_kind, w_op, w_val, place0, prio0, tr0, senders0, pinned, grouped,
            colocation, member_ptr, members, scratch, scratch_f, base):
    """What each drawn neighbour changes, as a move ranker reads it: (ptr [m + 1], op, device,
    priority) for the ops whose decoded device or priority key differs from the incumbent's
    (ascending op ids within a row; the op's new device and key), and `transfer` [m]: a sending
    op's (`senders0`) transfer key changed. Decoding as `regal.decode.decode`: a group's
    device is its leader's row, a pin overrides it.

    `scratch` int64 [5, n] and `scratch_f` [2, n] are reused from call to call (zeros at
    first): row `r` marks them with `base + r + 1`, so `base` must grow past every mark used
    before (the last value returned)."""
    m = len(row_ptr) - 1
    cap = change_capacity(row_ptr[0], row_ptr[m], w_kind, w_op, grouped, member_ptr)
    ptr = np.zeros(m + 1, np.int64)
    c_op = np.empty(cap, np.int64)
    c_dev = np.empty(cap, np.int64)
    c_prio = np.empty(cap, np.float64)
    transfer = np.zeros(m, np.bool_)
    size = changes_into(n, row_ptr, w_kind, w_op, w_val, place0, prio0, tr0, senders0, pinned,
                        grouped, colocation, member_ptr, members, scratch, scratch_f, base,
                        ptr, c_op, c_dev, c_prio, transfer)
    return ptr, c_op[:size].copy(), c_dev[:size].copy(), c_prio[:size].copy(), transfer, base + m


@njit(cache=True)
def change_capacity(lo, hi, w_kind, w_op, grouped, member_ptr):
    """At most how many changed ops writes lo:hi can give `changes_into`: an op changes only
    where its priority key or (its group leader's) device was written."""
    cap = 0
    for p in range(lo, hi):
        if w_kind[p] == ASSIGN and grouped:
            v = w_op[p]
            cap += max(member_ptr[v + 1] - member_ptr[v], 1)
        elif w_kind[p] != TRANSFER:
            cap += 1
    return cap


@njit(cache=True)
def changes_into(n, row_ptr, w_kind, w_op, w_val, place0, prio0, tr0, senders0, pinned, grouped,
                 colocation, member_ptr, members, scratch, scratch_f, base, ptr, c_op, c_dev,
                 c_prio, transfer):
    """`changes` written into given arrays: row r's changed ops at c_op[ptr[r]:ptr[r + 1]]
    (ptr[0] given: where the first row starts), `transfer` [m]; returns the end. The arrays
    hold what `change_capacity` of the rows' writes says."""
    m = len(row_ptr) - 1
    stamp = scratch[0]                     # the row's mark when the op was touched in it
    row_dev = scratch[1]                   # the last device written to an op's row
    has_prio = scratch[2]
    has_tr = scratch[3]
    seen = scratch[4]
    row_prio = scratch_f[0]
    row_tr = scratch_f[1]
    touched = np.empty(n, np.int64)
    candidates = np.empty(n, np.int64)
    size = ptr[0]
    for row in range(m):
        tag = base + row + 1
        n_touched = 0
        for p in range(row_ptr[row], row_ptr[row + 1]):
            v = w_op[p]
            if stamp[v] != tag:
                stamp[v] = tag
                row_dev[v] = -1
                has_prio[v] = 0
                has_tr[v] = 0
                touched[n_touched] = v
                n_touched += 1
            kind = w_kind[p]
            if kind == ASSIGN:
                row_dev[v] = int(w_val[p])
            elif kind == PRIORITY:
                row_prio[v] = w_val[p]
                has_prio[v] = tag
            else:
                row_tr[v] = w_val[p]
                has_tr[v] = tag
        # the ops whose decoded device may change: members of groups whose leader's row was
        # written; and the ops whose priority key was written
        n_cand = 0
        for t in range(n_touched):
            v = touched[t]
            if has_tr[v] == tag and senders0[v] and row_tr[v] != tr0[v]:
                transfer[row] = True
            if has_prio[v] == tag and seen[v] != tag:
                seen[v] = tag
                candidates[n_cand] = v
                n_cand += 1
            if row_dev[v] >= 0:
                if grouped:
                    if colocation[v] != v:
                        continue                    # only the leader's row decides
                    for q in range(member_ptr[v], member_ptr[v + 1]):
                        u = members[q]
                        if seen[u] != tag:
                            seen[u] = tag
                            candidates[n_cand] = u
                            n_cand += 1
                elif seen[v] != tag:
                    seen[v] = tag
                    candidates[n_cand] = v
                    n_cand += 1
        if n_cand > 32:
            low, high = n, -1
            for t in range(n_cand):
                low = min(low, candidates[t])
                high = max(high, candidates[t])
            if high - low < SCAN_SPAN * n_cand:     # a window of a run order: its ids, in order
                q = 0
                for v in range(low, high + 1):
                    if seen[v] == tag:
                        candidates[q] = v
                        q += 1
            else:
                candidates[:n_cand] = np.sort(candidates[:n_cand])
        else:                                   # most rows change a few ops
            for t in range(1, n_cand):
                v = candidates[t]
                q = t - 1
                while q >= 0 and candidates[q] > v:
                    candidates[q + 1] = candidates[q]
                    q -= 1
                candidates[q + 1] = v
        for t in range(n_cand):
            v = candidates[t]
            L = colocation[v] if grouped else v
            device = place0[v]
            if pinned[v] >= 0:
                device = pinned[v]
            elif stamp[L] == tag and row_dev[L] >= 0:
                device = row_dev[L]
            key = row_prio[v] if has_prio[v] == tag else prio0[v]
            if device != place0[v] or key != prio0[v]:
                c_op[size], c_dev[size], c_prio[size] = v, device, key
                size += 1
        ptr[row + 1] = size
    return size


@njit(cache=True, inline="always")
def _mix(x):
    """splitmix64's finaliser (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def row_hashes(n, row_ptr, w_kind, w_op, bits):
    """[m] uint64: one hash per drawn neighbour of what its writes leave (each written key's
    last value; `bits` the values' float64 bits as int64), whatever their order: equal
    neighbours of one incumbent hash alike (two that differ collide with odds ~2**-64)."""
    m = len(row_ptr) - 1
    out = np.zeros(m, np.uint64)
    last = np.full((3, n), -1, np.int64)       # position of each key's last write in the row
    for row in range(m):
        lo, hi = row_ptr[row], row_ptr[row + 1]
        for p in range(lo, hi):
            last[w_kind[p], w_op[p]] = p
        h = np.uint64(0)
        for p in range(lo, hi):
            kind, v = w_kind[p], w_op[p]
            if last[kind, v] == p:              # the key's final value, counted once
                key = np.uint64(v * 3 + kind + 1) * np.uint64(0x9E3779B97F4A7C15)
                h += _mix(key ^ np.uint64(bits[p]))
        for p in range(lo, hi):
            last[w_kind[p], w_op[p]] = -1
        out[row] = h
    return out


@njit(cache=True)
def _insert(table, h):
    """Adds hash `h` (not 0) to the open-addressing set `table` (0 marks an empty slot; its
    length a power of two); whether it was there already."""
    mask = np.uint64(len(table) - 1)
    slot = h & mask
    while table[slot] != 0:
        if table[slot] == h:
            return True
        slot = (slot + np.uint64(1)) & mask
    table[slot] = h
    return False


@njit(cache=True)
def untried_first(hashes, order, count, table, state):
    """The first `count` rows of `order` whose hash is not in the set (`table`, and
    `state[1]` = 1 when it holds the hash 0), each hash once, then the others in `order`
    (at most `count` of them), cut to `count` in all; the fresh hashes are added to the set
    (`state[0]` counts its entries). The caller keeps the table at most half full."""
    fresh = np.empty(max(count, 0), np.int64)
    again = np.empty(max(count, 0), np.int64)
    n_fresh = n_again = 0
    for t in range(len(order) if count > 0 else 0):
        i = order[t]
        h = hashes[i]
        if h == 0:
            known = state[1] == 1
            state[1] = 1
        else:
            known = _insert(table, h)
        if known:
            if n_again < count:
                again[n_again] = i
                n_again += 1
        else:
            state[0] += 1
            fresh[n_fresh] = i
            n_fresh += 1
            if n_fresh == count:
                break
    out = np.empty(min(max(count, 0), n_fresh + n_again), np.int64)
    out[:n_fresh] = fresh[:n_fresh]
    out[n_fresh:] = again[:len(out) - n_fresh]
    return out


@njit(cache=True)
def rehashed(table, size):
    """The entries of the set `table` in a new one of `size` slots (a power of two)."""
    out = np.zeros(size, np.uint64)
    for h in table:
        if h != 0:
            _insert(out, h)
    return out
