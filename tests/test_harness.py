"""The harness: one record per key, resume after SIGKILL, failures recorded, Ray == local."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from regal import harness, optimizers, synth
from regal.cli import main
from regal.io import load_graph
from regal.sim import DeviceSpec

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 100


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("graphs") / "tiny"
    synth.materialize(synth.custom_recipe(count=4, min_ops=8, max_ops=16, seed=7), folder,
                      progress=False)
    return folder


# methods registered by the tests; module-level so spawned workers can unpickle them


def lying_method(problem, budget, seed):
    """Returns a real placement but claims an impossible value: the harness must re-score."""
    found = optimizers.solve_random(problem, budget, seed)
    return optimizers.Solution(found.placement, found.priority, found.transfer_priority,
                               value=-1.0, peak=np.zeros(problem.devices.count, np.int64),
                               makespan=0.0, feasible=True, evaluations=found.evaluations)


def crash_on_even(problem, budget, seed):
    """Crashes on graphs with an even op count; fine elsewhere."""
    if problem.graph.num_nodes % 2 == 0:
        raise RuntimeError(f"boom on {problem.graph.num_nodes} ops")
    return optimizers.solve_random(problem, budget, seed)


@pytest.fixture
def registered():
    names = {"test-lying": lying_method, "test-crash": crash_on_even}
    for name, fn in names.items():
        optimizers.register(name, fn)
    yield names
    for name in names:
        optimizers.METHODS.pop(name, None)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _comparable(records) -> dict:
    """key -> what a seeded run must reproduce exactly (not wall times, pids, hosts)."""
    return {harness.record_key(r): (r["status"], r["value"], r["peak"], r["makespan"],
                                    r["feasible"], r["evaluations"]) for r in records}


def test_records_written_once_per_key_and_extended(graph_dir, tmp_path):
    out = tmp_path / "out"
    first = harness.run_experiment(["random"], graph_dir, out, seeds=2, budgets=BUDGET,
                                   workers=1, progress=False)
    assert (first.total, first.ran, first.skipped, first.failed) == (8, 8, 0, 0)
    again = harness.run_experiment(["random"], graph_dir, out, seeds=2, budgets=BUDGET,
                                   workers=1, progress=False)
    assert (again.ran, again.skipped) == (0, 8)
    more = harness.run_experiment(["random", "brkga"], graph_dir, out, seeds=3,
                                  budgets=BUDGET, workers=1, progress=False)
    assert (more.total, more.skipped, more.ran) == (24, 8, 16)
    records = _lines(out / harness.RECORDS_FILE)
    keys = [harness.record_key(r) for r in records]
    assert len(keys) == 24 and len(set(keys)) == 24
    r = records[0]
    for field in ("method", "graph", "fingerprint", "dataset", "seed", "budget", "devices",
                  "memory_limit", "objective", "value", "peak", "makespan", "feasible",
                  "evaluations", "wall_time", "status", "version", "time_limit"):
        assert field in r, field
    assert r["dataset"] == "tiny" and r["version"] == harness.software_version() != ""
    assert r["fingerprint"] == load_graph(r["graph_path"]).fingerprint()


def test_recorded_value_is_the_simulators(graph_dir, tmp_path, registered):
    out = tmp_path / "out"
    harness.run_experiment(["test-lying"], graph_dir, out, seeds=1, budgets=BUDGET,
                           devices=[2, 3], workers=1, progress=False)
    records = _lines(out / harness.RECORDS_FILE)
    assert len(records) == 8
    for r in records:
        graph = load_graph(r["graph_path"])
        problem = optimizers.Problem(graph, DeviceSpec(r["devices"]))
        truth = optimizers.solve_random(problem, BUDGET, r["seed"])  # same seed, same answer
        assert r["value"] == truth.value > 0
        assert r["peak"] == truth.peak.tolist()
        assert r["reported_value"] == -1.0


def test_failing_method_is_recorded_and_the_run_goes_on(graph_dir, tmp_path, registered):
    sizes = [load_graph(p).num_nodes for p in sorted(graph_dir.glob("*.npz"))]
    assert 0 < sum(n % 2 == 0 for n in sizes) < len(sizes)  # the fixture has both kinds
    for workers in (1, 2):  # in this process, and in spawned worker processes
        out = tmp_path / f"out{workers}"
        summary = harness.run_experiment(["test-crash", "random"], graph_dir, out, seeds=1,
                                         budgets=BUDGET, workers=workers, progress=False)
        records = _lines(out / harness.RECORDS_FILE)
        assert len(records) == 8 == summary.ran
        failed = [r for r in records if r["status"] == "failed"]
        assert summary.failed == len(failed) == sum(n % 2 == 0 for n in sizes)
        for r in failed:
            assert r["method"] == "test-crash" and r["ops"] % 2 == 0
            assert r["error"] == f"RuntimeError: boom on {r['ops']} ops"
            assert r["value"] is None
        assert all(r["status"] == "ok" for r in records if r not in failed)
        # failed records are records too: a rerun does not repeat them
        rerun = harness.run_experiment(["test-crash", "random"], graph_dir, out, seeds=1,
                                       budgets=BUDGET, workers=workers, progress=False)
        assert rerun.ran == 0


_KILL_SCRIPT = """
import sys, time
from regal import harness, optimizers

