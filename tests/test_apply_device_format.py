"""`regal apply --device-format` (issue 36 item 5): a format must name {k} and nothing else
and give each of the solution's devices its own string, checked before TensorFlow loads.
'/device:GPU:0' used to put both devices of a 2-device solution on one device; '{x}' and
'{0}' were tracebacks. No TensorFlow here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import random_graph
from regal import optimizers
from regal.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def solution_path(tmp_path_factory):
    """A 2-device solution (round robin uses both devices)."""
    problem = optimizers.Problem(random_graph(np.random.default_rng(5), 10), 2)
    path = tmp_path_factory.mktemp("sol") / "solution.json"
    path.write_text(json.dumps(optimizers.solution_record(
        problem, optimizers.round_robin(problem), 0)))
    return path


def _apply(solution_path, tmp_path, device_format) -> list[str]:
    return ["apply", "no_such_model.py", "--solution", str(solution_path),
            "--out", str(tmp_path / "out"), "--device-format", device_format]


@pytest.mark.parametrize("device_format, says", [
    ("/device:GPU:0", "expected the field {k}"),
    ("{x}", "got {x}"),
    ("{0}", "got {0}"),
    ("{}", "got {}"),
    ("/gpu:{k}/{k.real}", "got {k.real}"),
    ("/gpu:{k:s}", "cannot format the device number"),
    ("/gpu:{k", "expected '}'"),
    ("/gpu:{k//2}", "got {k//2}"),
])
def test_bad_device_format_is_one_line_exit_2(solution_path, tmp_path, capsys,
                                              device_format, says):
    code = main(_apply(solution_path, tmp_path, device_format))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--device-format" in err[0] and says in err[0], err[0]


def test_device_format_must_give_distinct_devices(solution_path, tmp_path, capsys):
    code = main(_apply(solution_path, tmp_path, "/gpu:{k!s:.0}"))  # '' for every k
    err = capsys.readouterr().err
    assert code == 2 and "devices 0 and 1 both become '/gpu:'" in err, err


def test_bad_device_format_is_refused_before_tensorflow(solution_path, tmp_path):
    script = ("import sys; from regal.cli import main; "
              f"code = main({_apply(solution_path, tmp_path, '/device:GPU:0')!r}); "
              "print(code, 'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr[-2000:]
    assert "--device-format" in proc.stderr
