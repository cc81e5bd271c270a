"""`regal apply`: a solution written into the model's own graph (GraphDef, device map,
placement with each device's order, and a SavedModel for Keras and SavedModel sources).

The SavedModel (TF1 format, devices kept) is the placed step as it can run and train:

* variables stay variables: their values go to `variables/` through a Saver (each is
  assigned from a fed placeholder before saving), never into the graph as constants, so
  `saved_model.pb` holds the ops only and the 2 GB protobuf limit does not bind the weights;
* each variable starts from the source's weights where it has them (a Keras model's, a
  SavedModel's or tf.function's), else from its own initialiser in the step as imported
  (Adam's slots zero, `beta1_power` = beta1, a Keras layer's initialiser), else (a bare
  GraphDef variable) seeded random values, which the result counts as unmatched;
* variable names are the source's (Keras layer weights `fc1/kernel`, a SavedModel's
  captured variables' names; `regal.io.tensorflow.step`);
* signatures: `serving_default` (inputs -> outputs) and, for a training step, `train_step`
  (inputs and labels -> `loss`): one training step with the placement, the loss returned
  once the optimizer update (and Keras' own updates) have run. The stand-in loss, which the
  step does not fetch, is added for the signature beside the op it reads. In a training
  step a device's order may put an op that reads the labels before an output, so
  `serving_default` then takes the labels too.

Running it as placed: no soft placement needed on a machine with the devices, but Grappler's
remapper must be off (`rewrite_options.remapping = OFF`), since it fuses a MatMul and the
BiasAdd after it into one op on the MatMul's device even when they were put on two
(tests/test_apply_training.py checks every op's device from the run's step statistics).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf  # loaded by regal.measure's __init__, quietly and with Keras 2

from regal.files import write_bytes, write_json
from regal.io.solution import check_device_format
from regal.io.tensorflow import (ImportedStep, import_step, keras_major_version,
                                 load_custom_objects, resolve_model)
from regal.io.tensorflow.sources import load_keras_file
from regal.measure.placed import (_assign_from_placeholder, _random, device_name,
                                  load_solution_record, place, placed_graph_def)

__all__ = ["apply_solution"]


def _source_weights(source, trust_code: bool = False, custom_objects=None) -> dict:
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
        model = load_keras_file(source, trust_code=trust_code, custom_objects=custom_objects)
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
                   trust_code: bool = False, loss=None, custom_objects=None) -> dict:
    """Writes placed_graph.pb, device_map.json, placement.json (and saved_model/) to out_dir.
    `trust_code`: a Keras file with code in it may load; `loss`, `custom_objects`: as
    `regal.io.tensorflow.import_step` takes them (the same as for the solved graph).

    Returns {"files": [...], "moved": {...}, "control_edges": int, "unmatched_variables":
    int or None, "no_saved_model": why the SavedModel was not written, or None, "loss":
    the training step's loss in words ("" for inference), "signatures": the SavedModel's}.
    """
    record = load_solution_record(solution)
    check_device_format(device_format, record["devices"]["count"])
    custom_objects = load_custom_objects(custom_objects)  # the user's file runs once
    step = model if isinstance(model, ImportedStep) else import_step(
        model, batch_size=batch_size, training=training, input_shapes=input_shapes,
        trust_code=trust_code, loss=loss, custom_objects=custom_objects)
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
            "fingerprint": step.graph.fingerprint(),
            "loss": step.loss_text,
            "labels": [t.name for t in step.labels]}
    path = out / "placement.json"
    write_json(path, meta, indent=1)
    files.append(str(path))
    edges = sum(max(len(o) - 1, 0) for o in placed.order)
    if saved_model is None:
        saved_model = not isinstance(model, ImportedStep) and _is_keras_or_savedmodel(model)
    unmatched = no_saved_model = None
    signatures = []
    if saved_model:
        # the source's own weights: a SavedModel's/tf.function's come with the step,
        # a Keras model's are read from the model
        weights = dict(step.values)
        if not isinstance(model, ImportedStep):
            weights.update(_source_weights(model, trust_code, custom_objects))
        try:
            unmatched, signatures = _write_saved_model(graph_def, step, weights,
                                                       out / "saved_model")
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
            "unmatched_variables": unmatched, "no_saved_model": no_saved_model,
            "loss": step.loss_text, "signatures": signatures}


def _write_saved_model(graph_def, step: ImportedStep, weights: dict, path: Path) -> tuple:
    """A TF1 SavedModel of the placed graph -> (how many variables got random values, the
    signature names). Variable values go through placeholders into a Saver's checkpoint."""
    graph_def = _with_loss(graph_def, step)
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
        variables = _register_variables(g)  # so the SavedModel saves and restores them
        signatures = _signatures(g, step)
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    # built beside `path`, then swapped in: a failure leaves the previous SavedModel whole
    building = path.with_name(f".{path.name}.building")
    shutil.rmtree(building, ignore_errors=True)
    rng = np.random.default_rng(0)
    unmatched = 0
    with _InitialValues(step) as initial, \
            tf.compat.v1.Session(graph=g, config=config) as sess:
        # in chunks of about INIT_CHUNK_BYTES: few session runs (each one prunes the whole
        # graph anew), and at most a chunk of values in Python at a time
        for chunk in _chunks(variables):
            own = {name: weights[name] for name in chunk if name in weights and
                   list(np.shape(weights[name])) == variables[name][1].shape.as_list()}
            values = initial.get_many([name for name in chunk if name not in own])
            values.update(own)
            feed = {}
            for name in chunk:
                placeholder = variables[name][1]
                if values.get(name) is None:
                    unmatched += 1
                    values[name] = _random(rng, placeholder.shape.as_list(),
                                           placeholder.dtype)
                feed[placeholder] = values[name]
            sess.run([variables[name][0] for name in chunk], feed)
            del values, feed
        builder = tf.compat.v1.saved_model.Builder(str(building))
        builder.add_meta_graph_and_variables(
            sess, [tf.compat.v1.saved_model.SERVING], signature_def_map=signatures,
            clear_devices=False)
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
    return unmatched, sorted(signatures)


