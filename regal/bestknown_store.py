"""The best-known store's format: one JSON-lines file whose entries (`Entry`) are keyed by
(graph fingerprint, devices, memory limit, objective) (`entry_key`), reading it (`load_store`,
`read_stores`: the one reader, for reports and training too) and writing it (`Store`).

Two kinds of line:

- `"kind": "solution"`: one solution (placement, and the node / transfer priorities as dense
  integer ranks, which decode to the same schedule), its value, per-device peaks, makespan,
  how it was found, evaluations, seconds and the software version;
- `"kind": "effort"`: seconds a portfolio spent on a key, so a rerun with a larger
  `time_per_graph` only spends the difference (resume);
- `"kind": "bound"`: a valid lower bound on the key's optimum (`bound`, bytes) and the
  argument that gave it (`bound_source`, a `regal.bounds` argument name), for an entry
  stored before its bound was known (`Store.offer_bound`).

The lower bound sits beside the value: a solution line may carry `bound` and `bound_source`
too (None, or absent in lines written before bounds were stored: not known). Bounds are for
the peak-memory objective only (`regal.bounds`; a memory limit only removes placements, and
the ranking penalty of a placement over it is above its peak, so the same bound holds under
any limit); makespan entries keep None, as `regal.bounds` proves nothing about time. The
certified gap of an entry is `regal.bounds.gap_to_bound(value, bound)`.

Monotone: a solution line is appended only when it beats the key's stored value (an entry is
only ever replaced by a better one), a bound line only when it raises the key's bound, and
an entry read back carries the largest bound of its key's lines (each valid, so their max
is); a bound above the key's value is refused (one of the two would be wrong). Lines are
flushed and fsynced one by one and a torn last line is cut (`regal.files.JsonLinesWriter`),
so a killed build loses at most the chunk in flight. A writer holds the store's lock from
its start: a second build of the same store is refused at once. `compact` rewrites the file
with the best entry (its bound folded in) and the summed effort per key.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

__all__ = ["STORE_FORMAT", "Entry", "Store", "entry_key", "record_store_key", "load_store",
           "read_stores", "dense_ranks"]

STORE_FORMAT = "regal-bestknown/1"


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
    bound: float | None = None        # a valid lower bound on the key's optimum (bytes), or
    bound_source: str | None = None   # None: not known; the argument that gave it

    def gap(self) -> float | None:
        """The certified gap (value - bound) / bound: the optimum is at most that far below
        the value (`regal.bounds.gap_to_bound`); None without a bound."""
        if self.bound is None:
            return None
        from regal.bounds import gap_to_bound
        return gap_to_bound(self.value, self.bound)

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
                      seconds: float, bound=None) -> "Entry":
        """`bound`: a `regal.bounds.Bound` (or None) on the problem's optimum."""
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
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            bound=None if bound is None else float(bound.value),
            bound_source=None if bound is None else str(bound.source))


_ENTRY_FIELDS = tuple(f for f in Entry.__dataclass_fields__)
# what a solution line written by hand or by other code may leave out (None: not known); it
# needs its key's fields, value, placement, priority and transfer_priority
_LINE_DEFAULTS = dict(graph="", memory_limit=None, objective="peak_memory", peak=None,
                      makespan=None, feasible=None, found_by="", evaluations=0, seconds=0.0,
                      version="", bound=None, bound_source=None)


def _bound_of(record: dict) -> tuple[float | None, str | None]:
    """(bound, source) of a line: None for a missing or malformed bound (the line's value
    still counts)."""
    bound = record.get("bound")
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) \
            or not (math.isfinite(bound) and bound >= 0):
        return None, None
    source = record.get("bound_source")
    return float(bound), (str(source) if source is not None else "")


def _entry_from_record(record) -> Entry | None:
    """A solution line -> Entry, or None for anything else (effort lines, foreign lines)."""
    if not isinstance(record, dict) or record.get("kind", "solution") != "solution":
        return None
    try:
        fields = {**_LINE_DEFAULTS, **{k: record[k] for k in _ENTRY_FIELDS if k in record}}
        devices = fields["devices"]  # older lines: a device spec {"count": d, ...}
        fields["devices"] = int(devices["count"] if isinstance(devices, dict) else devices)
        fields.setdefault("ops", len(fields["placement"]))
        fields["bound"], fields["bound_source"] = _bound_of(record)
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


def _raise_bound(bounds: dict, key: tuple, bound: float | None, source: str | None) -> None:
    """Keeps the larger of the key's bounds (both valid); the first one on a tie."""
    if bound is not None and (key not in bounds or bound > bounds[key][0]):
        bounds[key] = (bound, source)


def _with_bound(entry: Entry, bound: tuple | None) -> Entry:
    """`entry` carrying `bound` = (value, source) where that beats its own."""
    if bound is None or bound[0] is None or (entry.bound is not None
                                             and entry.bound >= bound[0]):
        return entry
    return dataclasses.replace(entry, bound=bound[0], bound_source=bound[1])


