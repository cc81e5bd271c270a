"""experiments/bench_brkga.py and a researcher's mistakes: one line on stderr and exit code
2 before any timing (not a traceback, nor an error after all the runs)."""

from __future__ import annotations

import pytest

from helpers import experiment
from regal.user_errors import report_user_errors


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
    try:
        code = report_user_errors("bench_brkga.py", lambda: script.main(argv))
    except SystemExit as exc:   # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and needle in errors[0], (needle, err)
