"""The features a move ranker reads: cheap, scale-free numbers describing each drawn
neighbour's change from a climb's incumbent (`regal.search.advantage.MoveRanker` scores
them).

`move_features` describes each candidate's diff from the incumbent relative to what sets
the incumbent's peak (its `PeakFacts`): which bytes live at the peak on the critical device
leave it, which bytes land on which device and how much room that device has, what a
reorder does to a live tensor's producer or consumer, how the cut and the compute load
change (`FEATURES`). Features are scale free: bytes over the critical device's peak `P`,
counts over `n`, jumps over the device's op count, compute over the mean device load.
Colocation groups need no care: each neighbour's decoded devices (a group's is its leader's
row, a pin overrides it) are compared with the incumbent's, and the features read the diff.
`regime_of` names the incumbent's regime (`REGIMES`), whose weights a ranker uses.

Cost: the features are the incumbent's plus what the changed ops touch (their live tensors,
data edges, run-order ranks), compiled with numba (`_features`), from the writes the climb
drew (`regal.search.moves.Drawn`: no neighbour is made into a chromosome to be ranked); an op
that touches much (a hub) is walked once per incumbent, not once per row that moves it;
per incumbent a `Context` of arrays, most of them from one compiled pass (`_context_arrays`;
its memory curves come from the trace `peak_facts` made, its run orders from the order the
draws sorted). tests/advantage_reference.py keeps the dense numpy features and per-incumbent
arrays they equal. The compiled functions are in `regal.search.feature_kernels`; this module
builds what they read and calls them.
Deterministic; no neighbour is simulated.
"""

from __future__ import annotations

import numpy as np

from regal.decode import decode, split
from regal.graph import op_bytes
from regal.search.draw_kernel import changes
from regal.search.feature_kernels import (F, FEATURES, _context_arrays, _csr_kernel,
                                          _features, _lane_features, _window_at)

__all__ = ["F", "FEATURES", "REGIMES", "HUB_TOUCHES", "move_features", "regime_of", "Context",
           "incumbent_context"]

# regime 0: peak memory; 1: running time, every device within its limit; 2: running time with
# a device over its limit (the climb then aims its moves at that device's excess)
REGIMES = ("peak_memory", "makespan_fit", "makespan_over")
# a moved op touching at least this many live tensors and data edges is a row's hub
# (`_features`)
HUB_TOUCHES = 64


def regime_of(problem, facts) -> int:
    """The regime of the incumbent: which of `REGIMES` weights rank its neighbours."""
    if problem.objective == "peak_memory":
        return 0
    limits = problem.devices.limits
    return 2 if limits is not None and bool((facts.peaks > limits).any()) else 1


class _Static:
    """What the features read of the graph and the devices alone (once per climb)."""

    def __init__(self, climb) -> None:
        graph, devices = climb.problem.graph, climb.problem.devices
        n = graph.num_nodes
        self.graph, self.devices = graph, devices
        self.obytes = op_bytes(graph).astype(np.float64)
        self.cost = graph.compute_cost.astype(np.float64)
        self.mean_load = max(float(self.cost.sum()) / devices.count, 1e-9)
        # own output bytes of each op (non-alias), for allocations moved before the peak
        own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0).astype(np.float64)
        self.out_bytes = np.zeros(n)
        np.add.at(self.out_bytes, graph.tensor_producer, own)
        # data edges: producer -> consumer with the tensor's transfer time
        cptr = graph.consumer_ptr
        self.consumer_ptr = np.asarray(cptr, np.int64)
        self.consumer = np.asarray(graph.consumer, np.int64)
        edge_tensor = np.repeat(np.arange(graph.num_tensors), np.diff(cptr))
        self.edge_src = graph.tensor_producer[edge_tensor].astype(np.int64)
        self.edge_dst = graph.consumer.astype(np.int64)
        self.edge_size = graph.tensor_size[edge_tensor].astype(np.float64)
        self.edge_time = devices.transfer_time(self.edge_size) / self.mean_load
        self.latency, self.bandwidth = float(devices.latency), float(devices.bandwidth)
        self.in_ptr, self.in_edges = _csr_kernel(                  # edges into each op
            self.edge_dst, n, np.arange(len(self.edge_dst)))
        self.out_ptr = np.asarray(cptr, np.int64)[np.asarray(graph.output_ptr, np.int64)]
        pinned = getattr(graph, "pinned", None)
        self.pinned = np.full(n, -1, np.int64) if pinned is None else np.asarray(pinned, np.int64)
        self.grouped, self.colocation, self.member_ptr, self.members = climb.moves._static()[5:9]
        self.incumbents = 0
        self.hub_touches = HUB_TOUCHES
        self.mark = 0
        self.lanes = 0
        self.make_lanes(1)

    def make_lanes(self, lanes: int) -> None:
        """The compiled functions' marks and caches, reused from call to call: zeroing fresh
        ones each call cost more than the work on a large graph. The marks come one set per
        lane (lane 0 for a call on one thread, `lanes` for `_lane_features`); zeros are a
        valid state (every mark and stamp is >= 1), so making more lanes loses nothing."""
        if lanes <= self.lanes:
            return
        n, d = self.graph.num_nodes, self.devices.count
        if not self.lanes:
            # a hub's lone move (`_features`), once per incumbent: the incumbent's stamp
            # (live sums staying on k / moving onto it, its edges), the live sums, its edges
            # by device
            self.hub_mark = np.zeros((3, n), np.int64)
            self.hub_live = np.zeros((2, 2, n))
            self.hub_cut = np.zeros((n, d), np.int64)
            self.hub_size = np.zeros((n, d))
            # what `_window_at` gave for (op, device) under the incumbent's stamp: the windows
            # a climb draws around the peak move the same ops again and again (on a 10,000-op
            # graph 1.5 M moved ops were 0.2 M distinct pairs, and the lookups half of
            # `_features`)
            self.window_mark = np.zeros(n * d, np.int64)
            self.window_value = np.zeros(n * d)
        self.lanes = lanes
        # `changes`' marks (rows 0-4) and `_features`' `tag` and `new_dev` (rows 5, 6)
        self.scratch = np.zeros((lanes, 7, n), np.int64)
        self.scratch_f = np.zeros((lanes, 2, n))
        # per (op, target device): the call's mark and the row that moved that op alone there
        self.solo = np.zeros((lanes, 2, n * d), np.int64)


