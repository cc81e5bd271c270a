"""experiments/exact_lns.py and a researcher's mistakes: one line on stderr and exit code 2
before any run (the table kept), results keyed by their seconds and seed, a torn last line
cut before the next row is appended, and the committed rows still count as done."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers import experiment, script_refused
from regal.graph_builder import GraphBuilder


@pytest.fixture(scope="module")
def script():
    return experiment("exact_lns")



@pytest.fixture
def solves(script, monkeypatch, tmp_path):
    """One tiny synth_test graph whose store entry the LNS never improves; `solve` logs the
    time limit of each call (no CP-SAT, no store touched)."""
    b = GraphBuilder()
    for v in range(3):
        b.add_op(f"op{v}", 1.0)
    graph = b.build()
    calls = []
    entry = SimpleNamespace(value=10.0, bound=8.0, graph="g", evaluations=1,
                            solution=lambda problem: SimpleNamespace(value=10.0))

    def solve(method, problem, budget, seed, initial=None, time_limit=None):
        calls.append((time_limit, seed))
        return SimpleNamespace(value=10.0, evaluations=3, extra={"windows": 2})

    monkeypatch.setattr(script, "_graphs", lambda name: iter(
        [("test_00000", graph, tmp_path / "store.jsonl")]))
    monkeypatch.setattr(script, "_count", lambda name: 1)
    monkeypatch.setattr(script, "load_store",
                        lambda path: (SimpleNamespace(get=lambda key: entry), {}))
    monkeypatch.setattr(script, "solve", solve)
    return calls


def _args(tmp_path, *more):
    return ["--sets", "synth_test", "--no-write", "--results", str(tmp_path / "r.jsonl"),
            "--table", str(tmp_path / "t.md"), "--command", "x", *more]


@pytest.mark.parametrize("argv, needle", [
    (["--table-only", "--results", "{tmp}/typo.jsonl"], "--results"),
    (["--seconds-real", "-5"], "--seconds-real"),
    (["--seed", "x"], "--seed"),
    (["--table-only", "--results", "{tmp}/r.jsonl", "--seed", "3"], "nothing to tabulate"),
    (["--results", "{tmp}/missing/r.jsonl"], "--results"),
    (["--table", "{tmp}/missing/t.md"], "--table"),
])
def test_a_mistake_is_refused_before_any_run_and_the_table_is_kept(script, solves, tmp_path,
                                                                   capsys, argv, needle):
    (tmp_path / "r.jsonl").write_text(json.dumps(
        {"set": "synth_test", "graph": "test_00000", "devices": 2, "ops": 3, "before": 10.0,
         "after": 10.0, "bound": 8.0, "improved": False, "stored": False, "seconds": 10.0,
         "cpu_seconds": 10.0, "windows": 2}) + "\n")
    table = tmp_path / "t.md"
    table.write_text("# the committed table\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    script_refused(script.main, ["--table", str(table), *argv], capsys, needle)
    assert table.read_text() == "# the committed table\n" and solves == []


def test_other_seconds_or_seed_run_again_and_a_torn_line_is_cut(script, solves, tmp_path,
                                                                capsys):
    results = tmp_path / "r.jsonl"
    assert script.main(_args(tmp_path)) == 0
    assert script.main(_args(tmp_path)) == 0                     # resumed: both keys done
    assert solves == [(10.0, 0), (10.0, 0)]
    assert script.main(_args(tmp_path, "--seconds-synth", "3")) == 0
    assert solves[2:] == [(3.0, 0), (3.0, 0)]
    with open(results, "a") as f:
        f.write('{"set": "synth_t')                               # a kill's torn line
    assert script.main(_args(tmp_path, "--seed", "1")) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]   # all whole
    assert [(r["time_limit"], r["seed"]) for r in rows] == [
        (10.0, 0), (10.0, 0), (3.0, 0), (3.0, 0), (10.0, 1), (10.0, 1)]
    table = (tmp_path / "t.md").read_text()
    assert "Keys improved: 0 of 2" in table               # this run's settings only
    capsys.readouterr()


def test_a_committed_row_counts_as_made_with_the_defaults(script, solves, tmp_path):
    """Rows written before the key had the seconds and seed: the set's default seconds
    (synth_test 10 s) and seed 0."""
    old = {"set": "synth_test", "graph": "test_00000", "ops": 3, "before": 10.0,
           "after": 10.0, "bound": 8.0, "improved": False, "stored": False,
           "seconds": 10.0, "cpu_seconds": 10.0, "windows": 2}
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({**old, "devices": d}) + "\n"
                                              for d in (2, 4)))
    assert script.main(_args(tmp_path)) == 0
    assert solves == []


def test_another_scripts_results_are_refused_and_left_alone(script, solves, tmp_path, capsys):
    """A --results file of another script's rows (here exact_small's) is neither read as
    empty nor appended to."""
    results = tmp_path / "r.jsonl"
    foreign = json.dumps({"graph": "test_00000", "devices": 2, "time_limit": 1.0,
                          "label": "cpsat", "value": 10.0}) + "\n"
    results.write_text(foreign)
    script_refused(script.main, _args(tmp_path), capsys, "is not a row of exact_lns.py")
    assert results.read_text() == foreign and solves == []
