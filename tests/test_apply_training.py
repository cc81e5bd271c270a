"""Issue 40 item 1: a placed model that trains as it is.

`regal apply --training` of a compiled Keras model writes a SavedModel whose variables are
variables (saved_model.pb far smaller than the weights), named as the Keras layers' weights,
Adam's slots at zero, and a `train_step` signature that runs one training step with the
placement on its compiled loss. Truths used: the layer sizes (weight bytes), Adam's
definition (slots start at zero, beta powers at beta1 and beta2), a numpy forward pass and
sparse cross-entropy on the weights read back, the step statistics of the run (which device
ran each op), the device map the apply wrote.

The models are built, solved and applied in one child process (`_APPLY`), the SavedModels
loaded and run in another (`_RUN`), and the custom-object files saved and imported in a
third, as tests/test_measure.py runs its placed steps in children: with this work done in
the test process beside the other TensorFlow test modules, a later garbage collection
crashed the process (an eager variable freed through a step-tracing allocator), in
whichever test came next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")

from regal.cli import main  # noqa: E402
from regal.io.tensorflow import import_model, import_step  # noqa: E402

BATCH = 4
FEATURES, HIDDEN, CLASSES = 256, 1024, 100
# the weights of the model below: 1.4M parameters
PARAMS = (FEATURES * HIDDEN + HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) + (HIDDEN * CLASSES + CLASSES)
LAYERS = ("fc1", "fc2", "logits")


def compiled_model():
    x = tf.keras.Input((FEATURES,), name="features")
    h = tf.keras.layers.Dense(HIDDEN, activation="relu", name="fc1")(x)
    h = tf.keras.layers.Dense(HIDDEN, activation="tanh", name="fc2")(h)
    model = tf.keras.Model(x, tf.keras.layers.Dense(CLASSES, name="logits")(h))
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def plain_model():
    x = tf.keras.Input((8,), name="features")
    h = tf.keras.layers.Dense(16, activation="relu", name="fc1")(x)
    return tf.keras.Model(x, tf.keras.layers.Dense(5, name="logits")(h))


class _Affine(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.linspace(-1, 1, 6 * 7, dtype=np.float32).reshape(6, 7),
                             name="affine_weights")
        self.b = tf.Variable(np.zeros(7, np.float32), name="affine_bias")

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def __call__(self, x):
        return tf.nn.tanh(tf.matmul(x, self.w) + self.b)


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    here = Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parent),
                                         env.get("PYTHONPATH", "")])
    return env


# argv: a folder. Imports the compiled model's training step and solves it on 2 devices
# (BRKGA), saves `_Affine` as a SavedModel and imports it with --loss mse (1 device, m-topo),
# then runs `regal apply --training` on both; writes what the tests read to result.json and
# the SavedModel's weights to affine.npz.
_APPLY = """
import contextlib, io, json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from regal import optimizers
from regal.cli import main
from regal.io.tensorflow import import_step
import test_apply_training as here
folder = sys.argv[1]
result = {}
step = import_step(here.compiled_model, batch_size=here.BATCH, training=True)
problem = optimizers.Problem(step.graph, 2)
solution = optimizers.solve("brkga", problem, 100, seed=0)
result["devices_used"] = len(set(solution.placement.tolist()))
with open(os.path.join(folder, "compiled.json"), "w") as f:
    json.dump(optimizers.solution_record(problem, solution, 100), f)
result["op_types"] = sorted(set(step.graph.op_types.tolist()))
result["labels"] = [[t.shape.as_list(), t.dtype.name] for t in step.labels]
result["loss_text"] = step.loss_text
module = here._Affine()
source = os.path.join(folder, "sm")
tf.saved_model.save(module, source, signatures=module.__call__)
np.savez(os.path.join(folder, "affine.npz"), w=module.w.numpy(), b=module.b.numpy())
sm_step = import_step(source, batch_size=3, training=True, loss="mse")
result["sm_handles"] = sorted(op.name for op in sm_step.ops if op.type == "VarHandleOp")
result["sm_value_is_the_weights"] = bool(np.array_equal(sm_step.values["affine_weights"],
                                                        module.w.numpy()))
problem = optimizers.Problem(sm_step.graph, 1)
with open(os.path.join(folder, "sm.json"), "w") as f:
    json.dump(optimizers.solution_record(problem, optimizers.solve("m-topo", problem, 1, 0),
                                         1), f)
