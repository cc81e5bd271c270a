"""TensorFlow importer: a Keras model, tf.function, SavedModel or GraphDef -> ComputationGraph.

Everything is rebuilt inside one `tf.compat.v1.Graph`: legacy Keras (tf-keras, selected by
`TF_USE_LEGACY_KERAS=1`) then emits plain ops with no nested function calls, and sources
that do carry function calls (a tf.function, a SavedModel signature, a GraphDef with a
function library) are frozen with Grappler's aggressive inlining first. The graph is then
pruned to the ancestors of what a step fetches (outputs; for training also the optimizer
update and Keras' moving-average updates), so variable initializers and Keras' symbolic
construction ops never appear.

Two modes:

* static (default): tensor bytes = static shape x dtype size (the leading batch dimension
  of every input is set from `batch_size`); compute cost from a FLOP estimate under a
  roofline with the constants below. An output whose shape is not fully known is a
  `GraphError` naming the tensor as `op:port` (the only exemption is the opaque
  reserve-space outputs of fused batch norm, which are counted as 0 bytes).
* run (`run=True`): the graph is executed in a `tf.compat.v1.Session` with
  `build_cost_model=1` and a full trace, and TensorFlow's own CostGraphDef of that step
  (real output sizes, measured op times) is converted by `regal.io.costgraph`.

Choices worth knowing:

* Variables: a variable op (VarHandleOp, VariableV2) keeps its node, with a 0-byte handle
  output. Its bytes are the persistent memory of the first op (in graph order) that
  reads the handle - the forward ReadVariableOp, or for an optimizer slot the update op -
  so each variable is counted exactly once and lives where the op using it is placed.
  A ReadVariableOp's output aliases the handle: free on the reader's device, a full copy
  when sent elsewhere. Forwarding ops (Identity, Reshape, ...) alias their input likewise.
* In-place forwarding (static mode, `forwarding=True`, the default): TensorFlow's
  element-wise kernels (`FORWARDING_OPS`: BiasAdd, Relu, AddV2, Mul, ...) write their output
  into an input's buffer when they hold its only reference
  (`OpKernelContext::forward_input_or_allocate_output`). `with_forwarding` models this as
  an alias: output 0 aliases the first input i that has the output's size, whose only
  consumer is this op (read on one port), that is not itself an alias (Identity, Reshape,
  a variable read) and not held elsewhere (a constant, a feed, a fetched tensor). In the
  simulator (docs/design.md §4 and regal/sim/SIM_RULES.md) the output then costs 0 bytes on the op's device and keeps the
  input's copy there alive; a transfer of it elsewhere allocates its own size. Evidence
  (experiments/results/sim_vs_measured_cpu.md, CPU step-stats replay): without it the
  model over-counted one activation per such op, inference CNN rows -24..-38%; with it
  those rows are 0.0%.
* Kernel scratch (static mode, `kernel_scratch=True`, the default): `temporary_memory` is 0
  for every op except the two conv gradients, whose CPU kernels (Conv2DCustom-
  BackpropFilter/InputOp) allocate an im2col buffer of `shard` images sized to a 30 MiB
  working set. With P = output rows x cols, F = filter rows x cols x in depth,
  O = out depth, work = P F + P O + F O and W = 30 MiB / itemsize:
  filter gradient: shard = ceil(W / work), scratch = shard x P F x itemsize
  (`conv2d_backprop_filter_scratch`; independent of the batch, about 10-30 MB);
  input gradient: the same, except shard = 1 when the batch is 1 or
  work / threads >= 256 KiB / itemsize (`conv2d_backprop_input_scratch`, threads =
  SCRATCH_CPU_THREADS = 2). Evidence, TensorFlow 2.21 CPU, oneDNN off, each op's allocator
  peak minus its outputs in a traced run: the filter formula matched to the byte for all
  35 Conv2DBackpropFilter ops of a MobileNetV2 training step and 8 hand-made shapes, the
  input formula for all 24 distinct Conv2DBackpropInput shapes of MobileNetV2, a small
  CNN and a ResNet-style net (1x1 and 3x3 filters, stride 1 and 2, 3..1280 channels,
  1.8 KB..26 MB). Forward Conv2D takes 0 tracked bytes (Eigen's packing buffers bypass
  TF's allocator); the depthwise family and FusedBatchNormGradV3 took 64 B..60 KB, so
  those stay 0. On a GPU the analogue is cuDNN's workspace, which depends on the
  algorithm cuDNN picks and is not modelled.
* Colocation (`colocation_pairs`): the groups TensorFlow's placer (colocation_graph.cc)
  forces on the imported ops become the graph's colocation groups, so every placement
  the optimizers produce is one TensorFlow runs as given: an op joins the producer of
  each input of resource or reference dtype (a VarHandleOp with every ReadVariableOp,
  AssignVariableOp, ResourceApply* and Identity of its handle; a VariableV2 with its
  `read` Identity and Assign/Apply ops), and every op with a `_class` attribute
  `loc:@NAME` joins NAME when NAME is imported. Function-call ops, which TF exempts from
  resource-input colocation, stay single ops here (inlined sources have none).
* Keras 3 files: a `.keras` / `.h5` saved by Keras 3 (the default Keras of TensorFlow >=
  2.16) cannot be read by tf-keras, so `export_keras3` has Keras 3 export it as a SavedModel
  in a child process without the legacy switch, and that SavedModel is imported.
* Code in model files: loading a Keras file rebuilds its layers, and a `Lambda` layer (or
  any serialised `__lambda__`) carries Python bytecode that then runs; a `module` outside
  Keras and TensorFlow in a `.keras` config is imported to find a class. Legacy `.h5`
  files have no safe mode, so `code_in_keras_file` reads the config first and the loader
  refuses such a file, naming the layer, unless `trust_code=True` (`--trust-code`).
  `package.module:attr` imports and calls the user's own code by design.
* Control flow: If/While/Case stay single ordinary ops (their bodies are not expanded; the
  cost estimate ignores them); `import_model` warns when it sees one.
* Training graphs: loss = sum over float outputs of mean(square(output)), gradients with
  `tf.gradients`, update with `tf.compat.v1.train.AdamOptimizer` (a raw `ResourceApplyAdam`
  per variable for GraphDef files whose variables are bare handles).
* Run mode initialises every variable randomly (timings do not depend on weight values)
  and, unless `grappler=True`, disables graph rewriting so the measured ops keep the
  names and structure of the static graph (oneDNN's CPU rewrite is off too, see below).
  TensorFlow's cost graph reports no persistent memory for resource variables, so each
  variable's bytes are added to its first reader exactly as in static mode.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's CPU graph rewrite fuses and renames ops (Conv2D+BiasAdd), so a measured cost graph
# would no longer line up with the static one; off unless the caller chose otherwise (only
# effective when this module is the first to import TensorFlow).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import importlib  # noqa: E402
import inspect  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, NamedTuple, Sequence  # noqa: E402

import numpy as np  # noqa: E402
with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402

from regal.graph import ComputationGraph, GraphBuilder, GraphError  # noqa: E402

__all__ = ["import_model", "import_step", "resolve_model", "with_forwarding", "colocation_pairs",
           "keras_major_version", "export_keras3", "code_in_keras_file",
           "conv2d_backprop_filter_scratch", "conv2d_backprop_input_scratch", "ImportedStep", "FORWARDING_OPS",
           "FLOPS_PER_US", "BYTES_PER_US", "LAUNCH_US"]

# Static cost model: cost_us = LAUNCH_US + max(flops / FLOPS_PER_US, bytes / BYTES_PER_US),
# bytes = inputs + outputs read and written. The constants describe a V100-class GPU at
# realistic (not peak) fp32 efficiency: 10 TFLOP/s sustained, 500 GB/s effective bandwidth,
# and a 1 µs launch overhead. Bookkeeping ops (constants, handles, forwarding, shapes) cost 0.
FLOPS_PER_US = 1.0e7
BYTES_PER_US = 5.0e5
LAUNCH_US = 1.0

_VARIABLE_OPS = {"VarHandleOp", "VariableV2", "Variable"}
_FORWARD_OPS = {"Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "Snapshot",
                "PreventGradient", "EnsureShape", "ReadVariableOp", "CheckNumerics"}
_FREE_OPS = _VARIABLE_OPS | _FORWARD_OPS | {
    "Const", "NoOp", "Placeholder", "PlaceholderWithDefault", "Shape", "ShapeN", "Size",
    "Rank", "IdentityN", "HostConst", "ZerosLike", "OnesLike", "BroadcastGradientArgs"}
_CONTROL_FLOW_OPS = {"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
                     "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}
_CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
# opaque scratch outputs whose shape TF leaves unknown: counted as 0 bytes
_OPAQUE_OUTPUTS = {"FusedBatchNormV3": {5}, "FusedBatchNormGradV3": {3, 4}}

# element-wise kernels that write their output into an input's buffer when TensorFlow holds
# the only reference to it (OpKernelContext::forward_input_or_allocate_output)
FORWARDING_OPS = frozenset({
    "BiasAdd", "Relu", "Relu6", "Elu", "Selu", "Sigmoid", "Tanh", "Softplus", "LeakyRelu",
    "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Abs", "AddV2", "Add", "Sub", "Mul",
    "RealDiv", "Maximum", "Minimum", "SquaredDifference", "ReluGrad", "Relu6Grad",
    "SigmoidGrad", "TanhGrad"})
# producers whose output buffer TensorFlow holds elsewhere too: never forwarded into
_HELD_PRODUCERS = frozenset({"ReadVariableOp", "Const", "HostConst", "Placeholder",
                             "PlaceholderWithDefault", "VarHandleOp", "VariableV2", "Variable"})
# TF's CPU conv-gradient kernels size their im2col buffer to this working set (its L3
# target); Conv2DBackpropInput packs one image at a time instead when the batch is 1 or a
# thread's share of one image's work reaches CONV_L2_BYTES, which depends on the number
# of TensorFlow's CPU worker threads: SCRATCH_CPU_THREADS (the cores of the machine that
# measured it; fixed, so a graph's fingerprint does not depend on where it was imported)
CONV_WORKING_SET_BYTES = 30 << 20
CONV_L2_BYTES = 256 << 10
SCRATCH_CPU_THREADS = 2


class _Step(NamedTuple):
    """One training or inference step, ready to convert or run."""
    graph: tf.Graph
    feeds: list            # placeholder tensors, fully shaped
    fetches: list          # tensors and ops one step runs
    values: dict = {}      # variable op name -> initial value the source carries (weights)


# ---------------------------------------------------------------------------
# public API


def import_model(source, *, batch_size: int = 1, training: bool = False, run: bool = False,
                 input_shapes: Sequence[Sequence[int]] | None = None,
                 learning_rate: float = 1e-3, seed: int = 0, grappler: bool = False,
                 warmup_runs: int = 1, forwarding: bool = True,
                 kernel_scratch: bool = True, trust_code: bool = False) -> ComputationGraph:
    """Imports `source` as the graph of one inference (or training) step.

    `source`: a tf.keras Model, a zero-argument callable returning one (built inside the
    importer's graph, the cheap route), a tf.function with an input signature or a
    ConcreteFunction, a SavedModel directory, a `.keras`/`.h5` file, a GraphDef file
    (`.pb` binary, `.pbtxt` text), or a model spec string (see `resolve_model`).
    `batch_size` fills each input's leading dimension where it is unknown; `input_shapes`
    overrides the inputs' full shapes instead. `run=True` measures one step (after
    `warmup_runs` unmeasured ones) on this machine's devices. Static mode only:
    `forwarding` models in-place buffer forwarding as aliases, `kernel_scratch` sets the
    conv-gradient kernels' temporary memory (see the module docstring). `trust_code` lets a
    Keras file whose layers carry Python code load (and run that code).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    step = _build_step(source, batch_size=batch_size, training=training,
                       input_shapes=input_shapes, learning_rate=learning_rate,
                       trust_code=trust_code)
    ops = _prune(step.graph, step.fetches)
    flow = sorted({op.type for op in ops} & _CONTROL_FLOW_OPS)
    if flow:
        warnings.warn(f"graph contains control-flow ops {flow}; each is one ordinary op "
                      f"(bodies not expanded)", stacklevel=2)
    if run:
        return _run_cost_graph(step, ops, seed=seed, grappler=grappler, warmup_runs=warmup_runs)
    return _static_graph(ops, step.fetches, forwarding=forwarding,
                         kernel_scratch=kernel_scratch)


