"""Apply a solution to a real TensorFlow graph, run it on several devices, measure peak memory.

`apply_solution` writes the step's GraphDef with every op's device set and each device's
order enforced by control dependencies (consecutive ops of a device, in the order the
simulator ran them), a SavedModel for Keras and SavedModel sources (with the source's
weights where it has them), and a `device_map.json` (op -> device).

`measure` runs the placed step on `D` devices and reads each device's peak memory:

* GPUs: `D` logical GPUs (split from the physical ones), each with its own BFC allocator;
  the peak is `tf.config.experimental.get_memory_info("GPU:k")["peak"]` after a reset, so it
  includes everything TensorFlow holds there (variables, constants, rounding, copies).
* CPU only: logical CPUs share one allocator, so the per-device peak is *replayed* from the
  run's step statistics: every op's output buffers (allocated bytes and pointer, so a buffer
  an op forwards is not counted twice) are allocated on its device when it starts and freed
  when its last consumer on that device finishes; a tensor received from another device is a
  copy on the receiver (allocated when its producer finishes); an op's scratch memory (its
  allocator peak beyond its new outputs) is held while it runs; variables and constants
  are held for the whole run; fetched tensors stay to the end.

Resource colocation: TensorFlow runs every op that takes a variable handle on the handle's
device (it silently overrides the requested device). The importer records these groups in
the graph (`colocation`), so every placement regal produces keeps a group together and
nothing moves. A solution that splits a group anyway (made for a graph without groups) is
applied with the group on the device where the model charges the variables' bytes (the
member with the most persistent memory); `moved` lists such ops. The simulated peaks that
`measure` compares against are those of the applied placement.

Call `configure_devices` (or `measure`, which calls it) before anything else in the process
initialises TensorFlow's devices: logical devices cannot be changed afterwards.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # no oneDNN rewrite: ops keep their names

import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402

from regal.graph import ComputationGraph, GraphError  # noqa: E402
from regal.files import write_bytes, write_json  # noqa: E402
from regal.graph import group_leaders  # noqa: E402
from regal.io.solution import (check_device_format, check_solution_record,  # noqa: E402
                               read_solution_file)
from regal.io.tensorflow import (FORWARDING_OPS, ImportedStep, colocation_pairs,  # noqa: E402,F401
                                 import_step, keras_major_version, resolve_model,
                                 with_forwarding)
from regal.sim import DeviceSpec, simulate, trace  # noqa: E402

__all__ = ["PlacedStep", "Measurement", "configure_devices", "load_solution_record",
           "check_solution", "place", "placed_graph_def", "apply_solution", "measure",
           "replay_step_stats", "device_name", "CPU_METHOD", "GPU_METHOD",
           "DEFAULT_GPU_MEMORY_MB", "with_forwarding"]

CPU_METHOD = ("CPU step-statistics replay: logical CPUs share one allocator, so each device's "
              "peak is rebuilt from the run's step stats (output bytes and pointers, op "
              "times; a tensor freed after its last consumer on that device; received "
              "tensors counted as copies on the receiver)")
GPU_METHOD = ("GPU allocator: one logical GPU per device, each with its own allocator; "
              "peak = tf.config.experimental.get_memory_info(device)['peak'] after a reset")
DEFAULT_GPU_MEMORY_MB = 4096  # per logical GPU when splitting physical GPUs

_RECV_OPS = {"_Recv", "_HostRecv"}
_SEND_OPS = {"_Send", "_HostSend"}
_UNCHAINED = {"VarHandleOp", "VariableV2", "Variable", "Placeholder"}


def device_name(kind: str, k: int, device_format: str | None = None) -> str:
    """Device string of solution device `k`: '/device:CPU:1', or `device_format` with {k}."""
    return (device_format or f"/device:{kind.upper()}:{{k}}").format(k=k)


# ---------------------------------------------------------------------------
# devices


def configure_devices(count: int, kind: str = "auto",
                      gpu_memory_mb: int | None = None) -> str:
    """Creates `count` logical devices of `kind` ('auto': GPU when one exists) -> 'CPU'/'GPU'.

    Must run before TensorFlow initialises its devices; if it already has, the existing
    logical devices are used when there are enough, else a ValueError says so.
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected an integer >= 1, got {count!r}")
    kind = kind.upper()
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "AUTO":
        kind = "GPU" if gpus else "CPU"
    if kind not in ("CPU", "GPU"):
        raise ValueError(f"device type: expected cpu, gpu or auto, got {kind.lower()!r}")
    if kind == "GPU" and not gpus:
        raise ValueError("device type gpu: no GPU found on this machine")
    try:
        if kind == "GPU":
            memory = int(gpu_memory_mb or DEFAULT_GPU_MEMORY_MB)
            for i, gpu in enumerate(gpus):
                here = count // len(gpus) + (1 if i < count % len(gpus) else 0)
                if here:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory)] * here)
        else:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:  # devices already initialised in this process
        pass
    have = len(tf.config.list_logical_devices(kind))
    if have < count:
        raise ValueError(f"devices: {count} logical {kind} devices needed, but TensorFlow "
                         f"already initialised {have} in this process; call "
                         f"regal.measure.configure_devices({count}) first or use a fresh "
                         f"process")
    return kind


