"""Hand-computed cases for the pure-Python reference simulator (tests/sim_reference.py).

Every expected number is derived by hand in the comments (timeline: `t=..` lines, live bytes per
device after each instant). The same cases then anchor the compiled kernel through the agreement
test, so the reference must be right on its own first.
"""

import math

import numpy as np
import pytest

from regal.graph_builder import GraphBuilder
from sim_reference import (infeasible_offset, reference_decode, reference_objective,
                           reference_simulate)


def simulate(graph, count, placement, priority=None, transfer_priority=None, bandwidth=1.0,
             latency=0.0, memory_limit=None):
    n = graph.num_nodes
    priority = np.zeros(n) if priority is None else np.asarray(priority, float)
    transfer_priority = np.zeros(n) if transfer_priority is None else np.asarray(transfer_priority, float)
    return reference_simulate(graph, count, memory_limit, bandwidth, latency, placement, priority,
                              transfer_priority)


def chain_graph():
    # a -> b -> c, costs 2, 3, 4; outputs 10, 20, 30 bytes; b holds 5 temporary bytes
    b = GraphBuilder()
    a_ = b.add_op("a", 2.0)
    b_ = b.add_op("b", 3.0, temporary_memory=5)
    c_ = b.add_op("c", 4.0)
    b.add_output(a_, 10)
    b.add_output(b_, 20)
    b.add_output(c_, 30)
    b.add_input(b_, a_)
    b.add_input(c_, b_)
    return b.build()


def test_chain_on_one_device():
    # t=0 a starts: +10 -> 10
    # t=2 a ends; b starts: +5 temp +20 -> 35
    # t=5 b ends: -5 temp, a's output (consumer b done) -10 -> 20; c starts: +30 -> 50
    # t=9 c ends: b's output -20 -> 30 (c's output has no consumer: stays live)
    r = simulate(chain_graph(), 1, [0, 0, 0])
    assert r == dict(peak=[50], makespan=9.0, feasible=True)


def diamond_graph():
    # a -> {b, c} -> d; a out 8 bytes, b out 4, c out 6 (+10 temporary); costs 1, 2, 3, 1
    b = GraphBuilder()
    a_ = b.add_op("a", 1.0)
    b_ = b.add_op("b", 2.0)
    c_ = b.add_op("c", 3.0, temporary_memory=10)
    d_ = b.add_op("d", 1.0)
    b.add_output(a_, 8)
    b.add_output(b_, 4)
    b.add_output(c_, 6)
    for v in (b_, c_):
        b.add_input(v, a_)
        b.add_input(d_, v)
    return b.build()


def test_diamond_split_over_two_devices_one_shared_transfer():
    # a on dev0; b, c, d on dev1: one transfer of a's output, shared by b and c.
    # bandwidth 2, latency 1: transfer takes 1 + 8/2 = 5.  Priority c > b.
    # t=0  a starts on dev0: dev0 8
    # t=1  a ends; transfer 1..6 starts: dev1 +8 -> 8
    # t=6  transfer ends: dev0 copy freed -> 0; c starts: +10 +6 -> dev1 24
    # t=9  c ends: -10 -> 14; b starts: +4 -> 18
    # t=11 b ends: a's copy on dev1 (b, c done) -8 -> 10; d starts, 11..12
    # t=12 d ends: b, c outputs freed -> 0
    g = diamond_graph()
    r = simulate(g, 2, [0, 1, 1, 1], priority=[0, 0, 1, 0], bandwidth=2.0, latency=1.0)
    assert r == dict(peak=[8, 24], makespan=12.0, feasible=True)
    # equal priorities: b (lower id) first.  t=6 b: 8+4=12; t=8 c: 12+10+6=28; t=11 d; ends 12
    r = simulate(g, 2, [0, 1, 1, 1], bandwidth=2.0, latency=1.0)
    assert r == dict(peak=[8, 28], makespan=12.0, feasible=True)


def test_tensor_consumed_on_two_remote_devices():
    # a (dev0, cost 1, out 10 bytes) read by b (dev1, cost 2) and c (dev2, cost 3).
    # bandwidth 5, latency 0.5: each transfer 0.5 + 10/5 = 2.5, on channels (0,1) and (0,2)
    # t=0   a starts: dev0 10
    # t=1   both transfers start (different channels): dev1 10, dev2 10
    # t=3.5 both end: dev0 copy freed; b runs 3.5..5.5, c runs 3.5..6.5
    # t=5.5 dev1 copy freed; t=6.5 dev2 copy freed
    b = GraphBuilder()
    a_, b_, c_ = b.add_op("a", 1.0), b.add_op("b", 2.0), b.add_op("c", 3.0)
    b.add_output(a_, 10)
    b.add_input(b_, a_)
    b.add_input(c_, a_)
    r = simulate(b.build(), 3, [0, 1, 2], bandwidth=5.0, latency=0.5)
    assert r == dict(peak=[10, 10, 10], makespan=6.5, feasible=True)


