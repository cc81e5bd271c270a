"""experiments/placement_relaxation.py: the per-device relaxed peak (with and without early
arrivals) equals a brute force over run orders, never exceeds a simulated peak of the same
placement, and hand cases."""

from __future__ import annotations

import itertools

import numpy as np

from helpers import experiment, random_graph
from regal.graph_builder import GraphBuilder
from regal.sim import DeviceSpec, simulate


def _brute_force(graph, placement, k: int, followers=None) -> int:
    """min over every order of k's ops that keeps the graph's paths of the most live_k (the
    script's docstring), each order written out and each start counted from scratch. With
    `followers` (bitmasks per tensor), a copy transferred to k is live at an op's start from
    the first op (that one included) that reads it or is among its followers, while some
    reader on k has not run before that op."""
    ops = [int(v) for v in np.flatnonzero(placement == k)]
    if not ops:
        return 0
    n = graph.num_nodes
    reach = np.zeros((n, n), bool)          # reach[u, v]: u is a strict ancestor of v
    for v in graph.topo_order.tolist():
        for u in graph.pred[graph.pred_ptr[v]:graph.pred_ptr[v + 1]].tolist():
            reach[u, v] = True
            reach[:, v] |= reach[:, u]
    size, alias, producer = graph.tensor_size, graph.tensor_alias, graph.tensor_producer
    persistent = int(graph.persistent_memory[ops].sum())
    best = None
    for order in itertools.permutations(ops):
        position = {v: i for i, v in enumerate(order)}
        if any(reach[u, v] and position[u] > position[v] for u in ops for v in ops):
            continue
        worst = 0
        for i, v in enumerate(order):
            live = persistent + int(graph.temporary_memory[v])
            counted = set()
            for t in range(graph.output_ptr[v], graph.output_ptr[v + 1]):
                if alias[t] < 0:
                    live += int(size[t])
                    counted.add(t)
            for t in set(graph.input_tensor[graph.input_ptr[v]:graph.input_ptr[v + 1]].tolist()):
                if placement[producer[t]] != k:
                    live += int(size[t]) if followers is None else 0
                elif alias[t] < 0:
                    live += int(size[t])
                    counted.add(t)
            for u in order[:i]:                       # tensors of earlier ops still held
                for t in range(graph.output_ptr[u], graph.output_ptr[u + 1]):
                    if alias[t] >= 0 or t in counted:
                        continue
                    readers = graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]]
                    if len(readers) == 0 or any(placement[r] == k and position[r] > i
                                                for r in readers.tolist()):
                        live += int(size[t])
            if followers is not None:
                for t in range(graph.num_tensors):
                    readers = [int(r) for r in
                               graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]]
                               if placement[r] == k]
                    if placement[producer[t]] == k or not readers:
                        continue
                    begun = any(u in readers or (followers[t] >> u) & 1 for u in order[:i + 1])
                    if begun and any(position[r] >= i for r in readers):
                        live += int(size[t])
            worst = max(worst, live)
        best = worst if best is None else min(best, worst)
    return best


def _random_cases(seed: int, count: int, max_ops: int, max_devices: int):
    """(graph, d, placement, R_k per device) of random small graphs and placements."""
    script = experiment("placement_relaxation")
    rng = np.random.default_rng(seed)
    for _ in range(count):
        graph = random_graph(rng, num_ops=int(rng.integers(2, max_ops + 1)), integer=True)
        d = int(rng.integers(1, max_devices + 1))
        placement = rng.integers(0, d, graph.num_nodes)
        yield graph, d, placement, script.relaxed_peaks(graph, placement, d, max_ops=27)


def test_relaxed_peak_equals_a_brute_force_over_run_orders():
    checked = 0
    for graph, d, placement, relaxed in _random_cases(3, 40, max_ops=8, max_devices=3):
        for k in range(d):
            assert relaxed[k] == _brute_force(graph, placement, k)
            checked += 1
    assert checked > 40


def test_relaxed_peak_never_exceeds_a_simulated_peak_of_the_placement():
    """The docstring's claim: whatever the priorities and transfer order, peak[k] >= R_k."""
    rng = np.random.default_rng(11)
    tight = 0
    for graph, d, placement, relaxed in _random_cases(12, 60, max_ops=15, max_devices=4):
        n = graph.num_nodes
        for _ in range(20):
            peaks = simulate(graph, DeviceSpec(d), placement, rng.random(n), rng.random(n)).peak
            assert all(r <= p for r, p in zip(relaxed, peaks.tolist()))
            tight += any(r == p and r > 0 for r, p in zip(relaxed, peaks.tolist()))
    assert tight > 0            # and it is met, not only respected