jobs = {"compiled": ["apply", "test_apply_training:compiled_model", "--solution",
                     os.path.join(folder, "compiled.json"), "--out",
                     os.path.join(folder, "compiled"), "--batch", str(here.BATCH),
                     "--training", "--device-type", "CPU"],
        "sm": ["apply", source, "--solution", os.path.join(folder, "sm.json"), "--out",
               os.path.join(folder, "sm_out"), "--batch", "3", "--training", "--loss",
               "mse", "--device-type", "CPU"]}
for key, argv in jobs.items():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    result[key] = [code, out.getvalue()]
with open(os.path.join(folder, "result.json"), "w") as f:
    json.dump(result, f)
"""


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    """The compiled model's training step solved on 2 devices and `regal apply`-ed, and a
    SavedModel applied with --loss mse on 1 (all in a child) -> what the child saw."""
    folder = tmp_path_factory.mktemp("applied")
    proc = subprocess.run([sys.executable, "-c", _APPLY, str(folder)], env=_env(),
                          capture_output=True, text=True, timeout=300, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((folder / "result.json").read_text())
    assert result["devices_used"] == 2  # both devices used
    (code, out), (sm_code, sm_out) = result["compiled"], result["sm"]
    assert code == 0 and sm_code == 0, proc.stderr[-3000:]
    with np.load(folder / "affine.npz") as data:
        weights = {k: data[k] for k in data.files}
    return dict(result, out=folder / "compiled", stdout=out, sm_out=folder / "sm_out",
                sm_stdout=sm_out, affine=weights)


# argv: SavedModel folder, feeds (.npz, by signature key), result folder. Loads the model in
# a TF1 session with two CPU devices (none soft-placed, Grappler's remapper off: each op
# runs where it was put), reads
# every variable, runs the train_step signature once (traced), reads them again; then loads
# it with TF2's tf.saved_model.load and runs train_step once more.
_RUN = """
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import regal.measure  # TensorFlow, quietly
import tensorflow as tf
folder, feeds, out = sys.argv[1:4]
feeds = dict(np.load(feeds))
g = tf.Graph()
config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
# Grappler's remapper fuses MatMul + BiasAdd into one op even across two devices
config.graph_options.rewrite_options.remapping = \
    tf.compat.v1.ConfigProto().graph_options.rewrite_options.OFF