def channel_graph():
    # p0, p1, p2 on dev0 (cost 0) produce z, x, y (10 bytes, transfer 1 each at bandwidth 10);
    # cz (cost 0), cx (cost 0), cy (cost 10) on dev1 read z, x, y.
    b = GraphBuilder()
    ps = [b.add_op(name, 0.0) for name in ("p0", "p1", "p2")]
    cs = [b.add_op(name, cost) for name, cost in (("cz", 0.0), ("cx", 0.0), ("cy", 10.0))]
    for p, c in zip(ps, cs):
        b.add_output(p, 10)
        b.add_input(c, p)
    return b.build()


@pytest.mark.parametrize("tprio, makespan", [
    # x first: z 0..1, x 1..2, y 2..3; cy runs 3..13
    ([0, 2, 1, 0, 0, 0], 13.0),
    # y first: z 0..1, y 1..2, x 2..3; cy runs 2..12, cx waits until 12
    ([0, 1, 2, 0, 0, 0], 12.0),
    # equal transfer priority: lower tensor id (x) first, as in the first case
    ([0, 1, 1, 0, 0, 0], 13.0),
])
def test_one_channel_serves_transfers_by_transfer_priority(tprio, makespan):
    # p0 runs first (op priority 5) so z occupies channel (0,1) during 0..1 while x and y
    # become ready at t=0; at t=1 the channel chooses between x and y.
    r = simulate(channel_graph(), 2, [0, 0, 0, 1, 1, 1], priority=[5, 0, 0, 0, 0, 0],
                 transfer_priority=tprio, bandwidth=10.0)
    assert r["makespan"] == makespan
    # dev1: z (10) until cz at 1; then x and y overlap at most -> 20
    assert r["peak"] == [30, 20]


def test_alias_chain_on_one_device():
    # a -> t0 (100 B); b: t1 = alias of t0; c: t2 = alias of t1; d reads t2 (temp 50, out 1 B)
    # t=0 a: +100 -> 100; t=1 b: +0; t=2 c: +0 (t0 held by t1 although b is done)
    # t=3 d: +50 +1 -> 151   (without the alias hold t0 would be gone: 51)
    # t=4 d ends: -50; t2 freed -> t1 freed -> t0 freed: 1 byte left (d's output)
    b = GraphBuilder()
    a_, b_, c_ = (b.add_op(x, 1.0) for x in "abc")
    d_ = b.add_op("d", 1.0, temporary_memory=50)
    b.add_output(a_, 100)
    b.add_input(b_, a_)
    b.add_output(b_, 100, alias_input_port=0)
    b.add_input(c_, b_)
    b.add_output(c_, 100, alias_input_port=0)
    b.add_input(d_, c_)
    b.add_output(d_, 1)
    g = b.build()
    assert list(g.tensor_alias) == [-1, 0, 1, -1]
    r = simulate(g, 1, [0, 0, 0, 0])
    assert r == dict(peak=[151], makespan=4.0, feasible=True)


def test_alias_chain_across_devices():
    # a (dev0) -> t0 100 B; b (dev0): t1 alias of t0 (own size 40); c (dev1): t2 alias of t1;
    # d (dev1, temp 5) reads t2.  bandwidth 40: transfer of t1 takes 1.
    # t=0 a: dev0 100; t=1 b: +0; t=2 b ends, transfer of t1 2..3: dev1 +40 (t1's own size)
    # t=3 transfer ends: t1's dev0 copy freed -> releases t0 -> dev0 0; c starts: +0
    # t=4 c ends; d starts: +5 -> dev1 45 (t1's dev1 copy is held by t2; without hold: 5)
    # t=5 d ends: -5, t2 freed -> t1 dev1 copy freed -> 0
    b = GraphBuilder()
    a_, b_, c_ = (b.add_op(x, 1.0) for x in "abc")
    d_ = b.add_op("d", 1.0, temporary_memory=5)
    b.add_output(a_, 100)
    b.add_input(b_, a_)
    b.add_output(b_, 40, alias_input_port=0)
    b.add_input(c_, b_)
    b.add_output(c_, 40, alias_input_port=0)
    b.add_input(d_, c_)
    r = simulate(b.build(), 2, [0, 0, 1, 1], bandwidth=40.0)
    assert r == dict(peak=[100, 45], makespan=5.0, feasible=True)


