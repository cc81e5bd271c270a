"""TensorFlow importer: static and measured graphs from Keras, tf.function, SavedModel, GraphDef.

Expected numbers are computed by hand from the layer shapes (bytes = numel x 4, FLOPs =
2mnk), not read back from the importer.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")

from regal.graph import GraphError  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.io import tensorflow as tfio  # noqa: E402

BATCH = 4
UNITS = 10
CONV_FILTERS = 4
FLAT = 6 * 6 * CONV_FILTERS  # 8x8 input, 3x3 valid conv


def small_model():
    x = tf.keras.Input((8, 8, 3), name="image")
    h = tf.keras.layers.Conv2D(CONV_FILTERS, 3, activation="relu", name="conv")(x)
    h = tf.keras.layers.BatchNormalization(name="bn")(h)
    h = tf.keras.layers.Flatten(name="flat")(h)
    y = tf.keras.layers.Dense(UNITS, name="dense_out")(h)
    return tf.keras.Model(x, y)


def param_counts():
    model = small_model()
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return model.count_params(), trainable, len(model.weights), len(model.trainable_weights)


def op_named(graph, suffix):
    hits = [i for i, n in enumerate(graph.names.tolist()) if n.endswith(suffix)]
    assert len(hits) == 1, (suffix, hits)
    return hits[0]


def output_sizes(graph, v):
    return graph.tensor_size[graph.output_ptr[v]:graph.output_ptr[v + 1]].tolist()


@pytest.fixture(scope="module")
def infer():
    return tfio.import_model(small_model, batch_size=BATCH)


@pytest.fixture(scope="module")
def train():
    return tfio.import_model(small_model, batch_size=BATCH, training=True)


def test_static_inference_shapes_and_ops(infer):
    types = infer.op_types.tolist()
    assert types.count("Conv2D") == 1 and types.count("MatMul") == 1
    _, _, n_weights, _ = param_counts()
    assert types.count("VarHandleOp") == n_weights
    assert not set(types) & {"If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall"}
    assert 15 <= infer.num_nodes <= 40  # the forward step only, no initializers
    dense = op_named(infer, "dense_out/BiasAdd")
    assert output_sizes(infer, dense) == [BATCH * UNITS * 4]
    conv = op_named(infer, "conv/Conv2D")
    assert output_sizes(infer, conv) == [BATCH * 6 * 6 * CONV_FILTERS * 4]


def test_variables_are_persistent_once(infer):
    params, _, n_weights, _ = param_counts()
    assert int(infer.persistent_memory.sum()) == params * 4
    owners = np.flatnonzero(infer.persistent_memory)
    assert len(owners) == n_weights  # one reader per variable
    assert set(infer.op_types[owners].tolist()) == {"ReadVariableOp"}
    kernel_read = op_named(infer, "dense_out/MatMul/ReadVariableOp")
    assert infer.persistent_memory[kernel_read] == FLAT * UNITS * 4
    # the read aliases the variable's (0-byte) handle: no second copy on its device
    t = infer.output_ptr[kernel_read]
    handle = infer.tensor_alias[t]
    assert handle >= 0 and infer.op_types[infer.tensor_producer[handle]] == "VarHandleOp"
    assert infer.tensor_size[handle] == 0


def test_static_cost_is_the_documented_roofline(infer):
    v = op_named(infer, "dense_out/MatMul")
    flops = 2 * BATCH * FLAT * UNITS
    moved = 4 * (BATCH * FLAT + FLAT * UNITS + BATCH * UNITS)
    expected = tfio.LAUNCH_US + max(flops / tfio.FLOPS_PER_US, moved / tfio.BYTES_PER_US)
    assert infer.compute_cost[v] == pytest.approx(expected)
    conv = op_named(infer, "conv/Conv2D")
    flops = 2 * (BATCH * 6 * 6 * CONV_FILTERS) * (3 * 3 * 3)
    moved = 4 * (BATCH * 8 * 8 * 3 + 3 * 3 * 3 * CONV_FILTERS + BATCH * 6 * 6 * CONV_FILTERS)
    expected = tfio.LAUNCH_US + max(flops / tfio.FLOPS_PER_US, moved / tfio.BYTES_PER_US)
    assert infer.compute_cost[conv] == pytest.approx(expected)
    assert infer.compute_cost[op_named(infer, "dense_out/kernel")] == 0.0


def test_training_graph_has_backward_and_updates(infer, train):
    params, trainable, _, n_trainable = param_counts()
    assert train.num_nodes > 2 * infer.num_nodes
    types = train.op_types.tolist()
    for grad_op in ("Conv2DBackpropFilter", "FusedBatchNormGradV3", "BiasAddGrad"):
        assert grad_op in types
    assert types.count("ResourceApplyAdam") == n_trainable
    assert types.count("AssignSubVariableOp") == 2  # batch-norm moving mean and variance
    # weights + Adam's two slots per trainable weight + beta1/beta2 power scalars
    assert int(train.persistent_memory.sum()) == 4 * (params + 2 * trainable) + 2 * 4
    assert train.num_control_edges > 0
    dense = op_named(train, "dense_out/BiasAdd")
    assert output_sizes(train, dense) == [BATCH * UNITS * 4]


def test_batch_size_scales_activations_not_weights():
    g1 = tfio.import_model(small_model, batch_size=1)
    g8 = tfio.import_model(small_model, batch_size=8)
    assert output_sizes(g8, op_named(g8, "dense_out/BiasAdd")) == [8 * UNITS * 4]
    assert output_sizes(g1, op_named(g1, "dense_out/BiasAdd")) == [1 * UNITS * 4]
    assert g1.persistent_memory.sum() == g8.persistent_memory.sum()


def test_unknown_input_dimension_names_the_tensor():
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="x")])
    def f(x):
        return tf.reduce_sum(x * 2.0, axis=1)

    with pytest.raises(GraphError, match=r"x:0.*unknown dimension"):
        tfio.import_model(f)
    g = tfio.import_model(f, input_shapes=[[3, 5]])
    assert sorted(g.tensor_size.tolist())[-1] == 3 * 5 * 4


def test_data_dependent_shape_names_op_and_port():
    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def f(x):
        return tf.boolean_mask(x, x[:, 0] > 0)

    with pytest.raises(GraphError, match=r"tensor [\w/]+:\d .*unknown shape"):
        tfio.import_model(f, batch_size=2)


def test_run_mode_measures_the_step():
    g = tfio.import_model(small_model, batch_size=BATCH, run=True)
    assert g.num_nodes >= 10
    assert (g.compute_cost > 0).any()
    dense = op_named(g, "dense_out/BiasAdd")
    assert output_sizes(g, dense) == [BATCH * UNITS * 4]  # real size = static size
    params, *_ = param_counts()
    assert int(g.persistent_memory.sum()) >= params * 4
    gt = tfio.import_model(small_model, batch_size=BATCH, training=True, run=True)
    assert gt.num_nodes > g.num_nodes and (gt.compute_cost > 0).sum() > (g.compute_cost > 0).sum()


def _dense_function():
    w = tf.constant(np.arange(6 * 5, dtype=np.float32).reshape(6, 5))

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def f(x):
        return tf.nn.relu(tf.matmul(x, w))
    return f


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_graph_def_file(tmp_path, suffix):
    graph_def = _dense_function().get_concrete_function().graph.as_graph_def()
    path = tmp_path / f"model{suffix}"
    if suffix == ".pb":
        path.write_bytes(graph_def.SerializeToString())
    else:
        path.write_text(str(graph_def))
    g = tfio.import_model(str(path), batch_size=3)
    mm = int(np.flatnonzero(g.op_types == "MatMul")[0])
    assert output_sizes(g, mm) == [3 * 5 * 4]
    relu = int(np.flatnonzero(g.op_types == "Relu")[0])
    assert mm in g.predecessors(relu).tolist()


def test_bad_graph_def_file(tmp_path):
    path = tmp_path / "junk.pb"
    path.write_bytes(b"\xff\xff\xff not a protobuf")
    with pytest.raises(GraphError, match="junk.pb"):
        tfio.import_model(str(path))


class _Affine(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones([6, 7]), name="w")
        self.b = tf.Variable(tf.zeros([7]), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def __call__(self, x):
        return tf.nn.tanh(tf.matmul(x, self.w) + self.b)


def test_saved_model_directory(tmp_path):
    module = _Affine()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    g = tfio.import_model(str(tmp_path / "sm"), batch_size=5)
    assert int(g.persistent_memory.sum()) == (6 * 7 + 7) * 4
    mm = int(np.flatnonzero(g.op_types == "MatMul")[0])
    assert output_sizes(g, mm) == [5 * 7 * 4]
    assert not {"PartitionedCall", "StatefulPartitionedCall"} & set(g.op_types.tolist())
    gt = tfio.import_model(str(tmp_path / "sm"), batch_size=5, training=True)
    assert (gt.op_types == "ResourceApplyAdam").sum() == 2
    assert int(gt.persistent_memory.sum()) == 3 * (6 * 7 + 7) * 4 + 2 * 4


def test_tf_function_with_variables_training():
    module = _Affine()
    g = tfio.import_model(module.__call__, batch_size=2, training=True)
    assert "MatMul" in g.op_types.tolist() and (g.op_types == "ResourceApplyAdam").sum() == 2


@pytest.mark.filterwarnings("ignore:You are saving your model as an HDF5 file")
def test_cli_import_end_to_end(tmp_path, capsys):
    from regal.cli import main

    model_file = tmp_path / "small.h5"
    small_model().save(str(model_file))
    out = tmp_path / "small.npz"
    assert main(["import", str(model_file), "--out", str(out), "--batch", "3",
                 "--training"]) == 0
    g = load_graph(out)
    assert output_sizes(g, op_named(g, "dense_out/BiasAdd")) == [3 * UNITS * 4]
    assert "ResourceApplyAdam" in g.op_types.tolist()


@pytest.mark.parametrize("model", ["/no/such/model.h5", "keras.applications.NoSuchNet",
                                   "no_such_module_xyz:build"])
def test_cli_import_bad_model_exit_2(tmp_path, capsys, model):
    from regal.cli import main

    out = tmp_path / "x.npz"
    assert main(["import", model, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("regal: error:") and "\n" not in err
    assert not out.exists()
