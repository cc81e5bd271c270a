"""Hand-edited solution files for `apply` / `measure` (issue 24 item 4, and item 8 for
pipes): each edit the issue lists is one line naming the file, the op by name and the field,
checked before TensorFlow is imported. No TensorFlow here."""

from __future__ import annotations

import copy
import json
import os
import signal

import numpy as np
import pytest

from helpers import random_graph
from regal import optimizers
from regal.cli import main
from regal.io.solution import check_solution_record, read_solution_file


@pytest.fixture(scope="module")
def record():
    problem = optimizers.Problem(random_graph(np.random.default_rng(3), 12), 2)
    return optimizers.solution_record(problem, optimizers.round_robin(problem), 0)


def _edited(record, edit):
    changed = copy.deepcopy(record)
    edit(changed)
    return changed


def _first_op(record) -> str:
    return next(iter(record["ops"]))


def _set(path, value):
    def edit(r):
        target = r
        for key in path[:-1]:
            target = target[_first_op(r)] if key is None else target[key]
        target[path[-1]] = value
    return edit


def _drop_transfer(r):
    del r["ops"][_first_op(r)]["transfer_priority"]


def _op_entry(value):
    def edit(r):
        r["ops"][_first_op(r)] = value
    return edit


EDITS = [  # (id, edit, what the message must say; {op} is the first op's name)
    ("graph-text", _set(["graph"], "x"), r"'graph': expected an object"),
    ("devices-int", _set(["devices"], 5), r"'devices': expected an object with a 'count' in 1..256"),
    ("devices-count-0", _set(["devices", "count"], 0), r"'count' in 1..256, got"),
    ("devices-count-big", _set(["devices", "count"], 10**6), r"'count' in 1..256, got"),
    ("bandwidth-nan", _set(["devices", "bandwidth"], float("nan")), r"'bandwidth': expected"),
    ("result-text", _set(["result"], "x"), r"'result': expected an object"),
    ("peak-negative", _set(["result", "peak"], [-1, 3]), r"'result': expected an object"),
    ("ops-list", _set(["ops"], []), r"'ops': expected an object of op name"),
    ("op-list", _op_entry([0, 1.0, 1.0]), r"op '{op}': expected an object with device"),
    ("op-int", _op_entry(7), r"op '{op}': expected an object with device"),
    ("device-null", _set(["ops", None, "device"], None), r"op '{op}': 'device': expected an integer in 0..1, got None"),
    ("device-huge", _set(["ops", None, "device"], 10**30), r"op '{op}': 'device': expected an integer in 0..1, got 10{{30}}"),
    ("device-1.5", _set(["ops", None, "device"], 1.5), r"op '{op}': 'device': expected an integer in 0..1, got 1.5"),
    ("device-true", _set(["ops", None, "device"], True), r"op '{op}': 'device': expected an integer"),
    ("device-out-of-range", _set(["ops", None, "device"], 2), r"op '{op}': 'device': expected an integer in 0..1, got 2"),
    ("priority-inf", _set(["ops", None, "priority"], float("inf")), r"op '{op}': 'priority': expected a finite number"),
    ("transfer-missing", _drop_transfer, r"op '{op}': 'transfer_priority': expected a finite number, missing"),
]


@pytest.mark.parametrize("edit,pattern", [pytest.param(e, p, id=i) for i, e, p in EDITS])
def test_edited_solution_files_name_file_op_and_field(record, tmp_path, edit, pattern):
    bad = _edited(record, edit)
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(bad))
    op = _first_op(record)
    with pytest.raises(ValueError, match=pattern.format(op=op)) as info:
        read_solution_file(path)
    assert str(info.value).startswith(f"solution {path}: ")
    # the same check guards a record handed to the library (measure.place / check_solution)
    with pytest.raises(ValueError, match=pattern.format(op=op)):
        check_solution_record(bad)


def test_the_unedited_record_passes(record, tmp_path):
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(record))
    assert read_solution_file(path) == json.loads(json.dumps(record))


@pytest.mark.parametrize("content,pattern", [
    (b"\xff\xfe{}", r"not UTF-8 text"),
    (b"[" * 100_000, r"not JSON|not a regal solution \(nested too deeply\)"),
    (b"42", r"not a regal solution"),
    (b"{\"ops\": {}", r"not JSON"),
])
def test_unreadable_solution_files(tmp_path, content, pattern):
    path = tmp_path / "solution.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"^solution {path}: ({pattern})"):
        read_solution_file(path)


def _cli(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", ["apply", "measure"])
def test_cli_refuses_a_bad_solution_in_one_line_before_tensorflow(record, tmp_path, capsys,
                                                                  command):
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(_edited(record, _set(["ops", None, "device"], 1.5))))
    extra = ["--out", str(tmp_path / "out")] if command == "apply" else []
    code, err = _cli([command, "no_such_model.py", "--solution", str(path), *extra], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and _first_op(record) in lines[0]


def test_cli_refuses_a_solution_that_is_a_pipe(tmp_path, capsys):
    pipe = tmp_path / "solution.json"
    os.mkfifo(pipe)

    def hung(*_):
        raise AssertionError("reading the solution blocked on a named pipe")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        code, err = _cli(["apply", "m.py", "--solution", str(pipe), "--out",
                          str(tmp_path / "out")], capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert code == 2 and f"{pipe}: is a named pipe, not a regular file" in err
