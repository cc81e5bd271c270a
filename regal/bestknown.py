"""Best-known solutions: a monotone store of the best answer long, strong runs found per graph.

Why: every quality figure ("gap from best", "headroom captured") needs a yardstick that the
runs being compared did not set themselves. The store holds, per (graph fingerprint, devices,
memory limit, objective), the best solution a portfolio of long runs ever found.

The store's format, reading and writing are `regal.bestknown_store` (its names are reachable
from here too); this module fills it: a portfolio per graph (`improve`) and a build over
many graphs (`build_store`).

The portfolio (`improve`) per graph: the stored best, every cheap heuristic (single device,
round robin, m-topo, gp-dfs, m-etf up to 3,000 ops), CP-SAT on graphs small enough for it,
then rounds of BRKGA with large budgets, warm-started from the incumbent and the heuristics or
restarted from scratch (every third round), each followed by a local-search polish of the
incumbent when the local search accepts a start, then (peak memory, graphs of any size) by
CP-SAT re-optimising windows of the incumbent with the rest fixed (`cpsat-lns`,
`baselines/cpsat/lns.py`), and by a race: seeded BRKGA with its climbs afresh from the
heuristic starts racing the one from its own best (`regal.search.pipeline`, a new seed each
round). Without the race, single 5,000-evaluation runs of that schedule beat
the store on most graphs: polishing one incumbent over and over stays in its basin, and fresh
climbs leave it. Every value is the simulator's score.

Time is CPU time of the process doing the search (`time.process_time`, every thread of it),
not wall time: on a shared, loaded machine a wall-clock budget would buy less search, and the
store's effort figures would not mean the same from one run to the next.

Lower bounds: a build stores beside each entry it writes a valid lower bound on the key's
optimum (`store_bound`: for peak memory `regal.bounds.lower_bound` with `_BOUND_SECONDS`, and
CP-SAT's proven bound where the portfolio ran it; for the step time
`regal.bounds_time.step_time_bound`), once per key, outside the portfolio's
effort; `add_bounds` adds them to the entries of a store built before bounds were stored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from regal.bestknown_store import (STORE_FORMAT, Entry, Store, dense_ranks, entry_key,
                                   load_store, read_stores, record_store_key)
from regal.workers import Workers

__all__ = ["STORE_FORMAT", "Entry", "Store", "entry_key", "record_store_key", "load_store",
           "read_stores", "improve", "build_store", "BuildSummary", "dense_ranks",
           "store_bound", "add_bounds", "BoundsSummary"]

_CHUNK_SECONDS = 120.0  # longest portfolio run between two writes (what a kill can lose)
_CPSAT_MAX_OPS = 60     # CP-SAT joins the portfolio below this many ops
_ETF_MAX_OPS = 3000     # m-ETF's time grows about quadratically: ~8 s at 2,900 ops, every chunk
_RACE_BUDGET = 5000     # evaluations of each race (the budget its schedule was tuned at)
_BRKGA_SHARE = 0.3      # of the time left, a round's BRKGA step (and its polish: of what is
_POLISH_SHARE = 0.3     # left then); the race then runs its budget, or to the deadline
_LNS_SHARE = 0.3        # of the time left after the polish, CP-SAT's windows on the incumbent
_LNS_MIN_SECONDS = 1.0  # a shorter turn solves no window worth its trace
_RACE_SEED = 500        # race seeds start here, apart from the seeds 0, 1, 2 that tables use
_BOUND_SECONDS = 5.0    # regal.bounds' time limit per key (wall seconds; start_cut stops then):
                        # measured 2.6 s on 13,958 ops, 4.4 s on 46,193 (0.1 s under 4,000)
_clock = time.process_time  # the portfolio's budget is CPU seconds (see the docstring)


# ---------------------------------------------------------------------------
# the portfolio


@dataclass
class _Incumbent:
    solution: object = None
    found_by: str = ""
    found_at: float = 0.0

    def offer(self, solution, found_by: str, at: float) -> bool:
        better = self.solution is None or _better(solution, self.solution)
        if better:
            self.solution, self.found_by, self.found_at = solution, found_by, at
        return better


def _better(a, b) -> bool:
    """Lower objective value wins; at equal value a smaller sum of peaks (a tie-break only)."""
    if a.value != b.value:
        return a.value < b.value
    return int(np.sum(a.peak)) < int(np.sum(b.peak))


def _heuristics(problem, seed: int) -> tuple[list, int]:
    """Every cheap heuristic's answer that runs on this problem, and evaluations they used."""
    from regal import optimizers

    found = [optimizers.single_device(problem), optimizers.round_robin(problem)]
    used = 2
    for name in ("m-topo", "m-etf", "gp-dfs"):
        if name == "m-etf" and problem.graph.num_nodes > _ETF_MAX_OPS:
            continue
        try:
            solution = optimizers.solve(name, problem, 1, seed)
        except Exception:  # a heuristic that cannot handle this problem is just left out
            continue
        found.append(solution)
        used += max(1, int(solution.evaluations))
    return found, used


