"""experiments/no_harm.py and no_harm_null.py and a researcher's mistakes: one error line,
exit code 2, no table replaced; a torn cache line resumes; a cached run of another policy is
not reused."""

from __future__ import annotations

import argparse
import json

import pytest
from helpers import brkga_and_local_search_run, experiment, script_help, script_refused

no_harm = experiment("no_harm")
no_harm_null = experiment("no_harm_null")
TABLE = "# a committed table\n"



@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A harness run of brkga and local search (2 seeds, 300 evaluations) on one graph."""
    tmp = tmp_path_factory.mktemp("run")
    folder, _, out = brkga_and_local_search_run(tmp, "synth", 20, 30, 3, seeds=2, budget=300)
    return folder, out / "records.jsonl"


def _argv(run, table, *more):
    folder, records = run
    return ["--records", str(records), "--graphs", str(folder), "--method", "local-search",
            "--below", "100", "--seeds", "2", "--budget", "300", "--out", str(table), *more]


@pytest.mark.parametrize("more, needle", [
    (["--graphs", "no/such/folder"], "--graphs no/such/folder"),          # audit B12
    (["--budget", "-5"], "--budget"),                                     # C18
    (["--budget", "400"], "nothing to tabulate"),     # no runs at that budget: no table
    (["--cache", "."], "--cache"),                                        # a folder
])
def test_no_harm_refuses_and_keeps_the_table(run, tmp_path, capsys, more, needle):
    table = tmp_path / "no_harm.md"
    table.write_text(TABLE)
    argv = _argv(run, table)
    argv += more
    script_refused(no_harm.main, argv, capsys, needle)
    assert table.read_text() == TABLE
    assert not table.with_suffix(".jsonl").exists()


def test_no_harm_refuses_an_output_in_a_missing_folder(run, tmp_path, capsys):
    script_refused(no_harm.main, _argv(run, tmp_path / "no" / "t.md"), capsys, "--out")


@pytest.mark.parametrize("script", [no_harm, no_harm_null])
def test_a_torn_cache_line_resumes(run, tmp_path, script):
    """A kill mid-write leaves half a line: the rerun cuts it, reuses every whole line and
    appends on a fresh line (audit A6)."""
    table = tmp_path / "t.md"
    if script is no_harm:
        argv = _argv(run, table)
    else:
        folder, records = run
        argv = ["--records", str(records), "--graphs", str(folder), "--method", "brkga",
                "--select-seeds", "2", "--seeds", "3", "--seed-offset", "10", "--budget",
                "300", "--below", "100", "--out", str(table)]
    assert script.main(argv) == 0
    cache = table.with_suffix(".jsonl")
    lines = cache.read_text().splitlines()
    text = table.read_text()
    with cache.open("a") as fh:
        fh.write('{"key": ["ab')
    assert script.main(argv) == 0
    assert cache.read_text().splitlines() == lines      # cut, and nothing ran again
    assert table.read_text() == text
    # a torn line of a run that had not ended: it is made again, on a line of its own
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10])
    assert script.main(argv) == 0
    assert [json.loads(line)["seed"] for line in cache.read_text().splitlines()] == \
        [json.loads(line)["seed"] for line in lines]
    assert table.read_text() == text


def test_a_cached_run_of_another_policy_is_not_reused():
    """Audit A3: regal's cached runs are reused only for the policy they were made with; a
    line without a policy was made with the shipped one."""
    args = argparse.Namespace(method="regal", against="brkga", budget=300)
    revisions = no_harm.revisions(("regal", "brkga"), None)
    line = {"key": ["fp", "g", "synth", 2, None], "seed": 0, "method": "regal",
            "against": "brkga", "budget": 300, "revisions": revisions, "brkga": 2.0,
            "value": 1.0}
    other = dict(line, seed=1, policy="experiments/results/transfer_full/ablation_policies/x")
    shipped = dict(line, seed=2, policy=no_harm.DEFAULT_POLICY)
    lines = [line, other, shipped]
    done = no_harm.cached_runs(lines, args, no_harm.portable_policy_dir(no_harm.DEFAULT_POLICY))
    assert sorted(seed for *_, seed in done) == [0, 2]
    done = no_harm.cached_runs(lines, args, other["policy"])
    assert sorted(seed for *_, seed in done) == [1]
    # no regal run: the policy plays no part
    assert len(no_harm.cached_runs(lines, args, None)) == 3


def test_a_regal_check_of_a_missing_policy_is_refused(run, tmp_path, capsys):
    folder, records = run
    table = tmp_path / "t.md"
    script_refused(no_harm.main,
                   ["--records", str(records), "--graphs", str(folder), "--policy",
                    str(tmp_path / "nope"), "--out", str(table)],
                   capsys, "--policy")


@pytest.mark.parametrize("script, words", [
    (no_harm, "or than `--against`, e.g. its no-policy twin `seeded-brkga`)."),
    (no_harm_null, "puts more than 1% behind itself by the rule of `experiments/no_harm.py`."),
])
def test_help_describes_in_whole_sentences(capsys, script, words):
    assert words in script_help(script.main, capsys)


def test_no_harm_null_refuses_bad_numbers(run, tmp_path, capsys):
    folder, records = run
    base = ["--records", str(records), "--graphs", str(folder), "--out", str(tmp_path / "t.md")]
    script_refused(no_harm_null.main, base + ["--seeds", "0"], capsys, "--seeds")
    script_refused(no_harm_null.main, base + ["--budget", "0"], capsys, "--budget")
    script_refused(no_harm_null.main, base + ["--graphs", str(tmp_path / "nope")], capsys,
                   "--graphs")


@pytest.mark.parametrize("script, foreign", [
    (no_harm, {"set": "s", "path": "g.npz", "budget": 300, "seed": 0, "value": 1.0}),
    # no_harm.py's own cache (each run beside a baseline run) is not no_harm_null.py's
    (no_harm_null, {"key": ["f", "g", "d", 2, None], "seed": 0, "method": "brkga",
                    "budget": 300, "brkga": 1.0, "value": 1.0}),
])
def test_a_cache_of_another_script_is_refused_and_left_alone(run, tmp_path, capsys, script,
                                                             foreign):
    table = tmp_path / "t.md"
    cache = tmp_path / "other.jsonl"
    cache.write_text(json.dumps(foreign) + "\n")
    folder, records = run
    if script is no_harm:
        argv = _argv(run, table, "--cache", str(cache))
    else:
        argv = ["--records", str(records), "--graphs", str(folder), "--method", "brkga",
                "--select-seeds", "2", "--seeds", "3", "--budget", "300", "--below", "100",
                "--out", str(table), "--cache", str(cache)]
    script_refused(script.main, argv, capsys, str(cache))
    assert cache.read_text() == json.dumps(foreign) + "\n" and not table.exists()


@pytest.mark.parametrize("script", [no_harm, no_harm_null])
def test_a_nan_threshold_is_refused(run, tmp_path, capsys, script):
    folder, records = run
    script_refused(script.main, ["--records", str(records), "--graphs", str(folder),
                                 "--below", "nan", "--out", str(tmp_path / "t.md")],
                   capsys, "--below")
