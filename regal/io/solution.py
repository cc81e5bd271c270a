"""Reading a solution.json for `apply` and `measure`, without TensorFlow.

A solution file may have been edited by hand, so every field that applying it uses is
checked here, the same way `regal.optimizers.read_solution` checks it for the optimizers,
and a bad one is a ValueError naming the file, the op (by name) and the field: never a
TypeError, an OverflowError or a silent cast (a device 1.5 is not device 1). Nothing here
needs the graph, so `regal apply` and `regal measure` refuse a bad file before they pay
for importing TensorFlow; `regal.measure.check_solution` then matches it to the graph.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

__all__ = ["read_solution_file", "check_solution_record", "check_device_format",
           "solution_devices", "MAX_SOLUTION_DEVICES"]

MAX_SOLUTION_DEVICES = 256  # the device cap of every command (regal.harness.MAX_DEVICES)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def read_solution_file(path: str | os.PathLike) -> dict:
    """A solution.json path -> its checked record; ValueError / OSError naming the file."""
    from regal.io import check_regular_file

    path = Path(path)
    check_regular_file(path, "solution file (from regal optimize --out)")
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"solution {path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"solution {path}: not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"solution {path}: not a regal solution (nested too deeply)") from None
    check_solution_record(record, f"solution {path}")
    return record


def check_solution_record(record, label: str = "solution") -> None:
    """Raises ValueError (starting with `label`) for any field `apply`/`measure` would use
    that is missing or of the wrong kind; `label` names the file."""
    if not isinstance(record, dict) or "ops" not in record:
        raise ValueError(f"{label}: not a regal solution (expected a JSON object with 'ops')")
    about = record.get("graph")
    if not isinstance(about, dict) or not isinstance(about.get("fingerprint"), str):
        raise ValueError(f"{label}: 'graph': expected an object with the graph's fingerprint, "
                         f"got {about!r:.40}")
    devices = record.get("devices")
    count = devices.get("count") if isinstance(devices, dict) else None
    if not _is_int(count) or not 1 <= count <= MAX_SOLUTION_DEVICES:
        raise ValueError(f"{label}: 'devices': expected an object with a 'count' in "
                         f"1..{MAX_SOLUTION_DEVICES}, got {devices!r:.40}")
    for key, least, word in (("bandwidth", 0, "> 0"), ("latency", -1, ">= 0")):
        value = devices.get(key)
        if value is not None and not (_is_number(value) and value > least and value >= 0):
            raise ValueError(f"{label}: 'devices': {key!r}: expected a finite number {word} "
                             f"or null, got {value!r:.40}")
    for key, unit in (("flops", "FLOP/us"), ("memory_bandwidth", "bytes/us")):
        values = devices.get(key)  # device speeds: absent in files written before them
        if values is not None and not (isinstance(values, list) and len(values) == count
                                       and all(_is_number(x) and x > 0 for x in values)):
            raise ValueError(f"{label}: 'devices': {key!r}: expected null or a list of "
                             f"{count} finite numbers of {unit} > 0 (one per device), got "
                             f"{values!r:.60}")
    names = devices.get("presets")
    if names is not None and not (isinstance(names, list) and len(names) in (1, count)
                                  and all(isinstance(x, str) for x in names)):
        raise ValueError(f"{label}: 'devices': 'presets': expected null or a list of preset "
                         f"names, got {names!r:.60}")
    result = record.get("result", {})
    peak = result.get("peak", []) if isinstance(result, dict) else None
    if not isinstance(peak, list) or not all(_is_int(p) and 0 <= p < 2**63 for p in peak):
        raise ValueError(f"{label}: 'result': expected an object whose 'peak' lists byte "
                         f"counts, got {result!r:.40}")
    ops = record["ops"]
    if not isinstance(ops, dict):
        raise ValueError(f"{label}: 'ops': expected an object of op name -> entry, "
                         f"got {ops!r:.40}")
    for name, row in ops.items():
        check_op_entry(label, name, row, count)


def solution_devices(record: dict, count: int | None = None):
    """The `regal.sim.DeviceSpec` a checked solution record was solved for, links and speeds
    included (memory limits left out: a run measures, it does not enforce them), on `count`
    devices (default the record's; `DeviceSpec.with_count` resizes per-device speeds)."""
    from regal.sim import DeviceSpec

    spec = record.get("devices", {})
    kwargs = {k: spec[k] for k in ("bandwidth", "latency", "flops", "memory_bandwidth",
                                    "presets") if spec.get(k) is not None}
    devices = DeviceSpec(spec["count"], **kwargs)
    return devices if count is None or count == devices.count else devices.with_count(count)


def check_op_entry(label: str, name, row, count: int) -> None:
    """One op's entry of a solution file: an object with a device in 0..count-1 (a true
    integer: 1.5 or true are refused, not cast) and finite priorities; ValueError naming it."""
    if not isinstance(row, dict):
        raise ValueError(f"{label}: op {name!r}: expected an object with device, priority "
                         f"and transfer_priority, got {row!r:.40}")
    device = row.get("device")
    if not _is_int(device) or not 0 <= device < count:
        raise ValueError(f"{label}: op {name!r}: 'device': expected an integer in "
                         f"0..{count - 1}, got {device!r:.40}")
    for key in ("priority", "transfer_priority"):
        if not _is_number(row.get(key)):
            what = "missing" if key not in row else f"got {row[key]!r:.40}"
            raise ValueError(f"{label}: op {name!r}: {key!r}: expected a finite number, "
                             f"{what}")


def check_device_format(device_format: str | None, count: int) -> None:
    """--device-format must give each of the solution's `count` devices its own string: one
    without {k} put every op on one device, and other fields were tracebacks."""
    import string

    if device_format is None:
        return
    label = f"--device-format {device_format!r}"
    try:
        fields = {field for _, field, _, _ in string.Formatter().parse(device_format)
                  if field is not None}
    except ValueError as exc:  # a lone brace
        raise ValueError(f"{label}: {exc}") from None
    if fields != {"k"}:
        other = sorted(f"{{{f}}}" for f in fields - {"k"})
        raise ValueError(f"{label}: expected the field {{k}} (the solution's device number) "
                         f"and no other" + (f", got {', '.join(other)}" if other else ""))
    try:
        names = [device_format.format(k=k) for k in range(count)]
    except (ValueError, KeyError, IndexError, AttributeError) as exc:  # e.g. {k:s}, {k:{w}}
        raise ValueError(f"{label}: cannot format the device number: {exc}") from None
    first = {}
    for k, name in enumerate(names):
        if name in first:
            raise ValueError(f"{label}: devices {first[name]} and {k} both become {name!r}; "
                             f"each of the solution's {count} devices needs its own")
        first[name] = k
