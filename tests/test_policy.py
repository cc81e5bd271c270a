"""The policy: features by hand, sampling vs log-probability, plain-BRKGA menus, ablations,
an Adam step, save/load. Small networks so the whole file runs in well under a minute.
(The action space itself, reference and losses: tests/test_policy_actions.py.)"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow loads: Keras 2 (tf-keras)

import numpy as np
import pytest

from regal.graph_builder import GraphBuilder
from regal.policy.features import (EDGE_FEATURES, NODE_FEATURES, BYTES_SCALE, COUNT_SCALE,
                                   graph_features, op_type_ids)
from helpers import randomise_heads

tf = pytest.importorskip("tensorflow")
tf_keras = pytest.importorskip("tf_keras")
from regal.policy import Policy  # noqa: E402
from regal.policy.distributions import chromosome_parameters  # noqa: E402

COL = {name: i for i, name in enumerate(NODE_FEATURES)}


def hand_graph():
    """a -> t0 (100 B) -> b (reads t0 twice), c;  b -> t1 (50 B) -> c;  control a -> c;  d alone."""
    g = GraphBuilder()
    a = g.add_op("a", 9.0, persistent_memory=1000, op_type="MatMul")
    b = g.add_op("b", 0.0, temporary_memory=30, op_type="Add")
    c = g.add_op("c", 3.0, op_type="MatMul")
    g.add_op("d", 1.0)
    g.add_output(a, 100)
    g.add_output(b, 50)
    g.add_input(b, a, 0)
    g.add_input(b, a, 0)
    g.add_input(c, a, 0)
    g.add_input(c, b, 0)
    g.add_control(a, c)
    return g.build()


def chain_graph(n=30, seed=0):
    rng = np.random.default_rng(seed)
    g = GraphBuilder()
    for v in range(n):
        g.add_op(f"op{v}", float(rng.integers(1, 50)), op_type=("Conv", "Relu", "")[v % 3])
        g.add_output(v, float(rng.integers(1, 10_000)))
        for u in sorted(set(rng.integers(max(0, v - 4), v, size=min(v, 2)).tolist())):
            g.add_input(v, u)
    return g.build()


def isolated_graph(n):
    """n identical ops, no edges: every op gets the same logits (many draws from one law)."""
    g = GraphBuilder()
    for v in range(n):
        g.add_op(f"op{v}", 5.0)
        g.add_output(v, 64)
    return g.build()


class Spec:
    """A DeviceSpec look-alike (the policy duck-types devices)."""

    def __init__(self, count, memory_limit=None):
        self.count, self.memory_limit = count, memory_limit


@pytest.fixture(scope="module")
def policy():
    p = Policy(num_layers=2, hidden=16, seed=3)
    randomise_heads(p, 0)
    return p


# -- features -----------------------------------------------------------------


def test_features_by_hand():
    g = hand_graph()
    f = graph_features(g, Spec(4, memory_limit=[2000, 1150, 2000, 2000]))
    x = f.nodes
    assert x.shape == (4, len(NODE_FEATURES)) and x.dtype == np.float32
    assert np.isfinite(x).all() and np.isfinite(f.edges).all()
    # b reads t0 on two ports: it counts once; c reads t0 and t1
    np.testing.assert_allclose(x[:, COL["log_input_bytes"]] * BYTES_SCALE,
                               np.log1p([0, 100, 150, 0]), rtol=1e-6)
    np.testing.assert_allclose(x[:, COL["log_output_bytes"]] * BYTES_SCALE,
                               np.log1p([100, 50, 0, 0]), rtol=1e-6)
    np.testing.assert_allclose(x[:, COL["log_persistent_bytes"]] * BYTES_SCALE,
                               np.log1p([1000, 0, 0, 0]), rtol=1e-6)
    np.testing.assert_allclose(x[:, COL["log_temporary_bytes"]] * BYTES_SCALE,
                               np.log1p([0, 30, 0, 0]), rtol=1e-6)
    for name, want in (("log_data_in_degree", [0, 1, 2, 0]), ("log_data_out_degree", [2, 1, 0, 0]),
                       ("log_control_in_degree", [0, 0, 1, 0]),
                       ("log_control_out_degree", [1, 0, 0, 0])):
        np.testing.assert_allclose(x[:, COL[name]] * COUNT_SCALE, np.log1p(want), rtol=1e-6)
    # longest path a -> b -> c has 2 edges
    np.testing.assert_allclose(x[:, COL["depth_fraction"]], [0, 0.5, 1, 0])
    np.testing.assert_allclose(x[:, COL["reverse_depth_fraction"]], [1, 0.5, 0, 0])
    # context: 4 devices, smallest limit 1150 over total bytes 100 + 50 + 1000
    np.testing.assert_allclose(x[:, COL["log_num_devices"]], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(x[:, COL["inv_num_devices"]], 0.25)
    np.testing.assert_allclose(x[:, COL["has_memory_limit"]], 1.0)
    np.testing.assert_allclose(x[:, COL["memory_limit_over_total_bytes"]], 1.0)
    # op types: empty -> 0, equal types share a bucket, different types (here) differ
    assert f.op_type[3] == 0 and f.op_type[0] == f.op_type[2] != f.op_type[1] and f.op_type[1] > 0
    assert f.num_devices == 4


def test_edges_both_ways():
    f = graph_features(hand_graph(), 2)
    assert f.edges.shape == (8, len(EDGE_FEATURES))  # (t0,b) (t0,c) (t1,c) + control (a,c), x2
    fwd = {(int(s), int(d), round(float(e[0]) * BYTES_SCALE, 4), int(e[1]))
           for (s, d), e in zip(f.edge_index, f.edges) if e[2] == 0}
    rev = {(int(d), int(s), round(float(e[0]) * BYTES_SCALE, 4), int(e[1]))
           for (s, d), e in zip(f.edge_index, f.edges) if e[2] == 1}
    want = {(0, 1, round(np.log1p(100), 4), 0), (0, 2, round(np.log1p(100), 4), 0),
            (1, 2, round(np.log1p(50), 4), 0), (0, 2, 0.0, 1)}
    assert fwd == rev == want


def test_features_scale_free_and_no_limit():
    small, big = graph_features(chain_graph(30), 2), graph_features(chain_graph(600), 2)
    for f in (small, big):
        assert np.isfinite(f.nodes).all()
        assert f.nodes[:, COL["has_memory_limit"]].max() == 0
        assert np.abs(f.nodes).max() < 10  # nothing grows with the graph
    assert op_type_ids(np.array(["Conv", "Conv", ""])).tolist()[2] == 0


# -- sampling and log-probabilities ------------------------------------------------


def test_log_prob_matches_numpy_and_tf(policy):
    g = chain_graph(40)
    action = policy.act(g, 3, seed=11)
    logits = policy.logits(g, 3)
    independent = 0.0
    for h, lg in logits.items():
        lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
        independent += float((lg[np.arange(len(lg)), getattr(action.choices, h)] - lse).sum())
    assert action.log_prob == pytest.approx(independent, rel=1e-9)
    assert float(policy.log_prob(g, 3, action.choices)) == pytest.approx(independent, rel=1e-5)
    # entropy of the same logits, by hand
    ent = sum(-(np.exp(lg - lse[:, None]) * (lg - lse[:, None])).sum()
              for lg, lse in ((lg, np.log(np.exp(lg).sum(1))) for lg in logits.values()))
    assert float(policy.entropy(g, 3)) == pytest.approx(ent, rel=1e-5)


def test_sampling_frequencies_match_softmax():
    """Heads with zero kernels and known biases: every op's law is softmax(bias)."""
    p = Policy(num_layers=1, hidden=8, seed=0, prior_logit=0.0)
    rng = np.random.default_rng(0)
    biases = {}
    for h, head in p.net.heads.items():
        kernel, bias = head.get_weights()
        biases[h] = rng.normal(0, 0.8, bias.shape)
        head.set_weights([np.zeros_like(kernel), biases[h].astype(np.float32)])
    g = isolated_graph(3000)
    counts = {h: np.zeros(len(b)) for h, b in biases.items()}
    for seed in range(4):
        action = p.act(g, 2, seed=seed)
        for h in counts:
            counts[h] += np.bincount(getattr(action.choices, h), minlength=len(counts[h]))
    total = 4 * 3000
    for h, b in biases.items():
        want = np.exp(b - b.max())
        want /= want.sum()
        assert want.max() < 0.6 and want.min() > 0.02  # a non-degenerate law
        se = np.sqrt(want * (1 - want) / total)
        assert np.all(np.abs(counts[h] / total - want) < 4.5 * se), (h, counts[h] / total, want)