def resolve_model(spec: str):
    """A model spec -> something `import_model` takes.

    `keras.applications.NAME` (or `tf.keras.applications.NAME`) builds that application
    with `weights=None` (offline); `package.module:attr` is a Keras model or a callable
    returning one; anything else is a path.
    """
    spec = str(spec)
    for prefix in ("tf.keras.applications.", "keras.applications."):
        if spec.startswith(prefix):
            name = spec[len(prefix):]
            ctor = getattr(tf.keras.applications, name, None)
            if ctor is None or not callable(ctor):
                raise ValueError(f"unknown model {spec!r}: tf.keras.applications has no {name!r}")
            return lambda: ctor(weights=None)
    if ":" in spec and not Path(spec).exists():
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"unknown model {spec!r}: cannot import {module_name!r} ({exc})") \
                from None
        obj = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise ValueError(f"unknown model {spec!r}: {module_name!r} has no {attr!r}")
            obj = getattr(obj, part)
        return _attr_source(spec, obj)
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"no such model file, directory or spec: {spec!r}")
    return path


def _attr_source(spec: str, obj):
    """What `package.module:attr` names, as `import_model` takes it: a Keras model or a
    tf.function as it is; a callable only if it takes no arguments, wrapped so that a result
    that is no model names `spec`. The signature is read before the call, rather than any
    TypeError caught, so that one raised inside the user's model code stays theirs."""
    if isinstance(obj, tf.keras.Model) or hasattr(obj, "get_concrete_function") or \
            hasattr(obj, "structured_input_signature"):
        return obj
    if not callable(obj):
        raise ValueError(f"{spec}: a {type(obj).__name__}, not a Keras model or a callable "
                         f"returning one")
    needs = "; expected a Keras model or a callable that takes none"
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # some builtins have none: see build()
        signature = None
    if signature is not None:
        try:
            signature.bind()
        except TypeError:
            raise ValueError(f"{spec}: needs arguments {signature}{needs}") from None

    def build():
        try:
            model = obj()
        except TypeError as exc:  # from the call itself, not from code it ran: the arguments
            if signature is not None or exc.__traceback__.tb_next is not None:
                raise
            raise ValueError(f"{spec}: needs arguments ({_one_line(exc)}){needs}") from None
        if not isinstance(model, tf.keras.Model):
            raise ValueError(f"{spec}: returned a {type(model).__name__}, not a Keras model")
        return model

    return build


