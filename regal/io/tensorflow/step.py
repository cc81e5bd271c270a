"""One inference or training step of a source, built in a fresh `tf.compat.v1.Graph`, and
the ops it runs (`_prune`).

Everything is rebuilt inside one graph: legacy Keras (tf-keras, selected by
`TF_USE_LEGACY_KERAS=1`) then emits plain ops with no nested function calls, and sources
that do carry function calls (a tf.function, a SavedModel signature, a GraphDef with a
function library) are frozen with Grappler's aggressive inlining first. The graph is then
pruned to the ancestors of what a step fetches (outputs; for training also the optimizer
update and Keras' moving-average updates), so variable initializers and Keras' symbolic
construction ops never appear.

Training graphs: the loss is the model's compiled loss when a Keras model was compiled with
one (`Model.compile(loss=...)`, built by Keras' own `LossesContainer` with the model's loss
weights and regularisation losses, on label placeholders `label_{i}` shaped like the output,
or like it less its last axis and int32 for a sparse cross-entropy), or the loss `--loss`
names (`loss=`: a `tf.keras.losses` name, `NAME_from_logits` for the cross-entropies, a
Loss object), or else the stand-in loss: sum over float outputs of mean(square(output)),
which needs no labels (`loss="stand-in"` picks it for a compiled model too). A compiled or
chosen loss is one of the step's fetches (Keras' train step returns it); the stand-in is
not, so the graphs of uncompiled models are the ones imported before losses existed.
Gradients with `tf.gradients`, update with `tf.compat.v1.train.AdamOptimizer` (a raw
`ResourceApplyAdam` per variable for GraphDef files whose variables are bare handles).

Variables rebuilt from a frozen tf.function or SavedModel take the captured variable's own
name (`dense/kernel`), or `{const}_var` where the capture has none.
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
                                         export_keras3, keras_major_version,
                                         load_custom_objects, load_keras_file, resolve_model)

STAND_IN = "stand-in"
STAND_IN_TEXT = ("stand-in loss: sum over float outputs of mean(square(output)), no labels "
                 "(the model has no compiled loss; --loss NAME picks one)")
# the cross-entropies that `--loss NAME_from_logits` builds on logits
_FROM_LOGITS = {"sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
                "categorical_crossentropy": "CategoricalCrossentropy",
                "binary_crossentropy": "BinaryCrossentropy"}


class _Step(NamedTuple):
    """One training or inference step, ready to convert or run."""
    graph: tf.Graph
    feeds: list            # placeholder tensors, fully shaped (inputs, then labels)
    fetches: list          # tensors and ops one step runs
    values: dict = {}      # variable op name -> initial value the source carries (weights)
    outputs: list = []     # the model's outputs (fetched)
    labels: list = []      # label placeholders (also in feeds); [] for the stand-in loss
    loss: object = None    # the training loss tensor (fetched unless the stand-in)
    loss_text: str = ""    # what the loss is, in words ("" for an inference step)
    train_ops: list = []   # the optimizer update and Keras' own updates (fetched)


class _Loss(NamedTuple):
    """A training loss as `Model.compile` takes it."""
    losses: object         # `loss=`: a name, Loss object, function, list or dict of them
    weights: object = None  # `loss_weights=`
    origin: str = "compiled"  # where it comes from: "compiled", "--loss"


def resolve_loss(loss):
    """`loss` as the importer takes it -> None (the model's compiled loss, else the
    stand-in), STAND_IN, or a _Loss. A name is checked here: an unknown one is a ValueError."""
    if loss is None or isinstance(loss, _Loss):
        return loss
    if isinstance(loss, str):
        if loss.replace("_", "-").lower() == STAND_IN:
            return STAND_IN
        base = loss[:-len("_from_logits")] if loss.endswith("_from_logits") else None
        try:
            if base is not None:
                if base not in _FROM_LOGITS:
                    raise ValueError(loss)
                obj = getattr(tf.keras.losses, _FROM_LOGITS[base])(from_logits=True)
            else:
                obj = tf.keras.losses.get(loss)
        except (ValueError, TypeError):
            raise ValueError(f"--loss {loss!r}: unknown loss; expected stand-in, a "
                             f"tf.keras.losses name (mse, categorical_crossentropy, "
                             f"sparse_categorical_crossentropy, ...), or "
                             f"{'/'.join(_FROM_LOGITS)} with _from_logits") from None
        return _Loss(obj, None, "--loss")
    return _Loss(loss, None, "loss=")


def _compiled_loss(model):
    """The loss `model` was compiled with, as a _Loss; None when it has none."""
    losses = getattr(model, "loss", None)
    if losses is None:
        return None
    weights = getattr(model, "loss_weights", None)
    container = getattr(model, "compiled_loss", None)
    if weights is None and container is not None:
        weights = getattr(container, "_user_loss_weights", None)
    return _Loss(losses, weights, "compiled")


def _build_step(source, *, batch_size, training, input_shapes, learning_rate,
                trust_code: bool = False, loss=None, custom_objects=None,
                microbatches: int = 1) -> _Step:
    loss = resolve_loss(loss)
    custom_objects = load_custom_objects(custom_objects)  # the user's file runs once
    if loss is not None and not training:
        raise ValueError("--loss: only a training step has a loss (add --training)")
    if isinstance(source, str):
        source = resolve_model(source)
    if isinstance(source, os.PathLike):
        return _from_path(Path(source), batch_size, training, input_shapes, learning_rate,
                          trust_code, loss=loss, custom_objects=custom_objects,
                          microbatches=microbatches)
    if isinstance(source, tf.keras.Model):
        model = source
        if not _is_graph_network(model):
            raise GraphError(f"Keras model {model.name!r} is subclassed: pass a tf.function "
                             f"with an input_signature that calls it instead")
        if loss is None and training:
            loss = _compiled_loss(model) or STAND_IN  # the clone is not compiled
        return _from_keras(lambda: tf.keras.models.clone_model(model), batch_size, training,
                           input_shapes, learning_rate, loss=loss, microbatches=microbatches)
    if microbatches > 1 and (not callable(source) or hasattr(source, "get_concrete_function")
                             or hasattr(source, "structured_input_signature")):
        raise ValueError("--microbatches: only a Keras model's step is built in micro-batches "
                         "(a Keras model, a callable returning one, or a Keras 2 .keras/.h5 "
                         "file)")
    if hasattr(source, "get_concrete_function"):  # tf.function
        try:
            concrete = source.get_concrete_function()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tf.function needs an input_signature ({exc})") from None
        return _from_concrete(concrete, batch_size, training, input_shapes, learning_rate,
                              loss=loss)
    if hasattr(source, "structured_input_signature") and hasattr(source, "graph"):
        return _from_concrete(source, batch_size, training, input_shapes, learning_rate,
                              loss=loss)
    if callable(source):
        return _from_keras(source, batch_size, training, input_shapes, learning_rate,
                           loss=loss, microbatches=microbatches)
    raise ValueError(f"cannot import {type(source).__name__}: expected a Keras model, a "
                     f"callable returning one, a tf.function or a path")


def _is_graph_network(model) -> bool:
    return bool(getattr(model, "_is_graph_network", False)) or \
        isinstance(model, tf.keras.Sequential)


def _from_path(path: Path, batch_size, training, input_shapes, learning_rate,
               trust_code: bool = False, *, loss=None, custom_objects=None,
               microbatches: int = 1) -> _Step:
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if microbatches > 1 and (path.is_dir() or path.suffix.lower() not in (".keras", ".h5",
                                                                           ".hdf5")
                             or (keras_major_version(path) or 0) >= 3):
        raise ValueError(f"{path}: --microbatches: only a Keras 2 model's step is built in "
                         f"micro-batches (a Keras model, a callable returning one, or a "
                         f"Keras 2 .keras/.h5 file)")
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
        return _from_concrete(concrete, batch_size, training, input_shapes, learning_rate,
                              loss=loss)
    suffix = path.suffix.lower()
    if suffix in (".keras", ".h5", ".hdf5") and not trust_code:
        code = code_in_keras_file(path, provided=custom_objects)
        if code:
            also = ""
            if "names module" in code and custom_objects is not None:
                also = (f"; the class is not among the custom objects of "
                        f"{custom_objects.source}")
            elif "names module" in code:
                also = ", or --custom-objects FILE, your own file defining that class"
            raise ValueError(f"{path}: {code}, Python code that loading the file would run; "
                             f"pass --trust-code (trust_code=True) only if you trust the "
                             f"file{also}")
    if suffix in (".keras", ".h5", ".hdf5") and (keras_major_version(path) or 0) >= 3:
        with tempfile.TemporaryDirectory(prefix="regal-keras3-") as tmp:
            saved = export_keras3(path, Path(tmp) / "saved_model", trust_code=trust_code,
                                  custom_objects=custom_objects)
            return _from_path(saved, batch_size, training, input_shapes, learning_rate,
                              loss=loss)
    if suffix in (".keras", ".h5", ".hdf5"):
        # compiled only where the step needs the model's own loss
        model = load_keras_file(path, trust_code=trust_code, custom_objects=custom_objects,
                                compile=training and loss is None)
        return _build_step(model, batch_size=batch_size, training=training,
                           input_shapes=input_shapes, learning_rate=learning_rate,
                           loss=loss, microbatches=microbatches)
    if suffix in (".pb", ".pbtxt"):
        return _from_graph_def(_read_graph_def(path), batch_size, training, input_shapes,
                               learning_rate, loss=loss)
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


def _from_keras(build: Callable, batch_size, training, input_shapes, learning_rate, *,
                loss=None, microbatches: int = 1) -> _Step:
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
        if microbatches > 1:
            return _microbatched(graph, model, batch_size, input_shapes, learning_rate,
                                 loss, microbatches)
        mark = len(graph.get_operations())
        feeds = _input_placeholders(model, batch_size, input_shapes)
        outputs = tf.nest.flatten(model(feeds if len(feeds) > 1 else feeds[0],
                                        training=training))
        fetches = list(outputs)
        if not training:
            return _Step(graph, feeds, fetches, outputs=outputs)
        if loss is None:
            loss = _compiled_loss(model) or STAND_IN
        regularization = list(model.losses) if loss != STAND_IN else []
        new = {op.name for op in graph.get_operations()[mark:]}
        updates = [u for u in model.updates if getattr(u, "name", None) in new]
        if loss == STAND_IN:  # exactly the graph of the importer before losses existed
            labels, loss_tensor, text = [], _loss(outputs), STAND_IN_TEXT
        else:
            # regularisation losses of the weights and of this call, not those of Keras'
            # symbolic construction on its own input placeholders
            fed = {t.op.name for t in feeds}
            regularization = [r for r in regularization if not any(
                op.type.startswith("Placeholder") and op.name not in fed
                for op in _prune(graph, [r]))]
            labels, loss_tensor, text = _model_loss(loss, outputs, model.output_names,
                                                    regularization)
            fetches.append(loss_tensor)
        train_op = _add_optimizer(loss_tensor, model.trainable_variables, learning_rate)
        fetches += [train_op] + updates
    return _Step(graph, feeds + [t for t in labels if t is not None], fetches,
                 outputs=outputs, labels=[t for t in labels if t is not None],
                 loss=loss_tensor, loss_text=text, train_ops=[train_op] + updates)


def _input_placeholders(model, batch_size, input_shapes) -> list:
    """One fully shaped placeholder per model input, `input_i` (in the current name scope)."""
    feeds = []
    for i, spec in enumerate(model.inputs):
        name = spec.name.split(":")[0]
        shape = _shape_for(i, spec.shape, batch_size, input_shapes, f"{name}:0")
        feeds.append(tf.compat.v1.placeholder(spec.dtype, shape, name=f"input_{i}"))
    return feeds


def _microbatched(graph, model, batch_size, input_shapes, learning_rate, loss,
                  count: int) -> _Step:
    """A training step of `count` micro-batches, each under its own `microbatchM/` scope: its
    inputs (and labels), forward pass, loss (the micro-batch's share: its loss / count) and
    gradients; then, outside them, the gradients accumulated per weight one micro-batch after
    the other (`gradients_sum/`), and one Adam update. What pipeline schedules need to
    overlap: micro-batch m's backward has no edge to micro-batch m+1's forward. Keras' own updates (batch-norm statistics) and
    regularisation losses are left out of micro-batched steps."""
    if loss is None:
        loss = _compiled_loss(model) or STAND_IN
    variables = list(model.trainable_variables)
    if not variables:
        raise GraphError("training graph: the model has no trainable variables")
    optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate)
    feeds, labels, outputs, losses, grads = [], [], [], [], []
    text = STAND_IN_TEXT
    for m in range(count):
        with tf.name_scope(f"microbatch{m}"):
            inputs = _input_placeholders(model, batch_size, input_shapes)
            out = tf.nest.flatten(model(inputs if len(inputs) > 1 else inputs[0],
                                        training=True))
            if loss == STAND_IN:
                mine, value = [], _loss(out)
            else:
                mine, value, text = _model_loss(loss, out, model.output_names, [])
            share = tf.multiply(value, 1.0 / count, name="share")
            # as a single step builds them (gated per op, like `minimize`)
            found = [g for g, _ in optimizer.compute_gradients(share, var_list=variables)]
        feeds += inputs
        labels += [t for t in mine if t is not None]
        outputs += out
        losses.append(share)
        grads.append([tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                      for g in found])
    with tf.name_scope("gradients_sum"):
        # accumulated one micro-batch at a time, as into a buffer: a micro-batch's gradient
        # is freed once added (a sum of all K at the end would hold K sets of gradients)
        summed = []
        for j, v in enumerate(variables):
            parts = [g[j] for g in grads if g[j] is not None]
            if parts:
                total = parts[0]
                for part in parts[1:]:
                    total = tf.add(total, part)
                summed.append((total, v))
    total = tf.add_n(losses, name="loss")
    train_op = optimizer.apply_gradients(summed, name="train_op")
    text = f"{text}, the mean over {count} micro-batches"
    return _Step(graph, feeds + labels, outputs + [total, train_op], outputs=outputs,
                 labels=labels, loss=total, loss_text=text, train_ops=[train_op])


def _is_sparse(loss_object) -> bool:
    """Whether a Keras loss takes integer class labels (a sparse cross-entropy)."""
    fn = getattr(loss_object, "fn", loss_object)
    return "sparse" in f"{getattr(fn, '__name__', '')} {type(loss_object).__name__}".lower()


def _loss_name(loss_object) -> str:
    fn = getattr(loss_object, "fn", None)
    name = getattr(loss_object, "name", None) or getattr(loss_object, "__name__", None)
    if fn is not None and getattr(loss_object, "_fn_kwargs", {}).get("from_logits"):
        name = f"{name} (from logits)"
    return str(name or type(loss_object).__name__)


def _model_loss(spec: _Loss, outputs, output_names, regularization):
    """The loss `spec` on `outputs` as Keras' compiled loss computes it, with one label
    placeholder per output that has a loss -> (labels, loss tensor, words)."""
    from tf_keras.src.engine import compile_utils  # the class behind Model.compiled_loss

    container = compile_utils.LossesContainer(spec.losses, spec.weights,
                                              output_names=list(output_names or []) or None)
    y_pred = outputs if len(outputs) > 1 else outputs[0]
    try:
        container.build(y_pred)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"training loss: {_one_line(exc)}") from None
    objects = list(container._losses)
    labels, names = [], []
    for i, (out, obj) in enumerate(zip(outputs, objects)):
        if obj is None:
            labels.append(None)
            continue
        if _is_sparse(obj):  # class indices: the output's shape less its class axis
            shape, dtype = out.shape[:-1], tf.int32
        else:
            shape, dtype = out.shape, out.dtype
        labels.append(tf.compat.v1.placeholder(dtype, shape, name=f"label_{i}"))
        names.append(_loss_name(obj))
    if not names:
        raise GraphError("training graph: the loss applies to none of the model's outputs")
    y_true = labels if len(outputs) > 1 else labels[0]
    total = container(y_true, y_pred, regularization_losses=regularization or None)
    loss = tf.identity(total, name="training_loss")
    where = {"compiled": "the model's compiled loss", "--loss": "--loss"}.get(
        spec.origin, "the given loss")
    text = (f"{where}: {', '.join(dict.fromkeys(names))} on label placeholders "
            f"{', '.join(t.name for t in labels if t is not None)}")
    if regularization:
        text += f", plus {len(regularization)} regularisation losses"
    return labels, loss, text


def _loss(outputs) -> tf.Tensor:
    floats = [o for o in outputs if o.dtype.is_floating]
    if not floats:
        raise GraphError("training graph: the model has no floating-point output to "
                         "build a loss from")
    return tf.add_n([tf.reduce_mean(tf.square(tf.cast(o, tf.float32))) for o in floats],
                    name="loss")


def _add_optimizer(loss, variables, learning_rate):
    if not variables:
        raise GraphError("training graph: the model has no trainable variables")
    opt = tf.compat.v1.train.AdamOptimizer(learning_rate)
    grads = opt.compute_gradients(loss, var_list=list(variables))
    # sparse (IndexedSlices) gradients would need Unique, whose output size depends on the
    # data; dense gradients keep every shape static
    dense = [(tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
             for g, v in grads if g is not None]
    return opt.apply_gradients(dense, name="train_op")


def _from_concrete(concrete, batch_size, training, input_shapes, learning_rate, *,
                   loss=None) -> _Step:
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
    const_vars, var_names = {}, {}
    for node in graph_def.node:
        if node.op == "Const" and node.name in captured:
            var = var_by_handle.get(id(captured[node.name]))
            const_vars[node.name] = var.trainable if var is not None else True
            name = _op_name(getattr(var, "name", None) or "") if var is not None else None
            if name:
                var_names[node.name] = name
    return _import_graph_def(graph_def, [t.name for t in inputs], [t.shape for t in inputs],
                             [t.dtype for t in inputs], outputs, const_vars, batch_size,
                             training, input_shapes, learning_rate, loss=loss,
                             var_names=var_names)


def _op_name(name: str) -> str | None:
    """A variable's name ('dense/kernel:0') as a valid op name ('dense/kernel'); None if
    nothing of it is left."""
    import re

    name = re.sub(r"[^A-Za-z0-9_.\-/>]", "_", name.split(":")[0]).strip("/")
    name = re.sub(r"/+", "/", name)
    if name and not re.match(r"[A-Za-z0-9.]", name):
        name = f"v{name}"
    return name or None


def _from_graph_def(graph_def, batch_size, training, input_shapes, learning_rate, *,
                    loss=None) -> _Step:
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
                                 learning_rate, loss=loss)
    return _import_graph_def(graph_def, [f"{n.name}:0" for n in placeholders], shapes, dtypes,
                             outputs, {}, batch_size, training, input_shapes, learning_rate,
                             loss=loss)


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
                      learning_rate, *, loss=None, var_names: dict | None = None) -> _Step:
    """Imports a flat GraphDef into a fresh graph with fully shaped inputs.

    `const_vars` (frozen variable Const name -> trainable) become variables again, named
    as `var_names` (Const name -> the captured variable's name) says, else `{const}_var`.
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
                              name=(var_names or {}).get(name) or f"{name}_var")
            variables.append(var)
            initial[var.handle.op.name] = value  # the frozen weights, for `regal apply`
            input_map[f"{name}:0"] = var.value()
        results = tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                                return_elements=list(outputs), name="")
        out_tensors = []
        for r in results:
            out_tensors += list(r.outputs) if isinstance(r, tf.Operation) else [r]
        fetches = list(out_tensors)
        if not training:
            return _Step(graph, feeds, fetches, initial, outputs=out_tensors)
        if loss is None or loss == STAND_IN:  # no compiled loss comes with a graph
            labels, loss_tensor, text = [], _loss(out_tensors), STAND_IN_TEXT
        else:
            labels, loss_tensor, text = _model_loss(loss, out_tensors, None, [])
            labels = [t for t in labels if t is not None]
            fetches.append(loss_tensor)
        trainable = [v for v in variables if v.trainable]
        if trainable:
            train_op = _add_optimizer(loss_tensor, trainable, learning_rate)
        else:
            train_op = _add_raw_adam(graph, out_tensors, loss_tensor, learning_rate)
        fetches.append(train_op)
    return _Step(graph, feeds + labels, fetches, initial, outputs=out_tensors, labels=labels,
                 loss=loss_tensor, loss_text=text, train_ops=[train_op])


def _add_raw_adam(graph, outputs, loss, learning_rate):
    """Adam updates for bare VarHandleOps (a GraphDef's variables have no Python objects)."""
    handles = [op.outputs[0] for op in graph.get_operations() if op.type == "VarHandleOp"]
    reachable = {op.name for op in _prune(graph, outputs)}
    handles = [h for h in handles if h.op.name in reachable]
    if not handles:
        raise GraphError("training graph: the GraphDef has no variables (VarHandleOp) to train")
    grads = tf.gradients(loss, handles)
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
