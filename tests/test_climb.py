"""The local-search baseline: its budget, its determinism, its starts, its peak-directed moves.

The hand-made case is checked by brute force first (no single-op device move and no swap of
two priorities improves the start), so finding the optimum there needs the move that takes a
live tensor's producer and consumer off the peak device together.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from regal.search import climb as local_search
from regal.search.moves import peak_facts
from regal.search.starts import HEURISTICS, initial_solutions
from regal import synth
from regal.decode import decode, encode
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, solve
from regal.sim import DeviceSpec, evaluate

from helpers import random_graph
from search_cases import drawing_cases


@pytest.fixture
def model_runs(monkeypatch):
    """Counts chromosomes scored through regal.sim.evaluate and evaluations the heuristic
    starts report (they score themselves once through the registry)."""
    import regal.optimizers
    import regal.sim

    counts = {"evaluate": 0, "heuristics": 0}
    real_evaluate, real_solve = regal.sim.evaluate, regal.optimizers.solve

    def counting_evaluate(graph, devices, keys, *args, **kwargs):
        counts["evaluate"] += len(np.atleast_2d(keys))
        return real_evaluate(graph, devices, keys, *args, **kwargs)

    def counting_solve(name, *args, **kwargs):
        found = real_solve(name, *args, **kwargs)
        counts["heuristics"] += found.evaluations
        return found

    monkeypatch.setattr(regal.sim, "evaluate", counting_evaluate)
    monkeypatch.setattr(regal.optimizers, "solve", counting_solve)
    return counts


def _problems():
    graph = synth.random_dag(70, 5)
    single = evaluate(graph, DeviceSpec(1), np.concatenate(
        [np.ones(70), np.linspace(1, 0, 70), np.linspace(1, 0, 70)])[None, :])[0]
    return [Problem(graph, DeviceSpec(2)), Problem(graph, DeviceSpec(3)),
            Problem(graph, DeviceSpec(2, memory_limit=int(0.6 * single)), "makespan"),
            Problem(random_graph(np.random.default_rng(4), 25), DeviceSpec(4))]


PROBLEMS = _problems()


@pytest.mark.parametrize("which", range(len(PROBLEMS)))
@pytest.mark.parametrize("budget", (1, 2, 4, 9, 150))
def test_budget_is_never_exceeded_and_every_evaluation_is_counted(which, budget, model_runs):
    sol = local_search.local_search(PROBLEMS[which], budget, 1)
    spent = model_runs["evaluate"] + model_runs["heuristics"]
    assert spent <= budget
    assert sol.evaluations == spent


@pytest.mark.parametrize("which", range(len(PROBLEMS)))
def test_same_seed_same_answer(which):
    first = local_search.local_search(PROBLEMS[which], 300, 7)
    again = local_search.local_search(PROBLEMS[which], 300, 7)
    assert np.array_equal(first.placement, again.placement)
    assert np.array_equal(first.priority, again.priority)
    assert np.array_equal(first.transfer_priority, again.transfer_priority)
    assert first.value == again.value and first.extra == again.extra


@pytest.mark.parametrize("which", range(len(PROBLEMS)))
@pytest.mark.parametrize("seed", (0, 3))
def test_never_worse_than_its_best_start(which, seed):
    problem = PROBLEMS[which]
    starts = evaluate(problem.graph, problem.devices, initial_solutions(problem),
                      problem.objective)
    heuristics = [solve(name, problem, 1, seed).value for name in HEURISTICS]
    best_start = min(starts.min(), *heuristics)
    sol = solve("local-search", problem, 200, seed)
    assert sol.extra["initial_value"] == best_start
    assert sol.value <= best_start


# ---------------------------------------------------------------------------
# a peak only a peak-directed move fixes


def _two_tensors_forced_together(fillers: int = 100):
    """A -> X (100 B) -> B and C -> Y (100 B) -> D, with control edges A -> C -> B: on one
    device X and Y are live together in every order (peak 200). Moving A and B together to
    the other device halves it (100, optimal: X alone needs 100). Moving A or B alone keeps a
    copy of X on the first device while Y is allocated, so no single move helps. Ops without
    memory (run after D) make a random move unlikely to touch A, B, C or D."""
    b = GraphBuilder()
    a = b.add_op("A", 1.0)
    b.add_output(a, 100)
    c = b.add_op("C", 1.0)
    b.add_output(c, 100)
    b.add_control(a, c)
    consumer_b = b.add_op("B", 1.0)
    b.add_input(consumer_b, a)
    b.add_control(c, consumer_b)
    d = b.add_op("D", 1.0)
    b.add_input(d, c)
    for i in range(fillers):
        b.add_control(d, b.add_op(f"free{i}", 1.0))   # after D, so C runs right after A
    return b.build(), (a, consumer_b)


def test_the_hand_made_case_has_no_improving_single_move():
    graph, _ = _two_tensors_forced_together()
    problem = Problem(graph, DeviceSpec(2))
    n = graph.num_nodes
    start = initial_solutions(problem)
    values, peaks, _ = evaluate(graph, problem.devices, start, return_details=True)
    assert list(values) == [200.0, 200.0] and peaks[1].tolist() == [200, 0]  # single is best
    single = start[1]
    topo = single[2 * n:3 * n]
    neighbours = []
    for v in range(n):                                    # every one-op device move
        placement = np.zeros(n, np.int32)
        placement[v] = 1
        neighbours.append(encode(placement, topo, topo, 2))
    for u, v in itertools.combinations(range(n), 2):      # every swap of two priorities
        swapped = topo.copy()
        swapped[[u, v]] = swapped[[v, u]]
        neighbours.append(encode(np.zeros(n, np.int32), swapped, topo, 2))
    values, peaks, _ = evaluate(graph, problem.devices, np.stack(neighbours),
                                return_details=True)
    assert values.min() == 200.0                          # nothing lowers the peak ...
    assert peaks.sum(axis=1).min() >= 200                 # ... nor the sum of peaks


def test_peak_facts_name_the_live_tensors():
    graph, _ = _two_tensors_forced_together()
    problem = Problem(graph, DeviceSpec(2))
    n = graph.num_nodes
    topo = initial_solutions(problem)[1][2 * n:3 * n]
    facts = peak_facts(problem, np.zeros(n, np.int32), topo, topo)
    assert facts.device == 0 and facts.peaks.tolist() == [200, 0]
    assert sorted(facts.tensors.tolist()) == [0, 1] and facts.tensor_bytes.tolist() == [100, 100]
    assert not facts.remote.any()


@pytest.mark.parametrize("case", range(10))
def test_peak_facts_equal_the_numpy_reference(case):
    """The compiled listing (`moves._live_at`) gives every field of the numpy code it
    replaced (tests/move_reference.py), dtype for dtype, on random solutions of the drawing
    cases (1-4 devices, groups and pins, per-device limits, transfers in and out)."""
    from move_reference import reference_peak_facts

    problem = drawing_cases()[case]
    graph, d = problem.graph, problem.devices.count
    rng = np.random.default_rng(case)
    n = graph.num_nodes
    for _ in range(6):
        keys = rng.random((1, n * (d + 2)))
        placement, priority, transfer = decode(keys, graph, problem.devices)
        facts, want = peak_facts(problem, placement[0], priority[0], transfer[0]), \
            reference_peak_facts(problem, placement[0], priority[0], transfer[0])
        assert facts.device == want["device"] and facts.time == want["time"]
        for field in ("tensors", "tensor_bytes", "remote", "ops", "op_bytes", "order",
                      "position", "start", "end", "peaks", "weights"):
            got = getattr(facts, field)
            assert got.dtype == want[field].dtype, field
            np.testing.assert_array_equal(got, want[field], err_msg=field)
        assert len(facts.orders) == d
        for got, expected in zip(facts.orders, want["orders"]):
            np.testing.assert_array_equal(got, expected)


def test_opening_caps_the_batch_for_the_first_evaluations_per_op(monkeypatch):
    """`Climb(opening=(B, E))`: every step taken before the climb has spent E x n evaluations
    evaluates at most B neighbours, later steps adapt up to `batch_size` again; E = 0 is no
    opening (the same climb, step for step), and bad openings are refused by name."""
    graph = synth.random_dag(60, 5)
    problem = Problem(graph, DeviceSpec(4))
    n = graph.num_nodes
    steps = []
    drawn = local_search.Climb._drawn

    def recording(self, count):
        steps.append((self.used, count))
        return drawn(self, count)

    monkeypatch.setattr(local_search.Climb, "_drawn", recording)
    plain = local_search.Climb(problem, 2500, 3, heuristics=()).run(2500)
    plain_steps, steps[:] = list(steps), []
    assert max(count for _, count in plain_steps) > 5
    zero = local_search.Climb(problem, 2500, 3, heuristics=(), opening=(5, 0)).run(2500)
    assert steps == plain_steps and zero.best_key == plain.best_key
    steps.clear()
    opened = local_search.Climb(problem, 2500, 3, heuristics=(), opening=(5, 15)).run(2500)
    early = [count for used, count in steps if used < 15 * n]
    late = [count for used, count in steps if used >= 15 * n]
    assert early and max(early) <= 5
    assert late and max(late) > 5
    assert opened.used == 2500
    for bad in ((0, 10), (2.5, 10), (True, 10), (8, -1), (8, float("nan")), 8, (8,)):
        with pytest.raises(ValueError, match="opening"):
            local_search.Climb(problem, 300, 0, heuristics=(), opening=bad)


def test_peak_directed_move_finds_the_optimum():
    graph, _ = _two_tensors_forced_together()
    problem = Problem(graph, DeviceSpec(2))
    for seed in range(5):
        sol = local_search.local_search(problem, 40, seed, heuristics=())
        assert sol.extra["initial_value"] == 200.0
        assert sol.value == 100.0


def test_uniform_moves_alone_do_not_find_it():
    """The same budget without peak-directed moves stays at the start (the test above is not
    won by luck or by the starts)."""
    graph, _ = _two_tensors_forced_together()
    problem = Problem(graph, DeviceSpec(2))
    for seed in range(5):
        assert local_search.local_search(problem, 40, seed, heuristics=(), directed=0.0).value == 200.0


# ---------------------------------------------------------------------------
# colocation groups and pins


def test_groups_move_whole_and_pins_hold():
    from regal.decode import colocation_violation

    graph, (a, consumer_b) = _two_tensors_forced_together(fillers=30)
    b = GraphBuilder()
    # the same graph with B colocated with a free op, and another free op pinned to device 1
    for v in range(graph.num_nodes):
        b.add_op(str(graph.names[v]), float(graph.compute_cost[v]))
        if v >= 4:
            b.add_control(3, v)
    b.add_output(0, 100)
    b.add_output(1, 100)
    b.add_control(0, 1)
    b.add_input(2, 0)
    b.add_control(1, 2)
    b.add_input(3, 1)
    b.colocate(consumer_b, 4)
    b.pin(5, 1)
    constrained = b.build()
    problem = Problem(constrained, DeviceSpec(2))
    for seed in range(3):
        sol = local_search.local_search(problem, 60, seed, heuristics=())
        assert colocation_violation(constrained, sol.placement) is None
        assert sol.placement[5] == 1 and sol.placement[consumer_b] == sol.placement[4]
        assert sol.value == 100.0
    with_heuristics = solve("local-search", problem, 60, 0)
    assert colocation_violation(constrained, with_heuristics.placement) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_a_warm_start_is_never_lost(seed):
    """Started from a better solution than every heuristic, the answer is at least as good."""
    problem = Problem(synth.random_dag(60, 30 + seed), DeviceSpec(3))
    warm = solve("brkga", problem, 3000, seed)
    found = solve("local-search", problem, 50, seed, initial=warm, heuristics=())
    assert found.value <= warm.value
    assert found.evaluations <= 50
    # a chromosome works as well as a Solution
    again = solve("local-search", problem, 50, seed, initial=warm.keys(), heuristics=())
    assert again.value == found.value


# ---------------------------------------------------------------------------
# schedules already scored are looked up, not evaluated again


@pytest.fixture
def evaluated(monkeypatch) -> list:
    """Digests of every schedule the simulator evaluates during the test, in order."""
    import regal.sim
    from regal.decode import decode, schedule_digests

    seen = []
    real_evaluate = regal.sim.evaluate

    def recording_evaluate(graph, devices, keys, *args, **kwargs):
        seen.extend(schedule_digests(graph, *decode(np.atleast_2d(keys), graph, devices)))
        return real_evaluate(graph, devices, keys, *args, **kwargs)

    monkeypatch.setattr(regal.sim, "evaluate", recording_evaluate)
    return seen


def test_no_schedule_is_evaluated_twice(evaluated):
    problem, seen = PROBLEMS[0], evaluated
    found = local_search.local_search(problem, 2000, 0, heuristics=())
    assert found.evaluations == len(seen) == 2000
    assert len(set(seen)) == len(seen)
    assert found.extra["repeats"] > 0            # repeats were proposed, and cost nothing


def test_a_paused_climb_resumes_without_paying_again(evaluated):
    """`Climb.run` in steps: each step stops at its budget, a schedule scored before the
    pause is never evaluated after it, the best only improves, and the answer is the
    simulator's verdict on the best chromosome."""
    problem, seen = PROBLEMS[0], evaluated
    climb = local_search.Climb(problem, 1500, 3, heuristics=())
    values = []
    for target in (37, 400, 401, 1100, 1500):
        climb.run(target)
        assert climb.used == len(seen) == target
        values.append(climb.value)
    assert len(set(seen)) == len(seen)
    assert values == sorted(values, reverse=True)
    found = climb.solution()
    assert found.value == climb.value and found.evaluations == 1500
    climb.run(1500)                                  # nothing left: no evaluation
    assert len(seen) == 1500
    # in one go, the same seed is `solve`, draw for draw
    whole = local_search.Climb(problem, 1500, 3, heuristics=()).run(1500).solution()
    same = local_search.local_search(problem, 1500, 3, heuristics=())
    assert whole.value == same.value and whole.extra == same.extra