with tf.compat.v1.Session(graph=g, config=config) as sess:
    meta_graph = tf.compat.v1.saved_model.loader.load(sess, ["serve"], folder)
    variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    before = {n: sess.run(v.value()) for n, v in variables.items()}
    sig = meta_graph.signature_def["train_step"]
    metadata = tf.compat.v1.RunMetadata()
    loss = sess.run(sig.outputs["loss"].name,
                    {sig.inputs[k].name: v for k, v in feeds.items()},
                    options=tf.compat.v1.RunOptions(
                        trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                    run_metadata=metadata)
    after = {n: sess.run(v.value()) for n, v in variables.items()}
ran = {}
for dev in metadata.step_stats.dev_stats:
    for ns in dev.node_stats:
        ran[ns.node_name] = "/device:CPU:" + dev.device.rsplit(":", 1)[-1]
np.savez(os.path.join(out, "before.npz"), **{n.replace("/", "|"): v for n, v in before.items()})
np.savez(os.path.join(out, "after.npz"), **{n.replace("/", "|"): v for n, v in after.items()})
loaded = tf.saved_model.load(folder)
kernel = next(v for v in loaded.variables if v.name.startswith(list(before)[0] + ":"))
start = kernel.numpy()
tf2 = loaded.signatures["train_step"](**{k: tf.constant(v) for k, v in feeds.items()})
json.dump({"loss": float(loss), "ran": ran, "signatures": sorted(meta_graph.signature_def),
           "train_step_inputs": sorted(sig.inputs), "train_step_outputs": sorted(sig.outputs),
           "tf2_loss": float(tf2["loss"].numpy()),
           "tf2_moved": bool(not np.allclose(kernel.numpy(), start))},
          open(os.path.join(out, "run.json"), "w"))
"""


def run_saved_models(jobs: list) -> list:
    """Runs `_RUN` (in one child) on each (SavedModel folder, feeds, result folder) ->
    per job {"loss", "ran", ..., "before": {var: value}, "after": {var: value}}."""
    script = "import sys, json\nRUN = " + repr(_RUN) + "\n" + \
        "for job in json.loads(sys.argv[1]):\n    sys.argv[1:4] = job\n    exec(RUN)\n"
    args = []
    for folder, feeds, out in jobs:
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "feeds.npz", **feeds)
        args.append([str(folder), str(out / "feeds.npz"), str(out)])
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(args)],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = []
    for _, _, out in jobs:
        result = json.loads((out / "run.json").read_text())
        for key in ("before", "after"):
            with np.load(out / f"{key}.npz") as data:
                result[key] = {n.replace("|", "/"): data[n] for n in data.files}
        results.append(result)
    return results


@pytest.fixture(scope="module")
def trained(applied, tmp_path_factory):
    """Each applied SavedModel's train_step run once on fixed inputs and labels ->
    (x, y, result) of the compiled model, (x, y, result) of the SavedModel source."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    sm_x = rng.standard_normal((3, 6)).astype(np.float32)
    sm_y = rng.standard_normal((3, 7)).astype(np.float32)
    folder = tmp_path_factory.mktemp("trained")
    compiled, sm = run_saved_models([
        (applied["out"] / "saved_model", {"input_0": x, "label_0": y}, folder / "compiled"),
        (applied["sm_out"] / "saved_model", {"input_0": sm_x, "label_0": sm_y},
         folder / "sm")])
    return (x, y, compiled), (sm_x, sm_y, sm)


def test_compiled_loss_is_in_the_graph(applied):
    assert "SparseSoftmaxCrossEntropyWithLogits" in applied["op_types"]
    # labels: the output's shape less its class axis, int32 class indices
    assert applied["labels"] == [[[BATCH], "int32"]]
    loss_text = applied["loss_text"]
    assert "compiled loss" in loss_text and "sparse_categorical_crossentropy" in loss_text
    # `regal apply` says which loss it trains on, and records it
    assert f"training step: {loss_text}" in applied["stdout"]
    meta = json.loads((applied["out"] / "placement.json").read_text())
    assert meta["labels"] == ["label_0:0"] and meta["loss"] == loss_text


def test_saved_model_keeps_variables_as_variables(applied):
    out = applied["out"]
    assert "random values" not in applied["stdout"]  # every variable had a value
    assert "saved_model signatures: serving_default, train_step" in applied["stdout"]
    pb = (out / "saved_model" / "saved_model.pb").stat().st_size
    weight_bytes = 4 * PARAMS
    # no weights in the graph: the ops only, a small fraction of the 5.6 MB of weights
    assert pb < weight_bytes / 20, (pb, weight_bytes)
    data = sum(p.stat().st_size for p in (out / "saved_model" / "variables").iterdir())
    assert data >= 3 * weight_bytes  # the weights and Adam's two slots, in the checkpoint


def test_train_step_runs_with_the_placement_on_the_compiled_loss(applied, trained):
    out = applied["out"]
    x, y, result = trained[0]
    before, after = result["before"], result["after"]
    device_map = json.loads((out / "device_map.json").read_text())
    names = set(before)
    # the Keras layers' weight names, and Adam's slots named after them
    for layer in LAYERS:
        for kind in ("kernel", "bias"):
            assert {f"{layer}/{kind}", f"{layer}/{kind}/Adam",
                    f"{layer}/{kind}/Adam_1"} <= names
    # Adam's slots start at zero and its beta powers at beta1, beta2
    slots = [n for n in names if n.endswith(("/Adam", "/Adam_1"))]
    assert len(slots) == 2 * 2 * len(LAYERS)
    assert all(not before[n].any() for n in slots)
    np.testing.assert_allclose(before["beta1_power"], 0.9, rtol=1e-6)
    np.testing.assert_allclose(before["beta2_power"], 0.999, rtol=1e-6)
    # the model's weights are its own initialiser's, not zeros
    assert all(np.abs(before[f"{layer}/kernel"]).max() > 0 for layer in LAYERS)
    assert result["signatures"] == ["serving_default", "train_step"]
    assert result["train_step_inputs"] == ["input_0", "label_0"]
    assert result["train_step_outputs"] == ["loss"]
    # the loss of the weights before the step, computed here
    h = np.maximum(x @ before["fc1/kernel"] + before["fc1/bias"], 0)
    h = np.tanh(h @ before["fc2/kernel"] + before["fc2/bias"])
    logits = (h @ before["logits/kernel"] + before["logits/bias"]).astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_sum = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    expected = float(np.mean(log_sum - logits[np.arange(BATCH), y]))
    loss = result["loss"]
    assert np.isfinite(loss)
    assert loss == pytest.approx(expected, rel=1e-5)
    # one Adam step: every weight moved, the slots filled, the beta powers advanced
    for layer in LAYERS:
        assert not np.allclose(after[f"{layer}/kernel"], before[f"{layer}/kernel"])
        assert np.abs(after[f"{layer}/kernel/Adam"]).max() > 0
    np.testing.assert_allclose(after["beta1_power"], 0.9 ** 2, rtol=1e-6)
    # every op of the step ran on the device the solution gave it
    ran = result["ran"]
    checked = [name for name in device_map if name in ran]  # less what TF folded away
    assert len(checked) > 0.5 * len(device_map)
    assert {ran[n] for n in checked} == {"/device:CPU:0", "/device:CPU:1"}
    assert all(ran[n] == device_map[n] for n in checked), \
        [(n, ran[n], device_map[n]) for n in checked if ran[n] != device_map[n]][:3]


def test_saved_model_loads_in_tf2_and_trains(trained):
    # TF2's loader: the second step (Adam's state after the first) moves the weights again
    for _, _, result in trained:
        assert np.isfinite(result["tf2_loss"]) and result["tf2_moved"]


def test_uncompiled_model_keeps_the_stand_in_loss_and_its_graph():
    step = import_step(plain_model, batch_size=BATCH, training=True)
    assert step.labels == [] and step.loss_text.startswith("stand-in loss")
    assert step.loss.op.name == "loss"  # the importer's name for it since before
    # the stand-in is not fetched: the graph is the one imported before losses existed
    assert "loss" not in step.graph.names.tolist()
    # a compiled model told to use the stand-in imports as the uncompiled one
    def compiled_plain():
        model = plain_model()
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return model
    stand_in = import_model(compiled_plain, batch_size=BATCH, training=True, loss="stand-in")
    assert stand_in.fingerprint() == step.graph.fingerprint()
    compiled = import_step(compiled_plain, batch_size=BATCH, training=True)
    assert compiled.graph.fingerprint() != step.graph.fingerprint()
    # --loss mse: float labels shaped like the output
    mse = import_step(compiled_plain(), batch_size=BATCH, training=True, loss="mse")
    assert [(t.shape.as_list(), t.dtype) for t in mse.labels] == [([BATCH, 5], tf.float32)]
    assert mse.loss_text.startswith("--loss: mean_squared_error")
    with pytest.raises(ValueError, match="unknown loss"):
        import_step(plain_model, batch_size=BATCH, training=True, loss="nonsense")
    with pytest.raises(ValueError, match="only a training step"):
        import_step(plain_model, batch_size=BATCH, loss="mse")


def test_saved_model_source_keeps_its_variable_names_and_trains_on_loss_flag(applied,
                                                                           trained):
    handles = set(applied["sm_handles"])
    assert {"affine_weights", "affine_bias"} <= handles
    assert not any(name.startswith("unknown") for name in handles)
    assert applied["sm_value_is_the_weights"]
    # applied on one device: the SavedModel's weights, the mse on float labels
    assert "training step: --loss: mean_squared_error" in applied["sm_stdout"]
    assert "random values" not in applied["sm_stdout"]
    w, b = applied["affine"]["w"], applied["affine"]["b"]
    x, y, ran = trained[1]
    np.testing.assert_array_equal(ran["before"]["affine_weights"], w)
    expected = np.mean((np.tanh(x @ w + b) - y) ** 2)
    assert ran["loss"] == pytest.approx(expected, rel=1e-5)
    assert not np.allclose(ran["after"]["affine_weights"], w)


# ---------------------------------------------------------------------------
# custom objects

_LAYER_CODE = '''
import tensorflow as tf


class Scale(tf.keras.layers.Layer):
    def build(self, shape):
        self.scale = self.add_weight(name="scale", shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.scale
'''


# argv: folder with my_layers.py. Saves a model with its layer (the class from a module of
# the user's, which the .keras config names) as .keras and .h5, compiled with its loss.
_SAVE_CUSTOM = """
import importlib.util, os, sys, warnings
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.io.tensorflow  # TensorFlow, quietly
import tensorflow as tf
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location("my_layers", os.path.join(folder, "my_layers.py"))
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = tf.keras.Input((8,), name="features")
y = tf.keras.layers.Dense(4, name="fc")(module.Scale(name="scale")(x))
model = tf.keras.Model(x, y)
model.compile(optimizer="adam",
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.save(os.path.join(folder, "custom.keras"))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # .h5 is legacy: written on purpose
    model.save(os.path.join(folder, "custom.h5"))
"""

# argv: JSON list of `regal` argument lists; prints a JSON list of (exit code, stderr lines)
_CLI = """
import contextlib, io, json, sys
from regal.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    results.append((code, [line for line in err.getvalue().splitlines() if line.strip()]))
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def custom_runs(tmp_path_factory):
    """`regal import` of a .keras and an .h5 file with a custom layer, with and without
    --custom-objects (in children, as the SavedModels above: Keras models loaded in this
    process beside the other TensorFlow test modules crashed a later garbage collection)
    -> {case: (exit code, stderr lines)}, the folder."""
    folder = tmp_path_factory.mktemp("custom")
    layers = folder / "my_layers.py"
    layers.write_text(_LAYER_CODE)
    (folder / "no_layers.py").write_text("NOTHING = 1\n")
    proc = subprocess.run([sys.executable, "-c", _SAVE_CUSTOM, str(folder)], env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    keras, h5, out = str(folder / "custom.keras"), str(folder / "custom.h5"), \
        str(folder / "g.npz")
    cases = {
        "keras without": ["import", keras, "--out", out],
        "keras other file": ["import", keras, "--out", out, "--custom-objects",
                             str(folder / "no_layers.py")],
        "keras missing file": ["import", keras, "--out", out, "--custom-objects",
                               str(folder / "missing.py")],
        "h5 without": ["import", h5, "--out", out],
        "h5 with": ["import", h5, "--out", str(folder / "h5.npz"), "--custom-objects",
                    str(layers)],
        "keras with": ["import", keras, "--out", out, "--custom-objects", str(layers),
                       "--training"],
    }
    proc = subprocess.run([sys.executable, "-c", _CLI, json.dumps(list(cases.values()))],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(zip(cases, results)), folder


def test_custom_layer_loads_with_custom_objects(custom_runs):
    runs, folder = custom_runs
    # without: one line naming the class and the flag, exit 2
    code, err = runs["keras without"]
    assert code == 2 and len(err) == 1 and "'Scale'" in err[0] and \
        "--custom-objects" in err[0], err
    # a file that does not define it: named
    code, err = runs["keras other file"]
    assert code == 2 and len(err) == 1 and "'Scale'" in err[0] and \
        "no_layers.py" in err[0], err
    # a missing file: one line
    code, err = runs["keras missing file"]
    assert code == 2 and len(err) == 1 and "missing.py: no such file" in err[0], err
    # with it: the training step on the file's compiled loss
    code, err = runs["keras with"]
    assert code == 0, err
    from regal.io import load_graph
    graph = load_graph(folder / "g.npz")
    assert "SparseSoftmaxCrossEntropyWithLogits" in set(graph.op_types.tolist())
    assert "scale/scale" in graph.names.tolist()


def test_custom_layer_in_h5_file(custom_runs):
    runs, folder = custom_runs
    code, err = runs["h5 without"]
    assert code == 2 and len(err) == 1 and "'Scale'" in err[0] and \
        "--custom-objects" in err[0], err
    code, err = runs["h5 with"]
    assert code == 0 and (folder / "h5.npz").exists(), err


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_loss_flag_is_checked_in_one_line(capsys, tmp_path):
    out = str(tmp_path / "g.npz")
    assert main(["import", "keras.applications.MobileNetV2", "--out", out, "--loss", "mse"]) == 2
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and "--training" in err[0], err
    assert main(["import", "keras.applications.MobileNetV2", "--out", out, "--training",
                 "--loss", "nonsense"]) == 2
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and "unknown loss" in err[0], err
