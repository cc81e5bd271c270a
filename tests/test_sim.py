"""regal.sim: hand-computed schedules, trace/simulate/evaluate consistency, bad input.

Hand-computed cases use bandwidth 10 bytes/µs and small latencies so every time is exact;
the expected numbers are derived step by step in the comments (SIM_RULES 1-11).
"""

import numba
import numpy as np
import pytest

from regal.graph_builder import GraphBuilder
from regal.decode import num_genes
from regal.sim import DeviceSpec, evaluate, infeasible_offset, simulate, trace
from sim_reference import reference_simulate, relative_close


def _graph(ops, edges, outputs, aliases=(), control=()):
    """ops: [(name, cost, temp, pers)]; outputs: [(op, size)] in tensor order per op;
    edges: [(consumer, producer, port)]; aliases: {(op, port): input_port}."""
    b = GraphBuilder()
    ids = {}
    for name, cost, temp, pers in ops:
        ids[name] = b.add_op(name, cost, temporary_memory=temp, persistent_memory=pers)
    aliases, ports = dict(aliases), {}
    for op, size in outputs:
        port = ports[op] = ports.get(op, -1) + 1
        b.add_output(ids[op], size, aliases.get((op, port), -1))
    for consumer, producer, port in edges:
        b.add_input(ids[consumer], ids[producer], port)
    for src, dst in control:
        b.add_control(ids[src], ids[dst])
    return b.build()


def _run(graph, devices, placement, priority=None, tprio=None):
    n = graph.num_nodes
    priority = np.zeros(n) if priority is None else priority
    tprio = np.zeros(n) if tprio is None else tprio
    return simulate(graph, devices, placement, priority, tprio), trace(
        graph, devices, placement, priority, tprio)


# ---------------------------------------------------------------------------
# hand-computed cases


def test_chain_on_one_device():
    # a(cost 2, out 100) -> b(cost 3, temp 20, out 50) -> c(cost 1, out 10, never read)
    # t=0 a starts: 100.  t=2 a ends; b starts: +20 +50 = 170 (peak).
    # t=5 b ends: -20 (temp), t0 freed (-100) = 50; c starts: +10 = 60.
    # t=6 c ends: t1 freed (-50) = 10; t2 has no consumer and stays.
    g = _graph([("a", 2, 0, 0), ("b", 3, 20, 0), ("c", 1, 0, 0)],
               [("b", "a", 0), ("c", "b", 0)], [("a", 100), ("b", 50), ("c", 10)])
    res, tr = _run(g, DeviceSpec(1), [0, 0, 0])
    assert res.peak.tolist() == [170]
    assert res.makespan == 6.0 and res.feasible
    assert tr.op_start.tolist() == [0, 2, 5] and tr.op_end.tolist() == [2, 5, 6]
    times, live = tr.memory[0]
    assert live.max() == 170 and live[-1] == 10
    assert len(tr.transfer_tensor) == 0


def test_diamond_split_over_two_devices_with_one_shared_transfer():
    # a on dev0 (cost 1, out t0 100); b (cost 2, out t1 40), c (cost 3, out t2 60) and
    # d (cost 1, reads t1 t2, out t3 10) on dev1; b has the higher priority.
    # t=0 a: live0 100.  t=1 a ends: one transfer of t0 to dev1 (shared by b and c),
    #   1 + 100/10 = 11 µs -> ends 12; live1 100.
    # t=12 transfer ends: t0's home copy freed (live0 0); b starts: live1 140.
    # t=14 b ends; c starts: 200 (peak).  t=17 c ends: t0 on dev1 freed -> 100; d: 110.
    # t=18 d ends: t1, t2 freed -> 10.
    g = _graph([("a", 1, 0, 0), ("b", 2, 0, 0), ("c", 3, 0, 0), ("d", 1, 0, 0)],
               [("b", "a", 0), ("c", "a", 0), ("d", "b", 0), ("d", "c", 0)],
               [("a", 100), ("b", 40), ("c", 60), ("d", 10)])
    dv = DeviceSpec(2, bandwidth=10, latency=1)
    res, tr = _run(g, dv, [0, 1, 1, 1], priority=[0, 2, 1, 0])
    assert res.peak.tolist() == [100, 200]
    assert res.makespan == 18.0
    assert tr.transfer_tensor.tolist() == [0]
    assert (tr.transfer_src.tolist(), tr.transfer_dst.tolist()) == ([0], [1])
    assert (tr.transfer_start.tolist(), tr.transfer_end.tolist()) == ([1.0], [12.0])
    assert tr.op_start.tolist() == [0, 12, 14, 17]
    assert tr.memory[0][1][-1] == 0 and tr.memory[1][1][-1] == 10