def test_a_tiny_search_space_is_exhausted_not_paid_for_again():
    """Three ops on two devices have few distinct schedules (counted by brute force over
    every placement and order): the search stops once it has seen what it can reach,
    having spent at most that many evaluations (plus the heuristic starts', which score
    themselves), with the brute-force optimum."""
    from regal.decode import schedule_digests
    from regal.sim import simulate

    b = GraphBuilder()
    for name, cost, size in (("a", 1.0, 40), ("b", 2.0, 24), ("c", 1.0, 16)):
        v = b.add_op(name, cost, temporary_memory=8)
        b.add_output(v, size)
    b.add_input(2, 0)
    b.add_input(2, 1)
    graph = b.build()
    problem = Problem(graph, DeviceSpec(2))
    digests, best = set(), np.inf
    for placement in itertools.product(range(2), repeat=3):
        for order in itertools.permutations(range(3)):
            for sends in itertools.permutations(range(3)):
                placement_, priority, transfer = (np.array(placement, np.int32),
                                                  np.argsort(order) * -1.0,
                                                  np.argsort(sends) * -1.0)
                digests.update(schedule_digests(graph, placement_, priority, transfer))
                best = min(best, float(simulate(graph, problem.devices, placement_,
                                                priority, transfer).peak.max()))
    found = local_search.local_search(problem, 5000, 0)
    assert found.evaluations <= len(digests) + len(HEURISTICS)
    assert len(digests) < 5000 and found.extra["repeats"] > 1000
    assert found.value == best


