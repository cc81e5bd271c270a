"""experiments/no_harm.py: which graphs are rechecked, the figures against runs made here,
resuming, bad input."""

from __future__ import annotations

import json

import pytest

from helpers import brkga_and_local_search_run, experiment, script_refused
from regal import optimizers
from regal.io import load_graph
from regal.sim import DeviceSpec


def test_improvement_and_standard_error_by_hand():
    script = experiment("no_harm")
    pairs = [(100.0, 90.0), (100.0, 110.0), (100.0, 103.0)]
    assert script.improvement(pairs) == pytest.approx(-1.0)       # 100 vs mean 101
    # per seed +10, -10, -3: mean -1, squared deviations 121 + 81 + 4 = 206, variance 103
    assert script.standard_error(pairs) == pytest.approx((103 / 3) ** 0.5)


def test_rechecks_the_graphs_below_the_line_with_more_seeds(tmp_path):
    script = experiment("no_harm")
    folder, path, out = brkga_and_local_search_run(tmp_path, "synth", 20, 30, 3, seeds=2,
                                                   budget=300)
    records = out / "records.jsonl"
    # local search beats BRKGA on this graph: nothing is below 0%, everything below +100%
    assert script.suspects(records, "local-search", None, 0.0, 300) == {}
    (key,) = script.suspects(records, "local-search", None, 100.0, 300)
    table = tmp_path / "no_harm.md"
    argv = ["--records", str(records), "--graphs", str(folder), "--method", "local-search",
            "--below", "100", "--seeds", "3", "--budget", "300", "--out", str(table)]
    assert script.main(argv) == 0
    problem = optimizers.Problem(load_graph(path), DeviceSpec(2))
    pairs = [(optimizers.solve("brkga", problem, 300, s).value,
              optimizers.solve("local-search", problem, 300, s).value) for s in range(3)]
    row = [line for line in table.read_text().splitlines() if line.startswith("| synth |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[:4] == ["synth", "2", key[1], "2"]
    assert cells[5] == f"{script.improvement(pairs):+.2f}%"
    assert cells[6] == f"{script.standard_error(pairs):.2f}"
    assert cells[8] == "yes"                    # seeds 0 and 1 reproduce the records
    # resumed: nothing runs again
    lines = table.with_suffix(".jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["seed"] == 0
    assert script.main(argv) == 0
    assert len(table.with_suffix(".jsonl").read_text().splitlines()) == 3


def test_bad_input_is_refused(tmp_path, capsys):
    script = experiment("no_harm")
    for argv, needle in ((["--records", str(tmp_path / "none.jsonl")], "none.jsonl"),
                         (["--records", str(tmp_path), "--method", "nope"], "--records"),
                         (["--seeds", "1"], "--seeds")):
        records = tmp_path / "r.jsonl"
        records.write_text("")
        script_refused(script.main, ["--records", str(records), "--graphs", str(tmp_path),
                                     "--out", str(tmp_path / "o.md")] + argv, capsys, needle)


def test_checks_a_method_against_another_than_brkga(tmp_path):
    """`--against`: the pairs are (the other method, the method) on the same seeds, and the
    cache keeps them apart from the BRKGA check's."""
    script = experiment("no_harm")
    folder, path, out = brkga_and_local_search_run(tmp_path, "synth", 20, 30, 3, seeds=2,
                                                   budget=300)
    records = out / "records.jsonl"
    # BRKGA is behind local search here: below 0% against it
    (key,) = script.suspects(records, "brkga", None, 0.0, 300, against="local-search")
    assert key[-1] is None                                   # no memory limit: peak memory
    assert script.suspects(records, "brkga", None, 0.0, 300, against="local-search",
                           objective="makespan") == {}       # no runs under limits
    table = tmp_path / "twin.md"
    argv = ["--records", str(records), "--graphs", str(folder), "--method", "brkga",
            "--against", "local-search", "--seeds", "2", "--budget", "300",
            "--out", str(table)]
    assert script.main(argv) == 0
    problem = optimizers.Problem(load_graph(path), DeviceSpec(2))
    pairs = [(optimizers.solve("local-search", problem, 300, s).value,
              optimizers.solve("brkga", problem, 300, s).value) for s in range(2)]
    text = table.read_text()
    assert "brkga against local-search-0K" in text.splitlines()[0]
    row = [line for line in text.splitlines() if line.startswith("| synth |")]
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[5] == f"{script.improvement(pairs):+.2f}%" and cells[8] == "yes"
    rows = [json.loads(line) for line in table.with_suffix(".jsonl").read_text().splitlines()]
    assert [r["against"] for r in rows] == ["local-search"] * 2


def test_a_cached_run_of_other_code_is_run_again(tmp_path):
    """The cache keeps each run's code revisions: a cached run made by other code (a method
    revised since, or a line from before revisions were stored) is run again, not passed off
    as the current code's."""
    script = experiment("no_harm")
    folder, path, out = brkga_and_local_search_run(tmp_path, "synth", 20, 30, 3, seeds=2,
                                                   budget=300)
    table = tmp_path / "no_harm.md"
    argv = ["--records", str(out / "records.jsonl"), "--graphs", str(folder), "--method",
            "local-search", "--below", "100", "--seeds", "2", "--budget", "300",
            "--out", str(table)]
    assert script.main(argv) == 0
    cache = table.with_suffix(".jsonl")
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert [r["revisions"] for r in rows] == [["", ""]] * 2
    text = table.read_text()
    # the same runs, as if made by an earlier local search (other values), and without revisions
    stale = [dict(r, revisions=["old", ""], value=r["value"] * 10) for r in rows]
    bare = [{k: v for k, v in r.items() if k != "revisions"} for r in stale]
    for lines in (stale, bare):
        cache.write_text("".join(json.dumps(r) + "\n" for r in lines))
        assert script.main(argv) == 0
        assert table.read_text() == text              # made again: the current code's figures
        rows = [json.loads(line) for line in cache.read_text().splitlines()]
        assert len(rows) == 4 and [r["revisions"] for r in rows[2:]] == [["", ""]] * 2