def _session_config(kind: str, count: int) -> "tf.compat.v1.ConfigProto":
    """The eager context's device set-up, without graph rewriting (ops keep names/devices)."""
    from tensorflow.python.eager import context

    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    if kind == "CPU":
        config.device_count["CPU"] = max(count, config.device_count.get("CPU", 1))
    config.allow_soft_placement = kind == "GPU"  # an op with no GPU kernel may fall back
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    opts = config.graph_options.optimizer_options
    opts.opt_level = tf.compat.v1.OptimizerOptions.L0
    opts.do_constant_folding = False
    opts.do_common_subexpression_elimination = False
    opts.do_function_inlining = False
    return config


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
                         f"the same batch size and --training as the solved graph")
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
    spec = record.get("devices", {})
    count = spec["count"] if devices is None else devices
    kwargs = {k: spec[k] for k in ("bandwidth", "latency") if spec.get(k) is not None}
    device_spec = DeviceSpec(count, **kwargs)
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


def _source_weights(source, trust_code: bool = False) -> dict:
    """Variable name -> value of a Keras source (for the SavedModel); {} when none. A file
    with code in it is loaded only with `trust_code` (import_step checked it already)."""
    if isinstance(source, str):
        source = resolve_model(source)
    model = None
    if isinstance(source, tf.keras.Model):
        model = source
    elif isinstance(source, os.PathLike) and Path(source).suffix.lower() in (
            ".keras", ".h5", ".hdf5"):
        if (keras_major_version(source) or 0) >= 3:
            return {}  # imported through a SavedModel, whose weights come with the step
        model = tf.keras.models.load_model(str(source), compile=False, safe_mode=not trust_code)
    if model is None:
        return {}
    return {w.name.split(":")[0]: w.numpy() for w in model.weights}


def _is_keras_or_savedmodel(source) -> bool:
    if isinstance(source, str):
        source = resolve_model(source)
    if isinstance(source, tf.keras.Model) or callable(source) and not hasattr(
            source, "get_concrete_function"):
        return True
    if isinstance(source, os.PathLike):
        p = Path(source)
        return p.is_dir() or p.suffix.lower() in (".keras", ".h5", ".hdf5")
    return False


