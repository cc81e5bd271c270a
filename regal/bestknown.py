"""Best-known solutions: a monotone store of the best answer long, strong runs found per graph.

Why: every quality figure ("gap from best", "headroom captured") needs a yardstick that the
runs being compared did not set themselves. The store holds, per (graph fingerprint, devices,
memory limit, objective), the best solution a portfolio of long runs ever found.

The store is one JSON-lines file. Two kinds of line:

- `"kind": "solution"`: one solution (placement, and the node / transfer priorities as dense
  integer ranks, which decode to the same schedule), its value, per-device peaks, makespan,
  how it was found, evaluations, seconds and the software version;
- `"kind": "effort"`: seconds a portfolio spent on a key, so a rerun with a larger
  `time_per_graph` only spends the difference (resume).

A solution line is appended only when it beats the key's stored value (monotone: an entry is
only ever replaced by a better one), lines are flushed and fsynced one by one and a torn last
line is cut (`regal.files.JsonLinesWriter`), so a killed build loses at most the chunk in
flight. A build holds the store's lock from its start: a second build of the same store is
refused at once. `compact` rewrites the file with the best entry and the summed effort per key.

The portfolio (`improve`) per graph: the stored best, every cheap heuristic (single device,
round robin, m-topo, gp-dfs, m-etf up to 3,000 ops), CP-SAT on graphs small enough for it,
then rounds of BRKGA with large budgets, warm-started from the incumbent and the heuristics or
restarted from scratch (every third round), each followed by a local-search polish of the
incumbent when the local search accepts a start, and by a race: seeded BRKGA with its climbs
afresh from the heuristic starts racing the one from its own best (`regal.search.pipeline`,
a new seed each round). Without the race, single 5,000-evaluation runs of that schedule beat
the store on most graphs: polishing one incumbent over and over stays in its basin, and fresh
climbs leave it. Every value is the simulator's score.

Time is CPU time of the process doing the search (`time.process_time`, every thread of it),
not wall time: on a shared, loaded machine a wall-clock budget would buy less search, and the
store's effort figures would not mean the same from one run to the next.
"""

from __future__ import annotations

import datetime
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from regal.workers import Workers

__all__ = ["STORE_FORMAT", "Entry", "Store", "entry_key", "record_store_key", "load_store",
           "read_stores", "improve", "build_store", "BuildSummary", "dense_ranks"]

STORE_FORMAT = "regal-bestknown/1"
_CHUNK_SECONDS = 120.0  # longest portfolio run between two writes (what a kill can lose)
_CPSAT_MAX_OPS = 60     # CP-SAT joins the portfolio below this many ops
_ETF_MAX_OPS = 3000     # m-ETF's time grows about quadratically: ~8 s at 2,900 ops, every chunk
_RACE_BUDGET = 5000     # evaluations of each race (the budget its schedule was tuned at)
_BRKGA_SHARE = 0.3      # of the time left, a round's BRKGA step (and its polish: of what is
_POLISH_SHARE = 0.3     # left then); the race then runs its budget, or to the deadline
_RACE_SEED = 500        # race seeds start here, apart from the seeds 0, 1, 2 that tables use
_clock = time.process_time  # the portfolio's budget is CPU seconds (see the docstring)


def entry_key(fingerprint: str, devices: int, memory_limit, objective: str) -> tuple:
    """The key of a store entry (memory_limit: None, a list of per-device bytes, or one
    number of bytes for every device, as harness records hold it)."""
    if memory_limit is None:
        limit = None
    elif np.isscalar(memory_limit):
        limit = (int(memory_limit),) * int(devices)
    else:
        limit = tuple(int(x) for x in memory_limit)
    return (str(fingerprint), int(devices), limit, str(objective))


def record_store_key(record: dict) -> tuple:
    """The store key of a line that names fingerprint, devices, memory_limit and objective: a
    harness record, or a store's own solution or effort line."""
    return entry_key(record["fingerprint"], record["devices"], record.get("memory_limit"),
                     record["objective"])


def dense_ranks(values) -> np.ndarray:
    """Order-preserving integer ranks (equal values share a rank): a priority vector's
    schedule survives, at a fraction of the JSON size of its floats."""
    _, rank = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True)
    return rank.astype(np.int64).reshape(-1)


