"""Large models (`regal.io.tf_large`, `regal data large`) and their experiment
(`experiments/large_models.py`): shapes against the published parameter counts, a small model
imported as a whole training step, resumable builds, and the experiment's figures against the
simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ["TF_USE_LEGACY_KERAS"] = "1"

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tf_large():
    from regal.io import tf_large as module
    return module


def _tiny(tf_large):
    return {"tiny_gpt": tf_large.LargeShape(2, 32, 2, 16, 50, causal=True),
            "tiny_bert": tf_large.LargeShape(2, 32, 4, 8, 40, causal=False, d_ff=48)}


def test_gpt2_small_has_the_published_parameter_count(tf_large):
    """GPT-2 small: 124,439,808 parameters (token and position embeddings, 12 blocks of
    12 d^2 + 13 d, the final norm; the output projection is the token embedding)."""
    import tensorflow as tf
    with tf.Graph().as_default():
        model = tf_large.large_model("gpt2_small")()
        assert model.count_params() == 124_439_808
        # tied: one [vocab, d_model] matrix, no separate output kernel
        shapes = [tuple(w.shape) for w in model.trainable_weights]
        assert shapes.count((50257, 768)) == 1


def test_parameter_count_formula_for_both_kinds(tf_large):
    import tensorflow as tf
    for name, s in _tiny(tf_large).items():
        d, f = s.d_model, s.ff
        block = 4 * (d * d + d) + 2 * (2 * d) + (d * f + f) + (f * d + d)
        total = s.vocab * d + s.seq_len * d + s.layers * block
        total += 2 * d if s.causal else 2 * d + (d * d + d) + 2 * d  # final / embedding+mlm
        with tf.Graph().as_default():
            assert tf_large.large_model(name, s)().count_params() == total, name


def test_unknown_model_is_named(tf_large):
    with pytest.raises(ValueError, match="unknown large model 'gpt5'"):
        tf_large.large_model("gpt5")


def test_tiny_training_step_imports_whole(tf_large):
    """Forward, loss, backward and one Adam update per weight; the persistent memory is the
    weights and Adam's two slots, nothing twice."""
    import tensorflow as tf

    from regal.io.tensorflow import import_model
    for name, s in _tiny(tf_large).items():
        with tf.Graph().as_default():
            params = tf_large.large_model(name, s)().count_params()
        graph = import_model(tf_large.large_model(name, s), batch_size=2, training=True)
        names = [str(n) for n in graph.names]
        updates = [n for n in names if n.endswith("ResourceApplyAdam")
                   or "ApplyAdam" in n.rsplit("/", 1)[-1]]
        with tf.Graph().as_default():
            weights = len(tf_large.large_model(name, s)().trainable_weights)
        assert len(updates) == weights, name
        persistent = int(graph.persistent_memory.sum())
        # 4 bytes x (weight + m + v) per parameter, plus Adam's scalar beta powers
        assert 12 * params <= persistent <= 12 * params + 64, name
        # the model's own loss (token cross-entropy), not a stand-in
        assert any("SparseSoftmaxCrossEntropyWithLogits" in n for n in names), name


def test_build_is_resumable_and_writes_the_table(tf_large, tmp_path):
    shapes = _tiny(tf_large)
    first = tf_large.build_large_set(tmp_path, models=["tiny_gpt"], batch_sizes=[1],
                                     progress=False, shapes=shapes)
    assert [r["file"] for r in first] == ["tiny_gpt_train_b1.npz"]
    assert first[0]["peak_rss"] > 0 and first[0]["import_s"] > 0
    stamp = (tmp_path / "tiny_gpt_train_b1.npz").stat().st_mtime_ns
    again = tf_large.build_large_set(tmp_path, models=["tiny_gpt"], batch_sizes=[1],
                                     progress=False, shapes=shapes)
    assert again == first  # nothing imported again
    assert (tmp_path / "tiny_gpt_train_b1.npz").stat().st_mtime_ns == stamp
    text = tf_large.write_large_readme(tmp_path, shapes=shapes)
    row = next(line for line in text.splitlines() if "tiny_gpt_train_b1.npz" in line)
    from regal.io import load_graph
    assert f"| {load_graph(tmp_path / 'tiny_gpt_train_b1.npz').num_nodes:,} |" in row
    assert "| `tiny_bert` | 2 | 32 | 4 | 48 | 8 | 40 |" in text


def _experiment(*args):
    return subprocess.run([sys.executable, str(REPO / "experiments" / "large_models.py"), *args],
                          capture_output=True, text=True, timeout=600)