# ---------------------------------------------------------------------------
# building one step in a tf.compat.v1 graph


def _build_step(source, *, batch_size, training, input_shapes, learning_rate,
                trust_code: bool = False) -> _Step:
    if isinstance(source, str):
        source = resolve_model(source)
    if isinstance(source, os.PathLike):
        return _from_path(Path(source), batch_size, training, input_shapes, learning_rate,
                          trust_code)
    if isinstance(source, tf.keras.Model):
        model = source
        if not _is_graph_network(model):
            raise GraphError(f"Keras model {model.name!r} is subclassed: pass a tf.function "
                             f"with an input_signature that calls it instead")
        return _from_keras(lambda: tf.keras.models.clone_model(model), batch_size, training,
                           input_shapes, learning_rate)
    if hasattr(source, "get_concrete_function"):  # tf.function
        try:
            concrete = source.get_concrete_function()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tf.function needs an input_signature ({exc})") from None
        return _from_concrete(concrete, batch_size, training, input_shapes, learning_rate)
    if hasattr(source, "structured_input_signature") and hasattr(source, "graph"):
        return _from_concrete(source, batch_size, training, input_shapes, learning_rate)
    if callable(source):
        return _from_keras(source, batch_size, training, input_shapes, learning_rate)
    raise ValueError(f"cannot import {type(source).__name__}: expected a Keras model, a "
                     f"callable returning one, a tf.function or a path")


def _is_graph_network(model) -> bool:
    return bool(getattr(model, "_is_graph_network", False)) or \
        isinstance(model, tf.keras.Sequential)


def _from_path(path: Path, batch_size, training, input_shapes, learning_rate,
               trust_code: bool = False) -> _Step:
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if path.is_dir():
        if not (path / "saved_model.pb").exists() and not (path / "saved_model.pbtxt").exists():
            raise ValueError(f"{path}: a directory but not a SavedModel (no saved_model.pb)")
        try:
            loaded = tf.saved_model.load(str(path))
        except Exception as exc:  # noqa: BLE001 - a damaged SavedModel raises many kinds
            raise ValueError(f"{path}: cannot load SavedModel ({_one_line(exc)})") from None
        sigs = dict(loaded.signatures)
        if not sigs:
            raise ValueError(f"{path}: SavedModel has no signatures")
        concrete = sigs.get("serving_default") or sigs[sorted(sigs)[0]]
        return _from_concrete(concrete, batch_size, training, input_shapes, learning_rate)
    suffix = path.suffix.lower()
    if suffix in (".keras", ".h5", ".hdf5") and not trust_code:
        code = code_in_keras_file(path)
        if code:
            raise ValueError(f"{path}: {code}, Python code that loading the file would run; "
                             f"pass --trust-code (trust_code=True) only if you trust the file")
    if suffix in (".keras", ".h5", ".hdf5") and (keras_major_version(path) or 0) >= 3:
        with tempfile.TemporaryDirectory(prefix="regal-keras3-") as tmp:
            saved = export_keras3(path, Path(tmp) / "saved_model", trust_code=trust_code)
            return _from_path(saved, batch_size, training, input_shapes, learning_rate)
    if suffix in (".keras", ".h5", ".hdf5"):
        try:
            model = tf.keras.models.load_model(str(path), compile=False,
                                               safe_mode=not trust_code)
        except Exception as exc:  # noqa: BLE001 - Keras raises many kinds
            raise ValueError(f"{path}: cannot load Keras model ({_one_line(exc)})") from None
        return _build_step(model, batch_size=batch_size, training=training,
                           input_shapes=input_shapes, learning_rate=learning_rate)
    if suffix in (".pb", ".pbtxt"):
        return _from_graph_def(_read_graph_def(path), batch_size, training, input_shapes,
                               learning_rate)
    raise ValueError(f"{path}: unknown model suffix {path.suffix!r}; expected a SavedModel "
                     f"directory, .keras, .h5, .pb or .pbtxt")


