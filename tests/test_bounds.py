"""regal.bounds: every bound is <= every simulated peak, and equals the optimum where its proof
says it must (the optimum by brute force over placements x orders on tiny graphs)."""

import itertools
import math

import numpy as np
import pytest

from helpers import random_case, random_graph
from regal import synth
from regal.bounds import (Bound, format_bound, gap_to_bound, lower_bound, op_working_sets,
                          packing_bound)
from regal.graph_builder import GraphBuilder
from regal.sim import DeviceSpec, evaluate, simulate


def brute_force_optimum(graph, d: int) -> int:
    """min over every placement (honouring groups and pins) x op order x transfer order of
    the simulated max peak."""
    n = graph.num_nodes
    orders = [np.asarray(p, dtype=np.float64) for p in itertools.permutations(range(n))]
    transfer_orders = orders if d > 1 else orders[:1]
    leaders = getattr(graph, "colocation", np.arange(n))
    pins = getattr(graph, "pinned", np.full(n, -1))
    keys = []
    for placement in itertools.product(range(d), repeat=n):
        placement = np.asarray(placement)
        if (placement != placement[leaders]).any():
            continue
        if ((pins >= 0) & (placement != pins)).any():
            continue
        affinity = np.eye(d)[placement].ravel()
        for order in orders:
            for transfer in transfer_orders:
                keys.append(np.concatenate([affinity, order, transfer]))
    return int(evaluate(graph, DeviceSpec(d), np.asarray(keys), threads=1).min())


def _independent(persistent, unconsumed_outputs=None, colocate=(), pins=None):
    b = GraphBuilder()
    for v, p in enumerate(persistent):
        b.add_op(f"op{v}", 1.0, persistent_memory=p)
        if unconsumed_outputs is not None:
            b.add_output(v, unconsumed_outputs[v])
    for a, c in colocate:
        b.colocate(a, c)
    for v, k in (pins or {}).items():
        b.pin(v, k)
    return b.build()


# ---------------------------------------------------------------------------
# validity: never above a simulated peak


def _mutate(rng, keys, scale=0.3):
    noise = rng.random(keys.shape) < scale
    return np.where(noise, rng.random(keys.shape), keys)


def test_bound_never_exceeds_simulated_peak_on_random_graphs():
    """1,000 random graphs (aliases, alias chains, control edges, unconsumed outputs, repeated
    inputs, temporary/persistent memory, zero costs and sizes) on 1-8 devices: the case's own
    placement plus 48 random chromosomes and two rounds of mutating the best one."""
    rng = np.random.default_rng(20240521)
    checked = with_alias = 0
    for _ in range(1000):
        case = random_case(rng)
        graph, count = case["graph"], case["count"]
        devices = DeviceSpec(count, bandwidth=case["bandwidth"], latency=case["latency"])
        bound = lower_bound(graph, devices)
        assert bound.proven and bound.value == max(bound.components.values())
        result = simulate(graph, devices, case["placement"], case["priority"],
                          case["transfer_priority"])
        assert bound.value <= result.peak.max(), (bound, result.peak)
        genes = graph.num_nodes * (count + 2)
        keys = rng.random((48, genes))
        for _ in range(3):
            peaks = evaluate(graph, devices, keys, threads=1)  # tiny graphs: threads cost more
            assert bound.value <= peaks.min(), (bound, peaks.min())
            best = keys[np.argmin(peaks)]
            keys = _mutate(rng, np.repeat(best[None, :], 48, axis=0))
        checked += 1
        with_alias += bool((graph.tensor_alias >= 0).any())
    assert checked == 1000 and with_alias > 250


@pytest.mark.parametrize("family,training", [("cnn", False), ("inception", False),
                                             ("transformer", True), ("random", True)])