@dataclass(frozen=True)
class Entry:
    """One best-known solution and its provenance."""

    fingerprint: str
    graph: str                 # file stem, for people (the fingerprint is the key)
    ops: int
    devices: int
    memory_limit: list | None  # per-device bytes, or None
    objective: str
    value: float
    peak: list | None          # [d] bytes (None: a line that did not say; also below)
    makespan: float | None     # µs
    feasible: bool | None
    placement: list            # [n] device
    priority: list             # [n] dense rank, higher runs first
    transfer_priority: list    # [n] dense rank
    found_by: str              # portfolio step that found it, e.g. "brkga(warm)"
    evaluations: int           # model evaluations the whole portfolio spent on this key so far
    seconds: float             # seconds the portfolio had spent on this key when it found it
    version: str
    created: str = ""
    kind: str = "solution"

    def key(self) -> tuple:
        return entry_key(self.fingerprint, self.devices, self.memory_limit, self.objective)

    def arrays(self):
        """(placement int32, priority float64, transfer float64) in [0, 1]."""
        from regal.decode import rank_normalize
        return (np.asarray(self.placement, np.int32),
                rank_normalize(np.asarray(self.priority, np.float64)),
                rank_normalize(np.asarray(self.transfer_priority, np.float64)))

    def chromosome(self) -> np.ndarray:
        from regal.decode import encode
        return encode(*self.arrays(), self.devices)

    def solution(self, problem):
        """The entry as a `Solution` re-scored on `problem` (its graph must match)."""
        from regal.optimizers import Solution, score
        if problem.graph.fingerprint() != self.fingerprint:
            raise ValueError(f"best-known entry for {self.graph}: graph fingerprint differs")
        return Solution(**score(problem, *self.arrays()), method=f"best-known:{self.found_by}",
                        evaluations=self.evaluations)

    @classmethod
    def from_solution(cls, problem, solution, *, graph: str, found_by: str, evaluations: int,
                      seconds: float) -> "Entry":
        from regal import version
        devices = problem.devices
        return cls(
            fingerprint=problem.graph.fingerprint(), graph=graph, ops=problem.graph.num_nodes,
            devices=devices.count,
            memory_limit=None if devices.memory_limit is None
            else [int(x) for x in devices.limits],
            objective=problem.objective, value=float(solution.value),
            peak=[int(x) for x in solution.peak], makespan=float(solution.makespan),
            feasible=bool(solution.feasible),
            placement=[int(x) for x in solution.placement],
            priority=dense_ranks(solution.priority).tolist(),
            transfer_priority=dense_ranks(solution.transfer_priority).tolist(),
            found_by=found_by, evaluations=int(evaluations), seconds=round(float(seconds), 3),
            version=version(),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


_ENTRY_FIELDS = tuple(f for f in Entry.__dataclass_fields__)
# what a solution line written by hand or by other code may leave out (None: not known); it
# needs its key's fields, value, placement, priority and transfer_priority
_LINE_DEFAULTS = dict(graph="", memory_limit=None, objective="peak_memory", peak=None,
                      makespan=None, feasible=None, found_by="", evaluations=0, seconds=0.0,
                      version="")


def _entry_from_record(record) -> Entry | None:
    """A solution line -> Entry, or None for anything else (effort lines, foreign lines)."""
    if not isinstance(record, dict) or record.get("kind", "solution") != "solution":
        return None
    try:
        fields = {**_LINE_DEFAULTS, **{k: record[k] for k in _ENTRY_FIELDS if k in record}}
        devices = fields["devices"]  # older lines: a device spec {"count": d, ...}
        fields["devices"] = int(devices["count"] if isinstance(devices, dict) else devices)
        fields.setdefault("ops", len(fields["placement"]))
        entry = Entry(**fields)
        n, d = int(entry.ops), entry.devices
        if (len(entry.placement) != n or len(entry.priority) != n
                or len(entry.transfer_priority) != n
                or (entry.peak is not None and len(entry.peak) != d)
                or not math.isfinite(float(entry.value))):
            return None
        return entry
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def load_store(path) -> tuple[dict, dict]:
    """(best entry per key, seconds of effort per key) of a store file; missing file = empty.

    Lines that are not well-formed entries are skipped (a torn tail, a foreign line)."""
    from regal.harness import read_records

    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"best-known store {path}: not a regular file")
    best: dict[tuple, Entry] = {}
    effort: dict[tuple, float] = {}
    for record in read_records(path):
        if isinstance(record, dict) and record.get("kind") == "effort":
            try:
                key = record_store_key(record)
                effort[key] = effort.get(key, 0.0) + float(record["seconds"])
            except (KeyError, TypeError, ValueError):
                pass
            continue
        entry = _entry_from_record(record)
        if entry is None:
            continue
        old = best.get(entry.key())
        if old is None or entry.value < old.value:
            best[entry.key()] = entry
    return best, effort


