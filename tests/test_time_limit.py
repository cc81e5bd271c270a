"""`--time-limit` for every method (issue 23 item 3): a search stops at its deadline with the
best answer it found, which is exactly the answer a budget run of the evaluations it used
gives; one-shot heuristics just run; no time limit changes nothing; bad values exit 2.

Where a search stops is read off `evaluation_clock` (conftest.py), installed as
`time.perf_counter`: a clock that moves only while chromosomes are scored, 2**-11 s a row
(about the 2,000 a second `slow_problem` scores), so that a deadline falls after a fixed
count of evaluations and a busy machine changes nothing. A search asks before every batch
whether its time is up, so it must end within the batch that crosses its deadline. Real
seconds are only bounded where the limit is another program's (CP-SAT's own clock), or to
show that a budget ends first, and then generously (a busy 2-core machine may be 10x slow)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from brkga import BRKGA
from regal import synth
from regal.cli import main
from regal.optimizers import Problem, round_robin, solve
from regal.sim import DeviceSpec, simulate
from helpers import one_synthetic_graph

LIMIT = 1.0
SEARCHES = ("brkga", "random", "local-search", "tuned-brkga", "seeded-brkga", "regal")
# BRKGA, then local search from its best: each phase gets its share of the time limit
TWO_PHASE = ("seeded-brkga", "regal")


@pytest.fixture(scope="module")
def slow_problem() -> Problem:
    """About 2,000 evaluations per second: an unlimited budget would never end. Compiled
    kernels and the policy are loaded first, so that the timed runs time the search only."""
    problem = Problem(synth.random_dag(1500, 3), DeviceSpec(4))
    for method in ("brkga", "local-search", "regal"):
        solve(method, problem, 200, 0)
    return problem


@pytest.fixture
def clock(evaluation_clock, monkeypatch):
    """`evaluation_clock` as time.perf_counter, the clock solve, the pipeline and the harness
    time their runs and deadlines by."""
    monkeypatch.setattr(time, "perf_counter", evaluation_clock)
    return evaluation_clock


def ended_in_the_crossing_batch(clock, wall_time: float, limit: float,
                                batch: int | None = None) -> bool:
    """Whether a run that took `wall_time` on `clock` used its `limit` and then at most the
    batch that crossed it: `batch` rows, by default the last batch scored (it had asked
    before that batch, with time left)."""
    batch = clock.batches[-1] if batch is None else batch
    return limit <= wall_time < limit + batch * clock.tick


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("graphs")
    return one_synthetic_graph(folder, 40, 60, 5)


# ---------------------------------------------------------------------------
# the stopping hook


def test_brkga_stop_hook_ends_between_generations_like_a_budget():
    """`should_stop` asked k times before saying yes: k - 1 generations after the first,
    and the very run a budget of those evaluations gives."""
    def sphere(keys):
        return ((keys - 0.3) ** 2).sum(axis=1)

    asked = []

    def stop_at_fourth_question():
        asked.append(1)
        return len(asked) >= 4

    ga = BRKGA(12, population_size=20, seed=7)
    stopped = ga.run(sphere, 10**9, should_stop=stop_at_fourth_question)
    fresh = ga.population_size - ga.num_elites
    assert len(asked) == 4
    assert stopped.evaluations == ga.population_size + 3 * fresh
    same = BRKGA(12, population_size=20, seed=7).run(sphere, stopped.evaluations)
    np.testing.assert_array_equal(stopped.best_keys, same.best_keys)
    np.testing.assert_array_equal(stopped.history, same.history)
    # a hook that never fires changes nothing
    never = BRKGA(12, population_size=20, seed=7).run(sphere, 500, should_stop=lambda: False)
    plain = BRKGA(12, population_size=20, seed=7).run(sphere, 500)
    np.testing.assert_array_equal(never.best_keys, plain.best_keys)
    assert never.evaluations == plain.evaluations == 500


@pytest.mark.parametrize("method", ["brkga", "random", "local-search", "regal"])
def test_a_hook_that_never_fires_changes_nothing(method):
    problem = Problem(synth.random_dag(40, 2), DeviceSpec(2))
    plain = solve(method, problem, 300, 4)
    hooked = solve(method, problem, 300, 4, should_stop=lambda: False)
    np.testing.assert_array_equal(plain.placement, hooked.placement)
    np.testing.assert_array_equal(plain.priority, hooked.priority)
    assert plain.value == hooked.value and plain.evaluations == hooked.evaluations == 300
    assert "time_limit" not in plain.extra and "stopped_by" not in plain.extra


# ---------------------------------------------------------------------------
# searches stop at the deadline and keep their best


@pytest.mark.parametrize("method", [m for m in SEARCHES if m not in TWO_PHASE])
def test_time_limited_search_stops_on_time_with_its_best(slow_problem, method, clock):
    problem = slow_problem
    found = solve(method, problem, None, 1, time_limit=LIMIT)
    assert ended_in_the_crossing_batch(clock, found.wall_time, LIMIT), \
        (found.wall_time, clock.batches[-1])
    assert found.extra["time_limit"] == LIMIT and found.extra["stopped_by"] == "time_limit"
    # the answer is the simulator's verdict on the placement returned
    result = simulate(problem.graph, problem.devices, found.placement, found.priority,
                      found.transfer_priority)
    assert found.value == float(result.objective("peak_memory"))
    # ... and exactly what a budget of the evaluations it used gives: stopping lost nothing
    again = solve(method, problem, found.evaluations, 1)
    assert again.evaluations == found.evaluations
    assert again.value == found.value
    np.testing.assert_array_equal(again.placement, found.placement)
    np.testing.assert_array_equal(again.priority, found.priority)


def test_every_climb_of_the_race_steps_when_its_starts_are_slow(slow_problem, clock,
                                                                   monkeypatch):
    """The fresh climbs' heuristic starts (m-ETF among them; on 1,000 ops and more, a good
    part of the polish's time) take 0.375 s each here, 0.75 of the 1.8 s the polish has; the
    turns share what is left once they are built, so every climb still takes steps (once,
    none did: the starts had used up the turns)."""
    from regal.search import climb

    real = climb.heuristic_starts

    def slow_starts(problem, names, *args, **kwargs):
        if names:                      # the climb from BRKGA's best has no heuristic starts
            clock.spend(0.375)
        return real(problem, names, *args, **kwargs)

    monkeypatch.setattr(climb, "heuristic_starts", slow_starts)
    found = solve("regal", slow_problem, None, 1, time_limit=2 * LIMIT)
    assert ended_in_the_crossing_batch(clock, found.wall_time, 2 * LIMIT), found.wall_time
    assert min(found.extra["lineage_steps"]) > 0, found.extra["lineage_steps"]
    assert found.value <= found.extra["before_polish"]


@pytest.mark.parametrize("method", TWO_PHASE)
def test_two_phase_search_polishes_within_the_time_limit(slow_problem, method, clock):
    """A budget no run reaches: BRKGA stops at its share of the limit, the polish at the
    deadline, and the polish only improves BRKGA's answer."""
    found = solve(method, slow_problem, None, 1, time_limit=LIMIT)
    assert ended_in_the_crossing_batch(clock, found.wall_time, LIMIT), \
        (found.wall_time, clock.batches[-1])
    assert found.extra["time_limit"] == LIMIT and found.extra["stopped_by"] == "time_limit"
    # every climb of the race had its turn: each round ends by its share of the time
    from regal.search.schedule import DEFAULT_SCHEDULE
    FRESH_CLIMBS = DEFAULT_SCHEDULE.fresh_climbs

    lineages = found.extra["lineage_evaluations"]
    assert len(lineages) == FRESH_CLIMBS + 1 and min(found.extra["lineage_steps"]) > 0
    assert found.extra["polish_evaluations"] == sum(lineages)
    assert found.value <= found.extra["before_polish"]
    # with a budget too, the run ends at the deadline or with the whole budget spent, which
    # comes first (the limit is 2,048 evaluations on this clock): the polish takes what a
    # time-cut BRKGA left
    cut = solve(method, slow_problem, 3000, 1, time_limit=LIMIT)
    assert cut.evaluations < 3000 and cut.extra["stopped_by"] == "time_limit"
    assert ended_in_the_crossing_batch(clock, cut.wall_time, LIMIT)
    spent = solve(method, slow_problem, 1500, 1, time_limit=LIMIT)
    assert spent.evaluations == 1500 and spent.extra["stopped_by"] == "budget"
    assert spent.wall_time < LIMIT
    result = simulate(slow_problem.graph, slow_problem.devices, found.placement, found.priority,
                      found.transfer_priority)
    assert found.value == float(result.objective("peak_memory"))