def test_tensor_consumed_on_two_remote_devices():
    # a on dev0 (cost 2, out 50); b on dev1 (cost 1, out 5), c on dev2 (cost 4, out 8).
    # t=2: two transfers on channels (0,1) and (0,2), each 0.5 + 50/10 = 5.5 -> end 7.5;
    #   50 bytes on dev1 and on dev2.  t=7.5: home copy freed; b: 55, c: 58.
    # t=8.5 b ends: dev1 copy freed -> 5.  t=11.5 c ends -> 8.
    g = _graph([("a", 2, 0, 0), ("b", 1, 0, 0), ("c", 4, 0, 0)],
               [("b", "a", 0), ("c", "a", 0)], [("a", 50), ("b", 5), ("c", 8)])
    dv = DeviceSpec(3, bandwidth=10, latency=0.5)
    res, tr = _run(g, dv, [0, 1, 2])
    assert res.peak.tolist() == [50, 55, 58]
    assert res.makespan == 11.5
    assert sorted(tr.transfer_dst.tolist()) == [1, 2]
    assert tr.transfer_start.tolist() == [2.0, 2.0] and tr.transfer_end.tolist() == [7.5, 7.5]
    assert [m[1][-1] for m in tr.memory] == [0, 5, 8]


def test_channel_serves_higher_transfer_priority_first():
    # dev0 runs z [0,1], p [1,2], q [2,3] (priorities 3, 2, 1). z's 100-byte transfer holds
    # channel (0,1) for 1 + 10 = 11 µs: [1, 12]. At 12 the transfers of p (20 B, 3 µs) and
    # q (10 B, 2 µs) are both ready; q's transfer priority is higher, so q [12,14], p [14,17],
    # although p's tensor has the lower id. Consumers on dev1 (cost 1): zc [12,13],
    # qc [14,15], pc [17,18].
    g = _graph([("z", 1, 0, 0), ("p", 1, 0, 0), ("q", 1, 0, 0),
                ("zc", 1, 0, 0), ("pc", 1, 0, 0), ("qc", 1, 0, 0)],
               [("zc", "z", 0), ("pc", "p", 0), ("qc", "q", 0)],
               [("z", 100), ("p", 20), ("q", 10)])
    dv = DeviceSpec(2, bandwidth=10, latency=1)
    res, tr = _run(g, dv, [0, 0, 0, 1, 1, 1], priority=[3, 2, 1, 0, 0, 0],
                   tprio=[0, 0, 5, 0, 0, 0])
    order = dict(zip(tr.transfer_tensor.tolist(), zip(tr.transfer_start, tr.transfer_end)))
    assert order == {0: (1.0, 12.0), 1: (14.0, 17.0), 2: (12.0, 14.0)}
    assert tr.op_start[3:].tolist() == [12.0, 17.0, 14.0]
    assert res.makespan == 18.0
    # same transfer priority: lower tensor id (p's) first -> p [12,15], q [15,17]
    _, tr2 = _run(g, dv, [0, 0, 0, 1, 1, 1], priority=[3, 2, 1, 0, 0, 0])
    assert tr2.transfer_start.tolist() == [1.0, 12.0, 15.0]