def apply_solution(model, solution, out_dir, *, batch_size: int = 1, training: bool = False,
                   kind: str = "CPU", device_format: str | None = None,
                   input_shapes=None, saved_model: bool | None = None,
                   trust_code: bool = False) -> dict:
    """Writes placed_graph.pb, device_map.json, placement.json (and saved_model/) to out_dir.
    `trust_code`: a Keras file with code in it may load (`regal.io.tensorflow.import_step`).

    Returns {"files": [...], "moved": {...}, "control_edges": int, "unmatched_variables":
    int or None, "no_saved_model": why the SavedModel was not written, or None}.
    """
    record = load_solution_record(solution)
    check_device_format(device_format, record["devices"]["count"])
    step = model if isinstance(model, ImportedStep) else import_step(
        model, batch_size=batch_size, training=training, input_shapes=input_shapes,
        trust_code=trust_code)
    placed = place(step, record)
    graph_def = placed_graph_def(placed, kind, device_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    path = out / "placed_graph.pb"
    write_bytes(path, graph_def.SerializeToString())
    files.append(str(path))
    device_map = {node.name: node.device for node in graph_def.node}
    path = out / "device_map.json"
    write_json(path, device_map, indent=1)
    files.append(str(path))
    names = step.graph.names
    meta = {"feeds": [t.name for t in step.feeds],
            "fetches": [f.name for f in step.fetches],
            "devices": [device_name(kind, k, device_format) for k in range(placed.devices.count)],
            "order": {device_name(kind, k, device_format): [str(names[v]) for v in ops]
                      for k, ops in enumerate(placed.order)},
            "moved_by_colocation": {n: list(v) for n, v in placed.moved.items()},
            "fingerprint": step.graph.fingerprint()}
    path = out / "placement.json"
    write_json(path, meta, indent=1)
    files.append(str(path))
    edges = sum(max(len(o) - 1, 0) for o in placed.order)
    if saved_model is None:
        saved_model = not isinstance(model, ImportedStep) and _is_keras_or_savedmodel(model)
    unmatched = no_saved_model = None
    if saved_model:
        # the source's own weights: a SavedModel's/tf.function's come with the step,
        # a Keras model's are read from the model
        weights = dict(step.values)
        if not isinstance(model, ImportedStep):
            weights.update(_source_weights(model, trust_code))
        try:
            unmatched = _write_saved_model(graph_def, step, weights, out / "saved_model")
            files.append(str(out / "saved_model"))
        except tf.errors.InvalidArgumentError as exc:
            # saving runs the variables' initialisers here: a device of another machine
            # (device_format '/job:worker/...') cannot be placed in this process
            found = re.search(r"assigned to (\S+)", exc.message)
            no_saved_model = ("no SavedModel written: this process cannot place ops on "
                              f"{found.group(1) if found else 'the solution devices'}, and "
                              "saving runs the variables' initialisers; the GraphDef and "
                              "device map are written")
    return {"files": files, "moved": placed.moved, "control_edges": edges,
            "unmatched_variables": unmatched, "no_saved_model": no_saved_model}


def _write_saved_model(graph_def, step: ImportedStep, weights: dict, path: Path) -> int:
    """A TF1 SavedModel of the placed graph; returns how many variables got random values."""
    values = _variable_values(graph_def, seed=0)
    unmatched = 0
    for name in values:
        if name in weights and weights[name].shape == values[name].shape:
            values[name] = weights[name]
        else:
            unmatched += 1
    g, init, _ = _import_for_run(graph_def, values)
    _register_variables(g, values)  # so the SavedModel saves and restores them
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    # built beside `path`, then swapped in: a failure leaves the previous SavedModel whole
    building = path.with_name(f".{path.name}.building")
    shutil.rmtree(building, ignore_errors=True)
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init)
        inputs = {f"input_{i}": tf.compat.v1.saved_model.build_tensor_info(
            g.get_tensor_by_name(t.name)) for i, t in enumerate(step.feeds)}
        outputs = {f"output_{i}": tf.compat.v1.saved_model.build_tensor_info(
            g.get_tensor_by_name(t.name))
            for i, t in enumerate(f for f in step.fetches if isinstance(f, tf.Tensor))}
        signature = tf.compat.v1.saved_model.build_signature_def(
            inputs, outputs, tf.compat.v1.saved_model.PREDICT_METHOD_NAME)
        builder = tf.compat.v1.saved_model.Builder(str(building))
        builder.add_meta_graph_and_variables(
            sess, [tf.compat.v1.saved_model.SERVING],
            signature_def_map={"serving_default": signature}, clear_devices=False)
        try:
            builder.save()
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(building, path)
    shutil.rmtree(old, ignore_errors=True)
    return unmatched


