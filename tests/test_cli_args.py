"""Argument values of every subcommand: bad ones exit 2 naming the argument, before any work
(issue 24, item 5). Everything runs in this process through `regal.cli.main`."""

from __future__ import annotations

import json
import sys
import types

import pytest

from regal import optimizers
from regal.arguments import MAX_DEVICES, parse_size
from regal.cli import main
from helpers import one_synthetic_graph, refused


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("graphs")
    return one_synthetic_graph(folder, 8, 10, 3)


@pytest.fixture
def no_work(monkeypatch):
    """Any computation (a solve, TensorFlow's measure / apply / train) fails the test: the
    argument must be refused before it."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the computation started although an argument was bad")
    monkeypatch.setattr(optimizers, "solve", forbidden)
    for module, names in (("regal.measure", ("measure", "apply_solution")),
                          ("regal.train", ("train", "TrainConfig"))):
        fake = types.ModuleType(module)
        for name in names:
            setattr(fake, name, forbidden)
        monkeypatch.setitem(sys.modules, module, fake)


@pytest.mark.parametrize("size", ["1e30", "1e400", "4611686018427387905", "5EiB", "1e99999999"])
def test_memory_limit_beyond_2_62_is_refused(graph, capsys, no_work, size):
    refused(["optimize", graph, "--devices", "2", "--memory-limit", size], capsys,
            "--memory-limit")


def test_parse_size_is_exact():
    # a float would round 2**53 + 1 to 2**53: a limit one byte off decides feasibility
    assert parse_size("9007199254740993") == 2**53 + 1
    assert parse_size("1.5 GiB") == 3 * 2**29
    assert parse_size("4611686018427387904") == 2**62
    assert parse_size("0") == 0


@pytest.mark.parametrize("text, value", [
    ("16GiB", 16 * 2**30), ("500MB", 500_000_000), ("123", 123), ("123 bytes", 123),
    ("1.5 KiB", 1536), ("2gb", 2_000_000_000), ("7B", 7)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "12XB", "-5", "1.2.3MB"])
def test_parse_size_errors(text):
    with pytest.raises(Exception, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize("command", [
    ["optimize", "{graph}", "--devices", "{d}"],
    ["bounds", "{graph}", "--devices", "{d}"],
    ["best-known", "{graph}", "--devices", "{d}", "--time-per-graph", "1", "--out",
     "{tmp}/s.jsonl"],
    ["compare", "--methods", "random", "--graphs", "{folder}", "--devices", "{d}", "--out",
     "{tmp}/res"],
    ["train", "--train", "x", "--val", "y", "--out", "{tmp}/run", "--devices", "{d}"],
    ["measure", "m", "--solution", "s.json", "--devices", "{d}"],
])
@pytest.mark.parametrize("devices", ["1000000000", str(MAX_DEVICES + 1), "0", "-3"])
def test_device_counts_are_capped_everywhere(graph, tmp_path, capsys, no_work, command,
                                             devices):
    from pathlib import Path
    argv = [a.format(graph=graph, d=devices, tmp=tmp_path, folder=Path(graph).parent)
            for a in command]
    refused(argv, capsys, "devices")


@pytest.mark.parametrize("command", [
    ["optimize", "{graph}", "--devices", "2"],
    ["best-known", "{graph}", "--devices", "2", "--time-per-graph", "1", "--out",
     "{tmp}/s.jsonl"],
    ["train", "--train", "x", "--val", "y", "--out", "{tmp}/run"],
    ["measure", "m", "--solution", "s.json"],
    ["data", "synth", "--count", "1", "--out", "{tmp}/syn"],
])
def test_negative_seed_names_seed(graph, tmp_path, capsys, no_work, command):
    argv = [a.format(graph=graph, tmp=tmp_path) for a in command] + ["--seed", "-1"]
    refused(argv, capsys, "--seed")


@pytest.mark.parametrize("flag, value", [
    ("--learning-rate", "nan"), ("--learning-rate", "inf"), ("--learning-rate", "0"),
    ("--learning-rate", "-1e-3"), ("--entropy-coef", "nan"), ("--entropy-coef", "-1"),
    ("--checkpoint-minutes", "nan"), ("--max-minutes", "inf"), ("--workers", "0"),
])
def test_train_refuses_non_finite_numbers(tmp_path, capsys, no_work, flag, value):
    refused(["train", "--train", "x", "--val", "y", "--out", str(tmp_path / "run"), flag,
             value], capsys, flag)


def test_best_known_refuses_an_infinite_time(graph, tmp_path, capsys, no_work):
    refused(["best-known", graph, "--devices", "2", "--time-per-graph", "inf", "--out",
             str(tmp_path / "s.jsonl")], capsys, "--time-per-graph")


def test_compare_refuses_a_billion_seeds(graph, tmp_path, capsys, no_work):
    from pathlib import Path
    refused(["compare", "--methods", "random", "--graphs", str(Path(graph).parent),
             "--seeds", "1000000000", "--out", str(tmp_path / "res")], capsys, "seeds")


@pytest.mark.parametrize("target", ["missing/x.png", "a_file/x.png", "a_folder"])
@pytest.mark.parametrize("flag", ["--plot", "--out"])
def test_optimize_unwritable_output_fails_before_the_solve(graph, tmp_path, capsys, no_work,
                                                           flag, target):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_folder").mkdir()
    refused(["optimize", graph, "--devices", "2", flag, str(tmp_path / target)], capsys, flag)


def test_unwritable_folder_is_refused(graph, tmp_path, capsys, no_work, monkeypatch):
    """Root may write anywhere, so the permission is faked: the check must consult it."""
    import os
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked)
                        else real(p, mode))
    refused(["optimize", graph, "--devices", "2", "--plot", str(locked / "x.png")], capsys,
            "not writable")
    refused(["measure", "m", "--solution", "s.json", "--json", str(locked / "m.json")],
            capsys, "--json")


@pytest.mark.parametrize("command, flag", [
    (["measure", "m", "--solution", "s.json", "--json", "{tmp}"], "--json"),
    (["measure", "m", "--solution", "s.json", "--json", "{tmp}/missing/m.json"], "--json"),
    (["apply", "m", "--solution", "s.json", "--out", "{tmp}/a_file"], "--out"),
    (["train", "--train", "x", "--val", "y", "--out", "{tmp}/a_file/run"], "--out"),
    (["compare", "--methods", "random", "--graphs", "{tmp}", "--out", "{tmp}/a_file"], "--out"),
    (["report", "{tmp}", "--out", "{tmp}/a_file"], "--out"),
    (["best-known", "{graph}", "--devices", "2", "--time-per-graph", "1", "--out", "{tmp}"],
     "--out"),
    (["data", "synth", "--count", "1", "--out", "{tmp}/a_file"], "--out"),
    (["data", "real", "--out", "{tmp}/a_file"], "--out"),
    (["data", "large", "--out", "{tmp}/a_file"], "--out"),
])
def test_other_outputs_are_checked_first(graph, tmp_path, capsys, no_work, command, flag):
    (tmp_path / "a_file").write_text("")
    refused([a.format(graph=graph, tmp=tmp_path) for a in command], capsys, flag)


@pytest.mark.parametrize("command, needle", [
    (["bounds", "{tmp}", "--devices", "2"], "a folder, not a graph file"),
    (["data", "info", "{tmp}"], "a folder, not a graph file"),
    (["report", "{tmp}", "--baseline-budget", "0"], "--baseline-budget"),
    (["measure", "{graph}", "--solution", "{solution}"], "measure needs the model"),
    (["apply", "{graph}", "--solution", "{solution}", "--out", "{tmp}/o"],
     "apply needs the model"),
    (["measure", "m", "--solution", "s.json", "--runs", "-1"], "--runs"),
    (["best-known", "{graph}", "--devices", "2", "--time-per-graph", "1", "--bound-time", "3",
      "--out", "{tmp}/s.jsonl"], "--bound-time"),
])
def test_plain_mistakes_are_named(graph, tmp_path, capsys, no_work, command, needle):
    from regal.io import load_graph
    from regal.sim import DeviceSpec
    problem = optimizers.Problem(load_graph(graph), DeviceSpec(2))
    solution = tmp_path / "s.json"
    solution.write_text(json.dumps(optimizers.solution_record(
        problem, optimizers.single_device(problem), 1)))
    refused([a.format(graph=graph, tmp=tmp_path, solution=solution) for a in command], capsys,
            needle)


def test_plot_without_suffix_writes_the_path_it_names(graph, tmp_path, capsys):
    target = tmp_path / "ro"
    assert main(["optimize", graph, "--devices", "2", "--budget", "100", "--plot",
                 str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "ro.png").exists()