def test_alias_chain_holds_the_aliased_tensor():
    # a (out t0 100) -> b (t1 = alias of t0) -> c (t2 = alias of t1) -> e (out t3 10), all
    # cost 1 on one device. Aliases cost 0 bytes, but t0 lives until t2 (hence t1) is freed:
    # t=0 a: 100. t=1 b: +0. t=2 b ends (t0 held by t1); c: +0. t=3 e: +10 = 110 (peak).
    # t=4 e ends: t2 freed -> t1 freed -> t0 freed: 10.  Without the hold the peak is 100.
    ops = [("a", 1, 0, 0), ("b", 1, 0, 0), ("c", 1, 0, 0), ("e", 1, 0, 0)]
    edges = [("b", "a", 0), ("c", "b", 0), ("e", "c", 0)]
    outs = [("a", 100), ("b", 100), ("c", 100), ("e", 10)]
    g = _graph(ops, edges, outs, aliases={("b", 0): 0, ("c", 0): 0})
    res, tr = _run(g, DeviceSpec(1), [0, 0, 0, 0])
    assert res.peak.tolist() == [110]
    times, live = tr.memory[0]
    assert live[-1] == 10 and times[-1] == 4.0
    # e on dev1 (bandwidth 100, latency 0): t2 moves with its own size (100 B, 1 µs, [3,4]);
    # at 4 the home copy of t2 is freed and the chain frees t1, t0 on dev0; e: 100 + 10.
    res2, tr2 = _run(g, DeviceSpec(2, bandwidth=100, latency=0), [0, 0, 0, 1])
    assert res2.peak.tolist() == [100, 110]
    assert res2.makespan == 5.0
    assert tr2.memory[0][1][-1] == 0 and tr2.memory[1][1][-1] == 10


def test_alias_without_consumers_keeps_its_source_forever():
    # a (out 100) -> b (cost 1, out t1 = alias of t0, never read): t0 is never freed.
    g = _graph([("a", 1, 0, 0), ("b", 1, 0, 0)], [("b", "a", 0)], [("a", 100), ("b", 100)],
               aliases={("b", 0): 0})
    _, tr = _run(g, DeviceSpec(1), [0, 0])
    assert tr.memory[0][1].tolist()[-1] == 100


def test_temporary_and_persistent_memory():
    # a on dev0: cost 2, temp 30, persistent 1000, out 5 (never read); b on dev1: cost 1,
    # temp 7, persistent 200, no outputs. t=0: 1000 / 200 from the start, then a: 1035,
    # b: 207.  t=1 b ends: 200.  t=2 a ends: 1005.
    b = GraphBuilder()
    a = b.add_op("a", 2, temporary_memory=30, persistent_memory=1000)
    b.add_output(a, 5)
    b.add_op("b", 1, temporary_memory=7, persistent_memory=200)
    g = b.build()
    res, tr = _run(g, DeviceSpec(2), [0, 1])
    assert res.peak.tolist() == [1035, 207]
    assert tr.memory[0][0][0] == 0.0 and tr.memory[0][1][0] == 1000
    assert [m[1][-1] for m in tr.memory] == [1005, 200]
    assert res.makespan == 2.0


def test_zero_cost_ops_run_and_count_at_one_instant():
    # a (cost 0, temp 50, out 20) -> b (cost 0, out 30) -> c (cost 2, out 1).
    # t=0: a starts: 70 (peak); a ends at 0: -50 temp; b starts: 50; b ends: t0 freed: 30;
    # c starts: 31. t=2: c ends, t1 freed: 1.
    g = _graph([("a", 0, 50, 0), ("b", 0, 0, 0), ("c", 2, 0, 0)],
               [("b", "a", 0), ("c", "b", 0)], [("a", 20), ("b", 30), ("c", 1)])
    res, tr = _run(g, DeviceSpec(1), [0, 0, 0])
    assert res.peak.tolist() == [70]
    assert res.makespan == 2.0
    assert tr.op_start.tolist() == [0, 0, 0] and tr.op_end.tolist() == [0, 0, 2]
    # everything free of cost: makespan 0.0
    g0 = _graph([("x", 0, 9, 0)], [], [("x", 4)])
    res0 = simulate(g0, DeviceSpec(1), [0], [0], [0])
    assert res0.makespan == 0.0 and res0.peak.tolist() == [13]


