"""experiments/fit_reserve.py and training_set.py and a researcher's mistakes: one error
line, exit code 2, the committed table never replaced by an empty one; a torn cache line
resumes; a cached run of another reserve is made again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import experiment, one_synthetic_graph, script_refused

from regal.io import load_graph

fit_reserve = experiment("fit_reserve")
training_set = experiment("training_set")
TABLE = "# The fit reserve, paired (committed)\n"



@pytest.fixture
def inputs(tmp_path):
    """A graph folder and a records file with one step-time run of seeded-brkga under a
    memory limit (and one peak-memory run, which the script leaves alone)."""
    folder = tmp_path / "graphs"
    folder.mkdir()
    path = Path(one_synthetic_graph(folder, 20, 30, 3))
    run = dict(method="seeded-brkga", graph=path.stem,
               fingerprint=load_graph(path).fingerprint(), devices=2, memory_limit=10**12,
               objective="makespan", seed=0, budget=200, options="{}")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(run) + "\n" + json.dumps(
        dict(run, memory_limit=None, objective="peak_memory")) + "\n")
    out = tmp_path / "fit_reserve.md"
    out.write_text(TABLE)
    return folder, records, out


def _argv(inputs, **flags):
    folder, records, out = inputs
    argv = dict(records=records, graphs=folder, out=out, cache=out.with_suffix(".jsonl"))
    argv.update(flags)
    return [part for flag, value in argv.items() for part in (f"--{flag}", str(value))]


@pytest.mark.parametrize("flags, needle", [
    (dict(records="typo.jsonl"), "--records typo.jsonl"),                       # audit A2
    (dict(graphs="no/such/folder"), "--graphs no/such/folder"),                 # B12
    (dict(cache="."), "--cache"),
])
def test_a_mistake_leaves_the_table(inputs, capsys, flags, needle):
    script_refused(fit_reserve.main, _argv(inputs, **flags), capsys, needle)
    assert inputs[2].read_text() == TABLE
    assert not inputs[2].with_suffix(".jsonl").exists()


def test_records_with_no_step_time_run_leave_the_table(inputs, tmp_path, capsys):
    """Records that give no case (a peak-memory run only): no empty table over the
    committed one (audit A2)."""
    records = tmp_path / "peak.jsonl"
    records.write_text(inputs[1].read_text().splitlines()[1] + "\n")
    script_refused(fit_reserve.main, _argv(inputs, records=records), capsys, "nothing to tabulate")
    assert inputs[2].read_text() == TABLE


def test_a_graph_missing_from_the_folder_is_refused_before_any_run(inputs, tmp_path, capsys):
    (tmp_path / "other").mkdir()
    script_refused(fit_reserve.main, _argv(inputs, graphs=tmp_path / "other"), capsys, ".npz")
    assert inputs[2].read_text() == TABLE


def test_a_torn_cache_line_resumes_and_another_reserve_runs_again(inputs):
    out = inputs[2]
    cache = out.with_suffix(".jsonl")
    assert fit_reserve.main(_argv(inputs)) == 0
    table = out.read_text()
    assert "| 2 | 1 | 1 | 1 |" in table
    (line,) = cache.read_text().splitlines()
    assert json.loads(line)["reserve"] == fit_reserve.pipeline.FIT_RESERVE
    with cache.open("a") as fh:
        fh.write('{"case": {"gr')
    assert fit_reserve.main(_argv(inputs)) == 0              # audit A6: no JSONDecodeError
    assert cache.read_text().splitlines() == [line]          # cut; nothing ran again
    # a line made with another reserve is not passed off as this one's
    cache.write_text(json.dumps(dict(json.loads(line), reserve=0.5)) + "\n")
    assert fit_reserve.main(_argv(inputs)) == 0
    assert [json.loads(x)["reserve"] for x in cache.read_text().splitlines()] == [
        0.5, fit_reserve.pipeline.FIT_RESERVE]
    # a line from before lines named it was made with the first reserve, 0.2
    first = {k: v for k, v in json.loads(line).items() if k != "reserve"}
    cache.write_text(json.dumps(first) + "\n")
    assert fit_reserve.main(_argv(inputs)) == 0
    assert len(cache.read_text().splitlines()) == \
        (1 if fit_reserve.pipeline.FIT_RESERVE == fit_reserve.FIRST_RESERVE else 2)


def test_training_set_refuses_a_file_for_its_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    script_refused(training_set.main, ["--out", str(tmp_path / "file")], capsys, "--out")   # B12
    script_refused(training_set.main, ["--out", str(tmp_path / "o"), "--synth", "0"], capsys,
                   "--synth")
    assert (tmp_path / "file").read_text() == "x" and not (tmp_path / "o").exists()


@pytest.mark.parametrize("other", ["recipe.json", "test_00000.npz"])
def test_training_set_refuses_a_folder_of_another_set(tmp_path, capsys, other):
    """A mistyped --out that holds another split's graphs is refused, not filled with the
    training graphs beside them."""
    out = tmp_path / "o"
    out.mkdir()
    (out / other).write_text("{}")
    script_refused(training_set.main, ["--out", str(out), "--synth", "1"], capsys,
                   "holds another graph set")
    assert [p.name for p in out.iterdir()] == [other]
