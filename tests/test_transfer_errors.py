"""experiments/transfer.py and a researcher's mistakes: one error line, exit code 2, and
nothing made or removed (--rerun) before every input is checked."""

from __future__ import annotations

import pytest
from helpers import experiment

transfer = experiment("transfer")
RECORD = '{"method": "regal", "seed": 0}\n'


def _refused(argv, capsys, needle: str) -> None:
    """`transfer.main(argv)` exits 2 (argparse's refusal or report_user_errors') with one
    error line naming `needle`, no traceback."""
    try:
        code = transfer.main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and needle in errors[0], err


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
    _refused(["--quick", "--out", str(out), "--rerun", "regal"] + argv, capsys, needle)
    assert (out / "records.jsonl").read_text() == RECORD        # nothing removed


def test_a_policy_folder_without_a_policy_is_refused(out, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _refused(["--quick", "--out", str(out), "--rerun", "regal", "--policy",
              str(tmp_path / "empty")], capsys, "config.json")
    assert (out / "records.jsonl").read_text() == RECORD


def test_an_output_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    _refused(["--quick", "--out", str(tmp_path / "file")], capsys, "--out")
    assert (tmp_path / "file").read_text() == "x"


def test_help_describes_in_whole_sentences(capsys):
    with pytest.raises(SystemExit) as exc:
        transfer.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "against every registered baseline on graphs it has never seen, through the " \
           "harness (regal.harness)." in text