def test_a_move_ranker_chooses_which_drawn_neighbours_are_evaluated():
    """`rank_moves`: with `draw` k each step draws k times the batch and evaluates the
    best-ranked; a ranker that keeps the drawing order at k = 1 changes nothing, and one that
    ranks by the simulator's value (the oracle of experiments/ceilings.py) sends the drawn
    neighbours of lowest value to evaluation, each once and none that this incumbent sent
    before (while enough such are drawn)."""
    problem = PROBLEMS[0]
    plain = local_search.Climb(problem, 600, 5, heuristics=()).run(600).solution()
    kept = local_search.Climb(problem, 600, 5, heuristics=(),
                              rank_moves=lambda climb, drawn: np.arange(len(drawn)))
    assert kept.run(600).solution().extra == plain.extra

    seen = []

    def oracle(climb, drawn):
        values = evaluate(problem.graph, problem.devices, drawn, problem.objective)
        seen.append((climb.current.tobytes(), drawn.copy(), values))
        return values

    climb = local_search.Climb(problem, 600, 5, heuristics=(), rank_moves=oracle, draw=4)
    real_drawn = climb._drawn
    chosen = []

    def drawn_and_kept(count):
        out = real_drawn(count)
        chosen.append(out)
        return out

    climb._drawn = drawn_and_kept
    found = climb.run(600).solution()
    assert found.evaluations <= 600 and seen
    tried: dict = {}
    checked = 0
    for (incumbent, drawn, values), kept in zip(seen, chosen):
        assert len(drawn) == 4 * len(kept)
        before = tried.setdefault(incumbent, set())
        kept_rows = [row.tobytes() for row in kept]
        fresh = {}
        for row, value in zip(drawn, values):
            if row.tobytes() not in before:
                fresh.setdefault(row.tobytes(), value)
        if len(fresh) >= len(kept):
            checked += 1
            assert len(set(kept_rows)) == len(kept) and set(kept_rows) <= set(fresh)
            worst = max(fresh[row] for row in kept_rows)
            assert all(value >= worst for row, value in fresh.items() if row not in kept_rows)
        before.update(kept_rows)
    assert checked > len(seen) // 2
    with pytest.raises(ValueError, match="draw > 1 needs rank_moves"):
        local_search.Climb(problem, 100, 0, heuristics=(), draw=2)
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        local_search.Climb(problem, 100, 0, heuristics=(), draw=2,
                           rank_moves=lambda climb, drawn: np.zeros(3)).run(100)


