"""experiments/baseline_table.py and a researcher's mistakes: one line on stderr and exit
code 2 before any graph is written or run, no method or real set silently skipped."""

from __future__ import annotations

import pytest

from helpers import experiment, script_help, script_refused
from regal.user_errors import report_user_errors


@pytest.fixture(scope="module")
def script():
    return experiment("baseline_table")


@pytest.mark.parametrize("flags, needle", [
    (["--methods", "bogus,brkga"], "'bogus'"),
    (["--methods", "local-search"], "brkga is the baseline"),
    (["--devices", "2,x"], "--devices"), (["--devices", "two"], "--devices"),
    (["--devices", "0"], "--devices"), (["--budget", "-5"], "--budget"),
    (["--seeds", "0"], "--seeds"), (["--cpsat-time-limit", "inf"], "--cpsat-time-limit"),
    (["--real-dir", "/nonexistent/typo_real"], "/nonexistent/typo_real"),
    (["--real-pattern", "no_such_graph"], "no_such_graph"),
    (["--synth", "0", "--no-real"], "no graphs to run"),
])
def test_mistakes_are_refused_before_any_work(script, tmp_path, capsys, flags, needle):
    argv = ["--quick", "--runs", str(tmp_path / "runs"), "--tables", str(tmp_path / "tables"),
            *flags]
    script_refused(script.main, argv, capsys, needle)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tables").exists()


def test_a_tables_path_that_is_a_file_is_refused(script, tmp_path, capsys):
    (tmp_path / "tables").write_text("")
    argv = ["--quick", "--runs", str(tmp_path / "runs"), "--tables", str(tmp_path / "tables")]
    assert report_user_errors("baseline_table.py", lambda: script.main(argv)) == 2
    assert "--tables" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_help_describes_in_whole_sentences(script, capsys):
    text = script_help(script.main, capsys)
    assert "on the real graph set, through the resumable harness, then Table 1." in text
