"""Runs methods x graphs x seeds x budgets x devices and stores one record per run (docs/design.md §7).

Records are JSON lines appended to `<out>/records.jsonl`, flushed and fsynced one by one,
so a killed experiment loses at most the runs in flight; a rerun skips every key that is
already stored (a torn last line is cut off first), so it resumes and never duplicates a
record. Runs fan out over a local spawn-based process pool, or over Ray when asked.
Every value is the simulator's re-score (`regal.optimizers.solve`), never the method's word.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from regal import version
from regal.files import JsonLinesWriter, Lock
from regal.workers import WorkerDied, Workers

__all__ = ["GRAPH_SUFFIXES", "RECORDS_FILE", "KEY_FIELDS", "Task", "GraphEntry", "RunSummary",
           "find_graphs", "check_grid", "make_tasks", "record_key", "run_task", "read_records",
           "load_records", "run_experiment", "MAX_DEVICES", "MAX_BYTES",
           "check_record", "skipped_lines", "WorkerDied", "forget_records",
           "current_revisions"]

GRAPH_SUFFIXES = (".npz", ".pbtxt", ".pb")
RECORDS_FILE = "records.jsonl"
KEY_FIELDS = ("method", "dataset", "graph", "fingerprint", "seed", "budget", "devices",
              "memory_limit", "objective", "options", "revision")
# a key field a record may lack (written before the field existed) and the value it means
_KEY_DEFAULTS = {"options": "{}", "revision": ""}
# Sane ceilings for what a user or a record may ask for: more devices than this is a typo
# (a device count sizes per-device arrays, so 10**9 would try to allocate hundreds of GiB),
# and a byte count above 2**62 cannot be summed in int64 without overflowing.
MAX_DEVICES = 256
MAX_BYTES = 2**62
MAX_SEEDS = 100_000  # seeds per grid point: the grid is built in memory before it runs
_OBJECTIVES = ("peak_memory", "makespan")  # regal.optimizers.OBJECTIVES, without importing it


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
                             "pass {dataset: folder} to tell them apart")
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


def _hashable(value):
    """A JSON value usable in a key (lists and objects as canonical JSON text)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def record_key(record: Mapping) -> tuple:
    """The identity of a record: a rerun with the same key is skipped."""
    return tuple(_hashable(record.get(name, _KEY_DEFAULTS.get(name))) for name in KEY_FIELDS)


def current_revisions(records: Iterable[Mapping]) -> list:
    """The records made by the code each method has now: a record of a registered method
    whose `revision` (none: "") is not the method's current one is left out. Why: a records
    file keeps the runs of earlier code, which must not be mixed into today's tables."""
    from regal.optimizers import METHODS, method_revision

    return [r for r in records if r.get("method") not in METHODS
            or r.get("revision", "") == method_revision(r["method"], r.get("memory_limit"))]


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
# records file


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A finite JSON number (JSON text may spell NaN, Infinity or 1e400, Python reads them)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def check_record(record) -> str | None:
    """Why `record` is not a compare record that the report and resume can trust, or None.

    Checks what the readers use: the key fields' types and ranges, and for an `ok` record
    a finite, non-negative value and a feasible flag that agrees with its peaks and limit.
    """
    if not isinstance(record, dict):
        kind = {type(None): "null", bool: "true/false", int: "number", float: "number",
                str: "string", list: "array"}.get(type(record), type(record).__name__)
        return f"a JSON {kind}, not an object"
    for name in ("method", "dataset", "graph", "fingerprint", "objective", "status",
                 "seed", "budget", "devices"):
        if name not in record:
            return f"no {name!r}"
    for name in ("method", "dataset", "graph", "fingerprint", "objective", "status"):
        if not isinstance(record.get(name), str):
            return f"{name!r}: expected a string, got {record.get(name)!r:.40}"
    if record["objective"] not in _OBJECTIVES:
        return f"'objective': unknown objective {record['objective']!r:.40}"
    ranges = (("seed", 0, None), ("budget", 1, None), ("devices", 1, MAX_DEVICES))
    for name, low, high in ranges:
        value = record.get(name)
        if not _is_int(value) or value < low or (high is not None and value > high):
            span = f">= {low}" if high is None else f"in {low}..{high}"
            return f"{name!r}: expected an integer {span}, got {value!r:.40}"
    limit = record.get("memory_limit")
    if limit is not None and (not _is_int(limit) or not 0 <= limit <= MAX_BYTES):
        return f"'memory_limit': expected null or bytes in 0..2**62, got {limit!r:.40}"
    options = record.get("options", "{}")
    try:
        if not isinstance(json.loads(options), dict):
            raise ValueError
    except (TypeError, ValueError, RecursionError):
        return f"'options': expected a JSON object as text, got {options!r:.40}"
    if not isinstance(record.get("revision", ""), str):
        return f"'revision': expected text, got {record['revision']!r:.40}"
    if record.get("graph_path") is not None and not isinstance(record["graph_path"], str):
        return f"'graph_path': expected a string, got {record['graph_path']!r:.40}"
    if record["status"] != "ok":
        return None
    feasible = record.get("feasible")
    if not isinstance(feasible, bool):
        return f"'feasible': expected true or false, got {feasible!r:.40}"
    value = record.get("value")
    # the makespan of a run that overflows a memory limit is infinite (docs/design.md §4: infeasible)
    if not (_is_number(value) and 0 <= value <= 2.0**64) and \
            not (value == math.inf and not feasible):
        return f"'value': expected a finite number in 0..2**64, got {value!r:.40}"
    for name in ("wall_time", "evaluations"):
        if record.get(name) is not None and not (_is_number(record[name]) and record[name] >= 0):
            return f"{name!r}: expected a finite number >= 0, got {record[name]!r:.40}"
    peak = record.get("peak")
    if peak is not None:
        if not isinstance(peak, list) or len(peak) != record["devices"] or not all(
                _is_int(p) and 0 <= p <= MAX_BYTES for p in peak):
            return f"'peak': expected {record['devices']} byte counts, got {peak!r:.40}"
        fits = limit is None or max(peak) <= limit
        if fits != feasible:
            return f"'feasible' is {feasible} but the peaks {'fit' if fits else 'exceed'} " \
                   "the memory limit"
    elif limit is None and not feasible:
        return "'feasible' is false without a memory limit"
    return None


