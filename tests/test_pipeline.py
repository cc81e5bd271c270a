"""The search pipeline of `regal` and `seeded-brkga` (regal.search.pipeline, .schedule): BRKGA,
then climbs from its best and afresh from the heuristic starts, raced."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from regal import synth
from regal.optimizers import Problem, solve
from regal.search.pipeline import race_climbs
from regal.search.schedule import DEFAULT_SCHEDULE, split_budget
from regal.sim import DeviceSpec, simulate


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(synth.random_dag(120, 5), DeviceSpec(3))


def test_split_budget_by_hand():
    POLISH_SHARE = DEFAULT_SCHEDULE.climb_share

    assert split_budget(5000) == (5000 - round(5000 * POLISH_SHARE), round(5000 * POLISH_SHARE))
    assert split_budget(5000, 0.4) == (3000, 2000)
    assert split_budget(5001, 0.4) == (3001, 2000)
    assert split_budget(5000, 0.0) == (5000, 0)
    assert split_budget(15, 0.4) == (15, 0)        # 6 evaluations: too few to polish
    assert split_budget(20, 0.4) == (12, 8)
    # BRKGA keeps `keep` evaluations; the polish gives way, and vanishes under 8
    assert split_budget(40, 0.9, keep=8) == (8, 32)
    assert split_budget(20, 0.5, keep=8) == (10, 10)
    assert split_budget(15, 0.5, keep=8) == (15, 0)
    for share in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="polish"):
            split_budget(5000, share)


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_first_phase_is_brkga_at_its_share_and_the_polish_only_improves(problem, method):
    """The BRKGA phase is exactly the BRKGA-only run at 60% of the budget (same seed); the
    polish spends the rest and its answer is the simulator's verdict, never worse."""
    found = solve(method, problem, 1000, 3, polish_share=0.4)
    brkga_only = solve(method, problem, 600, 3, polish_share=0.0)
    assert found.evaluations == 1000 and brkga_only.evaluations == 600
    assert found.extra["before_polish"] == brkga_only.value
    assert found.extra["polish_evaluations"] == 400
    assert found.value <= brkga_only.value
    result = simulate(problem.graph, problem.devices, found.placement, found.priority,
                      found.transfer_priority)
    assert found.value == float(result.objective("peak_memory"))
    assert found.method == method and "history" in found.extra   # BRKGA's extras are kept


def test_polish_never_returns_worse_and_counts_both_searches(problem):
    start = solve("brkga", problem, 200, 1)
    better = race_climbs(problem, start, 300, 1)
    assert better.value <= start.value
    assert better.evaluations == start.evaluations + 300
    assert better.extra["before_polish"] == start.value and better.method == start.method


def test_polish_share_zero_is_the_brkga_search_draw_for_draw(problem):
    from regal.policy.reference import reference_for
    from regal.search.pipeline import brkga_phase as search

    mine = solve("seeded-brkga", problem, 500, 2, polish_share=0.0)
    reference = reference_for(problem.graph, problem.devices)
    plain = search(problem, 500, 2, initial=reference.seeds, spent=reference.evaluations)
    np.testing.assert_array_equal(mine.placement, plain.placement)
    np.testing.assert_array_equal(mine.priority, plain.priority)
    assert mine.value == plain.value and "before_polish" not in mine.extra
    assert mine.extra["history"] == plain.extra["history"]


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_small_budgets_that_ran_before_the_polish_still_run(problem, method):
    """BRKGA keeps what its reference and seeds need (the polish gives way): budget 15 once
    left BRKGA 7 evaluations, too few for the reference's 4 evaluations and 4 seeds."""
    for budget in (8, 12, 15, 16, 20, 31, 40):
        found = solve(method, problem, budget, 0)
        assert found.evaluations == budget, budget
    found = solve(method, problem, 40, 0, polish_share=0.9)   # 36 asked, BRKGA keeps 8
    assert found.evaluations == 40 and found.extra["polish_evaluations"] == 32


