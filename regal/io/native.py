"""The project's own fast graph format: one `.npz` of the raw arrays `build_graph` takes.

Strings are stored as one UTF-8 blob plus byte offsets (no pickles), and the
derived adjacency is not stored: loading re-validates everything through
`build_graph`, so a corrupt or hand-edited file raises `GraphError` naming the
file rather than handing a broken graph to the simulator.

Versions: 2 added `colocation` and `pinned` (placement constraints, always written);
version 1 files, which lack them, still read, as graphs without constraints. Optional in
version 2: `op_flops` and `op_bytes` (both or neither), the cost model's counts the
TensorFlow importer keeps for device speeds; written only when the graph has them, so a
file without them (every file written before they existed) reads as a graph without counts,
and a reader that predates them skips them (they change no fingerprint).

Memory: numpy allocates what a member's `.npy` header declares before reading a byte, and a
deflated member of zeros unpacks 1000-fold, so every member is checked from its zip and `.npy`
headers before it is read (`_read_arrays`): members this format does not define are skipped
unread, whatever they hold; a known member must declare the byte size its shape and dtype
give, no more than deflate can unpack from its compressed bytes, the length its peers give
(one entry per op, tensor or control edge), and, for the string blobs and `input_tensor`,
the length the last entry of their offsets names. A file that passes holds a graph whose
arrays really are that long; it costs at most about 1,000 times the file's size.
"""

from __future__ import annotations

import io
import math
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from regal.graph import ComputationGraph, GraphError, build_graph

__all__ = ["FORMAT_VERSION", "write_native", "read_native", "graph_to_arrays", "arrays_to_graph"]

FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_KIND = {  # array -> (numpy kind letters accepted, stored dtype)
    "names_utf8": ("u", np.uint8), "names_offsets": ("iu", np.int64),
    "op_types_utf8": ("u", np.uint8), "op_types_offsets": ("iu", np.int64),
    "compute_cost": ("f", np.float64), "temporary_memory": ("iu", np.int64),
    "persistent_memory": ("iu", np.int64), "is_final": ("b", np.bool_),
    "tensor_producer": ("iu", np.int32), "tensor_size": ("iu", np.int64),
    "tensor_alias": ("i", np.int32), "input_ptr": ("iu", np.int32),
    "input_tensor": ("iu", np.int32), "control_src": ("iu", np.int32),
    "control_dst": ("iu", np.int32),
}
_KIND_V2 = {  # version 2 adds the placement constraints (version 1: none)
    "colocation": ("iu", np.int32),   # [n] leader (lowest op id) of each op's group
    "pinned": ("i", np.int32),        # [n] device of each op's group, or -1
}
_OPTIONAL = {  # version 2, present or not: the cost model's counts (both or neither)
    "op_flops": ("fiu", np.float64), "op_bytes": ("fiu", np.float64),
}
_ARRAYS = {"format_version", *_KIND, *_KIND_V2, *_OPTIONAL}  # read; any other is skipped
# entries of each fixed-length array: (what one entry stands for, entries beyond one each);
# the arrays of _SIZED_BY are as long as the last entry of their offsets array says
_COUNTS = {
    "format_version": (None, 1),
    "names_offsets": ("op", 1), "op_types_offsets": ("op", 1), "input_ptr": ("op", 1),
    "compute_cost": ("op", 0), "temporary_memory": ("op", 0), "persistent_memory": ("op", 0),
    "is_final": ("op", 0), "colocation": ("op", 0), "pinned": ("op", 0),
    "op_flops": ("op", 0), "op_bytes": ("op", 0),
    "tensor_producer": ("tensor", 0), "tensor_size": ("tensor", 0), "tensor_alias": ("tensor", 0),
    "control_src": ("control edge", 0), "control_dst": ("control edge", 0),
}
_SIZED_BY = {"names_utf8": "names_offsets", "op_types_utf8": "op_types_offsets",
             "input_tensor": "input_ptr"}
