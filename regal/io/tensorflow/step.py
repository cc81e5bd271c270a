"""One inference or training step of a source, built in a fresh `tf.compat.v1.Graph`, and
the ops it runs (`_prune`).

Everything is rebuilt inside one graph: legacy Keras (tf-keras, selected by
`TF_USE_LEGACY_KERAS=1`) then emits plain ops with no nested function calls, and sources
that do carry function calls (a tf.function, a SavedModel signature, a GraphDef with a
function library) are frozen with Grappler's aggressive inlining first. The graph is then
pruned to the ancestors of what a step fetches (outputs; for training also the optimizer
update and Keras' moving-average updates), so variable initializers and Keras' symbolic
construction ops never appear.

Training graphs: loss = sum over float outputs of mean(square(output)), gradients with
`tf.gradients`, update with `tf.compat.v1.train.AdamOptimizer` (a raw `ResourceApplyAdam`
per variable for GraphDef files whose variables are bare handles).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.graph import GraphError
from regal.io.tensorflow.ops import _CALL_OPS, _VARIABLE_OPS
from regal.io.tensorflow.sources import (_one_line, _read_graph_def, code_in_keras_file,
                                         export_keras3, keras_major_version, resolve_model)


class _Step(NamedTuple):
    """One training or inference step, ready to convert or run."""
    graph: tf.Graph
    feeds: list            # placeholder tensors, fully shaped
    fetches: list          # tensors and ops one step runs
    values: dict = {}      # variable op name -> initial value the source carries (weights)


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
