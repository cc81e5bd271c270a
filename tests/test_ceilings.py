"""experiments/ceilings.py: the lever figures worked by hand (the held-out seed choice
included), the oracle ranker's order, resuming, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import experiment, one_synthetic_graph
from regal import optimizers, synth
from regal.io import load_graph
from regal.sim import DeviceSpec, evaluate


def _row(arm, graph, seed, value, budget=1000):
    return dict(set="s", path=f"/x/{graph}.npz", devices=2, objective="peak_memory",
                budget=budget, seed=seed, arm=arm, factor=1.2, value=value)


def test_levers_by_hand():
    script = experiment("ceilings")
    grid = script.SCHEDULE_GRID
    rows = []
    # graph a: twin 100 / 100; grid point brkga-50 is best on seed 0 (90) and brkga-3 on
    # seed 1 (80); every other arm equals the twin
    for arm in grid:
        rows += [_row(arm, "a", 0, {"brkga-50": 90.0}.get(arm, 100.0)),
                 _row(arm, "a", 1, {"brkga-3": 80.0, "brkga-50": 99.0}.get(arm, 100.0))]
    rows += [_row("move-oracle-4", "a", 0, 95.0), _row("move-oracle-4", "a", 1, 95.0)]
    gains = script.lever_gains(rows)[("s", "peak_memory", 2, 1000)]
    assert gains["move-oracle-4"] == [pytest.approx(5.0)]
    # in-sample: the best mean over both seeds is brkga-3's 90.0 (brkga-50: 94.5) -> +10 points
    assert gains["schedule oracle (in-sample)"] == [pytest.approx(10.0)]
    # held-out: seed 0 scored with the choice made on seed 1 (brkga-3: 100), seed 1 with the
    # choice made on seed 0 (brkga-50: 99) -> mean 99.5 -> +0.5 point
    assert gains["schedule choice (held-out seed)"] == [pytest.approx(0.5)]
    assert "brkga-only" in gains and gains["brkga-only"] == [pytest.approx(0.0)]
    table = script.pivot(rows)
    assert "| s | peak memory | 2 | 1,000 | 1 | +5.00 (+5.00) | – |" in table


def test_the_oracle_ranks_by_the_simulated_value_then_the_tie_break():
    script = experiment("ceilings")
    problem = optimizers.Problem(synth.random_dag(40, 2), DeviceSpec(2))
    keys = np.random.default_rng(0).random((12, 40 * (2 + 2)))   # affinity, priority, transfer
    values = evaluate(problem.graph, problem.devices, keys, problem.objective)
    ranks = script.oracle_ranker(problem)(None, keys)
    assert sorted(ranks) == list(range(12))
    assert np.all(np.diff(values[np.argsort(ranks)]) >= 0)


def test_runs_resume_and_bad_arms_are_refused(tmp_path, capsys):
    script = experiment("ceilings")
    folder = tmp_path / "graphs"
    folder.mkdir()
    one_synthetic_graph(folder, 30, 40, 5)
    records, out = tmp_path / "c.jsonl", tmp_path / "c.md"
    argv = ["--graphs", str(folder), "--devices", "2", "--budgets", "120", "--seeds", "1",
            "--arms", "twin,move-oracle-4,one-climb", "--workers", "1", "--objectives",
            "peak_memory", "makespan", "--records", str(records), "--out", str(out)]
    assert script.main(argv) == 0
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 6 and all(r["evaluations"] <= 120 for r in lines)
    assert {r["limit"] is None for r in lines if r["objective"] == "peak_memory"} == {True}
    assert all(r["limit"] > 0 for r in lines if r["objective"] == "makespan")
    twin = next(r for r in lines if r["arm"] == "twin" and r["objective"] == "peak_memory")
    graph = load_graph(twin["path"])
    same = optimizers.solve("seeded-brkga", optimizers.Problem(graph, DeviceSpec(2)), 120, 0)
    assert same.value == twin["value"]
    assert "move guidance, oracle of 4" in out.read_text()
    assert script.main(argv) == 0                       # resumed: nothing runs again
    assert len(records.read_text().splitlines()) == 6
    with pytest.raises(SystemExit):
        script.main(argv[:-4] + ["--arms", "nonsense", "--records", str(records)])
    assert "unknown nonsense" in capsys.readouterr().err


def _chain_problem():
    """a -> b -> c (run times 4, 3, 2; a's output 1,000 bytes, so on another device its copy
    takes long to arrive) and d beside them (run time 1, holding nothing back)."""
    from regal.graph_builder import GraphBuilder

    b = GraphBuilder()
    before = None
    for name, cost, size in (("a", 4.0, 1000), ("b", 3.0, 10), ("c", 2.0, 0)):
        op = b.add_op(name, cost)
        if before is not None:
            b.add_input(op, before)
        if size:
            b.add_output(op, size)
        before = op
    b.add_output(b.add_op("d", 1.0), 10)
    return optimizers.Problem(b.build(), DeviceSpec(2), "makespan")


def test_the_critical_chain_is_what_held_each_op_back():
    """By hand: c ends last; it started when b ended (its input, on its device); b started
    when a's output arrived from device 0; a started at 0; d held nothing back."""
    from regal.sim import trace

    script = experiment("ceilings")
    problem = _chain_problem()
    place, order = np.array([0, 1, 1, 0]), np.array([0.9, 0.5, 0.3, 0.1])
    traced = trace(problem.graph, problem.devices, place, order, order)
    assert traced.op_start[1] > traced.op_end[0] and traced.op_end[2] == traced.op_end.max()
    assert script.critical_chain(problem.graph, place, traced).tolist() == [True, True, True,
                                                                            False]
    alone = trace(problem.graph, problem.devices, np.zeros(4, int), order, order)
    assert script.critical_chain(problem.graph, np.zeros(4, int), alone).all()  # one device


def test_chain_first_ranks_moves_of_the_chain_ahead_in_the_rankers_order():
    from regal.decode import decode
    from regal.regal_method import load_move_ranker
    from regal.search.climb import Climb

    script = experiment("ceilings")
    problem = optimizers.Problem(synth.random_dag(60, 3), DeviceSpec(3), "makespan")
    climb = Climb(problem, 200, 0).run(100)
    ranker = load_move_ranker("shipped")
    probe = script.ChainFirst(problem, ranker)
    drawn = climb.moves.draw(climb.current, 60, 0.85)
    scores = probe.rank_drawn(climb, drawn)
    plain = ranker(climb, drawn)
    context = climb._advantage_context
    assert context.regime == 1
    chain = script.critical_chain(problem.graph, context.place0, climb.moves.facts.trace)
    place = decode(drawn.keys(), problem.graph, problem.devices)[0]
    first = ((place != context.place0) & chain).any(axis=1)
    assert 0 < first.sum() < len(first)
    assert scores[first].max() < scores[~first].min()
    for group in (first, ~first):         # within each group, the ranker's order
        assert np.array_equal(np.argsort(scores[group], kind="stable"),
                              np.argsort(plain[group], kind="stable"))
    # under peak memory the probe is the ranker
    peak = optimizers.Problem(problem.graph, DeviceSpec(3))
    climb = Climb(peak, 200, 0).run(100)
    drawn = climb.moves.draw(climb.current, 30, 0.85)
    assert np.array_equal(script.ChainFirst(peak, ranker).rank_drawn(climb, drawn),
                          ranker(climb, drawn))