def test_bound_never_exceeds_simulated_peak_on_synthetic_models(family, training):
    rng = np.random.default_rng(7)
    for seed in range(3):
        graph = synth.generate(family, synth.min_ops(family, training) + 40, seed,
                               training=training)
        for count in (1, 2, 4):
            devices = DeviceSpec(count)
            bound = lower_bound(graph, devices)
            keys = rng.random((64, graph.num_nodes * (count + 2)))
            assert bound.value <= evaluate(graph, devices, keys).min()
            one_device = np.zeros(graph.num_nodes, dtype=np.int64)
            order = np.argsort(graph.topo_order).astype(np.float64)
            assert bound.value <= simulate(graph, devices, one_device, -order, -order).peak.max()


def test_bound_never_exceeds_the_optimum_of_tiny_random_graphs():
    """Against the true optimum (brute force), the strongest validity check there is."""
    rng = np.random.default_rng(11)
    equal = 0
    for i in range(60):
        graph = random_graph(rng, num_ops=int(rng.integers(1, 5)), integer=bool(i % 2))
        d = int(rng.integers(1, 4))
        optimum = brute_force_optimum(graph, d)
        bound = lower_bound(graph, d).value
        assert bound <= optimum, (i, bound, optimum)
        equal += bound == optimum
    assert equal >= 1


# ---------------------------------------------------------------------------
# tightness: equal to the optimum where the argument is exact


@pytest.mark.parametrize("d", [1, 2, 3])
def test_single_op_bound_is_its_working_set_and_optimal(d):
    rng = np.random.default_rng(d)
    for _ in range(10):
        b = GraphBuilder()
        b.add_op("only", 1.0, temporary_memory=int(rng.integers(0, 100)),
                 persistent_memory=int(rng.integers(0, 100)))
        for _ in range(int(rng.integers(0, 3))):
            b.add_output(0, int(rng.integers(0, 100)))
        graph = b.build()
        bound = lower_bound(graph, d)
        expected = int(graph.temporary_memory[0] + graph.persistent_memory[0]
                       + graph.tensor_size.sum())
        assert bound.value == expected == brute_force_optimum(graph, d)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_independent_persistent_ops_pack_optimally(d):
    """n <= d + 1 items (or one device): the optimum is max(largest, d-th + (d+1)-th) or the sum."""
    rng = np.random.default_rng(100 + d)
    for _ in range(12):
        n = int(rng.integers(1, (4 if d == 1 else d + 1) + 1))
        persistent = rng.integers(0, 60, size=n).tolist()
        outputs = rng.integers(0, 30, size=n).tolist() if rng.random() < 0.5 else None
        graph = _independent(persistent, outputs)
        assert lower_bound(graph, d).value == brute_force_optimum(graph, d)


def test_dominant_working_set_is_optimal():
    """a -> b -> c; b reads its input twice and holds 10,000 temporary bytes."""
    b = GraphBuilder()
    a = b.add_op("a", 1.0, persistent_memory=7)
    mid = b.add_op("b", 2.0, temporary_memory=10_000)
    c = b.add_op("c", 1.0, persistent_memory=3)
    b.add_output(a, 64)
    b.add_input(mid, a, 0)
    b.add_input(mid, a, 0)
    b.add_output(mid, 16)
    b.add_input(c, mid, 0)
    graph = b.build()
    for d in (1, 2, 3):
        bound = lower_bound(graph, d)
        assert bound.components["working_set"] == 64 + 10_000 + 16
        assert bound.value == brute_force_optimum(graph, d)


def test_one_device_total_order_is_exact():
    """On one device with the order forced (a control chain through every op) and no aliases,
    the live set when each op starts is known exactly: op_start equals the simulated peak."""
    rng = np.random.default_rng(5)
    for _ in range(150):
        n = int(rng.integers(1, 12))
        b = GraphBuilder()
        outputs = []
        for v in range(n):
            b.add_op(f"op{v}", float(rng.integers(0, 3)),
                     temporary_memory=int(rng.integers(0, 50)) * int(rng.random() < 0.5),
                     persistent_memory=int(rng.integers(0, 50)) * int(rng.random() < 0.3))
            for port in range(int(rng.integers(0, 3))):
                b.add_output(v, int(rng.integers(0, 100)))
                outputs.append((v, port))
            if v:
                b.add_control(v - 1, v)
                for u, port in outputs:
                    if u < v and rng.random() < 0.3:
                        b.add_input(v, u, port)
        graph = b.build()
        peak = simulate(graph, DeviceSpec(1), np.zeros(n, dtype=np.int64), np.zeros(n),
                        np.zeros(n)).peak.max()
        assert lower_bound(graph, 1).value == peak


