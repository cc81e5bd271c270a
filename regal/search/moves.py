"""Where a solution's peak is, and the neighbours aimed at it: the moves of a climb.

`peak_facts` traces a solution and lists what is live on its critical device at its peak
instant (the device furthest over its limit while one is over, else the busiest); `Moves`
draws neighbours aimed at that instant, and uniformly random ones (`regal.search.climb`
says which and why).
"""

from __future__ import annotations

import bisect

import numpy as np
from numba import njit

from regal.decode import order_priority, split
from regal.optimizers import Problem

__all__ = ["PeakFacts", "peak_facts", "Moves", "rerank", "descending_order"]


def rerank(values: np.ndarray) -> np.ndarray:
    """The same order (ties by id) as evenly spaced distinct keys in [0, 1]."""
    order = np.lexsort((np.arange(len(values)), -values))
    return order_priority(order)


def descending_order(values: np.ndarray) -> np.ndarray:
    """`np.argsort(-values, kind="stable")` as int64. A climb's incumbent has `rerank`ed keys
    (evenly spaced from 1 to 0, distinct): their order is read off the values and checked
    (a permutation with values strictly falling is the only sorted order), not sorted: on a
    10,000-op graph the two sorts per incumbent were half of the drawing's time. Any other
    values are sorted."""
    values = np.asarray(values, np.float64)
    order = _evenly_spaced_order(values)
    if len(order) == len(values):
        return order
    return np.argsort(-values, kind="stable").astype(np.int64)


@njit(cache=True)
def _evenly_spaced_order(values):
    """The descending order of `values` read off them when they are `rerank`ed keys (rank
    `rint((1 - value) * (n - 1))` a permutation with values strictly falling along it), else
    an empty array. Compiled: the numpy of it was most of its time on small graphs."""
    n = len(values)
    if n <= 1:
        return np.zeros(0, np.int64)
    order = np.full(n, -1, np.int64)
    for v in range(n):
        rank = np.rint((1.0 - values[v]) * (n - 1))
        if not (rank >= 0 and rank <= n - 1):          # also false for NaN
            return np.zeros(0, np.int64)
        order[int(rank)] = v
    for i in range(n):
        if order[i] < 0:
            return np.zeros(0, np.int64)
    for i in range(n - 1):
        if not values[order[i + 1]] < values[order[i]]:
            return np.zeros(0, np.int64)
    return order


# ---------------------------------------------------------------------------
# where the peak is


class PeakFacts:
    """What sets the incumbent's peak: device, instant, and what is live there then.

    `tensors` [m] ids of tensor copies live on `device` at `time`, `tensor_bytes` [m] their
    sizes, `remote` [m] True for a copy transferred in (producer on another device);
    `ops` [k] ops holding persistent or temporary bytes there then, `op_bytes` [k];
    `order_ops[order_ptr[k]:order_ptr[k + 1]]` the ops of device k in execution order
    (`orders[k]`; `order` = `orders[device]`),
    `position` [n] each op's index in its device's execution order; `start`, `end` [n] op
    times; `peaks` [d]; `weights` the running sum of the tensors' then the ops' bytes;
    `trace` the incumbent's `regal.sim.Trace` (its memory curves, for a move ranker).
    """

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    @property
    def orders(self) -> list[np.ndarray]:
        """Each device's ops in execution order (views of `order_ops`)."""
        ptr = self.order_ptr
        return [self.order_ops[ptr[j]:ptr[j + 1]] for j in range(len(ptr) - 1)]

    @property
    def order(self) -> np.ndarray:
        """The critical device's ops in execution order."""
        return self.order_ops[self.order_ptr[self.device]:self.order_ptr[self.device + 1]]


def _critical_device(problem: Problem, peaks: np.ndarray) -> int:
    """The device furthest over its limit while one is over (under one limit for every
    device that is the busiest one, so such a limit changes no move), else the busiest."""
    limits = problem.devices.limits
    if limits is not None and (peaks > limits).any():
        return int(np.argmax(peaks - limits))
    return int(np.argmax(peaks))


