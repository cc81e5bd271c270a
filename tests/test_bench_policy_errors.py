"""experiments/bench_policy.py and a researcher's mistakes: one line on stderr and exit code
2, before the policy (TensorFlow) is loaded; no nan timings from zero repeats."""

from __future__ import annotations

import os

import pytest

from helpers import experiment, script_refused


@pytest.mark.parametrize("argv, needle", [
    (["--devices", "0"], "--devices"),
    (["--sizes", "-5"], "--sizes"),
    (["--repeats", "0"], "--repeats"),
    (["--hidden", "0"], "--hidden"),
])
def test_a_mistake_is_one_line_and_exit_2(monkeypatch, capsys, argv, needle):
    # the script sets these on import; the test session keeps its own
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", os.environ.get("TF_USE_LEGACY_KERAS", "1"))
    script = experiment("bench_policy")
    captured = script_refused(script.main, argv, capsys, needle)
    assert captured.out == ""   # nothing timed
