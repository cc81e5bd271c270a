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

from regal import harness, optimizers, synth, version
from regal.cli import main
from regal.io import load_graph
from regal.records import RecordWriter
from regal.sim import DeviceSpec
from helpers import ROOT, alive

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
    assert r["dataset"] == "tiny" and r["version"] == version() != ""
    assert r["fingerprint"] == load_graph(r["graph_path"]).fingerprint()


def test_forgotten_records_run_again_and_the_rest_is_kept(graph_dir, tmp_path):
    out = tmp_path / "out"
    harness.run_experiment(["random", "brkga"], graph_dir, out, seeds=1, budgets=BUDGET,
                           workers=1, progress=False)
    path = out / harness.RECORDS_FILE
    with open(path, "ab") as f:
        f.write(b"not json\n{\"method\": \"random\", \"torn")   # garbled and torn: kept
    before = path.read_bytes()
    kept_brkga = [line for line in before.splitlines(keepends=True) if b'"brkga"' in line]
    assert harness.forget_records(out, ["nope"]) == 0 and path.read_bytes() == before
    assert harness.forget_records(out, ["random"]) == 4
    after = path.read_bytes()
    assert [r["method"] for r in harness.read_records(path)] == ["brkga"] * 4
    assert b"not json\n" in after
    assert after.endswith(b'"torn') and all(line in after for line in kept_brkga)
    again = harness.run_experiment(["random", "brkga"], graph_dir, out, seeds=1,
                                   budgets=BUDGET, workers=1, progress=False)
    assert (again.ran, again.skipped) == (4, 4)
    assert harness.forget_records(tmp_path / "elsewhere", ["random"]) == 0


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
        # a rerun tries the failed runs again (a killed worker's run is not lost), not the rest
        rerun = harness.run_experiment(["test-crash", "random"], graph_dir, out, seeds=1,
                                       budgets=BUDGET, workers=workers, progress=False)
        assert rerun.ran == rerun.failed == len(failed)
        assert rerun.skipped == len(records) - len(failed)
        assert len(_lines(out / harness.RECORDS_FILE)) == len(records) + len(failed)


def test_an_option_a_method_does_not_take_fails_before_any_run(graph_dir, tmp_path):
    out = tmp_path / "res"
    with pytest.raises(ValueError, match="method 'brkga' takes no option 'foo'"):
        harness.run_experiment(["brkga"], graph_dir, out, seeds=1, budgets=BUDGET,
                               method_options={"brkga": {"foo": 1}}, progress=False)
    assert not out.exists()


def test_compare_exits_1_when_runs_failed(graph_dir, tmp_path, registered, capsys):
    """`regal compare` says how many runs failed and exits 1; the others are recorded."""
    from regal.cli import main
    code = main(["compare", "--methods", "test-crash,random", "--graphs", str(graph_dir),
                 "--seeds", "1", "--budget", str(BUDGET), "--workers", "1", "--quiet",
                 "--out", str(tmp_path / "res")])
    err = capsys.readouterr().err
    records = _lines(tmp_path / "res" / harness.RECORDS_FILE)
    failed = sum(r["status"] == "failed" for r in records)
    assert code == 1 and failed > 0 and f"{failed} runs failed" in err
    assert sum(r["status"] == "ok" for r in records) == len(records) - failed


_KILL_SCRIPT = """
import os, sys, time
from regal import harness, optimizers

def held_random(problem, budget, seed):
    # with REGAL_TEST_HOLD set, the first run that finds 5 records written (one worker: the
    # runs are in this process, one after another) says so and waits to be killed, so the
    # kill always comes mid-experiment, however slow or fast the machine
    hold = os.environ.get("REGAL_TEST_HOLD")
    records = os.path.join(sys.argv[2], harness.RECORDS_FILE)
    if hold and os.path.exists(records):
        with open(records, "rb") as f:
            if f.read().count(b"\\n") >= 5:
                open(hold, "w").close()
                time.sleep(600)
    return optimizers.solve_random(problem, budget, seed)

optimizers.register("held-random", held_random)
if __name__ == "__main__":
    harness.run_experiment(["held-random", "brkga"], sys.argv[1], sys.argv[2], seeds=3,
                           budgets={budget}, workers=1, progress=False)
"""