def test_one_round_of_two_climbs_is_two_independent_local_searches(problem):
    """One fresh climb and one round at half the polish: the climb from `found` and the fresh
    climb (seed + 1) each spend half, as two local searches would; the answer is the best."""
    start = solve("brkga", problem, 200, 1)
    both = race_climbs(problem, start, 400, 1, fresh_climbs=1, race=(0.5,))
    climbed = solve("local-search", problem, 200, 1, heuristics=(), initial=[start])
    fresh = solve("local-search", problem, 200, 2)
    assert both.extra["climbed_value"] == climbed.value
    assert both.extra["lineage_values"] == [climbed.value, fresh.value]
    assert both.extra["lineage_evaluations"] == [200, 200]
    assert both.value == min(start.value, climbed.value, fresh.value)
    assert both.extra["polish_winner"] == ("fresh-1" if fresh.value < climbed.value else "climb")
    assert both.evaluations == start.evaluations + 400
    assert both.extra["polish_evaluations"] == 400 and both.method == start.method
    # a first round under 8 evaluations is not worth the fresh starts: one climb spends it all
    small = race_climbs(problem, start, 14, 1, fresh_climbs=1, race=(0.5,))
    assert len(small.extra["lineage_values"]) == 1 and small.extra["polish_evaluations"] == 14
    assert small.value == solve("local-search", problem, 14, 1, heuristics=(),
                                initial=[start]).value


def test_successive_halving_by_hand(problem):
    """Three climbs to 10% each, the better two to 30%, the leader spends the rest: redone
    by hand with `Climb`, pausing and resuming exactly as the race does."""
    from regal.search.climb import Climb

    start = solve("brkga", problem, 150, 2)
    raced = race_climbs(problem, start, 600, 5, fresh_climbs=2, race=(0.1, 0.3))
    climbs = [Climb(problem, 60, 5, heuristics=(), initial=[start]),
              Climb(problem, 60, 6), Climb(problem, 60, 7)]
    for climb in climbs:
        climb.run(60)
    alive = sorted(range(3), key=lambda i: (climbs[i].best_key, i))[:2]
    for i in alive:
        climbs[i].run(180)
    leader, other = sorted(alive, key=lambda i: (climbs[i].best_key, i))
    dropped = ({0, 1, 2} - set(alive)).pop()
    climbs[leader].run(600 - climbs[other].used - climbs[dropped].used)
    assert raced.extra["lineage_evaluations"] == [climb.used for climb in climbs]
    assert raced.extra["lineage_values"] == [climb.value for climb in climbs]
    assert sum(raced.extra["lineage_evaluations"]) == 600 == raced.extra["polish_evaluations"]
    assert climbs[dropped].used == 60 and climbs[other].used == 180
    assert raced.value == min(climb.value for climb in climbs) <= start.value
    assert raced.evaluations == start.evaluations + 600