def slow_random(problem, budget, seed):
    time.sleep(0.15)
    return optimizers.solve_random(problem, budget, seed)

optimizers.register("slow-random", slow_random)
if __name__ == "__main__":
    harness.run_experiment(["slow-random", "brkga"], sys.argv[1], sys.argv[2], seeds=3,
                           budgets={budget}, workers=1, progress=False)
"""


def test_resume_after_sigkill(graph_dir, tmp_path):
    script = tmp_path / "experiment.py"
    script.write_text(textwrap.dedent(_KILL_SCRIPT.format(budget=BUDGET)))
    out = tmp_path / "killed"
    path = out / harness.RECORDS_FILE
    proc = subprocess.Popen([sys.executable, str(script), str(graph_dir), str(out)], cwd=ROOT)
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the experiment finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _lines(path)
    assert 5 <= len(partial) < 24
    # a kill in the middle of a write leaves a torn line: the rerun must cut it off
    with open(path, "ab") as f:
        f.write(b'{"method": "slow-random", "graph": "torn')
    subprocess.run([sys.executable, str(script), str(graph_dir), str(out)], cwd=ROOT,
                   check=True, timeout=120)
    resumed = _lines(path)  # every line parses: the torn tail is gone
    keys = [harness.record_key(r) for r in resumed]
    assert len(keys) == len(set(keys)) == 24
    assert resumed[:len(partial)] == partial  # nothing recorded before the kill was lost

    clean = tmp_path / "clean"
    subprocess.run([sys.executable, str(script), str(graph_dir), str(clean)], cwd=ROOT,
                   check=True, timeout=120)
    assert _comparable(resumed) == _comparable(_lines(clean / harness.RECORDS_FILE))


_ORPHAN_SCRIPT = """
import os, sys, time
from regal import harness, optimizers

def stuck(problem, budget, seed):
    with open(os.path.join(sys.argv[3], f"{os.getpid()}.pid"), "w"):
        pass
    time.sleep(120)

optimizers.register("stuck", stuck)
if __name__ == "__main__":
    harness.run_experiment(["stuck"], sys.argv[1], sys.argv[2], seeds=1, budgets=10,
                           workers=2, progress=False)
