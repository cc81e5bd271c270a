"""From a solution record to the placed step: every op's device (its colocation group kept
together), each device's run order as the simulator ran it, the GraphDef with both set; and
importing such a GraphDef into a fresh TensorFlow graph with values for its variables."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import tensorflow as tf  # loaded by regal.measure's __init__, quietly and with Keras 2

from regal.graph import ComputationGraph, GraphError, group_leaders
from regal.io.solution import check_solution_record, read_solution_file, solution_devices
from regal.io.tensorflow import ImportedStep, colocation_pairs
from regal.sim import DeviceSpec, trace

__all__ = ["PlacedStep", "load_solution_record", "check_solution", "place", "placed_graph_def",
           "device_name"]

_RECV_OPS = {"_Recv", "_HostRecv"}
_SEND_OPS = {"_Send", "_HostSend"}
_UNCHAINED = {"VarHandleOp", "VariableV2", "Variable", "Placeholder"}


def device_name(kind: str, k: int, device_format: str | None = None) -> str:
    """Device string of solution device `k`: '/device:CPU:1', or `device_format` with {k}."""
    return (device_format or f"/device:{kind.upper()}:{{k}}").format(k=k)


# ---------------------------------------------------------------------------
# solutions


def load_solution_record(solution) -> dict:
    """A solution.json path or an already-loaded record -> the record, checked field by
    field (`regal.io.solution`): a hand-edited file is a ValueError naming the file, the
    op by name and the field, never a traceback or a silent cast."""
    if isinstance(solution, (str, os.PathLike)):
        return read_solution_file(solution)
    check_solution_record(solution)
    return solution


def check_solution(record: dict, graph: ComputationGraph, devices: int | None = None) -> None:
    """Raises ValueError naming the mismatch between a solution record and the graph."""
    check_solution_record(record)
    want = record["graph"]["fingerprint"]
    have = graph.fingerprint()
    # a solution made with --pin/--colocate keys on the constrained graph and records the
    # graph as imported beside it: the model imports as that one, and the placement keeps
    # the imported groups (the user's constraints only add to them)
    if have == record["graph"].get("imported_fingerprint"):
        want = have
    if want != have:
        source = record["graph"].get("source") or "?"
        raise ValueError(f"solution: graph fingerprint mismatch: the solution is for "
                         f"{want} ({record['graph'].get('ops')} ops, from {source}), "
                         f"the model imports as {have} ({graph.num_nodes} ops); import with "
                         f"the same batch size, --training and --loss as the solved graph")
    ops = record["ops"]
    missing = [name for name in graph.names.tolist() if name not in ops]
    if missing:
        raise ValueError(f"solution: {len(missing)} ops of the graph have no entry, e.g. "
                         f"{missing[0]!r}")
    count = record["devices"]["count"]
    used = max(ops[name]["device"] for name in graph.names.tolist()) + 1
    if devices is not None and max(count, used) > devices:
        raise ValueError(f"devices: the solution uses {max(count, used)} devices, only "
                         f"{devices} requested/available")


# ---------------------------------------------------------------------------
# placement: colocation, order, GraphDef


@dataclass
class PlacedStep:
    """A solution applied to an imported step (arrays indexed like graph.names)."""

    step: ImportedStep
    devices: DeviceSpec
    placement: np.ndarray           # applied device of every op
    priority: np.ndarray
    transfer_priority: np.ndarray
    order: list                     # per device: op ids in run order
    moved: dict                     # op name -> (solution device, applied device)
    solution_peak: np.ndarray       # the peaks the solution record claims

    @property
    def graph(self) -> ComputationGraph:
        return self.step.graph


def _colocation_groups(ops: list) -> np.ndarray:
    """Group leader of every op, by the importer's rules (`colocation_pairs`): the groups
    TensorFlow's placer forces, the same ones the imported graph's `colocation` holds."""
    return group_leaders(len(ops), colocation_pairs(ops))


def _run_order(graph: ComputationGraph, devices: DeviceSpec, placement, priority,
               transfer) -> list:
    """Per device, op ids sorted by (simulated start, topological rank).

    Start times never decrease along an edge and a tie means zero-cost ops, which the
    topological rank orders, so chaining consecutive ops in this order adds no cycle.
    """
    tr = trace(graph, devices, placement, priority, transfer)
    rank = np.empty(graph.num_nodes, dtype=np.int64)
    rank[graph.topo_order] = np.arange(graph.num_nodes)
    order = np.lexsort((rank, tr.op_start))
    return [order[placement[order] == k] for k in range(devices.count)]


def place(step: ImportedStep, record: dict, devices: int | None = None) -> PlacedStep:
    """Checks `record` against the step's graph and resolves the placement TF will run."""
    graph = step.graph
    if [op.name for op in step.ops] != graph.names.tolist():
        raise GraphError("internal: imported ops and graph nodes differ in order")
    check_solution(record, graph, devices)
    rows = [record["ops"][name] for name in graph.names.tolist()]
    wanted = np.array([int(r["device"]) for r in rows], dtype=np.int32)
    priority = np.array([float(r["priority"]) for r in rows])
    transfer = np.array([float(r["transfer_priority"]) for r in rows])
    # the record's links and speeds (speeds resized when run on another device count)
    device_spec = solution_devices(record, devices)
    roots = _colocation_groups(step.ops)
    placement = wanted.copy()
    groups: dict[int, list[int]] = {}
    for v, r in enumerate(roots):
        groups.setdefault(r, []).append(v)
    moved = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        pers = graph.persistent_memory[members]
        owner = members[int(np.argmax(pers))] if pers.max() > 0 else members[0]
        for v in members:
            if placement[v] != wanted[owner]:
                moved[str(graph.names[v])] = (int(wanted[v]), int(wanted[owner]))
            placement[v] = wanted[owner]
    order = _run_order(graph, device_spec, placement, priority, transfer)
    claim = np.asarray(record.get("result", {}).get("peak", []), dtype=np.int64)
    return PlacedStep(step, device_spec, placement, priority, transfer, order, moved, claim)