def test_race_settings_are_checked():
    from regal.search.schedule import check_race

    assert check_race(2, (0.075, 0.225)) == (2, (0.075, 0.225))
    assert check_race(0, ()) == (0, ())
    assert check_race(1, [0.5]) == (1, (0.5,))
    for count in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="fresh_climbs"):
            check_race(count, (0.1,))
    # shares: a sequence, increasing, inside (0, 1), allotting no more than the polish
    for race in ((), (0.0,), (1.0,), (0.3, 0.2), (0.2, 0.2), "ab", 0.5, (0.4,), (0.3, 0.5)):
        with pytest.raises(ValueError, match="race"):
            check_race(2, race)
    assert check_race(2, (0.3, 0.35)) == (2, (0.3, 0.35))   # 3 x 0.3 + 2 x 0.05 = 1


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_any_race_spends_the_budget_and_bad_settings_are_refused(problem, method):
    """Small budgets and uneven rounds still spend exactly the budget; bad settings are
    refused even when no polish runs."""
    for budget in (16, 20, 37, 50, 100, 333):
        for climbs, race in ((0, ()), (1, (0.5,)), (2, (0.075, 0.225)), (3, (0.1, 0.2, 0.3)),
                             (2, (0.3, 0.35))):
            found = solve(method, problem, budget, 0, fresh_climbs=climbs, race=race)
            assert found.evaluations == budget, (budget, climbs, race)
    for budget, polish_share in ((8, 0.8), (100, 0.0), (100, 0.5)):
        with pytest.raises(ValueError, match="fresh_climbs"):
            solve(method, problem, budget, 0, polish_share=polish_share, fresh_climbs=-1)
        with pytest.raises(ValueError, match="race"):
            solve(method, problem, budget, 0, polish_share=polish_share, race=(0.6,))


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_the_default_schedule(problem, method):
    """BRKGA on 1 - POLISH_SHARE of the budget, then FRESH_CLIMBS fresh climbs race the one
    from BRKGA's best (RACE); progress never reports a worse best than before, and ends at
    the answer."""
    POLISH_SHARE, FRESH_CLIMBS, RACE = (DEFAULT_SCHEDULE.climb_share,
                                        DEFAULT_SCHEDULE.fresh_climbs, DEFAULT_SCHEDULE.race)

    seen = []
    found = solve(method, problem, 1000, 3, progress=lambda used, best: seen.append((used, best)))
    polish_budget = round(1000 * POLISH_SHARE)
    brkga_only = solve(method, problem, 1000 - polish_budget, 3, polish_share=0.0)
    assert found.extra["before_polish"] == brkga_only.value
    assert found.extra["polish_evaluations"] == polish_budget == 1000 - brkga_only.evaluations
    assert len(found.extra["lineage_values"]) == FRESH_CLIMBS + 1
    ranked = None                           # regal's climbs rank their moves (the twin's not)
    if method == "regal":
        from regal.regal_method import RANKER_DRAW, load_move_ranker
        ranked = dict(rank_moves=load_move_ranker(), draw=RANKER_DRAW)
    again = race_climbs(problem, brkga_only, polish_budget, 3, fresh_climbs=FRESH_CLIMBS,
                        race=RACE, climb_options=ranked)
    assert found.extra["lineage_values"] == again.extra["lineage_values"]
    assert found.value == again.value == min(found.extra["lineage_values"])
    assert min(found.extra["lineage_evaluations"]) == int(polish_budget * RACE[0])
    used, best = zip(*seen)
    assert list(used) == sorted(used) and used[-1] == 1000
    assert all(b >= a for a, b in zip(best[1:], best[:-1])) and best[-1] == found.value


def test_fresh_climbs_run_the_seed_free_heuristics_once(problem, monkeypatch):
    """m-topo and m-ETF give the same answer whatever the seed: the race's fresh climbs share
    them (one run each), gp-dfs runs per climb, and the answer is what separate runs give."""
    import regal.optimizers as optimizers
    from regal.search.starts import HEURISTICS, SEEDLESS

    start = solve("brkga", problem, 150, 2)
    expected = race_climbs(problem, start, 600, 5, fresh_climbs=2, race=(0.1, 0.3))
    calls = []
    real_solve = optimizers.solve

    def counting_solve(method, *args, **kwargs):
        calls.append(method)
        return real_solve(method, *args, **kwargs)

    monkeypatch.setattr(optimizers, "solve", counting_solve)
    again = race_climbs(problem, start, 600, 5, fresh_climbs=2, race=(0.1, 0.3))
    assert sorted(calls) == sorted(["gp-dfs", "gp-dfs", *(h for h in SEEDLESS if h in HEURISTICS)])
    assert again.extra["lineage_values"] == expected.extra["lineage_values"]
    assert again.extra["lineage_evaluations"] == expected.extra["lineage_evaluations"]


def test_every_climb_of_the_race_gets_the_move_ranker(problem):
    """`climb_options` reach each raced climb: a ranker called by the climbs of
    `seeded-brkga` sees `draw` times their batches, and one that keeps the drawing order
    gives the answer of the pipeline without it."""
    from regal.search.pipeline import solve_seeded_brkga

    calls = []

    def keep_order(climb, drawn):
        calls.append((climb.seed, len(drawn)))
        return np.arange(len(drawn))

    plain = solve_seeded_brkga(problem, 1500, 2)
    same = solve_seeded_brkga(problem, 1500, 2, climb_options=dict(rank_moves=keep_order))
    timeless = ("polish_time",)
    assert same.value == plain.value and np.array_equal(same.placement, plain.placement)
    assert {k: v for k, v in same.extra.items() if k not in timeless} == \
        {k: v for k, v in plain.extra.items() if k not in timeless}
    assert {seed for seed, _ in calls} == {2, 3, 4}      # the climb from BRKGA, two fresh ones
    calls.clear()
    solve_seeded_brkga(problem, 1500, 2, climb_options=dict(rank_moves=keep_order, draw=3))
    assert calls and all(size % 3 == 0 for _, size in calls)