def improve(problem, seconds: float, seed: int = 0, incumbent=None, *,
            spent_before: float = 0.0, evaluations_before: int = 0,
            population_size: int = 200, race: bool = True) -> dict:
    """Runs the portfolio for about `seconds` of CPU time and returns the best it found.

    `incumbent` is a Solution (the store's best) that the portfolio starts from. `race`:
    whether each round ends with a race (seeded BRKGA). Returns
    {"solution", "found_by", "found_at" (seconds into the key's whole effort),
    "evaluations" (the key's total), "improved" (beat the incumbent), "log": [step lines],
    "bounds": {name: bytes} (proven lower bounds a step gave on the way: CP-SAT's, for
    peak memory; `store_bound` takes them as `extra`)}.
    """
    from regal import optimizers

    began = _clock()
    deadline = began + float(seconds)
    best = _Incumbent()
    log = []
    bounds = {}
    used = 0

    def now() -> float:
        return spent_before + _clock() - began

    if incumbent is not None:
        best.offer(incumbent, incumbent.method or "stored", 0.0)
    heuristics, count = _heuristics(problem, seed)
    used += count
    for solution in heuristics:
        if best.offer(solution, solution.method, now()):
            log.append(f"{solution.method}: {solution.value:.6g}")
    stored_value = None if incumbent is None else incumbent.value

    if problem.graph.num_nodes <= _CPSAT_MAX_OPS and deadline - _clock() > 8.0:
        limit = min(30.0, 0.25 * (deadline - _clock()))
        try:
            solution = optimizers.solve("cpsat", problem, 1, seed, time_limit=limit)
            used += max(1, int(solution.evaluations))
            if best.offer(solution, "cpsat", now()):
                log.append(f"cpsat: {solution.value:.6g}")
            if problem.objective == "peak_memory" and solution.extra.get("bound") is not None:
                bounds["cpsat"] = solution.extra["bound"]  # proven for peak memory (optimize)
        except Exception as exc:  # CP-SAT missing or failing leaves the rest of the portfolio
            log.append(f"cpsat failed: {exc}")

    from regal.search.climb import local_search
    from regal.search.pipeline import solve_seeded_brkga

    rate = None  # BRKGA's evaluations per second, measured on its first round

    def turn(share: float, cap: float) -> float:
        """The end of a step given `share` of the time left, at most `cap` seconds."""
        return min(deadline, _clock() + min(share * (deadline - _clock()), cap))

    round_ = 0
    while _clock() < deadline - 0.05:
        fresh = round_ % 3 == 2
        ends = turn(_BRKGA_SHARE, 60.0)
        budget = 2000 if rate is None else int(max(population_size, rate * (ends - _clock())))
        warm = None if fresh else [best.solution, *heuristics]
        began_round = _clock()
        solution = optimizers.solve("brkga", problem, budget, seed * 1000 + round_,
                                    population_size=population_size, initial=warm,
                                    should_stop=lambda: _clock() >= ends)
        elapsed = max(_clock() - began_round, 1e-6)
        rate = solution.evaluations / elapsed
        used += int(solution.evaluations)
        step = "brkga(fresh)" if fresh else "brkga(warm)"
        if best.offer(solution, step, now()):
            log.append(f"{step} round {round_}: {solution.value:.6g}")
        if _clock() < deadline - 0.05:
            # a climb scores fewer schedules per second than BRKGA: its turn ends the climb
            ends = turn(_POLISH_SHARE if race else 1.0, 30.0)
            budget = int(max(100, rate * (ends - _clock())))
            solution = local_search(problem, budget, seed * 1000 + round_,
                                    initial=best.solution, heuristics=(),
                                    should_stop=lambda: _clock() >= ends)
            used += int(solution.evaluations)
            if best.offer(solution, "local-search", now()):
                log.append(f"local-search round {round_}: {solution.value:.6g}")
        if problem.objective == "peak_memory" and deadline - _clock() > _LNS_MIN_SECONDS:
            # CP-SAT re-optimising windows of the incumbent: moves of many ops at once, where
            # the climbs stall (any graph size: the model is built per window only)
            ends = turn(_LNS_SHARE, 60.0)
            solution = optimizers.solve("cpsat-lns", problem, None, seed * 1000 + round_,
                                        initial=best.solution, time_limit=ends - _clock(),
                                        should_stop=lambda: _clock() >= ends)
            used += int(solution.evaluations)
            if best.offer(solution, "cpsat-lns", now()):
                log.append(f"cpsat-lns round {round_}: {solution.value:.6g}")
        if race and _clock() < deadline - 0.05:
            solution = solve_seeded_brkga(problem, _RACE_BUDGET,
                                          seed * 1000 + _RACE_SEED + round_,
                                          should_stop=lambda: _clock() >= deadline)
            used += int(solution.evaluations)
            if best.offer(solution, "race", now()):
                log.append(f"race round {round_}: {solution.value:.6g}")
        round_ += 1
    improved = stored_value is None or best.solution.value < stored_value
    return {"solution": best.solution, "found_by": best.found_by, "found_at": best.found_at,
            "evaluations": evaluations_before + used, "improved": improved, "log": log,
            "seconds": _clock() - began, "bounds": bounds}