def _one_line(exc) -> str:
    return " ".join(str(exc).split())[:300]


def keras_major_version(path: str | os.PathLike) -> int | None:
    """Major version of the Keras that saved a `.keras` / `.h5` file (None: not recorded).

    A `.keras` file is a zip whose metadata.json names it; an `.h5` file keeps it in a root
    attribute. tf-keras writes 2.x and reads only those; Keras 3 writes 3.x.
    """
    try:
        entry = _keras_file_entry(path, "metadata.json", "keras_version")
    except Exception:  # noqa: BLE001 - unreadable: the loader names what is wrong with it
        return None
    version = entry.get("keras_version") if isinstance(entry, dict) else entry
    match = re.match(r"\s*(\d+)\.", str(version)) if version is not None else None
    return int(match.group(1)) if match else None


def _keras_file_entry(path: str | os.PathLike, member: str, attribute: str):
    """The JSON `member` of a `.keras` file (a zip), parsed, or the root `attribute` of an
    `.h5` file, as text; None when the file has none."""
    import json
    import zipfile

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if member not in archive.namelist():
                return None
            return json.loads(archive.read(member))
    import h5py
    with h5py.File(path, "r") as f:
        value = f.attrs.get(attribute)
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


_KERAS_MODULES = ("keras", "tf_keras", "tensorflow", "builtins")  # what a config may import


def code_in_keras_file(path: str | os.PathLike) -> str | None:
    """Where a `.keras` / `.h5` file's model config carries Python code that loading it would
    run, as 'layer NAME is a Lambda' or 'layer NAME names module M'; None when nowhere.

    Code rides in a `Lambda` layer (marshalled bytecode, or a function looked up by name),
    in any serialised `__lambda__`, and in a `module` outside Keras and TensorFlow, which a
    `.keras` config makes Keras import. A file whose config cannot be read says None: Keras
    cannot read it either, and its loader names what is wrong with it.
    """
    import json

    try:
        config = _keras_file_entry(path, "config.json", "model_config")
        config = json.loads(config) if isinstance(config, str) else config
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    stack = [(config, "the model config")]
    while stack:
        item, layer = stack.pop()
        if isinstance(item, list):
            stack.extend((value, layer) for value in reversed(item))
        if not isinstance(item, dict):
            continue
        inner = item.get("config")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            layer = f"layer {inner['name']!r}"
        kind, module = item.get("class_name"), item.get("module")
        if kind in ("Lambda", "__lambda__"):
            return f"{layer} is a {kind}"
        if isinstance(module, str) and module.split(".")[0] not in _KERAS_MODULES:
            return f"{layer} names module {module!r}"
        stack.extend((value, layer) for value in reversed(list(item.values())))
    return None


# Runs in a child process without TF_USE_LEGACY_KERAS: there `keras` is Keras 3, which
# reads its own files and exports the model's inference function as a SavedModel.
_KERAS3_EXPORT = """
import sys
import keras
model = keras.saving.load_model(sys.argv[1], compile=False, safe_mode=sys.argv[3] != "trust")
model.export(sys.argv[2], format="tf_saved_model", verbose=False)
"""


