"""experiments/no_harm_null.py: the twin against itself with shifted seeds, flagged and
rechecked by no_harm's rule; the figures against runs made here, resuming, bad input."""

from __future__ import annotations

import json

import pytest

from helpers import (brkga_and_local_search_run, experiment, one_synthetic_graph,
                     script_refused)
from regal import optimizers
from regal.io import load_graph
from regal.sim import DeviceSpec


def _cells(table, dataset):
    rows = [line for line in table.read_text().splitlines() if line.startswith(f"| {dataset} |")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_flags_and_rechecks_the_method_against_its_own_shifted_seeds(tmp_path):
    script = experiment("no_harm_null")
    folder, path, out = brkga_and_local_search_run(tmp_path, "synth", 20, 30, 3, seeds=2,
                                                   budget=300)
    table = tmp_path / "null.md"
    argv = ["--records", str(out / "records.jsonl"), "--graphs", str(folder),
            "--method", "brkga", "--select-seeds", "2", "--seeds", "3", "--seed-offset", "10",
            "--budget", "300", "--below", "100", "--out", str(table)]
    assert script.main(argv) == 0
    problem = optimizers.Problem(load_graph(path), DeviceSpec(2))

    def pairs(seeds):
        return [(optimizers.solve("brkga", problem, 300, s).value,
                 optimizers.solve("brkga", problem, 300, s + 10).value) for s in range(seeds)]
    (cells,) = _cells(table, "synth")          # below +100%: every pair is flagged
    assert cells[:2] == ["synth", "2"]
    assert cells[3] == f"{script.improvement(pairs(2)):+.2f}%"
    assert cells[4] == f"{script.improvement(pairs(3)):+.2f}%"
    assert cells[6] == ("yes" if script.improvement(pairs(3)) < -1 else "no")
    assert "1 graph and device pairs; 1 flagged" in table.read_text().replace("**", "")
    # seed 2 and the shifted seeds 10, 11, 12 ran here; seeds 0 and 1 came from the records
    lines = table.with_suffix(".jsonl").read_text().splitlines()
    assert len(lines) == 4
    assert script.main(argv) == 0               # resumed: nothing runs again
    assert len(table.with_suffix(".jsonl").read_text().splitlines()) == 4
    # each cached run keeps its code's revision; a run of other code is made again
    rows = [json.loads(line) for line in lines]
    assert {tuple(r["revisions"]) for r in rows} == {("",)}
    text = table.read_text()
    table.with_suffix(".jsonl").write_text("".join(
        json.dumps(dict(r, revisions=["old"], value=r["value"] * 10)) + "\n" for r in rows))
    assert script.main(argv) == 0 and table.read_text() == text
    assert len(table.with_suffix(".jsonl").read_text().splitlines()) == 8
    # a line no pair is below flags none
    argv[argv.index("--below") + 1] = "-100"
    assert script.main(argv) == 0 and "(none)" in table.read_text()


def test_bad_input_is_refused(tmp_path, capsys):
    script = experiment("no_harm_null")
    records = tmp_path / "r.jsonl"
    records.write_text("")
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    one_synthetic_graph(graphs, 20, 30, 3)
    for argv, needle in ((["--records", str(tmp_path / "none.jsonl")], "none.jsonl"),
                         (["--method", "nope"], "--method"),
                         (["--select-seeds", "4", "--seeds", "3"], "--select-seeds"),
                         (["--seed-offset", "2"], "--seed-offset"),
                         ([], "no seeded-brkga runs")):
        script_refused(script.main, ["--records", str(records), "--graphs", str(graphs),
                                     "--out", str(tmp_path / "o.md")] + argv, capsys, needle)
    # a folder that is not there: one error line, exit code 2
    assert script.main(["--records", str(records), "--graphs", str(tmp_path / "empty"),
                        "--out", str(tmp_path / "o.md")]) == 2
    assert "--graphs" in capsys.readouterr().err


def test_runs_under_the_records_memory_limits_for_makespan(tmp_path):
    """`--objective makespan`: the pairs are the runs under each graph's limit of the records,
    and the shifted seeds run under the same limit."""
    from regal import harness

    script = experiment("no_harm_null")
    folder = tmp_path / "graphs"
    folder.mkdir()
    path = one_synthetic_graph(folder, 20, 30, 3)
    problem = optimizers.Problem(load_graph(path), DeviceSpec(2))
    limit = int(1.5 * optimizers.solve("brkga", problem, 200, 0).value)  # a peak: fits
    out = tmp_path / "res"
    harness.run_experiment(["brkga"], {"synth": folder}, out, seeds=2, budgets=300,
                           devices=[2], objectives="makespan", memory_limits=limit,
                           workers=1, progress=False)
    table = tmp_path / "null.md"
    argv = ["--records", str(out / "records.jsonl"), "--graphs", str(folder), "--method",
            "brkga", "--objective", "makespan", "--select-seeds", "2", "--seeds", "2",
            "--seed-offset", "10", "--budget", "300", "--below", "100", "--out", str(table)]
    assert script.main(argv) == 0
    limited = optimizers.Problem(load_graph(path), DeviceSpec(2, memory_limit=limit), "makespan")
    pairs = [(optimizers.solve("brkga", limited, 300, s).value,
              optimizers.solve("brkga", limited, 300, s + 10).value) for s in range(2)]
    (cells,) = _cells(table, "synth")
    assert cells[3] == f"{script.improvement(pairs):+.2f}%"
    assert "step time under the records' memory limits" in table.read_text()
    # the peak-memory check finds no runs without a limit in these records
    argv[argv.index("--objective") + 1] = "peak_memory"
    with pytest.raises(SystemExit):
        script.main(argv)