def _microbatched_chain(layers: int, batches: int):
    """`batches` micro-batches through a chain of `layers` layers and back, a variable per
    layer, the gradients summed in order and one update per layer: names as the importer
    writes them (`microbatchM/...`)."""
    from regal.graph_builder import GraphBuilder

    g = GraphBuilder()
    ids = {}

    def op(name, cost, size, *inputs):
        ids[name] = g.add_op(name, cost)
        g.add_output(ids[name], size)
        for src in inputs:
            g.add_input(ids[name], ids[src])
    for k in range(layers):
        op(f"l{k}/kernel", 1.0, 64)
    for m in range(batches):
        p = f"microbatch{m}"
        prev = None
        for k in range(layers):
            op(f"{p}/l{k}/MatMul", 40.0, 400, f"l{k}/kernel", *([prev] if prev else []))
            prev = f"{p}/l{k}/MatMul"
        for k in reversed(range(layers)):
            op(f"{p}/gradients/l{k}/MatMul_grad/MatMul", 80.0, 64, prev, f"{p}/l{k}/MatMul")
            prev = f"{p}/gradients/l{k}/MatMul_grad/MatMul"
    for k in range(layers):
        total = f"microbatch0/gradients/l{k}/MatMul_grad/MatMul"
        for m in range(1, batches):
            op(f"gradients_sum/l{k}_{m}", 1.0, 64, total,
               f"microbatch{m}/gradients/l{k}/MatMul_grad/MatMul")
            total = f"gradients_sum/l{k}_{m}"
        op(f"Adam/update_l{k}/kernel/ResourceApplyAdam", 2.0, 64, total, f"l{k}/kernel")
    return g.build()


def test_microbatched_graphs_start_climbs_from_the_hand_made_pipelines():
    """On a training step of micro-batches a climb starts from layer-split's 1F1B and plain
    pipelines too, so its step is never longer than theirs; on other graphs it does not
    run them."""
    from regal.graph import has_microbatches
    from regal.search.climb import Climb
    from regal.search.starts import HEURISTICS, PIPELINE_STARTS, default_heuristics

    graph = _microbatched_chain(4, 4)
    assert has_microbatches(graph)
    assert default_heuristics(graph) == HEURISTICS + PIPELINE_STARTS
    plain = synth.random_dag(40, 3)
    assert not has_microbatches(plain) and default_heuristics(plain) == HEURISTICS
    problem = Problem(graph, DeviceSpec(4), "makespan")
    pipelines = min(solve(name, problem, 2, 0).value for name in PIPELINE_STARTS)
    known: dict = {}      # the seed-free heuristics' answers, as the climb ran them
    climb = Climb(problem, 60, 0, known=known).run(60)
    assert set(PIPELINE_STARTS) <= set(known) and climb.value <= pipelines
    assert {known[name].value for name in PIPELINE_STARTS} >= {pipelines}
    known = {}
    Climb(Problem(plain, DeviceSpec(4), "makespan"), 60, 0, known=known)
    assert not set(PIPELINE_STARTS) & set(known)


def _tight_problem():
    """A 4-layer, 4-micro-batch step on 4 devices with a per-device limit 0.7x its
    one-device peak (a peak search reaches 0.64x), under the step-time objective."""
    graph = _microbatched_chain(4, 4)
    order = np.arange(graph.num_nodes, dtype=np.float64)
    one = simulate(graph, DeviceSpec(1), np.zeros(graph.num_nodes, np.int32), order, order)
    limit = int(max(one.peak) * 0.7)
    return Problem(graph, DeviceSpec(4, limit), "makespan"), limit


