"""experiments/transfer.py and a researcher's mistakes: one error line, exit code 2, and
nothing made or removed (--rerun) before every input is checked."""

from __future__ import annotations

import pytest
from helpers import experiment, script_help, script_refused

transfer = experiment("transfer")
RECORD = '{"method": "regal", "seed": 0}\n'



@pytest.fixture
def out(tmp_path):
    """A results folder with a stored record of regal (what --rerun regal would remove)."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "records.jsonl").write_text(RECORD)
    return folder


@pytest.mark.parametrize("argv, needle", [
    (["--policy", "no/such/policy"], "--policy no/such/policy"),      # audit A1
    (["--methods", "local_search"], "'local_search'"),               # C17: before any graph
    (["--seeds", "0"], "--seeds"), (["--test-graphs", "-3"], "--test-graphs"),   # B13
    (["--workers", "0"], "--workers"), (["--makespan-store", "-1"], "--makespan-store"),
    (["--ablation-from", "no/such/folder"], "--ablation-from"),
])
def test_a_mistake_is_refused_before_rerun_removes_records(out, capsys, argv, needle):
    script_refused(transfer.main, ["--quick", "--out", str(out), "--rerun", "regal"] + argv, capsys,
                   needle)
    assert (out / "records.jsonl").read_text() == RECORD        # nothing removed


def test_a_policy_folder_without_a_policy_is_refused(out, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    script_refused(transfer.main,
                   ["--quick", "--out", str(out), "--rerun", "regal", "--policy",
                    str(tmp_path / "empty")],
                   capsys, "config.json")
    assert (out / "records.jsonl").read_text() == RECORD


def test_an_output_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    script_refused(transfer.main, ["--quick", "--out", str(tmp_path / "file")], capsys, "--out")
    assert (tmp_path / "file").read_text() == "x"


def test_help_describes_in_whole_sentences(capsys):
    text = script_help(transfer.main, capsys)
    assert "against every registered baseline on graphs it has never seen, through the " \
           "harness (regal.harness)." in text