def test_phase_stops_switch_at_the_share_and_stop_at_the_deadline():
    from regal.search.schedule import phase_stops

    now = time.perf_counter()
    first, last, why = phase_stops(10.0, 0.4, start=now - 5.0)     # 5 s of 10 gone
    assert not first() and not last() and why() == "budget"
    first, last, why = phase_stops(10.0, 0.4, start=now - 6.5)     # past BRKGA's 6 s
    assert first() and not last() and why() == "budget"
    first, last, why = phase_stops(10.0, 0.4, start=now - 10.5)
    assert first() and last() and why() == "time_limit"
    asked = [False]
    first, last, why = phase_stops(10.0, 0.4, asked=lambda: asked[0])
    asked[0] = True
    assert first() and why() == "should_stop"
    first, last, why = phase_stops(None, 0.4, asked=lambda: True)
    assert first() and last() and why() == "should_stop"
    first, last, why = phase_stops(None, 0.4)
    assert first is None and last is None and why() == "budget"


@pytest.mark.parametrize("method", ["brkga", "local-search"])
def test_time_limited_warm_start_is_never_worse_than_its_start(slow_problem, method, clock):
    start = round_robin(slow_problem)
    found = solve(method, slow_problem, None, 0, time_limit=0.5, initial=start)
    assert found.value <= start.value
    assert ended_in_the_crossing_batch(clock, found.wall_time, 0.5), found.wall_time