def test_temporary_and_persistent_memory():
    # dev0: a (cost 2, temp 30, pers 7), b (cost 1, temp 50, pers 11); dev1: c (cost 0, pers 100)
    # t=0 dev0 = 7 + 11 = 18 from the start, dev1 = 100; a starts: +30 -> 48
    # t=2 a ends: -30 -> 18; b starts: +50 -> 68; t=3 b ends -> 18.  dev2 holds nothing.
    b = GraphBuilder()
    b.add_op("a", 2.0, temporary_memory=30, persistent_memory=7)
    b.add_op("b", 1.0, temporary_memory=50, persistent_memory=11)
    b.add_op("c", 0.0, persistent_memory=100)
    r = simulate(b.build(), 3, [0, 0, 1], priority=[1, 0, 0])
    assert r == dict(peak=[68, 100, 0], makespan=3.0, feasible=True)


def test_zero_cost_ops_count_at_their_instant():
    # a (cost 0, temp 10, out 20) -> b (cost 0, temp 5)
    # t=0 a starts: +10 +20 -> 30 (checked after allocation); a ends at 0: -10 -> 20;
    #     b starts at 0: +5 -> 25; b ends at 0: -5, a's output freed -> 0.  makespan 0.0
    b = GraphBuilder()
    a_ = b.add_op("a", 0.0, temporary_memory=10)
    b_ = b.add_op("b", 0.0, temporary_memory=5)
    b.add_output(a_, 20)
    b.add_input(b_, a_)
    r = simulate(b.build(), 1, [0, 0])
    assert r == dict(peak=[30], makespan=0.0, feasible=True)


def test_graph_output_stays_live_and_holds_what_it_aliases():
    # a (cost 1) -> t0 10 B with no consumer; b (cost 1, temp 5) after a by a control edge.
    # t=0 a: 10; t=1 b: +5 -> 15 (t0 never freed; freeing it at a's end would give 10)
    b = GraphBuilder()
    a_ = b.add_op("a", 1.0)
    b_ = b.add_op("b", 1.0, temporary_memory=5)
    b.add_output(a_, 10)
    b.add_control(a_, b_)
    assert simulate(b.build(), 1, [0, 0]) == dict(peak=[15], makespan=2.0, feasible=True)
    # a -> t0 10 B; b reads t0, its output t1 aliases t0 and has no consumer: t0 stays forever.
    # c (temp 5) after b by a control edge: t=2 c: 10 + 5 = 15 (without the hold: 5)
    b = GraphBuilder()
    a_, b_ = b.add_op("a", 1.0), b.add_op("b", 1.0)
    c_ = b.add_op("c", 1.0, temporary_memory=5)
    b.add_output(a_, 10)
    b.add_input(b_, a_)
    b.add_output(b_, 10, alias_input_port=0)
    b.add_control(b_, c_)
    assert simulate(b.build(), 1, [0, 0, 0]) == dict(peak=[15], makespan=3.0, feasible=True)


def test_control_edge_crosses_devices_without_transfer():
    # a (dev0, cost 3) -control-> b (dev1, cost 1): b runs 3..4, nothing is copied to dev1
    b = GraphBuilder()
    a_, b_ = b.add_op("a", 3.0), b.add_op("b", 1.0)
    b.add_output(a_, 10)
    b.add_control(a_, b_)
    r = simulate(b.build(), 2, [0, 1], bandwidth=1.0, latency=100.0)
    assert r == dict(peak=[10, 0], makespan=4.0, feasible=True)


def test_repeated_input_counts_once():
    # b reads a's output on two ports: one consumer, one transfer (bandwidth 1: 10 us), not two
    # t=0 a (dev0, cost 1): 10; t=1 transfer 1..11: dev1 10; t=11 b 11..12.
    b = GraphBuilder()
    a_, b_ = b.add_op("a", 1.0), b.add_op("b", 1.0)
    b.add_output(a_, 10)
    b.add_input(b_, a_)
    b.add_input(b_, a_)
    r = simulate(b.build(), 2, [0, 1])
    assert r == dict(peak=[10, 10], makespan=12.0, feasible=True)


