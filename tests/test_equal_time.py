"""experiments/equal_time.py: every method gets regal's seconds, the table's figures by hand,
resuming, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import experiment, one_synthetic_graph


def _row(graph, method, seed, value, seconds=1.0, evaluations=100):
    return dict(set="s", graph=graph, devices=2, seed=seed, method=method, budget=5000,
                seconds=seconds, value=value, evaluations=evaluations, wall_s=1.0, ops=10)


def test_table_by_hand():
    script = experiment("equal_time")
    rows = [_row("a", "brkga", 0, 100.0), _row("a", "regal", 0, 90.0),
            _row("a", "local-search", 0, 95.0),
            _row("b", "brkga", 0, 200.0), _row("b", "regal", 0, 200.0),
            _row("b", "local-search", 0, 190.0),
            _row("a", "regal", 0, 1.0, seconds=None)]      # the untimed run: not in the table
    text = script.table(rows, ["regal", "brkga", "local-search"])
    cells = {line.split("|")[4].strip(): [c.strip() for c in line.strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| s |")}
    # regal over BRKGA: +10 and 0 points -> mean +5.00, median +5.00
    assert cells["regal"][2] == "peak_memory" and cells["regal"][5:7] == ["+5.00", "+5.00"]
    # local search: +5 and +5; regal's lead: 100 x (95 - 90) / 95 = +5.263, (190 - 200) / 190
    # = -5.263: mean 0, se = 5.263 * sqrt(2) / sqrt(2) = 5.26
    assert cells["local-search"][5] == "+5.00"
    assert cells["local-search"][7] == "+0.00 ± 5.26" and cells["local-search"][8] == "1 / 1"
    assert "brkga" not in cells


def test_every_method_gets_regals_seconds_and_resumes(tmp_path):
    script = experiment("equal_time")
    (tmp_path / "graphs").mkdir()
    folder = Path(one_synthetic_graph(tmp_path / "graphs", 20, 30, 3)).parent
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    argv = ["--graphs", str(folder), "--devices", "2", "--seeds", "1", "--budget", "300"]
    argv += ["--methods", "regal", "brkga", "local-search"]
    argv += ["--records", str(records), "--out", str(out)]
    assert script.main(argv) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    (untimed,) = [r for r in rows if r["seconds"] is None]
    timed = [r for r in rows if r["seconds"] is not None]
    assert untimed["method"] == "regal" and untimed["evaluations"] <= 300
    assert sorted(r["method"] for r in timed) == ["brkga", "local-search", "regal"]
    assert all(r["seconds"] == untimed["wall_s"] for r in timed)
    assert "| graphs | 2 | peak_memory | local-search | 1 |" in out.read_text()
    assert script.main(argv) == 0                      # resumed: nothing runs again
    assert len(records.read_text().splitlines()) == len(rows)


def test_runs_of_other_code_are_made_again_and_left_out_of_the_table(tmp_path):
    """Each record keeps the code revisions it depends on (its method's and regal's, whose
    seconds it gets): after a revision the runs are made again, and the table reads only the
    current code's, whatever the earlier runs gave."""
    script = experiment("equal_time")
    (tmp_path / "graphs").mkdir()
    folder = Path(one_synthetic_graph(tmp_path / "graphs", 20, 30, 3)).parent
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    argv = ["--graphs", str(folder), "--devices", "2", "--seeds", "1", "--budget", "300",
            "--methods", "regal", "brkga", "--records", str(records), "--out", str(out)]
    assert script.main(argv) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert {tuple(r["revisions"]) for r in rows} == {
        tuple(script.revisions_of(r["method"], None)) for r in rows}
    # the same runs as if an earlier regal had made them, three times worse, or with no
    # revisions at all: read as they are, regal would be 200 points behind BRKGA
    def worse(r):
        return r["value"] * 3 if r["method"] == "regal" else r["value"]
    for stale in ([dict(r, revisions=["old", "old"], value=worse(r)) for r in rows],
                  [{k: worse(r) if k == "value" else v for k, v in r.items()
                    if k != "revisions"} for r in rows]):
        records.write_text("".join(json.dumps(r) + "\n" for r in stale))
        assert script.main(argv) == 0
        assert len(records.read_text().splitlines()) == 2 * len(rows)   # all made again
        fresh = [json.loads(line) for line in records.read_text().splitlines()][len(rows):]
        assert all(r["revisions"] == script.revisions_of(r["method"], None) for r in fresh)
        (regal,) = [line.split("|") for line in out.read_text().splitlines()
                    if line.startswith("| graphs | 2 | peak_memory | regal |")]
        assert float(regal[6]) > -50       # the table read the new runs only


def test_bad_input_is_refused(tmp_path, capsys):
    script = experiment("equal_time")
    assert script.main(["--graphs", str(tmp_path), "--records", str(tmp_path / "r.jsonl"),
                        "--out", str(tmp_path / "t.md")]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    (tmp_path / "g").mkdir()
    one_synthetic_graph(tmp_path / "g", 20, 30, 3)
    assert script.main(["--graphs", str(tmp_path / "g"), "--methods", "nope",
                        "--records", str(tmp_path / "r.jsonl"),
                        "--out", str(tmp_path / "t.md")]) == 2
    assert "--methods" in capsys.readouterr().err and not (tmp_path / "r.jsonl").exists()


def test_step_time_runs_get_the_transfer_tables_limit(tmp_path):
    """--objective makespan: every run under 1.2 x the graph's best-known peak (here the
    reference heuristics' best: a new graph has no store entry), kept apart from peak runs."""
    script = experiment("equal_time")
    from regal.io import load_graph
    from regal.policy.reference import reference_for
    from regal.sim import DeviceSpec

    (tmp_path / "graphs").mkdir()
    path = Path(one_synthetic_graph(tmp_path / "graphs", 20, 30, 4))
    records = tmp_path / "r.jsonl"
    argv = ["--graphs", str(path.parent), "--devices", "2", "--seeds", "1", "--budget", "300",
            "--methods", "regal", "brkga", "--records", str(records),
            "--out", str(tmp_path / "t.md")]
    assert script.main(argv + ["--objective", "makespan"]) == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    limit = int(1.2 * reference_for(load_graph(path), DeviceSpec(2), "peak_memory").value)
    assert {r["objective"] for r in rows} == {"makespan"} and len(rows) == 3
    assert all(r["memory_limit"] == limit for r in rows)
    assert script.main(argv) == 0                     # peak memory: runs of its own
    assert len(records.read_text().splitlines()) == 6
    assert "| graphs | 2 | makespan | regal |" in (tmp_path / "t.md").read_text()


def test_a_run_under_another_memory_limit_is_not_reused():
    """The key holds the memory limit: a step-time run made under an older best-known peak's
    limit is made again (the store moved since), not passed off as today's."""
    script = experiment("equal_time")
    run = dict(_row("a", "brkga", 0, 100.0), objective="makespan", memory_limit=1112,
               revisions=["r", "r"])
    assert script.key(run) != script.key(dict(run, memory_limit=1110))
    assert script.key(run) == script.key(dict(run, value=1.0, wall_s=9.0))
    # rows from before step-time runs: peak memory, no limit
    old = {k: v for k, v in _row("a", "brkga", 0, 100.0).items()}
    assert script.key(old) == script.key(dict(old, objective="peak_memory", memory_limit=None))
