"""experiments/bench_io.py and a researcher's mistakes: one line on stderr and exit code 2."""

from __future__ import annotations

import pytest

from helpers import experiment, script_refused


@pytest.mark.parametrize("argv, needle", [
    (["--ops", "-5"], "--ops"),
    (["--repeat", "0"], "--repeat"),
    (["--seed", "-1"], "--seed"),
])
def test_a_mistake_is_one_line_and_exit_2(capsys, argv, needle):
    script = experiment("bench_io")
    captured = script_refused(script.main, argv, capsys, needle)
    assert captured.out == ""   # no graph was built


def test_a_small_run_times_every_format(capsys):
    assert experiment("bench_io").main(["--ops", "50", "--repeat", "1"]) == 0
    assert capsys.readouterr().out.count(" ok") == 4