# ---------------------------------------------------------------------------
# hand-computed cases


def _alias_graph():
    """a: X (100 bytes); b reads X, Y = alias of X (100); e reads Y, Z = alias of Y (30);
    c reads Z and X. c's inputs share one alias tree: Z local holds Y local holds X, so c can
    hold its inputs in 100 bytes; counting each input's cheapest chain (30 + 100) overcounts."""
    g = GraphBuilder()
    a, bb, e, c = (g.add_op(name, 1.0) for name in "abec")
    g.add_output(a, 100)
    g.add_input(bb, a, 0)
    g.add_output(bb, 100, 0)
    g.add_input(e, bb, 0)
    g.add_output(e, 30, 0)
    g.add_input(c, e, 0)
    g.add_input(c, a, 0)
    return g.build()


def test_alias_tree_counts_a_shared_copy_once():
    graph = _alias_graph()
    for d in (1, 2):
        sets = op_working_sets(graph, d)
        assert sets.tolist() == [100, 100, 100, 100]
        assert lower_bound(graph, d).value == 100 == brute_force_optimum(graph, d)


def test_alias_input_costs_its_own_size_when_transferred():
    """c reads only Z (30 bytes, alias of X, 100): on one device Z holds X's copy (100); with
    two, Z can be transferred alone (30)."""
    g = GraphBuilder()
    a, e, c = (g.add_op(name, 1.0) for name in "aec")
    g.add_output(a, 100)
    g.add_input(e, a, 0)
    g.add_output(e, 30, 0)
    g.add_input(c, e, 0)
    graph = g.build()
    assert op_working_sets(graph, 1).tolist() == [100, 100, 100]
    assert op_working_sets(graph, 2).tolist() == [100, 100, 30]
    for d in (1, 2):
        assert lower_bound(graph, d).value <= brute_force_optimum(graph, d)


def test_repeated_input_counts_once():
    g = GraphBuilder()
    a, c = g.add_op("a", 1.0), g.add_op("c", 1.0, temporary_memory=10)
    g.add_output(a, 100)
    for _ in range(3):
        g.add_input(c, a, 0)
    g.add_output(c, 5)
    graph = g.build()
    assert op_working_sets(graph, 2).tolist() == [100, 115]
    assert lower_bound(graph, 2).value == 115 == brute_force_optimum(graph, 2)


def test_packing_bound_hand_cases():
    assert packing_bound([], 3) == 0
    assert packing_bound([50, 40, 30], 2) == 70          # 2nd + 3rd largest share a device
    assert packing_bound([50, 40, 30], 3) == 50
    assert packing_bound([10] * 7, 3) == 30              # ceil(7/3) items on one device
    assert packing_bound([9, 1, 1, 1], 1) == 12
    assert packing_bound([5, 5, 5, 5, 1], 2) == 11       # total 21 -> ceil 11


def test_colocation_merges_items():
    """Persistent 50, 40, 30 on two devices: 70 free, 80 when 50 and 30 must share a device,
    90 when 50 and 40 are pinned to one device."""
    free = _independent([50, 40, 30])
    grouped = _independent([50, 40, 30], colocate=[(0, 2)])
    pinned = _independent([50, 40, 30], pins={0: 1, 1: 1})
    for graph, expected in ((free, 70), (grouped, 80), (pinned, 90)):
        assert lower_bound(graph, 2).value == expected == brute_force_optimum(graph, 2)


