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
                                   "no_such_module_xyz:build",
                                   # issue 36 item 6: attributes that are no model builder
                                   "time:sleep", "os.path:join", "math:pi", "os:getcwd"])
def test_cli_import_bad_model_exit_2(tmp_path, capsys, model):
    from regal.cli import main

    out = tmp_path / "x.npz"
    assert main(["import", model, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("regal: error:") and "\n" not in err and model in err
    assert not out.exists()


def test_type_error_inside_a_model_builder_stays_the_users(tmp_path, monkeypatch):
    """Only a builder that cannot be called without arguments is refused by its spec: a
    TypeError from the code it runs is not dressed up as one."""
    (tmp_path / "builds_badly.py").write_text("def build():\n    return len(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="has no len"):
        tfio.import_model("builds_badly:build")


def test_a_models_module_in_the_current_folder_is_found(tmp_path, monkeypatch):
    """The `regal` script, unlike `python -m`, does not put the current folder on sys.path;
    `package.module:attr` still finds a module there (the README's `my_models.nets:...`)."""
    import sys
    (tmp_path / "here_net.py").write_text(
        "import tensorflow as tf\n"
        "def build():\n"
        "    return tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    graph = tfio.import_model("here_net:build")
    assert graph.num_nodes > 0 and graph.persistent_memory.sum() == (3 * 2 + 2) * 4


def _lambda_model(marker):
    """A model whose Lambda layer creates `marker` whenever the model is built or rebuilt."""
    x = tf.keras.Input((4,))
    h = tf.keras.layers.Lambda(lambda t, marker=str(marker): (open(marker, "a").close(), t)[1],
                               name="touches_marker")(x)
    return tf.keras.Model(x, tf.keras.layers.Dense(2)(h))


@pytest.mark.filterwarnings("ignore:You are saving your model as an HDF5 file")
@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_keras_file_with_code_loads_only_when_trusted(tmp_path, capsys, suffix):
    """Issue 36 item 4: a legacy .h5 has no safe mode, so its Lambda used to run on import."""
    from helpers import refused

    marker, path = tmp_path / "marker", tmp_path / f"lambda{suffix}"
    _lambda_model(marker).save(str(path))
    marker.unlink()
    for command in ("import", "optimize"):
        refused([command, str(path), "--out", str(tmp_path / "out.npz")] +
                (["--devices", "2"] if command == "optimize" else []), capsys,
                f"{path}: layer 'touches_marker' is a Lambda")
    assert not marker.exists()
    graph = tfio.import_model(str(path), trust_code=True)
    assert marker.exists() and graph.num_nodes > 0
    # apply and measure load the model too: refused as well, and they take the flag
    from regal.cli import main
    solution = tmp_path / "solution.json"
    assert main(["optimize", str(path), "--devices", "2", "--budget", "20", "--trust-code",
                 "--out", str(solution)]) == 0
    marker.unlink()
    refused(["apply", str(path), "--solution", str(solution), "--out", str(tmp_path / "placed")],
            capsys, f"{path}: layer 'touches_marker' is a Lambda")
    refused(["measure", str(path), "--solution", str(solution), "--devices", "1"], capsys,
            f"{path}: layer 'touches_marker' is a Lambda")
    assert not marker.exists()


# ---------------------------------------------------------------------------
# importer corrections: in-place forwarding and conv-gradient scratch


@tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
def _elementwise_chain(x):
    a = tf.nn.relu(x)        # reads the feed: TF never forwards a fed tensor here
    b = a * 2.0              # a has a later consumer (add): no forwarding
    c = a + b                # last consumer of a (mul is an ancestor): forwards a
    d = tf.tanh(c)           # only consumer of c: forwards c
    return tf.exp(d) + d     # exp: add_1 reads d later, no; add_1 forwards exp's output


def _aliases_by_name(graph):
    """op name -> name of the op whose output 0 its output 0 aliases (element-wise ops)."""
    out = {}
    for v, name in enumerate(graph.names.tolist()):
        t = graph.output_ptr[v]
        if graph.output_ptr[v + 1] > t and graph.tensor_alias[t] >= 0:
            out[name] = str(graph.names[graph.tensor_producer[graph.tensor_alias[t]]])
    return out


def test_forwarding_aliases_hand_checked():
    # the expectation was checked against a traced TF 2.21 CPU run of this function: the
    # output buffer pointers of add, Tanh and add_1 equal those of Relu, add and Exp
    g = tfio.import_model(_elementwise_chain, batch_size=4)
    assert _aliases_by_name(g) == {"add": "Relu", "Tanh": "add", "add_1": "Exp",
                                   "Identity": "add_1"}
    off = tfio.import_model(_elementwise_chain, batch_size=4, forwarding=False)
    assert _aliases_by_name(off) == {"Identity": "add_1"}
    assert off.tensor_size.tolist() == g.tensor_size.tolist()
    assert tfio.with_forwarding(off).equals(g)
    assert tfio.with_forwarding(g).equals(g)  # idempotent
    # a held (fetched) tensor is never forwarded into: add_1 then takes its other input,
    # Tanh's output, whose other consumer (Exp) is an ancestor of add_1
    exp = off.names.tolist().index("Exp")
    held = tfio.with_forwarding(off, held=[int(off.output_ptr[exp])])
    assert _aliases_by_name(held)["add_1"] == "Tanh"


def test_forwarding_in_a_keras_model(infer):
    def source(suffix):
        t = infer.tensor_alias[infer.output_ptr[op_named(infer, suffix)]]
        return -1 if t < 0 else int(infer.tensor_producer[t])

    # Conv2D -> BiasAdd -> Relu chain and the dense BiasAdd; the matmul/conv themselves and
    # batch norm (not element-wise) allocate
    assert source("conv/BiasAdd") == op_named(infer, "conv/Conv2D")
    assert source("conv/Relu") == op_named(infer, "conv/BiasAdd")
    assert source("dense_out/BiasAdd") == op_named(infer, "dense_out/MatMul")
    for suffix in ("conv/Conv2D", "dense_out/MatMul", "bn/FusedBatchNormV3"):
        assert source(suffix) == -1
    off = tfio.import_model(small_model, batch_size=BATCH, forwarding=False)
    assert int((infer.tensor_alias >= 0).sum()) == int((off.tensor_alias >= 0).sum()) + 3


def test_conv2d_backprop_filter_scratch_formula():
    # P = 6*6 patches, F = 3*3*3, O = 4: A = 972, work = 972 + 144 + 108 = 1224,
    # shard = ceil(7864320 / 1224) = 6426, bytes = 6426 * 972 * 4 (TF 2.21 CPU measured
    # exactly this for an 8x8x3 input, 3x3x3x4 VALID filter)
    assert tfio.conv2d_backprop_filter_scratch(6, 6, 3, 3, 3, 4) == 6426 * 972 * 4 == 24984288
    # 112x112 output, 3x3x32 -> 64: work = 3612672 + 802816 + 18432, shard = 2
    assert tfio.conv2d_backprop_filter_scratch(112, 112, 3, 3, 32, 64) == 2 * 3612672 * 4
    # one image's patches exceed the 30 MiB working set: shard = 1, the im2col of one image
    assert tfio.conv2d_backprop_filter_scratch(224, 224, 3, 3, 64, 64) == 224 * 224 * 576 * 4
    assert tfio.conv2d_backprop_filter_scratch(6, 6, 3, 3, 3, 4, itemsize=2) == \
        -(-(15 << 20) // 1224) * 972 * 2


def test_conv2d_backprop_input_scratch_formula():
    # each value below is also what TF 2.21 CPU (2 worker threads) measured for the shape
    # batch 16, 32x32 output, 3x3x3 -> 16: A = 16384, B = 432, C = 27648, work = 44464;
    # work / 2 threads = 22232 < 65536 (256 KiB of floats): sharded, ceil(7864320/44464) = 177
    assert tfio.conv2d_backprop_input_scratch(16, 32, 32, 3, 3, 3, 16, threads=2) == \
        177 * 27648 * 4 == 19574784
    # batch 8, 32x32, 3x3x32 -> 32: work = 336896, / 2 = 168448 >= 65536: one image, C
    assert tfio.conv2d_backprop_input_scratch(8, 32, 32, 3, 3, 32, 32, threads=2) == \
        1024 * 288 * 4 == 1179648
    # batch 1 always packs one image; more threads make the same shape shard
    assert tfio.conv2d_backprop_input_scratch(1, 32, 32, 3, 3, 3, 16) == 27648 * 4
    assert tfio.conv2d_backprop_input_scratch(8, 32, 32, 3, 3, 32, 32, threads=8) == \
        -(-7864320 // 336896) * 294912 * 4


def test_kernel_scratch_only_on_conv_gradients(infer, train):
    assert int(infer.temporary_memory.sum()) == 0
    v = op_named(train, "Conv2DBackpropFilter")
    assert train.temporary_memory[v] == 24984288  # BATCH 4: independent of the batch
    # Adam's gradient gate keeps the input gradient too: batch 4, work 1224 / 2 threads
    # < 65536, so sharded like the filter gradient: the same 6426 x 972 x 4 bytes
    u = op_named(train, "Conv2DBackpropInput")
    assert train.temporary_memory[u] == 24984288
    assert int(train.temporary_memory.sum()) == 2 * 24984288
    off = tfio.import_model(small_model, batch_size=BATCH, training=True,
                            kernel_scratch=False)
    assert int(off.temporary_memory.sum()) == 0


def test_import_step_carries_saved_model_weights(tmp_path):
    module = _Affine()
    module.w.assign(np.arange(42, dtype=np.float32).reshape(6, 7))
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    step = tfio.import_step(str(tmp_path / "sm"), batch_size=2)
    values = sorted(step.values.values(), key=np.size)
    assert len(values) == 2 and {op.type for op in step.ops if op.name in step.values} == \
        {"VarHandleOp"}
    np.testing.assert_array_equal(values[1], np.arange(42, dtype=np.float32).reshape(6, 7))
    np.testing.assert_array_equal(values[0], np.zeros(7, np.float32))


def _tf_groups_truth(source, training):
    """Groups read straight off the tf.Graph: each op with a resource/ref input joins that
    input's producer; `_class` loc:@NAME joins NAME (independent of the importer's code)."""
    step = tfio._build_step(source, batch_size=BATCH, training=training, input_shapes=None,
                            learning_rate=1e-3)
    ops = tfio._prune(step.graph, step.fetches)
    names = [op.name for op in ops]
    label = {name: name for name in names}

    def find(x):
        while label[x] != x:
            x = label[x]
        return x

    for op in ops:
        linked = [t.op.name for t in op.inputs
                  if t.dtype == tf.resource or t.dtype.name.endswith("_ref")]
        linked += [c.decode()[5:] for c in (op.node_def.attr["_class"].list.s
                                            if "_class" in op.node_def.attr else [])]
        for other in linked:
            if other in label:
                label[find(op.name)] = find(other)
    groups = {}
    for name in names:
        groups.setdefault(find(name), set()).add(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


@pytest.mark.parametrize("training", [False, True])
def test_colocation_groups_are_tensorflows(training):
    graph = tfio.import_model(small_model, batch_size=BATCH, training=training)
    names = graph.names
    got = sorted(sorted(names[m].tolist()) for m in graph.groups().values())
    assert got == _tf_groups_truth(small_model, training)
    # by hand: the dense kernel's group
    kernel = op_named(graph, "dense_out/kernel")
    members = {str(names[v]) for v in graph.groups()[int(graph.colocation[kernel])]}
    types = sorted(str(graph.op_types[v]) for v in graph.groups()[int(graph.colocation[kernel])])
    if training:
        assert {"dense_out/kernel", "dense_out/kernel/Adam", "dense_out/kernel/Adam_1"} <= members
        assert types.count("ResourceApplyAdam") == 1 and types.count("VarHandleOp") == 3
    else:
        assert types == ["ReadVariableOp", "VarHandleOp"]
    # every variable's handle shares a group with every op reading it, nothing else joins
    bn_gamma = op_named(graph, "bn/gamma")
    assert graph.colocation[bn_gamma] != graph.colocation[kernel]
    assert not graph.has_pins
