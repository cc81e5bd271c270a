"""Runs methods x graphs x seeds x budgets x devices and stores one record per run (docs/design.md §7).

Records are JSON lines appended to `<out>/records.jsonl` (`regal.records`: keys, checks,
reading, the writer), flushed and fsynced one by one,
so a killed experiment loses at most the runs in flight; a rerun skips every key that is
already stored with status ok (a torn last line is cut off first), so it resumes and never
duplicates a finished run; a failed run (a crash, a worker that died) is tried again, and
readers keep the ok record of a key over its failed ones. Runs fan out over a local
spawn-based process pool, or over Ray when asked.
Every value is the simulator's re-score (`regal.optimizers.solve`), never the method's word.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from regal import version
# the records file is regal.records' job; its names stay reachable from here, where the
# experiments that write it have always named them
from regal.records import (KEY_FIELDS, MAX_BYTES, MAX_DEVICES, RECORDS_FILE, RecordWriter,
                           check_record, current_revisions, forget_records, load_records,
                           read_records, record_key, skipped_lines)
from regal.workers import WorkerDied, Workers

__all__ = ["GRAPH_SUFFIXES", "RECORDS_FILE", "KEY_FIELDS", "Task", "GraphEntry", "RunSummary",
           "find_graphs", "check_grid", "make_tasks", "record_key", "run_task", "read_records",
           "load_records", "run_experiment", "MAX_DEVICES", "MAX_BYTES",
           "check_record", "skipped_lines", "WorkerDied", "forget_records",
           "current_revisions"]

GRAPH_SUFFIXES = (".npz", ".pbtxt", ".pb")
MAX_SEEDS = 100_000  # seeds per grid point: the grid is built in memory before it runs


# ---------------------------------------------------------------------------
# graphs and tasks


@dataclass(frozen=True)
class GraphEntry:
    """One graph file of a dataset; the fingerprint names its content, not its path."""

    dataset: str
    name: str
    path: str
    fingerprint: str
    ops: int


@dataclass(frozen=True)
class Task:
    """One run: everything that defines its record's key."""

    method: str
    dataset: str
    graph: str
    path: str
    fingerprint: str
    ops: int
    seed: int
    budget: int
    devices: int
    memory_limit: int | None = None
    objective: str = "peak_memory"
    options: str = "{}"  # canonical JSON of the method's keyword options
    revision: str = ""    # the method's code revision (`regal.optimizers.REVISIONS`)

    def key(self) -> tuple:
        """Its record's key (`record_key`)."""
        return record_key(vars(self))


def _dataset_dirs(graphs) -> dict[str, Path]:
    """A folder, a list of folders (dataset = folder name) or {dataset: folder}."""
    if isinstance(graphs, (str, os.PathLike)):
        graphs = [graphs]
    if isinstance(graphs, Mapping):
        pairs = [(str(name), Path(folder)) for name, folder in graphs.items()]
    else:
        pairs = [(Path(folder).resolve().name, Path(folder)) for folder in graphs]
    if not pairs:
        raise ValueError("graphs: expected at least one graph folder")
    out: dict[str, Path] = {}
    for name, folder in pairs:
        if not folder.is_dir():
            raise ValueError(f"graphs: {folder} is not a folder of graph files")
        if name in out and out[name].resolve() != folder.resolve():
            raise ValueError(f"graphs: two folders named {name!r} ({out[name]}, {folder}); "
                             "a folder's name is its dataset's, so rename one (from Python, "
                             "{dataset: folder} names them)")
        out[name] = folder
    return out


def find_graphs(graphs, limit: int | None = None) -> list[GraphEntry]:
    """The graph files of each dataset folder (sorted by name, the first `limit` of each)."""
    from regal.io import load_graph

    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive number of graphs, got {limit}")
    entries = []
    for dataset, folder in _dataset_dirs(graphs).items():
        files = sorted(p for p in folder.iterdir()
                       if p.is_file() and p.suffix.lower() in GRAPH_SUFFIXES)
        if not files:
            raise ValueError(f"graphs: {folder} holds no graph files "
                             f"({', '.join(GRAPH_SUFFIXES)})")
        for path in files[:limit]:
            graph = load_graph(path)
            entries.append(GraphEntry(dataset, path.stem, str(path), graph.fingerprint(),
                                      graph.num_nodes))
    return entries