def test_op_start_counts_tensors_crossing_the_op():
    """One device: a -> X (40), b(temp 7) -> Y (5), c reads X and Y. When b starts, X is
    still needed by c: 40 + 7 + 5 = 52 (working sets alone give 45)."""
    g = GraphBuilder()
    a, bb, c = g.add_op("a", 1.0), g.add_op("b", 1.0, temporary_memory=7), g.add_op("c", 1.0)
    g.add_output(a, 40)
    g.add_output(bb, 5)
    g.add_control(a, bb)
    g.add_input(c, a, 0)
    g.add_input(c, bb, 0)
    graph = g.build()
    bound = lower_bound(graph, 1)
    assert bound.components["working_set"] == 45
    assert bound.components["op_start"] == 52 and bound.source == "op_start"
    assert bound.value == brute_force_optimum(graph, 1)
    assert lower_bound(graph, 2).value == 45 <= brute_force_optimum(graph, 2)


# ---------------------------------------------------------------------------
# the API around it


def test_extra_bounds_take_the_max_and_name_the_source():
    graph = _independent([50, 40, 30])
    low = lower_bound(graph, 2, extra={"cpsat": 10})
    assert (low.value, low.source) == (70, "end_state") and low.components["cpsat"] == 10
    high = lower_bound(graph, DeviceSpec(2), extra={"cpsat": 75.0000000001, "x": 74})
    assert (high.value, high.source, high.proven) == (75, "cpsat", True)
    rough = lower_bound(graph, 2, extra={"guess": Bound(90, "guess", False)})
    assert (rough.value, rough.proven) == (90, False)
    for bad in ({"end_state": 1}, {"cpsat": -1}, {"cpsat": "x"}, {"cpsat": math.nan}):
        with pytest.raises(ValueError):
            lower_bound(graph, 2, extra=bad)
    for devices in (0, True, "2", 1.5):
        with pytest.raises(ValueError):
            lower_bound(graph, devices)


def test_format_and_gap():
    bound = Bound(3 * 2**30 // 2, "working_set", True, {"working_set": 3 * 2**30 // 2},
                  "op 'conv1'")
    assert format_bound(bound) == "lower bound 1.50 GiB (working set of one op: op 'conv1')"
    assert "not proven" in format_bound(Bound(10, "cpsat", False))
    assert gap_to_bound(110, 100) == pytest.approx(0.10)
    assert gap_to_bound(110, bound) == pytest.approx(110 / bound.value - 1)
    assert gap_to_bound(0, 0) == 0.0 and gap_to_bound(5, 0) == math.inf


# ---------------------------------------------------------------------------
# alias-tree layers (op_start) and the minimum-cut argument (start_cut): validity against the
# exhaustive optimum with aliases, control edges, colocation groups and pins, and hand cases
# where each is strictly tighter than the plain arguments and equal to the optimum