def test_control_edge_orders_ops_across_devices_without_bytes():
    # x on dev0 (cost 5); y on dev1 (cost 1) must wait for x through a control edge.
    g = _graph([("x", 5, 0, 0), ("y", 1, 0, 0)], [], [("x", 8), ("y", 8)],
               control=[("x", "y")])
    res, tr = _run(g, DeviceSpec(2), [0, 1])
    assert tr.op_start.tolist() == [0.0, 5.0] and res.makespan == 6.0
    assert res.peak.tolist() == [8, 8] and len(tr.transfer_tensor) == 0


def test_memory_limit_and_makespan_objective():
    # chain of test_chain_on_one_device: peak 170, makespan 6, sum(cost) = 6, d = 1.
    g = _graph([("a", 2, 0, 0), ("b", 3, 20, 0), ("c", 1, 0, 0)],
               [("b", "a", 0), ("c", "b", 0)], [("a", 100), ("b", 50), ("c", 10)])
    ok = simulate(g, DeviceSpec(1, memory_limit=170), [0, 0, 0], [0, 0, 0], [0, 0, 0])
    assert ok.feasible and ok.objective("makespan") == 6.0
    assert ok.objective("peak_memory") == 170.0
    bad = simulate(g, DeviceSpec(1, memory_limit=150), [0, 0, 0], [0, 0, 0], [0, 0, 0])
    # 6 * (1 + 20/150) + 6 = 12.8
    assert not bad.feasible
    assert bad.objective("makespan") == pytest.approx(12.8, rel=1e-12)
    # diamond: peaks [100, 200], makespan 18, limits [150, 150] -> overflow 50 of 300;
    # offset = 7 + 1 * ((1+10) + (1+4) + (1+6) + (1+1)) = 32; 18 * 7/6 + 32 = 53.
    g2 = _graph([("a", 1, 0, 0), ("b", 2, 0, 0), ("c", 3, 0, 0), ("d", 1, 0, 0)],
                [("b", "a", 0), ("c", "a", 0), ("d", "b", 0), ("d", "c", 0)],
                [("a", 100), ("b", 40), ("c", 60), ("d", 10)])
    dv = DeviceSpec(2, memory_limit=[150, 150], bandwidth=10, latency=1)
    assert infeasible_offset(g2, dv) == 32.0
    res = simulate(g2, dv, [0, 1, 1, 1], [0, 2, 1, 0], [0, 0, 0, 0])
    assert res.peak.tolist() == [100, 200] and not res.feasible
    assert res.objective("makespan") == pytest.approx(53.0, rel=1e-12)
    with pytest.raises(ValueError, match="objective"):
        res.objective("latency")


def test_makespan_objective_with_every_limit_zero_is_infinite_not_nan():
    # free ops (cost 0: makespan 0) that hold memory, under limits of 0 bytes: every
    # placement overflows, and 0 * (1 + overflow / 0) must not become NaN
    g = _graph([("a", 0, 0, 0), ("b", 0, 0, 0)], [("b", "a", 0)], [("a", 8), ("b", 4)])
    devices = DeviceSpec(2, memory_limit=[0, 0])
    res = simulate(g, devices, [0, 0], [0, 0], [0, 0])
    assert res.makespan == 0.0 and not res.feasible
    assert res.objective("makespan") == float("inf")
    keys = np.random.default_rng(0).random((5, num_genes(2, 2)))
    values = evaluate(g, devices, keys, "makespan")
    assert not np.isnan(values).any() and np.isinf(values).all()


# ---------------------------------------------------------------------------
# random graphs: trace, simulate and evaluate agree; schedule properties hold


def _random_graph(rng, n):
    """Random DAG over a shuffled id order, with aliases, control edges and repeated reads."""
    b = GraphBuilder()
    _add_random_ops(b, rng, n)
    return b.build()


