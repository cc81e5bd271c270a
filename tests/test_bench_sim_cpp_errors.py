"""experiments/bench_sim_cpp.py and a researcher's mistakes: one line on stderr and exit
code 2 (regal.user_errors), before anything is built or timed."""

from __future__ import annotations

import sys

import pytest

from helpers import ROOT, experiment, script_refused
from regal.user_errors import UserError, report_user_errors


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(ROOT / "experiments"))   # its `from bench_sim import ...`
    try:
        return experiment("bench_sim_cpp")
    finally:
        sys.path.remove(str(ROOT / "experiments"))


def test_its_user_error_is_the_shared_one(script):
    assert script.UserError is UserError


@pytest.mark.parametrize("argv, needle", [
    (["--cells", "5x0"], "--cells"),
    (["--cells", "abc"], "--cells"),
    (["--rounds", "0"], "--rounds"),
    (["--seconds", "0"], "--seconds"),
    (["--cells", "500x2"], "CXX"),        # no compiler
])
def test_a_mistake_is_one_line_and_exit_2(script, monkeypatch, capsys, argv, needle):
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setattr(script, "build", lambda *a: pytest.fail("a build started"))
    captured = script_refused(script.main, argv, capsys, needle)
    assert captured.out == ""


def test_a_failed_build_is_one_line(script, monkeypatch, capsys):
    monkeypatch.setenv("CXX", "false")      # a "compiler" that fails
    assert report_user_errors("bench_sim_cpp.py",
                              lambda: script.main(["--cells", "500x2"])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "failed" in err and "Traceback" not in err