class Context:
    """Per-incumbent arrays the features of all its neighbours share (built once per
    incumbent and reused while it stays: a climb ranks several batches from one)."""

    def __init__(self, climb) -> None:
        problem, facts = climb.problem, climb.moves.facts
        graph, devices = problem.graph, problem.devices
        static = getattr(climb, "_advantage_static", None)
        if static is None or static.graph is not graph or static.devices is not devices:
            static = climb._advantage_static = _Static(climb)
        n, d = graph.num_nodes, devices.count
        self.n, self.d = n, d
        self.k = k = int(facts.device)
        self.place0 = np.asarray(climb.moves.placement, np.int64)
        # the incumbent's keys, and its ops by priority key (what its draws already sorted)
        _, self.prio0, self.tr0, order, _ = climb.moves._incumbent_arrays(
            np.asarray(climb.current, np.float64))
        peaks = facts.peaks.astype(np.float64)
        self.P = P = max(float(peaks[k]), 1.0)
        limits = devices.limits
        self.regime = regime_of(problem, facts)
        # the level a target device may rise to: its limit when the objective is the running
        # time under limits, else the peak. Under peak memory the limits are left out, so a
        # limit at or above the answer ranks the moves as no limit does (and the regime's
        # weights were fitted without limits)
        room = limits.astype(np.float64) if limits is not None \
            and problem.objective != "peak_memory" else np.full(d, P)
        self.over_room = (peaks - room) / P                   # [d]
        self.headroom = np.maximum(room - peaks, P / 50.0) / P
        self.obytes = static.obytes / P
        self.cost, self.mean_load = static.cost, static.mean_load

        # live tensors at the peak on k, their waiting consumers there (not finished by the
        # peak), the run orders, the cut and the loads: one compiled pass (`_context_arrays`)
        tensors = np.asarray(facts.tensors, np.int64)
        tbytes = np.asarray(facts.tensor_bytes, np.float64) / P
        producer = graph.tensor_producer[tensors].astype(np.int64)
        self.ops_at_peak = np.asarray(facts.ops, np.int64)
        self.ops_bytes = np.asarray(facts.op_bytes, np.float64) / P
        (self.wait_owner, self.wait_op, self.wait_ptr, self.has_waiting, self.cons_bytes,
         self.prod_bytes, self.after_peak, self.dev_count, self.peak_rank, load0,
         self.run_ptr, self.run_order, self.rank0, cross0, cut0, self.senders0, self.is_peak,
         self.peak_bytes, self.prod_ptr, self.prod_live, self.waitby_ptr, self.waitby_live) = \
            _context_arrays(n, d, k, self.place0, order, tensors, tbytes, producer,
                            static.consumer_ptr, static.consumer, facts.end, facts.start,
                            float(facts.time), self.cost, static.edge_src,
                            static.edge_dst, self.ops_at_peak, self.ops_bytes)
        self.live_bytes, self.live_producer = tbytes, producer
        self.live_size = np.asarray(facts.tensor_bytes, np.float64)   # whole bytes: sums exact
        static.incumbents += 1
        self.stamp = static.incumbents
        self.live_remote = np.asarray(facts.remote, bool)
        self.out_bytes = static.out_bytes / P
        self.peak_rank = int(self.peak_rank)

        # the cut and the loads
        self.edge_src, self.edge_dst, self.edge_time = \
            static.edge_src, static.edge_dst, static.edge_time
        self.cut0, self.cross0 = float(cut0), cross0
        self.max_load0, self.load_k0 = float(load0.max()), float(load0[k])
        # each device's live bytes while each op ran in the incumbent (its trace's curves):
        # where an op moved onto that device would add its bytes. Read by `_window_at` for
        # the ops a neighbour moves only: the whole [d, n] table cost more than every other
        # array here on graphs of thousands of ops
        traced = getattr(facts, "trace", None)
        if traced is None:
            from regal.sim import trace

            traced = trace(graph, devices, self.place0, self.prio0, self.tr0)
        self.curve_ptr, self.curve_times, self.curve_live = _curves(traced)
        self.op_start = np.asarray(traced.op_start, np.float64)
        self.op_end = np.asarray(traced.op_end, np.float64)
        self.room = room / P
        self.facts, self.current = facts, climb.current     # what this context is of

        # what the compiled features (`_features`) read: from an op to what its move touches
        self.load0 = load0
        self.in_ptr, self.in_edges, self.out_ptr, self.pinned = \
            static.in_ptr, static.in_edges, static.out_ptr, static.pinned
        self.grouped, self.colocation, self.member_ptr, self.members = \
            static.grouped, static.colocation, static.member_ptr, static.members
        self.static = static
        self.live_mark = np.zeros((static.lanes, len(tensors)), np.int64)   # per lane

    @property
    def cut_time0(self) -> float:
        """The incumbent's summed transfer time over its cross-device edges / mean load:
        the features take only its change, so it is for tests and study."""
        return float(self.edge_time[self.cross0].sum())

    @property
    def window(self) -> np.ndarray:
        """[d, n] the most bytes live on each device while each op ran in the incumbent, / P:
        every entry `_features` may read (`_window_at`), for tests and study."""
        out = np.zeros((self.d, self.n))
        for j in range(self.d):
            for v in range(self.n):
                out[j, v] = _window_at(self.curve_ptr, self.curve_times, self.curve_live,
                                       self.op_start, self.op_end, j, v) / self.P
        return out


