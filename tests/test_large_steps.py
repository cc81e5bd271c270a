"""experiments/large_steps.py: the tables' figures by hand, a small run that resumes and
leaves other code's runs out, bad input."""

from __future__ import annotations

import json

from helpers import experiment, script_refused


def _row(graph, method, seed, value, family="random", devices=2):
    return dict(graph=graph, family=family, devices=devices, seed=seed, method=method,
                revision="", budget=5000, value=value, evaluations=5000, wall_s=1.0, ops=10)


def _cells(text: str, first: str) -> dict:
    """Rows of the markdown tables whose first cell is `first`, by their next cell(s)."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            out[tuple(cells[1:3])] = cells
    return out


def test_tables_by_hand():
    script = experiment("large_steps")
    rows = [_row("a", "brkga", 0, 100.0), _row("a", "brkga", 1, 100.0),
            _row("a", "seeded-brkga", 0, 80.0), _row("a", "seeded-brkga", 1, 100.0),
            _row("a", "regal", 0, 72.0), _row("a", "regal", 1, 90.0),
            _row("a", "regal-no-ranker", 0, 90.0),
            _row("b", "brkga", 0, 200.0, "cnn"), _row("b", "seeded-brkga", 0, 190.0, "cnn"),
            _row("b", "regal", 0, 190.0, "cnn"), _row("b", "regal-no-ranker", 0, 180.0, "cnn")]
    text = script.tables(rows)
    over = _cells(text, "2")
    # regal over BRKGA: graph a: means 81 vs 100 -> +19; graph b: 190 vs 200 -> +5
    regal = over[("regal", "2")]
    assert regal[3:7] == ["+12.00 ± 7.00", "+12.00", "+5.00", "+19.00"]
    # policy adds (regal - twin): a: means 81 vs 90 -> 10 points; b: 0 -> mean +5, se 5
    adds = {(c[1], c[2]): c for c in
            [[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| 2 | policy adds")]}
    assert adds[("policy adds: regal - twin", "all")][3:5] == ["2", "+5.00 ± 5.00"]
    assert adds[("policy adds: regal - twin", "random")][3:5] == ["1", "+10.00 ± 0.00"]
    assert adds[("policy adds: regal - twin", "cnn")][3:5] == ["1", "+0.00 ± 0.00"]
    # the prior alone on graph a: only seed 0 in common, 80 vs 90 -> -12.5 points;
    # graph b: 190 vs 180 -> +5.26
    prior = [line for line in text.splitlines()
             if line.startswith("| 2 | the BRKGA prior alone") and "| all |" in line]
    assert "-3.62 ± 8.88" in prior[0]


def test_gaps_to_the_best_known_by_hand():
    script = experiment("large_steps")
    rows = [_row("a", "seeded-brkga", 0, 110.0), _row("a", "seeded-brkga", 1, 130.0),
            _row("a", "regal", 0, 105.0), _row("a", "regal", 1, 105.0),
            _row("b", "seeded-brkga", 0, 220.0), _row("b", "regal", 0, 230.0),
            _row("b", "local-search", 0, 250.0)]
    long = [dict(_row("a", "local-search", 0, 100.0), budget=50000),
            dict(_row("b", "regal", 0, 200.0), budget=50000)]
    best = script.best_known(rows + long)
    assert best == {(2, "a"): 100.0, (2, "b"): 200.0}
    text = script.gap_table(rows, best)
    gaps = _cells(text, "2")
    # twin: a 120 vs 100 -> 20%, b 220 vs 200 -> 10%: mean 15, median 15, max 20
    assert gaps[("seeded-brkga", "2")][3:6] == ["15.00", "15.00", "20.00"]
    # regal: a 5%, b 15%: median 10, against the twin's 15: 0.67, not at most half
    assert gaps[("regal", "2")][3:6] == ["10.00", "10.00", "15.00"]
    assert gaps[("local-search", "1")][3:7] == ["25.00", "25.00", "25.00", "1 of 1"]
    rows[0]["feasible"] = False                      # a twin's run over its limit: counted
    assert _cells(script.gap_table(rows, best), "2")[("seeded-brkga", "2")][6] == "2 of 3"
    ratio = [line for line in text.splitlines() if line.startswith("| 2 | 15.00 |")]
    assert ratio == ["| 2 | 15.00 | 10.00 | 0.67 | no |"]


def test_a_small_run_resumes_and_reads_only_current_code(tmp_path, monkeypatch):
    script = experiment("large_steps")
    monkeypatch.setattr(script, "RECIPE", dict(script.RECIPE, min_ops=40, max_ops=60))
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    argv = ["--count", "1", "--devices", "2", "--seeds", "1", "--budget", "200",
            "--long-budget", "400", "--workers", "1", "--methods", "regal", "seeded-brkga",
            "regal-no-ranker", "--graphs", str(tmp_path / "graphs"), "--records", str(records),
            "--out", str(out)]
    assert script.main(argv) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted((r["method"], r["budget"]) for r in rows) == [
        ("brkga", 200), ("local-search", 400), ("regal", 200), ("regal", 400),
        ("regal-no-ranker", 200), ("seeded-brkga", 200)]
    assert all(r["evaluations"] <= r["budget"] and 40 <= r["ops"] <= 60 for r in rows)
    best = min(r["value"] for r in rows)
    regal = next(r["value"] for r in rows if r["method"] == "regal" and r["budget"] == 200)
    assert f"| 2 | regal | 1 | {100 * (regal - best) / best:.2f} |" in out.read_text()
    assert "Made by `python experiments/large_steps.py --count 1 --devices 2" in out.read_text()
    assert {r["revision"] for r in rows if r["method"].startswith("regal")} == {
        script.revision("regal")}
    assert "| 2 | policy adds: regal - twin | all | 1 |" in out.read_text()
    assert script.main(argv) == 0                                 # resumed: nothing again
    assert len(records.read_text().splitlines()) == len(rows)
    table = out.read_text().split("\n\n", 2)[2]
    # runs of other code after the current ones (regal three times worse): left out
    stale = [dict(r, revision="old", value=3 * r["value"] if r["method"] == "regal"
                  else r["value"]) for r in rows]
    with records.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in stale)
    assert script.main(argv) == 0
    assert len(records.read_text().splitlines()) == 2 * len(rows)    # nothing ran
    assert out.read_text().split("\n\n", 2)[2] == table
    # only runs of other code: every run is made again
    records.write_text("".join(json.dumps(r) + "\n" for r in stale))
    assert script.main(argv) == 0
    assert len(records.read_text().splitlines()) == 2 * len(rows)
    assert out.read_text().split("\n\n", 2)[2] == table          # the same runs again


def test_the_step_time_under_limits_set_from_the_best_known_peaks(tmp_path, monkeypatch,
                                                                    capsys):
    script = experiment("large_steps")
    monkeypatch.setattr(script, "RECIPE", dict(script.RECIPE, min_ops=40, max_ops=60))
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    base = ["--count", "1", "--devices", "2", "--seeds", "1", "--budget", "200",
            "--long-budget", "0", "--workers", "1", "--methods", "regal", "seeded-brkga",
            "--graphs", str(tmp_path / "graphs"), "--records", str(records), "--out", str(out)]
    # no peak-memory runs yet: nothing to set the limit from
    assert script.main(base + ["--objective", "makespan"]) == 2
    assert "run without --objective first" in capsys.readouterr().err
    assert script.main(base) == 0
    peaks = [json.loads(line) for line in records.read_text().splitlines()]
    assert script.main(base + ["--objective", "makespan"]) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()][len(peaks):]
    limit = int(1.2 * min(r["value"] for r in peaks))
    assert sorted(r["method"] for r in rows) == ["brkga", "regal", "seeded-brkga"]
    assert all(r["objective"] == "makespan" and r["limit"] == limit for r in rows)
    assert all(r["revision"] == script.revision(r["method"], limit) for r in rows)
    text = out.read_text()
    assert "step time under a limit of 1.2 x" in text
    assert "| 2 | policy adds: regal - twin | all | 1 |" in text
    # the peak-memory table reads the peak-memory runs only
    assert script.main(base) == 0
    assert "peak memory, seeds 0-0" in out.read_text()
    assert len(records.read_text().splitlines()) == len(peaks) + len(rows)


def test_bad_input_is_refused(tmp_path, capsys):
    script = experiment("large_steps")
    base = ["--records", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "t.md")]
    script_refused(script.main, ["--seeds", "0"] + base, capsys, "--seeds")
    assert script.main(["--devices", "0"] + base) == 2
    assert "--devices" in capsys.readouterr().err
    script_refused(script.main, ["--long-budget", "-1"] + base, capsys, "--long-budget")
    assert not (tmp_path / "r.jsonl").exists()


def test_a_run_under_another_limit_is_not_reused():
    """The key holds the limit: a step-time run under a limit set from other best-known
    peaks is made again; peak-memory rows from before runs under limits (no "limit") keep
    their key."""
    script = experiment("large_steps")
    row = dict(graph="g", devices=2, seed=0, method="regal", budget=200, revision="r",
               objective="makespan", limit=1000)
    assert script.key(row) != script.key(dict(row, limit=999))
    old = {k: v for k, v in row.items() if k not in ("objective", "limit")}
    assert script.key(old) == script.key(dict(old, objective="peak_memory", limit=None))