def load_store(path) -> tuple[dict, dict]:
    """(best entry per key, seconds of effort per key) of a store file; missing file = empty.
    Each entry carries the largest bound of its key's lines (`Entry.bound`).

    Lines that are not well-formed entries are skipped (a torn tail, a foreign line); a file
    with lines but none of them the store's (another file named by mistake: compare's
    records, a text) is a ValueError, not an empty store."""
    from regal.harness import read_records

    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"best-known store {path}: not a regular file")
    best: dict[tuple, Entry] = {}
    effort: dict[tuple, float] = {}
    bounds: dict[tuple, tuple] = {}  # key -> (largest bound, its source)
    skipped: dict = {}
    records = read_records(path, skipped)
    kept = 0
    for record in records:
        if isinstance(record, dict) and record.get("kind") in ("effort", "bound"):
            try:
                key = record_store_key(record)
                if record["kind"] == "effort":
                    effort[key] = effort.get(key, 0.0) + float(record["seconds"])
                else:
                    _raise_bound(bounds, key, *_bound_of(record))
                kept += 1
            except (KeyError, TypeError, ValueError):
                pass
            continue
        entry = _entry_from_record(record)
        if entry is None:
            continue
        kept += 1
        _raise_bound(bounds, entry.key(), entry.bound, entry.bound_source)
        old = best.get(entry.key())
        if old is None or entry.value < old.value:
            best[entry.key()] = entry
    lines = len(records) + sum(count for count, _, _ in skipped.values())
    if kept == 0 and lines > 0:
        raise ValueError(f"best-known store {path}: none of its {lines} lines is a store "
                         f"entry; not a best-known store")
    return {key: _with_bound(entry, bounds.get(key)) for key, entry in best.items()}, effort


def read_stores(paths: Iterable) -> dict:
    """The best entry per key over several store files (`load_store`); ValueError naming one
    that does not exist."""
    best: dict[tuple, Entry] = {}
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"best-known store {path}: no such file")
        for key, entry in load_store(path)[0].items():
            old = best.get(key)
            if old is None or entry.value < old.value:
                best[key] = entry if old is None else \
                    _with_bound(entry, (old.bound, old.bound_source))
            else:
                best[key] = _with_bound(old, (entry.bound, entry.bound_source))
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
        """Appends `entry` if it beats the stored value of its key, with the larger of its
        bound and the stored one; True when it did. A bound it brings that does not come
        with a better value is still kept (`offer_bound`)."""
        old = self.best.get(entry.key())
        if old is not None:
            entry = _with_bound(entry, (old.bound, old.bound_source))
        _check_bound(entry.key(), entry.bound, entry.value)
        if old is not None and not entry.value < old.value:
            self.offer_bound(entry.key(), entry.bound, entry.bound_source)
            return False
        self._write({"format": STORE_FORMAT, **asdict(entry)})
        self.best[entry.key()] = entry
        return True

    def offer_bound(self, key: tuple, bound, source: str | None = None) -> bool:
        """Appends a bound line if `bound` (bytes, or a `regal.bounds.Bound` whose source is
        then taken) raises the bound of `key`'s entry; True when it did. A key without an
        entry takes no bound; a bound above its entry's value is a ValueError."""
        if bound is not None and hasattr(bound, "source"):
            bound, source = bound.value, bound.source
        entry = self.best.get(key)
        if bound is None or entry is None:
            return False
        bound = float(bound)
        if not (math.isfinite(bound) and bound >= 0):
            raise ValueError(f"best-known store {self.path}: bound {bound!r} is not a "
                             f"number of bytes")
        if entry.bound is not None and not bound > entry.bound:
            return False
        _check_bound(key, bound, entry.value)
        from regal import version
        fingerprint, devices, limit, objective = key
        source = "" if source is None else str(source)   # as the line reads back
        self._write({"format": STORE_FORMAT, "kind": "bound", "fingerprint": fingerprint,
                     "devices": devices, "memory_limit": None if limit is None else list(limit),
                     "objective": objective, "bound": bound, "bound_source": source,
                     "version": version(), "created": datetime.datetime.now(
                         datetime.timezone.utc).isoformat(timespec="seconds")})
        self.best[key] = dataclasses.replace(entry, bound=bound, bound_source=source)
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


def _check_bound(key: tuple, bound: float | None, value: float) -> None:
    """A lower bound above a value that a solution reaches: one of them is wrong."""
    if bound is not None and bound > value:
        raise ValueError(f"best-known store: lower bound {bound:.17g} above the value "
                         f"{value:.17g} of key {key}: the bound or the entry is wrong")


def _effort_record(key: tuple, seconds: float) -> dict:
    """A store line saying that `seconds` of portfolio time went to `key`."""
    fingerprint, devices, limit, objective = key
    return {"format": STORE_FORMAT, "kind": "effort", "fingerprint": fingerprint,
            "devices": devices, "memory_limit": None if limit is None else list(limit),
            "objective": objective, "seconds": round(float(seconds), 3)}
