"""Action space 2: the reference solution, slot space, the placement and order menus, their
distributions against scipy and hand computations, label invariance of a whole run, the
seeded methods, and the two losses (TensorFlow only for those). (The best-known reader,
regal.train.read_best_known: tests/test_train.py.)"""

from __future__ import annotations

import dataclasses
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow loads: Keras 2 (tf-keras)

import numpy as np
import pytest
from scipy import stats

from regal.decode import decode
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, solve
from regal.policy.distributions import (BetaParams, argmax_probabilities, beta_entropy,
                                        beta_log_prob, beta_sample, categorical_entropy,
                                        categorical_log_prob, chromosome_parameters)
from regal.policy.menus import (PLACEMENT_MENU, MenuChoices, make_action, normalise_menus,
                                target_log_likelihoods)
from regal.policy.reference import (canonical_labels, compute_reference, order_keys,
                                    reference_for)
from regal.regal_method import search_params
from regal.search.pipeline import brkga_phase as search
from regal.sim import DeviceSpec
from regal.synth import random_dag

MENUS = normalise_menus(None)
NAMES = [e.name for e in PLACEMENT_MENU]


def uniform_choices(n, affinity="uniform", priority=0, transfer=0, elite=2):
    """Every op on one menu entry (indices into MENUS; elite 2 = 0.7)."""
    return MenuChoices(np.full(n, NAMES.index(affinity), np.int32), np.full(n, priority, np.int32),
                       np.full(n, transfer, np.int32), np.full(n, elite, np.int32))


def chain(n):
    g = GraphBuilder()
    for v in range(n):
        g.add_op(f"op{v}", 1.0)
        g.add_output(v, 100 * (v + 1))
        if v:
            g.add_input(v, v - 1)
    return g.build()


def device_keys(reference, slot_keys):
    return slot_keys[..., reference.gene_order()]


# -- the reference and slot space ------------------------------------------------------


def test_canonical_labels_by_hand():
    g = chain(5)  # topological order 0..4
    labels = canonical_labels(g, np.array([2, 2, 0, 3, 0]), 4)
    # first use: device 2 (op 0), then 0 (op 2), then 3 (op 3); device 1 unused comes last
    assert labels.tolist() == [1, 3, 0, 2]
    # renaming the devices does not change which ops share a label
    perm = np.array([3, 0, 1, 2])
    p = np.array([2, 2, 0, 3, 0])
    assert canonical_labels(g, perm[p], 4)[perm[p]].tolist() == labels[p].tolist()


def test_order_keys_keep_the_simulators_order():
    prio = np.array([0.5, 0.9, 0.5, 0.1])
    keys = order_keys(prio)
    # op 1 first, then the tie 0/2 broken to the lower id, then op 3; keys (rank + 0.5) / n
    assert keys.tolist() == [0.625, 0.875, 0.375, 0.125]


def test_reference_is_the_best_candidate_and_its_seeds_decode_to_it():
    g = random_dag(80, 3)
    problem = Problem(g, DeviceSpec(3))
    ref = compute_reference(problem)
    assert ref.evaluations == 4 and len(ref.seeds) == 4
    values = problem.evaluate(ref.seeds)
    assert values[0] == ref.value == values.min()
    assert np.all(np.diff(values) >= 0)                 # seeds are sorted best first
    placement, _, _ = decode(ref.seeds[0], g, 3)
    np.testing.assert_array_equal(placement, ref.placement)
    # canonical labels: the first op of the topological order has label 0
    assert ref.labels[g.topo_order[0]] == 0
    # slot 0 of every op is its reference device; slot space <-> device space
    np.testing.assert_array_equal(ref.slot_devices()[:, 0], ref.placement)
    keys = np.random.default_rng(0).random((5, g.num_nodes * 5))
    np.testing.assert_array_equal(device_keys(ref, ref.slot_space(keys)), keys)


# -- the placement menu --------------------------------------------------------------


def test_argmax_probabilities_by_hand():
    """P(slot 0 wins) against three uniform keys: integral of f(x) x^3 = 1/4 (uniform),
    2/5 for Beta(2, 1), 5/8 for Beta(5, 1), 20/23 for Beta(20, 1)."""
    for a, want in ((1.0, 0.25), (2.0, 0.4), (5.0, 0.625), (20.0, 20 / 23)):
        params = BetaParams(np.array([a, 1, 1, 1.0]), np.ones(4))
        assert argmax_probabilities(params)[0] == pytest.approx(want, abs=2e-4)


