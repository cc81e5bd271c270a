"""experiments/gpu_check.py and a researcher's mistakes, checked in the parent before any
child loads TensorFlow (one line on stderr, exit code 2); and the rows a child measured stay
in the output folder when the parent is killed."""

from __future__ import annotations

import json
import math
import sys

import pytest

from helpers import ROOT, experiment, script_refused
from regal.user_errors import report_user_errors


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        return experiment("gpu_check")
    finally:
        sys.path.remove(str(ROOT / "experiments"))


@pytest.mark.parametrize("argv, needle", [
    (["--method", "local_search"], "--method"),
    (["--models", "mlpp"], "--models"),
    (["--devices", "0"], "--devices"),
    (["--budget", "-5"], "--budget"),
    (["--out", "{tmp}/file.md"], "--out"),
])
def test_a_mistake_is_one_line_and_exit_2_before_any_child(script, monkeypatch, tmp_path,
                                                           capsys, argv, needle):
    monkeypatch.setattr(script.subprocess, "run", lambda *a, **k: pytest.fail("a child"))
    (tmp_path / "file.md").write_text("")
    argv = ["--kind", "cpu", "--devices", "2", "--models", "mlp", "--out", str(tmp_path),
            *(a.replace("{tmp}", str(tmp_path)) for a in argv)]
    script_refused(script.main, argv, capsys, needle)


def _row(script, count):
    row = {column: 1.0 for column in script.COLUMNS}
    row.update(model="mlp", mode="train", devices=count, device="/device:CPU:0",
               traced_step_us=math.nan, method="local-search")
    return row


def _child(script, seen, kill=False):
    """A child that writes one row where the parent said and exits (or then the parent is
    interrupted, as a kill would stop it)."""
    def run(cmd, **kwargs):
        out = cmd[cmd.index("--child-out") + 1]
        count = int(cmd[cmd.index("--child") + 1])
        seen.append(out)
        with open(out, "w") as f:
            json.dump({"kind": "CPU", "devices": count, "tensorflow": "x",
                       "device_name": "", "rows": [_row(script, count)], "errors": []}, f)
        if kill:
            raise KeyboardInterrupt
        return type("Done", (), {"returncode": 0})()
    return run


def test_a_killed_parent_leaves_the_measured_rows_in_the_output_folder(script, monkeypatch,
                                                                         tmp_path, capsys):
    seen = []
    monkeypatch.setattr(script.subprocess, "run", _child(script, seen, kill=True))
    argv = ["--kind", "cpu", "--devices", "2", "--models", "mlp", "--out", str(tmp_path)]
    assert report_user_errors("gpu_check.py", lambda: script.main(argv)) == 130
    assert seen == [str(tmp_path / "gpu_check_devices_2.partial.json")]
    kept = json.loads((tmp_path / "gpu_check_devices_2.partial.json").read_text())
    assert [r["model"] for r in kept["rows"]] == ["mlp"]
    capsys.readouterr()


def test_the_rows_go_into_the_table_and_the_partial_files_are_removed(script, monkeypatch,
                                                                      tmp_path, capsys):
    (tmp_path / "gpu_check_devices_4.partial.json").write_text(  # an earlier run's, killed
        json.dumps({"kind": "CPU", "devices": 4, "tensorflow": "x", "device_name": "",
                    "rows": [_row(script, 4)] * 3, "errors": []}))
    seen = []
    monkeypatch.setattr(script.subprocess, "run", _child(script, seen))
    argv = ["--kind", "cpu", "--devices", "2", "4", "--models", "mlp", "--out", str(tmp_path)]
    assert script.main(argv) == 0
    table = (tmp_path / "gpu_check_cpu.md").read_text()
    assert table.count("| mlp | train |") == 2          # one row per count, not the stale 3
    assert not list(tmp_path.glob("*.partial.json"))
    capsys.readouterr()