def export_keras3(path: str | os.PathLike, out: str | os.PathLike, *,
                  trust_code: bool = False) -> Path:
    """Converts a Keras 3 `.keras` / `.h5` file to a SavedModel at `out` and returns `out`
    (`trust_code` turns Keras 3's safe mode off, so that Lambda layers load).

    This process runs tf-keras (Keras 2, for spektral), which cannot deserialise Keras 3's
    classes, so Keras 3 loads the file in a child process and `Model.export` writes the
    serving function with the weights. Its forward pass is the inference one (batch norm
    reads its moving statistics even in a training step), as for any SavedModel.
    """
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["KERAS_BACKEND"] = "tensorflow"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run([sys.executable, "-c", _KERAS3_EXPORT, str(path), str(out),
                           "trust" if trust_code else "safe"],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise ValueError(f"{path}: cannot load Keras 3 model ({_one_line(why)})")
    return Path(out)


def _shape_for(i: int, shape, batch_size: int, input_shapes, what: str) -> list[int]:
    """The input's full shape: the override, or the static shape with batch filled in."""
    if input_shapes is not None:
        if i >= len(input_shapes):
            raise ValueError(f"input_shapes gives {len(input_shapes)} shapes, but input "
                             f"{what} is number {i + 1}")
        return [int(d) for d in input_shapes[i]]
    dims = tf.TensorShape(shape)
    if dims.rank is None:
        raise GraphError(f"tensor {what}: input of unknown rank; pass input_shapes")
    dims = dims.as_list()
    if dims and dims[0] is None:
        dims[0] = batch_size
    for d in dims:
        if d is None:
            raise GraphError(f"tensor {what}: unknown dimension in input shape {dims}; "
                             f"pass input_shapes")
    return dims


def _from_keras(build: Callable, batch_size, training, input_shapes, learning_rate) -> _Step:
    graph = tf.Graph()
    with graph.as_default():
        # a fixed learning phase during construction: no tf.cond per batch-norm/dropout in
        # the symbolic pass (pruned anyway, but building it cost half the time)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # learning_phase_scope is deprecated
            with tf.keras.backend.learning_phase_scope(0):
                model = build()
        if not isinstance(model, tf.keras.Model):
            raise ValueError(f"the model callable returned {type(model).__name__}, "
                             f"not a tf.keras Model")
        mark = len(graph.get_operations())
        feeds = []
        for i, spec in enumerate(model.inputs):
            name = spec.name.split(":")[0]
            shape = _shape_for(i, spec.shape, batch_size, input_shapes, f"{name}:0")
            feeds.append(tf.compat.v1.placeholder(spec.dtype, shape, name=f"input_{i}"))
        outputs = tf.nest.flatten(model(feeds if len(feeds) > 1 else feeds[0],
                                        training=training))
        fetches = list(outputs)
        if training:
            new = {op.name for op in graph.get_operations()[mark:]}
            updates = [u for u in model.updates if getattr(u, "name", None) in new]
            train_op = _add_optimizer(outputs, model.trainable_variables, learning_rate)
            fetches += [train_op] + updates
    return _Step(graph, feeds, fetches)


def _loss(outputs) -> tf.Tensor:
    floats = [o for o in outputs if o.dtype.is_floating]
    if not floats:
        raise GraphError("training graph: the model has no floating-point output to "
                         "build a loss from")
    return tf.add_n([tf.reduce_mean(tf.square(tf.cast(o, tf.float32))) for o in floats],
                    name="loss")


def _add_optimizer(outputs, variables, learning_rate):
    if not variables:
        raise GraphError("training graph: the model has no trainable variables")
    opt = tf.compat.v1.train.AdamOptimizer(learning_rate)
    grads = opt.compute_gradients(_loss(outputs), var_list=list(variables))
    # sparse (IndexedSlices) gradients would need Unique, whose output size depends on the
    # data; dense gradients keep every shape static
    dense = [(tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
             for g, v in grads if g is not None]
    return opt.apply_gradients(dense, name="train_op")


def _from_concrete(concrete, batch_size, training, input_shapes, learning_rate) -> _Step:
    """Freezes (and so inlines) a ConcreteFunction, then rebuilds its variables."""
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    captured = {}  # internal placeholder name -> variable
    for external, internal in concrete.graph.captures:
        if internal.dtype == tf.resource:
            captured[internal.op.name] = external
    var_by_handle = {id(v.handle): v for v in concrete.graph.variables}
    try:
        frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=False,
                                                   aggressive_inlining=True)
    except Exception as exc:  # noqa: BLE001
        raise GraphError(f"cannot inline/freeze the function ({_one_line(exc)})") from None
    graph_def = frozen.graph.as_graph_def()
    inputs = [t for t in frozen.inputs if t.dtype != tf.resource]
    outputs = [t.name for t in frozen.outputs]
    const_vars = {}
    for node in graph_def.node:
        if node.op == "Const" and node.name in captured:
            var = var_by_handle.get(id(captured[node.name]))
            const_vars[node.name] = var.trainable if var is not None else True
    return _import_graph_def(graph_def, [t.name for t in inputs], [t.shape for t in inputs],
                             [t.dtype for t in inputs], outputs, const_vars, batch_size,
                             training, input_shapes, learning_rate)


def _read_graph_def(path: Path):
    from google.protobuf import text_format

    data = path.read_bytes()
    graph_def = tf.compat.v1.GraphDef()
    try:
        if path.suffix.lower() == ".pbtxt":
            text_format.Parse(data.decode("utf-8"), graph_def)
        else:
            graph_def.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError / ParseError
        raise GraphError(f"{path}: not a GraphDef ({_one_line(exc)})") from None
    if not graph_def.node:
        raise GraphError(f"{path}: empty GraphDef (no nodes)")
    return graph_def


def _from_graph_def(graph_def, batch_size, training, input_shapes, learning_rate) -> _Step:
    consumed = set()
    for node in graph_def.node:
        for name in node.input:
            consumed.add(name.lstrip("^").split(":")[0])
    placeholders = [n for n in graph_def.node if n.op == "Placeholder"]
    outputs = [n.name for n in graph_def.node
               if n.name not in consumed and n.op not in ("Const", "NoOp", "Placeholder")
               and n.op not in _VARIABLE_OPS]
    if not outputs:
        raise GraphError("GraphDef has no output ops (every op is consumed or a constant)")
    shapes = [tf.TensorShape(n.attr["shape"].shape) if "shape" in n.attr else None
              for n in placeholders]
    dtypes = [tf.as_dtype(n.attr["dtype"].type) for n in placeholders]
    if any(n.op in _CALL_OPS for n in graph_def.node):
        graph_def, outputs = _inline_graph_def(graph_def, [n.name for n in placeholders],
                                               outputs)
        return _import_graph_def(graph_def, [f"{n.name}:0" for n in placeholders], shapes,
                                 dtypes, outputs, {}, batch_size, training, input_shapes,
                                 learning_rate)
    return _import_graph_def(graph_def, [f"{n.name}:0" for n in placeholders], shapes, dtypes,
                             outputs, {}, batch_size, training, input_shapes, learning_rate)


def _inline_graph_def(graph_def, inputs: list[str], outputs: list[str]):
    """Inlines function calls of a (variable-free) GraphDef with Grappler."""
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    wrapped = tf.compat.v1.wrap_function(
        lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    g = wrapped.graph
    out_tensors = []
    for name in outputs:
        op = g.get_operation_by_name(name)
        out_tensors += list(op.outputs) or [op]
    pruned = wrapped.prune([g.get_tensor_by_name(f"{n}:0") for n in inputs], out_tensors)
    try:
        frozen = convert_variables_to_constants_v2(pruned, lower_control_flow=False,
                                                   aggressive_inlining=True)
    except Exception as exc:  # noqa: BLE001
        raise GraphError(f"cannot inline the GraphDef's function calls ({_one_line(exc)})") \
            from None
    return frozen.graph.as_graph_def(), [t.op.name for t in frozen.outputs]


def _import_graph_def(graph_def, input_names, input_shapes_static, input_dtypes, outputs,
                      const_vars: dict, batch_size, training, input_shapes,
                      learning_rate) -> _Step:
    """Imports a flat GraphDef into a fresh graph with fully shaped inputs.

    `const_vars` (frozen variable Const name -> trainable) become variables again.
    """
    values = {}
    if const_vars:
        from tensorflow.python.framework import tensor_util
        for node in graph_def.node:
            if node.name in const_vars:
                values[node.name] = tensor_util.MakeNdarray(node.attr["value"].tensor)
    graph = tf.Graph()
    with graph.as_default():
        feeds, input_map = [], {}
        for i, (name, shape, dtype) in enumerate(zip(input_names, input_shapes_static,
                                                     input_dtypes)):
            full = _shape_for(i, shape, batch_size, input_shapes, name)
            ph = tf.compat.v1.placeholder(dtype, full, name=f"input_{i}")
            feeds.append(ph)
            input_map[name if ":" in name else f"{name}:0"] = ph
        variables, initial = [], {}
        for name, trainable in const_vars.items():
            value = values[name]
            var = tf.Variable(tf.zeros(value.shape, value.dtype), trainable=trainable,
                              name=f"{name}_var")
            variables.append(var)
            initial[var.handle.op.name] = value  # the frozen weights, for `regal apply`
            input_map[f"{name}:0"] = var.value()
        results = tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                                return_elements=list(outputs), name="")
        out_tensors = []
        for r in results:
            out_tensors += list(r.outputs) if isinstance(r, tf.Operation) else [r]
        fetches = list(out_tensors)
        if training:
            trainable = [v for v in variables if v.trainable]
            if trainable:
                fetches.append(_add_optimizer(out_tensors, trainable, learning_rate))
            else:
                fetches.append(_add_raw_adam(graph, out_tensors, learning_rate))
    return _Step(graph, feeds, fetches, initial)


def _add_raw_adam(graph, outputs, learning_rate):
    """Adam updates for bare VarHandleOps (a GraphDef's variables have no Python objects)."""
    handles = [op.outputs[0] for op in graph.get_operations() if op.type == "VarHandleOp"]
    reachable = {op.name for op in _prune(graph, outputs)}
    handles = [h for h in handles if h.op.name in reachable]
    if not handles:
        raise GraphError("training graph: the GraphDef has no variables (VarHandleOp) to train")
    grads = tf.gradients(_loss(outputs), handles)
    updates = []
    with tf.name_scope("raw_adam"):
        lr = tf.constant(learning_rate, tf.float32)
        b1, b2, eps = (tf.constant(x, tf.float32) for x in (0.9, 0.999, 1e-7))
        for h, g in zip(handles, grads):
            if g is None:
                continue
            g = tf.convert_to_tensor(g)
            dtype = tf.as_dtype(h.op.get_attr("dtype"))
            shape = tf.TensorShape(h.op.get_attr("shape"))
            m = tf.Variable(tf.zeros(shape, dtype), trainable=False)
            v = tf.Variable(tf.zeros(shape, dtype), trainable=False)
            updates.append(tf.raw_ops.ResourceApplyAdam(
                var=h, m=m.handle, v=v.handle, beta1_power=b1, beta2_power=b2, lr=lr,
                beta1=b1, beta2=b2, epsilon=eps, grad=g))
    return tf.group(*updates, name="train_op")


# ---------------------------------------------------------------------------
# pruning and the static conversion


def _prune(graph: tf.Graph, fetches) -> list:
    """Ancestors (data and control) of the fetches, in the graph's creation order."""
    seen = set()
    stack = [f if isinstance(f, tf.Operation) else f.op for f in fetches]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def _dims(shape) -> list[int] | None:
    if shape.rank is None:
        return None
    dims = shape.as_list()
    return None if any(d is None for d in dims) else dims


def _numel(dims) -> int:
    return int(math.prod(dims)) if dims is not None else 0


def _tensor_bytes(t) -> int | None:
    """Bytes of a dense tensor; 0 for handles and refs; None when the shape is unknown."""
    dtype = t.dtype
    if dtype._is_ref_dtype or dtype in (tf.resource, tf.variant):  # noqa: SLF001
        return 0
    dims = _dims(t.shape)
    if dims is None:
        return None
    item = 8 if dtype == tf.string else dtype.size
    return _numel(dims) * item


def _variable_bytes(op) -> int:
    shape = tf.TensorShape(op.get_attr("shape"))
    dims = _dims(shape)
    if dims is None:
        raise GraphError(f"tensor {op.name}:0: variable of unknown shape {shape}")
    return _numel(dims) * tf.as_dtype(op.get_attr("dtype")).base_dtype.size


def _in_dims(op, i: int) -> list[int]:
    dims = _dims(op.inputs[i].shape) if i < len(op.inputs) else None
    return dims if dims is not None else [0]


def _einsum_flops(op, out_numel: int) -> int:
    equation = op.get_attr("equation").decode() if isinstance(
        op.get_attr("equation"), bytes) else op.get_attr("equation")
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    size = {}
    for sub, t in zip(lhs.split(","), op.inputs):
        dims = _dims(t.shape) or []
        head, _, tail = sub.partition("...")
        for letter, d in zip(head, dims):
            size[letter] = d
        for letter, d in zip(tail, dims[len(dims) - len(tail):] if tail else []):
            size[letter] = d
    contracted = set(lhs) - set(rhs) - {",", "."}
    return 2 * out_numel * int(math.prod(size.get(c, 1) for c in contracted))


def _flops(op, out_dims: list) -> int:
    """FLOP estimate: 2mnk for products and convolutions, ~numel for everything else."""
    kind = op.type
    out = out_dims[0] if out_dims else None
    out_numel = _numel(out) if out is not None else 0
    if kind == "MatMul":
        a = _in_dims(op, 0)
        k = a[0] if op.get_attr("transpose_a") else a[-1]
        return 2 * out_numel * k
    if kind in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        a = _in_dims(op, 0)
        k = a[-2] if op.get_attr("adj_x") else a[-1]
        return 2 * out_numel * k
    if kind == "Einsum":
        return _einsum_flops(op, out_numel)
    if kind in ("Conv2D", "Conv3D"):
        return 2 * out_numel * _numel(_in_dims(op, 1)[:-1])
    if kind in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        return 2 * _numel(_in_dims(op, 2)) * _numel(_in_dims(op, 1)[:-1])
    if kind in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2"):
        return 2 * _numel(_in_dims(op, 2)) * _numel((out or [0])[:-1])
    if kind == "DepthwiseConv2dNative":
        return 2 * out_numel * _numel(_in_dims(op, 1)[:2])
    if kind == "DepthwiseConv2dNativeBackpropInput":
        return 2 * _numel(_in_dims(op, 2)) * _numel(_in_dims(op, 1)[:2])
    if kind == "DepthwiseConv2dNativeBackpropFilter":
        return 2 * _numel(_in_dims(op, 2)) * _numel((out or [0])[:2])
    sizes = [_numel(d) for d in out_dims if d is not None]
    sizes += [_numel(_dims(t.shape)) for t in op.inputs
              if t.dtype not in (tf.resource, tf.variant) and _dims(t.shape) is not None]
    return max(sizes, default=0)


def conv2d_backprop_filter_scratch(out_rows: int, out_cols: int, filter_rows: int,
                                   filter_cols: int, in_depth: int, out_depth: int,
                                   itemsize: int = 4) -> int:
    """Bytes of the im2col buffer TensorFlow's CPU Conv2DBackpropFilter allocates.

    The kernel packs `shard` images' patches at once, `shard` chosen so that one shard's
    matmul operands fill a 30 MiB working set (its L3-cache target): hence the buffer does
    not grow with the batch. Formula and evidence: module docstring.
    """
    patches = out_rows * out_cols
    filter_total = filter_rows * filter_cols * in_depth
    col = patches * filter_total
    work = col + patches * out_depth + filter_total * out_depth
    if work <= 0:
        return 0
    working_set = CONV_WORKING_SET_BYTES // itemsize
    shard = -(-working_set // work)  # ceil
    return int(shard * col * itemsize)


def conv2d_backprop_input_scratch(batch: int, out_rows: int, out_cols: int,
                                  filter_rows: int, filter_cols: int, in_depth: int,
                                  out_depth: int, itemsize: int = 4,
                                  threads: int = SCRATCH_CPU_THREADS) -> int:
    """Bytes of the col2im buffer TensorFlow's CPU Conv2DBackpropInput allocates.

    Same working-set sharding as the filter gradient (operands A = P O, B = F O, C = P F),
    except that one image at a time is packed (shard = 1) when the batch is 1 or one
    image's work split over `threads` reaches the L2 size: then the buffer is C.
    """
    patches = out_rows * out_cols
    filter_total = filter_rows * filter_cols * in_depth
    col = patches * filter_total
    work = patches * out_depth + filter_total * out_depth + col
    if work <= 0:
        return 0
    if batch == 1 or work // max(threads, 1) >= CONV_L2_BYTES // itemsize:
        return int(col * itemsize)
    shard = -(-(CONV_WORKING_SET_BYTES // itemsize) // work)
    return int(shard * col * itemsize)


def _kernel_scratch(op) -> int:
    """Temporary bytes the op's kernel holds while it runs (see the module docstring)."""
    if op.type not in ("Conv2DBackpropFilter", "Conv2DBackpropInput"):
        return 0
    grad = _dims(op.inputs[2].shape)          # out_backprop
    filt = _dims((op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]).shape)
    if grad is None or filt is None or len(grad) != 4 or len(filt) != 4:
        return 0                              # [rows, cols, in depth, out depth]
    fmt = op.get_attr("data_format")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    rows, cols = (grad[2], grad[3]) if fmt == "NCHW" else (grad[1], grad[2])
    item = op.outputs[0].dtype.size
    if op.type == "Conv2DBackpropFilter":
        return conv2d_backprop_filter_scratch(rows, cols, *filt, itemsize=item)
    return conv2d_backprop_input_scratch(grad[0], rows, cols, *filt, itemsize=item)


class _Ancestry:
    """`is_ancestor(u, v)` by per-node ancestor bitsets, built on first use (n^2/8 bytes)."""

    def __init__(self, graph: ComputationGraph):
        self.graph = graph
        self.bits = None

    def is_ancestor(self, u: int, v: int) -> bool:
        if self.bits is None:
            g = self.graph
            words = (g.num_nodes + 63) // 64
            bits = np.zeros((g.num_nodes, words), dtype=np.uint64)
            for w in g.topo_order.tolist():
                preds = g.predecessors(w)
                if len(preds):
                    row = np.bitwise_or.reduce(bits[preds], axis=0)
                    for p in preds.tolist():
                        row[p >> 6] |= np.uint64(1 << (p & 63))
                    bits[w] = row
            self.bits = bits
        return bool(self.bits[v, u >> 6] & np.uint64(1 << (u & 63)))


def with_forwarding(graph: ComputationGraph, held=()) -> ComputationGraph:
    """`graph` with TensorFlow's in-place buffer forwarding modelled as aliases.

    TensorFlow forwards an input buffer when the op holds the last reference to it. Output
    0 of a FORWARDING_OPS op aliases its first input that has the output's size, that this
    op is sure to consume last (every other consumer is an ancestor of this op, so it has
    finished under any schedule), on one port, that is not itself an alias and whose
    producer is not a variable read, constant or feed; `held` lists tensor ids that TF
    keeps referenced elsewhere (fetched tensors), which are never forwarded into.
    Idempotent; outputs that already alias something are left alone.
    """
    alias = graph.tensor_alias.copy()
    types = graph.op_types
    held = {int(t) for t in held}
    ancestry = _Ancestry(graph)
    for v in range(graph.num_nodes):
        if types[v] not in FORWARDING_OPS:
            continue
        out = int(graph.output_ptr[v])
        if graph.output_ptr[v + 1] - out < 1 or alias[out] != -1:
            continue
        inputs = graph.inputs(v).tolist()
        for t in inputs:
            producer = int(graph.tensor_producer[t])
            if (graph.tensor_size[t] != graph.tensor_size[out] or graph.tensor_alias[t] != -1
                    or t in held or types[producer] in _HELD_PRODUCERS
                    or inputs.count(t) != 1):
                continue
            others = [u for u in set(graph.consumers(t).tolist()) if u != v]
            if all(ancestry.is_ancestor(u, v) for u in others):
                alias[out] = t
                break
    alias.setflags(write=False)
    return graph._replace(tensor_alias=alias)


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
            costs[v] = LAUNCH_US + max(_flops(op, out_dims) / FLOPS_PER_US,
                                       moved / BYTES_PER_US)
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


# ---------------------------------------------------------------------------
# run mode


def _random_value(rng: np.random.Generator, shape, dtype: tf.DType) -> np.ndarray:
    if dtype.is_floating:
        return (0.05 * rng.standard_normal(shape)).astype(dtype.as_numpy_dtype)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        return rng.integers(0, 2, size=shape).astype(dtype.as_numpy_dtype)
    raise GraphError(f"cannot make a random feed of dtype {dtype.name}")


def _run_cost_graph(step: _Step, ops: list, *, seed: int, grappler: bool,
                    warmup_runs: int) -> ComputationGraph:
    from regal.io.costgraph import parse_costgraph_bytes

    rng = np.random.default_rng(seed)
    graph = step.graph
    with graph.as_default():
        tf.compat.v1.set_random_seed(seed)
        inits = []
        for op in ops:
            if op.type == "VarHandleOp":
                dtype = tf.as_dtype(op.get_attr("dtype"))
                shape = tf.TensorShape(op.get_attr("shape")).as_list()
                inits.append(tf.raw_ops.AssignVariableOp(
                    resource=op.outputs[0], value=tf.constant(_random_value(rng, shape, dtype))))
            elif op.type in ("VariableV2", "Variable"):
                dtype = tf.as_dtype(op.get_attr("dtype")).base_dtype
                shape = tf.TensorShape(op.get_attr("shape")).as_list()
                inits.append(tf.compat.v1.assign(op.outputs[0],
                                                 _random_value(rng, shape, dtype)))
        init = tf.group(*inits)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.build_cost_model = 1
    config.graph_options.build_cost_model_after = warmup_runs  # measure warm steps only
    if not grappler:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
        config.graph_options.optimizer_options.do_constant_folding = False
        config.graph_options.optimizer_options.do_common_subexpression_elimination = False
        config.graph_options.optimizer_options.do_function_inlining = False
    feed = {ph: _random_value(rng, ph.shape.as_list(), ph.dtype) for ph in step.feeds}
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        for _ in range(warmup_runs):
            sess.run(step.fetches, feed)
        sess.run(step.fetches, feed, options=options, run_metadata=metadata)
    if not metadata.cost_graph.node:
        raise GraphError("the traced run returned an empty cost graph")
    graph = parse_costgraph_bytes(metadata.cost_graph.SerializeToString(), source="cost graph")
    return _with_variable_memory(graph, ops)


def _with_variable_memory(graph: ComputationGraph, ops: list) -> ComputationGraph:
    """Charges each variable's bytes to its first reader (or itself) in a measured graph,
    and gives it the colocation groups of the ops it shares by name with the step."""
    from regal.graph import group_leaders

    index = {name: i for i, name in enumerate(graph.names.tolist())}
    persistent = graph.persistent_memory.copy()
    for owner, nbytes in _variable_owners(ops).items():
        if owner in index:
            persistent[index[owner]] += nbytes
    persistent.setflags(write=False)
    pairs = [(index[ops[a].name], index[ops[b].name]) for a, b in colocation_pairs(ops)
             if ops[a].name in index and ops[b].name in index]
    leaders = group_leaders(graph.num_nodes, pairs)
    leaders.setflags(write=False)
    return graph._replace(persistent_memory=persistent, colocation=leaders)


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


# ---------------------------------------------------------------------------
# added for regal.measure (issue 7): the tf.Graph behind import_model's static graph


class ImportedStep(NamedTuple):
    """A static import together with the tf.compat.v1 graph it was converted from."""
    graph: ComputationGraph   # exactly what import_model(..., run=False) returns
    tf_graph: tf.Graph        # the step, built as import_model builds it
    feeds: list               # placeholder tensors, fully shaped
    fetches: list             # tensors and ops one step runs
    ops: list                 # tf ops of `graph`, in its node order
    values: dict = {}         # variable op name -> initial value the source carries
    #                           (a SavedModel's or tf.function's weights; {} for Keras
    #                           models, whose weights regal.measure reads from the model)


def import_step(source, *, batch_size: int = 1, training: bool = False,
                input_shapes: Sequence[Sequence[int]] | None = None,
                learning_rate: float = 1e-3, forwarding: bool = True,
                kernel_scratch: bool = True, trust_code: bool = False) -> ImportedStep:
    """`import_model` (static mode) that also hands back the TensorFlow graph, so a solution
    for the graph can be applied to the very ops it was computed for (regal.measure)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    step = _build_step(source, batch_size=batch_size, training=training,
                       input_shapes=input_shapes, learning_rate=learning_rate,
                       trust_code=trust_code)
    ops = _prune(step.graph, step.fetches)
    graph = _static_graph(ops, step.fetches, forwarding=forwarding,
                          kernel_scratch=kernel_scratch)
    kept = {op.name for op in ops}
    values = {name: v for name, v in step.values.items() if name in kept}
    return ImportedStep(graph, step.graph, step.feeds, step.fetches, ops, values)