def test_resume_after_sigkill(graph_dir, tmp_path):
    script = tmp_path / "experiment.py"
    script.write_text(textwrap.dedent(_KILL_SCRIPT.format(budget=BUDGET)))
    out = tmp_path / "killed"
    path = out / harness.RECORDS_FILE
    held = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, str(script), str(graph_dir), str(out)], cwd=ROOT,
                            env=dict(os.environ, REGAL_TEST_HOLD=str(held)))
    try:   # wait for the experiment to hold (a condition, not a time: the machine may be busy)
        deadline = time.monotonic() + 300
        while not held.exists():
            assert proc.poll() is None, "the experiment ended without holding"
            assert time.monotonic() < deadline, "the experiment never held"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
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


def test_pool_workers_exit_when_the_experiment_is_killed(graph_dir, tmp_path):
    """A SIGKILL runs no cleanup; the workers must notice on their own and not sit on."""
    script = tmp_path / "experiment.py"
    script.write_text(_ORPHAN_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(graph_dir), str(tmp_path / "out"),
                             str(pids)], cwd=ROOT)
    # waits for conditions, with long caps that only a failure reaches (a busy machine is slow)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(pids.iterdir())) < 2:
        time.sleep(0.05)
    workers = [int(p.stem) for p in pids.iterdir()]
    assert len(workers) == 2 and all(alive(w) for w in workers)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60   # a worker looks for its parent every 0.5 s
    while time.monotonic() < deadline and any(alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "pool workers outlived the killed experiment"


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
    writer = RecordWriter(path)
    try:
        with pytest.raises(ValueError, match="another experiment"):
            RecordWriter(path)  # one writer per file
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
    (out / "table.csv").unlink()
    # a records file: its tables beside it
    assert main(["report", str(out / harness.RECORDS_FILE), "--baseline-budget",
                 str(BUDGET)]) == 0
    assert capsys.readouterr().out == printed and (out / "table.csv").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2


# ---------------------------------------------------------------------------
# issue 24: readers that meet lines which are not records, and a worker killed with -9


def _good_record(**changes) -> dict:
    record = dict(method="random", dataset="d", graph="g", fingerprint="fp", seed=0,
                  budget=100, devices=2, memory_limit=None, objective="peak_memory",
                  options="{}", status="ok", value=10.0, peak=[10, 4], feasible=True,
                  evaluations=100, wall_time=0.5)
    record.update(changes)
    return record


BAD_LINES = [  # (line bytes, a word the reason must hold)
    (b"42", "number"), (b"[]", "array"), (b"null", "null"), (b'"text"', "string"),
    (b"{}", "no 'method'"),
    (json.dumps(_good_record(method=None)).encode(), "'method'"),
    (json.dumps(_good_record(method=["a"])).encode(), "'method'"),
    (json.dumps(_good_record(devices=[2])).encode(), "'devices'"),
    (json.dumps(_good_record(devices=10**9)).encode(), "'devices'"),
    (json.dumps(_good_record(seed=True)).encode(), "'seed'"),
    (json.dumps(_good_record(memory_limit=2**70)).encode(), "'memory_limit'"),
    (json.dumps(_good_record(options="[1")).encode(), "'options'"),
    (json.dumps(_good_record(revision=2)).encode(), "'revision'"),
    (json.dumps(_good_record(value=None)).encode(), "'value'"),
    (json.dumps(_good_record(value=-1.0)).encode(), "'value'"),
    (json.dumps(_good_record(value=float("nan"))).encode(), "'value'"),
    (b'{"value": 1e400}', "no 'method'"),
    (json.dumps(_good_record(feasible=False)).encode(), "'feasible'"),
    (json.dumps(_good_record(memory_limit=5)).encode(), "'feasible'"),  # 10 B peak > 5 B
    (json.dumps(_good_record(peak=[1])).encode(), "'peak'"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"method": "\xff"}', "not UTF-8"),
    (b'{"method": ', "not JSON"),
    (b"1" * 5000, "not JSON"),  # an integer Python refuses to read (> 4300 digits)
]


@pytest.mark.parametrize("line, why", BAD_LINES)
def test_lines_that_are_not_records_are_skipped_and_named(tmp_path, line, why):
    path = tmp_path / "records.jsonl"
    good = _good_record()
    path.write_bytes(json.dumps(good).encode() + b"\n" + line + b"\n" +
                     json.dumps(_good_record(seed=1)).encode() + b"\n")
    skipped: dict = {}
    records = harness.load_records(tmp_path, skipped)
    assert sorted(r["seed"] for r in records) == [0, 1]
    assert list(skipped) == [str(path)] and skipped[str(path)][:2] == [1, 2]
    (sentence,) = harness.skipped_lines(skipped)
    assert str(path) in sentence and "line 2" in sentence and why in sentence, sentence
    assert harness.check_record(good) is None


def test_record_key_of_a_foreign_object_is_hashable():
    key = harness.record_key({"method": ["a"], "seed": {"b": 1}})
    assert hash(key) and key[0] == '["a"]'


def test_a_records_folder_only_reads_regular_jsonl_files(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()  # a folder named like a records file
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening a pipe would block forever
    (tmp_path / "records.jsonl").write_text(json.dumps(_good_record()) + "\n")
    assert len(harness.load_records(tmp_path)) == 1
    with pytest.raises(ValueError, match="neither a folder nor a regular file"):
        harness.load_records(tmp_path / "pipe.jsonl")


def test_compare_resumes_past_garbled_lines(graph_dir, tmp_path, capsys):
    """An invalid UTF-8 line and foreign lines in records.jsonl: the rerun says so once,
    runs again exactly the runs whose lines were lost, and the table is complete."""
    out = tmp_path / "res"
    argv = ["compare", "--methods", "random", "--graphs", str(graph_dir), "--out", str(out),
            "--budget", str(BUDGET), "--seeds", "2", "--limit", "2", "--workers", "1",
            "--quiet"]
    assert main(argv) == 0
    path = out / harness.RECORDS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    lost = json.loads(lines[1])
    garbled = lines[1].replace(b'"status"', b'"st\xffatus"')
    path.write_bytes(lines[0] + b"42\n" + garbled + b"".join(lines[2:]) + b"[]\n")
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "1 runs done, 3 already recorded, 0 failed" in captured.out
    assert captured.err.count("regal: warning:") == 1  # once per file, with the first line
    assert f"{path}: skipped 3 lines" in captured.err and "line 2" in captured.err
    records = harness.load_records(out)
    assert len(records) == 4
    redone = [r for r in records if harness.record_key(r) == harness.record_key(lost)]
    assert len(redone) == 1 and redone[0]["value"] == lost["value"]  # same seed, same run


_SIGKILL_MARK = "REGAL_TEST_SIGKILL_MARK"


def dies_once(problem, budget, seed):
    """Kills its own worker process with SIGKILL the first time it runs anywhere."""
    mark = Path(os.environ[_SIGKILL_MARK])
    try:
        mark.touch(exist_ok=False)
    except FileExistsError:
        return optimizers.solve_random(problem, budget, seed)
    os.kill(os.getpid(), signal.SIGKILL)


def test_killed_worker_is_one_line_and_the_rerun_resumes(graph_dir, tmp_path, capsys,
                                                         monkeypatch):
    monkeypatch.setenv(_SIGKILL_MARK, str(tmp_path / "killed-once"))
    optimizers.register("test-dies-once", dies_once)
    try:
        out = tmp_path / "res"
        argv = ["compare", "--methods", "test-dies-once", "--graphs", str(graph_dir),
                "--out", str(out), "--budget", str(BUDGET), "--seeds", "2", "--workers", "2",
                "--quiet"]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "worker process died" in err and "test-dies-once on " in err
        assert "rerun" in err
        assert main(argv) == 0
        records = harness.load_records(out)
        assert len(records) == 8 and all(r["status"] == "ok" for r in records)
    finally:
        optimizers.METHODS.pop("test-dies-once", None)


def test_infeasible_makespan_records_are_records(graph_dir, tmp_path, capsys):
    """Under a memory limit nothing fits, the makespan is infinite: such a record is valid,
    so a rerun skips it (it must not run again, nor be called garbage)."""
    argv = ["compare", "--methods", "random", "--graphs", str(graph_dir), "--out",
            str(tmp_path / "res"), "--budget", str(BUDGET), "--seeds", "1", "--limit", "2",
            "--objective", "makespan", "--memory-limit", "0", "--workers", "1", "--quiet"]
    assert main(argv) == 0
    records = harness.load_records(tmp_path / "res")
    assert len(records) == 2 and all(r["value"] == float("inf") and not r["feasible"]
                                     for r in records)
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "0 runs done, 2 already recorded" in captured.out and captured.err == ""
    assert harness.check_record(dict(records[0], feasible=True)) is not None  # inf: infeasible


def test_per_graph_memory_limits(graph_dir, tmp_path):
    """A callable gives each (graph, devices) its own limit: asked once per pair (not per
    method), recorded with the run, obeyed by the simulator, and a rerun skips the runs."""
    asked = Counter()

    def limit_of(path, devices):
        asked[(Path(path).name, devices)] += 1
        return 40 * devices + load_graph(path).num_nodes

    kwargs = dict(seeds=1, budgets=BUDGET, devices=[2, 3], objectives="makespan",
                  memory_limits=limit_of, workers=1, progress=False, limit=2)
    first = harness.run_experiment(["random", "brkga"], graph_dir, tmp_path, **kwargs)
    records = harness.load_records(tmp_path)
    assert first.ran == len(records) == 2 * 2 * 2
    assert set(asked.values()) == {1} and len(asked) == 2 * 2
    for r in records:
        assert r["memory_limit"] == 40 * r["devices"] + r["ops"]
        assert r["feasible"] == (max(r["peak"]) <= r["memory_limit"])
    again = harness.run_experiment(["random", "brkga"], graph_dir, tmp_path, **kwargs)
    assert again.ran == 0 and again.skipped == len(records)


def test_report_pools_per_graph_limits(graph_dir, tmp_path, capsys):
    """`regal report --pool-limits`: one section per device count, each method over both
    graphs; without it, a section per graph's limit."""
    harness.run_experiment(["random", "brkga"], graph_dir, tmp_path, seeds=1, budgets=BUDGET,
                           devices=[2, 3], objectives="makespan", workers=1, progress=False,
                           limit=2,
                           memory_limits=lambda path, d: 50 * d + load_graph(path).num_nodes)
    assert main(["report", str(tmp_path), "--no-chart", "--no-bounds", "--pool-limits"]) == 0
    pooled = capsys.readouterr().out
    assert pooled.count("## makespan, 2 devices, no memory limit") == 1
    assert pooled.count("## makespan, 3 devices, no memory limit") == 1
    assert main(["report", str(tmp_path), "--no-chart", "--no-bounds"]) == 0
    apart = capsys.readouterr().out
    limits = {r["memory_limit"] for r in harness.load_records(tmp_path)}
    assert apart.count("## makespan,") == len(limits) > 2


def test_a_bad_per_graph_limit_names_the_graph(graph_dir, tmp_path):
    first = sorted(graph_dir.glob("*.npz"))[0].stem
    with pytest.raises(ValueError, match=f"memory_limit of {first} at 2 devices"):
        harness.run_experiment(["random"], graph_dir, tmp_path, seeds=1, budgets=BUDGET,
                               devices=2, memory_limits=lambda path, d: -1, workers=1,
                               progress=False)
    assert not (tmp_path / harness.RECORDS_FILE).exists()


def test_a_revised_method_runs_again_and_its_earlier_records_leave_the_tables(graph_dir, tmp_path):
    # the same name, options and seeds, new code: stored runs of the earlier revision are not
    # reused, stay in the file, and neither `current_revisions` nor the report counts them
    out = tmp_path / "out"
    try:
        optimizers.register("test-revised", optimizers.solve_random)
        first = harness.run_experiment(["test-revised", "brkga"], graph_dir, out, seeds=1,
                                       budgets=BUDGET, workers=1, progress=False)
        assert (first.ran, first.skipped) == (8, 0)
        records = _lines(out / harness.RECORDS_FILE)
        assert {r["revision"] for r in records} == {""}
        optimizers.register("test-revised", optimizers.solve_brkga, revision="2")
        again = harness.run_experiment(["test-revised", "brkga"], graph_dir, out, seeds=1,
                                       budgets=BUDGET, workers=1, progress=False)
        assert (again.ran, again.skipped) == (4, 4)
        records = _lines(out / harness.RECORDS_FILE)
        assert len(records) == 12 and len({harness.record_key(r) for r in records}) == 12
        current = harness.current_revisions(records)
        assert Counter((r["method"], r.get("revision")) for r in current) == \
            {("test-revised", "2"): 4, ("brkga", ""): 4}
        # a record written before the field existed is revision ""
        old = {k: v for k, v in records[0].items() if k != "revision"}
        assert harness.record_key(old) == harness.record_key(records[0])
        from regal.report import write_report
        report = write_report(out, tmp_path / "report", chart=False, bounds=False)
        runs = {r["method"]: r["runs"] for r in report["rows"]}
        assert runs == {"brkga": 4, "test-revised": 4}
        assert any("4 record(s) of test-revised made by its earlier code" in line
                   for line in report["skipped"])
        optimizers.register("test-revised", optimizers.solve_brkga, revision="3")
        with pytest.raises(ValueError, match="earlier code"):
            write_report(out, tmp_path / "report", chart=False, bounds=False,
                         keep=lambda r: r["method"] == "test-revised")
        with pytest.raises(ValueError, match="revision"):
            optimizers.register("test-revised", optimizers.solve_brkga, revision=3)
    finally:
        optimizers.METHODS.pop("test-revised", None)
        optimizers.REVISIONS.pop("test-revised", None)


def test_runs_under_a_limit_carry_the_limits_revision(graph_dir, tmp_path):
    """Runs under a memory limit are keyed by `LIMITS_REVISION` too: records of a limit made
    before the limits rules changed are run again and leave the tables; runs without a
    limit keep their method's revision and are reused."""
    out = tmp_path / "out"
    first = harness.run_experiment(["random"], graph_dir, out, seeds=1, budgets=BUDGET,
                                   memory_limits=[None, 10**9], workers=1, progress=False)
    records = _lines(out / harness.RECORDS_FILE)
    assert {(r["memory_limit"], r["revision"]) for r in records} == \
        {(None, ""), (10**9, optimizers.LIMITS_REVISION)}
    # the same file as earlier code wrote it: no revision on the limited runs
    path = out / harness.RECORDS_FILE
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "revision"}
                                       if r["memory_limit"] is not None else r) + "\n"
                            for r in records))
    again = harness.run_experiment(["random"], graph_dir, out, seeds=1, budgets=BUDGET,
                                   memory_limits=[None, 10**9], workers=1, progress=False)
    assert (again.ran, again.skipped) == (first.ran // 2, first.ran // 2)
    current = harness.current_revisions(_lines(path))
    assert len(current) == first.ran
    assert all(r["revision"] == optimizers.LIMITS_REVISION for r in current
               if r["memory_limit"] is not None)


def test_records_keep_the_short_entries_of_the_methods_extra(graph_dir, tmp_path):
    """Issue 37 item 5: a record answers which climb won and what BRKGA's best was before
    the climbs; long entries (BRKGA's per-generation history) are left out."""
    out = tmp_path / "out"
    harness.run_experiment(["seeded-brkga", "brkga"], graph_dir, out, seeds=1, budgets=300,
                           workers=1, progress=False)
    records = _lines(out / harness.RECORDS_FILE)
    for r in records:
        assert all(len(json.dumps(v)) <= harness.EXTRA_CHARS for v in r["extra"].values())
        if r["method"] == "seeded-brkga":
            assert r["extra"]["polish_winner"] in ("climb", "fresh-1", "fresh-2")
            assert r["extra"]["before_polish"] >= r["value"]
            assert r["extra"]["reference_value"] >= r["value"]
        else:   # 300 evaluations: a few generations, a short history ending at the answer
            assert min(r["extra"]["history"]) == r["extra"]["history"][-1] == r["value"]
    assert harness.kept_extra({"long": list(range(100)), "short": 1.5, "object": object()}) \
        == {"short": 1.5}
