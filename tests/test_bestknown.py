"""The best-known store: monotone, tolerant, resumable; entries decode to their stored value."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import random_graph
from regal.bestknown import Entry, Store, build_store, dense_ranks, entry_key, load_store
from regal.decode import rank_normalize
from regal.io import save_graph
from regal.optimizers import Problem, round_robin, single_device, solve
from regal.sim import DeviceSpec, simulate


def _graph_file(tmp_path, seed: int, ops: int = 25, name: str | None = None):
    graph = random_graph(np.random.default_rng(seed), ops)
    path = tmp_path / f"{name or f'g{seed}'}.npz"
    save_graph(graph, path)
    return graph, path


def _entry(problem, solution, name="g"):
    return Entry.from_solution(problem, solution, graph=name, found_by=solution.method,
                               evaluations=1, seconds=0.0)


def test_dense_ranks_keep_the_schedule():
    """Priorities stored as ranks give the simulator the same schedule, to the byte."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        graph = random_graph(rng)
        n, d = graph.num_nodes, int(rng.integers(1, 4))
        placement = rng.integers(0, d, n).astype(np.int32)
        prio = rng.choice([0.1, 0.5, 0.7, 0.9], n)  # ties on purpose
        tprio = rng.random(n)
        a = simulate(graph, DeviceSpec(d), placement, prio, tprio)
        b = simulate(graph, DeviceSpec(d), placement, rank_normalize(dense_ranks(prio)),
                     rank_normalize(dense_ranks(tprio)))
        assert np.array_equal(a.peak, b.peak) and a.makespan == b.makespan


def test_store_is_monotone_and_survives_reload(tmp_path):
    graph = random_graph(np.random.default_rng(1), 20)
    problem = Problem(graph, DeviceSpec(2))
    good, bad = sorted([single_device(problem), round_robin(problem)], key=lambda s: s.value)
    path = tmp_path / "store.jsonl"
    store = Store(path)
    assert store.offer(_entry(problem, bad))
    assert store.offer(_entry(problem, good)) == (good.value < bad.value)
    assert not store.offer(_entry(problem, bad))  # never replaced by a worse (or equal) one
    store.close()
    best, _ = load_store(path)
    key = entry_key(graph.fingerprint(), 2, None, "peak_memory")
    assert best[key].value == good.value
    # the stored entry decodes to exactly its value
    assert best[key].solution(problem).value == good.value
    assert np.isclose(solve("brkga", problem, 200, 0, initial=[best[key].solution(problem)]).value,
                      min(good.value, solve("brkga", problem, 200, 0,
                                            initial=[good]).value))


def test_reader_skips_foreign_and_torn_lines(tmp_path):
    graph = random_graph(np.random.default_rng(2), 10)
    problem = Problem(graph, DeviceSpec(2))
    path = tmp_path / "store.jsonl"
    store = Store(path)
    store.offer(_entry(problem, single_device(problem)))
    store.close()
    with open(path, "a") as f:
        f.write("42\n[]\nnull\n{\"kind\": \"solution\", \"value\": 1}\nnot json\n")
        f.write(json.dumps({"kind": "effort", "fingerprint": "x"}) + "\n")
        f.write("{\"torn\": ")  # a kill mid-write
    best, effort = load_store(path)
    assert len(best) == 1 and effort == {}
    store = Store(path)  # opening for writing cuts the torn tail
    store.add_effort(next(iter(best)), 1.5)
    store.close()
    assert load_store(path)[1] == {next(iter(best)): 1.5}


