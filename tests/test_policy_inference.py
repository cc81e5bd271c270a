"""NumpyPolicy against the TensorFlow Policy it reimplements: logits, greedy and sampled
actions on synthetic graphs, for the shipped weights and for fresh policies of other shapes;
graphs without edges; and the `regal` method running without importing TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow loads: Keras 2 (tf-keras)

import numpy as np
import pytest

from regal import synth
from regal.graph_builder import GraphBuilder
from regal.policy.features import graph_features
from regal.policy.inference import NumpyPolicy
from helpers import randomise_heads

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "data" / "policy"
GRAPHS = [("random", 68, 2), ("cnn", 150, 4), ("inception", 200, 2), ("transformer", 160, 4),
          ("random", 400, 4)]


def assert_same_logits(tf_logits: dict, np_logits: dict) -> None:
    assert list(np_logits) == list(tf_logits)
    for head, want in tf_logits.items():
        got = np_logits[head]
        assert got.shape == want.shape and got.dtype == np.float64
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=head)


def assert_same_action(a, b) -> None:
    for head in a.choices._fields:
        np.testing.assert_array_equal(getattr(a.choices, head), getattr(b.choices, head))
    for group in ("affinity", "priority", "transfer"):
        for x, y in zip(getattr(a.keys, group), getattr(b.keys, group)):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.keys.elite_bias, b.keys.elite_bias)
    np.testing.assert_array_equal(a.reference.gene_order(), b.reference.gene_order())
    assert a.num_devices == b.num_devices
    assert a.log_prob == pytest.approx(b.log_prob, rel=1e-5, abs=1e-4)


def check_against(tf_policy, np_policy, graph, devices) -> None:
    f = graph_features(graph, devices)
    assert_same_logits(tf_policy.logits(f), np_policy.logits(f))
    assert_same_action(tf_policy.act(graph, devices, mode="greedy"),
                       np_policy.act(graph, devices, mode="greedy"))
    for seed in (0, 1):
        assert_same_action(tf_policy.act(graph, devices, mode="sample", seed=seed),
                           np_policy.act(graph, devices, mode="sample", seed=seed))
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    assert_same_action(tf_policy.act(f, mode="sample", rng=rng_a),
                       np_policy.act(f, mode="sample", rng=rng_b))
    assert rng_a.random() == rng_b.random()  # both drew the same count of numbers


def no_edge_graph(n=5):
    g = GraphBuilder()
    for v in range(n):
        g.add_op(f"op{v}", float(v + 1), op_type=("Conv", "")[v % 2])
        g.add_output(v, 64 * (v + 1))
    return g.build()


def isolated_op_graph():
    """a -> b -> c, control a -> c, and d with no edge at all."""
    g = GraphBuilder()
    a = g.add_op("a", 9.0, persistent_memory=1000, op_type="MatMul")
    b = g.add_op("b", 2.0, op_type="Add")
    c = g.add_op("c", 3.0, op_type="MatMul")
    g.add_op("d", 1.0)
    g.add_output(a, 100)
    g.add_output(b, 50)
    g.add_input(b, a, 0)
    g.add_input(c, b, 0)
    g.add_control(a, c)
    return g.build()


@pytest.fixture(scope="module")
def tf_policy_cls():
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    from regal.policy.policy import Policy
    return Policy


@pytest.fixture(scope="module")
def shipped(tf_policy_cls):
    return tf_policy_cls.load(SHIPPED), NumpyPolicy.load(SHIPPED)


@pytest.mark.parametrize("family, num_ops, devices", GRAPHS)
def test_shipped_policy_matches_tensorflow(shipped, family, num_ops, devices):
    check_against(*shipped, synth.generate(family, num_ops, seed=num_ops), devices)


def test_graphs_without_edges(shipped):
    """A node with no incoming message keeps h (spektral's segment mean gives 0)."""
    for graph in (isolated_op_graph(), no_edge_graph(5), no_edge_graph(1)):
        check_against(*shipped, graph, 2)


CONFIGS = [
    dict(num_layers=2, hidden=16, learn="placement", learn_elite_bias=False, seed=7),
    # menus of different sizes per head: a head mapped to another's weights cannot load
    dict(num_layers=3, hidden=24, learn=("priority", "transfer"), learn_elite_bias=True, seed=2,
         menus={"priority": [0.0, 5.0, 100.0], "transfer": [20.0, 0.0, 3.0, 50.0],
                "elite_bias": [0.7, 0.9]}),
    dict(num_layers=0, hidden=8, learn="both", learn_elite_bias=True, seed=4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["placement-2x16", "scheduling-3x24", "0-layers"])
def test_fresh_policies_match_tensorflow(tf_policy_cls, tmp_path, config):
    tf_policy = tf_policy_cls(**config)
    randomise_heads(tf_policy, config["seed"])
    tf_policy.save(tmp_path / "p")
    np_policy = NumpyPolicy.load(tmp_path / "p")
    assert np_policy.learned == tf_policy.learned
    assert np_policy.menus == tf_policy.menus
    assert np_policy.default == tf_policy.default
    for family, num_ops, devices in (("random", 80, 2), ("cnn", 120, 4)):
        check_against(tf_policy, np_policy, synth.generate(family, num_ops, seed=3), devices)
    check_against(tf_policy, np_policy, isolated_op_graph(), 4)


def test_message_passing_reaches_neighbours(tmp_path):
    """Independent of TensorFlow: changing one op's features changes its neighbours' logits
    (messages flow both ways) but not those of an op with no path to it within L layers.
    The shipped network with random head weights (its own are nearly constant on purpose)."""
    from regal.policy.menus import read_policy_files

    config, weights = read_policy_files(SHIPPED)
    heads = 2 * len(NumpyPolicy(config, weights).learned)  # kernel and bias per head, last
    rng = np.random.default_rng(0)
    weights[-heads:] = [rng.normal(0, 1.0, w.shape).astype(np.float32) for w in weights[-heads:]]
    policy = NumpyPolicy(config, weights)
    f = graph_features(isolated_op_graph(), 2)
    nodes = f.nodes.copy()
    nodes[0, 0] += 1.0  # op a: b (edge a->b) and c (edges a->c, b->c) hear about it
    changed = policy.logits(f._replace(nodes=nodes))["affinity"]
    before = policy.logits(f)["affinity"]
    moved = np.abs(changed - before).max(axis=1)
    assert (moved[:3] > 1e-4).all() and moved[3] == 0.0


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="missing config.json"):
        NumpyPolicy.load(tmp_path / "nothing")
    config = (SHIPPED / "config.json").read_text()
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "config.json").write_text(config.replace('"hidden": 64', '"hidden": 32'))
    (tmp_path / "p" / "weights.npz").write_bytes((SHIPPED / "weights.npz").read_bytes())
    with pytest.raises(ValueError, match="weights do not match its config"):
        NumpyPolicy.load(tmp_path / "p")
    # a policy of the old action space is named as such, not misread
    (tmp_path / "old").mkdir()
    old = json.loads(config)
    del old["action_space"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(old))
    (tmp_path / "old" / "weights.npz").write_bytes((SHIPPED / "weights.npz").read_bytes())
    with pytest.raises(ValueError, match="action space 1"):
        NumpyPolicy.load(tmp_path / "old")
    policy = NumpyPolicy.load(SHIPPED)
    graph = isolated_op_graph()
    with pytest.raises(ValueError, match="mode"):
        policy.act(graph, 2, mode="best")
    with pytest.raises(ValueError, match="devices"):
        policy.act(graph)
    bad = graph_features(graph, 2)
    with pytest.raises(ValueError, match="edge_index"):
        policy.logits(bad._replace(edge_index=bad.edge_index + 10))


NO_TF = """
import sys
from regal.cli import main
from regal.policy import NumpyPolicy, HEADS, key_distribution, Action
code = main(["optimize", "data/real/vgg16_infer_b1.npz", "--method", "regal", "--devices", "2",
             "--budget", "200"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "spektral", "tf_keras"))
assert code == 0, code
assert not heavy, heavy
print("NO-TF-OK")
"""


def test_regal_method_never_imports_tensorflow():
    out = subprocess.run([sys.executable, "-c", NO_TF], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "NO-TF-OK" in out.stdout and "method regal" in out.stdout