def _as_list(values, what: str) -> list:
    if values is None or isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        values = [values]
    values = list(values)
    if not values:
        raise ValueError(f"{what}: expected at least one value")
    return values


def _positive_ints(values, what: str) -> list[int]:
    out = []
    for value in _as_list(values, what):
        if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 1:
            raise ValueError(f"{what}: expected an integer >= 1, got {value!r}")
        out.append(int(value))
    return out


def check_grid(methods, *, seeds=3, budgets=5000, devices=2, objectives="peak_memory",
               memory_limits=None, method_options=None) -> dict:
    """Checks and normalises the grid's axes; raises ValueError naming the bad argument.

    `seeds` is a count (seeds 0..seeds-1) or a list of seeds.
    """
    from regal import optimizers

    methods = [str(m) for m in _as_list(methods, "methods")]
    for name in methods:
        optimizers.get_method(name)  # unknown or unimportable: ValueError naming it
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods: {methods} names a method twice")
    budgets = _positive_ints(budgets, "budget")
    devices = _positive_ints(devices, "devices")
    if max(devices) > MAX_DEVICES:
        raise ValueError(f"devices: at most {MAX_DEVICES} devices, got {max(devices)}")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive count, got {seeds}")
        if seeds > MAX_SEEDS:
            raise ValueError(f"seeds: at most {MAX_SEEDS} seeds per run, got {seeds}")
        seeds = list(range(seeds))
    seeds = _as_list(seeds, "seeds")
    if any(isinstance(s, bool) or not hasattr(s, "__index__") or int(s) < 0 for s in seeds):
        raise ValueError(f"seeds: expected non-negative integers, got {seeds}")
    seeds = [int(s) for s in seeds]
    objectives = [str(o) for o in _as_list(objectives, "objective")]
    for objective in objectives:
        if objective not in optimizers.OBJECTIVES:
            raise ValueError(f"objective: expected one of {', '.join(optimizers.OBJECTIVES)}, "
                             f"got {objective!r}")
    # a callable gives each graph its own limit (`limit_of(path, devices)`), e.g. a share
    # above its best-known peak: one absolute limit is loose for some graphs of a split and
    # infeasible for others
    limits = memory_limits if callable(memory_limits) else \
        [_checked_limit(limit) for limit in _as_list(memory_limits, "memory_limit")]
    method_options = dict(method_options or {})
    for name, options in method_options.items():
        if name not in methods:
            raise ValueError(f"method_options: {name!r} is not one of the methods run")
        if not isinstance(options, Mapping):
            raise ValueError(f"method_options: {name!r}: expected a dict of keyword options")
        optimizers.check_options(name, options)  # before any run, not one failure per run
    return dict(methods=methods, seeds=seeds, budgets=budgets, devices=devices,
                objectives=objectives, memory_limits=limits, method_options=method_options)


def _checked_limit(limit, where: str = "") -> int | None:
    if limit is not None and (isinstance(limit, bool) or not hasattr(limit, "__index__")
                              or not 0 <= int(limit) <= MAX_BYTES):
        raise ValueError(f"memory_limit{where}: expected whole bytes in 0..2**62 or None, "
                         f"got {limit!r}")
    return None if limit is None else int(limit)


def make_tasks(methods: Sequence[str], entries: Sequence[GraphEntry], **grid) -> list[Task]:
    """The full grid (see `check_grid` for the axes), checked before anything runs.

    `memory_limits` may be a callable `(graph path, devices) -> bytes or None`: one limit
    per graph and device count instead of a grid axis."""
    g = check_grid(methods, **grid)
    if not entries:
        raise ValueError("graphs: no graphs to run")
    limit_of = g["memory_limits"] if callable(g["memory_limits"]) else None
    from regal.optimizers import method_revision
    tasks = []
    for entry in entries:
        limits = {d: g["memory_limits"] if limit_of is None else
                  [_checked_limit(limit_of(entry.path, d), f" of {entry.name} at {d} devices")]
                  for d in g["devices"]}
        for method in g["methods"]:
            options = json.dumps(g["method_options"].get(method, {}), sort_keys=True)
            for d in g["devices"]:
                for objective in g["objectives"]:
                    for limit in limits[d]:
                        for budget in g["budgets"]:
                            for seed in g["seeds"]:
                                tasks.append(Task(method, entry.dataset, entry.name, entry.path,
                                                  entry.fingerprint, entry.ops, seed, budget, d,
                                                  limit, objective, options,
                                                  method_revision(method, limit)))
    return tasks