_FAST = dict(bandwidth=1e4, latency=0.01)   # every op's outputs transfer in well under 1 µs


def _fast_cases(seed: int, count: int, max_ops: int, max_devices: int):
    """(graph, d, placement, followers) of random graphs whose every op costs at least 1 µs,
    on fast links: the arrival rule holds."""
    script = experiment("placement_relaxation")
    rng = np.random.default_rng(seed)
    for _ in range(count):
        graph = random_graph(rng, num_ops=int(rng.integers(2, max_ops + 1)), integer=True)
        graph = graph._replace(compute_cost=np.maximum(np.asarray(graph.compute_cost), 1.0))
        d = int(rng.integers(2, max_devices + 1))
        followers = script.arrival_followers(graph, DeviceSpec(d, **_FAST))
        assert followers is not None
        yield graph, d, rng.integers(0, d, graph.num_nodes), followers


def test_relaxed_peak_with_arrivals_equals_a_brute_force_over_run_orders():
    script = experiment("placement_relaxation")
    checked = 0
    for graph, d, placement, followers in _fast_cases(4, 40, max_ops=8, max_devices=3):
        relaxed = script.relaxed_peaks(graph, placement, d, 27, followers)
        for k in range(d):
            assert relaxed[k] == _brute_force(graph, placement, k, followers)
            checked += 1
    assert checked > 60


def test_relaxed_peak_with_arrivals_lies_between_the_plain_one_and_the_simulated_peak():
    """The docstring's claims: R_k <= R_k with arrivals <= peak[k], whatever the priorities;
    the arrivals raise R_k on some device, and the simulator meets the raised value."""
    script = experiment("placement_relaxation")
    rng = np.random.default_rng(13)
    raised = tight = 0
    for graph, d, placement, followers in _fast_cases(14, 60, max_ops=15, max_devices=4):
        plain = script.relaxed_peaks(graph, placement, d, 27)
        arrived = script.relaxed_peaks(graph, placement, d, 27, followers)
        assert all(a >= b for a, b in zip(arrived, plain))
        raised += any(a > b for a, b in zip(arrived, plain))
        n = graph.num_nodes
        for _ in range(20):
            peaks = simulate(graph, DeviceSpec(d, **_FAST), placement, rng.random(n),
                             rng.random(n)).peak.tolist()
            assert all(a <= p for a, p in zip(arrived, peaks))
            tight += any(a == p and a > b for a, b, p in zip(arrived, plain, peaks))
    assert raised > 0 and tight > 0


def test_arrival_hand_case():
    """a (1 µs) writes T (100 bytes) for q and c; q writes U (10) for w; w writes V (10) for
    c. a, q on device 0; w, c on device 1. T's copy reaches device 1 at 1.1 µs, before w
    (below q, a child of a) starts at 2.01 µs: w's start holds T 100 + U 10 + V 10 = 120; c's
    holds T 100 + V 10. Without arrivals T counts only at c: R_1 = 110. The simulator: 120."""
    script = experiment("placement_relaxation")
    b = GraphBuilder()
    a, q, w, c = (b.add_op(name, 1.0) for name in "aqwc")
    b.add_output(a, 100)
    b.add_input(q, a)
    b.add_input(c, a)
    b.add_output(q, 10)
    b.add_input(w, q)
    b.add_output(w, 10)
    b.add_input(c, w)
    graph = b.build()
    devices = DeviceSpec(2, bandwidth=1000.0, latency=0.0)
    placement = np.array([0, 0, 1, 1])
    followers = script.arrival_followers(graph, devices)
    assert followers[0] == (1 << w) | (1 << c)    # T: w and c lie below q, a child of a
    assert script.relaxed_peaks(graph, placement, 2, 27) == [110, 110]
    assert script.relaxed_peaks(graph, placement, 2, 27, followers) == [110, 120]
    peaks = simulate(graph, devices, placement, np.arange(4.0)[::-1], np.zeros(4)).peak
    assert peaks.tolist() == [110, 120]