def _constrained_graph(rng, n: int, d: int):
    """A random DAG of n ops (ids not in topological order) with aliases (and chains),
    repeated inputs, unconsumed outputs, control edges, temporary / persistent memory, and
    colocation groups and pins (to devices < d)."""
    rank = rng.permutation(n)
    by_rank = np.argsort(rank)
    b = GraphBuilder()
    for v in range(n):
        b.add_op(f"op{v}", float(rng.integers(0, 3)),
                 temporary_memory=int(rng.integers(0, 5)) * 8 * int(rng.random() < 0.5),
                 persistent_memory=int(rng.integers(0, 5)) * 8 * int(rng.random() < 0.3))
    num_outputs = rng.integers(0, 3, size=n)
    inputs = [[] for _ in range(n)]
    for r in range(1, n):
        v = int(by_rank[r])
        earlier = [int(u) for u in by_rank[:r] if num_outputs[u] > 0]
        for _ in range(int(rng.integers(0, 3)) if earlier else 0):
            u = int(rng.choice(earlier))
            inputs[v].append((u, int(rng.integers(0, num_outputs[u]))))
            if rng.random() < 0.1:
                inputs[v].append(inputs[v][-1])
    for v in range(n):
        for u, port in inputs[v]:
            b.add_input(v, u, port)
        for _ in range(int(num_outputs[v])):
            alias = int(rng.integers(0, len(inputs[v]))) if inputs[v] and rng.random() < 0.5 else -1
            b.add_output(v, int(rng.integers(0, 9)) * 8, alias)
    for _ in range(int(rng.integers(0, n))):
        lo, hi = sorted(rng.choice(n, size=2, replace=False).tolist()) if n > 1 else (0, 0)
        if lo != hi:
            b.add_control(int(by_rank[lo]), int(by_rank[hi]))
    group = list(range(n))  # union-find, so that one group gets at most one pin

    def find(x):
        while group[x] != x:
            x = group[x]
        return x

    for _ in range(int(rng.integers(0, 2)) if n > 1 else 0):
        a, c = rng.choice(n, size=2, replace=False).tolist()
        b.colocate(a, c)
        group[find(a)] = find(c)
    pinned = set()
    for v in rng.permutation(n)[:int(rng.integers(0, 3))].tolist():
        if find(v) not in pinned:
            b.pin(v, int(rng.integers(0, d)))
            pinned.add(find(v))
    return b.build()


def test_bound_never_exceeds_the_optimum_with_groups_pins_and_aliases():
    """The exhaustive optimum (placements honouring groups and pins x op orders x transfer
    orders) on 1-3 devices (4 ops), 4 and 8 devices (3 ops); the bound with every op cut."""
    rng = np.random.default_rng(2024)
    checked = binding = 0
    for i in range(70):
        d = [1, 2, 3, 4, 8][i % 5]
        n = int(rng.integers(1, 5 if d <= 3 else 4))
        graph = _constrained_graph(rng, n, d)
        optimum = brute_force_optimum(graph, d)
        bound = lower_bound(graph, d, time_limit=5.0)
        assert bound.value <= optimum, (i, d, bound, optimum)
        assert lower_bound(graph, d).value <= bound.value
        checked += 1
        binding += bound.value == optimum
    assert checked == 70 and binding >= 10


def test_bound_never_exceeds_the_one_device_optimum_of_larger_graphs():
    """One device, 5-7 ops: every order (op_start and start_cut bind most on one device)."""
    rng = np.random.default_rng(77)
    tighter = 0
    for i in range(30):
        graph = _constrained_graph(rng, int(rng.integers(5, 8)), 1)
        n = graph.num_nodes
        orders = np.asarray(list(itertools.permutations(range(n))), dtype=np.float64)
        keys = np.concatenate([np.ones((len(orders), n)), orders, orders], axis=1)
        optimum = int(evaluate(graph, DeviceSpec(1), keys, threads=1).min())
        bound = lower_bound(graph, 1, time_limit=5.0)
        assert bound.value <= optimum, (i, bound, optimum)
        c = bound.components
        tighter += max(c["op_start"], c["start_cut"]) > max(c["working_set"], c["end_state"])
    assert tighter >= 3


def test_bound_never_exceeds_simulated_peaks_with_groups_and_pins():
    """Medium graphs (8-40 ops) with groups and pins on 1-8 devices: 48 random chromosomes
    and two rounds of mutating the best one, against the cheap and the time-limited bound."""
    rng = np.random.default_rng(99)
    for i in range(60):
        d = int(rng.integers(1, 9))
        graph = _constrained_graph(rng, int(rng.integers(8, 41)), d)
        devices = DeviceSpec(d, bandwidth=float(rng.choice([1.0, 4.0])),
                             latency=float(rng.choice([0.0, 1.0])))
        cheap = lower_bound(graph, devices)
        full = lower_bound(graph, devices, time_limit=5.0)
        assert cheap.value <= full.value
        keys = rng.random((48, graph.num_nodes * (d + 2)))
        for _ in range(3):
            peaks = evaluate(graph, devices, keys, threads=1)
            assert full.value <= peaks.min(), (i, full, peaks.min())
            keys = _mutate(rng, np.repeat(keys[np.argmin(peaks)][None, :], 48, axis=0))


