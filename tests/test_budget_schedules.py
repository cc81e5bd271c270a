"""experiments/budget_schedules.py: the table worked by hand, the schedules' budgets and
answers against the methods they are built from, resuming, bad input."""

from __future__ import annotations

import json

import pytest

from helpers import experiment, one_synthetic_graph
from regal import optimizers
from regal.io import load_graph
from regal.sim import DeviceSpec


def test_summary_by_hand():
    script = experiment("budget_schedules")

    def row(schedule, graph, seed, value):
        return dict(schedule=schedule, split="s", graph=graph, devices=2, seed=seed,
                    budget=10, value=value)

    # a: means 150 vs 150, 0% (a mean of the per-seed figures, +10% and -5%, would be +2.5%)
    rows = [row("brkga", "a", 0, 100.0), row("brkga", "a", 1, 200.0),
            row("ls-first", "a", 0, 90.0), row("ls-first", "a", 1, 210.0),
            row("brkga", "b", 0, 200.0), row("ls-first", "b", 0, 180.0),      # b: +10%
            row("brkga", "c", 0, 50.0), row("ls-first", "c", 0, 51.5),        # c: -3%
            row("ls-first", "d", 0, 1.0)]                                      # no BRKGA: left out
    table = script.summarise(rows, ["ls-first", "two-climbs"], ["s"], [2, 4])
    lines = [line for line in table.splitlines() if line.startswith("| s |")]
    assert lines == ["| s | 2 | ls-first | +2.33% | +0.00% | -3.00% | 1 of 3 |"]


def test_schedules_spend_the_budget_and_keep_their_parts(tmp_path, capsys):
    script = experiment("budget_schedules")
    folder = tmp_path / "graphs"
    folder.mkdir()
    path = one_synthetic_graph(folder, 30, 40, 5)
    out = tmp_path / "table.md"
    argv = ["--graphs", str(folder), "--devices", "2", "--seeds", "3", "--budget", "300",
            "--out", str(out)]
    assert script.main(argv) == 0
    rows = {r["schedule"]: r for r in map(json.loads,
                                          out.with_suffix(".jsonl").read_text().splitlines())}
    assert set(rows) == {"brkga", *script.SCHEDULES}
    assert all(r["evaluations"] <= 300 for r in rows.values())
    problem = optimizers.Problem(load_graph(path), DeviceSpec(2))
    two = {"fresh_climbs": 1, "race": (0.5,)}
    for name, method, options in (("brkga", "brkga", {}),
                                  ("two-climbs", "regal", dict(two, polish_share=0.8)),
                                  ("brkga-polish", "regal", {"polish_share": 0.5,
                                                             "fresh_climbs": 0}),
                                  ("two-climbs-10", "regal", dict(two, polish_share=0.9)),
                                  ("race", "regal", {}), ("seeded-race", "seeded-brkga", {}),
                                  ("local-search", "local-search", {})):
        assert rows[name]["value"] == optimizers.solve(method, problem, 300, 3, **options).value
    halves = [optimizers.solve("local-search", problem, 150, seed).value for seed in (3, 4)]
    assert rows["two-fresh"]["value"] == min(halves) and rows["two-fresh"]["evaluations"] == 300
    # fresh-race: both climbs to 60, the leader to 240 (a climb paused and resumed)
    from regal.search.climb import Climb

    climbs = [Climb(problem, 60, seed).run(60) for seed in (3, 4)]
    leader, other = sorted(climbs, key=lambda climb: climb.best_key)
    assert rows["fresh-race"]["value"] == leader.run(240).value <= min(c.value for c in climbs)
    assert rows["fresh-race"]["evaluations"] == 300
    # ls-first never ends worse than its lead local search (120 of 300 evaluations)
    lead = optimizers.solve("local-search", problem, int(300 * script.LEAD), 3).value
    assert rows["ls-first"]["value"] <= lead and rows["seeded-ls-first"]["value"] <= lead
    assert "| graphs | 2 | ls-first |" in out.read_text()
    # resumed: nothing runs again
    assert script.main(argv) == 0
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == len(rows)


def test_bad_input_is_refused(tmp_path, capsys):
    script = experiment("budget_schedules")
    with pytest.raises(SystemExit) as exc:
        script.main(["--graphs", str(tmp_path)])
    assert exc.value.code == 2 and str(tmp_path) in capsys.readouterr().err
    folder = tmp_path / "g"
    folder.mkdir()
    one_synthetic_graph(folder, 10, 12, 1)
    with pytest.raises(SystemExit) as exc:
        script.main(["--graphs", str(folder), "--schedules", "ls-first,nope"])
    assert exc.value.code == 2 and "'nope'" in capsys.readouterr().err
