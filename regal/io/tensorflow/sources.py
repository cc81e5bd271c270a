"""What a model source is, before a step is built from it: a spec string resolved
(`keras.applications.NAME`, `package.module:attr`, a path), a Keras file's version and the
Python code its config carries, a Keras 3 file exported as a SavedModel, a GraphDef file read.

Apart from `step` because these are the checks a user's file passes before any of its code
can run, and they are public on their own (`regal.measure` reads them too).

* Keras 3 files: a `.keras` / `.h5` saved by Keras 3 (the default Keras of TensorFlow >=
  2.16) cannot be read by tf-keras, so `export_keras3` has Keras 3 export it as a SavedModel
  in a child process without the legacy switch, and that SavedModel is imported.
* Code in model files: loading a Keras file rebuilds its layers, and a `Lambda` layer (or
  any serialised `__lambda__`) carries Python bytecode that then runs; a `module` outside
  Keras and TensorFlow in a `.keras` config is imported to find a class. Legacy `.h5`
  files have no safe mode, so `code_in_keras_file` reads the config first and the loader
  refuses such a file, naming the layer, unless `trust_code=True` (`--trust-code`).
  `package.module:attr` imports and calls the user's own code by design.
* Custom objects: a `.keras` / `.h5` file with a custom layer (or loss) names a class that
  only the user's code defines. `load_custom_objects(FILE)` runs that Python file (the
  user's own code, passed explicitly: `--custom-objects FILE`) and takes its dict
  `CUSTOM_OBJECTS`, or else its public top-level names; `load_keras_file` hands them to
  Keras, and a class Keras cannot find is one line naming it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from pathlib import Path

import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.graph import GraphError


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
        if os.getcwd() not in sys.path and "" not in sys.path:
            # the `regal` script, unlike `python -m`, does not look in the current folder,
            # where a user's own models module most often is
            sys.path.insert(0, os.getcwd())
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


class CustomObjects(dict):
    """Name -> class or function for Keras' `custom_objects`, and the file they came from."""

    source: str = ""


def load_custom_objects(spec) -> CustomObjects | None:
    """`--custom-objects FILE`: runs the Python file FILE and returns its dict
    `CUSTOM_OBJECTS` if it has one, else its top-level names not starting with `_` (modules
    left out). A dict passes through; None stays None. A missing file, one that fails to
    run, or a `CUSTOM_OBJECTS` that is no dict of names is a ValueError in one line."""
    if spec is None:
        return None
    if isinstance(spec, CustomObjects):
        return spec
    if isinstance(spec, dict):
        out = CustomObjects(spec)
        out.source = "the custom objects given"
        return out
    import runpy
    import types

    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"--custom-objects {spec}: no such file" if not path.exists()
                         else f"--custom-objects {spec}: not a file")
    try:
        names = runpy.run_path(str(path), run_name="regal_custom_objects")
    except Exception as exc:  # noqa: BLE001 - the user's code raises what it raises
        raise ValueError(f"--custom-objects {spec}: running it failed: "
                         f"{type(exc).__name__}: {_one_line(exc)}") from None
    if "CUSTOM_OBJECTS" in names:
        found = names["CUSTOM_OBJECTS"]
        if not isinstance(found, dict) or not all(isinstance(k, str) for k in found):
            raise ValueError(f"--custom-objects {spec}: CUSTOM_OBJECTS must be a dict of "
                             f"name -> class or function, got {type(found).__name__}")
    else:
        found = {k: v for k, v in names.items()
                 if not k.startswith("_") and not isinstance(v, types.ModuleType)}
    out = CustomObjects(found)
    out.source = str(spec)
    return out


_UNKNOWN_OBJECT = (re.compile(r"Unknown ([a-z ]+?): '([^']+)'"),
                   re.compile(r"Cannot deserialize object of type `([^`]+)`"),
                   re.compile(r"Could not locate (class|function) '([^']+)'"))


