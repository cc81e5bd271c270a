"""`regal optimize` / `regal compare` knobs (issue 23, item 3): per-device memory limits,
link bandwidth and latency, a warm start (--init) and a policy folder (--policy). Everything
runs in this process through `regal.cli.main` on a 40-op sample graph."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from regal.cli import main
from regal.io import load_graph
from regal.optimizers import Problem, read_solution, solve
from regal.regal_method import policy_content_hash
from regal.sim import DeviceSpec
from helpers import refused

REPO = Path(__file__).resolve().parent.parent
GRAPH = str(REPO / "data" / "synth" / "samples" / "random_infer_40.npz")


def optimize(tmp_path, name: str, *flags: str) -> tuple[int, dict]:
    """Runs `regal optimize GRAPH --devices 2 --budget 200 FLAGS --out NAME.json`."""
    out = tmp_path / f"{name}.json"
    code = main(["optimize", GRAPH, "--devices", "2", "--budget", "200", *flags,
                 "--out", str(out)])
    return code, json.loads(out.read_text())


@pytest.mark.parametrize("limits", [(0, 2000), (2000, 0), (1, 1), (1400, 2000)])
def test_per_device_limits_reach_the_solution(tmp_path, limits):
    """Each device is held to its own limit: the solution is feasible (exit 0) exactly when
    every device's peak fits that device's limit, else exit 3. 1 byte each cannot hold the
    graph; 1400 bytes each can (the whole graph on one device peaks at 1.28 KiB)."""
    code, record = optimize(tmp_path, "limits", "--memory-limit", f"{limits[0]},{limits[1]}")
    peak = np.asarray(record["result"]["peak"])
    assert record["devices"]["memory_limit"] == list(limits)
    fits = bool(np.all(peak <= np.asarray(limits)))
    assert record["result"]["feasible"] == fits
    assert code == (0 if fits else 3)
    if limits == (1, 1):
        assert not fits
    if limits == (1400, 2000):
        assert fits


def test_one_size_is_every_devices_limit(tmp_path):
    _, record = optimize(tmp_path, "one", "--memory-limit", "1KiB")
    assert record["devices"]["memory_limit"] == [1024, 1024]


def test_bandwidth_and_latency_change_the_makespan(tmp_path):
    """Transfers cost latency + size / bandwidth. One device needs none, so its makespan is the
    sum of compute times whatever the link; with a free link two devices beat it (the graph
    has parallel branches). Each solution is scored with its own link: the free link's
    two-device placement costs more on a slow link."""
    graph = load_graph(GRAPH)
    single = float(graph.compute_cost.sum())
    _, free = optimize(tmp_path, "free", "--objective", "makespan", "--latency", "0",
                       "--bandwidth", "1e12")
    _, slow = optimize(tmp_path, "slow", "--objective", "makespan", "--latency", "1e7",
                       "--bandwidth", "1")
    assert free["devices"]["latency"] == 0 and free["devices"]["bandwidth"] == 1e12
    assert slow["devices"]["latency"] == 1e7 and slow["devices"]["bandwidth"] == 1
    assert free["result"]["makespan"] < single

    def makespan(record, **link) -> float:
        problem = Problem(graph, DeviceSpec(2, **link), "makespan")
        return read_solution(record, problem).makespan
    assert slow["result"]["makespan"] == pytest.approx(makespan(slow, latency=1e7, bandwidth=1))
    # the free link's two-device answer has transfers: the slow link would cost it more
    assert free["result"]["makespan"] == pytest.approx(makespan(free, latency=0, bandwidth=1e12))
    assert makespan(free, latency=1e7, bandwidth=1) > free["result"]["makespan"]
    assert slow["result"]["makespan"] != free["result"]["makespan"]


@pytest.mark.parametrize("method", ["brkga", "local-search", "cpsat"])
def test_warm_start_is_never_worse_than_its_start(tmp_path, method):
    """The earlier solution is in the first population / among the starts / CP-SAT's hint,
    so even the smallest budget (one BRKGA generation) returns a value no worse than it."""
    _, start = optimize(tmp_path, "start", "--seed", "5")
    out = tmp_path / "warm.json"
    limit = ["--time-limit", "2"] if method == "cpsat" else []
    code = main(["optimize", GRAPH, "--devices", "2", "--budget", "100", "--seed", "9",
                 "--method", method, "--init", str(tmp_path / "start.json"), "--out", str(out)]
                + limit)
    warm = json.loads(out.read_text())
    assert code == 0
    assert warm["result"]["value"] <= start["result"]["value"]


def test_formulation_picks_cpsats_model(tmp_path, capsys):
    """--formulation timed runs cpsat's timed model: the status and certified gap are
    printed, and the value written is the simulator's value of the solution written."""
    code, record = optimize(tmp_path, "timed", "--method", "cpsat", "--formulation", "timed",
                            "--time-limit", "3")
    out = capsys.readouterr().out
    assert code == 0
    assert "solver status:" in out and "certified:" in out
    from regal.optimizers import score
    problem = Problem(load_graph(GRAPH), DeviceSpec(2))
    answer = read_solution(record, problem)
    assert score(problem, answer.placement, answer.priority,
                 answer.transfer_priority)["value"] == record["result"]["value"]