def test_greedy_deterministic_and_argmax(policy):
    g = chain_graph(25)
    a1, a2 = policy.act(g, 4, mode="greedy"), policy.act(g, 4, mode="greedy")
    assert all(np.array_equal(x, y) for x, y in zip(a1.choices, a2.choices))
    assert np.array_equal(a1.keys.affinity.alpha, a2.keys.affinity.alpha)
    for h, lg in policy.logits(g, 4).items():
        assert np.array_equal(getattr(a1.choices, h), lg.argmax(1))
    s1, s2 = policy.act(g, 4, seed=5), policy.act(g, 4, rng=np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(s1.choices, s2.choices))
    with pytest.raises(ValueError, match="mode"):
        policy.act(g, 4, mode="best")


def test_gene_layout_of_an_action():
    """Chromosome layout (slot space): affinity [n, d] row-major, priority, transfer; each
    op's elite bias over its d + 2 genes. Hand-made menus on a 2-op graph, 3 devices."""
    from regal.policy.menus import MenuChoices, make_action, normalise_menus
    from regal.policy.reference import reference_for

    menus = normalise_menus({
        "affinity": [["uniform", [1, 1], [1, 1], [1, 1], [1, 1]],
                     ["mine", [2, 3], [4, 5], [6, 7], [8, 9]]],
        "priority": [0.0, 10.0], "transfer": [0.0, 4.0], "elite_bias": [0.7, 0.9]})
    g = chain_graph(2)
    ref = reference_for(g, 3)
    choices = MenuChoices(np.array([1, 0]), np.array([0, 1]), np.array([1, 0]), np.array([1, 0]))
    alpha, beta, elite = chromosome_parameters(make_action(choices, 0.0, ref, menus).keys)
    m, t = ref.priority, ref.transfer
    # slots of 3 devices: reference, next, previous (no "other")
    assert alpha.tolist() == pytest.approx([2, 4, 6, 1, 1, 1, 1, 1 + 10 * m[1], 1 + 4 * t[0], 1])
    assert beta.tolist() == pytest.approx([3, 5, 7, 1, 1, 1, 1, 1 + 10 * (1 - m[1]),
                                           1 + 4 * (1 - t[0]), 1])
    assert elite.tolist() == [0.9, 0.9, 0.9, 0.7, 0.7, 0.7, 0.9, 0.7, 0.9, 0.7]


