"""experiments/bench_brkga.py and a researcher's mistakes: one line on stderr and exit code
2 before any timing (not a traceback, nor an error after all the runs)."""

from __future__ import annotations

import pytest

from helpers import experiment, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment("bench_brkga")


@pytest.mark.parametrize("argv, needle", [
    (["--graph", "{tmp}/nope.npz"], "--graph"),
    (["--graph", "{tmp}"], "--graph"),
    (["--objective", "makspan"], "--objective"),
    (["--budget", "-5"], "--budget"),
    (["--devices", "0"], "--devices"),
    (["--population", "2"], "--population"),
    (["--json", "{tmp}/nonexist/x.json"], "--json"),
])
def test_a_mistake_is_one_line_and_exit_2_before_any_run(script, monkeypatch, tmp_path,
                                                          capsys, argv, needle):
    monkeypatch.setattr(script, "evaluate", lambda *a, **k: pytest.fail("a timing started"))
    argv = ["--ops", "20", *(a.replace("{tmp}", str(tmp_path)) for a in argv)]
    script_refused(script.main, argv, capsys, needle)