class _InitialValues:
    """Variable op name -> the value its own initialiser gives in the step as imported
    (Adam's slots: zeros; beta1_power: beta1; a Keras layer's weights: its initialiser),
    computed on demand, a chunk of variables per run; none for a variable without one (a
    bare GraphDef handle)."""

    def __init__(self, step: ImportedStep):
        self.tensors = {}
        graph = step.tf_graph
        with graph.as_default():  # initial_value is a graph-mode property
            for var in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
                handle = getattr(var, "handle", None)
                op = handle.op if handle is not None and handle.dtype == tf.resource \
                    else var.op
                try:
                    self.tensors[op.name] = var.initial_value
                except (AttributeError, ValueError, RuntimeError):
                    continue
        self.session = tf.compat.v1.Session(
            graph=graph, config=tf.compat.v1.ConfigProto(allow_soft_placement=True)) \
            if self.tensors else None

    def get_many(self, names) -> dict:
        """name -> initial value of each of `names` that has an initialiser, in one run."""
        tensors = {name: self.tensors[name] for name in names
                   if isinstance(self.tensors.get(name), tf.Tensor)}
        if not tensors:
            return {}
        return dict(zip(tensors, self.session.run(list(tensors.values()))))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.session is not None:
            self.session.close()


INIT_CHUNK_BYTES = 256 * 2**20


def _chunks(variables: dict) -> list:
    """The variables' names in runs of at most INIT_CHUNK_BYTES of values (or one)."""
    out, size = [[]], 0
    for name, (_, placeholder) in variables.items():
        nbytes = placeholder.dtype.size * int(np.prod(placeholder.shape.as_list()))
        if out[-1] and size + nbytes > INIT_CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(name)
        size += nbytes
    return [c for c in out if c]