def test_regal_paper_takes_a_policy(tmp_path):
    """--policy reaches regal-paper too: the same answer as the library's run with it."""
    from regal.optimizers import solve
    policy = REPO / "data" / "policy"
    code, record = optimize(tmp_path, "paper", "--method", "regal-paper", "--policy",
                            str(policy))
    assert code == 0 and record["method"] == "regal-paper"
    problem = Problem(load_graph(GRAPH), DeviceSpec(2))
    assert record["result"]["value"] == solve("regal-paper", problem, 200, 0,
                                              policy_dir=str(policy)).value


def test_an_output_never_replaces_an_input(tmp_path, capsys):
    """--out / --plot naming the graph (or each other), measure's --json naming its solution:
    refused before anything is written; --out may still replace its own --init."""
    graph = tmp_path / "g.npz"
    graph.write_bytes(Path(GRAPH).read_bytes())
    kept = graph.read_bytes()
    base = ["optimize", str(graph), "--devices", "2", "--budget", "100"]
    refused(base + ["--out", str(graph)], capsys, "--out")
    refused(base + ["--plot", str(graph)], capsys, "--plot")
    refused(base + ["--out", str(tmp_path / "x.json"), "--plot", str(tmp_path / "x.json")],
            capsys, "--out")
    assert graph.read_bytes() == kept and not (tmp_path / "x.json").exists()
    solution = tmp_path / "s.json"
    assert main(base + ["--out", str(solution)]) == 0
    refused(base + ["--init", str(solution), "--plot", str(solution)], capsys, "--plot")
    refused(["measure", "m", "--solution", str(solution), "--json", str(solution)], capsys,
            "--json")
    assert main(base + ["--init", str(solution), "--out", str(solution)]) == 0


def test_init_under_other_constraints_is_named(tmp_path, capsys):
    """A solution of this graph made with --pin, given as --init to a run without (and the
    reverse), is refused with a line that names the constraints, not the graph."""
    pinned = ["--pin", "node_3=1"]
    assert optimize(tmp_path, "pinned", *pinned)[0] == 0
    assert optimize(tmp_path, "free")[0] == 0
    base = ["optimize", GRAPH, "--devices", "2", "--budget", "100", "--method", "brkga"]
    refused(base + ["--init", str(tmp_path / "pinned.json")], capsys, "--pin / --colocate")
    refused(base + pinned + ["--init", str(tmp_path / "free.json")], capsys,
            "--pin / --colocate")
    assert main(base + pinned + ["--init", str(tmp_path / "pinned.json")]) == 0


@pytest.fixture
def ctrl_c_method():
    """A search that presses Ctrl-C `presses` times after its first batch, then runs until
    asked to stop: random search over batches of 10 (budget: more than it will reach)."""
    import os
    import signal

    from regal import optimizers

    state = {"presses": 1, "batches": 0}

    def pressing(problem, budget, seed, *, progress=None, should_stop=None):
        def stop() -> bool:
            state["batches"] += 1
            if state["batches"] == 2:
                for _ in range(state["presses"]):
                    os.kill(os.getpid(), signal.SIGINT)
            return should_stop()
        return optimizers.solve_random(problem, budget, seed, batch_size=10,
                                       progress=progress, should_stop=stop)
    optimizers.register("test-ctrl-c", pressing)
    yield state
    optimizers.METHODS.pop("test-ctrl-c", None)
    optimizers.REVISIONS.pop("test-ctrl-c", None)


