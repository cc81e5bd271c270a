"""Where a solution's peak is, and the neighbours aimed at it: the moves of a climb.

`peak_facts` traces a solution and lists what is live on its critical device at its peak
instant (the device furthest over its limit while one is over, else the busiest); `Moves`
draws neighbours aimed at that instant, and uniformly random ones (`regal.search.climb`
says which and why).
"""

from __future__ import annotations

import bisect

import numpy as np

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
    n = len(values)
    if n > 1:
        rank = np.rint((1.0 - values) * (n - 1))
        if rank.min() >= 0 and rank.max() <= n - 1:
            order = np.full(n, -1, np.int64)
            order[rank.astype(np.int64)] = np.arange(n)
            if order.min() >= 0 and (np.diff(values[order]) < 0).all():
                return order
    return np.argsort(-values, kind="stable").astype(np.int64)



# ---------------------------------------------------------------------------
# where the peak is


class PeakFacts:
    """What sets the incumbent's peak: device, instant, and what is live there then.

    `tensors` [m] ids of tensor copies live on `device` at `time`, `tensor_bytes` [m] their
    sizes, `remote` [m] True for a copy transferred in (producer on another device);
    `ops` [k] ops holding persistent or temporary bytes there then, `op_bytes` [k];
    `orders[k]` the ops of device k in execution order (`order` = `orders[device]`),
    `position` [n] each op's index in its device's execution order; `start`, `end` [n] op
    times; `peaks` [d]; `weights` the running sum of the tensors' then the ops' bytes;
    `trace` the incumbent's `regal.sim.Trace` (its memory curves, for a move ranker).
    """

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


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
    n, t = graph.num_nodes, graph.num_tensors
    tr = trace(graph, problem.devices, placement, priority, transfer)
    peaks = np.asarray(tr.result.peak, dtype=np.int64)
    k = _critical_device(problem, peaks)
    times, live_bytes = tr.memory[k]
    at = float(times[int(np.argmax(live_bytes))]) if len(times) else 0.0
    start, end = tr.op_start, tr.op_end
    placement = np.asarray(placement)

    producer = graph.tensor_producer
    home = placement[producer]
    edge_tensor = np.repeat(np.arange(t), np.diff(graph.consumer_ptr))
    consumer = graph.consumer
    # producer-side copy: freed when the producer, its local consumers and its transfers end
    local = placement[consumer] == home[edge_tensor]
    free = end[producer].copy()
    np.maximum.at(free, edge_tensor[local], end[consumer[local]])
    if len(tr.transfer_tensor):
        np.maximum.at(free, tr.transfer_tensor, tr.transfer_end)
    free[np.diff(graph.consumer_ptr) == 0] = np.inf         # graph outputs stay live
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0)
    live_home = (home == k) & (start[producer] <= at) & (free > at) & (own > 0)
    tensors = [np.flatnonzero(live_home)]
    sizes = [own[live_home]]
    # copies transferred onto k: live from the transfer's start to the last consumer there
    into = np.flatnonzero(tr.transfer_dst == k)
    if len(into):
        remote_free = np.full(t, -np.inf)
        on_k = placement[consumer] == k
        np.maximum.at(remote_free, edge_tensor[on_k], end[consumer[on_k]])
        tensor_in = tr.transfer_tensor[into]
        live = (tr.transfer_start[into] <= at) & (remote_free[tensor_in] > at) \
            & (graph.tensor_size[tensor_in] > 0)
        tensors.append(tensor_in[live])
        sizes.append(graph.tensor_size[tensor_in[live]])
    remote = np.concatenate([np.full(len(part), i > 0) for i, part in enumerate(tensors)])
    mine = placement == k
    running = mine & (start <= at) & ((end > at) | (start == at))
    holds = graph.persistent_memory + np.where(running, graph.temporary_memory, 0)
    ops = np.flatnonzero(mine & (holds > 0))
    position = np.zeros(n, np.int64)
    orders = []
    for device in range(problem.devices.count):
        ops_d = np.flatnonzero(placement == device)
        ops_d = ops_d[np.lexsort((ops_d, start[ops_d]))]
        position[ops_d] = np.arange(len(ops_d))
        orders.append(ops_d)
    tensor_bytes = np.concatenate(sizes).astype(np.float64)
    op_bytes = holds[ops].astype(np.float64)
    return PeakFacts(device=k, time=at, tensors=np.concatenate(tensors),
                     tensor_bytes=tensor_bytes, remote=remote, ops=ops, op_bytes=op_bytes,
                     order=orders[k], orders=orders, position=position, start=start, end=end,
                     peaks=peaks, weights=np.cumsum(np.concatenate([tensor_bytes, op_bytes])),
                     trace=tr)


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
            orders = [np.asarray(o, np.int64) for o in f.orders]
            order_ptr = np.zeros(d + 1, np.int64)
            np.cumsum([len(o) for o in orders], out=order_ptr[1:])
            weights = np.asarray(f.weights, np.float64)
            arrays = (True, int(f.device), weights if len(weights) else np.zeros(1),
                      np.asarray(f.tensors, np.int64), np.asarray(f.remote, np.bool_),
                      np.asarray(f.ops, np.int64), np.asarray(f.peaks, np.float64), limits,
                      self.limits is not None, float(f.time), np.asarray(f.end, np.float64),
                      np.asarray(f.position, np.int64), order_ptr,
                      np.concatenate(orders) if orders else np.zeros(0, np.int64))
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