def _json_lines(path: Path):
    """(line number, parsed value or None, why not) for every complete line of a file."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return  # torn by a kill mid-write
            line = line.strip()
            if not line:
                continue
            try:
                yield number, json.loads(line.decode("utf-8")), None
            except UnicodeDecodeError as exc:
                yield number, None, f"not UTF-8 (byte {exc.start + 1})"
            except RecursionError:
                yield number, None, "JSON nested too deeply"
            except ValueError as exc:  # JSONDecodeError, or an integer of > 4300 digits
                yield number, None, f"not JSON ({str(exc).split(':')[0]})"


def _note_skip(skipped, path, number: int, reason: str) -> None:
    """Counts one unusable line of `path` in `skipped` ({path: [count, first line, why]})."""
    if skipped is None:
        return
    entry = skipped.setdefault(str(path), [0, number, reason])
    entry[0] += 1


def skipped_lines(skipped: dict) -> list[str]:
    """One sentence per file with unusable lines (`read_records(..., skipped=)`)."""
    return [f"{path}: skipped {count} line{'s' * (count != 1)} that {'is' if count == 1 else 'are'}"
            f" not a compare record (first: line {first}: {why})"
            for path, (count, first, why) in sorted(skipped.items())]


def read_records(path, skipped: dict | None = None, check: bool = False) -> list[dict]:
    """Every complete JSON-object line of one JSON-lines file (a torn last line is ignored).

    Lines that are not UTF-8, not JSON, nested too deeply or not an object are left out
    (with `check`, also objects `check_record` rejects), counted per file in `skipped`.
    """
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        raise ValueError(f"records: {path} is not a regular file")
    records = []
    for number, record, why in _json_lines(path):
        if isinstance(record, dict) and record.get("value") == "Infinity":
            record["value"] = math.inf  # an infinite makespan, as regal.files.json_text spells it
        if why is None:
            why = check_record(record) if check else \
                (None if isinstance(record, dict) else check_record(record))
        if why is not None:
            _note_skip(skipped, path, number, why)
            continue
        records.append(record)
    return records


def forget_records(out, methods: Iterable[str]) -> int:
    """Removes the records of `methods` from `<out>/records.jsonl`, so the next run makes them
    again; returns how many were removed. Why: a record's key names the method, its options
    and its revision (`regal.optimizers.REVISIONS`), so a change of code that was not given a
    new revision would have its stored runs reused.
    Every other line is kept as it is; the file is replaced atomically, under its lock."""
    from regal.files import write_bytes

    path = Path(out) / RECORDS_FILE
    if not path.exists():
        return 0
    methods = set(methods)
    with Lock(path, _busy(path)):  # a running experiment's appends would be lost
        drop = {number for number, record, _ in _json_lines(path)
                if isinstance(record, dict) and record.get("method") in methods}
        if drop:
            with open(path, "rb") as f:       # lines as _json_lines numbers them
                lines = f.readlines()
            write_bytes(path, b"".join(line for number, line in enumerate(lines, start=1)
                                       if number not in drop))
    return len(drop)


def load_records(folder, skipped: dict | None = None) -> list[dict]:
    """All compare records under `folder` (every *.jsonl, recursively, or one file), one per
    key; lines that are not compare records (other JSON-lines files such as a training
    history or a best-known store, garbled lines) are left out and counted in `skipped`.

    Where one key appears twice (two folders merged), an `ok` record wins over a failed one.
    """
    folder = Path(folder)
    if folder.is_file():
        files = [folder]
    elif folder.is_dir():
        files = sorted(p for p in folder.rglob("*.jsonl") if p.is_file())
    elif folder.exists():
        raise ValueError(f"results: {folder} is neither a folder nor a regular file")
    else:
        raise ValueError(f"results: {folder} does not exist")
    by_key: dict[tuple, dict] = {}
    for path in files:
        for record in read_records(path, skipped, check=True):
            key = record_key(record)
            old = by_key.get(key)
            if old is None or (old.get("status") != "ok" and record.get("status") == "ok"):
                by_key[key] = record
    return list(by_key.values())


def _busy(path: Path) -> str:
    return f"out: another experiment is writing {path}"


class _RecordWriter(JsonLinesWriter):
    """records.jsonl's writer: one experiment at a time (`regal.files.JsonLinesWriter`)."""

    def __init__(self, path: Path):
        super().__init__(path, busy=_busy(path))


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
    writer = _RecordWriter(path)
    try:
        unusable: dict = {}  # a garbled line's run is simply run again
        done = {record_key(r) for r in read_records(path, unusable, check=True)}
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