def peak_facts(problem: Problem, placement, priority, transfer) -> PeakFacts:
    """Traces one solution and lists what is live on its critical device at its peak."""
    from regal.sim import trace

    graph = problem.graph
    tr = trace(graph, problem.devices, placement, priority, transfer)
    peaks = np.asarray(tr.result.peak, dtype=np.int64)
    k = _critical_device(problem, peaks)
    times, live_bytes = tr.memory[k]
    at = float(times[int(np.argmax(live_bytes))]) if len(times) else 0.0
    placement = np.asarray(placement, np.int32)
    tensors, sizes, remote, ops, held, order_ptr, order_ops, position = _live_at(
        placement, tr.op_start, tr.op_end, graph.tensor_producer, graph.consumer_ptr,
        graph.consumer, graph.tensor_size, graph.tensor_alias, graph.persistent_memory,
        graph.temporary_memory, tr.transfer_tensor, tr.transfer_dst, tr.transfer_start,
        tr.transfer_end, k, at, problem.devices.count)
    tensor_bytes = sizes.astype(np.float64)
    op_bytes = held.astype(np.float64)
    return PeakFacts(device=k, time=at, tensors=tensors,
                     tensor_bytes=tensor_bytes, remote=remote, ops=ops, op_bytes=op_bytes,
                     order_ptr=order_ptr, order_ops=order_ops, position=position,
                     start=tr.op_start, end=tr.op_end, peaks=peaks,
                     weights=np.cumsum(np.concatenate([tensor_bytes, op_bytes])), trace=tr)


@njit(cache=True)
def _live_at(placement, start, end, producer, consumer_ptr, consumer, size, alias, persistent,
             temporary, transfer_tensor, transfer_dst, transfer_start, transfer_end, k, at, d):
    """What `peak_facts` lists, compiled (the numpy of it took most of a climb's time per
    accepted move on graphs of a few hundred ops): the tensor copies live on device `k` at
    instant `at` (those produced there, ascending, then the copies transferred in, in
    transfer order), their bytes and which are remote; the ops on k holding persistent or
    running temporary bytes then, and those bytes; each device's ops in execution order
    ((start, id): `order_ops[order_ptr[j]:order_ptr[j + 1]]`) and each op's place in it.

    A tensor produced on k is live from its producer's start while its producer, a local
    consumer or one of its transfers has not ended (a graph output for ever); a copy
    transferred onto k from the transfer's start until its last consumer on k ends."""
    n, t, m = len(placement), len(producer), len(transfer_tensor)
    free = np.empty(t)
    for x in range(t):
        v = producer[x]
        f = end[v]
        if consumer_ptr[x + 1] == consumer_ptr[x]:
            f = np.inf                                       # a graph output stays live
        else:
            for e in range(consumer_ptr[x], consumer_ptr[x + 1]):
                c = consumer[e]
                if placement[c] == placement[v] and end[c] > f:
                    f = end[c]
        free[x] = f
    for i in range(m):
        x = transfer_tensor[i]
        if consumer_ptr[x + 1] > consumer_ptr[x] and transfer_end[i] > free[x]:
            free[x] = transfer_end[i]
    tensors = np.empty(t + m, np.int64)
    sizes = np.empty(t + m, np.int64)
    remote = np.zeros(t + m, np.bool_)
    count = 0
    for x in range(t):
        v = producer[x]
        own = size[x] if alias[x] < 0 else 0
        if placement[v] == k and start[v] <= at and free[x] > at and own > 0:
            tensors[count], sizes[count] = x, own
            count += 1
    for i in range(m):
        if transfer_dst[i] != k:
            continue
        x = transfer_tensor[i]
        last = -np.inf
        for e in range(consumer_ptr[x], consumer_ptr[x + 1]):
            c = consumer[e]
            if placement[c] == k and end[c] > last:
                last = end[c]
        if transfer_start[i] <= at and last > at and size[x] > 0:
            tensors[count], sizes[count], remote[count] = x, size[x], True
            count += 1
    ops = np.empty(n, np.int64)
    held = np.empty(n, np.int64)
    found = 0
    for v in range(n):
        if placement[v] != k:
            continue
        holds = persistent[v]
        if start[v] <= at and (end[v] > at or start[v] == at):
            holds += temporary[v]
        if holds > 0:
            ops[found], held[found] = v, holds
            found += 1
    by_start = np.argsort(start, kind="mergesort")       # stable: ties by id
    order_ptr = np.zeros(d + 1, np.int64)
    for v in range(n):
        order_ptr[placement[v] + 1] += 1
    for j in range(d):
        order_ptr[j + 1] += order_ptr[j]
    fill = order_ptr[:d].copy()
    order_ops = np.empty(n, np.int64)
    position = np.empty(n, np.int64)
    for v in by_start:
        j = placement[v]
        order_ops[fill[j]] = v
        position[v] = fill[j] - order_ptr[j]
        fill[j] += 1
    return (tensors[:count], sizes[:count], remote[:count], ops[:found], held[:found],
            order_ptr, order_ops, position)