def test_an_unranked_share_evaluates_the_first_drawn_whatever_their_rank():
    """`unranked_share` u: each ranked step evaluates the first round(u x batch) of its draw
    in the drawing order, then the best-ranked of the rest. A ranker that ranks the draw
    backwards shows both parts; the restart gate still reads the ranker's own scores; u = 0
    is the plain ranked climb, step for step."""
    problem = PROBLEMS[0]
    backwards = lambda climb, drawn: -np.arange(len(drawn), dtype=np.float64)  # noqa: E731
    steps = []

    def recording(share):
        climb = local_search.Climb(problem, 400, 3, heuristics=(), rank_moves=backwards,
                                   draw=4, unranked_share=share)
        real_draw = climb.moves.draw

        def draw(keys, count, directed):
            drawn = real_draw(keys, count, directed)
            steps.append((keys.tobytes(), drawn.keys(), count // 4))
            return drawn

        climb.moves.draw = draw
        chosen = []
        real_drawn = climb._drawn
        climb._drawn = lambda count: chosen.append(real_drawn(count)) or chosen[-1]
        return climb, chosen

    climb, chosen = recording(0.25)
    climb.run(400)
    checked, tried = 0, {}
    for (incumbent, drawn, count), kept in zip(steps, chosen):
        rows = [row.tobytes() for row in drawn]
        q = int(round(0.25 * count))
        order = list(range(q)) + list(range(len(rows) - 1, q - 1, -1))
        picked = _untried_first_reference(rows, order, count, tried.setdefault(incumbent, set()))
        assert kept is not None and [row.tobytes() for row in kept] == [rows[i] for i in picked]
        checked += q > 0
    assert checked > 5

    plain = local_search.Climb(problem, 400, 3, heuristics=(), rank_moves=backwards, draw=4)
    zero = local_search.Climb(problem, 400, 3, heuristics=(), rank_moves=backwards, draw=4,
                              unranked_share=0.0)
    assert plain.run(400).solution().extra == zero.run(400).solution().extra

    class Gate:
        seen = []

        def rank_drawn(self, climb, drawn):
            return np.linspace(1.0, 0.0, len(drawn))

        def restart_now(self, climb, scores, count):
            self.seen.append(np.asarray(scores).copy())
            return False

    gate = Gate()
    local_search.Climb(problem, 200, 3, heuristics=(), rank_moves=gate, draw=4,
                       unranked_share=0.5).run(200)
    assert gate.seen and all(np.array_equal(s, np.linspace(1.0, 0.0, len(s))) for s in gate.seen)
    for bad in (-0.1, 1.5, "half", True, None):
        with pytest.raises(ValueError, match="unranked_share"):
            local_search.Climb(problem, 100, 0, heuristics=(), unranked_share=bad)


def _untried_first_reference(hashes, order, count, tried):
    """The set-based filter `Climb._untried_first` was before it was compiled."""
    fresh, again, seen = [], [], set()
    for i in order:
        h = hashes[i] if isinstance(hashes[i], bytes) else int(hashes[i])
        if h in seen or h in tried:
            if len(again) < count:
                again.append(i)
        else:
            seen.add(h)
            fresh.append(i)
            if len(fresh) == count:
                break
    tried.update(seen)
    return (fresh + again)[:count]


@pytest.mark.parametrize("seed", range(6))
def test_untried_first_equals_the_set_based_filter(seed):
    """The compiled filter (an open-addressing set that the climb grows) picks what the set
    of Python ints picked, call after call on one incumbent: hashes repeat within a draw
    and across draws, include 0, and outgrow the table several times."""
    from regal.search.draw_kernel import rehashed, untried_first

    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**63, 40 + 30 * seed, dtype=np.uint64) * np.uint64(2)
    pool[0] = 0
    table, state, tried = np.zeros(8, np.uint64), np.zeros(2, np.int64), set()
    for _ in range(30):
        m = int(rng.integers(1, 60))
        hashes = pool[rng.integers(0, len(pool), m)]
        order = rng.permutation(m).astype(np.int64)
        count = int(rng.integers(1, m + 1))
        need = 2 * (int(state[0]) + m)
        if len(table) < need:
            table = rehashed(table, 1 << (need - 1).bit_length())
        got = untried_first(hashes, order, count, table, state)
        assert got.tolist() == _untried_first_reference(hashes, order.tolist(), count, tried)
        assert state[0] == len(tried) and np.count_nonzero(table) + state[1] == len(tried)
    assert untried_first(pool[:5], np.arange(5), 0, table, state).tolist() == []


# ---------------------------------------------------------------------------
# the compiled drawing (regal.search.draw_kernel) equals the Python moves it replaced


DRAWING_CASES = drawing_cases()


@pytest.mark.parametrize("which", range(len(DRAWING_CASES)))
def test_the_compiled_drawing_equals_the_python_moves(which):
    """Same incumbent, same generator state: the same neighbours, key for key, and the
    generator left in the same state, for incumbents along a climb (with groups and pins,
    limits, one to four devices, every share of peak-directed moves, and no peak facts)."""
    from move_reference import ReferenceMoves
    from regal.search.moves import Moves

    problem = DRAWING_CASES[which]
    climb = local_search.Climb(problem, 400, which, heuristics=())
    for stage in range(4):
        for seed, (count, share) in enumerate([(1, 0.85), (37, 0.85), (64, 1.0), (20, 0.0)]):
            fast = Moves(problem, np.random.default_rng(seed))
            slow = ReferenceMoves(problem, np.random.default_rng(seed))
            for moves in (fast, slow):
                moves.facts = None if stage == 3 and seed == 1 else climb.moves.facts
                moves.placement = climb.moves.placement
            for _ in range(3):
                np.testing.assert_array_equal(fast.neighbours(climb.current, count, share),
                                              slow.neighbours(climb.current, count, share))
            assert fast.rng.random() == slow.rng.random()
        climb.run(climb.used + 60)           # on to another incumbent


KICK_CASES = [Problem(synth.random_dag(400, 3), DeviceSpec(count)) for count in (1, 2, 4)] \
    + DRAWING_CASES[:3]


@pytest.mark.parametrize("which", range(len(KICK_CASES)))
def test_a_kick_keeps_its_order_in_step_as_sorting_anew_would(which):
    """The kick's swaps keep the priority order up to date instead of sorting it per swap
    (8 swaps a kick at 400 ops): the same keys and the same generator state as the kick that
    sorted, on incumbents whose keys tie in runs (ties go to the lower id) and on distinct
    ones."""
    from move_reference import ReferenceMoves
    from regal.search.moves import Moves

    problem = KICK_CASES[which]
    climb = local_search.Climb(problem, 400, which, heuristics=()).run(100)
    n, d = problem.graph.num_nodes, problem.devices.count
    rng = np.random.default_rng(which)
    for trial in range(6):
        keys = climb.current.copy()
        if trial % 2:              # a few distinct values only: long runs of equal keys
            keys[n * d:] = rng.integers(0, 4, len(keys) - n * d) / 4.0
        fast = Moves(problem, np.random.default_rng(trial))
        slow = ReferenceMoves(problem, np.random.default_rng(trial))
        for moves in (fast, slow):
            moves.facts, moves.placement = climb.moves.facts, climb.moves.placement
        for _ in range(3):
            np.testing.assert_array_equal(fast.kick(keys), slow.kick(keys))
        assert fast.rng.random() == slow.rng.random()


@pytest.mark.parametrize("which", [0, 3, 5, 9])
def test_a_climb_takes_the_same_steps_with_the_python_moves(which):
    from move_reference import ReferenceMoves

    problem = DRAWING_CASES[which]
    answers = []
    for reference in (False, True):
        climb = local_search.Climb(problem, 500, 3, heuristics=())
        if reference:
            climb.moves.__class__ = ReferenceMoves
        answers.append(climb.run(500).solution())
    fast, slow = answers
    assert fast.extra == slow.extra and fast.value == slow.value
    np.testing.assert_array_equal(fast.placement, slow.placement)
    np.testing.assert_array_equal(fast.priority, slow.priority)


def test_drawn_writes_give_the_keys_and_hash_alike_exactly_when_equal():
    from regal.search.draw_kernel import row_hashes

    problem = DRAWING_CASES[4]
    climb = local_search.Climb(problem, 200, 0, heuristics=()).run(100)
    drawn = climb.moves.draw(climb.current, 300, 0.85)
    keys = drawn.keys()
    assert keys.shape == (300, len(climb.current))
    np.testing.assert_array_equal(drawn.keys([5, 2, 5]), keys[[5, 2, 5]])
    hashes = row_hashes(climb.moves.n, drawn.row_ptr, drawn.kind, drawn.op,
                        drawn.value.view(np.int64))
    rows = [row.tobytes() for row in keys]
    for i in range(len(rows)):
        for j in range(i):
            assert (hashes[i] == hashes[j]) == (rows[i] == rows[j])
    assert len(set(rows)) < len(rows)          # the case has repeats to tell apart


def test_changes_lists_a_rows_changed_ops_in_id_order_scanned_or_sorted():
    """`changes` lists the ops each row changes in ascending ids, with their device and key:
    a row of many ops over few ids (a run-order window: its marks scanned), one of few ops
    over the whole graph (sorted), a short one, against the writes applied in numpy."""
    from regal.search.draw_kernel import ASSIGN, PRIORITY, changes

    n, d = 2000, 3
    rng = np.random.default_rng(5)
    place0 = rng.integers(0, d, n)
    prio0, tr0 = rng.random(n), rng.random(n)
    rows = [rng.permutation(np.arange(300, 380)), rng.choice(n, 40, replace=False),
            np.array([7, 3, 3, 1999])]
    kinds, ops, values, row_ptr = [], [], [], [0]
    for row in rows:
        for i, v in enumerate(row):
            if i % 5 == 1:
                kinds.append(PRIORITY)
                values.append(prio0[v] + 0.5)
            else:               # every 5th op written back to its own device: unchanged
                kinds.append(ASSIGN)
                values.append(float(place0[v] if i % 5 == 0 else (place0[v] + 1) % d))
            ops.append(v)
        row_ptr.append(len(ops))
    ptr, op, dev, prio, transfer, mark = changes(
        n, np.array(row_ptr), np.array(kinds), np.array(ops), np.array(values), place0,
        prio0, tr0, np.zeros(n, bool), np.full(n, -1), False, np.arange(n),
        np.arange(n + 1), np.arange(n), np.zeros((5, n), np.int64), np.zeros((2, n)), 0)
    assert mark == len(rows) and not transfer.any()
    for r, row in enumerate(rows):
        device, key = place0.copy(), prio0.copy()
        for p in range(row_ptr[r], row_ptr[r + 1]):
            if kinds[p] == ASSIGN:
                device[ops[p]] = int(values[p])
            else:
                key[ops[p]] = values[p]
        changed = np.flatnonzero((device != place0) | (key != prio0))
        assert 2 <= len(changed) < len(set(row.tolist()))
        np.testing.assert_array_equal(op[ptr[r]:ptr[r + 1]], changed)
        np.testing.assert_array_equal(dev[ptr[r]:ptr[r + 1]], device[changed])
        np.testing.assert_array_equal(prio[ptr[r]:ptr[r + 1]], key[changed])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 50, 2000])
def test_descending_order_is_the_stable_argsort(n):
    """The incumbent's key orders: read off `rerank`ed keys, sorted otherwise; both equal
    `np.argsort(-values, kind="stable")` (ties by id), also for keys that look reranked but
    are not (a tie, half of them from another order)."""
    from regal.search.moves import descending_order, rerank

    rng = np.random.default_rng(n)
    reranked = rerank(rng.random(n))
    tied = reranked.copy()
    tied[:2] = tied[min(2, n - 1)] if n else tied[:2]
    half = reranked.copy()
    half[:n // 2] = rerank(rng.random(n))[:n // 2]
    for values in (rng.random(n), reranked, np.round(rng.random(n) * 3) / 3, tied, half):
        order = descending_order(values)
        assert order.dtype == np.int64
        np.testing.assert_array_equal(order, np.argsort(-values, kind="stable"))