# ---------------------------------------------------------------------------
# one run


def _time_limit(options: dict, extra: dict):
    for source in (extra, options):
        for name in ("time_limit", "time_limit_s", "wall_clock_limit"):
            if source.get(name) is not None:
                return float(source[name])
    return None


def run_task(task: Task, graph=None, method=None) -> dict:
    """Runs one task and returns its record; any exception becomes a `failed` record.

    `method` (a registry entry) lets a worker process run a method that was registered at
    run time in the parent and is unknown to a fresh interpreter.
    """
    from regal import optimizers
    from regal.sim import DeviceSpec

    if method is not None:
        optimizers.METHODS.setdefault(task.method, method)

    record = asdict(task)
    record.pop("path")
    record.update(graph_path=task.path, version=version(), host=socket.gethostname(),
                  pid=os.getpid(), started=time.time())
    options = json.loads(task.options)
    start = time.perf_counter()
    try:
        if graph is None:
            from regal.io import load_graph
            graph = load_graph(task.path)
        if graph.fingerprint() != task.fingerprint:
            raise ValueError(f"graph {task.path} changed since the experiment was planned")
        problem = optimizers.Problem(graph, DeviceSpec(task.devices, task.memory_limit),
                                     task.objective)
        solution = optimizers.solve(task.method, problem, task.budget, task.seed, **options)
        record.update(status="ok", error=None, value=float(solution.value),
                      peak=[int(p) for p in solution.peak], makespan=float(solution.makespan),
                      feasible=bool(solution.feasible), overflow=int(solution.overflow),
                      evaluations=int(solution.evaluations),
                      method_wall_time=float(solution.wall_time),
                      time_limit=_time_limit(options, solution.extra))
        if "reported_value" in solution.extra:
            record["reported_value"] = solution.extra["reported_value"]
        record["extra"] = kept_extra(solution.extra)
    except Exception as exc:  # a crash on one graph must not stop the experiment
        record.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc(limit=8), value=None, peak=None,
                      makespan=None, feasible=None, overflow=None, evaluations=None,
                      method_wall_time=None, time_limit=_time_limit(options, {}))
    record["wall_time"] = time.perf_counter() - start
    return record


# the longest JSON text of one `Solution.extra` entry a record keeps: the race's winner, the
# value before the climbs, the reference's value and source, phase times and solver
# statuses are short; BRKGA's per-generation history is not
EXTRA_CHARS = 200


def kept_extra(extra: dict) -> dict:
    """The entries of a method's `Solution.extra` that a record keeps, so that results can
    say which climb won, what BRKGA's best was before the climbs or how long the policy
    took: every entry whose JSON text is at most `EXTRA_CHARS` long."""
    from regal.files import json_text

    kept = {}
    for name, value in extra.items():
        try:
            text = json_text(value)
        except (TypeError, ValueError):  # not JSON (an object): not a result
            continue
        if len(text) <= EXTRA_CHARS:
            kept[str(name)] = value
    return kept


def _portable_entries(methods) -> dict:
    """Registry entries that can travel to worker processes (pickle by reference)."""
    import pickle

    from regal import optimizers

    out = {}
    for name in methods:
        entry = optimizers.METHODS.get(name)
        try:
            pickle.dumps(entry)
        except Exception:
            entry = None  # a lambda or closure: the worker must know the name itself
        out[name] = entry
    return out


# ---------------------------------------------------------------------------
# executors