def test_fit_first_climbs_a_misfit_to_a_fit_and_counts_it():
    from regal.optimizers import score
    from regal.search.pipeline import fit_first

    problem, limit = _tight_problem()
    n = problem.graph.num_nodes
    on_one = score(problem, np.zeros(n, np.int32), np.arange(n, dtype=np.float64),
                   np.arange(n, dtype=np.float64))
    from regal.optimizers import Solution
    start = Solution(**on_one, evaluations=7, method="seeded-brkga", seed=3)
    assert not start.feasible
    fitted = fit_first(problem, start, 400, 3)
    assert fitted.feasible and max(fitted.peak) <= limit
    assert fitted.extra["fit_first_fits"] and fitted.extra["fit_first_evaluations"] >= 1
    assert fitted.evaluations == 7 + fitted.extra["fit_first_evaluations"]
    rescored = score(problem, fitted.placement, fitted.priority, fitted.transfer_priority)
    assert rescored["value"] == fitted.value and rescored["feasible"]
    assert fitted.method == "seeded-brkga"
    # nothing to do: a fit, the peak objective, no limit
    fit = dataclasses.replace(start, feasible=True)
    assert fit_first(problem, fit, 400, 3) is fit
    peak_problem = dataclasses.replace(problem, objective="peak_memory")
    assert fit_first(peak_problem, start, 400, 3) is start
    free = Problem(problem.graph, DeviceSpec(4), "makespan")
    assert fit_first(free, start, 400, 3) is start


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_the_pipeline_fits_where_its_race_did_not(method):
    """Synthetic test graph 31 (51 ops) on 4 devices under 466 bytes each: with seed 2 the race
    of climbs ends over the limit without the reserve (the next test); with it the answer
    fits (the race on 80% of the budget, or `fit_first` after it)."""
    from regal.synth.recipes import graph_at, recipe_named

    graph = graph_at(recipe_named("test"), 31)
    assert graph.num_nodes == 51
    problem = Problem(graph, DeviceSpec(4, 466), "makespan")
    found = solve(method, problem, 5000, 2)
    assert found.evaluations <= 5000
    assert found.feasible and max(found.peak) <= 466


def test_without_the_reserve_the_race_misses_that_fit(monkeypatch):
    """The same case with `FIT_RESERVE` 0 (the code before it): the answer is over the limit,
    so the test above checks the reserve, not an easy case."""
    import regal.search.pipeline as pipeline
    from regal.synth.recipes import graph_at, recipe_named

    monkeypatch.setattr(pipeline, "FIT_RESERVE", 0.0)
    problem = Problem(graph_at(recipe_named("test"), 31), DeviceSpec(4, 466), "makespan")
    found = solve("seeded-brkga", problem, 5000, 2)
    assert not found.feasible and "fit_first_evaluations" not in found.extra


def _graph_38_race(seed: int, give_up_unfit: bool = False):
    """Synthetic test graph 38 (53 ops) on 4 devices under 466 bytes each, the step time:
    BRKGA on 500 evaluations (over the limit) and the default race of climbs on 3,600 from
    its best, with seed `seed`."""
    from regal.synth.recipes import graph_at, recipe_named

    graph = graph_at(recipe_named("test"), 38)
    assert graph.num_nodes == 53
    problem = Problem(graph, DeviceSpec(4, 466), "makespan")
    start = solve("brkga", problem, 500, seed)
    assert not start.feasible
    raced = race_climbs(problem, start, 3600, seed, fresh_climbs=DEFAULT_SCHEDULE.fresh_climbs,
                        race=DEFAULT_SCHEDULE.race, give_up_unfit=give_up_unfit)
    return problem, start, raced


def test_a_fresh_peak_climb_fits_where_the_climb_from_the_misfit_cannot():
    """Seed 1: the race ends over the limit and the peak climb from its answer stalls there
    (a local optimum of peak memory too); `fit_first` hands over to a climb afresh from the
    heuristic starts, which fits. Without the hand-over (`FIT_STALL` 1: the first climb keeps
    the whole budget) the answer stays over the limit."""
    import regal.search.pipeline as pipeline
    from regal.search.pipeline import fit_first

    problem, _, raced = _graph_38_race(1)
    assert not raced.feasible
    fitted = fit_first(problem, raced, 900, 1)
    assert fitted.extra["fit_first_climbs"] == 2 and fitted.extra["fit_first_fits"]
    assert fitted.feasible and max(fitted.peak) <= 466
    assert fitted.evaluations == raced.evaluations + fitted.extra["fit_first_evaluations"] <= \
        raced.evaluations + 900
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "FIT_STALL", 1.0)
        held = fit_first(problem, raced, 900, 1)
    assert held.extra["fit_first_climbs"] == 1 and not held.feasible


