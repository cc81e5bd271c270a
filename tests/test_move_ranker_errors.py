"""experiments/move_ranker.py and a researcher's mistakes: one line on stderr and exit code 2
before any run, no section of `--out` replaced by an empty one, torn last lines cut (or, in
another script's records, left out), and `cost` keeping each row as it is made."""

from __future__ import annotations

import json

import pytest

from helpers import ROOT, experiment, one_synthetic_graph, script_refused
from regal.user_errors import report_user_errors

WEIGHTS = ROOT / "data" / "policy" / "move_ranker.npz"     # read only
OUT = "# A learned move ranker\n\n## Evaluation against the twin\n\nthe committed section\n"


@pytest.fixture(scope="module")
def script():
    return experiment("move_ranker")


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mr") / "synth_valid_x"
    folder.mkdir()
    one_synthetic_graph(folder, 10, 12, 1)
    return folder


@pytest.fixture
def paths(tmp_path):
    out = tmp_path / "move_ranker.md"
    out.write_text(OUT)
    return ["--out", str(out), "--records", str(tmp_path / "r.jsonl"),
            "--cost-records", str(tmp_path / "cost.jsonl"),
            "--equal-records", str(tmp_path / "equal.jsonl"),
            "--ceilings", str(tmp_path / "ceilings.jsonl"), "--weights", str(WEIGHTS),
            "--logs", str(tmp_path / "logs"), "--gate-logs", str(tmp_path / "gate"),
            "--gate-out", str(tmp_path / "gated.npz"), "--train", str(tmp_path / "train")]



@pytest.mark.parametrize("step, flags, needle", [
    ("eval", ["--valid", "/nonexistent/synth_valid_40"], "/nonexistent/synth_valid_40"),
    ("timing", ["--valid", "/nonexistent/synth_valid_40"], "--valid"),
    ("eval", ["--weights", "/nonexistent/w.npz"], "/nonexistent/w.npz"),
    ("cost", ["--weights", "/nonexistent/w.npz"], "--weights"),
    ("log", ["--train", "/nonexistent/typo"], "/nonexistent/typo"),
    ("fit", ["--logs", "/nonexistent/typo"], "/nonexistent/typo"),
    ("log", ["--train", "VALID", "--follow", "/nonexistent/f.npz"], "/nonexistent/f.npz"),
    ("eval", ["--seeds", "0"], "--seeds"), ("eval", ["--budgets", "-5"], "--budgets"),
    ("eval", ["--keep", "2"], "--keep"), ("cost", ["--cost-devices", "0"], "--cost-devices"),
    ("cost", ["--cost-graphs", "/nonexistent/g.npz"], "/nonexistent/g.npz"),
    ("eval", ["--out", "/nonexistent/dir/m.md"], "/nonexistent/dir"),
])
def test_mistakes_are_refused_before_any_work(script, valid, paths, tmp_path, capsys, step,
                                              flags, needle):
    argv = [step, "--valid", str(valid), *paths, *(str(valid) if f == "VALID" else f
                                                     for f in flags)]
    script_refused(script.main, argv, capsys, needle)
    assert (tmp_path / "move_ranker.md").read_text() == OUT
    assert not any((tmp_path / name).exists() for name in ("r.jsonl", "cost.jsonl", "logs"))


def test_fit_in_a_folder_without_logs_is_refused(script, paths, tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    script_refused(script.main, ["fit", *paths], capsys, "no logs there")


def test_records_of_another_kind_are_refused_and_left_alone(script, valid, paths, tmp_path,
                                                            capsys, monkeypatch):
    monkeypatch.setattr(script, "_run_all", lambda *args: None)
    ceilings = {"set": "s", "path": "/x/g.npz", "devices": 2, "objective": "peak_memory",
                "budget": 1000, "seed": 0, "arm": "twin", "factor": 1.2, "value": 1.0}
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps(ceilings) + "\n")
    argv = ["eval", "--valid", str(valid), *paths]
    script_refused(script.main, argv, capsys, "line 1 is not a record of this kind")
    assert records.read_text() == json.dumps(ceilings) + "\n"
    assert (tmp_path / "move_ranker.md").read_text() == OUT


def test_eval_with_no_runs_keeps_the_committed_section(script, valid, paths, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.setattr(script, "_run_all", lambda *args: None)     # no run is made
    argv = ["eval", "--valid", str(valid), *paths]
    script_refused(script.main, argv, capsys, "nothing to tabulate")
    assert (tmp_path / "move_ranker.md").read_text() == OUT


def _eval_row(valid, arm, value):
    return dict(path=str(next(valid.glob("*.npz"))), devices=2, objective="peak_memory",
                budget=1000, seed=0, arm=arm, factor=1.2, weights=str(WEIGHTS), weights_id="",
                value=value, evaluations=1000, wall_s=1.0, ranker_s=0.0, limit=None, ops=10)


def test_torn_last_lines_are_cut_or_left_out(script, valid, paths, tmp_path, capsys,
                                             monkeypatch):
    monkeypatch.setattr(script, "_run_all", lambda *args: None)
    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps(_eval_row(valid, arm, value)) + "\n"
                               for arm, value in (("twin", 100.0), ("placebo", 90.0))))
    whole = records.read_text()
    with records.open("a") as fh:
        fh.write('{"path": "/x/valid_0')
    ceilings = tmp_path / "ceilings.jsonl"
    ceilings.write_text('{"arm": "move-oracle-4", "objective": "peak_mem')   # another's file
    argv = ["eval", "--valid", str(valid), *paths]
    assert report_user_errors("move_ranker.py", lambda: script.main(argv)) == 0
    assert records.read_text() == whole
    assert ceilings.read_text() == '{"arm": "move-oracle-4", "objective": "peak_mem'
    text = (tmp_path / "move_ranker.md").read_text()
    assert "the committed section" not in text and "| placebo | 1 | 1 | +10.00" in text


def test_cost_keeps_each_row_as_it_is_made(script, valid, paths, tmp_path, capsys, monkeypatch):
    """A kill in the second repeat keeps the first repeat's two rows."""
    calls = []

    def fake_run(path, arm, budget, seed, weights, devices=2):
        calls.append(arm)
        if len(calls) == 5:          # two warm-ups, a repeat of two, then the kill
            raise KeyboardInterrupt
        return dict(graph="g/g.npz", ops=10, devices=devices, arm=arm, budget=budget,
                    seed=seed, wall_s=1.0, cpu_s=1.0, value=1.0, draw_s=0.0, ranker_s=0.0,
                    untried_s=0.0, policy_s=0.0)
    monkeypatch.setattr(script, "cost_run", fake_run)
    graph = next(valid.glob("*.npz"))
    argv = ["cost", *paths, "--cost-graphs", str(graph), "--cost-repeats", "3"]
    assert report_user_errors("move_ranker.py", lambda: script.main(argv)) == 130
    rows = [json.loads(line) for line in (tmp_path / "cost.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["repeat"]) for r in rows] == [("twin", 0), ("learned", 0)]
