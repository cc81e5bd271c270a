"""experiments/sim_vs_measured.py and a researcher's mistakes: one line on stderr and exit
code 2 before TensorFlow is even imported; a run of fewer models than the committed table's
needs --out, so that it cannot replace that table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import ROOT, experiment, script_refused


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(ROOT / "experiments"))   # its `from gpu_check import cpu_model`
    try:
        return experiment("sim_vs_measured")
    finally:
        sys.path.remove(str(ROOT / "experiments"))


@pytest.mark.parametrize("argv, needle", [
    (["--models", "mlp", "--budget", "100"], "--models"),   # would replace the five-model table
    (["--budget", "-5"], "--budget"),
    (["--devices", "0"], "--devices"),
    (["--models", "mlpp", "--out", "{tmp}"], "--models"),
    (["--models", "mlp", "--out", "{tmp}/file.md"], "--out"),
])
def test_a_mistake_is_one_line_and_exit_2_before_any_run(script, monkeypatch, tmp_path, capsys,
                                                          argv, needle):
    monkeypatch.setattr(script, "run", lambda *a, **k: pytest.fail("a run started"))
    (tmp_path / "file.md").write_text("")
    committed = {p: p.read_bytes() for p in Path(script.RESULTS).glob("sim_vs_measured_*")}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    script_refused(script.main, argv, capsys, needle)
    assert {p: p.read_bytes() for p in committed} == committed


def test_the_models_are_known_without_tensorflow(script):
    """gpu_check.py's parent checks --models against MODELS before any child loads
    TensorFlow: the builders import it on first use only."""
    assert set(script.MODELS) == {"mlp", "small_cnn", "mobilenetv2_64", "transformer",
                                  "resnet_blocks"}
    assert not hasattr(script, "tf")
