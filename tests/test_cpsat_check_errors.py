"""experiments/cpsat_check.py and a researcher's mistakes: one line on stderr and exit code
2 before any run."""

from __future__ import annotations

import os

import pytest

from helpers import experiment
from regal.user_errors import report_user_errors


@pytest.fixture(scope="module")
def script():
    saved = os.environ.get("NUMBA_NUM_THREADS")
    try:
        return experiment("cpsat_check")
    finally:  # it pins numba to one thread for its own process, not for this test session
        if saved is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)
        else:
            os.environ["NUMBA_NUM_THREADS"] = saved


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
    try:
        code = report_user_errors("cpsat_check.py", lambda: script.main(argv))
    except SystemExit as exc:   # argparse's own refusal
        code = exc.code
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in captured.err, captured.err
    assert len(errors) == 1 and needle in errors[0], (needle, captured.err)
    assert captured.out == ""   # not even the header: nothing ran