class _ScriptedClimb:
    """Stands in for `Climb` in `fit_first`: 8 evaluations a step, its best over any limit,
    lower by one each step when `improving`; records its seed and how far it ran."""

    improving = True
    ran: list = []      # (seed, evaluations) of each climb run: set per test
    keys = None         # the chromosome every climb's best decodes to: set per test

    def __init__(self, problem, budget, seed, *, initial=None, should_stop=None, **options):
        self.seed, self.used, self.value = seed, 0, 10.0 ** 9
        self.best = np.asarray(self.keys)

    def run(self, budget, progress=None, should_stop=None):
        while self.used < budget and not (should_stop is not None and should_stop()):
            self.used += 8
            self.value -= 1.0 if self.improving else 0.0
            if progress is not None:
                progress(self.used, self.value)
        self.ran.append((self.seed, self.used))
        return self


def _scripted_fit(monkeypatch, improving: bool):
    """(`fit_first` of the tight problem with `_ScriptedClimb` for `Climb`, its start): the
    start every op on device 0 (over the limit, 7 evaluations spent), a budget of 400."""
    import regal.search.pipeline as pipeline
    from regal.optimizers import Solution, score

    problem, _ = _tight_problem()
    n = problem.graph.num_nodes
    on_one = Solution(**score(problem, np.zeros(n, np.int32), np.arange(n, dtype=np.float64),
                              np.arange(n, dtype=np.float64)), evaluations=7, seed=3)
    monkeypatch.setattr(_ScriptedClimb, "keys", on_one.keys())
    monkeypatch.setattr(_ScriptedClimb, "improving", improving)
    monkeypatch.setattr(_ScriptedClimb, "ran", [])
    monkeypatch.setattr(pipeline, "Climb", _ScriptedClimb)
    return (lambda **options: pipeline.fit_first(problem, on_one, 400, 3, **options)), on_one


@pytest.mark.parametrize("improving", [True, False])
def test_the_climb_from_the_misfit_keeps_the_budget_while_it_improves(monkeypatch, improving):
    """`fit_first`'s rule, with scripted climbs that never fit: the first runs on while its
    best improves (the whole budget of 400, where it once stopped at half) and, when its
    best stands still for `FIT_STALL` of the budget (100 evaluations), hands the rest to a
    climb afresh (seed + 1)."""
    fit, _ = _scripted_fit(monkeypatch, improving)
    found = fit()
    if improving:
        assert _ScriptedClimb.ran == [(3, 400)] and found.extra["fit_first_climbs"] == 1
    else:
        assert _ScriptedClimb.ran == [(3, 104), (4, 296)]
        assert found.extra["fit_first_climbs"] == 2
    assert found.extra["fit_first_evaluations"] == 400 and not found.extra["fit_first_fits"]


def test_fit_first_reports_its_progress_after_each_batch(monkeypatch):
    """A progress bar keeps moving through the fit: every evaluation so far (the start's 7
    included), rising to the whole budget, with the start's value as the best."""
    fit, on_one = _scripted_fit(monkeypatch, False)
    reported = []
    fit(progress=lambda e, b: reported.append((e, b)))
    evaluations = [e for e, _ in reported]
    assert evaluations == sorted(evaluations) and evaluations[0] == 7 + 8
    assert evaluations[-1] == 7 + 400 and len(evaluations) == 400 // 8
    assert {b for _, b in reported} == {on_one.value}


def test_the_race_gives_up_after_its_first_round_when_nothing_fits():
    """Seed 1 of graph 38: no raced climb fits after the first round, so the race stops there
    and leaves the rest for `finish_fitting`: three climbs of 270 evaluations (7.5% of
    3,600) at most. A single climb never gives up."""
    problem, start, raced = _graph_38_race(1, give_up_unfit=True)
    assert raced.extra["race_gave_up"] and not raced.feasible
    assert raced.extra["polish_evaluations"] <= 3 * 270
    assert raced.evaluations == start.evaluations + raced.extra["polish_evaluations"]
    # one climb (no fresh ones) is no race: it spends the budget and never gives up
    alone = race_climbs(problem, start, 600, 1, give_up_unfit=True)
    assert "race_gave_up" not in alone.extra
    assert alone.extra["polish_evaluations"] == 600