def test_ctrl_c_keeps_the_best_found_so_far(tmp_path, capsys, ctrl_c_method):
    """The first Ctrl-C stops the search: its best is written and printed, exit 130; a
    second one interrupts at once (nothing written)."""
    import signal
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "s.json"
    argv = ["optimize", GRAPH, "--devices", "2", "--budget", "10000000", "--method",
            "test-ctrl-c", "--out", str(out)]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert "interrupted: the best solution found so far" in captured.err
    assert f"wrote {out}" in captured.out and "certified:" in captured.out
    record = json.loads(out.read_text())
    assert 20 <= record["result"]["evaluations"] < 10000000
    from regal.optimizers import score
    problem = Problem(load_graph(GRAPH), DeviceSpec(2))
    answer = read_solution(record, problem)
    assert score(problem, answer.placement, answer.priority,
                 answer.transfer_priority)["value"] == record["result"]["value"]
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    ctrl_c_method.update(presses=2, batches=0)
    out.unlink()
    assert main(argv) == 130 and not out.exists()
    assert signal.getsignal(signal.SIGINT) is before


def test_policy_runs_regal_and_compare_records_it(tmp_path):
    policy = REPO / "data" / "policy"
    code, record = optimize(tmp_path, "regal", "--method", "regal", "--policy", str(policy))
    assert code == 0 and record["method"] == "regal"
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "g.npz").write_bytes(Path(GRAPH).read_bytes())
    assert main(["compare", "--methods", "regal,random", "--graphs", str(graphs), "--seeds",
                 "1", "--budget", "200", "--workers", "1", "--quiet", "--policy", str(policy),
                 "--out", str(tmp_path / "res")]) == 0
    lines = (tmp_path / "res" / "records.jsonl").read_text().splitlines()
    options = {r["method"]: json.loads(r["options"]) for r in map(json.loads, lines)}
    assert options == {"regal": {"policy_dir": "data/policy",
                                 "policy_hash": policy_content_hash(policy)}, "random": {}}


def test_compare_runs_again_when_the_policy_is_replaced_in_place(tmp_path, monkeypatch):
    """A record names its policy by folder and content: a policy retrained into the same
    folder, or another $REGAL_POLICY_DIR, is run again, not answered from the old records;
    the same policy is not (in one process: the loaded policy is read again when its files
    change)."""
    policy = tmp_path / "policy"
    shutil.copytree(REPO / "data" / "policy", policy)
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "g.npz").write_bytes(Path(GRAPH).read_bytes())
    argv = ["compare", "--methods", "regal-paper", "--graphs", str(graphs), "--seeds", "1",
            "--devices", "2", "--budget", "200", "--workers", "1", "--quiet", "--out",
            str(tmp_path / "res")]
    records = tmp_path / "res" / "records.jsonl"

    def values():
        return [json.loads(line)["value"] for line in records.read_text().splitlines()]

    monkeypatch.setenv("REGAL_POLICY_DIR", str(policy))
    assert main(argv) == 0 and len(values()) == 1
    assert main(argv) == 0 and len(values()) == 1          # the same policy: kept
    rng = np.random.default_rng(0)
    with np.load(policy / "weights.npz") as stored:        # retrained in place
        weights = {k: stored[k] + rng.normal(0, 0.5, stored[k].shape).astype(stored[k].dtype)
                   if stored[k].dtype.kind == "f" else stored[k] for k in stored.files}
    np.savez(policy / "weights.npz", **weights)
    assert main(argv) == 0 and len(values()) == 2
    problem = Problem(load_graph(GRAPH), DeviceSpec(2))
    retrained = solve("regal-paper", problem, 200, 0, policy_dir=str(policy)).value
    assert values()[1] == retrained != values()[0]
    other = tmp_path / "other"                               # another folder, same content
    shutil.copytree(policy, other)
    monkeypatch.setenv("REGAL_POLICY_DIR", str(other))
    assert main(argv) == 0 and len(values()) == 3