def _curves(traced) -> tuple:
    """A trace's memory curves, device after device: (ptr [d + 1], times, live bytes)."""
    return (traced.memory_ptr, traced.memory_times.astype(np.float64, copy=False),
            traced.memory_live.astype(np.float64))


def incumbent_context(climb) -> Context:
    """The climb's context for its incumbent (`climb.current` with `climb.moves.facts`: a new
    incumbent is a new array and gets new facts, `Climb._refresh`), built once."""
    cached = getattr(climb, "_advantage_context", None)
    if cached is None or cached.facts is not climb.moves.facts \
            or cached.current is not climb.current:
        cached = Context(climb)
        climb._advantage_context = cached
    return cached


def move_features(climb, drawn) -> np.ndarray:
    """[m, F] features (`FEATURES`) of each drawn neighbour's change from `climb`'s incumbent
    (`climb.current`, its placement and `PeakFacts` in `climb.moves`). `drawn` is either
    chromosomes [m, G] (decoded and compared with the incumbent) or the writes the climb drew
    (`regal.search.moves.Drawn`, read directly: no neighbour is decoded whole). Either way
    the work is in the ops a neighbour changes, compiled (`_features`);
    tests/advantage_reference.py keeps the dense numpy computation it equals."""
    from regal.search.moves import Drawn

    c = incumbent_context(climb)
    s = c.static
    if isinstance(drawn, Drawn):
        lanes = _lanes_for(c, drawn)
        if lanes > 1:
            return _features_in_lanes(c, drawn, lanes)
        ptr, ops, dev, prio, transfer, s.mark = changes(
            c.n, drawn.row_ptr, drawn.kind, drawn.op, drawn.value, c.place0, c.prio0, c.tr0,
            c.senders0, c.pinned, c.grouped, c.colocation, c.member_ptr, c.members,
            s.scratch[0, :5], s.scratch_f[0], s.mark)
    else:
        ptr, ops, dev, prio, transfer = _dense_changes(climb, c, drawn)
    base, s.mark = s.mark, s.mark + len(ptr)
    return _features(base, s.scratch[0, 5], s.scratch[0, 6], s.solo[0, 0], s.solo[0, 1],
                     c.live_mark[0], c.stamp, s.hub_touches, s.hub_mark, s.hub_live,
                     s.hub_cut, s.hub_size, ptr, ops, dev, prio, transfer, *_shared(c),
                     s.window_mark, s.window_value)