UNIFORM_ONLY = {"affinity": [["uniform", [1, 1], [1, 1], [1, 1], [1, 1]]], "priority": [0.0],
                "transfer": [0.0], "elite_bias": [0.7]}


def test_uniform_only_menu_is_plain_brkga():
    p = Policy(num_layers=1, hidden=8, menus=UNIFORM_ONLY, seed=1)
    randomise_heads(p, 1)
    g = chain_graph(20)
    for action in (p.act(g, 4, seed=0), p.act(g, 4, mode="greedy")):
        assert action.keys.affinity.alpha.shape == (20, 4)
        assert action.placement_is_uniform() and action.log_prob == 0.0
        assert action.brkga_params() == {"alpha": None, "beta": None, "elite_bias": 0.7}
    with pytest.raises(ValueError, match="uniform entry"):
        Policy(menus={"affinity": [["follow", [5, 1], [1, 1], [1, 1], [1, 1]]]})
    with pytest.raises(ValueError, match="must include 0"):
        Policy(menus={"priority": [5.0]})
    with pytest.raises(ValueError, match="0.7"):
        Policy(menus={"elite_bias": [0.5]})


@pytest.mark.parametrize("learn, elite, learned_blocks", [
    ("placement", False, {"affinity"}),
    ("scheduling", True, {"priority", "transfer", "elite_bias"}),
])
def test_ablation_switches(learn, elite, learned_blocks):
    p = Policy(num_layers=1, hidden=8, learn=learn, learn_elite_bias=elite, seed=2)
    randomise_heads(p, 2, scale=1.0)
    assert set(p.net.heads) == learned_blocks
    n, d = 200, 3
    g = isolated_graph(n)
    action = p.act(g, d, seed=0)
    for group in ("affinity", "priority", "transfer"):
        params = getattr(action.keys, group)
        uniform = (params.alpha == 1).all() and (params.beta == 1).all()
        assert uniform == (group not in learned_blocks), group
    assert ((action.keys.elite_bias == 0.7).all()) == ("elite_bias" not in learned_blocks)
    # only learned heads count toward the log-probability
    assert action.log_prob < -1.0
    assert float(p.log_prob(g, d, action.choices)) == pytest.approx(action.log_prob, rel=1e-4)