def test_bad_knobs_exit_2_naming_the_flag(tmp_path, capsys):
    base = ["optimize", GRAPH, "--devices", "2", "--budget", "200"]
    optimize(tmp_path, "start")  # a solution of this graph, for --init
    elsewhere = tmp_path / "other.json"  # ... and one of another graph
    record = json.loads((tmp_path / "start.json").read_text())
    record["graph"]["fingerprint"] = "0" * len(record["graph"]["fingerprint"])
    elsewhere.write_text(json.dumps(record))
    cases = [
        (["--memory-limit", "1MiB,2MiB,3MiB"], "--memory-limit"),
        (["--memory-limit", "1MiB,"], "--memory-limit"),
        (["--memory-limit", "1MiB,-2"], "--memory-limit"),
        (["--bandwidth", "0"], "--bandwidth"),
        (["--bandwidth", "inf"], "--bandwidth"),
        (["--latency", "-1"], "--latency"),
        (["--latency", "nan"], "--latency"),
        (["--init", str(tmp_path / "start.json"), "--method", "random"], "--init"),
        (["--init", str(elsewhere)], "--init"),
        (["--init", str(tmp_path / "missing.json")], "missing.json"),
        (["--policy", str(tmp_path / "nope"), "--method", "regal"], "--policy"),
        (["--policy", str(tmp_path), "--method", "regal"], "--policy"),
        (["--policy", str(REPO / "data" / "policy")], "--policy"),
        (["--pin", "node_3=0", "--pin", "node_3=1"], "pinned to device 0 already"),
        (["--method", "brkga", "--budget", "50"], "--budget"),  # under its population
        # model-only flags on a graph file: that, not "add --training"
        (["--loss", "mse"], "apply only to a model"),
        (["--microbatches", "2"], "apply only to a model"),
        (["--formulation", "timed", "--method", "brkga"], "--formulation"),
        (["--formulation", "exact", "--method", "cpsat"], "--formulation"),
        # reaches the method: only the timed model refuses the step time
        (["--formulation", "timed", "--method", "cpsat", "--objective", "makespan"],
         "formulation timed"),
    ]
    for flags, needle in cases:
        refused(base + flags, capsys, needle)
    refused(["compare", "--methods", "brkga", "--graphs", str(tmp_path), "--policy",
             str(REPO / "data" / "policy"), "--out", str(tmp_path / "res")], capsys, "--policy")


def test_default_method_is_local_search(tmp_path, capsys):
    """`regal optimize` without --method runs local search (chosen by measurement, README
    "Which method"): the same answer as the library's local search with that seed and budget."""
    from regal.optimizers import solve

    code, record = optimize(tmp_path, "default", "--seed", "4")
    assert code == 0 and "method local-search, seed 4" in capsys.readouterr().out
    assert record["method"] == "local-search"
    expected = solve("local-search", Problem(load_graph(GRAPH), DeviceSpec(2)), 200, 4)
    assert record["result"]["value"] == expected.value


def test_a_loaded_policy_is_read_again_when_its_files_change(tmp_path):
    """load_policy's per-process copy is keyed by the files' path, time and size: a policy
    written over in place is not answered from memory (nor is the same one loaded twice)."""
    from regal.regal_method import load_policy

    policy = tmp_path / "policy"
    shutil.copytree(REPO / "data" / "policy", policy)
    first = load_policy(policy)
    assert load_policy(policy) is first
    with np.load(policy / "weights.npz") as stored:
        weights = {k: stored[k] + 1 if stored[k].dtype.kind == "f" else stored[k]
                   for k in stored.files}
    np.savez(policy / "weights.npz", **weights)
    second = load_policy(policy)
    assert second is not first
    assert load_policy(policy) is second


def test_compare_names_a_bad_regal_policy_dir(tmp_path, monkeypatch, capsys):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "g.npz").write_bytes(Path(GRAPH).read_bytes())
    monkeypatch.setenv("REGAL_POLICY_DIR", str(tmp_path / "nowhere"))
    refused(["compare", "--methods", "regal", "--graphs", str(graphs), "--budget", "200",
             "--out", str(tmp_path / "res")], capsys, "$REGAL_POLICY_DIR")
    assert not (tmp_path / "res" / "records.jsonl").exists()
