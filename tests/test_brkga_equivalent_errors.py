"""experiments/brkga_equivalent.py and a researcher's mistakes: one line on stderr and exit
code 2 before any BRKGA curve, no empty table over a committed one, a torn last line of the
cache cut, and cached curves of another `--budget` not reused."""

from __future__ import annotations

import json

import pytest

from helpers import brkga_and_local_search_run, experiment, one_synthetic_graph, script_refused
from regal import harness
from regal.optimizers import method_revision


@pytest.fixture(scope="module")
def script():
    return experiment("brkga_equivalent")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 5K run of brkga and local search on one small graph, local search's answer also
    recorded as a regal run (the script needs one): (graphs folder, records file)."""
    tmp = tmp_path_factory.mktemp("equivalent")
    folder, _, out = brkga_and_local_search_run(tmp, "synth_test", 10, 14, 3, seeds=1,
                                                budget=5000)
    records = {r["method"]: r for r in harness.load_records(out)}
    regal = dict(records["local-search"], method="regal", revision=method_revision("regal"),
                 options=json.dumps({"policy_dir": "data/policy"}))
    with (out / "records.jsonl").open("a") as fh:
        fh.write(json.dumps(regal) + "\n")
    return folder, out / "records.jsonl"



def _cache(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_another_budget_runs_brkga_again(script, run, tmp_path):
    folder, records = run
    out = tmp_path / "eq.md"
    argv = ["--records", str(records), "--graphs", str(folder), "--out", str(out)]
    assert script.main(argv + ["--budget", "300"]) == 0
    assert [r["budget"] for r in _cache(out.with_suffix(".jsonl"))] == [300]
    assert script.main(argv + ["--budget", "600"]) == 0
    rows = _cache(out.with_suffix(".jsonl"))
    assert [r["budget"] for r in rows] == [300, 600]
    assert "run to 600 evaluations" in out.read_text()
    # the table of 600 shows the 600 curve's gain over BRKGA-5K, not the 300 one's
    gain = (rows[1]["brkga_5k"] - rows[1]["brkga_final"]) / rows[1]["brkga_5k"] * 100
    assert f"| {gain:+.2f} |" in out.read_text()
    assert script.main(argv + ["--budget", "300"]) == 0       # both cached: nothing runs
    assert len(_cache(out.with_suffix(".jsonl"))) == 2
    assert "run to 300 evaluations" in out.read_text()


def test_a_torn_last_line_of_the_cache_is_cut_and_the_run_resumes(script, run, tmp_path):
    folder, records = run
    out, cache = tmp_path / "eq.md", tmp_path / "eq.jsonl"
    argv = ["--records", str(records), "--graphs", str(folder), "--out", str(out),
            "--budget", "300"]
    assert script.main(argv) == 0
    whole = cache.read_text()
    with cache.open("a") as fh:
        fh.write('{"key": ["ab')
    assert script.main(argv) == 0
    assert cache.read_text() == whole


@pytest.mark.parametrize("change, needle", [
    ({"--budget": "-5"}, "--budget"), ({"--seeds": "0"}, "--seeds"),
    ({"--graphs": "/nonexistent/typo"}, "/nonexistent/typo"),
    ({"--records": "/nonexistent/records.jsonl"}, "/nonexistent/records.jsonl"),
    ({"--out": "/nonexistent/dir/eq.md"}, "/nonexistent/dir"),
    ({"--cache": "/nonexistent/dir/eq.jsonl"}, "/nonexistent/dir"),
])
def test_bad_input_is_refused_before_any_curve(script, run, tmp_path, capsys, change, needle):
    folder, records = run
    flags = {"--records": str(records), "--graphs": str(folder),
             "--out": str(tmp_path / "eq.md"), "--budget": "300", **change}
    script_refused(script.main, [part for item in flags.items() for part in item], capsys, needle)
    assert not (tmp_path / "eq.jsonl").exists() and not (tmp_path / "eq.md").exists()


def test_an_unreadable_cache_is_refused_and_kept(script, run, tmp_path, capsys):
    folder, records = run
    cache = tmp_path / "other.jsonl"
    for text in ('{"peak": 1}\n', "not json\n"):
        cache.write_text(text)
        script_refused(script.main,
                       ["--records", str(records), "--graphs", str(folder), "--out",
                        str(tmp_path / "eq.md"), "--cache", str(cache), "--budget", "300"],
                       capsys, str(cache))
        assert cache.read_text() == text and not (tmp_path / "eq.md").exists()


def test_graphs_that_match_no_record_keep_the_committed_table(script, run, tmp_path, capsys):
    _, records = run
    (tmp_path / "other").mkdir()
    one_synthetic_graph(tmp_path / "other", 10, 14, 4)      # a graph the records lack
    out = tmp_path / "eq.md"
    out.write_text("committed\n")
    script_refused(script.main,
                   ["--records", str(records), "--graphs", str(tmp_path / "other"), "--out",
                    str(out), "--budget", "300"],
                   capsys, "nothing to tabulate")
    assert out.read_text() == "committed\n"