@pytest.mark.parametrize("seed, limit", [(2, 466), (1, 10**9)])
def test_a_race_with_a_fit_after_its_first_round_runs_as_it_did(seed, limit):
    """Where a raced climb fits after the first round (seed 2 of graph 38; or a limit no
    placement reaches) giving up is never asked for: the same answer to the bit, the same
    counts."""
    from regal.synth.recipes import graph_at, recipe_named

    problem = Problem(graph_at(recipe_named("test"), 38), DeviceSpec(4, limit), "makespan")
    start = solve("brkga", problem, 500, seed)
    runs = [race_climbs(problem, start, 3600, seed, fresh_climbs=2,
                        race=DEFAULT_SCHEDULE.race, give_up_unfit=give_up)
            for give_up in (False, True)]
    assert runs[0].feasible and "race_gave_up" not in runs[1].extra
    assert runs[0].value == runs[1].value and runs[0].evaluations == runs[1].evaluations
    assert np.array_equal(runs[0].placement, runs[1].placement)
    assert np.array_equal(runs[0].priority, runs[1].priority)


def test_regal_fits_with_its_ranker_where_the_race_gave_up():
    """`regal` on graph 38, seed 1, with and without its move ranker: the race gives up and
    the answer fits (before the race gave up, the run without the ranker needed the fresh
    peak climb; its answer had been over the limit, step stretched to 4,386 against the
    twin's 842)."""
    from regal.synth.recipes import graph_at, recipe_named

    problem = Problem(graph_at(recipe_named("test"), 38), DeviceSpec(4, 466), "makespan")
    for options in ({"move_ranker": "none"}, {}):
        found = solve("regal", problem, 5000, 1, **options)
        assert found.extra["race_gave_up"] and found.extra["fit_first_fits"]
        assert found.evaluations <= 5000
        assert found.feasible and max(found.peak) <= 466


def test_the_fit_climbs_get_the_move_ranker():
    """`climb_options` reach the climbs on peak memory of `fit_first` too: a ranker that keeps
    the drawing order is asked by climbs of the peak-memory problem, and the answer is the
    one without it."""
    from regal.search.pipeline import solve_seeded_brkga
    from regal.synth.recipes import graph_at, recipe_named

    problem = Problem(graph_at(recipe_named("test"), 38), DeviceSpec(4, 466), "makespan")
    asked = set()

    def keep_order(climb, drawn):
        asked.add(climb.problem.objective)
        return np.arange(len(drawn))

    plain = solve_seeded_brkga(problem, 5000, 2)
    same = solve_seeded_brkga(problem, 5000, 2, climb_options=dict(rank_moves=keep_order))
    assert plain.extra["race_gave_up"] and plain.extra["fit_first_climbs"] >= 1
    assert asked == {"makespan", "peak_memory"}
    assert same.value == plain.value and np.array_equal(same.placement, plain.placement)


def test_the_reserve_goes_on_climbing_an_answer_that_fits(problem):
    """When the race fits, the reserve is one more climb from its answer: never worse, and the
    whole budget is spent."""
    from regal.search.pipeline import finish_fitting

    limited = Problem(problem.graph, DeviceSpec(3, 10**12), "makespan")
    start = solve("brkga", limited, 200, 1)
    assert start.feasible
    done = finish_fitting(limited, start, 300, 1)
    assert done.value <= start.value and done.feasible
    assert done.evaluations <= start.evaluations + 300
    assert done.extra["finish_evaluations"] >= 1


def test_limited_runs_of_the_pipelines_carry_their_own_limits_revision():
    from regal.optimizers import LIMITS_REVISION, METHOD_LIMITS_REVISIONS, method_revision

    assert method_revision("regal") == "ranker-4" and method_revision("seeded-brkga") == ""
    assert method_revision("regal", 10**9) == "ranker-4+" + METHOD_LIMITS_REVISIONS["regal"]
    assert method_revision("seeded-brkga", 10**9) == METHOD_LIMITS_REVISIONS["seeded-brkga"]
    assert METHOD_LIMITS_REVISIONS["regal"] != LIMITS_REVISION
    assert method_revision("local-search", 10**9) == LIMITS_REVISION