def load_keras_file(path, *, trust_code: bool = False, custom_objects=None,
                    compile: bool = False):
    """A tf-keras `.keras` / `.h5` file loaded (`compile`: with its loss and optimizer), its
    `custom_objects` (a dict or a `--custom-objects` file) given to Keras. A class or
    function Keras does not know is a ValueError naming it and what to pass."""
    objects = load_custom_objects(custom_objects)
    try:
        return tf.keras.models.load_model(str(path), compile=compile,
                                          safe_mode=not trust_code,
                                          custom_objects=dict(objects or {}))
    except Exception as exc:  # noqa: BLE001 - Keras raises many kinds
        text = str(exc)
        # a class named with its module (`.keras`) that the custom objects do not give:
        # Keras' own message is then about the import, not the class
        foreign = _foreign_classes(path, set(objects or ()))
        for pattern in _UNKNOWN_OBJECT:
            found = pattern.search(text)
            if found or foreign:
                name = found.group(found.lastindex) if found else foreign[0][1]
                kind = found.group(1) if found and found.lastindex > 1 else "class"
                where = (f"it is not among the custom objects of {objects.source}"
                         if objects else "pass --custom-objects FILE, a Python file that "
                         "defines it")
                also = ("" if not compile else
                        "; or --loss NAME if it is the loss")
                raise ValueError(f"{path}: the model uses {kind} {name!r}, which Keras does "
                                 f"not know: {where}{also}") from None
        raise ValueError(f"{path}: cannot load Keras model ({_one_line(exc)})") from None


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


def code_in_keras_file(path: str | os.PathLike, provided=()) -> str | None:
    """Where a `.keras` / `.h5` file's model config carries Python code that loading it would
    run, as 'layer NAME is a Lambda' or 'layer NAME names module M'; None when nowhere.

    Code rides in a `Lambda` layer (marshalled bytecode, or a function looked up by name),
    in any serialised `__lambda__`, and in a `module` outside Keras and TensorFlow, which a
    `.keras` config makes Keras import, unless the class is among the custom objects the
    user `provided` (Keras takes those instead, so only the user's own file runs). A file
    whose config cannot be read says None: Keras cannot read it either, and its loader
    names what is wrong with it.
    """
    found = _foreign_classes(path, set(provided or ()), lambdas=True)
    return found[0][0] if found else None


def _foreign_classes(path, provided: set, lambdas: bool = False) -> list:
    """(where, class name) of each item of a Keras file's config that names a module outside
    Keras and TensorFlow with a class not in `provided` (and, with `lambdas`, each Lambda)."""
    import json

    try:
        config = _keras_file_entry(path, "config.json", "model_config")
        config = json.loads(config) if isinstance(config, str) else config
    except Exception:  # noqa: BLE001 - see code_in_keras_file
        return []
    out = []
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
            if lambdas:
                out.append((f"{layer} is a {kind}", kind))
        elif isinstance(module, str) and module.split(".")[0] not in _KERAS_MODULES and \
                kind not in provided and item.get("registered_name") not in provided:
            out.append((f"{layer} names module {module!r} (class {kind!r})", kind))
        stack.extend((value, layer) for value in reversed(list(item.values())))
    return out


# Runs in a child process without TF_USE_LEGACY_KERAS: there `keras` is Keras 3, which
# reads its own files and exports the model's inference function as a SavedModel.
_KERAS3_EXPORT = """
import sys
import keras
objects = {}
if len(sys.argv) > 4:  # --custom-objects FILE, run here as in the parent
    import runpy, types
    names = runpy.run_path(sys.argv[4], run_name="regal_custom_objects")
    objects = names.get("CUSTOM_OBJECTS") or {
        k: v for k, v in names.items()
        if not k.startswith("_") and not isinstance(v, types.ModuleType)}
model = keras.saving.load_model(sys.argv[1], compile=False, safe_mode=sys.argv[3] != "trust",
                                custom_objects=objects)
model.export(sys.argv[2], format="tf_saved_model", verbose=False)
"""


def export_keras3(path: str | os.PathLike, out: str | os.PathLike, *,
                  trust_code: bool = False, custom_objects=None) -> Path:
    """Converts a Keras 3 `.keras` / `.h5` file to a SavedModel at `out` and returns `out`
    (`trust_code` turns Keras 3's safe mode off, so that Lambda layers load;
    `custom_objects`: a `--custom-objects` file, run again in the child).

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
    objects = load_custom_objects(custom_objects)  # checked here: one line if it fails
    extra = []
    if objects is not None:
        if not Path(objects.source).is_file():
            raise ValueError(f"{path}: a Keras 3 file loads in a child process, which takes "
                             f"custom objects only as a file (--custom-objects FILE)")
        extra = [objects.source]
    proc = subprocess.run([sys.executable, "-c", _KERAS3_EXPORT, str(path), str(out),
                           "trust" if trust_code else "safe", *extra],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise ValueError(f"{path}: cannot load Keras 3 model ({_one_line(why)})")
    return Path(out)


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