# ---------------------------------------------------------------------------
# lower bounds beside the values


def store_bound(graph, devices: int, extra=None, time_limit: float | None = _BOUND_SECONDS,
                objective: str = "peak_memory"):
    """The bound a store keeps for (graph, devices): the lower bound `regal optimize`
    certifies with. Peak memory: a `regal.bounds.Bound` (`regal.bounds.lower_bound`, `extra`
    proven bounds by name, `time_limit` seconds for its min-cut argument). Step time: a
    `regal.bounds_time.StepBound`, valid under every memory limit of the key."""
    if objective != "peak_memory":
        from regal.bounds_time import step_time_bound
        return step_time_bound(graph, int(devices))
    from regal.bounds import lower_bound
    return lower_bound(graph, int(devices), extra=extra, time_limit=time_limit)


@dataclass
class BoundsSummary:
    keys: int = 0         # entries in the store
    bounded: int = 0      # given a bound, or a higher one, now
    unchanged: int = 0    # bounded before, and the new bound is no higher
    no_graph: int = 0     # entries whose graph was not among those given
    had_bound: int = 0    # of the given graphs' entries, bounded already (`missing_only`)
    seconds: float = 0.0  # wall seconds spent on the bounds
    rows: list = field(default_factory=list)  # (graph, devices, value, bound, source, objective)


def _graphs_of(graphs: Iterable):
    """(name, graph) for each item: a ComputationGraph (named by its fingerprint), a
    (name, graph) pair, or a graph file or folder of them (loaded one at a time)."""
    from regal.graph import ComputationGraph
    from regal.io import load_graph
    for item in graphs:
        if isinstance(item, ComputationGraph):
            yield item.fingerprint(), item
        elif isinstance(item, tuple):
            yield item
        else:
            for path in _graph_files([item]):
                yield path.stem, load_graph(path)


def add_bounds(store_path, graphs: Iterable, *, devices: Iterable[int] | None = None,
               time_limit: float | None = _BOUND_SECONDS, missing_only: bool = True,
               compact: bool = False) -> BoundsSummary:
    """Adds a lower bound (`store_bound`, for the entry's objective) to the entries of a
    store whose graph is among `graphs` (files, folders, ComputationGraphs or (name, graph)
    pairs, e.g. regenerated from their recipes: entries are matched by fingerprint), at
    `devices` (None: every count). One bound per (graph, devices, objective) serves every
    memory limit. `missing_only`: entries that have a bound keep it without a new
    computation (else the higher of the two is kept). `compact`: the store rewritten
    afterwards (`Store.compact`), bounds folded into the solution lines."""
    store = Store(store_path, write=True)
    summary = BoundsSummary(keys=len(store))
    wanted = None if devices is None else {int(d) for d in devices}
    began = time.perf_counter()
    try:
        todo: dict[str, list] = {}   # fingerprint -> its keys
        for key, entry in store.best.items():
            if wanted is None or entry.devices in wanted:
                todo.setdefault(key[0], []).append(key)
        for name, graph in _graphs_of(graphs):
            keys = todo.pop(graph.fingerprint(), None)
            if keys is None:
                continue
            if missing_only:
                summary.had_bound += sum(store.best[k].bound is not None for k in keys)
            for d, objective in sorted({(key[1], key[3]) for key in keys}):
                mine = [k for k in keys if (k[1], k[3]) == (d, objective)]
                owed = [k for k in mine
                        if not (missing_only and store.best[k].bound is not None)]
                bound = store_bound(graph, d, time_limit=time_limit, objective=objective) \
                    if owed else None
                for key in mine:
                    if key in owed:
                        if store.offer_bound(key, bound):
                            summary.bounded += 1
                        else:
                            summary.unchanged += 1
                    entry = store.best[key]
                    summary.rows.append((entry.graph or name, d, entry.value, entry.bound,
                                         entry.bound_source, objective))
        summary.no_graph = sum(len(keys) for keys in todo.values())
        summary.seconds = time.perf_counter() - began
        if compact:
            store.compact()
    finally:
        store.close()
    return summary


