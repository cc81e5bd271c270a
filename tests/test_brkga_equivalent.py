"""`experiments/brkga_equivalent.py`: the evaluations plain BRKGA needs to match a 5K answer."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import brkga_and_local_search_run, experiment
from regal import harness
from regal.optimizers import method_revision


def test_first_reach_and_first_value_by_hand():
    script = experiment("brkga_equivalent")
    curve = [(100, 50.0), (180, 40.0), (260, 40.0), (340, 31.0)]
    assert script.first_reach(curve, 45.0) == 180
    assert script.first_reach(curve, 40.0) == 180
    assert script.first_reach(curve, 31.0) == 340
    assert script.first_reach(curve, 30.0) is None
    assert script.first_value(curve, 100) == 50.0
    assert script.first_value(curve, 300) == 40.0


def test_end_to_end_matches_the_records_and_the_curve(tmp_path):
    """One graph, BRKGA / local search at 5K: the row takes BRKGA-5K from the records, and a
    method's 'needs' is where a fresh BRKGA curve of the same seed first matches its value."""
    script = experiment("brkga_equivalent")
    folder, path, out = brkga_and_local_search_run(tmp_path, "synth_test", 30, 40, 11, seeds=1,
                                                   budget=5000)
    records = {r["method"]: r for r in harness.load_records(out)}
    # local search stands in for both methods: the script needs a regal record to pick a key
    # (at regal's code revision: records of other revisions stay out of the tables)
    revision = method_revision("regal")
    regal = dict(records["local-search"], method="regal", revision=revision,
                 options=json.dumps({"policy_dir": "data/policy"}))
    # another policy's run of the same graph and seed (e.g. a Table 3 variant): not compared
    other = dict(records["brkga"], method="regal", revision=revision,
                 options=json.dumps({"policy_dir": "elsewhere"}))
    with (out / "records.jsonl").open("a") as fh:
        fh.write(json.dumps(regal) + "\n")
        fh.write(json.dumps(other) + "\n")
    table = tmp_path / "eq.md"
    assert script.main(["--records", str(out / "records.jsonl"), "--graphs", str(folder),
                        "--budget", "6000", "--out", str(table)]) == 0
    (row,) = [json.loads(line) for line in table.with_suffix(".jsonl").read_text().splitlines()]
    assert row["brkga_5k"] == records["brkga"]["value"]
    curve = script.brkga_curve(Path(path), 2, 0, 6000)
    target = records["local-search"]["value"]
    assert row["local-search_needs"] == row["regal_needs"] == script.first_reach(curve, target)
    assert row["brkga_final"] == curve[-1][1] <= row["brkga_5k"]
    text = table.read_text()
    assert "| synth_test | 2 | 1 | regal |" in text and "| synth_test | 2 | 1 | local-search |" in text
    # resumed: nothing is run again, the cache keeps one row
    assert script.main(["--records", str(out / "records.jsonl"), "--graphs", str(folder),
                        "--budget", "6000", "--out", str(table)]) == 0
    assert len(table.with_suffix(".jsonl").read_text().splitlines()) == 1