_DEFLATE_MAX_RATIO = 1032  # deflate's limit: a 258-byte match coded in 2 bits
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def _unpack_strings(field: str, blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    if (len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(blob)
            or (np.diff(offsets) < 0).any()):
        raise GraphError(f"array {field!r}: offsets do not match the string blob")
    data = blob.tobytes()
    bounds = offsets.tolist()
    try:
        if data.isascii():
            text = data.decode("ascii")
            return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return [data[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]
    except UnicodeDecodeError as exc:
        raise GraphError(f"array {field!r}: invalid UTF-8 ({exc.reason})") from None


def graph_to_arrays(graph: ComputationGraph) -> dict[str, np.ndarray]:
    """Everything `build_graph` needs, as plain arrays (plus the format version)."""
    names_utf8, names_offsets = _pack_strings(graph.names.tolist())
    types_utf8, types_offsets = _pack_strings(graph.op_types.tolist())
    n = graph.num_nodes
    counts = {} if graph.op_flops is None else {"op_flops": graph.op_flops,
                                                 "op_bytes": graph.op_bytes}
    return {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "names_utf8": names_utf8, "names_offsets": names_offsets,
        "op_types_utf8": types_utf8, "op_types_offsets": types_offsets,
        "compute_cost": graph.compute_cost, "temporary_memory": graph.temporary_memory,
        "persistent_memory": graph.persistent_memory, "is_final": graph.is_final,
        "tensor_producer": graph.tensor_producer, "tensor_size": graph.tensor_size,
        "tensor_alias": graph.tensor_alias, "input_ptr": graph.input_ptr,
        "input_tensor": graph.input_tensor,
        "control_src": graph.control_pred,
        "control_dst": np.repeat(np.arange(n, dtype=np.int32), np.diff(graph.control_ptr)),
        "colocation": graph.colocation, "pinned": graph.pinned, **counts,
    }


def arrays_to_graph(arrays) -> ComputationGraph:
    """Checks the stored arrays' presence, version and dtypes, then `build_graph`."""
    if "format_version" not in arrays:
        raise GraphError("not a REGAL graph file: no 'format_version' array")
    version = np.asarray(arrays["format_version"])
    if (version.shape != () or version.dtype.kind not in "iu"
            or int(version) not in _READABLE_VERSIONS):
        raise GraphError(f"unsupported format_version {version.tolist()!r} "
                         f"(this reader knows {', '.join(map(str, _READABLE_VERSIONS))})")
    a = {}
    optional = {f: kd for f, kd in _OPTIONAL.items() if f in arrays and int(version) >= 2}
    for field, (kinds, dtype) in {**_KIND, **(_KIND_V2 if int(version) >= 2 else {}),
                                  **optional}.items():
        if field not in arrays:
            raise GraphError(f"missing array {field!r}")
        arr = np.asarray(arrays[field])
        if arr.ndim != 1 or (arr.dtype.kind not in kinds and arr.size):
            raise GraphError(f"array {field!r}: expected a 1-D {np.dtype(dtype).name} array, "
                             f"got {arr.dtype} of shape {arr.shape}")
        if arr.dtype.kind in "iu" and arr.size and np.dtype(dtype).kind == "i":
            low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
            out = (arr > high) if arr.dtype.kind == "u" else (arr < low) | (arr > high)
            if out.any():  # a cast would wrap it into some other, valid-looking number
                i = int(np.flatnonzero(out)[0])
                raise GraphError(f"array {field!r}: entry {i} is {int(arr[i])}, outside the "
                                 f"range of {np.dtype(dtype).name}")
        # an empty array of another kind (complex, say) is just empty: no lossy cast
        a[field] = arr.astype(dtype, copy=False) if arr.size else np.zeros(0, dtype)
    names = _unpack_strings("names", a["names_utf8"], a["names_offsets"])
    op_types = _unpack_strings("op_types", a["op_types_utf8"], a["op_types_offsets"])
    return build_graph(
        names=names, op_types=op_types, compute_cost=a["compute_cost"],
        temporary_memory=a["temporary_memory"], persistent_memory=a["persistent_memory"],
        is_final=a["is_final"], tensor_producer=a["tensor_producer"],
        tensor_size=a["tensor_size"], tensor_alias=a["tensor_alias"],
        input_ptr=a["input_ptr"], input_tensor=a["input_tensor"],
        control_src=a["control_src"], control_dst=a["control_dst"],
        colocation=a.get("colocation"), pinned=a.get("pinned"),
        op_flops=a.get("op_flops"), op_bytes=a.get("op_bytes"),
    )


def to_native_bytes(graph: ComputationGraph, compressed: bool = True) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **graph_to_arrays(graph))
    return buf.getvalue()


def write_native(graph: ComputationGraph, path: str | os.PathLike, compressed: bool = True) -> None:
    """Writes atomically; compressed by default (committed graph sets must stay small)."""
    from regal.io import atomic_write_bytes
    atomic_write_bytes(path, to_native_bytes(graph, compressed))


def _entries(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """The number of entries a member's `.npy` header declares, once the zip and the header
    agree on its byte size and deflate could unpack that many bytes from the compressed ones
    (numpy allocates what the header declares before it reads a byte)."""
    where = f"member {info.filename!r}"
    if info.compress_type == zipfile.ZIP_STORED:
        most = info.compress_size
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        most = _DEFLATE_MAX_RATIO * info.compress_size
    else:
        raise GraphError(f"{where}: compression method {info.compress_type} (numpy writes "
                         f"stored or deflated members only)")
    if info.file_size > most:
        raise GraphError(f"{where}: declares {info.file_size:,} bytes, more than its "
                         f"{info.compress_size:,} compressed bytes can hold")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in _NPY_HEADERS:
            raise GraphError(f"{where}: .npy format version {version[0]}.{version[1]} "
                             f"(this reader knows 1.0 and 2.0)")
        shape, _, dtype = _NPY_HEADERS[version](member)
        header = member.tell()
    if dtype.hasobject:
        raise GraphError(f"{where}: holds Python objects (pickles are not read)")
    entries = math.prod(shape)
    if header + entries * dtype.itemsize != info.file_size:
        raise GraphError(f"{where}: its header declares shape {shape} of {dtype} "
                         f"({entries * dtype.itemsize:,} bytes) but it holds "
                         f"{info.file_size - header:,} bytes")
    return entries


def _check_counts(entries: dict[str, int]) -> None:
    """Refuses a member whose length disagrees with what its peers say the graph holds (the
    count most of them give; on a tie the smaller), before any array is read."""
    groups: dict = {}
    for name, count in entries.items():
        if name in _COUNTS:
            unit, extra = _COUNTS[name]
            groups.setdefault(unit, []).append((name, count - extra))
    for unit, members in groups.items():
        counts = [count for _, count in members]
        expected = 0 if unit is None else max(sorted(set(counts)), key=counts.count)
        for name, count in members:
            if count != expected:
                extra = _COUNTS[name][1]
                why = "a single number" if unit is None else \
                    f"one per {unit}{' plus one' if extra else ''}; the other arrays hold " \
                    f"{expected:,} {unit}s"
                raise GraphError(f"member '{name}.npy': declares {count + extra:,} entries, "
                                 f"expected {expected + extra:,} ({why})")


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of the members this format defines, each read only after its headers
    passed the checks of the module docstring; other members are never opened."""
    with open(path, "rb") as f:
        if f.read(6) == b"\x93NUMPY":
            raise GraphError("not an .npz archive (a single .npy array?)")
    with zipfile.ZipFile(path) as archive:
        members = {info.filename[:-4]: info for info in archive.infolist()
                   if info.filename.endswith(".npy") and info.filename[:-4] in _ARRAYS}
        entries = {name: _entries(archive, info) for name, info in members.items()}
        _check_counts(entries)

        def read(name: str) -> np.ndarray:
            with archive.open(members[name]) as member:
                return np.lib.format.read_array(member, allow_pickle=False)

        arrays = {name: read(name) for name in members if name not in _SIZED_BY}
        for name, bound in _SIZED_BY.items():
            if name not in members:
                continue
            offsets = arrays.get(bound)
            if (offsets is None or offsets.ndim != 1 or not offsets.size
                    or offsets.dtype.kind not in "iu"):
                arrays[name] = np.zeros(0, np.uint8)  # arrays_to_graph refuses `bound`
            elif int(offsets[-1]) != entries[name]:
                raise GraphError(f"member '{name}.npy': declares {entries[name]:,} entries "
                                 f"but {bound!r} ends at {int(offsets[-1]):,}")
            else:
                arrays[name] = read(name)
    return arrays


def read_native(path: str | os.PathLike) -> ComputationGraph:
    """Loads and validates; any corruption is a GraphError naming the file."""
    path = Path(path)
    try:
        return arrays_to_graph(_read_arrays(path))
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}") from None
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except (ValueError, OSError, EOFError, KeyError, MemoryError, struct.error, zlib.error,
            zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError) as exc:
        raise GraphError(f"{path}: corrupt graph file ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