def _run_tasks(tasks, graphs, write, workers: Workers, entries: dict) -> None:
    """Runs `tasks` on `workers` and writes each record as its run ends; a local pool keeps
    two runs per process queued (busy without queueing every graph's arrays), Ray gets all.
    Each graph travels once to Ray (`Workers.put`)."""
    graphs = {fp: workers.put(graph) for fp, graph in graphs.items()}
    queue = iter(tasks)

    def start():
        task = next(queue, None)
        return None if task is None else (task, run_task, task, graphs[task.fingerprint],
                                          entries.get(task.method))

    def finish(task, get) -> None:
        try:
            record = get()
        except WorkerDied as died:
            raise WorkerDied(
                f"a worker process died (killed, or out of memory) with "
                f"{len(died.in_flight)} run{'s' * (len(died.in_flight) != 1)} in flight, e.g. "
                f"{task.method} on {task.graph} seed {task.seed} ({task.devices} "
                f"devices, budget {task.budget}); the records written so far are "
                f"kept: rerun the same command to resume") from None
        except Exception as exc:  # the result did not travel back (pickling; Ray: a dead worker)
            record = run_task_failed(task, exc)
        write(record)

    workers.run(start, finish, window=len(tasks) if workers.ray else 2 * workers.count)


def run_task_failed(task: Task, exc: BaseException) -> dict:
    """A failed record for a run whose worker died before it could report."""
    record = asdict(task)
    record.pop("path")
    record.update(graph_path=task.path, version=version(), status="failed",
                  error=f"worker died: {type(exc).__name__}: {exc}", value=None, peak=None,
                  makespan=None, feasible=None, overflow=None, evaluations=None,
                  method_wall_time=None, time_limit=None, wall_time=None)
    return record


# ---------------------------------------------------------------------------
# the experiment


@dataclass
class RunSummary:
    path: str
    total: int
    skipped: int
    ran: int = 0
    failed: int = 0
    failures: list = field(default_factory=list)  # (method, graph, error) of new failures
    skipped_lines: list = field(default_factory=list)  # sentences: unusable lines left out


def run_experiment(methods: Sequence[str], graphs, out, *, seeds=3, budgets=5000, devices=2,
                   objectives="peak_memory", memory_limits=None,
                   method_options: Mapping[str, dict] | None = None, limit: int | None = None,
                   workers: int | None = None, ray: bool = False, ray_address: str | None = None,
                   progress: bool = True) -> RunSummary:
    """Runs every (method, graph, seed, budget, devices, objective, memory limit) not yet in
    `out/records.jsonl` and appends its record. Returns counts of what ran and was skipped.

    `graphs`: a folder, several folders (dataset = folder name) or {dataset: folder}.
    `workers`: processes (or Ray CPUs); 1 runs in this process; default: every core.
    """
    from tqdm import tqdm

    from regal.io import load_graph

    grid = dict(seeds=seeds, budgets=budgets, devices=devices, objectives=objectives,
                memory_limits=memory_limits, method_options=method_options)
    check_grid(methods, **grid)  # bad arguments fail before any graph is read
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise ValueError(f"workers: expected a positive count, got {workers!r}")
    entries = find_graphs(graphs, limit)
    tasks = make_tasks(methods, entries, **grid)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {out} is a file, expected a folder")
    path = out / RECORDS_FILE
    writer = RecordWriter(path)
    try:
        unusable: dict = {}  # a garbled line's run is simply run again, and a failed one
        done = {record_key(r) for r in read_records(path, unusable, check=True)
                if r.get("status") == "ok"}
        todo = [t for t in tasks if t.key() not in done]
        summary = RunSummary(str(path), total=len(tasks), skipped=len(tasks) - len(todo),
                             skipped_lines=skipped_lines(unusable))
        graphs_by_fp = {}
        for entry in entries:
            if entry.fingerprint not in graphs_by_fp and any(
                    t.fingerprint == entry.fingerprint for t in todo):
                graphs_by_fp[entry.fingerprint] = load_graph(entry.path)
        workers = workers or os.cpu_count() or 1
        bar = tqdm(total=len(tasks), initial=summary.skipped, unit="run", desc="compare",
                   disable=not progress)

        def write(record: dict) -> None:
            writer.write(record)
            summary.ran += 1
            if record["status"] != "ok":
                summary.failed += 1
                summary.failures.append((record["method"], record["graph"], record["error"]))
                bar.write(f"failed: {record['method']} on {record['graph']} seed "
                          f"{record['seed']}: {record['error']}")
            bar.update(1)
            bar.set_postfix(failed=summary.failed, refresh=False)

        try:
            if todo:
                with Workers(workers, jobs=len(todo), ray=ray, address=ray_address) as pool:
                    _run_tasks(todo, graphs_by_fp, write, pool, _portable_entries(methods))
        finally:
            bar.close()
    finally:
        writer.close()
    return summary