def test_regal_ranks_its_climbs_moves_with_the_shipped_ranker_and_the_twin_does_not(
        problem, tmp_path):
    """`regal` loads the shipped move ranker (a fresh one per run, its own timer), "none"
    switches it off, and a missing file is an error that names it; `seeded-brkga` never
    ranks."""
    from regal.regal_method import DEFAULT_POLICY_DIR, MOVE_RANKER_FILE, load_move_ranker
    from regal.search.advantage import MoveRanker

    shipped = MoveRanker.load(DEFAULT_POLICY_DIR / MOVE_RANKER_FILE)
    first, second = load_move_ranker(), load_move_ranker()
    assert first is not second and first.elapsed == 0.0
    for (k, b), (k0, b0) in zip(first.layers[0], shipped.layers[0]):
        assert np.array_equal(k, k0) and np.array_equal(b, b0)
    assert load_move_ranker("none") is None and load_move_ranker(None) is None
    with pytest.raises(ValueError, match="nowhere.npz"):
        load_move_ranker(str(tmp_path / "nowhere.npz"))
    ranked = solve("regal", problem, 1500, 2)
    plain = solve("regal", problem, 1500, 2, move_ranker="none")
    assert ranked.extra["ranker_time"] > 0.0 and plain.extra["ranker_time"] == 0.0
    assert "ranker_time" not in solve("seeded-brkga", problem, 1500, 2).extra


def _record_ranked_steps(monkeypatch, note) -> None:
    """Makes `regal` load rankers that call `note(climb, drawn)` at every ranked step, then
    rank and gate as the shipped one does."""
    from regal import regal_method

    load = regal_method.load_move_ranker

    class Recording:
        def __init__(self, ranker):
            self.ranker, self.elapsed = ranker, 0.0

        def rank_drawn(self, climb, drawn):
            note(climb, drawn)
            return self.ranker.rank_drawn(climb, drawn)

        def restart_now(self, climb, scores, count):
            return self.ranker.restart_now(climb, scores, count)

    monkeypatch.setattr(regal_method, "load_move_ranker",
                        lambda which="shipped": Recording(load(which)))


def test_ranked_batch_fixes_how_many_ranked_moves_a_step_evaluates(problem, monkeypatch):
    """`regal(ranked_batch=B)`: every ranked climb step draws `RANKER_DRAW` x at most B
    neighbours (B unless the budget's end cuts the step), where the default steps adapt
    between 8 and 32; the budget is spent exactly, and bad values are refused by name. So
    does `ranked_opening=(B, E)` while a climb has spent fewer than E evaluations per op."""
    from regal import regal_method

    sizes = []
    _record_ranked_steps(monkeypatch, lambda climb, drawn: sizes.append(len(drawn)))
    draw = regal_method.RANKER_DRAW
    default = solve("regal", problem, 1500, 2)
    assert max(sizes) > draw * 5
    sizes.clear()
    fixed = solve("regal", problem, 1500, 2, ranked_batch=5)
    assert fixed.evaluations == default.evaluations == 1500
    assert sizes and max(sizes) == draw * 5 and all(s % draw == 0 for s in sizes)
    assert sum(s == draw * 5 for s in sizes) >= len(sizes) - 6   # a step cut per climb turn
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="ranked_batch"):
            solve("regal", problem, 300, 2, ranked_batch=bad)
    # an opening that never ends caps every ranked step at its batch (steps adapt below it)
    sizes.clear()
    opened = solve("regal", problem, 1500, 2, ranked_opening=(5, 1e9))
    assert opened.evaluations == 1500 and sizes and max(sizes) <= draw * 5
    for bad in ((0, 10), (5, -1), 5, "8,10"):
        with pytest.raises(ValueError, match="opening"):
            solve("regal", problem, 300, 2, ranked_opening=bad)


def test_an_unranked_share_reaches_every_ranked_climb(problem, monkeypatch):
    """`regal(unranked_share=u)` gives u to each ranked climb (`Climb.unranked_share`, whose
    step is tested in test_climb); 0 is `regal` as it is, answer for answer; bad values are
    refused by name."""
    shares = []
    _record_ranked_steps(monkeypatch, lambda climb, drawn: shares.append(climb.unranked_share))
    hedged = solve("regal", problem, 1500, 2, unranked_share=0.5)
    assert hedged.evaluations == 1500 and shares and set(shares) == {0.5}
    shares.clear()
    default, zero = solve("regal", problem, 1500, 2), solve("regal", problem, 1500, 2,
                                                            unranked_share=0.0)
    assert set(shares) == {0.0}
    assert zero.value == default.value and np.array_equal(zero.placement, default.placement)
    for bad in (-0.5, 2, "a quarter", True):
        with pytest.raises(ValueError, match="unranked_share"):
            solve("regal", problem, 300, 2, unranked_share=bad)
