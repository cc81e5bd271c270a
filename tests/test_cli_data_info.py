"""`regal data info` end to end (in process and as a subprocess), and the promise that
reading a CostGraphDef never imports TensorFlow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from regal.cli import main

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent

# Figures derived by hand from the fixture texts (see test_io_costgraph.py for the mapping),
# as `--json` gives them (exact) and as a person reads them.
FEATURES_EXACT = {"ops": 6, "tensors": 7, "data edges": 7, "control edges": 2,
                  "total bytes": 17408, "largest tensor": 4096, "persistent bytes": 1024,
                  "temporary bytes": 512, "depth": 5}
FEATURES = {"ops": "6", "tensors": "7", "data edges": "7", "control edges": "2",
            "total bytes": "17.00 KiB", "largest tensor": "4.00 KiB",
            "persistent bytes": "1.00 KiB", "temporary bytes": "512 B", "depth": "5"}
README = {"ops": "4", "tensors": "3", "data edges": "1", "control edges": "0",
          "total bytes": "177 B", "largest tensor": "70 B", "persistent bytes": "0 B",
          "depth": "2"}


def _parse_report(stdout: str) -> dict[str, dict[str, str]]:
    """{file: {key: value}} from the indented report (key and value apart by 2+ spaces)."""
    out: dict[str, dict[str, str]] = {}
    for line in stdout.splitlines():
        if not line.startswith("  "):
            current = out.setdefault(line.strip(), {})
            continue
        key, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        current[key] = value
    return out


def _expect(report: dict[str, str], figures: dict[str, str]) -> None:
    for key, value in figures.items():
        assert report[key] == value, key


def test_info_prints_figures(capsys, tmp_path):
    from regal.io import load_graph, save_graph
    npz = tmp_path / "features.npz"
    save_graph(load_graph(DATA / "features.pbtxt"), npz)
    files = [str(DATA / "features.pbtxt"), str(DATA / "regal_readme_example.pbtxt"), str(npz)]
    assert main(["data", "info", *files]) == 0
    captured = capsys.readouterr()
    report = _parse_report(captured.out)
    assert list(report) == files
    _expect(report[files[0]], FEATURES)
    _expect(report[files[1]], README)
    _expect(report[files[2]], FEATURES)
    assert captured.err == ""


def test_info_json_is_exact_and_the_human_report_agrees(capsys):
    """--json gives the summarize() figures unrounded; the human report prints the same
    figures in KiB/MiB/GiB and us/ms/s, equal within the printed rounding."""
    import json

    from regal.graph import summarize
    from regal.io import load_graph
    from regal.units import parse_bytes, parse_duration_us

    files = [str(DATA / "features.pbtxt"), str(ROOT / "data/real/mobilenetv2_train_b1.npz")]
    assert main(["data", "info", "--json", *files]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["file"] for r in rows] == files
    assert {k: rows[0][k] for k in FEATURES_EXACT} == FEATURES_EXACT
    assert main(["data", "info", *files]) == 0
    report = _parse_report(capsys.readouterr().out)
    for row in rows:
        exact = summarize(load_graph(row["file"]))
        assert {k: v for k, v in row.items() if k != "file"} == exact
        human = report[row["file"]]
        for key in ("ops", "tensors", "data edges", "control edges", "depth"):
            assert int(human[key].replace(",", "")) == exact[key], key
        for key in ("total bytes", "largest tensor", "persistent bytes", "temporary bytes"):
            # two decimals of the unit: within 0.5% (exact below 1 KiB)
            assert parse_bytes(human[key]) == pytest.approx(exact[key], rel=5e-3, abs=0.5), key
        assert parse_duration_us(human["compute cost"]) == pytest.approx(
            exact["compute cost (us)"], rel=5e-3, abs=0.05)


@pytest.mark.parametrize("name,pattern", [
    ("truncated.pbtxt", "truncated.pbtxt: malformed CostGraphDef text"),
    ("cycle.pbtxt", "cycle.pbtxt: cycle: op '[ab]' lies on a cycle"),
    ("missing.pbtxt", "No such file or directory: .*missing.pbtxt"),
    ("graph.json", "unknown graph file suffix '.json'"),
])
def test_info_errors_in_process(capsys, monkeypatch, name, pattern):
    monkeypatch.delenv("REGAL_DEBUG", raising=False)
    assert main(["data", "info", str(DATA / "regal_readme_example.pbtxt"), str(DATA / name)]) == 2
    captured = capsys.readouterr()
    assert "regal_readme_example.pbtxt" in captured.out    # earlier files still reported
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("regal: error: ")
    assert re.search(pattern, lines[0]), lines[0]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "REGAL_DEBUG"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def test_info_subprocess_good_file():
    proc = _run("-m", "regal.cli", "data", "info", "tests/data/features.pbtxt")
    assert proc.returncode == 0, proc.stderr
    _expect(_parse_report(proc.stdout)["tests/data/features.pbtxt"], FEATURES)


@pytest.mark.parametrize("name,needle", [
    ("truncated.pbtxt", "malformed CostGraphDef text"),
    ("cycle.pbtxt", "lies on a cycle"),
    ("missing.pbtxt", "No such file or directory"),
])
def test_info_subprocess_errors(name, needle):
    proc = _run("-m", "regal.cli", "data", "info", f"tests/data/{name}")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("regal: error: ")
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_reading_costgraph_does_not_import_tensorflow():
    code = ("import regal.io, sys; "
            "regal.io.load_graph('tests/data/regal_readme_example.pbtxt'); "
            "regal.io.load_graph('tests/data/features.pbtxt'); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
            "assert 'google.protobuf' in sys.modules")   # the reader really ran
    proc = _run("-c", code)
    assert proc.returncode == 0, proc.stderr