# -- training plumbing ------------------------------------------------------------


def test_adam_step_raises_log_prob_and_save_load(tmp_path):
    p = Policy(num_layers=2, hidden=16, seed=7)
    g = chain_graph(30)
    action = p.act(g, 2, seed=1)
    before = float(p.log_prob(g, 2, action.choices))
    assert before == pytest.approx(action.log_prob, rel=1e-5)
    opt = tf_keras.optimizers.Adam(1e-2)
    with tf.GradientTape() as tape:
        loss = -p.log_prob(g, 2, action.choices)
    grads = tape.gradient(loss, p.trainable_variables)
    assert all(gr is not None for gr in grads)
    # every message-passing layer gets a gradient (it is not only the heads that learn)
    conv_refs = {id(v) for conv in p.net.convs for v in conv.trainable_variables}
    conv_vars = [i for i, v in enumerate(p.trainable_variables) if id(v) in conv_refs]
    assert len(conv_vars) == 2 * 4  # two layers, each two Dense (kernel, bias)
    assert all(float(tf.reduce_sum(tf.abs(grads[i]))) > 0 for i in conv_vars)
    opt.apply_gradients(zip(grads, p.trainable_variables))
    after = float(p.log_prob(g, 2, action.choices))
    assert after > before + 1e-3

    p.save(tmp_path / "pol")
    q = Policy.load(tmp_path / "pol")
    assert q.config == p.config
    for h, lg in p.logits(g, 2).items():
        assert np.array_equal(lg, q.logits(g, 2)[h])
    a, b = p.act(g, 2, seed=9), q.act(g, 2, seed=9)
    assert all(np.array_equal(x, y) for x, y in zip(a.choices, b.choices))
    assert a.log_prob == b.log_prob
    with pytest.raises(ValueError, match="missing"):
        Policy.load(tmp_path / "nothing")


def test_same_seed_same_weights_and_one_trace():
    p, q = Policy(num_layers=1, hidden=8, seed=4), Policy(num_layers=1, hidden=8, seed=4)
    r = Policy(num_layers=1, hidden=8, seed=5)
    pw, qw, rw = p.net.get_weights(), q.net.get_weights(), r.net.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(pw, qw))
    assert not all(np.array_equal(a, b) for a, b in zip(pw, rw))
    eager = p.logits(chain_graph(57), 2)  # small graph, nothing traced yet: runs eagerly
    assert p._forward.experimental_get_tracing_count() == 0
    p.eager_max_ops = 0  # the traced path: one trace serves every graph size
    for n in (10, 57, 300):
        p.logits(chain_graph(n), 2)
    assert p._forward.experimental_get_tracing_count() == 1
    traced = p.logits(chain_graph(57), 2)
    for h in traced:
        np.testing.assert_allclose(eager[h], traced[h], rtol=1e-5, atol=1e-5)


def test_features_do_not_import_tensorflow():
    import subprocess
    import sys
    code = ("import sys, regal.policy, regal.policy.features as f; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