# graphs of at least this many ops have each call's rows split over numba's threads
# (`_lane_features`): on smaller ones the threads' start costs more than they save
LANE_OPS = 2_000
MAX_LANES = 4


def _lanes_for(c: Context, drawn) -> int:
    """How many lanes (threads) to split a call's rows over: 1 on a small graph."""
    if c.n < LANE_OPS or len(drawn) < 2:
        return 1
    import numba

    return max(1, min(numba.get_num_threads(), MAX_LANES, len(drawn)))


def _shared(c: Context) -> tuple:
    """The per-incumbent arguments of `_features` that every lane reads alike."""
    s = c.static
    return (c.n, c.d, c.k, c.place0, c.prio0, c.obytes, c.over_room, c.headroom, c.room,
            c.curve_ptr, c.curve_times, c.curve_live, c.op_start, c.op_end, c.P, c.cost,
            c.mean_load, c.load0, c.max_load0, c.load_k0, c.is_peak, c.peak_bytes,
            c.live_size, c.live_remote, c.live_producer, c.has_waiting, c.wait_ptr,
            c.wait_op, c.prod_ptr, c.prod_live, c.waitby_ptr, c.waitby_live, c.out_ptr,
            c.in_ptr, c.in_edges, c.edge_src, c.edge_dst, s.edge_size, s.latency,
            s.bandwidth, c.run_ptr, c.run_order, c.rank0, c.dev_count, c.cons_bytes,
            c.prod_bytes, c.out_bytes, c.after_peak, c.peak_rank)


def _features_in_lanes(c: Context, drawn, lanes: int) -> np.ndarray:
    """`move_features` of the writes `drawn` with its rows split into `lanes` runs of
    about equal writes, on numba's threads (`_lane_features`): every row's features are
    computed as on one thread (a row reads only the incumbent and its own writes; the
    caches only save work), so the result is the same to the bit."""
    s = c.static
    s.make_lanes(lanes)
    if c.live_mark.shape[0] < lanes:
        c.live_mark = np.zeros((lanes, c.live_mark.shape[1]), np.int64)
    row_ptr = np.asarray(drawn.row_ptr, np.int64)
    m = len(row_ptr) - 1
    cuts = [0]                       # each lane's first row: the writes split about evenly
    for i in range(1, lanes):
        cut = int(np.searchsorted(row_ptr, int(row_ptr[-1]) * i // lanes))
        if cuts[-1] < cut < m:
            cuts.append(cut)
    bounds = np.array(cuts + [m], np.int64)
    base = s.mark
    s.mark += 2 * m
    return _lane_features(bounds, base, row_ptr, drawn.kind, drawn.op, drawn.value, c.tr0,
                          c.senders0, c.pinned, c.grouped, c.colocation, c.member_ptr,
                          c.members, s.scratch, s.scratch_f, s.solo, c.live_mark, c.stamp,
                          s.hub_touches, s.hub_mark, s.hub_live, s.hub_cut, s.hub_size,
                          s.window_mark, s.window_value, *_shared(c))


def _dense_changes(climb, c: Context, drawn) -> tuple:
    """What `changes` gives for writes, from chromosomes: the ops whose decoded device or
    priority key differs from the incumbent's (row by row, ascending ids), their device and
    key, and whether a sending op's transfer key changed."""
    graph, devices = climb.problem.graph, climb.problem.devices
    drawn = np.atleast_2d(np.asarray(drawn, np.float64))
    m = len(drawn)
    place = decode(drawn, graph, devices)[0].astype(np.int64)     # [m, n]
    _, prio, tr = split(drawn, c.n, c.d)
    rows, ops = np.nonzero((place != c.place0) | (prio != c.prio0))
    ptr = np.zeros(m + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=m), out=ptr[1:])
    transfer = ((tr != c.tr0) & c.senders0).any(axis=1) if m else np.zeros(0, np.bool_)
    return (ptr, ops.astype(np.int64), place[rows, ops], np.ascontiguousarray(prio[rows, ops]),
            np.asarray(transfer, np.bool_))
