"""experiments/exact_small.py and a researcher's mistakes: one line on stderr and exit code 2
before any run (the table kept), a rerun with other settings runs again, a torn last line is
cut before the next record is appended, and the committed records still count as done."""

from __future__ import annotations

import json

import pytest

from helpers import experiment_keeping_numba_threads, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment_keeping_numba_threads("exact_small")



@pytest.fixture
def runs(script, monkeypatch):
    """one_record replaced by a quick fake that logs its calls (no CP-SAT)."""
    calls = []

    def fake(name, graph, d, time_limit, budget, seed, label, options, store=None,
             store_hint=True):
        calls.append((name, d, options["formulation"], seed, budget))
        return {"graph": name, "ops": int(graph.num_nodes), "devices": d,
                "time_limit": float(time_limit), "label": label, "seed": seed,
                "value": 100.0, "rescored": 100.0, "bound": 90.0, "proven": False,
                "status": "HINT", "formulation": options["formulation"], "wall_s": 0.1,
                "cpu_s": 0.1, "deterministic_s": None}

    monkeypatch.setattr(script, "one_record", fake)
    return calls


def _args(tmp_path, *more):
    return ["--sets", "synth-test", "--graphs", "test_00000", "--devices", "2",
            "--time-limit", "1", "--out", str(tmp_path / "es"), "--before",
            str(tmp_path / "none"), *more]


@pytest.mark.parametrize("argv, needle", [
    (["--sets", "synth_test"], "--sets"),
    (["--devices", "2,x"], "--devices"),
    (["--devices", "0"], "--devices"),
    (["--sets", "synth-test", "--graphs", "test_0001", "--time-limit", "1"], "--graphs"),
    (["--store", "{tmp}/none.jsonl"], "--store"),
    (["--out", "{tmp}/missing/es"], "--out"),
])
def test_a_mistake_is_refused_before_any_run_and_the_table_is_kept(script, runs, tmp_path,
                                                                   capsys, argv, needle):
    md = tmp_path / "es.md"
    md.write_text("# the committed table\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "es")]
    script_refused(script.main, argv, capsys, needle)
    assert md.read_text() == "# the committed table\n" and runs == []
    assert not (tmp_path / "es.jsonl").exists()


def test_other_settings_run_again_and_a_torn_line_is_cut(script, runs, tmp_path, capsys):
    jsonl = tmp_path / "es.jsonl"
    assert script.main(_args(tmp_path, "--formulation", "sequence")) == 0
    assert script.main(_args(tmp_path, "--formulation", "sequence")) == 0   # resumed: done
    assert len(runs) == 1
    assert script.main(_args(tmp_path, "--formulation", "timed")) == 0      # not the old one
    assert [call[2] for call in runs] == ["sequence", "timed"]
    assert script.main(_args(tmp_path, "--formulation", "timed", "--budget", "7")) == 0
    assert len(runs) == 3
    with open(jsonl, "a") as f:
        f.write('{"graph": "test_0')                                       # a kill's torn line
    assert script.main(_args(tmp_path, "--seed", "1")) == 0
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]  # all whole
    assert [(r["formulation_option"], r["seed"], r["budget"]) for r in records] == [
        ("sequence", 0, 5000), ("timed", 0, 5000), ("timed", 0, 7), ("auto", 1, 5000)]
    table = (tmp_path / "es.md").read_text()
    assert table.count("| test_00000 |") == 1       # the table: this run's settings only
    capsys.readouterr()


def test_a_committed_record_counts_as_made_with_the_defaults(script, runs, tmp_path):
    """Records written before the key had the settings: auto formulation (timed for the
    label "timed"), budget 5000, seed 0, the heuristics' hint."""
    old = {"graph": "test_00000", "ops": 68, "devices": 2, "time_limit": 1.0, "seed": 0,
           "value": 1161.0, "rescored": 1161.0, "bound": 1033.0, "proven": False,
           "status": "HINT", "formulation": "cumulative", "wall_s": 60.0, "cpu_s": 60.0,
           "deterministic_s": 34.0}
    (tmp_path / "es.jsonl").write_text(
        json.dumps({**old, "label": "cpsat"}) + "\n"
        + json.dumps({**old, "label": "timed", "formulation": None}) + "\n")
    assert script.main(_args(tmp_path)) == 0
    assert script.main(_args(tmp_path, "--label", "timed", "--formulation", "timed")) == 0
    assert runs == []
    assert script.main(_args(tmp_path, "--label", "timed")) == 0   # auto was never run
    assert len(runs) == 1


@pytest.mark.parametrize("flag", ["--out", "--before"])
def test_another_scripts_records_are_refused_before_any_run(script, runs, tmp_path, capsys,
                                                            flag):
    """An --out or --before whose .jsonl holds another script's rows (here exact_lns.py's)
    is refused with one line, before any run, and left as it was."""
    other = tmp_path / "other.jsonl"
    foreign = '{"set": "synth_test", "graph": "test_00000", "devices": 2, "before": 1.0}\n'
    other.write_text(foreign)
    argv = _args(tmp_path, flag, str(tmp_path / "other"))
    script_refused(script.main, argv, capsys, "is not a record of exact_small.py")
    assert other.read_text() == foreign and runs == []