def test_forced_alias_holds_its_source():
    """One device: a -> X (100); b reads X, Y = alias of X; m (temporary 10) runs after b and
    before c, which reads Y. When m starts, Y (needed by c) holds X: 110, the optimum. The
    plain per-tensor count (non-alias tensors only) saw X as freed (its only consumer b has
    run) and gave 100, the largest working set."""
    g = GraphBuilder()
    a = g.add_op("a", 1.0)
    bb = g.add_op("b", 1.0)
    m = g.add_op("m", 1.0, temporary_memory=10)
    c = g.add_op("c", 1.0)
    g.add_output(a, 100)
    g.add_input(bb, a, 0)
    g.add_output(bb, 100, 0)
    g.add_control(bb, m)
    g.add_control(m, c)
    g.add_input(c, bb, 0)
    graph = g.build()
    bound = lower_bound(graph, 1)
    assert bound.components["working_set"] == 100
    assert bound.components["op_start"] == 110 and bound.source == "op_start"
    assert bound.value == brute_force_optimum(graph, 1) == 110
    assert lower_bound(graph, 2).value <= brute_force_optimum(graph, 2)


def test_start_cut_takes_the_cheaper_of_either_order():
    """One device: s -> X (50) -> u -> Z (60) -> w; v (temporary 100) runs after s and before
    w, but u is free to run before or after v. When v starts, either X (u has not run) or Z
    (u has) is live: >= 150, the optimum (s, v, u, w). Neither is forced by v's ancestors and
    descendants alone, so op_start sees only 100 at v; its max, 110, is u's working set."""
    g = GraphBuilder()
    s = g.add_op("s", 1.0)
    v = g.add_op("v", 1.0, temporary_memory=100)
    u = g.add_op("u", 1.0)
    w = g.add_op("w", 1.0)
    g.add_output(s, 50)
    g.add_input(u, s, 0)
    g.add_output(u, 60)
    g.add_input(w, u, 0)
    g.add_control(s, v)
    g.add_control(v, w)
    graph = g.build()
    bound = lower_bound(graph, 1)
    assert bound.components["working_set"] == bound.components["op_start"] == 110
    assert bound.components["start_cut"] == 150 and bound.source == "start_cut"
    assert bound.value == brute_force_optimum(graph, 1) == 150
    assert "op 'v'" in bound.detail and "4 of 4 ops tried" in bound.detail
    two = lower_bound(graph, 2)
    assert two.components["start_cut"] == 75 and two.value <= brute_force_optimum(graph, 2)


def test_last_start_adds_the_last_ops_working_set_to_what_a_device_keeps():
    """Three lone ops, each holding 100 persistent bytes and 20 temporary while it runs, on 2
    devices: one device keeps two of them (200) and runs one more op last (+20) = 220, the
    optimum; the end state packs only 200, a working set is 120."""
    b = GraphBuilder()
    for v in range(3):
        b.add_op(f"op{v}", 1.0, persistent_memory=100, temporary_memory=20)
    graph = b.build()
    bound = lower_bound(graph, 2)
    assert bound.components["last_start"] == 220 == brute_force_optimum(graph, 2)
    assert bound.source == "last_start"
    assert max(v for k, v in bound.components.items() if k != "last_start") == 200
    # one device: all 300 kept, plus the last op's 20; three devices: one op each, 120
    assert lower_bound(graph, 1).components["last_start"] == 320 == brute_force_optimum(graph, 1)
    assert lower_bound(graph, 3).components["last_start"] == 120 == brute_force_optimum(graph, 3)