def test_a_file_without_store_lines_is_no_store(tmp_path, capsys):
    """A file named as a store by mistake (garbage, compare's records) is refused, by the
    reader and by the commands, not read as an empty store nor appended to."""
    from helpers import refused
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"not json\n\x00\x01\n")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"method": "random", "graph": "g", "value": 1.0}) + "\n")
    for path in (garbage, records):
        with pytest.raises(ValueError, match="not a best-known store"):
            load_store(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert load_store(empty) == ({}, {})  # an empty file is an empty store
    from regal.cli import main
    (tmp_path / "graphs").mkdir()
    _, graph = _graph_file(tmp_path / "graphs", 3, ops=8)
    before = records.read_bytes()
    refused(["best-known", str(graph), "--devices", "2", "--time-per-graph", "1", "--out",
             str(records)], capsys, "not a best-known store")
    assert records.read_bytes() == before
    results = tmp_path / "res"
    assert main(["compare", "--methods", "random", "--graphs", str(tmp_path / "graphs"),
                 "--seeds", "1", "--budget", "50", "--workers", "1", "--quiet", "--out",
                 str(results)]) == 0
    refused(["report", str(results), "--best-known", str(garbage), "--out",
             str(tmp_path / "rep")], capsys, "not a best-known store")


def test_build_resumes_and_never_gets_worse(tmp_path):
    _, p1 = _graph_file(tmp_path, 11)
    _, p2 = _graph_file(tmp_path, 12)
    store = tmp_path / "bk.jsonl"
    first = build_store([tmp_path], store, devices=[2], time_per_graph=1.5, workers=1,
                        progress=False)
    assert first.keys == 2 and first.chunks == 2 and first.skipped == 0
    best1, effort1 = load_store(store)
    assert len(best1) == 2 and all(s >= 1.4 for s in effort1.values())
    again = build_store([tmp_path], store, devices=[2], time_per_graph=1.5, workers=1,
                        progress=False)
    assert again.skipped == 2 and again.chunks == 0  # nothing owed: resume is a no-op
    # a chunk may overrun its CPU seconds (heuristics are not interruptible): ask for more
    # than the largest effort so far, so that every key is owed time
    more = build_store([tmp_path], store, devices=[2],
                       time_per_graph=max(effort1.values()) + 2.0, workers=1, progress=False)
    assert more.chunks == 2
    best2, effort2 = load_store(store)
    for key in best1:
        assert best2[key].value <= best1[key].value
        assert effort2[key] > effort1[key]
    # extra: 1 s more on every key, though each has had more than that in total
    extra = build_store([tmp_path], store, devices=[2], time_per_graph=1.0, extra=True,
                        workers=1, progress=False)
    assert extra.chunks == 2 and extra.skipped == 0
    best3, effort3 = load_store(store)
    for key in best2:
        assert best3[key].value <= best2[key].value
        assert effort3[key] >= effort2[key] + 0.9


def test_build_with_a_pool_and_compact(tmp_path):
    graphs = [_graph_file(tmp_path, s, 15)[0] for s in (21, 22, 23)]
    store_path = tmp_path / "bk.jsonl"
    summary = build_store([tmp_path], store_path, devices=[1, 3], time_per_graph=1.0,
                          workers=2, progress=False)
    assert summary.keys == 6
    store = Store(store_path)
    assert len(store) == 6
    store.compact()
    lines = store_path.read_text().splitlines()
    assert len(lines) == 12  # one solution and one effort line per key
    best, _ = load_store(store_path)
    for graph in graphs:
        for d in (1, 3):
            entry = best[entry_key(graph.fingerprint(), d, None, "peak_memory")]
            problem = Problem(graph, DeviceSpec(d))
            # never worse than the cheap references the portfolio starts from
            assert entry.value <= min(single_device(problem).value, round_robin(problem).value)
            assert entry.solution(problem).value == entry.value


def test_a_killed_build_keeps_finished_chunks(tmp_path):
    """A build interrupted after its first chunk has that chunk's entry and effort stored."""
    _graph_file(tmp_path, 31)
    _graph_file(tmp_path, 32)
    store = tmp_path / "bk.jsonl"

    def stop(_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_store([tmp_path], store, devices=[2], time_per_graph=1.0, workers=1,
                    progress=False, on_chunk=stop)
    best, effort = load_store(store)
    assert len(best) == 1 and len(effort) == 1
    rerun = build_store([tmp_path], store, devices=[2], time_per_graph=1.0, workers=1,
                        progress=False)
    assert rerun.skipped == 1 and rerun.chunks == 1


def test_cli_best_known(tmp_path):
    _graph_file(tmp_path, 41, 12, name="small")
    store = tmp_path / "bk.jsonl"
    run = subprocess.run([sys.executable, "-m", "regal.cli", "best-known", str(tmp_path),
                          "--devices", "2", "--time-per-graph", "1", "--out", str(store),
                          "--workers", "1", "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "small d=2" in run.stdout and "(new)" in run.stdout
    spent = sum(load_store(store)[1].values())
    again = subprocess.run([sys.executable, "-m", "regal.cli", "best-known", str(tmp_path),
                            "--devices", "2", "--time-per-graph", "1", "--extra", "--out",
                            str(store), "--workers", "1", "--quiet"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "1 chunks run" in again.stdout and sum(load_store(store)[1].values()) >= spent + 0.9
    bad = subprocess.run([sys.executable, "-m", "regal.cli", "best-known", str(tmp_path),
                          "--devices", "2", "--time-per-graph", "0", "--out", str(store)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--time-per-graph" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "regal.cli", "best-known",
                              str(tmp_path / "nope"), "--devices", "2", "--time-per-graph",
                              "1", "--out", str(store)], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_build_on_ray(tmp_path):
    pytest.importorskip("ray")
    _graph_file(tmp_path, 51, 12)
    _graph_file(tmp_path, 52, 12)
    store = tmp_path / "bk.jsonl"
    summary = build_store([tmp_path], store, devices=[2], time_per_graph=1.0, workers=2,
                          ray=True, progress=False)
    assert summary.chunks == 2
    best, effort = load_store(store)
    assert len(best) == 2 and len(effort) == 2


def test_build_with_a_limit_per_graph(tmp_path):
    """A callable memory limit keys each graph's entry by its own limit, and the entry's
    solution meets it (the store of the transfer experiment's makespan table)."""
    graphs = {path.stem: graph for graph, path in (_graph_file(tmp_path, s) for s in (21, 22))}
    limits = {}

    def limit_of(path, devices):
        one = single_device(Problem(graphs[path.stem], DeviceSpec(1))).value
        limits[path.stem] = int(0.8 * one)
        return limits[path.stem]

    store = tmp_path / "mk.jsonl"
    build_store([tmp_path], store, devices=[2], objective="makespan", memory_limit=limit_of,
                time_per_graph=1.0, workers=1, progress=False)
    best, _ = load_store(store)
    assert set(best) == {entry_key(graphs[name].fingerprint(), 2, [limit] * 2, "makespan")
                         for name, limit in limits.items()}
    for (_, _, limit, _), entry in best.items():
        assert max(entry.peak) <= limit[0]


def test_improve_stops_brkga_at_its_deadline(monkeypatch):
    # a clock that advances 1 ms per chromosome scored: BRKGA's first round (2,000
    # evaluations) alone would take 2 s, twice the 1 s asked for; it must stop within the
    # generation that crosses the deadline
    from regal import bestknown

    now = [0.0]

    class Timed(Problem):
        def evaluate(self, keys):
            now[0] += 0.001 * len(keys)
            return super().evaluate(keys)

    monkeypatch.setattr(bestknown, "_clock", lambda: now[0])
    problem = Timed(random_graph(np.random.default_rng(5), 40), DeviceSpec(2))
    # without the race, whose own first population is larger
    found = bestknown.improve(problem, 1.0, seed=0, population_size=50, race=False)
    assert 1.0 - 0.05 <= found["seconds"] <= 1.0 + 0.001 * 50 + 1e-9   # 0.05: no new step
    assert found["solution"].value <= min(single_device(problem).value,
                                          round_robin(problem).value)


def test_improve_races_and_keeps_the_best_of_every_step(monkeypatch, evaluation_clock):
    """Each portfolio round ends with a race (seeded BRKGA, its fresh climbs racing), at its
    tuned budget and a seed of its own; the portfolio returns the best of every step. Its
    seconds are read off `evaluation_clock` (conftest.py), 2**-13 s a chromosome scored
    (24,576 in the 3 s: two rounds, each with its race), so that the rounds and where the
    last one stops are the same on a busy machine."""
    from regal import bestknown, optimizers
    from regal.search import climb, pipeline

    evaluation_clock.tick = 2.0**-13
    monkeypatch.setattr(bestknown, "_clock", evaluation_clock)
    calls = []

    def spying(name, function):
        def spy(problem, budget, seed=0, **options):
            found = function(problem, budget, seed, **options)
            calls.append((name, budget, seed, found.value))
            return found
        return spy

    solve = optimizers.solve

    def registry(name, problem, budget, seed=0, **options):   # the cheap heuristics, BRKGA
        spy = spying(name, lambda *args, **kwargs: solve(name, *args, **kwargs))
        return spy(problem, budget, seed, **options)

    monkeypatch.setattr(optimizers, "solve", registry)
    monkeypatch.setattr(climb, "local_search", spying("local-search", climb.local_search))
    monkeypatch.setattr(pipeline, "solve_seeded_brkga",
                        spying("seeded-brkga", pipeline.solve_seeded_brkga))
    problem = Problem(random_graph(np.random.default_rng(8), 40), DeviceSpec(2))
    found = bestknown.improve(problem, 3.0, seed=2)
    races = [c for c in calls if c[0] == "seeded-brkga"]
    assert len(races) >= 2 and all(budget == bestknown._RACE_BUDGET for _, budget, _, _ in races)
    seeds = [seed for _, _, seed, _ in races]
    assert len(set(seeds)) == len(seeds) and min(seeds) >= 2000 + bestknown._RACE_SEED
    assert {"brkga", "local-search"} <= {c[0] for c in calls}
    every = [c[3] for c in calls] + [single_device(problem).value, round_robin(problem).value]
    assert found["solution"].value == min(every)
    # no round starts within 0.05 s of the deadline; the last race stops at the deadline,
    # within the batch that crosses it
    last = evaluation_clock.batches[-1] * evaluation_clock.tick
    assert 3.0 - 0.05 <= found["seconds"] < 3.0 + last, found["seconds"]

    calls.clear()
    bestknown.improve(problem, 1.0, seed=2, race=False)
    assert calls and "seeded-brkga" not in {c[0] for c in calls}


def test_portfolio_skips_metf_on_large_graphs(monkeypatch):
    # m-ETF's time grows about quadratically with the ops; above the limit it is left out
    from regal import bestknown

    problem = Problem(random_graph(np.random.default_rng(9), 40), DeviceSpec(2))
    names = [s.method for s in bestknown._heuristics(problem, 0)[0]]
    assert "m-etf" in names and "gp-dfs" in names
    monkeypatch.setattr(bestknown, "_ETF_MAX_OPS", 39)
    names = [s.method for s in bestknown._heuristics(problem, 0)[0]]
    assert "m-etf" not in names and {"m-topo", "gp-dfs"} <= set(names)


def test_build_beaten_by_runs_only_the_keys_a_record_beats(tmp_path):
    """With records, only the entries a record beats (and missing ones) get time."""
    from regal.bestknown import beaten_keys, record_store_key

    g1, _ = _graph_file(tmp_path, 61, 12, name="one")
    g2, _ = _graph_file(tmp_path, 62, 12, name="two")
    store = tmp_path / "bk.jsonl"
    build_store([tmp_path], store, devices=[2], time_per_graph=1.2, workers=1, progress=False)
    best, effort = load_store(store)
    key1 = entry_key(g1.fingerprint(), 2, None, "peak_memory")
    key2 = entry_key(g2.fingerprint(), 2, None, "peak_memory")

    def record(graph, value, **fields):
        return dict(dict(fingerprint=graph.fingerprint(), devices=2, memory_limit=None,
                         objective="peak_memory", status="ok", feasible=True, value=value),
                    **fields)
    records = [record(g1, best[key1].value - 1),               # beats graph one's entry
               record(g2, best[key2].value),                   # equals: beats nothing
               record(g2, best[key2].value - 1, status="error"),
               record(g2, best[key2].value - 1, feasible=False)]
    assert record_store_key(records[0]) == key1
    assert beaten_keys(records, Store(store)) == {key1}
    summary = build_store([tmp_path], store, devices=[2], time_per_graph=1.2, extra=True,
                          beaten_by=records, workers=1, progress=False)
    assert summary.chunks == 1 and summary.not_beaten == 1 and summary.skipped == 0
    after = load_store(store)[1]
    assert after[key1] >= effort[key1] + 1.0 and after[key2] == effort[key2]
    # a limit given as one number is every device's
    limited = record(g1, 5.0, memory_limit=1000)
    assert record_store_key(limited) == entry_key(g1.fingerprint(), 2, [1000, 1000], "peak_memory")


def test_cli_best_known_beaten_by(tmp_path):
    """--beaten-by reads a harness records file; records that beat nothing leave every entry
    alone, and a missing file is a user error (exit 2)."""
    from regal.harness import run_experiment

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    _graph_file(graphs, 71, 12, name="small")
    store = tmp_path / "bk.jsonl"
    build_store([graphs], store, devices=[2], time_per_graph=1.2, workers=1, progress=False)
    run_experiment(["m-topo"], {"g": graphs}, tmp_path / "runs", devices=[2], seeds=1,
                   budgets=1, workers=1, progress=False)
    records = tmp_path / "runs" / "records.jsonl"
    assert records.is_file()
    cli = [sys.executable, "-m", "regal.cli", "best-known", str(graphs), "--devices", "2",
           "--time-per-graph", "1", "--extra", "--out", str(store), "--workers", "1", "--quiet"]
    run = subprocess.run(cli + ["--beaten-by", str(records)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "0 already had the time, 1 not beaten by a record, 0 chunks run" in run.stdout
    # a record below the store's entry: that entry gets the time
    value = load_store(store)[0].popitem()[1].value
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    records.write_text("".join(json.dumps(dict(r, value=value - 1)) + "\n" for r in lines))
    run = subprocess.run(cli + ["--beaten-by", str(tmp_path / "runs")], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert "0 not beaten by a record, 1 chunks run" in run.stdout
    # a file of no harness records (the store itself) is refused, not read as "none beaten"
    wrong = subprocess.run(cli + ["--beaten-by", str(store)], capture_output=True, text=True)
    assert wrong.returncode == 2 and "holds no harness records" in wrong.stderr
    bad = subprocess.run(cli + ["--beaten-by", str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "none.jsonl" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------------------
# issue 39 item 4: the lower bound beside the value


def _line(fingerprint, devices, value, objective="peak_memory", memory_limit=None, **more):
    """A solution line as a store holds it (one op on device 0); `more`: bound fields."""
    return {"format": "regal-bestknown/1", "kind": "solution", "fingerprint": fingerprint,
            "graph": f"g-{fingerprint}", "ops": 1, "devices": devices,
            "memory_limit": memory_limit, "objective": objective, "value": float(value),
            "peak": [int(value)] + [0] * (devices - 1), "makespan": 1.0, "feasible": True,
            "placement": [0], "priority": [0], "transfer_priority": [0], "found_by": "hand",
            "evaluations": 1, "seconds": 0.0, "version": "0.2.0", **more}


def _write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_old_lines_without_a_bound_still_read(tmp_path):
    """Lines written before bounds were stored (no bound fields) read with bound None; a
    bound line or a later line's bound gives the key its largest bound; a malformed bound
    leaves the line's value standing."""
    path = tmp_path / "old.jsonl"
    _write_lines(path, [_line("a", 2, 100), _line("b", 2, 50),
                        _line("c", 2, 70, bound="many", bound_source="x")])
    best, _ = load_store(path)
    key_a, key_b = entry_key("a", 2, None, "peak_memory"), entry_key("b", 2, None, "peak_memory")
    assert best[key_a].value == 100 and best[key_a].bound is None
    assert best[key_a].bound_source is None and best[key_a].gap() is None
    assert best[entry_key("c", 2, None, "peak_memory")].bound is None
    with open(path, "a") as f:   # a worse line with a bound, then a bound line
        f.write(json.dumps(_line("a", 2, 120, bound=60.0, bound_source="op_start")) + "\n")
        f.write(json.dumps({"kind": "bound", "fingerprint": "b", "devices": 2,
                            "memory_limit": None, "objective": "peak_memory", "bound": 40,
                            "bound_source": "end_state"}) + "\n")
    best, _ = load_store(path)
    assert (best[key_a].value, best[key_a].bound, best[key_a].bound_source) == \
        (100, 60.0, "op_start")
    assert best[key_a].gap() == pytest.approx(40 / 60)
    assert (best[key_b].value, best[key_b].bound, best[key_b].bound_source) == \
        (50, 40.0, "end_state")


def test_bounds_merge_monotonically(tmp_path):
    """The value kept is the least, the bound the largest (both valid); a bound line only
    when it raises the bound; a bound above the value is refused; read_stores merges the
    same way over files; compact folds the bound into the solution line."""
    from regal.bestknown import read_stores

    path = tmp_path / "store.jsonl"
    key = entry_key("a", 2, None, "peak_memory")
    _write_lines(path, [_line("a", 2, 100, bound=60.0, bound_source="op_start")])
    store = Store(path)

    def entry(value, bound=None, source=None):
        from regal.bestknown_store import _entry_from_record
        return _entry_from_record(_line("a", 2, value, bound=bound, bound_source=source))

    assert store.offer(entry(90, 50.0, "end_state"))          # better value, lower bound
    assert (store.get(key).value, store.get(key).bound) == (90, 60.0)
    assert store.get(key).bound_source == "op_start"
    assert not store.offer(entry(95, 70.0, "start_cut"))      # worse value, higher bound
    assert (store.get(key).value, store.get(key).bound) == (90, 70.0)
    lines = len(path.read_text().splitlines())
    assert not store.offer_bound(key, 65.0, "working_set")   # lower: no line
    assert not store.offer_bound(key, 70.0, "working_set")   # equal: no line
    assert len(path.read_text().splitlines()) == lines
    with pytest.raises(ValueError, match="above the value"):
        store.offer_bound(key, 91.0, "wrong")
    with pytest.raises(ValueError, match="above the value"):
        store.offer(entry(80, 85.0, "wrong"))
    assert not store.offer_bound(entry_key("none", 2, None, "peak_memory"), 1.0)  # no entry
    store.close()
    best, _ = load_store(path)
    assert (best[key].value, best[key].bound, best[key].bound_source) == (90, 70.0, "start_cut")

    other = tmp_path / "other.jsonl"
    _write_lines(other, [_line("a", 2, 85, bound=55.0, bound_source="end_state")])
    merged = read_stores([path, other])[key]
    assert (merged.value, merged.bound, merged.bound_source) == (85, 70.0, "start_cut")
    merged = read_stores([other, path])[key]
    assert (merged.value, merged.bound) == (85, 70.0)

    Store(path).compact()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("kind") for line in lines] == ["solution"]
    assert (lines[0]["value"], lines[0]["bound"], lines[0]["bound_source"]) == \
        (90, 70.0, "start_cut")


def _tiny_graphs(seed: int, count: int):
    """Brute-forceable graphs (4-5 ops: aliases, control edges, a colocation group, a pin)
    and a device count each (1-3)."""
    from test_exact import _graph
    rng = np.random.default_rng(seed)
    for i in range(count):
        d = (1, 2, 3)[i % 3]
        yield _graph(rng, int(rng.integers(4, 6)), d, constrained=i % 2 == 1), d


def test_built_bounds_never_exceed_the_value_nor_the_exhaustive_optimum(tmp_path):
    """A build stores a bound beside each entry; it is <= the stored value and <= the
    exhaustive optimum (every placement x device order x transfer order)."""
    from regal.bestknown import store_bound
    from test_exact import exhaustive_optimum

    cases = list(_tiny_graphs(7, 6))
    for i, (graph, d) in enumerate(cases):
        folder = tmp_path / f"d{d}"
        folder.mkdir(exist_ok=True)
        save_graph(graph, folder / f"g{i}.npz")
    store = tmp_path / "bk.jsonl"
    for d in (1, 2, 3):
        build_store([tmp_path / f"d{d}"], store, devices=[d], time_per_graph=1.0, workers=1,
                    progress=False)
    best, _ = load_store(store)
    assert len(best) == len(cases)
    proven = 0
    for graph, d in cases:
        entry = best[entry_key(graph.fingerprint(), d, None, "peak_memory")]
        optimum = exhaustive_optimum(graph, DeviceSpec(d))
        assert entry.bound is not None and entry.bound_source
        assert entry.bound <= optimum <= entry.value, (d, entry.bound, optimum, entry.value)
        assert entry.bound == store_bound(graph, d).value
        proven += entry.bound == entry.value
    assert proven >= 1


def test_a_cpsat_bound_from_the_portfolio_is_kept(tmp_path, monkeypatch):
    """A proven bound the portfolio returns (CP-SAT's, under `bounds`) joins regal.bounds'
    (the larger is stored, named by its argument); a makespan build stores the step-time
    bound (`regal.bounds_time`), below its entry's step."""
    from regal import bestknown
    from test_exact import exhaustive_optimum

    from test_exact import _graph
    graph, d = _graph(np.random.default_rng(2), 4, 2, constrained=False), 2
    save_graph(graph, tmp_path / "g.npz")
    optimum = exhaustive_optimum(graph, DeviceSpec(d))
    assert bestknown.store_bound(graph, d).value < optimum   # the case this test needs
    improve = bestknown.improve

    def with_cpsat(problem, *args, **kwargs):
        found = improve(problem, *args, **kwargs)
        return dict(found, bounds={"cpsat": float(optimum)})   # valid: it is the optimum

    monkeypatch.setattr(bestknown, "improve", with_cpsat)
    store = tmp_path / "bk.jsonl"
    build_store([tmp_path], store, devices=[d], time_per_graph=1.0, workers=1,
                progress=False)
    entry = load_store(store)[0][entry_key(graph.fingerprint(), d, None, "peak_memory")]
    assert (entry.bound, entry.bound_source) == (optimum, "cpsat")
    makespan = tmp_path / "mk.jsonl"
    build_store([tmp_path], makespan, devices=[d], objective="makespan", time_per_graph=1.0,
                workers=1, progress=False)
    (entry,) = load_store(makespan)[0].values()
    step = bestknown.store_bound(graph, d, objective="makespan")
    assert entry.bound == step.value <= entry.value and entry.bound_source == step.source


def test_add_bounds_to_a_store_built_without_them(tmp_path):
    """The backfill: bounds added to the entries whose graph is given (files or graphs
    regenerated in memory, matched by fingerprint; a makespan entry its step-time bound), the
    others counted; a rerun adds nothing; the CLI prints each certified gap."""
    from regal.bestknown import add_bounds, store_bound

    g1, p1 = _graph_file(tmp_path, 81, 12, name="one")
    g2, _ = _graph_file(tmp_path, 82, 12, name="two")
    store = tmp_path / "old.jsonl"
    build_store([p1], store, devices=[2, 3], time_per_graph=1.0, workers=1, progress=False)
    build_store([p1], store, devices=[2], objective="makespan", time_per_graph=1.0,
                workers=1, progress=False)
    best, _ = load_store(store)
    # as a store written before bounds: every bound field dropped
    lines = [json.loads(line) for line in store.read_text().splitlines()
             if '"kind": "bound"' not in line]
    _write_lines(store, [{k: v for k, v in line.items() if not k.startswith("bound")}
                         for line in lines])
    with open(store, "a") as f:   # and an entry whose graph is not at hand
        f.write(json.dumps(_line("elsewhere", 2, 10)) + "\n")
    assert all(e.bound is None for e in load_store(store)[0].values())
    summary = add_bounds(store, [g1, g2], time_limit=1.0)
    assert (summary.keys, summary.bounded, summary.no_graph) == (4, 3, 1)
    after, _ = load_store(store)
    for d in (2, 3):
        entry = after[entry_key(g1.fingerprint(), d, None, "peak_memory")]
        assert entry.bound == store_bound(g1, d, time_limit=1.0).value <= entry.value
        assert entry.value == best[entry.key()].value
    step = after[entry_key(g1.fingerprint(), 2, None, "makespan")]
    assert step.bound == store_bound(g1, 2, objective="makespan").value <= step.value
    again = add_bounds(store, [tmp_path], compact=True)
    assert (again.bounded, again.had_bound, again.no_graph) == (0, 3, 1)
    assert '"kind": "bound"' not in store.read_text()
    assert load_store(store)[0] == after
    run = subprocess.run([sys.executable, "-m", "regal.cli", "best-known", str(tmp_path),
                          "--devices", "2", "--bounds-only", "--out", str(store)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "0 bounded now" in run.stdout and "3 had a bound" not in run.stdout
    assert "2 had a bound" in run.stdout   # --devices 2: the 3-device entry is left out
    assert "(makespan)" in run.stdout and "certified: " in run.stdout


def test_bounds_again_raise_a_stored_bound_and_keep_a_higher_one(tmp_path):
    """`--bounds-only --again`: entries that have a bound get it computed anew and keep the
    higher (a store bounded before a stronger argument existed); without --again they are
    left alone; --again alone is refused."""
    from regal.bestknown import store_bound

    g1, p1 = _graph_file(tmp_path, 83, 12, name="one")
    store = tmp_path / "s.jsonl"
    build_store([p1], store, devices=[2], time_per_graph=1.0, workers=1, progress=False)
    (key,) = load_store(store)[0]
    lines = [json.loads(line) for line in store.read_text().splitlines()
             if '"kind": "bound"' not in line]
    _write_lines(store, [dict(line, bound=1.0, bound_source="working_set") for line in lines])
    assert load_store(store)[0][key].bound == 1.0
    argv = [sys.executable, "-m", "regal.cli", "best-known", str(p1), "--devices", "2",
            "--bounds-only", "--out", str(store)]
    assert subprocess.run(argv, capture_output=True, text=True).returncode == 0
    assert load_store(store)[0][key].bound == 1.0                 # has one: left alone
    run = subprocess.run(argv + ["--again"], capture_output=True, text=True)
    assert run.returncode == 0 and "1 bounded now" in run.stdout, run.stdout + run.stderr
    entry = load_store(store)[0][key]
    assert entry.bound == store_bound(g1, 2).value > 1.0 and entry.bound <= entry.value
    portfolio = [a for a in argv if a != "--bounds-only"] + ["--time-per-graph", "1", "--again"]
    refused = subprocess.run(portfolio, capture_output=True, text=True)
    assert refused.returncode == 2 and "--again" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_shipped_stores_keep_a_valid_bound_beside_each_value():
    """The committed stores (bounds added by `add_bounds`): every entry has a bound no
    higher than its value, named by its argument (the step time's, `regal.bounds_time`, for
    makespan entries: below the step of each entry that fits)."""
    from pathlib import Path
    stores = sorted((Path(__file__).resolve().parent.parent / "data" / "bestknown")
                    .glob("*.jsonl"))
    assert stores
    objectives = set()
    for path in stores:
        for entry in load_store(path)[0].values():
            objectives.add(entry.objective)
            assert entry.bound is not None and entry.bound_source, (path.name, entry.graph)
            assert 0 <= entry.bound <= entry.value, (path.name, entry.graph)
            if entry.objective == "makespan" and entry.feasible:
                assert entry.bound <= entry.makespan, (path.name, entry.graph)
    assert objectives == {"peak_memory", "makespan"}