def _register_variables(g, values: dict) -> None:
    """Wraps the GraphDef's bare VarHandleOps as TF1 variables of g's global collection."""
    from tensorflow.core.framework import variable_pb2
    from tensorflow.python.ops import resource_variable_ops

    with g.as_default():
        for name, value in values.items():
            op = g.get_operation_by_name(name)
            if op.type != "VarHandleOp":
                continue
            with tf.device(op.device):
                init = tf.raw_ops.AssignVariableOp(resource=op.outputs[0],
                                                   value=tf.constant(value),
                                                   name=f"{name}/regal_init")
                read = tf.raw_ops.ReadVariableOp(resource=op.outputs[0], dtype=value.dtype,
                                                 name=f"{name}/regal_read")
            proto = variable_pb2.VariableDef(variable_name=op.outputs[0].name,
                                             initializer_name=init.name,
                                             snapshot_name=read.name, is_resource=True)
            var = resource_variable_ops.ResourceVariable(variable_def=proto)
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, var)


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
    """A tf.Graph of graph_def plus one init op that assigns `values` on each variable's device."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
        inits = []
        for name, value in values.items():
            op = g.get_operation_by_name(name)
            with tf.device(op.device):
                const = tf.constant(value)
                if op.type == "VarHandleOp":
                    inits.append(tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=const))
                else:
                    inits.append(tf.compat.v1.assign(op.outputs[0], const))
        init = tf.group(*inits)
    return g, init, values


def _run(graph_def, step: ImportedStep, config, *, seed: int, runs: int,
         before_measured=None, after_measured=None):
    """Runs the step `runs` times, then once traced; returns (outputs, RunMetadata, extra)."""
    g, init, _ = _import_for_run(graph_def, _variable_values(graph_def, seed))
    rng = np.random.default_rng(seed + 1)
    feed = {g.get_tensor_by_name(t.name): _random(rng, t.shape.as_list(), t.dtype)
            for t in step.feeds}
    tensors = [g.get_tensor_by_name(f.name) for f in step.fetches if isinstance(f, tf.Tensor)]
    others = [g.get_operation_by_name(f.name) for f in step.fetches
              if isinstance(f, tf.Operation)]
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                      output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    extra = None
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init)
        outputs = sess.run(tensors, feed)  # first run: outputs before any training update
        for _ in range(max(runs - 1, 0)):
            sess.run(tensors + others, feed)
        if before_measured is not None:
            before_measured()
            sess.run(tensors + others, feed)
            extra = after_measured()
        sess.run(tensors + others, feed, options=options, run_metadata=metadata)
    return outputs, metadata, extra


# ---------------------------------------------------------------------------
# the CPU replay


def _tensor_key(ref: str) -> tuple[str, int]:
    name, _, slot = ref.partition(":")
    return name, int(slot or 0)


def _device_index(name: str, kind: str) -> int | None:
    m = re.search(r"device:([A-Za-z_]+):(\d+)$", name)
    if not m or m.group(1).upper() != kind:
        return None
    return int(m.group(2))


def _nanos(node):
    start = node.all_start_nanos or node.all_start_micros * 1000
    dur = node.all_end_rel_nanos or node.all_end_rel_micros * 1000
    return start, start + dur


def replay_step_stats(metadata, count: int, fetches: list[str], kind: str = "CPU") -> dict:
    """Per-device peak bytes rebuilt from a traced run (see the module docstring).

    Returns {"peak": [count] int, "persistent": [count] int, "device_of": op -> index,
    "duration_us": op -> measured µs}.
    """
    pnodes = {}
    for pg in metadata.partition_graphs:
        for node in pg.node:
            pnodes[node.name] = node
    stats, device_of = {}, {}
    for dev in metadata.step_stats.dev_stats:
        k = _device_index(dev.device, kind)
        for ns in dev.node_stats:
            if ns.node_name in pnodes:
                stats[ns.node_name] = ns
                if k is not None:
                    device_of[ns.node_name] = k
    sends = {}  # rendezvous key -> source tensor
    for node in pnodes.values():
        if node.op in _SEND_OPS:
            sends[node.attr["tensor_name"].s] = _tensor_key(node.input[0])
    consumers: dict[tuple[str, tuple], list[str]] = {}
    for node in pnodes.values():
        for ref in node.input:
            if not ref.startswith("^"):
                consumers.setdefault(_tensor_key(ref), []).append(node.name)
    fetched = {_tensor_key(f) for f in fetches}
    times = {name: _nanos(ns) for name, ns in stats.items()}
    out_info = {}  # (name, slot) -> (bytes, ptr)
    for name, ns in stats.items():
        for out in ns.output:
            a = out.tensor_description.allocation_description
            out_info[(name, out.slot)] = (int(a.allocated_bytes or a.requested_bytes), int(a.ptr))

    # buffers: id -> [device, bytes, alloc time, tensor keys as seen on device, persistent?]
    buffers: list[list] = []
    where: dict[tuple[int, tuple], int] = {}  # (device, tensor key) -> buffer id
    persistent = [0] * count
    temp_events: list[tuple[int, int, int, int]] = []

    def resolve(k: int, key: tuple):
        """Buffer id of tensor `key` as an input on device k (a received tensor's copy)."""
        if (k, key) in where:
            return where[(k, key)]
        node = pnodes.get(key[0])
        if node is not None and node.op in _RECV_OPS:
            source = sends.get(node.attr["tensor_name"].s)
            size, _ = out_info.get(source, (0, 0))
            t0 = times.get(source[0], (0, 0))[1] if source else 0
            buffers.append([k, size, t0, [key], False])
            where[(k, key)] = len(buffers) - 1
            if source is not None and source in fetched:
                fetched.add(key)
            return where[(k, key)]
        return None

    for name in sorted(stats, key=lambda n: times[n]):
        k = device_of.get(name)
        node = pnodes[name]
        ns = stats[name]
        if k is None or k >= count:
            continue
        start, end = times[name]
        if node.op == "VarHandleOp":
            dtype = tf.as_dtype(node.attr["dtype"].type)
            dims = tf.TensorShape(node.attr["shape"].shape).as_list()
            persistent[k] += int(math.prod(dims)) * dtype.size
        persistent[k] += int(ns.memory_stats.persistent_memory_size)
        inputs = [_tensor_key(r) for r in node.input if not r.startswith("^")]
        in_bufs = {}
        for key in inputs:
            b = resolve(k, key)
            if b is not None:
                src = pnodes.get(key[0])
                if src is not None and src.op in _RECV_OPS:
                    s = sends.get(src.attr["tensor_name"].s)
                    ptr = out_info.get(s, (0, 0))[1]
                else:
                    ptr = out_info.get(key, (0, 0))[1]
                in_bufs.setdefault(ptr, b)
        allocated = sum(r.alloc_bytes for m in ns.memory for r in m.allocation_records
                        if r.alloc_bytes > 0)
        new_bytes = 0
        for out in ns.output:
            key = (name, out.slot)
            size, ptr = out_info[key]
            if ptr and ptr in in_bufs:  # forwarded input buffer: the same bytes
                b = in_bufs[ptr]
                buffers[b][3].append(key)
            elif allocated == 0 and node.op != "_Arg":  # a view of a variable or constant
                buffers.append([k, 0, start, [key], True])
                b = len(buffers) - 1
            else:
                buffers.append([k, size, start, [key], False])
                b = len(buffers) - 1
                new_bytes += size
            where[(k, key)] = b
        peak_here = sum(int(m.peak_bytes) for m in ns.memory)
        scratch = peak_here - new_bytes
        if scratch > 0:
            temp_events.append((k, start, end, scratch))

    events: list[list[tuple]] = [[] for _ in range(count)]  # (time, alloc?, bytes, scratch?)
    fetch_sends = _fetch_keys(pnodes, fetched)
    for k, start, end, size in temp_events:
        events[k] += [(start, 1, size, True), (end, 0, -size, True)]
    for b, (k, size, t0, keys, pers) in enumerate(buffers):
        if pers or size == 0:
            continue
        free = None
        ends = []
        for key in keys:
            if key in fetched:
                free = math.inf
            for c in consumers.get(key, []):
                cnode = pnodes[c]
                if cnode.op == "_Retval":
                    free = math.inf
                elif device_of.get(c) == k and c in times:
                    ends.append(times[c][1])
                elif cnode.op in _SEND_OPS and cnode.attr["tensor_name"].s in fetch_sends:
                    free = math.inf
        if free is None:
            free = max(ends) if ends else max(t0, times.get(keys[-1][0], (t0, t0))[1])
        if _only_fetch_copy(keys[0], pnodes, consumers):
            continue  # the client's copy of a fetched tensor is host memory, not a device's
        events[k].append((t0, 1, size, False))
        if free != math.inf:
            events[k].append((free, 0, -size, False))
    peaks, tensor_peaks = [], []
    for k in range(count):
        live = best = tensors = best_tensors = 0
        for _, _, delta, scratch in sorted(events[k]):  # at one instant, frees first
            live += delta
            tensors += 0 if scratch else delta
            best = max(best, live)
            best_tensors = max(best_tensors, tensors)
        peaks.append(persistent[k] + best)
        tensor_peaks.append(persistent[k] + best_tensors)
    duration = {n: (t[1] - t[0]) / 1000.0 for n, t in times.items()}
    return {"peak": peaks, "peak_without_scratch": tensor_peaks, "persistent": persistent,
            "device_of": device_of, "duration_us": duration}


def _fetch_keys(pnodes, fetched) -> set:
    """Rendezvous keys of sends that carry a fetched tensor to the client."""
    return {n.attr["tensor_name"].s for n in pnodes.values()
            if n.op in _SEND_OPS and _tensor_key(n.input[0]) in fetched}


def _only_fetch_copy(key, pnodes, consumers) -> bool:
    node = pnodes.get(key[0])
    if node is None or node.op not in _RECV_OPS:
        return False
    users = consumers.get(key, [])
    return bool(users) and all(pnodes[c].op == "_Retval" for c in users)


# ---------------------------------------------------------------------------
# measure


@dataclass
class Measurement:
    """Per-device peaks: measured on TF devices vs simulated for the applied placement."""

    devices: list                 # TF device names
    method: str                   # how the measured peaks were obtained
    measured: np.ndarray          # [D] bytes
    simulated: np.ndarray         # [D] bytes, model costs, applied placement
    simulated_measured_times: np.ndarray  # [D] bytes, op times taken from the run
    solution_peak: np.ndarray     # [D'] the solution record's own claim
    moved: dict                   # op -> (solution device, applied device)
    misplaced: dict               # op -> device TF ran it on, where not the applied one
    max_output_diff: float | None  # placed vs unplaced outputs (max abs), if checked
    extra: dict = field(default_factory=dict)

    @property
    def difference_pct(self) -> np.ndarray:
        sim = np.asarray(self.simulated, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sim > 0, (self.measured - sim) / sim * 100.0, np.nan)

    def lines(self) -> list[str]:
        out = [f"measured by {self.method}",
               f"{'device':<28}{'simulated':>14}{'measured':>14}{'diff':>9}"]
        for k, dev in enumerate(self.devices):
            out.append(f"{dev:<28}{_mib(self.simulated[k]):>14}{_mib(self.measured[k]):>14}"
                       f"{self.difference_pct[k]:>+8.1f}%")
        if self.moved:
            first = next(iter(self.moved))
            out.append(f"{len(self.moved)} ops moved to their variable's device (TensorFlow "
                       f"colocates resource ops), e.g. {first!r}; simulated = applied placement")
        if self.misplaced:
            first, dev = next(iter(self.misplaced.items()))
            out.append(f"warning: {len(self.misplaced)} ops ran elsewhere than applied, e.g. "
                       f"{first!r} on {dev}")
        if self.max_output_diff is not None:
            out.append(f"outputs vs unplaced run: max abs difference {self.max_output_diff:.3g}")
        return out

    def to_dict(self) -> dict:
        return {"devices": list(self.devices), "method": self.method,
                "measured": [int(x) for x in self.measured],
                "simulated": [int(x) for x in self.simulated],
                "simulated_measured_times": [int(x) for x in self.simulated_measured_times],
                "difference_pct": [float(x) for x in self.difference_pct],
                "solution_peak": [int(x) for x in self.solution_peak],
                "moved": {k: list(v) for k, v in self.moved.items()},
                "misplaced": dict(self.misplaced), "max_output_diff": self.max_output_diff,
                **self.extra}


def _mib(value) -> str:
    return f"{float(value) / 2**20:.3f} MiB"


def measure(model, solution, devices: int | None = None, *, batch_size: int = 1,
            training: bool = False, input_shapes=None, kind: str = "auto", runs: int = 3,
            seed: int = 0, check_outputs: bool = True,
            gpu_memory_mb: int | None = None, trust_code: bool = False) -> Measurement:
    """Runs `model` placed by `solution` on `devices` devices and measures per-device peaks.

    `model`: anything `regal.io.tensorflow.import_model` takes (`trust_code` as there), or an
    ImportedStep;
    `solution`: a solution.json path or record; `devices`: default the solution's count.
    """
    record = load_solution_record(solution)
    count = record["devices"]["count"] if devices is None else devices
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected an integer >= 1, got {devices!r}")
    kind = configure_devices(count, kind, gpu_memory_mb)
    step = model if isinstance(model, ImportedStep) else import_step(
        model, batch_size=batch_size, training=training, input_shapes=input_shapes,
        trust_code=trust_code)
    placed = place(step, record, count)
    graph_def = placed_graph_def(placed, kind)
    config = _session_config(kind, count)
    names = [device_name(kind, k) for k in range(count)]
    if kind == "GPU":
        def reset():
            for k in range(count):
                tf.config.experimental.reset_memory_stats(f"GPU:{k}")

        def read():
            return [int(tf.config.experimental.get_memory_info(f"GPU:{k}")["peak"])
                    for k in range(count)]
        outputs, metadata, gpu_peaks = _run(graph_def, step, config, seed=seed, runs=runs,
                                            before_measured=reset, after_measured=read)
        method = GPU_METHOD
    else:
        outputs, metadata, gpu_peaks = _run(graph_def, step, config, seed=seed, runs=runs)
        method = CPU_METHOD
    fetch_names = [f.name for f in step.fetches if isinstance(f, tf.Tensor)]
    replay = replay_step_stats(metadata, count, fetch_names, kind)
    measured = np.asarray(gpu_peaks if gpu_peaks is not None else replay["peak"],
                          dtype=np.int64)
    graph = step.graph
    sim = simulate(graph, placed.devices, placed.placement, placed.priority,
                   placed.transfer_priority)
    measured_cost = graph.compute_cost.copy()
    for v, name in enumerate(graph.names.tolist()):
        if name in replay["duration_us"]:
            measured_cost[v] = replay["duration_us"][name]
    measured_cost.setflags(write=False)
    timed = simulate(graph._replace(compute_cost=measured_cost), placed.devices,
                     placed.placement, placed.priority, placed.transfer_priority)
    misplaced = {}
    for v, name in enumerate(graph.names.tolist()):
        k = replay["device_of"].get(name)
        if k is not None and k != placed.placement[v]:
            misplaced[name] = device_name(kind, k)
    diff = None
    if check_outputs and outputs:
        reference, _, _ = _run(placed_graph_def(step), step, _session_config(kind, count),
                               seed=seed, runs=1)
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                   if np.size(a) else 0.0 for a, b in zip(outputs, reference))
    return Measurement(names, method, measured, np.asarray(sim.peak, np.int64),
                       np.asarray(timed.peak, np.int64), placed.solution_peak, placed.moved,
                       misplaced, diff, extra={
                           "kind": kind, "persistent_measured": replay["persistent"],
                           "measured_without_scratch": replay["peak_without_scratch"]})