# ---------------------------------------------------------------------------
# building a store over many graphs


@dataclass(frozen=True)
class _Job:
    path: str
    name: str
    devices: int
    memory_limit: tuple | None
    objective: str
    seconds: float
    seed: int
    spent_before: float


def _problem(job: _Job, graph):
    from regal.optimizers import Problem
    from regal.sim import DeviceSpec
    limit = None if job.memory_limit is None else list(job.memory_limit)
    return Problem(graph, DeviceSpec(job.devices, memory_limit=limit), job.objective)


def _run_job(job: _Job, entry: Entry | None) -> dict:
    """One chunk of portfolio time on one (graph, devices); runs in a worker."""
    from regal.io import load_graph

    graph = load_graph(job.path)
    problem = _problem(job, graph)
    incumbent = None if entry is None else entry.solution(problem)
    result = improve(problem, job.seconds, job.seed, incumbent, spent_before=job.spent_before,
                     evaluations_before=0 if entry is None else entry.evaluations)
    bound = None  # once per key (and again where CP-SAT proved one), outside the effort
    if entry is None or entry.bound is None or result["bounds"]:
        bound = store_bound(graph, job.devices, extra=result["bounds"], objective=job.objective)
    new = None
    if result["improved"]:
        new = Entry.from_solution(problem, result["solution"], graph=job.name,
                                  found_by=result["found_by"],
                                  evaluations=result["evaluations"],
                                  seconds=result["found_at"], bound=bound)
    return {"entry": new, "seconds": result["seconds"], "log": result["log"],
            "value": result["solution"].value, "bound": bound}


@dataclass
class BuildSummary:
    keys: int = 0
    chunks: int = 0
    improved: int = 0
    skipped: int = 0        # keys that already had the time asked for
    not_beaten: int = 0     # keys left alone because no record beats them (`beaten_by`)
    seconds: float = 0.0
    rows: list = field(default_factory=list)  # (graph, devices, value before, value after,
    #                                            bound after or None)