"""


def _alive(pid: int) -> bool:
    """Running (an exited process nobody has reaped yet, a zombie, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # gone meanwhile, or no /proc (not Linux): kill said alive
        return sys.platform != "linux"


def test_pool_workers_exit_when_the_experiment_is_killed(graph_dir, tmp_path):
    """A SIGKILL runs no cleanup; the workers must notice on their own and not sit on."""
    script = tmp_path / "experiment.py"
    script.write_text(_ORPHAN_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(graph_dir), str(tmp_path / "out"),
                             str(pids)], cwd=ROOT)
    deadline = time.time() + 90
    while time.time() < deadline and len(list(pids.iterdir())) < 2:
        time.sleep(0.05)
    workers = [int(p.stem) for p in pids.iterdir()]
    assert len(workers) == 2 and all(_alive(w) for w in workers)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "pool workers outlived the killed experiment"


def test_ray_and_local_pool_give_identical_records(graph_dir, tmp_path):
    ray = pytest.importorskip("ray")
    kwargs = dict(seeds=2, budgets=BUDGET, progress=False)
    local = harness.run_experiment(["brkga", "random"], graph_dir, tmp_path / "local",
                                   workers=2, **kwargs)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = harness.run_experiment(["brkga", "random"], graph_dir, tmp_path / "ray",
                                        ray=True, **kwargs)
    finally:
        ray.shutdown()
    assert local.ran == remote.ran == 16
    a = _comparable(_lines(tmp_path / "local" / harness.RECORDS_FILE))
    b = _comparable(_lines(tmp_path / "ray" / harness.RECORDS_FILE))
    assert a == b and len(a) == 16
    assert all(v[0] == "ok" for v in a.values())


def test_torn_tail_is_ignored_and_cut(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3, "b"')
    assert harness.read_records(path) == [{"a": 1}, {"a": 2}]
    writer = harness._RecordWriter(path)
    try:
        with pytest.raises(ValueError, match="another experiment"):
            harness._RecordWriter(path)  # one writer per file
        writer.write({"a": 4})
    finally:
        writer.close()
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n{"a": 4}\n'


@pytest.mark.parametrize("kwargs, match", [
    (dict(methods=["brkga", "no-such-method"]), "no-such-method"),
    (dict(budgets=0), "budget"),
    (dict(budgets=[5, -1]), "budget"),
    (dict(seeds=0), "seeds"),
    (dict(devices=0), "devices"),
    (dict(objectives="speed"), "objective"),
])
def test_bad_arguments_fail_before_running(graph_dir, tmp_path, kwargs, match):
    args = dict(methods=["brkga"], seeds=1, budgets=BUDGET, workers=1, progress=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        harness.run_experiment(graphs=graph_dir, out=tmp_path / "out", **args)
    assert not (tmp_path / "out").exists()


def test_missing_or_empty_graph_folder(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        harness.run_experiment(["brkga"], tmp_path / "nothing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no graph files"):
        harness.run_experiment(["brkga"], tmp_path / "empty", tmp_path / "out")


def test_cli_compare_and_exit_codes(graph_dir, tmp_path, capsys):
    out = tmp_path / "res"
    base = ["compare", "--graphs", str(graph_dir), "--out", str(out), "--quiet"]
    assert main(base + ["--methods", "brkga,nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["compare", "--methods", "brkga", "--graphs", str(tmp_path / "missing"),
                 "--out", str(out)]) == 2
    assert main(base + ["--methods", "brkga", "--budget", "0"]) == 2
    assert "budget" in capsys.readouterr().err
    assert not out.exists()
    assert main(base + ["--methods", "random,brkga", "--budget", f"{BUDGET},{2 * BUDGET}",
                        "--seeds", "1", "--limit", "2", "--workers", "1"]) == 0
    records = _lines(out / harness.RECORDS_FILE)
    assert Counter((r["method"], r["budget"]) for r in records) == {
        ("random", BUDGET): 2, ("brkga", BUDGET): 2, ("random", 2 * BUDGET): 2,
        ("brkga", 2 * BUDGET): 2}
    assert "8 runs done, 0 already recorded, 0 failed" in capsys.readouterr().out
    assert main(["report", str(out), "--baseline-budget", str(BUDGET)]) == 0
    printed = capsys.readouterr().out
    assert "| brkga | 100 | 2 |" in printed and (out / "table.csv").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2