def _add_random_ops(b, rng, n, prefix="op"):
    """`_random_graph`'s n ops, added to builder `b` after the ops it has (ids shifted by
    that many; no edge to them): one more component of a larger graph."""
    base = len(b)
    order = rng.permutation(n)  # order[i] = id of the i-th op in topological order
    for v in range(n):
        cost = 0.0 if rng.random() < 0.15 else float(rng.integers(1, 6))
        b.add_op(f"{prefix}{v}", cost, temporary_memory=int(rng.integers(0, 3)) * 16,
                 persistent_memory=int(rng.integers(0, 2)) * 64)
    nout = {}
    for i, v in enumerate(order):
        earlier = order[:i]
        reads = rng.integers(0, 4) if i else 0
        for _ in range(reads):
            p = int(rng.choice(earlier))
            b.add_input(base + int(v), base + p, int(rng.integers(0, nout[p])))
        if reads and rng.random() < 0.5:  # read one tensor twice
            b.add_input(base + int(v), base + p, 0)
        nout[int(v)] = int(rng.integers(1, 3))
        for port in range(nout[int(v)]):
            alias = 0 if (reads and port == 0 and rng.random() < 0.25) else -1
            b.add_output(base + int(v), int(rng.integers(0, 5)) * 8, alias)
        if i > 1 and rng.random() < 0.2:
            b.add_control(base + int(rng.choice(earlier)), base + int(v))


def _random_case(seed):
    rng = np.random.default_rng(seed)
    g = _random_graph(rng, int(rng.integers(1, 25)))
    d = int(rng.integers(1, 5))
    limit = None if rng.random() < 0.5 else int(rng.integers(50, 400))
    dv = DeviceSpec(d, memory_limit=limit, bandwidth=float(rng.choice([4.0, 8.0, 3.3])),
                    latency=float(rng.choice([0.0, 1.0, 0.25])))
    return rng, g, dv


@pytest.mark.parametrize("seed", range(60))
def test_trace_agrees_with_simulate_and_obeys_the_rules(seed):
    rng, g, dv = _random_case(seed)
    n, d = g.num_nodes, dv.count
    placement = rng.integers(0, d, n)
    prio = rng.integers(0, 3, n).astype(float)  # ties on purpose
    tprio = rng.random(n)
    res = simulate(g, dv, placement, prio, tprio)
    tr = trace(g, dv, placement, prio, tprio)
    assert tr.result.peak.tolist() == res.peak.tolist()
    assert tr.result.makespan == res.makespan and tr.result.feasible == res.feasible
    assert [int(m[1].max()) for m in tr.memory] == res.peak.tolist()
    assert all(np.all(np.diff(m[0]) >= 0) for m in tr.memory)
    ends = np.concatenate([tr.op_end, tr.transfer_end])
    assert res.makespan == ends.max()
    assert np.array_equal(tr.op_end, tr.op_start + g.compute_cost)
    sizes = g.tensor_size[tr.transfer_tensor]
    assert np.array_equal(tr.transfer_end, tr.transfer_start + (dv.latency + sizes / dv.bandwidth))
    # one op at a time per device, one transfer at a time per channel
    for k in range(d):
        on = np.flatnonzero(placement == k)
        s, e = tr.op_start[on], tr.op_end[on]
        idx = np.lexsort((e, s))
        assert np.all(s[idx][1:] >= e[idx][:-1])
    for src in range(d):
        for dst in range(d):
            on = np.flatnonzero((tr.transfer_src == src) & (tr.transfer_dst == dst))
            s, e = tr.transfer_start[on], tr.transfer_end[on]
            idx = np.argsort(s, kind="stable")
            assert np.all(s[idx][1:] >= e[idx][:-1])
    # exactly one transfer per (tensor, remote device with a consumer)
    need = set()
    for t in range(g.num_tensors):
        home = placement[g.tensor_producer[t]]
        need |= {(t, int(placement[c])) for c in g.consumers(t) if placement[c] != home}
    assert set(zip(tr.transfer_tensor.tolist(), tr.transfer_dst.tolist())) == need
    # inputs present and control predecessors finished before an op starts
    arrival = {(t, int(k)): e for t, k, e in zip(tr.transfer_tensor, tr.transfer_dst,
                                                  tr.transfer_end)}
    for v in range(n):
        for t in g.inputs(v):
            p = g.tensor_producer[t]
            ready = tr.op_end[p] if placement[p] == placement[v] else arrival[(t, placement[v])]
            assert tr.op_start[v] >= ready
        for p in g.control_inputs(v):
            assert tr.op_start[v] >= tr.op_end[p]


