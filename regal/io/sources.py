"""What the MODEL argument of `regal import` / `regal optimize` names, and reading it.

One argument names either a graph file, read without TensorFlow (`.npz`; a CostGraphDef
`.pb` / `.pbtxt`), or a model that TensorFlow imports (`regal.io.tensorflow`): a SavedModel
directory, a `.keras` / `.h5` file, a GraphDef `.pb` / `.pbtxt`, `keras.applications.NAME`
or `package.module:attr` (which imports that module and calls the attribute: the user's own
code). A Keras file whose layers carry Python code loads only with `trust_code`. A `.pb` /
`.pbtxt` is told apart by its content (`is_graph_def`), so TensorFlow is imported only when
the argument really is a model.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from regal.graph import ComputationGraph

__all__ = ["load_graph_or_model", "is_model", "is_graph_def", "MODEL_SUFFIXES"]

MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")
_APPLICATION_PREFIXES = ("keras.applications.", "tf.keras.applications.")
_MODULE_ATTR = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_KINDS = ("a graph file (.npz, CostGraphDef .pb/.pbtxt) or a model (SavedModel directory, "
          ".keras, .h5, GraphDef .pb/.pbtxt, keras.applications.NAME, package.module:attr)")


def is_model(spec: str | os.PathLike) -> bool:
    """True when `spec` names a model for TensorFlow to import, False for a graph file.

    FileNotFoundError (naming it) for a path that does not exist and is no model spec;
    ValueError for a folder that is not a SavedModel or a file of an unknown kind.
    """
    text = os.fspath(spec)
    if text.startswith(_APPLICATION_PREFIXES):
        return True
    path = Path(text)
    if not path.exists():
        if _MODULE_ATTR.fullmatch(text):
            return True
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), text)
    if path.is_dir():
        if not any((path / name).is_file() for name in ("saved_model.pb", "saved_model.pbtxt")):
            raise ValueError(f"{text}: a folder but not a SavedModel (no saved_model.pb)")
        return True
    suffix = path.suffix.lower()
    if suffix in MODEL_SUFFIXES:
        return True
    if suffix == ".npz":
        return False
    if suffix in (".pb", ".pbtxt"):
        return is_graph_def(path)
    raise ValueError(f"{text}: unknown suffix {path.suffix or '(none)'!r}; expected {_KINDS}")


def load_graph_or_model(spec: str | os.PathLike, *, batch_size: int | None = None,
                        training: bool = False, run: bool = False,
                        trust_code: bool = False, **model_options) -> ComputationGraph:
    """The graph `spec` names: a graph file as it is, or a model imported as one step.

    `batch_size` (default 1), `training`, `run` and `trust_code` are
    `regal.io.tensorflow.import_model`'s, and so are `model_options` (`loss`,
    `custom_objects`); a graph file was imported already, so giving the first three or a
    model option with one is a ValueError (a graph file holds no code to trust).
    """
    if not is_model(spec):
        if batch_size is not None or training or run or model_options:
            raise ValueError(f"{os.fspath(spec)}: a graph file, imported already; --batch, "
                             f"--training, --run, --loss, --custom-objects and --microbatches "
                             f"apply only to a model")
        from regal.io import load_graph
        return load_graph(spec)
    from regal.io.tensorflow import import_model, resolve_model
    return import_model(resolve_model(os.fspath(spec)),
                        batch_size=1 if batch_size is None else batch_size,
                        training=training, run=run, trust_code=trust_code, **model_options)


# ---------------------------------------------------------------------------
# GraphDef or CostGraphDef, by content

# field names of GraphDef / NodeDef that CostGraphDef (whose text the CostGraphDef reader
# parses strictly) does not have
_GRAPH_DEF_TEXT = re.compile(r"(?<![\w.])(?:op\s*:|(?:versions|library)\s*\{)")
_TEXT_NOISE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*')
_NODES_CHECKED = 64


def is_graph_def(path: str | os.PathLike) -> bool:
    """Whether a `.pb` / `.pbtxt` file holds a TensorFlow GraphDef (a model) rather than a
    CostGraphDef (a graph file). Only positive evidence says GraphDef, so a file of neither
    kind goes to the CostGraphDef reader, which names what is wrong with it.

    Text: a field `op:`, `versions {` or `library {` outside strings and comments (NodeDef
    always has `op`; CostGraphDef has none of them). Binary: a top-level field 3, 4 or 5
    (GraphDef's version, versions, debug_info), or a node whose field 3 is a string
    (NodeDef's input; CostGraphDef.Node's id is an integer); a node with an integer field
    (CostGraphDef's id, costs, sizes; NodeDef has none) says CostGraphDef.
    """
    path = Path(path)
    data = path.read_bytes()
    if path.suffix.lower() == ".pbtxt":
        text = _TEXT_NOISE.sub(" ", data.decode("utf-8", errors="replace"))
        return _GRAPH_DEF_TEXT.search(text) is not None
    try:
        return _binary_is_graph_def(data)
    except IndexError:  # truncated or not protobuf: the CostGraphDef reader says so
        return False


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def _fields(data: bytes, start: int, end: int):
    """(field number, wire type, payload start, payload end) of each field in data[start:end]."""
    pos = start
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = _varint(data, pos)
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:  # groups (3, 4) are in neither message; anything else is not protobuf
            raise IndexError("unexpected wire type")
        if after > end or number == 0:
            raise IndexError("truncated field")
        yield number, wire, pos, after
        pos = after


def _binary_is_graph_def(data: bytes) -> bool:
    nodes = 0
    for number, wire, start, end in _fields(data, 0, len(data)):
        if number in (3, 4, 5):
            return True
        if number == 1 and wire == 2 and nodes < _NODES_CHECKED:
            nodes += 1
            for sub, sub_wire, _, _ in _fields(data, start, end):
                if sub_wire == 0:
                    return False
                if sub == 3 and sub_wire == 2:
                    return True
    return False