# ---------------------------------------------------------------------------
# neighbours


class Moves:
    """Neighbour generation on one-hot/ranked chromosomes (all randomness from `rng`)."""

    def __init__(self, problem: Problem, rng: np.random.Generator) -> None:
        graph = problem.graph
        self.graph = graph
        self.n = graph.num_nodes
        self.d = problem.devices.count
        limits = problem.devices.limits
        self.limits = None if limits is None else limits.astype(np.float64)
        self.rng = rng
        n = self.n
        leaders = getattr(graph, "colocation", None)
        pinned = getattr(graph, "pinned", None)
        self.grouped = leaders is not None and bool((leaders != np.arange(n)).any())
        self.leaders = np.arange(n) if leaders is None else np.asarray(leaders)
        self.movable = np.ones(n, bool) if pinned is None else np.asarray(pinned) < 0
        if self.grouped:
            order = np.argsort(self.leaders, kind="stable")
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(self.leaders, minlength=n), out=ptr[1:])
            self._members = (order, ptr)
        self.facts: PeakFacts | None = None
        self.placement = np.zeros(n, np.int32)

    # -- helpers

    def _group_of(self, ops: np.ndarray) -> np.ndarray:
        """`ops` widened to whole colocation groups, pinned groups left out."""
        ops = np.asarray(ops, dtype=np.int64)
        if len(ops) > 1:          # most moves name one op: np.unique of it is itself
            ops = np.unique(ops)
        if self.grouped and len(ops):
            order, ptr = self._members
            leaders = np.unique(self.leaders[ops])
            ops = np.concatenate([order[ptr[L]:ptr[L + 1]] for L in leaders])
        return ops[self.movable[ops]]

    def _assign(self, affinity: np.ndarray, ops, device: int) -> bool:
        ops = self._group_of(ops)
        ops = ops[self.placement[ops] != device]
        if not len(ops):
            return False
        affinity[ops] = 0.0
        affinity[ops, device] = 1.0
        return True

    # -- uniform moves (exploration)

    def _swap(self, block: np.ndarray, order: list | None = None) -> None:
        """Swaps the keys of two ops near each other in `block`'s order (key descending,
        ties to the lower id). `order`, when given, is that order as a list, kept in step
        (two removals and two sorted insertions) instead of sorted anew: a kick swaps 2% of
        the ops' keys, and a sort per swap made it quadratic (90 ms at 10,000 ops)."""
        n = self.n
        if n < 2:
            return
        kept = order is not None
        if not kept:
            order = np.argsort(-block, kind="stable")
        i = int(self.rng.integers(n))
        step = min(int(self.rng.geometric(0.3)), n - 1)   # mostly near neighbours in order
        j = i + step if i + step < n and (i - step < 0 or self.rng.random() < 0.5) else i - step
        a, b = order[i], order[j]
        block[a], block[b] = block[b], block[a]
        if kept:
            del order[max(i, j)]
            del order[min(i, j)]
            for v in (a, b):
                order.insert(bisect.bisect_left(order, (-float(block[v]), v),
                                                key=lambda u: (-float(block[u]), u)), v)

    def _move(self, affinity: np.ndarray) -> None:
        v = int(self.rng.integers(self.n))
        now = int(self.placement[v])
        k = int(self.rng.integers(self.d - 1))
        k = k + 1 if k >= now else k
        self._assign(affinity, [v], k)

    def kick(self, keys: np.ndarray) -> np.ndarray:
        out = keys.copy()
        affinity, priority, transfer = split(out, self.n, self.d)
        strength = max(1, int(round(0.02 * self.n)))
        order = np.argsort(-priority, kind="stable").tolist()
        for _ in range(strength):
            if self.d > 1:
                self._move(affinity)
            self._swap(priority, order)
        if self.rng.random() < 0.5:
            self._swap(transfer)
        return out

    # -- neighbours: peak-directed moves and uniform ones, drawn compiled

    def neighbours(self, keys: np.ndarray, count: int, directed_share: float) -> np.ndarray:
        """[count, len(keys)]: `count` neighbours of the incumbent `keys` (see `draw`)."""
        return self.draw(keys, count, directed_share).keys()

    def draw(self, keys: np.ndarray, count: int, directed_share: float) -> "Drawn":
        """`count` neighbours of the incumbent `keys` (whose placement is `self.placement`
        and whose peak is `self.facts`), each a few writes to its keys (`Drawn`): a share
        `directed_share` aimed at the peak, the rest (and every failed aim) uniformly random.

        The moves, by kind of live item drawn (by its bytes) at the peak on device k:
        - an op holding persistent or temporary bytes: move it, or it and the readers of its
          outputs on k, to `target` (below); or move it earlier or later in its device's run
          order by a jump of random length;
        - a tensor copied in from elsewhere: move its consumers on k to the producer's device
          (or to `target`), or run its producer later, or its waiting consumers earlier;
        - a tensor made on k: move its producer with its consumers on k, or alone, or a window
          of k's run order around it, to `target`; or run a waiting consumer earlier (the
          last to finish, sometimes a random one) or the producer later.
        `target` is the device with the lowest peak (while one is over its limit: the most
        room below its own), and 3 times in 10 a random other one. A quarter of the directed
        neighbours stack one or two more such changes. The uniform ones move one op to a
        random device or swap two priority (transfer) keys near in order. Colocation groups
        move whole and pinned ones never (the moves of `regal.search.climb`, step 3).

        Compiled (`regal.search.draw_kernel`), with the same draws from `self.rng` as the
        Python moves it replaced, kept in tests/move_reference.py: same seed, same keys."""
        from regal.search.draw_kernel import draw_neighbours

        keys = np.ascontiguousarray(keys, dtype=np.float64)
        static = self._static()
        peak = self._peak_arrays()
        incumbent = self._incumbent_arrays(keys)
        row_ptr, kind, op, value = draw_neighbours(
            self.rng, int(count), float(directed_share), peak[0], self.n, self.d, *peak[1:],
            *incumbent, *static)
        return Drawn(keys, self.n, self.d, row_ptr, kind, op, value)

    def _static(self) -> tuple:
        """The graph's arrays the drawing reads (once per `Moves`)."""
        cached = getattr(self, "_static_arrays", None)
        if cached is None:
            g, n = self.graph, self.n
            size = max(n, len(g.consumer)) + 2
            log2 = np.zeros(size)
            log2[1:] = np.log2(np.arange(1, size))
            if self.grouped:
                members, member_ptr = self._members
            else:
                members, member_ptr = np.arange(n), np.arange(n + 1)
            cached = (np.ascontiguousarray(log2),
                      np.asarray(g.tensor_producer, np.int64),
                      np.asarray(g.consumer_ptr, np.int64), np.asarray(g.consumer, np.int64),
                      np.asarray(g.output_ptr, np.int64), bool(self.grouped),
                      np.asarray(self.leaders, np.int64), np.asarray(member_ptr, np.int64),
                      np.asarray(members, np.int64), np.asarray(self.movable, np.bool_))
            self._static_arrays = cached
        return cached

    def _peak_arrays(self) -> tuple:
        """`self.facts` as the drawing reads it (once per incumbent's facts)."""
        cached = getattr(self, "_peak_cache", None)
        f = self.facts
        if cached is not None and cached[0] is f:
            return cached[1]
        d, n = self.d, self.n
        limits = np.zeros(d) if self.limits is None else np.asarray(self.limits, np.float64)
        if f is None:
            empty_i = np.zeros(0, np.int64)
            arrays = (False, 0, np.zeros(1), empty_i, np.zeros(0, np.bool_), empty_i,
                      np.zeros(d), limits, self.limits is not None, 0.0, np.zeros(n),
                      np.zeros(n, np.int64), np.zeros(d + 1, np.int64), empty_i)
        else:
            weights = np.asarray(f.weights, np.float64)
            arrays = (True, int(f.device), weights if len(weights) else np.zeros(1),
                      np.asarray(f.tensors, np.int64), np.asarray(f.remote, np.bool_),
                      np.asarray(f.ops, np.int64), np.asarray(f.peaks, np.float64), limits,
                      self.limits is not None, float(f.time), np.asarray(f.end, np.float64),
                      np.asarray(f.position, np.int64), f.order_ptr, f.order_ops)
        self._peak_cache = (f, arrays)
        return arrays

    def _incumbent_arrays(self, keys: np.ndarray) -> tuple:
        """The incumbent's placement, priority and transfer keys and their orders (the
        uniform swaps' `np.argsort(-block, kind="stable")`), once per incumbent."""
        cached = getattr(self, "_incumbent_cache", None)
        if cached is not None and cached[1] is self.placement and np.array_equal(cached[0], keys):
            return cached[2]
        _, priority, transfer = split(keys, self.n, self.d)
        priority, transfer = priority.copy(), transfer.copy()
        arrays = (np.asarray(self.placement, np.int64), priority, transfer,
                  descending_order(priority), descending_order(transfer))
        self._incumbent_cache = (keys.copy(), self.placement, arrays)
        return arrays


class Drawn:
    """Neighbours of one incumbent as writes to its keys (`regal.search.draw_kernel`): row
    `i`'s writes are `kind[row_ptr[i]:row_ptr[i + 1]]`, `op`, `value` (0: the op's affinity
    row one-hot on device `value`; 1: its priority key; 2: its transfer key), applied in
    order. `keys(rows)` gives the chromosomes; a move ranker may read the writes instead."""

    def __init__(self, incumbent, n, d, row_ptr, kind, op, value) -> None:
        self.incumbent, self.n, self.d = incumbent, int(n), int(d)
        self.row_ptr, self.kind, self.op, self.value = row_ptr, kind, op, value

    def __len__(self) -> int:
        return len(self.row_ptr) - 1

    def keys(self, rows=None) -> np.ndarray:
        """[len(rows), len(incumbent)] the chosen neighbours' keys (default: all, in order)."""
        from regal.search.draw_kernel import materialise

        rows = np.arange(len(self)) if rows is None else np.asarray(rows, np.int64)
        return materialise(self.incumbent, self.n, self.d, rows, self.row_ptr, self.kind,
                           self.op, self.value)