@pytest.mark.parametrize("d", [2, 4])
def test_follow_strongly_decodes_to_the_reference(d):
    """Keys drawn by brkga's sampler from the 'follow_strongly' action and decoded: >= 90%
    of the ops land on their reference device (uniform keys: 1/d), matching the table."""
    g = random_dag(120, 5)
    ref = reference_for(g, d)
    draws = {}
    for entry in ("follow_strongly", "uniform"):
        action = make_action(uniform_choices(g.num_nodes, entry), 0.0, ref, MENUS)
        alpha, beta, _ = chromosome_parameters(action.keys)
        slot = beta_sample(BetaParams(alpha, beta), np.random.default_rng(1), 200)
        placement, _, _ = decode(device_keys(ref, slot), g, d)
        draws[entry] = float((placement == ref.placement).mean())
    table = argmax_probabilities(BetaParams(*(p[NAMES.index("follow_strongly")] for p in
                                              _table(d))))
    assert draws["follow_strongly"] >= 0.9
    assert draws["follow_strongly"] == pytest.approx(table[0], abs=0.01)
    assert draws["uniform"] == pytest.approx(1 / d, abs=0.02)


def _table(d):
    from regal.policy.menus import placement_table
    t = placement_table(MENUS, d)
    return t.alpha, t.beta


def test_move_entries_favour_the_neighbour_slots():
    prob = argmax_probabilities(BetaParams(*_table(4)))  # [K, 4]
    assert prob[NAMES.index("to_next")].argmax() == 1
    assert prob[NAMES.index("to_previous")].argmax() == 3
    assert prob[NAMES.index("avoid"), 0] < 0.1
    np.testing.assert_allclose(prob.sum(axis=1), 1.0)


def test_relabelling_the_devices_changes_nothing():
    """The same action and seed on a reference whose devices are renamed: the same objective
    value, and the placement renamed the same way (BRKGA searches in slot space)."""
    g = random_dag(60, 2)
    d = 3
    problem = Problem(g, DeviceSpec(d))
    ref = reference_for(g, d)
    perm = np.array([2, 0, 1])
    seeds = ref.seeds.copy()
    n = g.num_nodes
    seeds[:, :n * d].reshape(len(seeds), n, d)[:, :, perm] = \
        ref.seeds[:, :n * d].reshape(len(seeds), n, d)
    renamed = dataclasses.replace(ref, device_of_label=perm[ref.device_of_label], seeds=seeds)
    np.testing.assert_array_equal(renamed.placement, perm[ref.placement])
    rng = np.random.default_rng(0)
    choices = MenuChoices(rng.integers(0, len(PLACEMENT_MENU), n).astype(np.int32),
                          rng.integers(0, 4, n).astype(np.int32),
                          rng.integers(0, 4, n).astype(np.int32), np.full(n, 2, np.int32))
    for seed in (0, 1):
        runs = [search(problem, 600, seed, population_size=20,
                       **search_params(make_action(choices, 0.0, r, MENUS)))
                for r in (ref, renamed)]
        assert runs[0].value == runs[1].value
        np.testing.assert_array_equal(runs[1].placement, perm[runs[0].placement])


# -- the order menus -------------------------------------------------------------------


def test_order_beta_log_prob_and_entropy_against_scipy():
    rng = np.random.default_rng(3)
    mode, kappa, x = rng.random(50), rng.choice([0.0, 5.0, 20.0, 100.0], 50), rng.random(50)
    params = BetaParams(1 + kappa * mode, 1 + kappa * (1 - mode))
    np.testing.assert_allclose(beta_log_prob(params, x),
                               stats.beta(params.alpha, params.beta).logpdf(x), rtol=1e-10)
    np.testing.assert_allclose(beta_entropy(params),
                               stats.beta(params.alpha, params.beta).entropy(), atol=1e-10)
    # the Beta's mode is the reference key (for kappa > 0)
    sharp = kappa > 0
    mode_of = (params.alpha[sharp] - 1) / (params.alpha[sharp] + params.beta[sharp] - 2)
    np.testing.assert_allclose(mode_of, mode[sharp])


@pytest.mark.parametrize("column, low, high", [(3, 0.95, 1.0), (2, 0.85, 0.97), (0, -0.15, 0.15)])
def test_high_concentration_reproduces_the_reference_order(column, low, high):
    """Spearman correlation of sampled priority keys with the reference order: ~0.97 at
    kappa 100, ~0.9 at 20, ~0 for the uniform entry."""
    g = random_dag(300, 4)
    ref = reference_for(g, 2)
    action = make_action(uniform_choices(g.num_nodes, priority=column), 0.0, ref, MENUS)
    keys = beta_sample(action.keys.priority, np.random.default_rng(0), 20)
    rho = np.mean([stats.spearmanr(k, ref.priority)[0] for k in keys])
    assert low <= rho <= high, rho


