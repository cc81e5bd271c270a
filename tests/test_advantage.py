"""The learned move ranker (`regal.search.advantage`) and its features
(`regal.search.move_features`): the features on hand-made cases and against the dense
reference, the weights' round trip, and the ranker as a climb's `rank_moves` (budget,
determinism, shapes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from regal import synth
from regal.decode import encode
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem
from regal.search.advantage import MoveRanker
from regal.search.move_features import (FEATURES, HUB_TOUCHES, REGIMES, _features_in_lanes,
                                        incumbent_context, move_features)
from regal.search.climb import Climb
from regal.sim import DeviceSpec

SHIPPED = Path(__file__).resolve().parents[1] / "data/policy/move_ranker.npz"


def _chain_graph():
    """a -> b -> c (a's output 100 bytes, b's 1) and p -> q (p's output 50 bytes)."""
    b = GraphBuilder()
    a = b.add_op("a", 1.0)
    b.add_output(a, 100)
    v = b.add_op("b", 1.0)
    b.add_input(v, a)
    b.add_output(v, 1)
    c = b.add_op("c", 1.0)
    b.add_input(c, v)
    p = b.add_op("p", 1.0)
    b.add_output(p, 50)
    q = b.add_op("q", 1.0)
    b.add_input(q, p)
    return b.build()


def _climb_at(problem, placement, priority):
    """A climb whose incumbent is the given solution (traced, as the climb traces its own)."""
    climb = Climb(problem, 5, 0, heuristics=())
    d = problem.devices.count
    climb.current = encode(np.asarray(placement, np.int32), priority, priority, d)
    climb._refresh(climb.current)
    return climb


PRIORITY = np.linspace(0.9, 0.0, 5)        # a, b, c, p, q in id order (keys in [0, 1])


def _features(climb, placement=None, priority=None):
    """Features of the incumbent with ops moved (`placement`) or priority keys set
    (`priority`: {op: key}), the way the climb's moves change it."""
    from regal.decode import split

    keys = climb.current.copy()
    n, d = climb.problem.graph.num_nodes, climb.problem.devices.count
    affinity, prio, _ = split(keys, n, d)
    if placement is not None:
        affinity[:] = 0.0
        affinity[np.arange(n), placement] = 1.0
    for op, value in (priority or {}).items():
        prio[op] = value
    return dict(zip(FEATURES, move_features(climb, keys[None, :])[0]))


def test_the_incumbent_peaks_where_the_hand_computation_says():
    # all on device 0 in id order: a [0,1), b [1,2), c [2,3), p [3,4), q [4,5); the peak is
    # while b runs: a's 100 bytes (b reads them) and b's own 1 byte, 101 in all
    climb = _climb_at(Problem(_chain_graph(), DeviceSpec(2)), [0] * 5, PRIORITY)
    facts = climb.moves.facts
    assert facts.device == 0 and facts.peaks.tolist() == [101, 0]
    assert sorted(facts.tensors.tolist()) == [0, 1]


def test_moving_a_live_tensors_producer_and_consumer_off_the_peak_device():
    climb = _climb_at(Problem(_chain_graph(), DeviceSpec(2)), [0] * 5, PRIORITY)
    x = _features(climb, [1, 1, 0, 0, 0])             # a and b move to device 1
    # a's tensor (100 bytes) leaves device 0: its producer and its only waiting reader moved
    assert x["live_leave"] == pytest.approx(100 / 101)
    # b's tensor (1 byte) is made elsewhere but c, which still waits for it, stays
    assert x["live_partial"] == pytest.approx(1 / 101)
    assert x["bytes_off_k"] == pytest.approx(101 / 101)   # a: 100 + b: 1
    assert x["bytes_onto_k"] == 0 and x["overflow"] == 0
    assert x["fill"] == pytest.approx(1.0)             # 101 bytes onto a device with 101 of room
    assert x["rise_t"] == pytest.approx(0.0) and x["overflow_t"] == 0   # device 1 was empty
    assert x["moved_ops"] == pytest.approx(2 / 5)
    assert x["cut_edges"] == pytest.approx(1 / 5)      # b -> c now crosses devices
    assert x["reorder"] == 0 and x["noop"] == 0
    # only the producer moves: b, its waiting reader, stays, so the tensor comes back
    y = _features(climb, [1, 0, 0, 0, 0])
    assert y["live_leave"] == 0 and y["live_partial"] == pytest.approx(100 / 101)
    assert y["rise_t"] == pytest.approx(100 / 101 - 1)   # a's 100 bytes onto the empty device


def test_moves_onto_a_busy_device_see_its_memory_while_the_moved_ops_ran():
    # a, b, q on device 0 and c, p on device 1: p runs first there, [0, 1), and its 50 bytes
    # stay until their copy to q has arrived; device 0 peaks at a's 100 + b's 1 + p's 50 copy
    climb = _climb_at(Problem(_chain_graph(), DeviceSpec(2)), [0, 0, 1, 1, 0], PRIORITY)
    facts = climb.moves.facts
    assert facts.device == 0 and facts.peaks.tolist() == [151, 51]
    P = 151.0
    # a ran [0, 1) while device 1 held p's 50 bytes: a's 100 bytes land on them
    y = _features(climb, [1, 0, 1, 1, 0])
    assert y["rise_t"] == pytest.approx((50 + 100 - P) / P) and y["overflow_t"] == 0
    # q (no bytes of its own) ran late, when device 1 held only b's 1-byte copy
    x = _features(climb, [0, 0, 1, 1, 1])
    assert x["rise_t"] == pytest.approx((1 + 0 - P) / P)


def test_reorders_are_described_by_what_they_do_to_the_live_tensors():
    climb = _climb_at(Problem(_chain_graph(), DeviceSpec(2)), [0] * 5, PRIORITY)
    # a (the producer of the 100 live bytes) after p: rank 0 -> 3, later by 3 of 5 ops
    # (the climb re-ranks its incumbent's keys: a 1, b 0.75, c 0.5, p 0.25, q 0)
    x = _features(climb, priority={0: 0.1})
    assert x["reorder"] == 1 and x["moved_ops"] == 0 and x["noop"] == 0
    assert x["good_reorder"] == pytest.approx(100 / 101) and x["bad_reorder"] == 0
    assert x["jump_k"] == pytest.approx(3 / 5)
    # p right after a: it started after the peak and now runs before it, with its 50 bytes
    y = _features(climb, priority={3: 1.0})     # ties go to the lower id: after a
    assert y["alloc_before_peak"] == pytest.approx(50 / 101)
    assert y["good_reorder"] == 0 and y["jump_k"] == pytest.approx(2 / 5)   # rank 3 -> 1
    # the incumbent itself: nothing changes
    z = _features(climb, [0] * 5)
    assert z["noop"] == 1 and z["reorder"] == 1
    z = _features(climb, priority={3: 0.2})      # p still between c and q
    assert z["noop"] == 1 and z["reorder"] == 1
    assert sum(abs(v) for k, v in z.items() if k not in ("noop", "reorder")) == 0


def _ranker(seed=3):
    rng = np.random.default_rng(seed)
    return MoveRanker.linear(rng.normal(size=(len(REGIMES), len(FEATURES))), rng.normal(size=3),
                             rng.normal(size=len(FEATURES)), rng.uniform(0.5, 2, len(FEATURES)))


def _network(seed=4, hidden=(5, 3)):
    """A ranker of ReLU layers `hidden` then one output, random weights, per regime."""
    rng = np.random.default_rng(seed)
    widths = (len(FEATURES),) + tuple(hidden) + (1,)
    layers = [[(rng.normal(size=(a, b)), rng.normal(size=b)) for a, b in zip(widths, widths[1:])]
              for _ in REGIMES]
    return MoveRanker(layers, rng.normal(size=len(FEATURES)),
                      rng.uniform(0.5, 2, len(FEATURES)))


def test_a_network_ranker_computes_what_its_layers_say():
    """The advantage written out unit by unit: ReLU between layers, none after the last."""
    ranker = _network()
    x = np.random.default_rng(8).normal(size=(6, len(FEATURES)))
    for regime in range(len(REGIMES)):
        got = ranker.advantage(x, regime)
        for row in range(len(x)):
            h = [(x[row, f] - ranker.mean[f]) / ranker.scale[f] for f in range(len(FEATURES))]
            layers = ranker.layers[regime]
            for i, (kernel, bias) in enumerate(layers):
                h = [sum(h[a] * kernel[a, b] for a in range(len(h))) + bias[b]
                     for b in range(len(bias))]
                if i < len(layers) - 1:
                    h = [max(v, 0.0) for v in h]
            assert got[row] == pytest.approx(h[0], rel=1e-9, abs=1e-9)


def test_a_linear_ranker_is_the_dot_product():
    ranker = _ranker()
    x = np.random.default_rng(9).normal(size=(5, len(FEATURES)))
    rng = np.random.default_rng(3)
    weights, bias = rng.normal(size=(len(REGIMES), len(FEATURES))), rng.normal(size=3)
    mean, scale = rng.normal(size=len(FEATURES)), rng.uniform(0.5, 2, len(FEATURES))
    for regime in range(len(REGIMES)):
        expected = ((x - mean) / scale) @ weights[regime] + bias[regime]
        assert np.allclose(ranker.advantage(x, regime), expected)


def test_layers_of_the_wrong_shape_are_refused():
    good = _network().layers
    with pytest.raises(ValueError, match="one layer list per regime"):
        MoveRanker(good[:2])
    bad = [list(regime) for regime in good]
    bad[1][1] = (np.zeros((4, 3)), np.zeros(3))          # after a width of 5
    with pytest.raises(ValueError, match="after width 5"):
        MoveRanker(bad)
    with pytest.raises(ValueError, match="2 outputs"):
        MoveRanker([[(np.zeros((len(FEATURES), 2)), np.zeros(2))]] * len(REGIMES))


def test_saved_and_loaded_weights_give_identical_scores(tmp_path):
    problem = Problem(synth.random_dag(60, 5), DeviceSpec(3))
    climb = Climb(problem, 50, 0)
    drawn = climb.moves.neighbours(climb.current, 40, 0.85)
    for ranker in (_ranker(), _network()):
        ranker.save(tmp_path / "ranker.npz")
        again = MoveRanker.load(tmp_path / "ranker.npz")
        first, second = ranker(climb, drawn), again(climb, drawn)
        assert first.shape == (40,)
        assert np.array_equal(first, second)
        assert np.array_equal(first, ranker(climb, drawn))     # and the cached context agrees


def test_weights_for_other_features_are_refused(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, weights=np.zeros((3, 2)), bias=np.zeros(3), mean=np.zeros(2),
             scale=np.ones(2), features=np.array(["a", "b"]), regimes=np.array(REGIMES),
             meta=np.array(""))
    with pytest.raises(ValueError, match="other features"):
        MoveRanker.load(path)


def _problems():
    graph = synth.random_dag(70, 5)
    b = GraphBuilder()       # a graph with colocation groups: they move as a whole
    prev = None
    for i in range(30):
        v = b.add_op(f"op{i}", 1.0 + i % 3, temporary_memory=i % 4)
        b.add_output(v, 10 + 7 * (i % 5))
        if prev is not None:
            b.add_input(v, prev)
        if i >= 2 and i % 3 == 0:
            b.add_input(v, v - 2)
        prev = v
    for i in range(0, 30, 6):
        b.colocate(i, i + 1)
    grouped = b.build()
    return [Problem(graph, DeviceSpec(2)), Problem(graph, DeviceSpec(4)),
            Problem(graph, DeviceSpec(2, memory_limit=1500), "makespan"),
            Problem(grouped, DeviceSpec(3))]


PROBLEMS = _problems()


@pytest.mark.parametrize("which", range(len(PROBLEMS)))
def test_the_ranker_drives_a_climb_within_budget_and_deterministically(which):
    problem = PROBLEMS[which]
    answers = []
    for _ in range(2):
        ranker = _ranker()
        climb = Climb(problem, 400, 7, rank_moves=ranker, draw=4).run(400)
        assert climb.used <= 400
        assert ranker.calls > 0
        sol = climb.solution()
        assert sol.evaluations <= 400
        answers.append(sol)
    first, again = answers
    assert np.array_equal(first.placement, again.placement)
    assert np.array_equal(first.priority, again.priority)
    assert first.value == again.value and first.extra == again.extra


def test_scores_have_one_entry_per_drawn_neighbour_and_features_are_finite():
    for problem in PROBLEMS:
        climb = Climb(problem, 60, 1)
        for count in (1, 7, 64):
            drawn = climb.moves.neighbours(climb.current, count, 0.85)
            x = move_features(climb, drawn)
            assert x.shape == (count, len(FEATURES)) and np.isfinite(x).all()
            assert _ranker()(climb, drawn).shape == (count,)


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no shipped move ranker weights")
def test_the_shipped_weights_load_and_rank():
    ranker = MoveRanker.load(SHIPPED)
    climb = Climb(PROBLEMS[0], 60, 1)
    drawn = climb.moves.neighbours(climb.current, 32, 0.85)
    scores = ranker(climb, drawn)
    assert scores.shape == (32,) and np.isfinite(scores).all()


# ---------------------------------------------------------------------------
# the compiled features equal the dense numpy ones they replaced (tests/advantage_reference.py)


def _feature_cases():
    from search_cases import drawing_cases

    return [problem for problem in drawing_cases() if problem.devices.count > 1] + PROBLEMS


FEATURE_CASES = _feature_cases()


@pytest.mark.parametrize("which", range(len(FEATURE_CASES)))
def test_the_compiled_features_equal_the_dense_reference(which):
    """Along a ranked climb (groups and pins, limits, 2-4 devices): the features read from
    the drawn writes equal those from the chromosomes exactly, and those with every moved op
    taken as a hub too; they equal the dense numpy reference to rounding (sums taken in
    another order); the per-incumbent arrays equal numpy's."""
    from advantage_reference import _device_ranks, _window_memory, context_arrays
    from advantage_reference import move_features as reference

    problem = FEATURE_CASES[which]
    climb = Climb(problem, 600, which, heuristics=(), rank_moves=_ranker(), draw=4)
    compared = 0
    for _ in range(4):
        for count, share in ((50, 0.85), (40, 1.0), (7, 0.0)):
            drawn = climb.moves.draw(climb.current, count, share)
            fast = move_features(climb, drawn)
            keys = drawn.keys()
            np.testing.assert_array_equal(fast, move_features(climb, keys))
            # the rows split over lanes (threads), each with its own marks and caches
            context = incumbent_context(climb)
            for lanes in (2, 3):
                np.testing.assert_array_equal(fast, _features_in_lanes(context, drawn, lanes))
            # every moved op a hub (its lone move's sums, corrected for the others moved
            # with it): the same sums of whole bytes, so the same features exactly
            static = climb._advantage_static
            static.hub_touches = 1
            np.testing.assert_array_equal(fast, move_features(climb, drawn))
            np.testing.assert_array_equal(fast, _features_in_lanes(context, drawn, 2))
            static.hub_touches = HUB_TOUCHES
            np.testing.assert_allclose(fast, reference(climb, keys), rtol=1e-9, atol=1e-12)
            compared += int((fast != 0).any(axis=1).sum())
        c = climb._advantage_context
        np.testing.assert_array_equal(c.window, _window_memory(problem, c.place0, c.prio0,
                                                               c.tr0) / c.P)
        np.testing.assert_array_equal(c.rank0, _device_ranks(c.place0[None], c.prio0[None])[0])
        for name, value in context_arrays(climb).items():     # the compiled pass, exactly
            np.testing.assert_array_equal(getattr(c, name), value, err_msg=name)
        climb.run(climb.used + 120)
    assert compared > 0


def test_the_most_of_a_memory_curve_over_each_run_is_the_reference_one():
    """`_window_at` (a binary search, then the points inside the run scanned), on curves of
    several devices end to end, against numpy's searchsorted and the reference sparse table,
    repeated instants, runs before the first point and long runs included."""
    from advantage_reference import _range_max
    from regal.search.move_features import _window_at

    rng = np.random.default_rng(5)
    sizes = (1, 2, 7, 40, 300)
    curves = [(np.sort(rng.integers(0, size, size)).astype(np.float64),   # repeated instants
               rng.integers(0, 1000, size).astype(np.float64)) for size in sizes]
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    times = np.concatenate([t for t, _ in curves])
    live = np.concatenate([x for _, x in curves])
    start = rng.integers(-2, 302, 200).astype(np.float64)
    end = start + rng.choice([0, 1, 3, 50, 400], 200)
    for j, (t, x) in enumerate(curves):
        out = np.array([_window_at(ptr, times, live, start, end, j, v) for v in range(200)])
        after = np.searchsorted(t, start, side="right")
        lo = np.maximum(after - 1, 0)
        hi = np.maximum(np.searchsorted(t, end, side="left"), lo + 1)
        np.testing.assert_array_equal(out, np.where(after > 0, _range_max(x, lo, hi), 0.0))


def test_the_ranker_scores_writes_and_chromosomes_alike():
    problem = FEATURE_CASES[2]
    climb = Climb(problem, 200, 0, heuristics=()).run(100)
    drawn = climb.moves.draw(climb.current, 64, 0.85)
    ranker = _ranker()
    np.testing.assert_array_equal(ranker.rank_drawn(climb, drawn), ranker(climb, drawn.keys()))


def test_a_move_repeated_in_one_draw_has_the_features_it_has_alone():
    """The compiled features compute a lone op moved to a device once per call and copy it to
    the rows that repeat it (with other priority keys for the moved op, or a sending op's
    transfer key changed too): each row equals the row drawn alone and the dense reference."""
    from advantage_reference import move_features as reference
    from regal.decode import split

    problem = PROBLEMS[1]                                     # 70 ops, 4 devices
    climb = Climb(problem, 300, 3, heuristics=(), rank_moves=_ranker(), draw=4).run(200)
    n, d = problem.graph.num_nodes, problem.devices.count
    place = climb.moves.placement
    senders = [u for u in range(n) if problem.graph.output_ptr[u + 1] > problem.graph.output_ptr[u]]
    rows = []
    for v, key in ((5, 0.1), (40, 0.2), (5, 0.9), (12, 0.5), (40, 0.7), (5, 0.3)):
        keys = climb.current.copy()
        affinity, prio, transfer = split(keys, n, d)
        affinity[v] = 0.0
        affinity[v, (place[v] + 1 + (key > 0.5)) % d] = 1.0   # 0.9: another device
        prio[v] = key
        if key == 0.3:                                        # and a transfer key changed
            transfer[senders[0]] = 1.0 - transfer[senders[0]]
        rows.append(keys)
    rows = np.array(rows)
    together = move_features(climb, rows)
    alone = np.array([move_features(climb, row[None])[0] for row in rows])
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_allclose(together, reference(climb, rows), rtol=1e-9, atol=1e-12)
    assert (together[0] != together[1]).any() and (together[0] != together[2]).any()
    assert together[5][FEATURES.index("transfer_keys")] == 1.0
    assert together[0][FEATURES.index("transfer_keys")] == 0.0


def test_a_hub_moved_with_the_producer_of_a_tensor_it_waits_on():
    """p (device 1) makes x (100 bytes); h (device 0) reads x at two ports, holds 50 bytes
    while it runs and makes y (10 bytes, never read). Device 0 peaks at 160 while h runs:
    x's copy, waited on by h alone, and y. Swapping h and p: x and y leave device 0, 110
    bytes, whichever op the features take as the hub (the one touching more: h), and the
    cut is unchanged (x still crosses, now the other way)."""
    from advantage_reference import move_features as reference

    b = GraphBuilder()
    p = b.add_op("p", 1.0)
    b.add_output(p, 100)
    h = b.add_op("h", 1.0, temporary_memory=50)
    b.add_input(h, p)
    b.add_input(h, p)
    b.add_output(h, 10)
    climb = _climb_at(Problem(b.build(), DeviceSpec(2)), [1, 0], np.array([0.5, 0.5]))
    assert climb.moves.facts.device == 0 and climb.moves.facts.peaks.tolist() == [160, 100]
    plain = _features(climb, [0, 1])
    climb._advantage_static.hub_touches = 1
    hub = _features(climb, [0, 1])
    assert plain == hub
    assert hub["live_leave"] == pytest.approx(110 / 160) and hub["live_partial"] == 0
    assert hub["cut_edges"] == 0 and hub["cut_time"] == 0
    keys = climb.current.copy()
    keys[[0, 3]], keys[[1, 2]] = 1.0, 0.0                      # the same swap, as keys
    np.testing.assert_allclose(move_features(climb, keys[None]), reference(climb, keys[None]),
                               rtol=1e-9, atol=1e-12)