def test_experiment_figures_agree_with_the_simulator(tmp_path):
    """On a small training graph: each 'fits' is the simulator's verdict on the limit, the
    bisected smallest limit fits the heuristic's answer, and a rerun repeats nothing."""
    from regal import optimizers
    from regal.io import load_graph, save_graph
    from regal.problem import Problem
    from regal.sim import DeviceSpec
    from regal.synth import generate

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    graph = generate("cnn", 60, 3, training=True)
    save_graph(graph, graphs / "small_train_b1.npz")
    records = tmp_path / "records.jsonl"
    args = ["--graphs", str(graphs), "--devices", "2", "--time-limit", "1",
            "--methods", "local-search", "m-topo", "--records", str(records),
            "--out", str(tmp_path / "table.md"), "--bisection-steps", "5"]
    done = _experiment(*args)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 4
    graph = load_graph(graphs / "small_train_b1.npz")
    for r in rows:
        if r["what"] == "fit":
            assert r["fits"] == (max(r["peaks"]) <= r["limit"])
            assert np.isclose(r["one_device_step_us"], optimizers.one_device(
                Problem(graph, DeviceSpec(1), "makespan")).makespan)
        elif r["method"] == "m-topo" and r["smallest"] is not None:
            answer = optimizers.solve("m-topo", Problem(graph, DeviceSpec(2, r["smallest"]),
                                                       "makespan"), 2, 0)
            assert answer.feasible
    table = (tmp_path / "table.md").read_text()
    assert table.count("| small_train_b1 |") == 2
    again = _experiment(*args)
    assert again.returncode == 0, again.stderr
    assert len(records.read_text().splitlines()) == 4


def test_microbatches_make_independent_passes_and_one_update(tf_large):
    """K micro-batches: K forward and backward passes with no edge between two of them, the
    gradients summed per weight, one Adam update, and the weights held once."""
    from regal.io.tensorflow import import_model
    from baselines.layer_split import microbatch_of
    shape = _tiny(tf_large)["tiny_gpt"]
    one = import_model(tf_large.large_model("g", shape), batch_size=2, training=True)
    three = import_model(tf_large.large_model("g", shape), batch_size=2, training=True,
                         microbatches=3)
    assert int(three.persistent_memory.sum()) == int(one.persistent_memory.sum())
    names = [str(n) for n in three.names]
    batch = microbatch_of(names)
    assert set(batch.tolist()) == {-1, 0, 1, 2}
    inside = [int((batch == m).sum()) for m in range(3)]
    assert inside[0] == inside[1] == inside[2] > 0
    # the three passes together are three times one pass, less what they share
    assert sum(inside) < three.num_nodes < sum(inside) + one.num_nodes
    src = np.asarray(three.pred, np.int64)
    dst = np.repeat(np.arange(three.num_nodes), np.diff(three.pred_ptr))
    crossing = (batch[src] >= 0) & (batch[dst] >= 0) & (batch[src] != batch[dst])
    assert not crossing.any()
    updates = [n for n in names if n.endswith("ResourceApplyAdam")]
    assert len(updates) == len([n for n in [str(m) for m in one.names]
                                if n.endswith("ResourceApplyAdam")])
    assert all(microbatch_of([n])[0] == -1 for n in updates)
    assert sum(n.startswith("gradients_sum/") for n in names) > 0
    # layer-split reads the same layers through the micro-batch scopes
    from baselines.layer_split import layer_keys
    layers = set(k for k, kind in zip(*layer_keys(names)) if kind == 0)
    assert {f"block{i}_attention" for i in range(shape.layers)} <= layers
    assert not any(k.startswith("microbatch") for k in layer_keys(names)[0])


def test_microbatches_need_a_keras_training_step(tf_large):
    from regal.io.tensorflow import import_model
    shape = _tiny(tf_large)["tiny_gpt"]
    with pytest.raises(ValueError, match="only a training step has micro-batches"):
        import_model(tf_large.large_model("g", shape), microbatches=2)
    with pytest.raises(ValueError, match="microbatches must be an integer >= 1"):
        import_model(tf_large.large_model("g", shape), training=True, microbatches=0)


def test_microbatches_flag_errors_are_one_line(tmp_path, capsys):
    from regal.cli import main
    out = str(tmp_path / "g.npz")
    assert main(["import", "keras.applications.MobileNetV2", "--microbatches", "2",
                 "--out", out]) == 2
    assert "--microbatches: only a training step has micro-batches" in capsys.readouterr().err
    graph = str(REPO / "data" / "large" / "gpt2_small_train_b1.npz")
    assert main(["optimize", graph, "--devices", "2", "--training", "--microbatches", "2"]) == 2
    assert "apply only to a model" in capsys.readouterr().err


def test_experiment_marks_a_limit_below_the_lower_bound_as_proven(tmp_path):
    """A limit under `regal.bounds.lower_bound` is a row nothing can fit: the table says
    "no, proven", and each record keeps the bound."""
    from regal.bounds import lower_bound
    from regal.io import save_graph
    from regal.synth import generate

    graph = generate("cnn", 60, 3, training=True)
    path = tmp_path / "small_train_b1.npz"
    save_graph(graph, path)
    bound = int(lower_bound(graph, 2).value)
    records = tmp_path / "records.jsonl"
    done = _experiment("--files", str(path), "--devices", "2", "--time-limit", "1",
                       "--fit-only", "--limit", str(bound - 1), "--methods", "m-topo",
                       "--records", str(records), "--out", str(tmp_path / "table.md"))
    assert done.returncode == 0, done.stderr
    row = json.loads(records.read_text().splitlines()[0])
    assert row["lower_bound"] == bound and not row["fits"]
    assert "| m-topo | no, proven |" in (tmp_path / "table.md").read_text()
