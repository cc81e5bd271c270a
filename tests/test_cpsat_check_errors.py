"""experiments/cpsat_check.py and a researcher's mistakes: one line on stderr and exit code
2 before any run."""

from __future__ import annotations


import pytest

from helpers import experiment_keeping_numba_threads, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment_keeping_numba_threads("cpsat_check")


@pytest.mark.parametrize("argv, needle", [
    (["--graphs", "{tmp}/nope.npz"], "nope.npz"),
    (["--graphs", "{tmp}"], "not a file"),
    (["--devices", "2,x"], "--devices"),
    (["--devices", "0"], "--devices"),
    (["--time-limit", "-1"], "--time-limit"),
])
def test_a_mistake_is_one_line_and_exit_2_before_any_run(script, monkeypatch, tmp_path,
                                                          capsys, argv, needle):
    import regal.optimizers

    monkeypatch.setattr(regal.optimizers, "solve", lambda *a, **k: pytest.fail("a run"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    captured = script_refused(script.main, argv, capsys, needle)
    assert captured.out == ""   # not even the header: nothing ran