def test_target_log_likelihoods_by_hand():
    g = random_dag(40, 6)
    ref = reference_for(g, 4)
    slots = np.zeros(g.num_nodes, np.int64)
    slots[:5] = 1
    tables = target_log_likelihoods(MENUS, ref, slots, ref.priority, ref.transfer)
    prob = argmax_probabilities(BetaParams(*_table(4)))
    np.testing.assert_allclose(tables["affinity"][0], np.log(prob[:, 1]))
    np.testing.assert_allclose(tables["affinity"][10], np.log(prob[:, 0]))
    v, kappa = 7, 20.0
    m = ref.priority[v]
    want = stats.beta(1 + kappa * m, 1 + kappa * (1 - m)).logpdf(ref.priority[v])
    assert tables["priority"][v, MENUS["priority"].index(kappa)] == pytest.approx(want)
    assert tables["priority"][v, 0] == 0.0              # uniform density
    # the reference itself is likelier under a higher concentration
    assert (np.diff(tables["priority"], axis=1) > 0).all()
    # a solution with renamed devices has the same target slots
    perm = np.array([1, 3, 0, 2])
    assert (ref.target_slots(perm[ref.placement]) == 0).all()


def test_categorical_functions_by_hand():
    logits = np.log(np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]))
    assert categorical_log_prob(logits, np.array([2, 0])) == pytest.approx(np.log(0.5 * 0.6))
    want = -sum(p * np.log(p) for p in (0.2, 0.3, 0.5, 0.6, 0.3, 0.1))
    assert categorical_entropy(logits) == pytest.approx(want)


# -- do no harm: seeded methods ---------------------------------------------------------


def test_seeded_methods_never_lose_to_the_reference_and_keep_the_budget():
    g = random_dag(70, 8)
    problem = Problem(g, DeviceSpec(4))
    ref = reference_for(g, 4)
    seeded = solve("seeded-brkga", problem, 300, 0, population_size=20)
    assert seeded.evaluations == 300 and seeded.value <= ref.value
    action = make_action(uniform_choices(g.num_nodes, "follow"), 0.0, ref, MENUS)
    regal = search(problem, 300, 0, population_size=20, **search_params(action))
    assert regal.evaluations == 300 and regal.value <= ref.value


def test_search_without_options_is_plain_brkga():
    from regal.optimizers import solve_brkga

    problem = Problem(random_dag(40, 1), DeviceSpec(3))
    a, b = search(problem, 300, 4, population_size=20), solve_brkga(problem, 300, 4,
                                                                     population_size=20)
    assert a.value == b.value and a.extra["history"] == b.extra["history"]


# -- losses (TensorFlow) -----------------------------------------------------------------


def test_losses_by_hand():
    tf = pytest.importorskip("tensorflow")
    from regal.policy.losses import reinforce_loss, supervised_loss

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4))
    table = rng.normal(size=(6, 4))
    table[2, 1] = -np.inf                                  # an entry that cannot produce it
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = -np.log((p * np.exp(table)).sum(1)).sum()
    got = supervised_loss({"priority": tf.constant(logits, tf.float32)}, {"priority": table})
    assert float(got) == pytest.approx(want, rel=1e-5)

    log_probs = [tf.Variable(v) for v in (-1.0, -2.0, -3.0)]
    with tf.GradientTape() as tape:
        loss = reinforce_loss(log_probs, [1.0, 0.0, 2.0], [1.0, 1.0, 1.0], tf.constant(0.5), 0.1)
    assert float(loss) == pytest.approx(-(0 * -1 + -1 * -2 + 1 * -3) / 3 - 0.05)
    grads = [float(g) for g in tape.gradient(loss, log_probs)]
    assert grads == pytest.approx([0.0, 1 / 3, -1 / 3])


def test_the_papers_configuration_runs_by_name_as_regal_without_climbs():
    """`regal-paper`: the policy's BRKGA on the whole budget, no climbs; the `regal` method
    with polish_share 0, draw for draw."""
    from regal import optimizers, synth
    from regal.sim import DeviceSpec

    problem = optimizers.Problem(synth.random_dag(60, 3), DeviceSpec(2))
    paper = optimizers.solve("regal-paper", problem, 400, 1)
    same = optimizers.solve("regal", problem, 400, 1, polish_share=0.0)
    assert paper.method == "regal-paper" and paper.value == same.value
    assert np.array_equal(paper.placement, same.placement)
    assert "polish_evaluations" not in paper.extra and paper.evaluations <= 400
    with pytest.raises(ValueError, match="polish_share"):
        optimizers.solve("regal-paper", problem, 400, 1, polish_share=0.5)
