"""Static mode: the ops of a step -> ComputationGraph. One node per op, one tensor per
output of its static bytes, data and control edges in canonical order, compute costs
(`costs`, with each op's FLOP and byte counts kept for device speeds), kernel scratch (`scratch`), variables' persistent memory, TensorFlow's
colocation groups and in-place forwarding aliases (`forwarding`).

* Variables: a variable op (VarHandleOp, VariableV2) keeps its node, with a 0-byte handle
  output. Its bytes are the persistent memory of the first op (in graph order) that
  reads the handle - the forward ReadVariableOp, or for an optimizer slot the update op -
  so each variable is counted exactly once and lives where the op using it is placed.
  A ReadVariableOp's output aliases the handle: free on the reader's device, a full copy
  when sent elsewhere. Forwarding ops (Identity, Reshape, ...) alias their input likewise.
* Colocation (`colocation_pairs`): the groups TensorFlow's placer (colocation_graph.cc)
  forces on the imported ops become the graph's colocation groups, so every placement
  the optimizers produce is one TensorFlow runs as given: an op joins the producer of
  each input of resource or reference dtype (a VarHandleOp with every ReadVariableOp,
  AssignVariableOp, ResourceApply* and Identity of its handle; a VariableV2 with its
  `read` Identity and Assign/Apply ops), and every op with a `_class` attribute
  `loc:@NAME` joins NAME when NAME is imported. Function-call ops, which TF exempts from
  resource-input colocation, stay single ops here (inlined sources have none).

`measured` charges variables and colocates ops with the same two definitions.
"""

from __future__ import annotations

import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.graph import ComputationGraph, GraphError
from regal.graph_builder import GraphBuilder
from regal.io.tensorflow.costs import BYTES_PER_US, FLOPS_PER_US, LAUNCH_US, _flops
from regal.io.tensorflow.forwarding import with_forwarding
from regal.io.tensorflow.ops import (_CALL_OPS, _FORWARD_OPS, _FREE_OPS, _OPAQUE_OUTPUTS,
                                     _VARIABLE_OPS, _dims, _tensor_bytes, _variable_bytes)
from regal.io.tensorflow.scratch import _kernel_scratch


# ops TensorFlow's placer exempts from colocation with their resource inputs
# (IsExemptFromResourceInputColocation: function calls run their body's placement)
_RESOURCE_EXEMPT = _CALL_OPS | {"ReduceDataset", "ExperimentalScanDataset", "ScanDataset"}


def colocation_pairs(ops: list) -> list[tuple[int, int]]:
    """(i, j) index pairs of `ops` that TensorFlow's placer puts on one device.

    An op and the producer of each of its inputs of resource or reference dtype; an op
    and every op its `_class` attribute names as `loc:@NAME` (when NAME is in `ops`).
    `regal.graph.group_leaders` turns them into groups; the importer and `regal.measure`
    share this one definition.
    """
    index = {op.name: i for i, op in enumerate(ops)}
    pairs = []
    for i, op in enumerate(ops):
        if op.type not in _RESOURCE_EXEMPT:
            for t in op.inputs:
                resource = t.dtype == tf.resource or t.dtype._is_ref_dtype  # noqa: SLF001
                if resource and t.op.name in index:
                    pairs.append((i, index[t.op.name]))
        try:
            classes = op.get_attr("_class")
        except ValueError:
            classes = []
        for c in classes:
            name = c.decode() if isinstance(c, bytes) else str(c)
            if name.startswith("loc:@") and name[5:] in index:
                pairs.append((i, index[name[5:]]))
    return pairs


def _variable_owners(ops: list) -> dict[str, int]:
    """Op name -> bytes of the variables it owns: the first reader of each handle."""
    first_reader = {}
    for op in ops:
        for t in op.inputs:
            if t.op.type in _VARIABLE_OPS and t.op.name not in first_reader:
                first_reader[t.op.name] = op.name
    owners: dict[str, int] = {}
    for op in ops:
        if op.type in _VARIABLE_OPS:
            owner = first_reader.get(op.name, op.name)
            owners[owner] = owners.get(owner, 0) + _variable_bytes(op)
    return owners


def _static_graph(ops: list, fetches=(), *, forwarding: bool = True,
                  kernel_scratch: bool = True) -> ComputationGraph:
    builder = GraphBuilder()
    ids = {op.name: builder.add_op(op.name, 0.0, op_type=op.type) for op in ops}
    for a, b in colocation_pairs(ops):
        builder.colocate(a, b)
    costs = {}
    persistent = _variable_owners(ops)  # each variable once, on the first op reading it
    for op in ops:
        v = ids[op.name]
        sizes, out_dims = [], []
        for port, t in enumerate(op.outputs):
            size = _tensor_bytes(t)
            if size is None:
                if port in _OPAQUE_OUTPUTS.get(op.type, ()):
                    size = 0
                else:
                    raise GraphError(f"tensor {op.name}:{port} ({op.type}) has unknown shape "
                                     f"{t.shape}; set the batch size or the input shapes")
            sizes.append(size)
            out_dims.append(_dims(t.shape))
            alias = -1
            if op.type in _FORWARD_OPS and port == 0 and op.inputs:
                alias = 0
            elif op.type == "IdentityN" and port < len(op.inputs):
                alias = port
            builder.add_output(v, size, alias)
        for t in op.inputs:
            builder.add_input(v, ids[t.op.name], t.value_index)
        for c in sorted(ids[c.name] for c in op.control_inputs):  # canonical order
            builder.add_control(c, v)
        if kernel_scratch:
            builder._temp[v] = float(_kernel_scratch(op))  # noqa: SLF001
        if op.type in _FREE_OPS:
            costs[v] = 0.0
        else:
            moved = sum(sizes) + sum(_tensor_bytes(t) or 0 for t in op.inputs)
            flops = _flops(op, out_dims)
            costs[v] = LAUNCH_US + max(flops / FLOPS_PER_US, moved / BYTES_PER_US)
            builder.set_counts(v, flops, moved)  # to time it on other devices (sim.speeds)
    for name, value in persistent.items():
        builder._pers[ids[name]] = float(value)  # noqa: SLF001 - set after reader is known
    for v, c in costs.items():
        builder._cost[v] = c  # noqa: SLF001
    graph = builder.build()
    if not forwarding:
        return graph
    held = [int(graph.output_ptr[ids[t.op.name]]) + t.value_index
            for t in fetches if isinstance(t, tf.Tensor) and t.op.name in ids]
    return with_forwarding(graph, held)
