"""experiments/ceilings.py and a researcher's mistakes: each is one line on stderr and exit
code 2 before any run, a committed table is never replaced by an empty one, a torn last line
is cut, and the table holds the runs of one `--limit-factor` only."""

from __future__ import annotations

import json

import pytest

from helpers import experiment, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment("ceilings")



def _row(arm, graph, seed, value, factor=1.2, objective="makespan"):
    return dict(set="s", path=f"/x/{graph}.npz", devices=2, objective=objective, budget=1000,
                seed=seed, arm=arm, factor=factor, value=value)


def _records(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def setup(tmp_path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "g.npz").write_bytes(b"")         # never read: the runs are refused first
    out = tmp_path / "ceilings.md"
    out.write_text("# the committed table\n")
    return graphs, out


def test_a_typo_in_records_keeps_the_committed_table(script, setup, tmp_path, capsys):
    graphs, out = setup
    typo = tmp_path / "typo.jsonl"
    script_refused(script.main,
                   ["--graphs", str(graphs), "--records", str(typo), "--out", str(out),
                    "--table-only"],
                   capsys, str(typo))
    assert out.read_text() == "# the committed table\n" and not typo.exists()
    script_refused(script.main,
                   ["--graphs", str(graphs), "--records", str(tmp_path), "--out", str(out),
                    "--table-only"],
                   capsys, "is a folder")
    assert out.read_text() == "# the committed table\n"


def test_another_files_lines_are_refused_and_left_alone(script, setup, tmp_path, capsys):
    graphs, out = setup
    other = tmp_path / "other.jsonl"
    other.write_text('{"key": "x|2", "peak": 3}\n')
    script_refused(script.main,
                   ["--graphs", str(graphs), "--records", str(other), "--out", str(out),
                    "--table-only"],
                   capsys, "line 1 is not a ceiling run")
    other.write_text("not json\n")
    script_refused(script.main,
                   ["--graphs", str(graphs), "--records", str(other), "--out", str(out)], capsys,
                   str(other))
    assert other.read_text() == "not json\n" and out.read_text() == "# the committed table\n"


@pytest.mark.parametrize("flags, needle", [
    (["--budgets", "-5"], "--budgets"), (["--devices", "0"], "--devices"),
    (["--devices", "two"], "--devices"), (["--seeds", "0"], "--seeds"),
    (["--limit-factor", "nan"], "--limit-factor"), (["--workers", "0"], "--workers"),
    (["--arms", "twin,nope"], "nope"), (["--out", "/nonexistent/dir/c.md"], "/nonexistent/dir"),
    (["--records", "/nonexistent/dir/c.jsonl"], "/nonexistent/dir"),
])
def test_bad_values_are_refused_before_any_run(script, setup, tmp_path, capsys, flags, needle):
    graphs, out = setup
    argv = ["--graphs", str(graphs), "--records", str(tmp_path / "r.jsonl"), "--out", str(out)]
    script_refused(script.main, argv + flags, capsys, needle)
    assert not (tmp_path / "r.jsonl").exists() and out.read_text() == "# the committed table\n"


def test_an_empty_graph_folder_is_refused(script, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    script_refused(script.main,
                   ["--graphs", str(tmp_path / "empty"), "--records", str(tmp_path / "r.jsonl"),
                    "--out", str(tmp_path / "c.md")],
                   capsys, "no .npz graph files")


def test_a_torn_last_line_is_cut_and_the_table_made(script, setup, tmp_path, capsys):
    graphs, out = setup
    records = _records(tmp_path / "r.jsonl", [_row("twin", "a", 0, 100.0),
                                               _row("move-oracle-4", "a", 0, 90.0)])
    whole = records.read_text()
    with records.open("a") as fh:
        fh.write('{"key": ["ab')
    assert script.main(["--graphs", str(graphs), "--records", str(records), "--out", str(out),
                        "--table-only"]) == 0
    assert records.read_text() == whole
    assert "(2 runs)" in out.read_text() and "+10.00 (+10.00)" in out.read_text()


def test_the_table_holds_the_runs_of_one_limit_factor(script, setup, tmp_path, capsys):
    """brkga-only run at 1.2 and the twin at 3.0 are not compared: at 3.0 there is nothing to
    tabulate; at 1.2 the header's factor is the runs' factor."""
    graphs, out = setup
    records = _records(tmp_path / "r.jsonl", [
        _row("twin", "a", 0, 100.0), _row("brkga-only", "a", 0, 50.0),
        _row("twin", "a", 0, 200.0, factor=3.0)])
    argv = ["--graphs", str(graphs), "--records", str(records), "--out", str(out),
            "--table-only"]
    # at 3.0 only the twin ran: no lever to set beside it, so no table (not one of dashes)
    out.write_text("# the committed table\n")
    script_refused(script.main, argv + ["--limit-factor", "3.0"], capsys,
                   "no lever run beside the twin at --limit-factor 3")
    assert out.read_text() == "# the committed table\n"
    assert script.main(argv) == 0      # at 1.2: brkga-only against the twin of 1.2
    assert "(2 runs)" in out.read_text() and "| brkga-only | 1 | +50.00 |" in out.read_text()
    assert "limit of 1.2 x" in out.read_text()
    before = out.read_text()
    script_refused(script.main, argv + ["--limit-factor", "2"], capsys,
                   "no runs at --limit-factor 2")
    assert out.read_text() == before
