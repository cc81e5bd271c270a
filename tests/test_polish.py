"""The local-search polish after BRKGA in `regal` and `seeded-brkga` (regal.regal_method)."""

from __future__ import annotations

import numpy as np
import pytest

from regal import synth
from regal.optimizers import Problem, solve
from regal.regal_method import polish, split_budget
from regal.sim import DeviceSpec, simulate


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(synth.random_dag(120, 5), DeviceSpec(3))


def test_split_budget_by_hand():
    from regal.regal_method import POLISH_SHARE

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
    better = polish(problem, start, 300, 1)
    assert better.value <= start.value
    assert better.evaluations == start.evaluations + 300
    assert better.extra["before_polish"] == start.value and better.method == start.method


def test_polish_share_zero_is_the_brkga_search_draw_for_draw(problem):
    from regal.policy.reference import reference_for
    from regal.regal_method import search

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


def test_the_fresh_climb_is_local_search_from_the_heuristic_starts(problem):
    """With `fresh_share` the polish is two independent climbs: from `found` on the first part,
    from the heuristic starts (seed + 1) on the rest; the answer is the best of the three."""
    start = solve("brkga", problem, 200, 1)
    both = polish(problem, start, 400, 1, fresh_share=0.5)
    climbed = solve("local-search", problem, 200, 1, heuristics=(), initial=[start])
    fresh = solve("local-search", problem, 200, 2)
    assert both.extra["climbed_value"] == climbed.value
    assert both.extra["fresh_value"] == fresh.value and both.extra["fresh_evaluations"] == 200
    assert both.value == min(start.value, climbed.value, fresh.value)
    assert both.extra["polish_winner"] == ("fresh" if fresh.value < climbed.value else "climb")
    assert both.evaluations == start.evaluations + 400
    assert both.extra["polish_evaluations"] == 400 and both.method == start.method
    # a fresh part under 8 evaluations is not worth its starts: all of it climbs from `found`
    small = polish(problem, start, 14, 1, fresh_share=0.5)
    assert "fresh_value" not in small.extra and small.extra["polish_evaluations"] == 14
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="fresh_share"):
            polish(problem, start, 100, 1, fresh_share=bad)


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_any_fresh_share_spends_the_budget_and_bad_ones_are_refused(problem, method):
    """A fresh share near 1 once left the climb from BRKGA's best 0 evaluations (local search
    refused a budget of 0); a bad share is refused even when no polish runs."""
    for budget in (16, 20, 37, 50, 100):
        for share in (0.0, 0.5, 0.98, 0.99):
            found = solve(method, problem, budget, 0, fresh_share=share)
            assert found.evaluations == budget, (budget, share)
    for bad in (5.0, -3, 1.0, True):
        for budget, polish_share in ((8, 0.8), (100, 0.0), (100, 0.5)):
            with pytest.raises(ValueError, match="fresh_share"):
                solve(method, problem, budget, 0, polish_share=polish_share, fresh_share=bad)


@pytest.mark.parametrize("method", ["seeded-brkga", "regal"])
def test_the_default_schedule(problem, method):
    """BRKGA on 1 - POLISH_SHARE of the budget, then the two climbs on FRESH_SHARE splits of
    the rest; progress never reports a worse best than before, and ends at the answer."""
    from regal.regal_method import FRESH_SHARE, POLISH_SHARE

    seen = []
    found = solve(method, problem, 1000, 3, progress=lambda used, best: seen.append((used, best)))
    polish_budget = round(1000 * POLISH_SHARE)
    brkga_only = solve(method, problem, 1000 - polish_budget, 3, polish_share=0.0)
    assert found.extra["before_polish"] == brkga_only.value
    assert found.extra["polish_evaluations"] == polish_budget == 1000 - brkga_only.evaluations
    assert found.extra["fresh_evaluations"] == round(polish_budget * FRESH_SHARE)
    fresh = solve("local-search", problem, round(polish_budget * FRESH_SHARE), 4)
    assert found.extra["fresh_value"] == fresh.value
    assert found.value == min(found.extra["before_polish"], found.extra["climbed_value"],
                              fresh.value)
    used, best = zip(*seen)
    assert list(used) == sorted(used) and used[-1] == 1000
    assert all(b >= a for a, b in zip(best[1:], best[:-1])) and best[-1] == found.value
