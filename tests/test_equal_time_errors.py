"""experiments/equal_time.py and large_steps.py and a researcher's mistakes: one error line,
exit code 2, checked before any run (outputs too); a torn records line resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import experiment, one_synthetic_graph, script_help, script_refused

equal_time = experiment("equal_time")
large_steps = experiment("large_steps")



@pytest.fixture
def graphs(tmp_path):
    (tmp_path / "graphs").mkdir()
    return Path(one_synthetic_graph(tmp_path / "graphs", 20, 30, 3)).parent


@pytest.mark.parametrize("more, needle", [
    (["--budget", "-5"], "--budget"), (["--devices", "0"], "--devices"),        # audit B13
    (["--seeds", "0"], "--seeds"),
    (["--records", "{tmp}"], "--records"),                                       # B15: a folder
    (["--out", "{tmp}/no/t.md"], "--out"),                                       # B16
])
def test_equal_time_refuses_before_any_run(graphs, tmp_path, capsys, more, needle):
    records = tmp_path / "r.jsonl"
    argv = ["--graphs", str(graphs), "--records", str(records), "--out", str(tmp_path / "t.md")]
    script_refused(equal_time.main, argv + [m.format(tmp=tmp_path) for m in more], capsys, needle)
    assert not records.exists()


@pytest.mark.parametrize("more, needle", [
    (["--graphs", "{tmp}/file"], "--graphs"),                                   # audit B12
    (["--out", "{tmp}/no/t.md"], "--out"),                                       # B16
    (["--records", "{tmp}"], "--records"),
    (["--devices", "0"], "--devices"), (["--budget", "0"], "--budget"),
])
def test_large_steps_refuses_before_any_run(tmp_path, capsys, more, needle):
    (tmp_path / "file").write_text("x")
    records = tmp_path / "r.jsonl"
    argv = ["--graphs", str(tmp_path / "g"), "--records", str(records),
            "--out", str(tmp_path / "t.md")]
    script_refused(large_steps.main, argv + [m.format(tmp=tmp_path) for m in more], capsys, needle)
    assert not records.exists() and not (tmp_path / "g").exists()


def test_equal_time_resumes_after_a_torn_line(graphs, tmp_path):
    """Audit A6: a kill mid-write leaves half a line; the rerun cuts it and resumes."""
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    argv = ["--graphs", str(graphs), "--devices", "2", "--seeds", "1", "--budget", "200",
            "--methods", "regal", "brkga", "--records", str(records), "--out", str(out)]
    assert equal_time.main(argv) == 0
    lines = records.read_text().splitlines()
    with records.open("a") as fh:
        fh.write('{"key": ["ab')
    assert equal_time.main(argv) == 0
    assert records.read_text().splitlines() == lines              # cut; nothing ran again
    # the last run torn: made again, on a line of its own
    records.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    assert equal_time.main(argv) == 0
    assert len(records.read_text().splitlines()) == len(lines)
    assert records.read_text().endswith("}\n")


def test_large_steps_resumes_after_a_torn_line(tmp_path, monkeypatch):
    monkeypatch.setattr(large_steps, "RECIPE", dict(large_steps.RECIPE, min_ops=40, max_ops=60))
    records, out = tmp_path / "r.jsonl", tmp_path / "t.md"
    argv = ["--count", "1", "--devices", "2", "--seeds", "1", "--budget", "100",
            "--long-budget", "0", "--workers", "1", "--methods", "regal", "seeded-brkga",
            "--graphs", str(tmp_path / "graphs"), "--records", str(records), "--out", str(out)]
    assert large_steps.main(argv) == 0
    lines = records.read_text().splitlines()
    table = out.read_text()
    with records.open("a") as fh:
        fh.write('{"graph": "ab')
    assert large_steps.main(argv) == 0
    assert records.read_text().splitlines() == lines and out.read_text() == table


def test_large_steps_keeps_its_table_when_it_cannot_set_the_limits(tmp_path, monkeypatch,
                                                                   capsys):
    """--objective makespan with no peak-memory runs to set the limits from: one error line,
    and the table already there is left as it is."""
    monkeypatch.setattr(large_steps, "RECIPE", dict(large_steps.RECIPE, min_ops=40, max_ops=60))
    out = tmp_path / "t.md"
    out.write_text("# committed\n")
    script_refused(large_steps.main,
                   ["--count", "1", "--devices", "2", "--objective", "makespan", "--graphs",
                    str(tmp_path / "graphs"), "--records", str(tmp_path / "r.jsonl"), "--out",
                    str(out)],
                   capsys, "run without --objective first")
    assert out.read_text() == "# committed\n"


@pytest.mark.parametrize("script, words", [
    (equal_time, "REGAL against the other searches at equal wall time (tracker issue 38, "
                 "item 5)."),
    (large_steps, "graphs of 10k-100k ops, where the twin leaves most)."),
])
def test_help_describes_in_whole_sentences(capsys, script, words):
    assert words in script_help(script.main, capsys)
