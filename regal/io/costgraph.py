"""TensorFlow `CostGraphDef` (text `.pbtxt` and binary `.pb`) without TensorFlow.

The message classes come from a descriptor built here in code, with the field
numbers of `tensorflow/core/framework/cost_graph.proto`, in a private descriptor
pool (so it never clashes with TensorFlow's own classes when both are loaded).
Bytes written by TensorFlow's `cost_graph_pb2` parse here and vice versa.

Mapping to `ComputationGraph`:
- nodes in file order; `_SOURCE` and `_SINK` are dropped with every edge touching them;
- `input_info{preceding_node, preceding_port}` refers to the producer's `id` (not its
  index); `preceding_port: -1` is a control edge; `control_input` lists node ids;
- `output_info{size, alias_input_port}`: `alias_input_port` indexes `input_info` and is
  -1 for "no alias". Note proto3: a missing `alias_input_port` reads as 0 (an alias of
  input 0), as TensorFlow writes it; write `alias_input_port: -1` for a fresh tensor;
- `compute_cost` is int64 µs in the file and float64 in the graph (rounded on write).
Op types and devices are not kept (CostGraphDef has no op type field).

Memory, a known cost: the reader holds the parsed message (about 350 bytes per node) while
it builds the graph through `GraphBuilder`'s per-op Python objects, so reading peaks at about
1.8 KB per node. Measured on a 1,000,000-op chain: the 47 MB `.pb` took 1.8 GB RSS, its
172 MB `.pbtxt` 2.1 GB, and the same graph as a 10 MB `.npz` 0.5 GB. Converting once
(`regal import big.pb --out big.npz`) is the remedy; a direct-to-arrays conversion would
lower it, at the price of a second copy of the validation that `GraphBuilder` does.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, text_format

from regal.graph import ComputationGraph, GraphError
from regal.graph_builder import GraphBuilder

__all__ = [
    "CostGraphDef", "parse_costgraph_text", "parse_costgraph_bytes", "costgraph_to_graph",
    "graph_to_costgraph", "to_costgraph_text", "to_costgraph_bytes", "read_costgraph_text",
    "read_costgraph_bytes", "write_costgraph_text", "write_costgraph_bytes",
]

DROPPED_NODES = ("_SOURCE", "_SINK")
# Sizes and costs pass through float64 in build_graph: keep them exactly representable.
MAX_VALUE = 2 ** 53

# ---------------------------------------------------------------------------
# message definition (field numbers of tensorflow/core/framework/cost_graph.proto,
# tensor_shape.proto and types.proto)

_F = descriptor_pb2.FieldDescriptorProto
_DTYPES = ("INVALID FLOAT DOUBLE INT32 UINT8 INT16 INT8 STRING COMPLEX64 INT64 BOOL QINT8 QUINT8 "
           "QINT32 BFLOAT16 QINT16 QUINT16 UINT16 COMPLEX128 HALF RESOURCE VARIANT UINT32 UINT64 "
           "FLOAT8_E5M2 FLOAT8_E4M3FN FLOAT8_E4M3FNUZ FLOAT8_E4M3B11FNUZ FLOAT8_E5M2FNUZ INT4 "
           "UINT4 INT2 UINT2 FLOAT4_E2M1FN").split()


def _message(parent, name: str, fields) -> descriptor_pb2.DescriptorProto:
    msg = parent.add(name=name)
    for field_name, number, ftype, *rest in fields:
        label = _F.LABEL_REPEATED if "repeated" in rest else _F.LABEL_OPTIONAL
        f = msg.field.add(name=field_name, number=number, type=ftype, label=label)
        type_name = [r for r in rest if r.startswith(".")]
        if type_name:
            f.type_name = type_name[0]
        if "deprecated" in rest:
            f.options.deprecated = True
    return msg


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="regal/io/cost_graph.proto", package="tensorflow", syntax="proto3")
    dtype = fd.enum_type.add(name="DataType")
    for i, name in enumerate(_DTYPES):
        dtype.value.add(name=f"DT_{name}", number=i)
    for i, name in enumerate(_DTYPES[1:], start=101):
        dtype.value.add(name=f"DT_{name}_REF", number=i)

    shape = _message(fd.message_type, "TensorShapeProto", [
        ("dim", 2, _F.TYPE_MESSAGE, "repeated", ".tensorflow.TensorShapeProto.Dim"),
        ("unknown_rank", 3, _F.TYPE_BOOL),
    ])
    _message(shape.nested_type, "Dim", [("size", 1, _F.TYPE_INT64), ("name", 2, _F.TYPE_STRING)])

    cg = _message(fd.message_type, "CostGraphDef", [
        ("node", 1, _F.TYPE_MESSAGE, "repeated", ".tensorflow.CostGraphDef.Node"),
        ("cost", 2, _F.TYPE_MESSAGE, "repeated", ".tensorflow.CostGraphDef.AggregatedCost"),
    ])
    node = _message(cg.nested_type, "Node", [
        ("name", 1, _F.TYPE_STRING),
        ("device", 2, _F.TYPE_STRING),
        ("id", 3, _F.TYPE_INT32),
        ("input_info", 4, _F.TYPE_MESSAGE, "repeated", ".tensorflow.CostGraphDef.Node.InputInfo"),
        ("output_info", 5, _F.TYPE_MESSAGE, "repeated",
         ".tensorflow.CostGraphDef.Node.OutputInfo"),
        ("temporary_memory_size", 6, _F.TYPE_INT64),
        ("persistent_memory_size", 12, _F.TYPE_INT64),
        ("host_temp_memory_size", 10, _F.TYPE_INT64, "deprecated"),
        ("device_temp_memory_size", 11, _F.TYPE_INT64, "deprecated"),
        ("device_persistent_memory_size", 16, _F.TYPE_INT64, "deprecated"),
        ("compute_cost", 9, _F.TYPE_INT64),
        ("compute_time", 14, _F.TYPE_INT64),
        ("memory_time", 15, _F.TYPE_INT64),
        ("is_final", 7, _F.TYPE_BOOL),
        ("control_input", 8, _F.TYPE_INT32, "repeated"),
        ("inaccurate", 17, _F.TYPE_BOOL),
    ])
    _message(node.nested_type, "InputInfo", [
        ("preceding_node", 1, _F.TYPE_INT32), ("preceding_port", 2, _F.TYPE_INT32)])
    _message(node.nested_type, "OutputInfo", [
        ("size", 1, _F.TYPE_INT64),
        ("alias_input_port", 2, _F.TYPE_INT64),
        ("shape", 3, _F.TYPE_MESSAGE, ".tensorflow.TensorShapeProto"),
        ("dtype", 4, _F.TYPE_ENUM, ".tensorflow.DataType"),
    ])
    _message(cg.nested_type, "AggregatedCost", [
        ("cost", 1, _F.TYPE_FLOAT), ("dimension", 2, _F.TYPE_STRING)])
    return fd


FILE_DESCRIPTOR = _file_descriptor()
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(FILE_DESCRIPTOR)
CostGraphDef = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.CostGraphDef"))


# ---------------------------------------------------------------------------
# reading


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def parse_costgraph_text(text: str, source: str = "CostGraphDef text") -> ComputationGraph:
    """Parses protobuf text; `source` (a file name) prefixes every error message."""
    msg = CostGraphDef()
    try:
        with warnings.catch_warnings():  # protobuf warns on odd escapes like "\c": not our user's
            warnings.simplefilter("ignore", DeprecationWarning)
            text_format.Parse(text, msg)
    except (text_format.ParseError, message.DecodeError, ValueError, TypeError,
            RecursionError) as exc:
        raise GraphError(f"{source}: malformed CostGraphDef text: {_one_line(exc)}") from None
    return costgraph_to_graph(msg, source)


def parse_costgraph_bytes(data: bytes, source: str = "CostGraphDef bytes") -> ComputationGraph:
    """Parses a serialized CostGraphDef (what `SerializeToString` gives)."""
    msg = CostGraphDef()
    try:
        msg.ParseFromString(bytes(data))
    except (message.DecodeError, ValueError, TypeError, RecursionError) as exc:
        raise GraphError(f"{source}: malformed CostGraphDef binary: {_one_line(exc)}") from None
    return costgraph_to_graph(msg, source)


def costgraph_to_graph(msg, source: str = "CostGraphDef") -> ComputationGraph:
    """Validates a CostGraphDef message (this module's class) and builds the graph."""
    try:
        return _convert(msg)
    except GraphError as exc:
        raise GraphError(f"{source}: {exc}") from None


def _check_value(what: str, field: str, value: int) -> int:
    if value < 0:
        raise GraphError(f"{what}: {field} must be non-negative, got {value}")
    if value > MAX_VALUE:
        raise GraphError(f"{what}: {field} is too large ({value} > 2**53)")
    return value


def _convert(msg) -> ComputationGraph:
    nodes = msg.node
    if not nodes:
        raise GraphError("empty graph: the CostGraphDef has no nodes")
    # first pass: ids -> (index among kept nodes | None for dropped) and output counts
    by_id: dict[int, int | None] = {}
    name_of_id: dict[int, str] = {}
    kept = []
    for i, node in enumerate(nodes):
        nid, name = node.id, node.name
        if nid in by_id:
            raise GraphError(f"node {name!r}: duplicate id {nid} "
                             f"(also used by node {name_of_id[nid]!r})")
        name_of_id[nid] = name
        if name in DROPPED_NODES:
            by_id[nid] = None
            continue
        if not name:
            raise GraphError(f"node #{i} (id {nid}): missing name")
        by_id[nid] = len(kept)
        kept.append(node)
    if not kept:
        raise GraphError("empty graph: only _SOURCE/_SINK nodes")

    num_outputs = [len(node.output_info) for node in kept]
    b = GraphBuilder()
    for node in kept:
        what = f"node {node.name!r} (id {node.id})"
        b.add_op(node.name,
                 float(_check_value(what, "compute_cost", node.compute_cost)),
                 temporary_memory=_check_value(what, "temporary_memory_size",
                                               node.temporary_memory_size),
                 persistent_memory=_check_value(what, "persistent_memory_size",
                                                node.persistent_memory_size),
                 is_final=node.is_final)

    for v, node in enumerate(kept):
        what = f"node {node.name!r} (id {node.id})"
        port_map: list[int | None] = []   # input_info index -> builder input port (None: dropped)
        controls = []
        for k, inp in enumerate(node.input_info):
            src_id, port = inp.preceding_node, inp.preceding_port
            if src_id not in by_id:
                raise GraphError(f"{what}: input_info {k} names missing node id {src_id}")
            u = by_id[src_id]
            if u is None:
                port_map.append(None)
            elif port == -1:
                port_map.append(-1)
                controls.append(u)
            elif not 0 <= port < num_outputs[u]:
                raise GraphError(f"{what}: input_info {k} names output port {port} of node "
                                 f"{kept[u].name!r} (id {src_id}), which has {num_outputs[u]} "
                                 f"output(s)")
            else:
                port_map.append(b.add_input(v, u, port))
        for k, src_id in enumerate(node.control_input):
            if src_id not in by_id:
                raise GraphError(f"{what}: control_input {k} names missing node id {src_id}")
            if by_id[src_id] is not None:
                controls.append(by_id[src_id])
        for u in controls:
            b.add_control(u, v)
        for k, out in enumerate(node.output_info):
            size = _check_value(f"{what}: output_info {k}", "size", out.size)
            alias = out.alias_input_port
            if alias == -1:
                b.add_output(v, size)
                continue
            if not 0 <= alias < len(port_map):
                raise GraphError(f"{what}: output_info {k} has alias_input_port {alias}, but the "
                                 f"node has {len(port_map)} input(s) (a missing "
                                 f"alias_input_port reads as 0; write -1 for no alias)")
            port = port_map[alias]
            if port == -1:
                raise GraphError(f"{what}: output_info {k} aliases input_info {alias}, "
                                 f"which is a control edge")
            b.add_output(v, size, -1 if port is None else port)
    return b.build()


def read_costgraph_text(path: str | os.PathLike) -> ComputationGraph:
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GraphError(f"{path}: not UTF-8 text at byte {exc.start}") from None
    return parse_costgraph_text(text, str(path))


def read_costgraph_bytes(path: str | os.PathLike) -> ComputationGraph:
    path = Path(path)
    return parse_costgraph_bytes(path.read_bytes(), str(path))


# ---------------------------------------------------------------------------
# writing


def graph_to_costgraph(graph: ComputationGraph):
    """The graph as a CostGraphDef message; node ids are op indices, no _SOURCE/_SINK."""
    names = graph.names.tolist()
    reserved = [name for name in names if name in DROPPED_NODES]
    if reserved:
        raise GraphError(f"op name {reserved[0]!r} is reserved in CostGraphDef")
    cost = np.rint(graph.compute_cost).astype(np.int64).tolist()
    temp = graph.temporary_memory.tolist()
    pers = graph.persistent_memory.tolist()
    final = graph.is_final.tolist()
    producer = graph.tensor_producer.tolist()
    port_of = graph.tensor_port.tolist()
    size = graph.tensor_size.tolist()
    alias = graph.tensor_alias.tolist()
    out_ptr, in_ptr = graph.output_ptr.tolist(), graph.input_ptr.tolist()
    in_tensor = graph.input_tensor.tolist()
    c_ptr, c_pred = graph.control_ptr.tolist(), graph.control_pred.tolist()

    msg = CostGraphDef()
    for v, name in enumerate(names):
        node = msg.node.add(name=name, id=v, compute_cost=cost[v], temporary_memory_size=temp[v],
                            persistent_memory_size=pers[v], is_final=final[v])
        inputs = in_tensor[in_ptr[v]:in_ptr[v + 1]]
        for t in inputs:
            node.input_info.add(preceding_node=producer[t], preceding_port=port_of[t])
        for t in range(out_ptr[v], out_ptr[v + 1]):
            a = alias[t]
            node.output_info.add(size=size[t], alias_input_port=-1 if a < 0 else inputs.index(a))
        node.control_input.extend(c_pred[c_ptr[v]:c_ptr[v + 1]])
    return msg


def to_costgraph_text(graph: ComputationGraph) -> str:
    return text_format.MessageToString(graph_to_costgraph(graph))


def to_costgraph_bytes(graph: ComputationGraph) -> bytes:
    return graph_to_costgraph(graph).SerializeToString()


def write_costgraph_text(graph: ComputationGraph, path: str | os.PathLike) -> None:
    from regal.io import atomic_write_bytes
    atomic_write_bytes(path, to_costgraph_text(graph).encode("utf-8"))


def write_costgraph_bytes(graph: ComputationGraph, path: str | os.PathLike) -> None:
    from regal.io import atomic_write_bytes
    atomic_write_bytes(path, to_costgraph_bytes(graph))