def _decode(row, n, d):
    return (np.argmax(row[:n * d].reshape(n, d), axis=1), row[n * d:n * d + n],
            row[n * d + n:])


@pytest.mark.parametrize("seed", range(12))
def test_evaluate_equals_simulate_of_decoded_keys(seed):
    rng, g, dv = _random_case(1000 + seed)
    n, d = g.num_nodes, dv.count
    keys = rng.random((17, n * (d + 2)))
    keys[::3] = np.round(keys[::3] * 2) / 2  # ties in affinity and priority
    for name in ("peak_memory", "makespan"):
        got, peaks, makespans = evaluate(g, dv, keys, name, return_details=True)
        for i, row in enumerate(keys):
            res = simulate(g, dv, *_decode(row, n, d))
            assert peaks[i].tolist() == res.peak.tolist()
            assert makespans[i] == res.makespan
            assert got[i] == res.objective(name)


def test_evaluate_threads_agree_and_restore_thread_count():
    rng, g, dv = _random_case(7)
    keys = rng.random((41, g.num_nodes * (dv.count + 2)))
    before = numba.get_num_threads()
    one = evaluate(g, dv, keys, threads=1)
    assert numba.get_num_threads() == before
    many = evaluate(g, dv, keys, threads=numba.config.NUMBA_NUM_THREADS)
    assert np.array_equal(one, many)
    assert evaluate(g, dv, keys[:0]).shape == (0,)


def test_large_graph_agrees_with_the_reference_component_by_component():
    """3,000 ops on 16 devices against the independent reference (tests/sim_reference.py),
    which takes minutes on 3,000 ops at once: the graph is eight random 375-op components, each
    placed on a pair of devices of its own (0-1, 2-3, ...), so that they share no device and
    no channel and each runs exactly as it would alone (ties break by op and tensor id, whose
    order within a component is kept). The reference simulates each component alone on 2
    devices: its peaks are the big run's peaks of that pair, and the big run's makespan is
    the longest component's."""
    parts, size = 8, 375
    b = GraphBuilder()
    for part in range(parts):
        _add_random_ops(b, np.random.default_rng([0, part]), size, prefix=f"c{part}_op")
    g = b.build()
    dv = DeviceSpec(2 * parts)
    rng = np.random.default_rng(1)
    n = parts * size
    placement = np.repeat(2 * np.arange(parts), size) + rng.integers(0, 2, n)
    priority, tprio = rng.random(n), rng.random(n)
    res = simulate(g, dv, placement, priority, tprio)
    assert res.peak.shape == (2 * parts,) and res.feasible
    makespans = []
    for part in range(parts):
        alone = _random_graph(np.random.default_rng([0, part]), size)
        ops = slice(part * size, (part + 1) * size)
        local = placement[ops] - 2 * part
        # both devices of the pair and the channels between them are used
        assert any((local[alone.consumers(t)] != local[alone.tensor_producer[t]]).any()
                   for t in range(alone.num_tensors))
        ref = reference_simulate(alone, 2, None, dv.bandwidth, dv.latency, local,
                                 priority[ops], tprio[ops])
        assert res.peak[2 * part:2 * part + 2].tolist() == ref["peak"], part
        makespans.append(ref["makespan"])
    assert relative_close(float(res.makespan), max(makespans))


# ---------------------------------------------------------------------------
# bad input


