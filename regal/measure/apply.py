"""`regal apply`: a solution written into the model's own graph (GraphDef, device map,
placement with each device's order, and a SavedModel for Keras and SavedModel sources)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import tensorflow as tf  # loaded by regal.measure's __init__, quietly and with Keras 2

from regal.files import write_bytes, write_json
from regal.io.solution import check_device_format
from regal.io.tensorflow import ImportedStep, import_step, keras_major_version, resolve_model
from regal.measure.placed import (_import_for_run, _variable_values, device_name,
                                  load_solution_record, place, placed_graph_def)

__all__ = ["apply_solution"]


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