def test_arrival_rule_needs_fast_links_and_positive_costs():
    script = experiment("placement_relaxation")
    b = GraphBuilder()
    x, y = b.add_op("x", 1.0), b.add_op("y", 1.0)
    b.add_output(x, 100)
    b.add_input(y, x)
    graph = b.build()
    assert script.arrival_followers(graph, DeviceSpec(2, bandwidth=1000.0, latency=0.0))
    # the transfer (0.1 + 0.9 = 1 µs) is not shorter than the shortest op
    assert script.arrival_followers(graph, DeviceSpec(2, bandwidth=1000.0, latency=0.9)) is None
    free = graph._replace(compute_cost=np.array([1.0, 0.0]))
    assert script.arrival_followers(free, DeviceSpec(2, bandwidth=1000.0)) is None


def test_hand_case_two_devices():
    """a (100-byte output read by b and c) and b on device 0, c on device 1; b and c write
    10-byte outputs nobody reads. Device 0: a's start 100; b's start: a's output (read by b)
    100 + b's 10 = 110. Device 1: c's start: the transferred copy 100 + its own 10 = 110.
    Device 0 with a alone: 100; device 1 with b and c (a on 0): b 100 + 10, then c: b's
    unread output 10 + 100 + 10 = 120, or c first then b: the same, so 120."""
    b = GraphBuilder()
    a = b.add_op("a", 1.0)
    bb = b.add_op("b", 1.0)
    c = b.add_op("c", 1.0)
    b.add_output(a, 100)
    b.add_input(bb, a)
    b.add_input(c, a)
    b.add_output(bb, 10)
    b.add_output(c, 10)
    graph = b.build()
    script = experiment("placement_relaxation")
    assert script.relaxed_peaks(graph, np.array([0, 0, 1]), 2, 27) == [110, 110]
    assert script.relaxed_peaks(graph, np.array([0, 1, 1]), 2, 27) == [100, 120]
    assert script.relaxed_peaks(graph, np.array([0, 1, 1]), 2, 1) == [100, None]   # too big


def test_placement_search_returns_a_valid_placement_and_its_relaxed_peak():
    """least_relaxed_placement: its placement keeps colocation groups together and pins in
    place, its value is that placement's max_k R_k, never above the start's, never below the
    least over every valid placement (written out), and equal to it on most tiny graphs."""
    from test_bounds import _constrained_graph

    script = experiment("placement_relaxation")
    rng = np.random.default_rng(5)
    cases = exact = 0
    for _ in range(30):
        n, d = int(rng.integers(2, 7)), int(rng.integers(2, 4))
        graph = _constrained_graph(rng, n, d)
        leader, pins = np.asarray(graph.colocation), np.asarray(graph.pinned)
        start = rng.integers(0, d, n)
        value, placement = script.least_relaxed_placement(graph, d, start, 300, rng)
        assert (placement == placement[leader]).all()
        assert (placement[pins >= 0] == pins[pins >= 0]).all()
        assert value == max(script.relaxed_peaks(graph, placement, d, 27))
        projected = start[leader]
        projected[pins >= 0] = pins[pins >= 0]
        assert value <= max(script.relaxed_peaks(graph, projected, d, 27))
        least = min(max(script.relaxed_peaks(graph, np.array(p), d, 27))
                    for p in itertools.product(range(d), repeat=n)
                    if (np.array(p) == np.array(p)[leader]).all()
                    and all(p[v] == pins[v] for v in range(n) if pins[v] >= 0))
        assert value >= least
        cases += 1
        exact += value == least
    assert exact >= 0.8 * cases


def test_timed_value_is_a_schedule_of_the_placement_and_finds_the_best_on_tiny_graphs():
    """timed_value: the priority search with the placement pinned returns the simulated peak
    of a schedule of that placement, never below the least over every op order x transfer
    order of it (written out), and equal to it on most tiny graphs."""
    from regal.sim import evaluate

    script = experiment("placement_relaxation")
    rng = np.random.default_rng(21)
    cases = exact = 0
    for _ in range(12):
        n, d = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        graph = random_graph(rng, num_ops=n, integer=True)
        placement = rng.integers(0, d, n)
        affinity = np.eye(d)[placement].ravel()
        orders = [np.asarray(p, np.float64) for p in itertools.permutations(range(n))]
        keys = np.asarray([np.concatenate([affinity, o, t]) for o in orders for t in orders])
        least = float(evaluate(graph, DeviceSpec(d), keys, "peak_memory", threads=1).min())
        value = script.timed_value(graph, d, placement, 300, seed=0)
        assert value >= least
        assert value >= max(script.relaxed_peaks(graph, placement, d, 27))
        cases += 1
        exact += value == least
    assert exact >= 0.8 * cases