def _tiny():
    return _graph([("a", 1, 0, 0), ("b", 1, 0, 0)], [("b", "a", 0)], [("a", 8), ("b", 8)])


@pytest.mark.parametrize("kwargs, name", [
    (dict(count=0), "count"), (dict(count=2.5), "count"), (dict(count=True), "count"),
    (dict(count=2, bandwidth=-1), "bandwidth"), (dict(count=2, bandwidth=float("nan")),
                                                 "bandwidth"),
    (dict(count=2, bandwidth=0), "bandwidth"), (dict(count=2, latency=-0.5), "latency"),
    (dict(count=2, latency=float("nan")), "latency"), (dict(count=2, latency="x"), "latency"),
    (dict(count=2, memory_limit=[1, 2, 3]), "memory_limit"),
    (dict(count=2, memory_limit=-5), "memory_limit"),
    (dict(count=2, memory_limit=[1, 2.5]), "memory_limit"),
])
def test_device_spec_rejects_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DeviceSpec(**kwargs)


def test_device_spec_normalises_limits():
    assert DeviceSpec(3, memory_limit=100).memory_limit == (100, 100, 100)
    assert DeviceSpec(2, memory_limit=[1, 2]).limits.tolist() == [1, 2]
    assert DeviceSpec(2).limits is None
    assert DeviceSpec(2) == DeviceSpec(2) and hash(DeviceSpec(2, memory_limit=[1, 2]))
    assert DeviceSpec(1, memory_limit=2**62).memory_limit == (2**62,)
    for bad in (2**62 + 1, 2**70, -1, 1.5):   # beyond int64's exact sums, or no byte count
        with pytest.raises(ValueError, match="memory_limit: device 0"):
            DeviceSpec(1, memory_limit=bad)


def test_makespan_objective_ranks_misfits_under_huge_limits():
    """Limits whose sum overflows int64 still rank a misfit by its overflow (not inf)."""
    g = _tiny()
    dv = DeviceSpec(3, memory_limit=[2**62, 2**62, 1])
    result = simulate(g, dv, [2] * g.num_nodes, [0] * g.num_nodes, [0] * g.num_nodes)
    assert not result.feasible
    assert np.isfinite(result.objective("makespan"))


@pytest.mark.parametrize("args, name", [
    (([0, 2], [0, 0], [0, 0]), "placement"), (([0, -1], [0, 0], [0, 0]), "placement"),
    (([0], [0, 0], [0, 0]), "placement"), (([0, 0.5], [0, 0], [0, 0]), "placement"),
    (([0, 1], [0, float("nan")], [0, 0]), "priority"), (([0, 1], [0], [0, 0]), "priority"),
    (([0, 1], [0, 0], [float("nan"), 0]), "transfer_priority"),
    (([0, 1], [0, 0], [0, 0, 0]), "transfer_priority"),
])
def test_simulate_and_trace_reject_bad_input(args, name):
    for fn in (simulate, trace):
        with pytest.raises(ValueError, match=name):
            fn(_tiny(), DeviceSpec(2), *args)


def test_evaluate_rejects_bad_input():
    g, dv = _tiny(), DeviceSpec(2)
    with pytest.raises(ValueError, match="keys"):
        evaluate(g, dv, np.zeros((3, 7)))
    with pytest.raises(ValueError, match="keys"):
        evaluate(g, dv, np.zeros(8))
    nan = np.zeros((2, 8))
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match="keys: individual 1, gene 3 is NaN"):
        evaluate(g, dv, nan)
    nan[1, 3] = np.inf    # infinities are keys like any other (they only get compared)
    assert np.isfinite(evaluate(g, dv, nan)).all()
    with pytest.raises(ValueError, match="objective"):
        evaluate(g, dv, np.zeros((2, 8)), objective="speed")
    with pytest.raises(ValueError, match="threads"):
        evaluate(g, dv, np.zeros((2, 8)), threads=0)
    with pytest.raises(ValueError, match="devices"):
        evaluate(g, 2, np.zeros((2, 8)))
