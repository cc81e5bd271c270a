"""The records file of an experiment (`<out>/records.jsonl`, docs/design.md §7): what a
record's key is, which records are today's code's, the check of a record read back, reading
one file or a folder of them, and the one writer. `regal.harness` runs the experiments that
write it; `regal.report` and the experiment scripts read it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping

from regal.files import JsonLinesWriter, Lock

__all__ = ["RECORDS_FILE", "KEY_FIELDS", "MAX_DEVICES", "MAX_BYTES", "record_key",
           "current_revisions", "check_record", "read_records", "load_records",
           "forget_records", "skipped_lines", "RecordWriter"]

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
_OBJECTIVES = ("peak_memory", "makespan")  # regal.optimizers.OBJECTIVES, without importing it


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


class RecordWriter(JsonLinesWriter):
    """records.jsonl's writer: one experiment at a time (`regal.files.JsonLinesWriter`)."""

    def __init__(self, path: Path):
        super().__init__(path, busy=_busy(path))
