"""Graph files: `load_graph` / `save_graph` choose the format by the file's suffix.

| suffix   | format                                              | module               |
| -------- | --------------------------------------------------- | -------------------- |
| `.pbtxt` | TensorFlow CostGraphDef, protobuf text (REGAL set)  | `regal.io.costgraph` |
| `.pb`    | TensorFlow CostGraphDef, protobuf binary            | `regal.io.costgraph` |
| `.npz`   | the project's own fast format (numpy arrays)        | `regal.io.native`    |

Nothing here imports TensorFlow: the readers use the `protobuf` package with a
message definition of their own. The TensorFlow importer (`regal.io.tensorflow`)
is imported only by the commands that need it; `regal.io.sources` tells a graph file
from a model (a GraphDef `.pb` is a model) and reads either. Submodules are imported
on first use, so `import regal.io` stays cheap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from regal.files import write_bytes as atomic_write_bytes  # noqa: F401  (the one writer)
from regal.graph import ComputationGraph

__all__ = ["load_graph", "save_graph", "SUFFIXES", "atomic_write_bytes", "check_regular_file"]

SUFFIXES = (".pbtxt", ".pb", ".npz")


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES and path.is_dir():
        raise ValueError(f"{path}: a folder, not a graph file ({', '.join(SUFFIXES)})")
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: unknown graph file suffix {path.suffix or '(none)'!r}; "
                         f"supported: {', '.join(SUFFIXES)}")
    return suffix


def load_graph(path: str | os.PathLike) -> ComputationGraph:
    """Reads a graph file; raises GraphError (bad content), FileNotFoundError or ValueError."""
    path = Path(path)
    suffix = _suffix(path)
    check_regular_file(path, "graph file")
    if suffix == ".npz":
        from regal.io.native import read_native
        return read_native(path)
    from regal.graph import GraphError
    from regal.io import costgraph
    try:
        if suffix == ".pbtxt":
            return costgraph.read_costgraph_text(path)
        return costgraph.read_costgraph_bytes(path)
    except GraphError:
        from regal.io.sources import is_graph_def
        if is_graph_def(path):
            raise ValueError(f"{path}: a TensorFlow GraphDef (a model), not a CostGraphDef; "
                             f"`regal optimize` and `regal import` read it") from None
        raise


def check_regular_file(path: str | os.PathLike, what: str = "file") -> None:
    """Refuses, before anything opens it, a path that is not a regular file: reading a
    named pipe blocks forever, a device may never end, a folder cannot be parsed."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, f"{os.strerror(errno.EISDIR)}; expected a "
                                f"{what}", str(path))
    if not stat.S_ISREG(mode):
        kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "an unknown kind")
        raise ValueError(f"{path}: is {kind}, not a regular file; expected a {what}")


def save_graph(graph: ComputationGraph, path: str | os.PathLike) -> None:
    """Writes `graph` atomically in the format named by the suffix (`.npz` is compressed,
    and keeps everything; a CostGraphDef keeps no colocation groups, pins nor FLOP counts,
    so saving a graph that has them there warns, naming what is dropped)."""
    path = Path(path)
    suffix = _suffix(path)
    if suffix == ".npz":
        from regal.io.native import write_native
        write_native(graph, path)
        return
    dropped = [what for what, has in (("colocation groups", graph.has_groups),
                                      ("pins", graph.has_pins),
                                      ("FLOP and byte counts", graph.op_flops is not None))
               if has]
    if dropped:
        import warnings
        warnings.warn(f"{path}: a CostGraphDef keeps no {' or '.join(dropped)}; they are "
                      f"dropped (.npz keeps them)", stacklevel=2)
    from regal.io import costgraph
    if suffix == ".pbtxt":
        costgraph.write_costgraph_text(graph, path)
    else:
        costgraph.write_costgraph_bytes(graph, path)