def placed_graph_def(placed: PlacedStep | ImportedStep, kind: str = "CPU",
                     device_format: str | None = None):
    """The step's GraphDef: devices set and each device's order chained by control edges.

    Given a bare ImportedStep: the same ops with no devices and no added edges (reference).
    """
    step = placed.step if isinstance(placed, PlacedStep) else placed
    keep = set(step.graph.names.tolist())
    source = step.tf_graph.as_graph_def()
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(source.versions)
    out.library.CopyFrom(source.library)
    nodes = {}
    for node in source.node:
        if node.name in keep:
            copy = out.node.add()
            copy.CopyFrom(node)
            copy.device = ""
            nodes[node.name] = copy
    if isinstance(placed, PlacedStep):
        names = step.graph.names
        for v, name in enumerate(names.tolist()):
            nodes[name].device = device_name(kind, int(placed.placement[v]), device_format)
        for ops in placed.order:
            # sources that TF runs outside the step's order (variable handles, used by the
            # initialiser too; fed placeholders) stay unchained
            ops = [v for v in ops if step.graph.op_types[v] not in _UNCHAINED]
            for a, b in zip(ops[:-1], ops[1:]):
                node = nodes[names[b]]
                before = {i.lstrip("^").split(":")[0] for i in node.input}
                if names[a] not in before:
                    node.input.append(f"^{names[a]}")
    return out


# ---------------------------------------------------------------------------
# running


def _variable_values(graph_def, seed: int) -> dict:
    """Every variable's initial value, seeded: uniform [0, 0.05) (timings ignore values)."""
    rng = np.random.default_rng(seed)
    values = {}
    for node in graph_def.node:
        if node.op in ("VarHandleOp", "VariableV2"):
            dtype = tf.as_dtype(node.attr["dtype"].type).base_dtype
            shape = tf.TensorShape(node.attr["shape"].shape).as_list()
            values[node.name] = _random(rng, shape, dtype)
    return values


def _random(rng, shape, dtype):
    if dtype.is_floating:
        return rng.uniform(0.0, 0.05, size=shape).astype(dtype.as_numpy_dtype)
    if dtype.is_bool:
        return np.zeros(shape, dtype=bool)
    if dtype.is_integer:
        return rng.integers(0, 2, size=shape).astype(dtype.as_numpy_dtype)
    raise GraphError(f"cannot make a value of dtype {dtype.name}")


def _import_for_run(graph_def, values: dict):
    """A tf.Graph of graph_def plus one init op that assigns `values` on each variable's
    device -> (graph, init op, feed for the init op). The values are fed (placeholders),
    never written into the graph as constants: a graph's protobuf stays under 2 GB
    whatever the weights weigh."""
    g = tf.Graph()
    feed = {}
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
        inits = []
        for name, value in values.items():
            op = g.get_operation_by_name(name)
            assign, placeholder = _assign_from_placeholder(op)
            inits.append(assign)
            feed[placeholder] = value
        init = tf.group(*inits)
    return g, init, feed


def _assign_from_placeholder(op, name: str = "regal_value"):
    """For the variable op `op` (VarHandleOp or VariableV2) of the default graph: a
    placeholder of its dtype and shape, and the op that assigns it, both on its device."""
    dtype = tf.as_dtype(op.get_attr("dtype")).base_dtype
    shape = tf.TensorShape(op.get_attr("shape"))
    with tf.device(op.device):
        placeholder = tf.compat.v1.placeholder(dtype, shape, name=f"{op.name}/{name}")
        if op.type == "VarHandleOp":
            assign = tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=placeholder,
                                                 name=f"{op.name}/{name}_assign")
        else:
            assign = tf.compat.v1.assign(op.outputs[0], placeholder,
                                         name=f"{op.name}/{name}_assign").op
    return assign, placeholder
