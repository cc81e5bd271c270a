"""A learned move ranker for the climbs: a linear "local advantage function" over cheap
features of each drawn neighbour's change from the incumbent (after Wu et al., "Learning
Local Advantage Functions for Generalizable Graph Optimizations").

Why: a climb (`regal.search.climb.Climb`) may draw `draw` times its batch and evaluate only
the best-ranked batch (`rank_moves`). An oracle that simulates every drawn neighbour for free
bounds what that can give (`experiments/ceilings.py`); a ranker that reads the change itself,
in numpy and without simulating, can only hope for part of it. `move_features` describes each
candidate's diff from the incumbent relative to what sets the incumbent's peak (its
`PeakFacts`): which bytes live at the peak on the critical device leave it, which bytes land
on which device and how much room that device has, what a reorder does to a live tensor's
producer or consumer, how the cut and the compute load change. `MoveRanker` scores them with
one weight vector per regime (`REGIMES`: the objective, and under running time whether a
device is over its limit; within one step only the regime's weights matter, so a feature that
is constant over the candidates, like the regime itself, can act only through them) and
returns minus the predicted advantage (lower is better, as `rank_moves` wants).

Features are scale free: bytes over the critical device's peak `P`, counts over `n`, jumps
over the device's op count, compute over the mean device load. Colocation groups need no
care: decoding the drawn keys gives each group's device, and the features read the diff.
The weights are fitted by `experiments/move_ranker.py` (`data/policy/move_ranker.npz`).
Numpy only, deterministic; no neighbour is simulated (each new incumbent is traced once more,
`regal.sim.trace`, for its devices' memory curves: a re-run of a solution already scored, as
the climb's own `peak_facts`, which costs no evaluation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from regal.decode import decode, split
from regal.graph import op_bytes

__all__ = ["FEATURES", "REGIMES", "move_features", "regime_of", "MoveRanker", "Context"]

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
# regime 0: peak memory; 1: running time, every device within its limit; 2: running time with
# a device over its limit (the climb then aims its moves at that device's excess)
REGIMES = ("peak_memory", "makespan_fit", "makespan_over")


def regime_of(problem, facts) -> int:
    """The regime of the incumbent: which of `REGIMES` weights rank its neighbours."""
    if problem.objective == "peak_memory":
        return 0
    limits = problem.devices.limits
    return 2 if limits is not None and bool((facts.peaks > limits).any()) else 1


class Context:
    """Per-incumbent arrays the features of all its neighbours share (built once per
    incumbent and reused while it stays: a climb ranks several batches from one)."""

    def __init__(self, climb) -> None:
        problem, facts = climb.problem, climb.moves.facts
        graph, devices = problem.graph, problem.devices
        n, d = graph.num_nodes, devices.count
        self.n, self.d = n, d
        self.k = k = int(facts.device)
        self.place0 = np.asarray(climb.moves.placement, np.int64)
        _, prio0, tr0 = split(np.asarray(climb.current, np.float64), n, d)
        self.prio0, self.tr0 = prio0.copy(), tr0.copy()
        peaks = facts.peaks.astype(np.float64)
        self.P = P = max(float(peaks[k]), 1.0)
        limits = devices.limits
        self.regime = regime_of(problem, facts)
        # the level a target device may rise to: its limit under limits, else the peak
        room = limits.astype(np.float64) if limits is not None else np.full(d, P)
        self.over_room = (peaks - room) / P                   # [d]
        self.headroom = np.maximum(room - peaks, P / 50.0) / P
        self.obytes = op_bytes(graph).astype(np.float64) / P
        self.cost = graph.compute_cost.astype(np.float64)
        self.mean_load = max(float(self.cost.sum()) / d, 1e-9)

        # live tensors at the peak on k; their waiting consumers there
        tensors = np.asarray(facts.tensors, np.int64)
        tbytes = np.asarray(facts.tensor_bytes, np.float64) / P
        remote = np.asarray(facts.remote, bool)
        producer = graph.tensor_producer[tensors].astype(np.int64)
        cptr = graph.consumer_ptr
        counts = (cptr[tensors + 1] - cptr[tensors]).astype(np.int64)
        owner = np.repeat(np.arange(len(tensors)), counts)
        if len(owner):
            starts = np.repeat(cptr[tensors].astype(np.int64), counts)
            offset = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
            cons = graph.consumer[starts + offset].astype(np.int64)
        else:
            cons = np.zeros(0, np.int64)
        waiting = (self.place0[cons] == k) & (facts.end[cons] > facts.time)
        self.wait_owner, self.wait_op = owner[waiting], cons[waiting]
        self.live_bytes, self.live_remote, self.live_producer = tbytes, remote, producer
        self.has_waiting = np.bincount(self.wait_owner, minlength=len(tensors)) > 0
        # per op: live bytes it is a waiting consumer of, and live bytes it produces
        self.cons_bytes = np.zeros(n)
        np.add.at(self.cons_bytes, self.wait_op, tbytes[self.wait_owner])
        self.prod_bytes = np.zeros(n)
        np.add.at(self.prod_bytes, producer, tbytes)
        self.ops_at_peak = np.asarray(facts.ops, np.int64)
        self.ops_bytes = np.asarray(facts.op_bytes, np.float64) / P
        # own output bytes of each op (non-alias), for allocations moved before the peak
        own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0).astype(np.float64)
        self.out_bytes = np.zeros(n)
        np.add.at(self.out_bytes, graph.tensor_producer, own)
        self.out_bytes /= P
        self.after_peak = facts.start > facts.time            # [n] started after the peak
        # ops on k that started by the peak: the run-order rank the peak falls at
        self.peak_rank = int(np.sum((self.place0 == k) & ~self.after_peak))
        self.dev_count = np.bincount(self.place0, minlength=d).astype(np.int64)
        self.rank0 = _device_ranks(self.place0[None, :], self.prio0[None, :])[0]

        # data edges: producer -> consumer with the tensor's transfer time
        edge_tensor = np.repeat(np.arange(graph.num_tensors), np.diff(cptr))
        self.edge_src = graph.tensor_producer[edge_tensor].astype(np.int64)
        self.edge_dst = graph.consumer.astype(np.int64)
        self.edge_time = devices.transfer_time(graph.tensor_size[edge_tensor]) / self.mean_load
        cross0 = self.place0[self.edge_src] != self.place0[self.edge_dst]
        self.cut0 = float(cross0.sum())
        self.cut_time0 = float(self.edge_time[cross0].sum())
        self.senders0 = np.zeros(n, bool)
        self.senders0[self.edge_src[cross0]] = True
        load0 = np.bincount(self.place0, weights=self.cost, minlength=d)
        self.max_load0, self.load_k0 = float(load0.max()), float(load0[k])
        # each device's live bytes while each op ran in the incumbent (its trace's curves):
        # where an op moved onto that device would add its bytes
        self.window = _window_memory(problem, self.place0, self.prio0, self.tr0) / P  # [d, n]
        self.room = room / P
        self.key = (id(climb.moves.facts), climb.current.tobytes())


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


def _context(climb) -> Context:
    cached = getattr(climb, "_advantage_context", None)
    key = (id(climb.moves.facts), climb.current.tobytes())
    if cached is None or cached.key != key:
        cached = Context(climb)
        climb._advantage_context = cached
    return cached


def move_features(climb, drawn: np.ndarray) -> np.ndarray:
    """[m, F] features (`FEATURES`) of each drawn neighbour's change from `climb`'s incumbent
    (`climb.current`, its placement and `PeakFacts` in `climb.moves`)."""
    c = _context(climb)
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


class MoveRanker:
    """A `rank_moves` for `Climb`: minus the linear advantage `weights[regime] . z + bias`,
    where `z` is the features standardised by `mean`, `scale` (lower score = better move).

    `weights` [len(REGIMES), F], `bias` [len(REGIMES)], `mean`, `scale` [F]; `.npz` files
    hold them with the feature and regime names (`save`, `load`; names must match).
    `elapsed` sums the seconds spent in calls (the ranker's own wall time)."""

    def __init__(self, weights, bias=None, mean=None, scale=None, meta: str = "") -> None:
        self.weights = np.asarray(weights, np.float64).reshape(len(REGIMES), F)
        self.bias = np.zeros(len(REGIMES)) if bias is None else np.asarray(bias, np.float64)
        self.mean = np.zeros(F) if mean is None else np.asarray(mean, np.float64)
        self.scale = np.ones(F) if scale is None else np.asarray(scale, np.float64)
        self.meta = str(meta)
        self.elapsed = 0.0
        self.calls = 0

    def advantage(self, features: np.ndarray, regime: int) -> np.ndarray:
        z = (np.asarray(features, np.float64) - self.mean) / self.scale
        return z @ self.weights[regime] + self.bias[regime]

    def __call__(self, climb, drawn: np.ndarray) -> np.ndarray:
        import time

        started = time.perf_counter()
        x = move_features(climb, drawn)
        scores = -self.advantage(x, _context(climb).regime)
        self.elapsed += time.perf_counter() - started
        self.calls += 1
        return scores

    def save(self, path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            np.savez(f, weights=self.weights, bias=self.bias, mean=self.mean, scale=self.scale,
                     features=np.array(FEATURES), regimes=np.array(REGIMES),
                     meta=np.array(self.meta))

    @classmethod
    def load(cls, path) -> "MoveRanker":
        with np.load(Path(path), allow_pickle=False) as z:
            if tuple(z["features"].tolist()) != FEATURES or tuple(z["regimes"].tolist()) != REGIMES:
                raise ValueError(f"{path}: weights for other features or regimes than "
                                 f"regal.search.advantage's")
            return cls(z["weights"], z["bias"], z["mean"], z["scale"], str(z["meta"]))
