"""The layer-split baseline (issue 41 item 2): contiguous stages of the layer sequence, one per
device, balanced by memory or compute, ops in op id order; judged against splits worked out
by hand, brute force over every cut, and the simulator."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from regal import synth
from regal.cli import main
from regal.constraints import with_constraints
from regal.decode import colocation_violation
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, available_methods, score, solve
from regal.sim import DeviceSpec, simulate
from baselines.layer_split import layer_keys, layer_sequence, linear_partition, place
from helpers import one_synthetic_graph, random_graph

METHODS = ("layer-split", "layer-split-compute")

# ---------------------------------------------------------------------------
# a four-layer training step named as TensorFlow names it

# per layer: the kernel's bytes, and the compute of its forward and backward op. A layer's
# memory is its kernel + its 10-byte activation + the 10-byte gradient its backward op sends
# to the layer before (none for l0): 400, 300, 200, 500 bytes. Its compute is forward +
# backward: 100, 200, 300, 400 us.
KERNEL = (390, 280, 180, 480)
FORWARD = (25.0, 50.0, 75.0, 100.0)
BACKWARD = (75.0, 150.0, 225.0, 300.0)

# the best cuts, by hand (the heaviest stage; every other cut is heavier):
# memory 400 300 200 500, 2 devices: [400 300 | 200 500] = 700 (not 400|1000, 900|500);
#   3 devices: [400 | 300 200 | 500] = 500 (not 400|300|700, 700|200|500)
# compute 100 200 300 400, 2 devices: [100 200 300 | 400] = 600 (not 100|900, 300|700);
#   3 devices: [100 200 | 300 | 400] = 400 (not 100|200|700, 100|500|400)
EXPECTED = {("memory", 2): [0, 0, 1, 1], ("memory", 3): [0, 1, 1, 2],
            ("compute", 2): [0, 0, 0, 1], ("compute", 3): [0, 0, 1, 2]}


def _four_layers():
    """Variables first (as TensorFlow lists them, outside the model's scope), then the forward
    pass, the backward pass (last layer first) and the optimizer's updates: op ids are not in
    layer order. Returns the graph and the layer (0-3) of every op."""
    b = GraphBuilder()
    layer_of = []

    def op(name, layer, cost=0.0, **memory):
        layer_of.append(layer)
        return b.add_op(name, cost, **memory)

    kernel = [op(f"l{k}/kernel", k, persistent_memory=KERNEL[k]) for k in range(4)]
    for v in kernel:
        b.add_output(v, 0)   # the variable's handle
    matmul = []
    for k in range(4):
        v = op(f"model/l{k}/MatMul", k, FORWARD[k])
        b.add_output(v, 10)
        if k:
            b.add_input(v, matmul[-1])
        b.add_input(v, kernel[k])
        matmul.append(v)
    grad = [None] * 4
    for k in reversed(range(4)):
        v = op(f"gradients/model/l{k}/MatMul_grad/MatMul", k, BACKWARD[k])
        b.add_input(v, matmul[3] if k == 3 else grad[k + 1], 0)
        if k:
            b.add_input(v, matmul[k - 1])
            b.add_output(v, 10)   # to the layer before
        b.add_output(v, 0)        # the kernel's gradient
        grad[k] = v
    for k in range(4):
        v = op(f"Adam/update_model/l{k}/kernel/ResourceApplyAdam", k)
        b.add_input(v, grad[k], 1 if k else 0)
        b.colocate(v, kernel[k])   # TensorFlow colocates an update with its variable
    return b.build(), np.asarray(layer_of)


def test_layer_keys_read_tensorflow_names():
    names = ["resnet50/conv1_conv/Conv2D", "conv1_conv/kernel", "conv1_conv/kernel/Adam",
             "gradients/resnet50/conv1_conv/Conv2D_grad/Conv2DBackpropFilter",
             "train_op/update_conv1_conv/kernel/ResourceApplyAdam",
             "resnet50/conv1_bn/FusedBatchNormV3/ReadVariableOp",
             "gradients_1/resnet50/conv1_bn/FusedBatchNormV3_grad/FusedBatchNormGradV3",
             "gradient_tape/resnet50/pool/MaxPool/MaxPoolGrad",
             "resnet50/pool/MaxPool", "Adam/update_resnet50/conv1_bn/gamma/ResourceApplyAdam",
             "resnet50/Mean", "gradients/Mean_grad/Tile", "gradients/AddN_3", "train_op",
             "input_0"]
    keys, kinds = layer_keys(names)
    assert keys == ["conv1_conv"] * 5 + ["conv1_bn"] * 2 + ["pool"] * 2 + ["conv1_bn", "Mean",
                                                                          "Mean", "AddN_3",
                                                                          "train_op", "input_0"]
    assert kinds.tolist() == [0, 0, 0, 1, 2, 0, 1, 1, 0, 2, 0, 1, 1, 0, 0]
    # no scopes: every op is its own layer; one scope holding every op is the model's
    assert layer_keys(["op_1", "op_2", "op_3"])[0] == ["op_1", "op_2", "op_3"]
    assert layer_keys(["cnn/conv_1", "grad/cnn/conv_1", "update/cnn/conv_1", "cnn/relu_2",
                       "loss"])[0] == ["conv_1", "conv_1", "conv_1", "relu_2", "loss"]
    # a model nested in another: both scopes are the model's
    assert layer_keys(["outer/inner/a/x", "outer/inner/a/y", "outer/inner/b/x",
                       "gradients/outer/inner/b/x_grad/y", "v"])[0] == ["a", "a", "b", "b", "v"]


def test_the_layer_sequence_is_the_forward_order():
    graph, layer_of = _four_layers()
    layer, count = layer_sequence(graph)
    assert count == 4 and np.array_equal(layer, layer_of)


@pytest.mark.parametrize("balance,d", sorted(EXPECTED))
def test_four_layers_split_by_hand(balance, d):
    graph, layer_of = _four_layers()
    placement, info = place(graph, d, balance)
    want = np.asarray(EXPECTED[balance, d])
    assert np.array_equal(placement, want[layer_of]), (balance, d)
    assert info["layers"] == 4
    method = "layer-split" if balance == "memory" else "layer-split-compute"
    found = solve(method, Problem(graph, DeviceSpec(d)), 10, 0)
    assert np.array_equal(found.placement, want[layer_of])
    assert found.extra["colocation_repaired"] == 0
    # op id order: an earlier op has the higher priority, for ops and for transfers
    assert np.all(np.diff(found.priority) < 0)
    assert np.array_equal(found.priority, found.transfer_priority)


def test_one_device_takes_everything():
    graph, _ = _four_layers()
    for method in METHODS:
        assert not solve(method, Problem(graph, DeviceSpec(1)), 1, 0).placement.any()


# ---------------------------------------------------------------------------
# the linear partition against brute force


def _brute_force(w, d, capacity=None):
    """The least heaviest stage over every placement of d - 1 cuts (stages may be empty)."""
    cap = np.ones(d) if capacity is None else np.asarray(capacity, float)
    best = np.inf
    for cuts in itertools.combinations_with_replacement(range(len(w) + 1), d - 1):
        bounds = (0,) + cuts + (len(w),)
        worst = 0.0
        for k in range(d):
            load = float(np.sum(w[bounds[k]:bounds[k + 1]]))
            worst = max(worst, (np.inf if load > 0 else 0.0) if cap[k] == 0 else load / cap[k])
        best = min(best, worst)
    return best


def _heaviest(w, stage, d, capacity=None):
    cap = np.ones(d) if capacity is None else np.asarray(capacity, float)
    load = np.bincount(stage, weights=w, minlength=d)
    return max((np.inf if load[k] > 0 else 0.0) if cap[k] == 0 else load[k] / cap[k]
               for k in range(d))


def test_linear_partition_matches_brute_force():
    rng = np.random.default_rng(41)
    for case in range(600):
        L, d = int(rng.integers(0, 9)), int(rng.integers(1, 5))
        w = rng.integers(0, 6, L).astype(float) if case % 2 else rng.random(L) * 10
        capacity = None if case % 3 else rng.integers(0, 4, d).astype(float)
        stage = linear_partition(w, d, capacity)
        assert stage.shape == (L,) and np.all(np.diff(stage) >= 0), (w, d, stage)
        assert np.all((0 <= stage) & (stage < d))
        got, best = _heaviest(w, stage, d, capacity), _brute_force(w, d, capacity)
        assert got == best or np.isclose(got, best, rtol=1e-12), (w, d, capacity, stage)
        if capacity is None:   # no device left idle while a layer could use it
            assert set(stage.tolist()) == set(range(min(d, L))), (w, d, stage)


def test_linear_partition_refuses_bad_input():
    with pytest.raises(ValueError, match="weights"):
        linear_partition([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="d:"):
        linear_partition([1.0], 0)
    with pytest.raises(ValueError, match="capacity"):
        linear_partition([1.0], 2, [1.0])
    with pytest.raises(ValueError, match="balance"):
        solve("layer-split", Problem(_four_layers()[0], DeviceSpec(2)), 1, 0, balance="flops")


# ---------------------------------------------------------------------------
# contiguous stages; backward and optimizer ops with their forward layer


@pytest.mark.parametrize("family,seed", [("cnn", 0), ("transformer", 1), ("inception", 2)])
@pytest.mark.parametrize("method", METHODS)
def test_stages_are_contiguous_and_backward_ops_follow_their_layer(family, seed, method):
    """A synthetic training step (`cnn/conv2d_3`, `grad/cnn/conv2d_3`, `update/cnn/conv2d_3`):
    every forward op with inputs is a layer, in topological order (the input placeholder goes
    with its first reader); its backward and update ops share its device; devices never
    decrease along the sequence."""
    graph = synth.training_graph(synth.generate(family, 40, seed))
    names = graph.names.tolist()
    forward = [v for v, name in enumerate(names) if not name.startswith(("grad/", "update/"))]
    d = 3
    found = solve(method, Problem(graph, DeviceSpec(d)), 5, 0)
    device = dict(zip(names, found.placement.tolist()))
    rank = np.empty(graph.num_nodes, np.int64)
    rank[graph.topo_order] = np.arange(graph.num_nodes)
    sequence = sorted(forward, key=lambda v: rank[v])
    along = [device[names[v]] for v in sequence]
    assert along == sorted(along) and set(along) == set(range(d))
    for name in names:
        for prefix in ("grad/", "update/"):
            if name.startswith(prefix):
                assert device[name] == device[name[len(prefix):]], name
    layer, count = layer_sequence(graph)
    inner = [v for v in sequence if len(graph.predecessors(v))]
    assert count == len(inner) and [int(layer[v]) for v in inner] == list(range(count))
    for v in sequence:
        if not len(graph.predecessors(v)):   # a source: with its first reader
            readers = graph.successors(v)
            assert layer[v] == layer[readers[np.argmin(rank[readers])]]


# ---------------------------------------------------------------------------
# colocation groups and pins


def _constrained_problem(seed=0, d=3):
    g = random_graph(np.random.default_rng(seed), num_ops=40)
    names = g.names.tolist()
    g = with_constraints(g, colocate=[names[i:i + 4] for i in range(0, 24, 6)],
                         pins={names[30]: 2, names[2]: 1})
    return Problem(g, DeviceSpec(d))


@pytest.mark.parametrize("method", METHODS)
def test_groups_and_pins_are_respected(method):
    for seed in range(3):
        problem = _constrained_problem(seed)
        found = solve(method, problem, 5, 0)
        assert colocation_violation(problem.graph, found.placement) is None
        assert found.extra["colocation_repaired"] == 0   # the method projected them itself
        pinned = problem.graph.pinned
        assert np.all(found.placement[pinned >= 0] == pinned[pinned >= 0])


# ---------------------------------------------------------------------------
# through the registry, the simulator, the command line and the harness


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("objective", ["peak_memory", "makespan"])
def test_registry_answer_is_the_simulators(method, objective):
    assert method in available_methods()
    graph, _ = _four_layers()
    problem = Problem(graph, DeviceSpec(2), objective)
    found = solve(method, problem, 10, 0)
    assert found.evaluations == 1 and found.method == method
    result = simulate(graph, problem.devices, found.placement, found.priority,
                      found.transfer_priority)
    assert found.value == result.objective(objective)
    assert np.array_equal(found.peak, result.peak) and found.makespan == result.makespan
    assert "reported_value" not in found.extra
    with pytest.raises(ValueError, match="budget"):
        solve(method, problem, 0, 0)


def test_a_missed_limit_gets_a_split_balanced_against_it():
    """Per-device limits the limit-free split misses: a second split, each stage's memory
    relative to its device's limit (2 evaluations), never worse than the first."""
    graph, layer_of = _four_layers()
    free = solve("layer-split", Problem(graph, DeviceSpec(2)), 10, 0)
    limits = [int(free.peak[1]) // 2, 10 * int(free.peak.max())]   # device 0 small
    problem = Problem(graph, DeviceSpec(2, limits))
    limited = solve("layer-split", problem, 10, 0)
    assert limited.evaluations == 2
    assert limited.value <= score(problem, free.placement, free.priority,
                                  free.transfer_priority)["value"]
    assert limited.extra["balance"] == "memory/limits"


def test_a_graph_without_scopes_is_split_in_topological_order():
    """Names without scopes: every op with inputs is a layer, in topological order; a source
    joins its first reader's layer."""
    graph = synth.random_dag(50, 7)   # names node_0 ... node_49
    assert len(set(layer_keys(graph.names.tolist())[0])) == graph.num_nodes
    layer, count = layer_sequence(graph)
    rank = np.empty(graph.num_nodes, np.int64)
    rank[graph.topo_order] = np.arange(graph.num_nodes)
    inner = [int(v) for v in graph.topo_order if len(graph.predecessors(int(v)))]
    assert count == len(inner) and layer[inner].tolist() == list(range(count))
    for v in range(graph.num_nodes):
        readers = graph.successors(v)
        if not len(graph.predecessors(v)) and len(readers):
            assert layer[v] == layer[readers[np.argmin(rank[readers])]]
    for method in METHODS:
        found = solve(method, Problem(graph, DeviceSpec(4)), 5, 0)
        along = found.placement[inner]
        assert np.all(np.diff(along) >= 0) and set(along.tolist()) == {0, 1, 2, 3}
        assert np.array_equal(found.placement, found.placement[inner][layer])


def test_ops_without_edges_are_layers_of_their_own():
    """No op reads another: each is a layer, one per device while devices last."""
    b = GraphBuilder()
    for i in range(3):
        b.add_output(b.add_op(f"op{i}", 1.0, persistent_memory=100), 8)
    found = solve("layer-split", Problem(b.build(), DeviceSpec(3)), 1, 0)
    assert found.placement.tolist() == [0, 1, 2]


def test_cli_optimize_and_compare_accept_it(tmp_path, capsys):
    path = one_synthetic_graph(tmp_path / "graphs", 30, 60, 3)
    out = tmp_path / "solution.json"
    assert main(["optimize", path, "--devices", "2", "--method", "layer-split",
                 "--out", str(out)]) == 0
    solution = json.loads(out.read_text())
    assert solution["method"] == "layer-split"
    assert main(["compare", "--methods", "layer-split,layer-split-compute", "--graphs",
                 str(tmp_path / "graphs"), "--budget", "10", "--seeds", "1", "--workers", "1",
                 "--out", str(tmp_path / "res"), "--quiet"]) == 0
    records = [json.loads(line)
               for line in (tmp_path / "res" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["method"] for r in records) == sorted(METHODS)
    assert all(r["status"] == "ok" and r["evaluations"] == 1 for r in records)
    capsys.readouterr()


# ---------------------------------------------------------------------------
# pipeline schedules over micro-batches (issue 41 item 5)


def test_stage_sequences_by_hand():
    from baselines.layer_split import _stage_sequence
    F, B = 0, 1
    # GPipe: every forward, then every backward, on every stage
    assert _stage_sequence("gpipe", 0, 2, 3) == [(F, 0), (F, 1), (F, 2), (B, 0), (B, 1), (B, 2)]
    # 1F1B, 2 stages, 3 micro-batches: stage 0 warms up with one forward, the last with none
    assert _stage_sequence("1f1b", 0, 2, 3) == [(F, 0), (F, 1), (B, 0), (F, 2), (B, 1), (B, 2)]
    assert _stage_sequence("1f1b", 1, 2, 3) == [(F, 0), (B, 0), (F, 1), (B, 1), (F, 2), (B, 2)]
    # more stages than micro-batches: the warm-up is every forward
    assert _stage_sequence("1f1b", 0, 4, 2) == [(F, 0), (F, 1), (B, 0), (B, 1)]


def _two_microbatch_chain():
    """Two micro-batches through layers a and b and back, a variable each, summed gradients
    and an update: names as the importer writes them."""
    g = GraphBuilder()
    ids = {}

    def op(name, *inputs):
        ids[name] = g.add_op(name, 10.0)
        g.add_output(ids[name], 8)
        for src in inputs:
            g.add_input(ids[name], ids[src])
    op("a/kernel")
    op("b/kernel")
    for m in range(2):
        p = f"microbatch{m}"
        op(f"{p}/a/MatMul", "a/kernel")
        op(f"{p}/b/MatMul", f"{p}/a/MatMul", "b/kernel")
        op(f"{p}/gradients/b/MatMul_grad/MatMul", f"{p}/b/MatMul")
        op(f"{p}/gradients/a/MatMul_grad/MatMul", f"{p}/gradients/b/MatMul_grad/MatMul",
           f"{p}/a/MatMul")
    op("gradients_sum/a", "microbatch0/gradients/a/MatMul_grad/MatMul",
       "microbatch1/gradients/a/MatMul_grad/MatMul")
    op("Adam/update_a/kernel/ResourceApplyAdam", "gradients_sum/a", "a/kernel")
    return g.build(), ids


def test_pipeline_order_runs_each_stage_in_its_schedule():
    from baselines.layer_split import microbatch_of, pipeline_order
    graph, ids = _two_microbatch_chain()
    names = graph.names.tolist()
    assert microbatch_of(names)[ids["microbatch1/b/MatMul"]] == 1
    assert microbatch_of(names)[ids["a/kernel"]] == -1
    placement = np.zeros(graph.num_nodes, np.int32)   # one stage: its schedule is the order
    order = [names[v] for v in pipeline_order(graph, placement, 1, "gpipe")]
    assert order == ["a/kernel", "b/kernel",
                     "microbatch0/a/MatMul", "microbatch0/b/MatMul",
                     "microbatch1/a/MatMul", "microbatch1/b/MatMul",
                     "microbatch0/gradients/b/MatMul_grad/MatMul",
                     "microbatch0/gradients/a/MatMul_grad/MatMul",
                     "microbatch1/gradients/b/MatMul_grad/MatMul",
                     "microbatch1/gradients/a/MatMul_grad/MatMul",
                     "gradients_sum/a", "Adam/update_a/kernel/ResourceApplyAdam"]
    order = [names[v] for v in pipeline_order(graph, placement, 1, "1f1b")]
    assert order.index("microbatch0/gradients/a/MatMul_grad/MatMul") < \
        order.index("microbatch1/a/MatMul")   # one stage: no warm-up, F0 B0 F1 B1
    # without micro-batches every schedule is the framework's order
    plain = random_graph(np.random.default_rng(0), 12)
    assert list(pipeline_order(plain, np.zeros(12, np.int32), 2, "1f1b")) == list(range(12))


def test_pipeline_methods_score_their_order():
    graph, _ = _two_microbatch_chain()
    problem = Problem(graph, DeviceSpec(2))
    for method in ("layer-split-gpipe", "layer-split-1f1b"):
        answer = solve(method, problem, 2, 0)
        assert answer.method == method and answer.extra["schedule"] in method
        rescored = score(problem, answer.placement, answer.priority, answer.transfer_priority)
        assert rescored["value"] == answer.value