def read_stores(paths: Iterable) -> dict:
    """The best entry per key over several store files (`load_store`); ValueError naming one
    that does not exist."""
    best: dict[tuple, Entry] = {}
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"best-known store {path}: no such file")
        for key, entry in load_store(path)[0].items():
            if key not in best or entry.value < best[key].value:
                best[key] = entry
    return best


class Store:
    """A store file opened for reading and monotone appends (one writer at a time).

    `write=True` takes the store's lock before reading it (`build_store`: a second build of
    one store is refused before it does any work, not at its first write, hours later);
    otherwise the first append takes it."""

    def __init__(self, path, write: bool = False):
        self.path = Path(path)
        if self.path.suffix != ".jsonl":
            raise ValueError(f"best-known store {self.path}: expected a .jsonl file")
        self._writer = None
        if write:
            self._open_writer()
        self.best, self.effort = load_store(self.path)

    def __len__(self) -> int:
        return len(self.best)

    def get(self, key: tuple) -> Entry | None:
        return self.best.get(key)

    def value(self, fingerprint: str, devices: int, memory_limit=None,
              objective: str = "peak_memory") -> float | None:
        entry = self.best.get(entry_key(fingerprint, devices, memory_limit, objective))
        return None if entry is None else entry.value

    def _open_writer(self) -> None:
        if self._writer is None:
            from regal.files import JsonLinesWriter
            self._writer = JsonLinesWriter(
                self.path, busy=f"best-known store {self.path}: another process is writing it")

    def _write(self, record: dict) -> None:
        self._open_writer()
        self._writer.write(record)

    def offer(self, entry: Entry) -> bool:
        """Appends `entry` if it beats the stored value of its key; True when it did."""
        old = self.best.get(entry.key())
        if old is not None and not entry.value < old.value:
            return False
        self._write({"format": STORE_FORMAT, **asdict(entry)})
        self.best[entry.key()] = entry
        return True

    def add_effort(self, key: tuple, seconds: float) -> None:
        self._write(_effort_record(key, seconds))
        self.effort[key] = self.effort.get(key, 0.0) + float(seconds)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def compact(self) -> None:
        """Rewrites the file with one solution line per key (the best) and one effort line,
        under the store's lock and from what the file holds then (no other writer's line is
        lost); replaced atomically (`regal.files`), then the lock is released."""
        from regal.files import json_text, write_text

        self._open_writer()
        try:
            self.best, self.effort = load_store(self.path)
            records = [{"format": STORE_FORMAT, **asdict(self.best[key])} for key in
                       sorted(self.best, key=lambda k: (self.best[k].graph, k[1], str(k)))]
            records += [_effort_record(key, self.effort[key])
                        for key in sorted(self.effort, key=str)]
            write_text(self.path, "".join(json_text(r, sort_keys=True) + "\n" for r in records))
        finally:
            self.close()


def _effort_record(key: tuple, seconds: float) -> dict:
    """A store line saying that `seconds` of portfolio time went to `key`."""
    fingerprint, devices, limit, objective = key
    return {"format": STORE_FORMAT, "kind": "effort", "fingerprint": fingerprint,
            "devices": devices, "memory_limit": None if limit is None else list(limit),
            "objective": objective, "seconds": round(float(seconds), 3)}


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
    "evaluations" (the key's total), "improved" (beat the incumbent), "log": [step lines]}.
    """
    from regal import optimizers

    began = _clock()
    deadline = began + float(seconds)
    best = _Incumbent()
    log = []
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
            "seconds": _clock() - began}


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
    new = None
    if result["improved"]:
        new = Entry.from_solution(problem, result["solution"], graph=job.name,
                                  found_by=result["found_by"],
                                  evaluations=result["evaluations"],
                                  seconds=result["found_at"])
    return {"entry": new, "seconds": result["seconds"], "log": result["log"],
            "value": result["solution"].value}


@dataclass
class BuildSummary:
    keys: int = 0
    chunks: int = 0
    improved: int = 0
    skipped: int = 0        # keys that already had the time asked for
    not_beaten: int = 0     # keys left alone because no record beats them (`beaten_by`)
    seconds: float = 0.0
    rows: list = field(default_factory=list)  # (graph, devices, value before, value after)


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
                             None if entry is None else entry.value))
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
