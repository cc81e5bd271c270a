"""Synthetic graphs: determinism, sizes, validity, training graphs, augmentation, recipes, CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from regal import synth
from regal.graph import build_graph
from regal.io import load_graph

ROOT = Path(__file__).resolve().parents[1]
FAMS = ("random", "cnn", "inception", "transformer")
STRUCTURE = ("names", "op_types", "tensor_producer", "tensor_alias", "output_ptr", "input_ptr",
             "input_tensor", "control_ptr", "control_pred", "consumer_ptr", "consumer",
             "succ_ptr", "succ", "pred_ptr", "pred", "topo_order")


def edges_go_forward(g) -> bool:
    """Independent acyclicity check: every data and control edge runs from a lower op id."""
    consumer = np.repeat(np.arange(g.num_nodes), np.diff(g.input_ptr))
    cdst = np.repeat(np.arange(g.num_nodes), np.diff(g.control_ptr))
    return bool((g.tensor_producer[g.input_tensor] < consumer).all()
                and (g.control_pred < cdst).all())


def rebuild(g):
    """Runs the graph's raw arrays through build_graph's validation again."""
    cdst = np.repeat(np.arange(g.num_nodes), np.diff(g.control_ptr))
    return build_graph(names=g.names, op_types=g.op_types, compute_cost=g.compute_cost,
                       temporary_memory=g.temporary_memory, persistent_memory=g.persistent_memory,
                       is_final=g.is_final, tensor_producer=g.tensor_producer,
                       tensor_size=g.tensor_size, tensor_alias=g.tensor_alias,
                       input_ptr=g.input_ptr, input_tensor=g.input_tensor,
                       control_src=g.control_pred, control_dst=cdst)


def check_sane(g) -> None:
    assert edges_go_forward(g)
    assert rebuild(g).equals(g)
    for field in ("tensor_size", "temporary_memory", "persistent_memory", "compute_cost"):
        a = getattr(g, field)
        assert (a >= 0).all(), field
        assert np.array_equal(a, np.rint(a)), f"{field} not integral"
    aliased = np.flatnonzero(g.tensor_alias >= 0)
    # an alias reads its source: the source is an input of the alias's producer
    for x in aliased:
        assert g.tensor_alias[x] in g.inputs(int(g.tensor_producer[x]))


# -- generators ----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMS + ("mixed",))
def test_same_seed_same_graph_other_seed_other_graph(family):
    a = synth.generate(family, 150, 7)
    b = synth.generate(family, 150, 7)
    c = synth.generate(family, 150, 8)
    assert a.equals(b)
    assert not a.equals(c)


@pytest.mark.parametrize("family", FAMS)
@pytest.mark.parametrize("num_ops", [20, 57, 333, 1200])
def test_inference_op_counts_are_exact_and_graphs_valid(family, num_ops):
    for seed in range(3):
        g = synth.generate(family, num_ops, seed)
        assert g.num_nodes == num_ops
        check_sane(g)
        if family != "random":
            assert (np.diff(g.output_ptr) >= 1).all()  # every op of a network emits a tensor
            assert (g.op_types != "").all()


@pytest.mark.parametrize("family", FAMS)
@pytest.mark.parametrize("num_ops", [60, 500, 3000])
def test_training_op_counts_within_ten_percent(family, num_ops):
    g = synth.generate(family, num_ops, 3, training=True)
    assert abs(g.num_nodes - num_ops) <= 0.1 * num_ops
    check_sane(g)


def test_random_dag_sizes_and_costs_around_fifty():
    for seed in range(4):
        g = synth.random_dag(3000, np.random.default_rng(seed))
        assert abs(g.tensor_size.mean() - 50) < 2.0
        assert abs(g.compute_cost.mean() - 50) < 2.0
        assert 5 < g.tensor_size.std() < 20  # "with noise", not constant
        # REGAL-like extras are present: multi-output ops, control edges, aliases, memories
        assert (np.diff(g.output_ptr) > 1).any()
        assert g.num_control_edges > 0
        assert (g.tensor_alias >= 0).any()
        assert (g.persistent_memory > 0).mean() > 0.05
        assert (g.temporary_memory > 0).mean() > 0.05
        # locality: neither a chain nor a star
        assert 3000 / 20 < g.depth() < 3000 / 2


def test_random_dag_accepts_seed_or_generator_and_is_fast():
    assert synth.random_dag(100, 5).equals(synth.random_dag(100, np.random.default_rng(5)))
    # CPU seconds of this process, which other jobs on a busy machine do not add to: about
    # 0.015 s when written, so 1 s is 60x that, and still far below what a quadratic
    # generator (25 million pairs of ops) would take
    t0 = time.process_time()
    synth.random_dag(5000, 1)
    assert time.process_time() - t0 < 1.0


def test_families_look_like_networks():
    unets = 0
    for seed in range(6):
        cnn = synth.layered_cnn(400, seed)
        conv = cnn.op_types == "Conv2D"
        assert conv.sum() > 50 and (cnn.persistent_memory[conv] > 0).all()  # weights persistent
        # activations shrink by stride-2 stages; a U-Net decoder grows them back
        conv_out = cnn.tensor_size[cnn.output_ptr[:-1][conv]]
        assert conv_out.min() <= conv_out[0] // 4
        if (cnn.op_types == "ResizeNearestNeighbor").any():
            unets += 1
            assert conv_out[-1] >= 4 * conv_out.min()
    assert 0 < unets < 6
    adds = np.flatnonzero(cnn.op_types == "AddV2")
    assert len(adds) > 0 and all(len(cnn.inputs(v)) == 2 for v in adds)  # residual joins

    inc = synth.inception_like(400, 0)
    concat = np.flatnonzero(inc.op_types == "ConcatV2")
    assert len(concat) > 5 and min(len(inc.inputs(v)) for v in concat) >= 2
    # a concat's output is as large as its branch outputs together
    for v in concat:
        assert inc.tensor_size[inc.output_ptr[v]] == pytest.approx(
            inc.tensor_size[inc.inputs(v)].sum(), rel=0.05)

    tr = synth.transformer_like(400, 0)
    for kind in ("Softmax", "BatchMatMul", "LayerNorm", "Gelu", "MatMul"):
        assert (tr.op_types == kind).any(), kind
    assert (tr.op_types == "BatchMatMul").sum() >= 2 * ((tr.op_types == "Softmax").sum() - 1)


# -- training graphs -------------------------------------------------------------------------


def test_training_graph_by_hand():
    """x (placeholder) -> y (weights 10) -> z: hand-derived backward pass."""
    from regal.graph_builder import GraphBuilder
    b = GraphBuilder()
    x = b.add_op("x", 1, op_type="Placeholder")
    y = b.add_op("y", 3, persistent_memory=10, op_type="MatMul")
    z = b.add_op("z", 5, op_type="Relu")
    b.add_output(x, 4)
    b.add_output(y, 6)
    b.add_output(z, 8)
    b.add_input(y, x)
    b.add_input(z, y)
    fwd = b.build()
    g = synth.training_graph(fwd)
    assert g.names.tolist() == ["x", "y", "z", "loss", "grad/z", "grad/y", "update/y"]
    loss, gz, gy, up = 3, 4, 5, 6
    assert g.inputs(loss).tolist() == [2]                 # reads z's output
    assert g.tensor_size[g.outputs(loss)].tolist() == [8]  # d loss / d z
    assert g.inputs(gz).tolist() == [int(g.outputs(loss)[0]), 1]  # upstream grad, y's activation
    assert g.tensor_size[g.outputs(gz)].tolist() == [6]     # d loss / d y
    assert g.inputs(gy).tolist() == [int(g.outputs(gz)[0]), 0]    # upstream grad, x's activation
    assert g.tensor_size[g.outputs(gy)].tolist() == [10]    # weight gradient only: x is an input
    assert g.inputs(up).tolist() == [int(g.outputs(gy)[0])]
    assert g.persistent_memory[up] == 10 and len(g.outputs(up)) == 0
    assert g.compute_cost[gz] == 10 and g.compute_cost[gy] == 6


@pytest.mark.parametrize("family", FAMS)
def test_training_graph_keeps_activations_for_backward(family):
    fwd = synth.generate(family, 300, 11)
    n = fwd.num_nodes
    g = synth.training_graph(fwd)
    check_sane(g)
    # the forward part is untouched
    for field in ("names", "compute_cost", "persistent_memory", "tensor_size", "tensor_alias"):
        sl = slice(0, n) if field in ("names", "compute_cost", "persistent_memory") \
            else slice(0, fwd.num_tensors)
        assert np.array_equal(getattr(g, field)[sl], getattr(fwd, field)), field
    assert np.array_equal(g.input_tensor[:fwd.num_data_edges], fwd.input_tensor)
    # about twice the ops: one backward op per differentiable forward op, a loss, updates
    assert 2 * n - n // 10 <= g.num_nodes <= 3 * n + 1
    # every forward activation read in the forward pass is read again by the backward pass
    for x in range(fwd.num_tensors):
        if len(fwd.consumers(x)):
            assert g.consumers(x).max() >= n, x
    # every weight-holding forward op gets exactly one update op reading a gradient
    updates = np.flatnonzero(g.op_types == "ApplyMomentum")
    assert len(updates) == (fwd.persistent_memory > 0).sum()
    for u in updates:
        assert g.tensor_producer[g.inputs(u)[0]] >= n
    # the graph stays connected to the loss: every backward op is downstream of it
    loss = g.index_of("loss")
    reach = np.zeros(g.num_nodes, bool)
    reach[loss] = True
    for v in g.topo_order:
        if reach[v]:
            reach[g.successors(v)] = True
    assert reach[n + 1:].all()


# -- augmentation ------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["random", "transformer"])
def test_augment_keeps_structure_and_perturbs_sizes(family):
    g = synth.generate(family, 2000, 2)
    a = synth.augment(g, 9, scale=0.2)
    for field in STRUCTURE:
        assert np.array_equal(getattr(a, field), getattr(g, field)), field
    check_sane(a)
    assert not np.array_equal(a.tensor_size, g.tensor_size)
    assert not np.array_equal(a.compute_cost, g.compute_cost)
    assert np.array_equal(a.persistent_memory == 0, g.persistent_memory == 0)  # zero stays zero
    ratio = np.log(a.tensor_size / g.tensor_size)
    assert abs(ratio.mean()) < 0.03 and 0.15 < ratio.std() < 0.25
    assert synth.augment(g, 9, 0.2).equals(a)
    assert not synth.augment(g, 10, 0.2).equals(a)
    assert synth.augment(g, 9, 0.0).equals(g)
    # reshapes stay the size of what they reshape
    x = np.flatnonzero(g.tensor_alias >= 0)
    same = g.tensor_size[x] == g.tensor_size[g.tensor_alias[x]]
    assert same.all() and np.array_equal(a.tensor_size[x], a.tensor_size[a.tensor_alias[x]])
    with pytest.raises(ValueError, match="scale"):
        synth.augment(g, 0, -1.0)


# -- recipes -----------------------------------------------------------------------------


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="min_ops"):
        synth.SplitRecipe("s", 3, 50, 40, 0)
    with pytest.raises(ValueError, match="count"):
        synth.SplitRecipe("s", 0, 5, 40, 0)
    with pytest.raises(ValueError, match="min_ops"):
        synth.SplitRecipe("s", 3, 1, 40, 0)
    with pytest.raises(ValueError, match="family 'foo'"):
        synth.SplitRecipe("s", 3, 5, 40, 0, families=("foo",))
    with pytest.raises(ValueError, match="num_ops"):
        synth.generate("cnn", 3, 0)
    with pytest.raises(ValueError, match="index"):
        synth.graph_at(synth.SplitRecipe("s", 3, 5, 40, 0), 3)


def test_graph_at_is_independent_of_count_and_in_range():
    small = synth.SplitRecipe("s", 4, 20, 60, 123, families=("mixed",))
    big = synth.SplitRecipe("s", 1000, 20, 60, 123, families=("mixed",))
    graphs = [synth.graph_at(small, i) for i in range(4)]
    assert all(g.equals(synth.graph_at(big, i)) for i, g in enumerate(graphs))
    assert all(20 <= g.num_nodes <= 60 for g in graphs)
    assert not graphs[0].equals(graphs[1])
    # the per-index stream is SeedSequence(seed).spawn(...)[index]
    a = np.random.SeedSequence(123).spawn(3)[2].generate_state(4)
    b = np.random.SeedSequence(123, spawn_key=(2,)).generate_state(4)
    assert np.array_equal(a, b)


def test_regal_recipes_and_committed_description():
    assert {k: r.count for k, r in synth.RECIPES.items()} == synth.REGAL_SYNTHETIC \
        == {"train": 10000, "valid": 1000, "test": 1000}
    assert len({r.seed for r in synth.RECIPES.values()}) == 3
    doc = json.loads((ROOT / "data/synth/recipes.json").read_text())
    assert doc["generator_version"] == synth.SYNTH_VERSION
    for name, recipe in synth.RECIPES.items():
        entry = doc["splits"][name]
        assert entry["recipe"] == synth.recipe_to_dict(recipe)
        # regression guard: the generator still makes the same first graph
        assert synth.graph_at(recipe, 0).fingerprint() == entry["fingerprint_of_graph_0"]
    last = synth.graph_at(synth.RECIPES["train"], 9999)
    assert synth.RECIPES["train"].min_ops <= last.num_nodes <= synth.RECIPES["train"].max_ops


def test_materialize_matches_graph_at_and_resumes(tmp_path):
    recipe = synth.SplitRecipe("part", 5, 20, 80, 42, families=("mixed",))
    paths = synth.materialize(recipe, tmp_path, progress=False)
    assert [p.name for p in paths] == [f"part_{i:05d}.npz" for i in range(5)]
    for i, p in enumerate(paths):
        assert load_graph(p).equals(synth.graph_at(recipe, i))
    meta = json.loads((tmp_path / "recipe.json").read_text())
    assert synth.SplitRecipe(**{**meta["recipe"], "families": tuple(meta["recipe"]["families"])}) \
        == recipe
    before = {p.name: p.read_bytes() for p in paths}
    mtimes = {p.name: p.stat().st_mtime_ns for p in paths}
    paths[1].unlink()
    paths[3].unlink()
    synth.materialize(recipe, tmp_path, progress=False)
    assert {p.name: p.read_bytes() for p in paths} == before
    assert paths[0].stat().st_mtime_ns == mtimes[paths[0].name]  # kept, not rewritten
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted(before) + ["recipe.json"]
    # a folder of another recipe is refused
    with pytest.raises(ValueError, match="different recipe"):
        synth.materialize(synth.SplitRecipe("part", 5, 20, 80, 43), tmp_path, progress=False)


# -- CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--count", "3", "--min-ops", "50", "--max-ops", "40"],
    ["--count", "0"],
    ["--count", "3", "--min-ops", "1"],
    ["--count", "3", "--family", "foo"],
    ["--min-ops", "10"],
    ["--recipe", "nope"],
    ["--recipe", "test", "--seed", "3"],
    ["--recipe", "test", "--count", "1001"],
])
def test_cli_bad_arguments_exit_2(tmp_path, capsys, argv):
    from regal.cli import main
    out = tmp_path / "o"
    assert main(["data", "synth", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("regal: error:") and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_writes_a_set_and_a_recipe_slice(tmp_path):
    from regal.cli import main
    out = tmp_path / "custom"
    assert main(["data", "synth", "--count", "3", "--min-ops", "30", "--max-ops", "40",
                 "--seed", "5", "--family", "transformer", "--training", "--out", str(out),
                 "--quiet"]) == 0
    recipe = synth.custom_recipe(3, 30, 40, 5, "transformer", training=True)
    for i in range(3):
        assert load_graph(out / f"synth_{i:05d}.npz").equals(synth.graph_at(recipe, i))
    meta = json.loads((out / "recipe.json").read_text())
    assert meta["regenerate"].startswith("regal data synth --count 3 --min-ops 30 --max-ops 40 "
                                         "--seed 5 --family transformer --training")
    out = tmp_path / "test"
    assert main(["data", "synth", "--recipe", "test", "--count", "2", "--out", str(out),
                 "--quiet"]) == 0
    assert load_graph(out / "test_00001.npz").equals(synth.graph_at(synth.RECIPES["test"], 1))
    assert not (out / "test_00002.npz").exists()


@pytest.mark.parametrize("family,num_ops,training,file", [
    ("random", 40, False, "random_infer_40.npz"), ("cnn", 40, False, "cnn_infer_40.npz"),
    ("inception", 40, False, "inception_infer_40.npz"),
    ("transformer", 40, False, "transformer_infer_40.npz"), ("cnn", 80, True, "cnn_train_82.npz"),
])
def test_committed_samples_are_what_the_generator_makes(family, num_ops, training, file):
    g = load_graph(ROOT / "data/synth/samples" / file)
    assert g.equals(synth.generate(family, num_ops, 0, training=training))
