"""`experiments/bench_sim.py --graphs`: timing the simulator on a user's own graph files."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import random_graph
from regal.io import save_graph
from helpers import experiment
from regal.user_errors import report_user_errors


def test_graph_rows_report_each_file_and_device_count(tmp_path, capsys):
    graph = random_graph(np.random.default_rng(3), 12)
    path = tmp_path / "mine.npz"
    save_graph(graph, path)
    assert experiment("bench_sim").main(["--graphs", str(path), "--devices", "2", "3",
                                         "--seconds", "0.05"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0], int(r[1]), int(r[2]), int(r[3])) for r in rows] == [
        ("mine.npz", graph.num_nodes, graph.num_data_edges, 2),
        ("mine.npz", graph.num_nodes, graph.num_data_edges, 3)]
    for row in rows:
        rate, ns_per_op = float(row[4].replace(",", "")), int(row[5])
        assert rate > 0
        assert ns_per_op == pytest.approx(1e9 / rate / graph.num_nodes, abs=1)


def _exit_code(argv) -> int:
    script = experiment("bench_sim")
    try:
        return report_user_errors("bench_sim.py", lambda: script.main(argv))
    except SystemExit as exc:   # argparse's own refusal
        return exc.code


def test_a_bad_graph_file_is_named_before_any_timing(tmp_path, capsys):
    good = tmp_path / "good.npz"
    save_graph(random_graph(np.random.default_rng(0), 5), good)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a graph")
    assert _exit_code(["--graphs", str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing was timed
    assert str(bad) in captured.err and "Traceback" not in captured.err
    assert captured.err.count("error:") == 1
    assert _exit_code(["--graphs", str(tmp_path / "missing.npz")]) == 2
    err = capsys.readouterr().err
    assert "missing.npz: No such file" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["--devices", "0"], ["--seconds", "0"], ["--sizes", "0"],
                                  ["--target-runs", "-1"]])
def test_bad_numbers_exit_2(args, tmp_path, capsys):
    assert _exit_code(args + ["--graphs", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and args[0] in err and "Traceback" not in err