def test_regal_is_never_worse_than_the_reference_it_seeds_with(slow_problem):
    found = solve("regal", slow_problem, None, 0, time_limit=0.5)
    assert found.value <= found.extra["reference_value"]


def test_a_budget_that_ends_first_wins(slow_problem):
    # real seconds: 300 evaluations take about 0.15 s; 60 s is 400 times that
    found = solve("brkga", slow_problem, 300, 0, time_limit=60.0)
    assert found.evaluations == 300 and found.extra["stopped_by"] == "budget"
    assert found.wall_time < 60.0


def test_one_shot_heuristics_just_run(slow_problem):
    found = solve("m-topo", slow_problem, None, 0, time_limit=0.01)
    plain = solve("m-topo", slow_problem, 1, 0)
    np.testing.assert_array_equal(found.placement, plain.placement)
    assert found.extra["time_limit"] == 0.01 and "stopped_by" not in found.extra


def test_cpsat_gets_the_limit_itself():
    problem = Problem(synth.random_dag(12, 1), DeviceSpec(2))
    found = solve("cpsat", problem, None, 0, time_limit=2.0)
    assert found.extra["time_limit"] == 2.0  # cpsat's own record of the limit it ran with
    assert found.extra["stopped_by"] in (None, "proof", "deterministic_time", "wall_clock")
    # real seconds: CP-SAT keeps its own wall-clock limit; around it, building a 12-op model
    # and re-scoring the answer take about 0.05 s, so 5x the limit leaves 8 s for a machine
    # too busy to run them
    assert found.wall_time < 5 * 2.0


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, "5", True])
def test_solve_refuses_bad_time_limits(value):
    problem = Problem(synth.random_dag(12, 1), DeviceSpec(2))
    with pytest.raises(ValueError, match="time_limit"):
        solve("brkga", problem, 200, 0, time_limit=value)