def _register_variables(g) -> dict:
    """Wraps the GraphDef's bare VarHandleOps (and VariableV2s) as TF1 variables of g's
    global collection, each initialised from a placeholder (fed once, when saving) ->
    {variable op name: (assign op, placeholder)}."""
    from tensorflow.core.framework import variable_pb2
    from tensorflow.python.ops import ref_variable, resource_variable_ops

    out = {}
    for op in g.get_operations():
        if op.type not in ("VarHandleOp", "VariableV2"):
            continue
        assign, placeholder = _assign_from_placeholder(op, "regal_init")
        resource = op.type == "VarHandleOp"
        with tf.device(op.device):
            if resource:
                read = tf.raw_ops.ReadVariableOp(resource=op.outputs[0],
                                                 dtype=placeholder.dtype,
                                                 name=f"{op.name}/regal_read")
            else:
                read = tf.identity(op.outputs[0], name=f"{op.name}/regal_read")
        proto = variable_pb2.VariableDef(variable_name=op.outputs[0].name,
                                         initializer_name=assign.name,
                                         snapshot_name=read.name, is_resource=resource)
        var = resource_variable_ops.ResourceVariable(variable_def=proto) if resource \
            else ref_variable.RefVariable(variable_def=proto)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, var)
        out[op.name] = (assign, placeholder)
    return out


def _with_loss(graph_def, step: ImportedStep):
    """graph_def plus the ops of the training loss that the step does not run (the
    stand-in loss is not fetched), each on the device of its first placed input."""
    if step.loss is None:
        return graph_def
    have = {node.name: node.device for node in graph_def.node}
    if step.loss.op.name in have:
        return graph_def
    missing, stack = set(), [step.loss.op]
    while stack:
        op = stack.pop()
        if op.name in have or op.name in missing:
            continue
        missing.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    for op in step.tf_graph.get_operations():  # creation order: inputs first
        if op.name not in missing:
            continue
        node = out.node.add()
        node.CopyFrom(op.node_def)
        inputs = [i.lstrip("^").split(":")[0] for i in node.input]
        node.device = next((have[i] for i in inputs if have.get(i)), "")
        have[node.name] = node.device
    return out


def _signatures(g, step: ImportedStep) -> dict:
    """`serving_default`: the model's inputs -> outputs; `train_step` (a training step):
    inputs and labels -> the loss, returned after the update ops have run."""
    info = tf.compat.v1.saved_model.build_tensor_info
    labels = {t.name for t in step.labels}
    inputs = {f"input_{i}": info(g.get_tensor_by_name(t.name))
              for i, t in enumerate(t for t in step.feeds if t.name not in labels)}
    label_inputs = {f"label_{i}": info(g.get_tensor_by_name(t.name))
                    for i, t in enumerate(step.labels)}
    outputs = [g.get_tensor_by_name(t.name) for t in
               step.outputs or [f for f in step.fetches if isinstance(f, tf.Tensor)]]
    serving = {f"output_{i}": info(t) for i, t in enumerate(outputs)}
    # the placement's order chains a device's ops by control edges, so in a training step
    # an output may come after an op that reads the labels: then serving takes them too
    needed = {op.name for op in _ancestors(outputs)}
    serving_inputs = dict(inputs)
    serving_inputs.update({key: value for key, value in label_inputs.items()
                           if value.name.split(":")[0] in needed})
    predict = tf.compat.v1.saved_model.PREDICT_METHOD_NAME
    out = {"serving_default": tf.compat.v1.saved_model.build_signature_def(
        serving_inputs, serving, predict)}
    if step.loss is not None and step.train_ops:
        loss = g.get_tensor_by_name(step.loss.name)
        updates = [g.get_operation_by_name(op.name if isinstance(op, tf.Operation)
                                           else op.op.name) for op in step.train_ops]
        with tf.device(loss.device), tf.control_dependencies(updates):
            after = tf.identity(loss, name="train_step/loss")
        fed = dict(inputs)
        fed.update(label_inputs)
        out["train_step"] = tf.compat.v1.saved_model.build_signature_def(
            fed, {"loss": info(after)}, predict)
    return out


def _ancestors(tensors) -> list:
    """The ops `tensors` need, through data and control edges."""
    seen, stack = {}, [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return list(seen.values())