def test_frees_happen_before_starts_at_the_same_instant():
    # dev0: a (cost 1, out 50 B read only by x on dev1); e (cost 2) after a; f (temp 60) after e.
    # bandwidth 25: transfer 1..3.  At t=3 the transfer ends (a's dev0 copy freed: -50) and e
    # ends; then f starts: +60.  Peak 60; starting f before the free would give 110.
    b = GraphBuilder()
    a_ = b.add_op("a", 1.0)
    x_ = b.add_op("x", 1.0)
    e_ = b.add_op("e", 2.0)
    f_ = b.add_op("f", 1.0, temporary_memory=60)
    b.add_output(a_, 50)
    b.add_input(x_, a_)
    b.add_control(a_, e_)
    b.add_control(e_, f_)
    r = simulate(b.build(), 2, [0, 1, 0, 0], bandwidth=25.0)
    # dev1: transfer allocates 50 at t=1, x runs 3..4
    assert r == dict(peak=[60, 50], makespan=4.0, feasible=True)


def test_memory_limit_infeasible_and_makespan_objective():
    # the diamond of test_diamond_split...: peaks [8, 24], makespan 12, bandwidth 2, latency 1
    g = diamond_graph()
    args = dict(count=2, bandwidth=2.0, latency=1.0)
    r = simulate(g, 2, [0, 1, 1, 1], priority=[0, 0, 1, 0], bandwidth=2.0, latency=1.0,
                 memory_limit=20)
    assert r == dict(peak=[8, 24], makespan=12.0, feasible=False)
    # offset = sum(cost) 1+2+3+1 = 7, plus (d-1)=1 times tensors (1+8/2)+(1+4/2)+(1+6/2) = 12
    assert infeasible_offset(g, 2, 2.0, 1.0) == 19.0
    # overflow = max(0, 8-20) + max(0, 24-20) = 4; total limit 40: 12 * (1 + 4/40) + 19 = 32.2
    obj = reference_objective(r, g, memory_limit=20, name="makespan", **args)
    assert math.isclose(obj, 32.2, rel_tol=1e-12)
    assert reference_objective(r, g, memory_limit=20, name="peak_memory", **args) == 24.0
    # per-device limits [8, 23]: overflow 1, total 31 -> 12 * (1 + 1/31) + 19
    r = simulate(g, 2, [0, 1, 1, 1], priority=[0, 0, 1, 0], bandwidth=2.0, latency=1.0,
                 memory_limit=[8, 23])
    assert r["feasible"] is False
    obj = reference_objective(r, g, memory_limit=[8, 23], name="makespan", **args)
    assert math.isclose(obj, 12 * (1 + 1 / 31) + 19, rel_tol=1e-12)
    # exactly at the limit is feasible: the objective is the plain makespan
    r = simulate(g, 2, [0, 1, 1, 1], priority=[0, 0, 1, 0], bandwidth=2.0, latency=1.0,
                 memory_limit=[8, 24])
    assert r["feasible"] is True
    assert reference_objective(r, g, memory_limit=[8, 24], name="makespan", **args) == 12.0


def test_decode_ties_go_to_the_lower_device():
    # n=2, d=3: affinity rows [0.5, 0.9, 0.9] -> 1 (tie 1/2 -> 1), [0.7, 0.7, 0.1] -> 0
    keys = [0.5, 0.9, 0.9, 0.7, 0.7, 0.1, 0.3, 0.4, 0.6, 0.2]
    placement, priority, transfer = reference_decode(keys, 2, 3)
    assert placement == [1, 0]
    assert priority == [0.3, 0.4]
    assert transfer == [0.6, 0.2]


def test_reference_respects_bounds_on_random_graphs():
    # properties independent of the exact rules' tie-breaking, on 150 random cases:
    # - a device's peak >= its persistent bytes + the temp and output bytes of any op it runs
    # - makespan >= the busy time of any device, and <= the R11 offset (a list schedule is
    #   never fully idle, so makespan <= total op time + total transfer time)
    from helpers import random_case
    for seed in range(150):
        c = random_case(np.random.default_rng(seed))
        g, d, dev = c["graph"], c["count"], c["placement"]
        r = reference_simulate(g, d, None, c["bandwidth"], c["latency"], dev, c["priority"],
                               c["transfer_priority"])
        for k in range(d):
            on_k = np.flatnonzero(dev == k)
            base = int(g.persistent_memory[on_k].sum())
            need = [int(g.temporary_memory[v])
                    + int(sum(g.tensor_size[t] for t in g.outputs(v) if g.tensor_alias[t] < 0))
                    for v in on_k]
            assert r["peak"][k] >= base + max(need, default=0), (seed, k)
            assert r["makespan"] >= float(g.compute_cost[on_k].sum()) - 1e-9, (seed, k)
        assert r["makespan"] <= infeasible_offset(g, d, c["bandwidth"], c["latency"]) + 1e-9