def test_last_start_never_exceeds_the_optimum_and_sometimes_decides_it():
    """Tiny graphs with never-freed outputs, groups, pins and aliases at 1-3 devices: the
    argument alone is <= the exhaustive optimum, and it alone reaches it on some."""
    rng = np.random.default_rng(5150)
    alone = 0
    for i in range(60):
        d = [1, 2, 3][i % 3]
        graph = _constrained_graph(rng, int(rng.integers(2, 5)), d)
        optimum = brute_force_optimum(graph, d)
        c = lower_bound(graph, d).components
        assert c["last_start"] <= optimum, (i, d, c, optimum)
        alone += c["last_start"] == optimum > max(v for k, v in c.items() if k != "last_start")
    assert alone >= 1


def test_time_limit_tries_every_op_and_is_checked(monkeypatch):
    from regal import bounds, bounds_cut

    graph = synth.generate("random", 60, 3)
    n = graph.num_nodes
    monkeypatch.setattr(bounds_cut, "_CHEAP_WORK", 1)  # the cheap bound cuts one op only
    facts = bounds._Facts(graph, 2)
    bounds._working_set(facts)
    bounds._op_start(facts)
    one, one_op, tried = bounds_cut.start_cut(facts)
    every, every_op, tried_all = bounds_cut.start_cut(facts, time_limit=30.0)
    assert (tried, tried_all) == (1, n) and every >= one
    cheap, full = lower_bound(graph, 2), lower_bound(graph, 2, time_limit=30.0)
    assert (cheap.components["start_cut"], full.components["start_cut"]) == (one, every)
    assert full.value >= cheap.value
    for bad in (0, -1.0, math.nan, math.inf, "5", True):
        with pytest.raises(ValueError):
            lower_bound(graph, 2, time_limit=bad)


def test_bounds_command_time_limit(tmp_path, capsys):
    from regal.cli import main
    from regal.io import save_graph

    path = tmp_path / "g.npz"
    save_graph(synth.generate("random", 40, 1), path)
    assert main(["bounds", str(path), "--devices", "1", "2", "--time-limit", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if "lower bound" in line]
    every = [line for line in out if line.startswith("  every argument: ")]
    assert len(lines) == 2 and len(every) == 2 and len(out) == 4
    names = ("working_set", "end_state", "op_start", "start_cut", "last_start")
    assert all(line.rsplit("[argument: ", 1)[1].rstrip("]") in names for line in lines)
    # each argument's value, the one named above among them
    assert all(all(f"{name} " in line for name in names) for line in every)
    assert main(["bounds", str(path), "--devices", "2", "--bytes", "--time-limit", "5"]) == 0
    assert int(capsys.readouterr().out.rsplit(" ", 1)[1]) > 0


def test_start_cut_counts_every_saved_tensor_not_only_the_heaviest(monkeypatch):
    """Ten forward ops save 10 bytes each for ten backward ops behind a turn op (control
    edges). When the turn starts, all 100 bytes are live, and that is the one-device
    optimum. Argument 3's bitsets keep only the heaviest layers (here 4, `_COLUMNS` patched
    down as a big training step's thousands of saved tensors exceed 2,048); start_cut keeps
    them all."""
    import regal.bounds as bounds

    monkeypatch.setattr(bounds, "_COLUMNS", 4)
    b = GraphBuilder()
    turn = b.add_op("turn", 1.0)
    for i in range(10):
        f = b.add_op(f"f{i}", 1.0)
        b.add_output(f, 10)
        back = b.add_op(f"b{i}", 1.0)
        b.add_input(back, f)
        b.add_control(f, turn)
        b.add_control(turn, back)
    graph = b.build()
    bound = lower_bound(graph, 1, time_limit=5)
    assert bound.components["op_start"] == 40        # the 4 heaviest layers only
    assert bound.components["start_cut"] == 100 and bound.value == 100
    # and a schedule meets it: the peak is 100 whatever the order
    n = graph.num_nodes
    result = simulate(graph, DeviceSpec(1), np.zeros(n, dtype=np.int64), np.linspace(1, 0, n),
                      np.zeros(n))
    assert int(result.peak.max()) == 100