def _graph_files(paths: Iterable) -> list[Path]:
    from regal.harness import GRAPH_SUFFIXES
    files = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.iterdir()
                           if p.is_file() and p.suffix.lower() in GRAPH_SUFFIXES)
            if not found:
                raise ValueError(f"graphs: {path} holds no graph files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"graphs: {path} does not exist")
    return files


def beaten_keys(records: Iterable[dict], store: "Store") -> set:
    """Keys where some ok, feasible record's value is below the store's entry."""
    keys = set()
    for record in records:
        if record.get("status") != "ok" or not record.get("feasible", True):
            continue
        key = record_store_key(record)
        entry = store.best.get(key)
        if entry is not None and float(record["value"]) < entry.value:
            keys.add(key)
    return keys


def build_store(graphs: Iterable, store_path, *, devices: Iterable[int] = (2,),
                objective: str = "peak_memory", memory_limit=None,
                time_per_graph: float = 60.0, time_per_kop: float = 0.0, seed: int = 0,
                extra: bool = False, beaten_by: Iterable[dict] | None = None,
                workers: int | None = None,
                ray: bool = False, progress: bool = True,
                on_chunk: Callable[[dict], None] | None = None) -> BuildSummary:
    """Spends up to `time_per_graph` CPU seconds, plus `time_per_kop` per 1,000 ops, of
    portfolio time on every (graph, devices), minus what the store records as already spent
    (`extra=True`: that much more, whatever was spent), and keeps the store monotone (a
    large graph evaluates slowly, so it needs more time).
    `beaten_by`: harness records (e.g. a transfer run's records.jsonl); when given, only the
    keys that some ok, feasible record beats, or that the store lacks, get time (where the
    store is weakest).
    `memory_limit`: None, bytes for every device, a per-device list, or a callable
    `(graph path, devices)` giving one of those per graph (e.g. above its best-known peak).

    Work is cut into chunks of at most `_CHUNK_SECONDS`; the parent writes after each, so a
    killed build resumes with at most one chunk per worker lost."""
    from regal.io import load_graph
    from regal.optimizers import OBJECTIVES

    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
    devices = [int(d) for d in devices]
    if not devices or any(d < 1 or d > 64 for d in devices):
        raise ValueError(f"devices: expected counts in 1..64, got {devices}")
    if not (time_per_graph > 0 and math.isfinite(time_per_graph)):
        raise ValueError(f"time-per-graph: expected a positive number of seconds, "
                         f"got {time_per_graph}")
    if not (time_per_kop >= 0 and math.isfinite(time_per_kop)):
        raise ValueError(f"time-per-kop: expected a non-negative number of seconds, "
                         f"got {time_per_kop}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers: expected a positive count, got {workers}")
    files = _graph_files(graphs)
    store = Store(store_path, write=True)  # its lock: a second build is refused before any work
    try:
        wanted = None if beaten_by is None else beaten_keys(beaten_by, store)
        summary = BuildSummary()
        began = time.perf_counter()
        pending = []  # (job key, path, name, d, limit) still owed time
        for path in files:
            graph = load_graph(path)
            fingerprint = graph.fingerprint()
            for d in devices:
                limit = memory_limit(path, d) if callable(memory_limit) else memory_limit
                key = entry_key(fingerprint, d, limit, objective)
                limit = key[2]            # per-device bytes (or None), as the job takes them
                summary.keys += 1
                if wanted is not None and key not in wanted and key in store.best:
                    summary.not_beaten += 1
                    continue
                owed = (time_per_graph + time_per_kop * graph.num_nodes / 1000.0
                        - (0.0 if extra else store.effort.get(key, 0.0)))
                if owed < 1.0:
                    summary.skipped += 1
                    continue
                pending.append([key, str(path), path.stem, d, limit, owed])
    except BaseException:
        store.close()
        raise
    total_owed = sum(p[5] for p in pending)
    bar = None
    if progress and pending:
        from tqdm import tqdm
        bar = tqdm(total=round(total_owed), unit="s", desc="best-known", leave=False)

    def next_job(item) -> _Job:
        key, path, name, d, limit, owed = item
        chunk = min(owed, _CHUNK_SECONDS)
        item[5] -= chunk
        return _Job(path, name, d, limit, objective, chunk, seed + int(store.effort.get(key, 0)),
                    store.effort.get(key, 0.0))

    before = {p[0]: (store.best[p[0]].value if p[0] in store.best else None) for p in pending}

    def finish(item, result) -> None:
        key = item[0]
        if result["entry"] is not None and store.offer(result["entry"]):
            summary.improved += 1
        store.offer_bound(key, result.get("bound"))  # no higher than the stored one: no line
        store.add_effort(key, result["seconds"])
        summary.chunks += 1
        if bar is not None:
            bar.update(round(result["seconds"]))
        if on_chunk is not None:
            on_chunk({"graph": item[2], "devices": item[3], **result})

    try:
        ray = ray and workers != 1  # one worker: in this process
        with Workers(workers, jobs=None if ray else len(pending), ray=ray) as pool:
            _schedule(pending, next_job, finish, store, pool)
    finally:
        if bar is not None:
            bar.close()
        store.close()
    for item in pending:
        entry = store.get(item[0])
        summary.rows.append((item[2], item[3], before[item[0]],
                             None if entry is None else entry.value,
                             None if entry is None else entry.bound))
    summary.seconds = time.perf_counter() - began
    return summary


def _schedule(pending, next_job, finish, store, workers) -> None:
    """Keeps a chunk running per worker, one per key at a time (a key's next chunk starts
    from the best its previous chunk stored); in this process, a key's chunks one by one."""
    busy = set()  # id() of the items with a chunk running

    def start():
        for item in pending:
            if item[5] >= 1.0 and id(item) not in busy:
                busy.add(id(item))
                return item, _run_job, next_job(item), store.get(item[0])
        return None

    def done(item, get) -> None:
        busy.discard(id(item))
        finish(item, get())

    workers.run(start, done)