def test_solve_needs_a_budget_or_a_time_limit():
    problem = Problem(synth.random_dag(12, 1), DeviceSpec(2))
    with pytest.raises(ValueError, match="budget"):
        solve("brkga", problem, None, 0)


# ---------------------------------------------------------------------------
# the command line


def test_cli_time_limit_without_budget_searches_until_the_time_is_up(graph_file, tmp_path,
                                                                      capsys):
    out = tmp_path / "s.json"
    code = main(["optimize", graph_file, "--devices", "2", "--method", "random",
                 "--time-limit", "0.5", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "stopped at the time limit (0.5 s)" in printed
    record = json.loads(out.read_text())
    assert record["budget"] is None and record["time_limit"] == 0.5
    assert record["result"]["wall_time"] >= 0.5
    assert record["result"]["evaluations"] >= 100  # one batch at least; no budget stopped it


def test_cli_explicit_budget_ends_first(graph_file, tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["optimize", graph_file, "--devices", "2", "--budget", "200",
                 "--time-limit", "60", "--out", str(out)]) == 0
    assert "stopped at the budget (200 evaluations)" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["budget"] == 200 and record["result"]["evaluations"] == 200
    assert record["time_limit"] == 60.0


def test_cli_default_budget_without_time_limit(graph_file, tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["optimize", graph_file, "--devices", "2", "--method", "random",
                 "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["budget"] == 5000 and record["result"]["evaluations"] == 5000
    assert record["time_limit"] is None
    assert "stopped at" not in capsys.readouterr().out


@pytest.mark.parametrize("method", ["m-topo", "gp-dfs"])
def test_cli_one_shot_heuristic_with_a_time_limit(graph_file, tmp_path, capsys, method):
    out = tmp_path / "s.json"
    assert main(["optimize", graph_file, "--devices", "2", "--method", method,
                 "--time-limit", "5", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["method"] == method and record["time_limit"] == 5.0
    assert record["result"]["evaluations"] == 1


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
@pytest.mark.parametrize("command", ["optimize", "compare"])
def test_cli_refuses_bad_time_limits(graph_file, tmp_path, capsys, value, command):
    from pathlib import Path

    argv = ["optimize", graph_file, "--devices", "2"] if command == "optimize" else \
        ["compare", "--methods", "brkga", "--graphs", str(Path(graph_file).parent),
         "--out", str(tmp_path / "res")]
    try:
        code = main(argv + [f"--time-limit={value}"])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "--time-limit" in err and "Traceback" not in err
    assert not (tmp_path / "res").exists()


def test_compare_records_the_time_limit(slow_problem, graph_file, tmp_path, capsys, clock):
    """(`slow_problem` compiles the kernels first. One worker: the runs are in this process,
    on `clock`.)"""
    from pathlib import Path

    out = tmp_path / "res"
    assert main(["compare", "--methods", "brkga,m-topo", "--graphs",
                 str(Path(graph_file).parent), "--budget", "100000000", "--seeds", "1",
                 "--time-limit", "0.3", "--workers", "1", "--out", str(out), "--quiet"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    by_method = {r["method"]: r for r in records}
    assert set(by_method) == {"brkga", "m-topo"}
    for record in records:
        assert record["status"] == "ok"
        assert json.loads(record["options"]) == {"time_limit": 0.3}
        assert record["time_limit"] == 0.3
    brkga = by_method["brkga"]
    # the limit ended it, within the batch that crossed it (0.3 s is 615 evaluations here)
    assert brkga["evaluations"] < 100000000
    assert ended_in_the_crossing_batch(clock, brkga["method_wall_time"], 0.3,
                                       batch=max(clock.batches)), brkga["method_wall_time"]
