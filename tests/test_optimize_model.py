"""`regal optimize MODEL` in one step (issue 23, item 2), Keras 3 files, and `regal apply`
accepting a solution made with --pin / --colocate.

Truths used: hand-counted parameter bytes of a tiny model, the graph `regal import` writes
for the same argument (same fingerprint), the op names a --pin pattern matches, and the
wire format of files written by TensorFlow (GraphDef) or by regal (CostGraphDef).
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")

from regal import optimizers  # noqa: E402
from regal.cli import main  # noqa: E402
from regal.io import load_graph, save_graph  # noqa: E402
from regal.io.sources import is_graph_def, is_model  # noqa: E402

ROOT = Path(__file__).parent.parent
REAL = ROOT / "data" / "real" / "mobilenetv2_infer_b1.npz"
BATCH = 4
# the tiny model: 8 inputs -> Dense(6, relu) -> BatchNorm -> Dense(3)
PARAMS = (8 * 6 + 6) + 4 * 6 + (6 * 3 + 3)  # kernels, biases, BN gamma/beta/mean/variance


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("regal: error: ") and "\n" not in err, captured.err
    assert "Traceback" not in captured.err
    return err


# ---------------------------------------------------------------------------
# graph files: by content, and still without TensorFlow


@pytest.fixture(scope="module")
def costgraph_files(tmp_path_factory):
    """A real graph written as CostGraphDef binary and text by regal itself."""
    import warnings
    folder = tmp_path_factory.mktemp("costgraph")
    graph = load_graph(REAL)
    for suffix in (".pb", ".pbtxt"):
        with warnings.catch_warnings():  # its groups and FLOP counts are dropped, knowingly
            warnings.filterwarnings("ignore", ".*CostGraphDef keeps no", UserWarning)
            save_graph(graph, folder / f"g{suffix}")
    return folder


def test_costgraph_files_are_graph_files(costgraph_files, tmp_path):
    for suffix in (".pb", ".pbtxt"):
        assert not is_graph_def(costgraph_files / f"g{suffix}")
        assert not is_model(costgraph_files / f"g{suffix}")
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\xff\xff\xff not a protobuf")
    assert not is_graph_def(junk)  # neither: the CostGraphDef reader names the problem


NO_TF = """
import sys
from regal.cli import main
for path in sys.argv[1:]:
    assert main(["optimize", path, "--devices", "2", "--budget", "100"]) == 0, path
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tf_keras", "keras"))
assert not heavy, heavy
print("NO-TF-OK")
"""


def test_optimizing_a_graph_file_does_not_import_tensorflow(costgraph_files):
    files = [str(REAL)] + [str(costgraph_files / f"g{s}") for s in (".pb", ".pbtxt")]
    out = subprocess.run([sys.executable, "-c", NO_TF, *files], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "NO-TF-OK" in out.stdout
    assert out.stdout.count("ops on 2 devices") == 3


def test_model_options_refused_for_a_graph_file(capsys):
    for flag in (["--batch", "4"], ["--training"], ["--run"]):
        assert main(["optimize", str(REAL), "--devices", "2", *flag]) == 2
        assert str(REAL) in one_error_line(capsys)


# ---------------------------------------------------------------------------
# models

KERAS3_SAVE = """
import sys
import keras
inp = keras.Input((8,), name="x")
h = keras.layers.Dense(6, activation="relu", name="d1")(inp)
h = keras.layers.BatchNormalization(name="bn")(h)
out = keras.layers.Dense(3, name="d2")(h)
model = keras.Model(inp, out)
model.save(sys.argv[1] + "/tiny.keras")
model.export(sys.argv[1] + "/tiny_saved_model", format="tf_saved_model", verbose=False)
print(keras.__version__)
"""


@pytest.fixture(scope="module")
def keras3(tmp_path_factory):
    """A tiny model saved by Keras 3 (a child process without the legacy-Keras switch) as
    `.keras`, and exported as a SavedModel folder."""
    folder = tmp_path_factory.mktemp("keras3")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", KERAS3_SAVE, str(folder)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and "No module named 'keras'" in out.stderr:
        pytest.skip("Keras 3 is not installed")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith("3.")
    return folder


@pytest.fixture(scope="module")
def graph_def_files(tmp_path_factory):
    """A GraphDef (variables frozen in) as binary and text, written by TensorFlow."""
    folder = tmp_path_factory.mktemp("graphdef")
    w = tf.constant(np.arange(6 * 5, dtype=np.float32).reshape(6, 5))
    f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w)),
                    input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    graph_def = f.get_concrete_function().graph.as_graph_def()
    (folder / "model.pb").write_bytes(graph_def.SerializeToString())
    (folder / "model.pbtxt").write_text(str(graph_def))
    return folder


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_graph_def_by_content_optimizes_as_import_reads_it(graph_def_files, suffix, tmp_path,
                                                           capsys):
    model = graph_def_files / f"model{suffix}"
    assert is_graph_def(model) and is_model(model)
    assert main(["import", str(model), "--batch", "3", "--out", str(tmp_path / "g.npz")]) == 0
    imported = load_graph(tmp_path / "g.npz")
    mm = int(np.flatnonzero(imported.op_types == "MatMul")[0])
    assert imported.tensor_size[imported.output_ptr[mm]] == 3 * 5 * 4
    sol = tmp_path / "sol.json"
    assert main(["optimize", str(model), "--batch", "3", "--devices", "2", "--budget", "100",
                 "--out", str(sol)]) == 0
    record = json.loads(sol.read_text())
    assert record["graph"]["fingerprint"] == imported.fingerprint()
    # `data info` (graph files only) says what the file is instead of a parse error
    capsys.readouterr()
    assert main(["data", "info", str(model)]) == 2
    assert "GraphDef" in one_error_line(capsys)


def test_optimize_run_measures_the_model(graph_def_files, tmp_path):
    model = graph_def_files / "model.pb"
    sol = tmp_path / "sol.json"
    assert main(["optimize", str(model), "--run", "--devices", "2", "--budget", "100",
                 "--out", str(sol)]) == 0
    static = load_graph_from_import(model, tmp_path)
    matmul = str(static.names[np.flatnonzero(static.op_types == "MatMul")[0]])
    assert matmul in json.loads(sol.read_text())["ops"]


def load_graph_from_import(model, tmp_path, *flags):
    out = tmp_path / "imported.npz"
    assert main(["import", str(model), *flags, "--out", str(out)]) == 0
    return load_graph(out)


def test_keras_version_of_saved_files(keras3, tmp_path):
    from regal.io.tensorflow import keras_major_version

    assert keras_major_version(keras3 / "tiny.keras") == 3
    legacy = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    legacy.save(str(tmp_path / "legacy.keras"))
    assert keras_major_version(tmp_path / "legacy.keras") == 2
    (tmp_path / "junk.keras").write_bytes(b"junk")
    assert keras_major_version(tmp_path / "junk.keras") is None


def test_keras3_file_imports_and_optimizes(keras3, tmp_path):
    model = keras3 / "tiny.keras"
    graph = load_graph_from_import(model, tmp_path)
    assert int(graph.persistent_memory.sum()) == PARAMS * 4
    matmuls = np.flatnonzero(graph.op_types == "MatMul")
    assert sorted(int(graph.tensor_size[graph.output_ptr[v]]) for v in matmuls) == [3 * 4, 6 * 4]
    sol = tmp_path / "sol.json"
    assert main(["optimize", str(model), "--devices", "2", "--budget", "100",
                 "--out", str(sol)]) == 0
    assert json.loads(sol.read_text())["graph"]["fingerprint"] == graph.fingerprint()


def test_optimize_saved_model_then_apply_moves_no_op(keras3, tmp_path, capsys):
    """The issue's acceptance: optimize MODEL_DIR --batch 4 --training --devices 2, then
    apply on the same model: TensorFlow runs every op where the solution put it."""
    model = str(keras3 / "tiny_saved_model")
    sol = tmp_path / "sol.json"
    assert main(["optimize", model, "--batch", str(BATCH), "--training", "--devices", "2",
                 "--budget", "200", "--out", str(sol)]) == 0
    record = json.loads(sol.read_text())
    devices = {name: entry["device"] for name, entry in record["ops"].items()}
    assert set(devices.values()) == {0, 1}  # a real split, not everything on one device
    graph = load_graph_from_import(model, tmp_path, "--batch", str(BATCH), "--training")
    assert graph.has_groups and "ResourceApplyAdam" in graph.op_types.tolist()
    capsys.readouterr()
    assert main(["apply", model, "--solution", str(sol), "--batch", str(BATCH), "--training",
                 "--device-type", "CPU", "--out", str(tmp_path / "placed")]) == 0
    out = capsys.readouterr().out
    assert "0 ops moved" in out and "moved to their variable" not in out
    device_map = json.loads((tmp_path / "placed" / "device_map.json").read_text())
    assert device_map == {name: f"/device:CPU:{d}" for name, d in devices.items()}


def test_solution_with_pins_applies_to_the_unpinned_model(keras3, tmp_path, capsys):
    model = str(keras3 / "tiny_saved_model")
    sol = tmp_path / "pinned.json"
    assert main(["optimize", model, "--batch", str(BATCH), "--devices", "2", "--budget", "100",
                 "--pin", "*MatMul*=1", "--out", str(sol)]) == 0
    record = json.loads(sol.read_text())
    graph = load_graph_from_import(model, tmp_path, "--batch", str(BATCH))
    assert record["graph"]["imported_fingerprint"] == graph.fingerprint()
    assert record["graph"]["fingerprint"] != graph.fingerprint()  # the pinned graph's
    capsys.readouterr()
    assert main(["apply", model, "--solution", str(sol), "--batch", str(BATCH),
                 "--device-type", "CPU", "--out", str(tmp_path / "placed")]) == 0
    assert "0 ops moved" in capsys.readouterr().out
    device_map = json.loads((tmp_path / "placed" / "device_map.json").read_text())
    pinned = [name for name in device_map if fnmatch.fnmatchcase(name, "*MatMul*")]
    assert pinned and all(device_map[name] == "/device:CPU:1" for name in pinned)


# ---------------------------------------------------------------------------
# the solution record's fingerprints (no model needed)


def test_solution_record_keeps_the_imported_fingerprint():
    from regal.constraints import with_constraints
    from regal.measure import check_solution
    from regal.synth import random_dag

    graph = random_dag(40, 3)
    name = str(graph.names[5])
    pinned = with_constraints(graph, pins={name: 1}, num_devices=2)
    problem = optimizers.Problem(pinned, 2)
    solution = optimizers.solve("brkga", problem, 100, seed=0)
    assert solution.placement[5] == 1
    record = json.loads(json.dumps(optimizers.solution_record(problem, solution, 100,
                                                              imported=graph)))
    assert record["graph"]["fingerprint"] == pinned.fingerprint()
    assert record["graph"]["imported_fingerprint"] == graph.fingerprint()
    check_solution(record, graph)    # the model, imported without the user's pins
    check_solution(record, pinned)   # the pinned graph itself
    with pytest.raises(ValueError, match="fingerprint mismatch"):
        check_solution(record, random_dag(40, 4))
    # a record of the old format (no imported fingerprint) keys on the pinned graph only
    del record["graph"]["imported_fingerprint"]
    with pytest.raises(ValueError, match="fingerprint mismatch"):
        check_solution(record, graph)
    # unconstrained: the record is exactly what it was before
    plain = optimizers.Problem(graph, 2)
    free = optimizers.solve("brkga", plain, 100, seed=0)
    assert "imported_fingerprint" not in optimizers.solution_record(
        plain, free, 100, imported=graph)["graph"]


# ---------------------------------------------------------------------------
# bad input: exit 2, one line naming it


def _bad_models(folder: Path) -> dict[str, str]:
    """name -> the argument; each is refused with the argument named."""
    (folder / "junk.keras").write_bytes(b"\x00junk, not a zip")
    (folder / "junk.h5").write_bytes(b"\x89HDF junk")
    garbled = folder / "garbled_saved_model"
    garbled.mkdir()
    (garbled / "saved_model.pb").write_bytes(b"\xff\xfe garbage")
    (folder / "empty_dir").mkdir()
    (folder / "model.onnx").write_bytes(b"onnx")
    with zipfile.ZipFile(folder / "garbled3.keras", "w") as z:  # Keras 3 metadata, bad config
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", "{not json")
    return {"missing": str(folder / "no_such_model_dir"),
            "junk.keras": str(folder / "junk.keras"), "junk.h5": str(folder / "junk.h5"),
            "garbled SavedModel": str(garbled), "not a SavedModel": str(folder / "empty_dir"),
            "unknown suffix": str(folder / "model.onnx"),
            "garbled Keras 3": str(folder / "garbled3.keras")}


def test_bad_models_exit_2_with_one_line_naming_them(tmp_path, capsys):
    for what, model in _bad_models(tmp_path).items():
        out = tmp_path / "x.npz"
        assert main(["import", model, "--out", str(out)]) == 2, what
        assert model in one_error_line(capsys), what
        assert not out.exists()
        assert main(["optimize", model, "--devices", "2"]) == 2, what
        assert model in one_error_line(capsys), what
    for model in ("keras.applications.NoSuchNet", "no_such_module_xyz:build"):
        assert main(["optimize", model, "--devices", "2"]) == 2
        assert model in one_error_line(capsys)


def test_apply_refuses_missing_models_and_graph_files(tmp_path, capsys):
    sol = tmp_path / "sol.json"
    assert main(["optimize", str(REAL), "--devices", "2", "--budget", "100",
                 "--out", str(sol)]) == 0
    capsys.readouterr()
    for model in (str(tmp_path / "no_such_dir"), str(REAL)):
        assert main(["apply", model, "--solution", str(sol), "--out",
                     str(tmp_path / "placed")]) == 2
        assert model in one_error_line(capsys)


def test_data_real_keeps_a_readme_it_did_not_write(tmp_path, capsys):
    """`regal data real --out DIR/real` writes its table to DIR/README.md by default (the
    project's data/ folder); a README of someone else's there is refused before any import,
    and left as it was."""
    from helpers import refused
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    refused(["data", "real", "--out", str(tmp_path / "real"), "--models", "mobilenetv2",
             "--quiet"], capsys, "--readme")
    assert readme.read_text() == "# my project\n" and not (tmp_path / "real").exists()
    refused(["data", "real", "--out", str(tmp_path / "real"), "--readme",
             str(tmp_path / "missing" / "table.md")], capsys, "--readme")
