"""experiments/move_ranker.py's listwise fit: its gradient is the loss's (finite differences of
a loss written step by step), and it learns to put a step's improving moves first."""

from __future__ import annotations

import numpy as np

from helpers import experiment
from regal.search.advantage import network_scores


def listwise_loss(layers, z, improves, group) -> float:
    """The loss `_listwise` minimises, written step by step: over the steps with an improving
    move, the mean of -log(softmax mass of the improving moves among the step's moves)."""
    score = network_scores(layers, z)
    total = 0.0
    steps = [g for g in np.unique(group) if improves[group == g].any()]
    for g in steps:
        s, y = score[group == g], improves[group == g]
        top = s.max()
        total -= np.log(np.exp(s[y] - top).sum()) - np.log(np.exp(s - top).sum())
    return total / len(steps)


def _layers(params):
    return [(params[i], params[i + 1]) for i in range(0, len(params), 2)]


def test_listwise_gradient_matches_finite_differences_of_the_loss():
    script = experiment("move_ranker")
    rng = np.random.default_rng(0)
    n, f = 30, 4
    x = rng.normal(size=(n, f))
    group = np.sort(rng.integers(0, 6, n))
    y = rng.random(n) < 0.3
    keep, starts = script._steps(y, group)
    params = [rng.normal(size=(f, 5)), rng.normal(size=5), rng.normal(size=(5, 3)),
              rng.normal(size=3), rng.normal(size=(3, 1)), rng.normal(size=1)]
    loss, grads = script.listwise_gradient(params, x[keep], y[keep].astype(float), starts)
    assert abs(loss - listwise_loss(_layers(params), x, y, group)) < 1e-9
    eps = 1e-6
    for q, g in zip(params, grads):
        for index in np.ndindex(q.shape):
            old = q[index]
            q[index] = old + eps
            up = listwise_loss(_layers(params), x, y, group)
            q[index] = old - eps
            down = listwise_loss(_layers(params), x, y, group)
            q[index] = old
            assert abs((up - down) / (2 * eps) - g[index]) < 1e-5


def test_listwise_fit_ranks_each_steps_improving_move_first():
    """Steps of 12 candidates, one or two improving; an improving move has feature 0 above
    1 and feature 1 below 0 (neither alone tells): the fit puts an improving move on top of
    nearly every step it never saw."""
    script = experiment("move_ranker")
    rng = np.random.default_rng(1)

    def steps(count):
        x, y, group = [], [], []
        for g in range(count):
            good = rng.random(12) < 0.12
            good[rng.integers(12)] = True
            a = rng.uniform(-2, 2, 12)
            b = rng.uniform(-2, 2, 12)
            bad_a = (~good) & (a > 1) & (b < 0)      # a non-improving move never has both
            a[bad_a] = rng.uniform(-2, 1, bad_a.sum())
            a[good] = rng.uniform(1.2, 2, good.sum())
            b[good] = rng.uniform(-2, -0.2, good.sum())
            x.append(np.column_stack([a, b, rng.normal(size=12)]))
            y.append(good)
            group.append(np.full(12, g))
        return np.concatenate(x), np.concatenate(y), np.concatenate(group)

    x, y, group = steps(200)
    layers = script._listwise(x, y, group, hidden=(16, 16), iterations=300, seed=0)
    x, y, group = steps(100)
    scores = network_scores(layers, x)
    top = [y[group == g][np.argmax(scores[group == g])] for g in range(100)]
    assert np.mean(top) >= 0.95
    assert listwise_loss(layers, x, y, group) < 0.2 * np.log(12)


def test_the_shipped_ranker_keeps_the_drawing_order_over_a_limit():
    """A climb whose incumbent is over a memory limit (regime makespan_over) is left to the
    drawing order: the shipped weights score every move alike there (too few such moves were
    logged to fit, and the in-limit fit lent to it lost under tight limits), and the fit lends
    that regime no other's weights."""
    from regal.regal_method import load_move_ranker
    from regal.search.move_features import F, REGIMES

    script = experiment("move_ranker")
    over = REGIMES.index("makespan_over")
    assert over not in script.FALLBACK
    ranker = load_move_ranker("shipped")
    features = np.random.default_rng(0).normal(size=(64, F)) * 10
    assert np.ptp(ranker.advantage(features, over)) == 0.0
    for regime in range(len(REGIMES)):       # the other regimes do tell moves apart
        if regime != over:
            assert np.ptp(ranker.advantage(features, regime)) > 0.0


def test_top_moves_keeps_the_improving_moves_near_each_steps_best():
    """Hand-computed steps: step 0's best gain is 0.10, so 0.06 and 0.10 are ranked first and
    0.04 (under half of it), 0 and the losses are not; step 1 lowers no peak, so each move that
    improves the tie-break counts; step 2 improves nothing."""
    script = experiment("move_ranker")
    r1 = np.array([0.10, 0.06, 0.04, 0.0, -0.2, 0.0, 0.0, -0.1, -0.1, 0.0])
    r2 = np.array([0.0, 0.0, 0.0, 0.3, 0.5, 0.2, -0.1, 0.0, 0.4, -0.2])
    group = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    assert script.TOP_SHARE == 0.5
    chosen = script._top_moves(r1, r2, group)
    assert chosen.tolist() == [True, True, False, False, False, True, False, False, False, False]
    # every chosen move improves the incumbent (the climb's lexicographic rule)
    assert not (chosen & ~script._improves(r1, r2)).any()


def test_gate_auc_is_the_share_of_positive_negative_pairs_in_order():
    script = experiment("move_ranker")
    rng = np.random.default_rng(3)
    score = rng.integers(0, 6, 80).astype(float)          # many ties
    label = (rng.random(80) < 0.4).astype(float)
    pos, neg = score[label > 0], score[label == 0]
    pairs = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    assert script._auc(score, label) == np.float64(pairs / (len(pos) * len(neg)))


def test_gate_logger_labels_each_step_with_whether_the_climb_then_improved():
    """One row per ranked step but the last, labelled 1 exactly when the climb accepted a move
    at that step: the positives are the climb's accepts (less one when its last step
    improved, whose label never comes)."""
    from regal import synth
    from regal.optimizers import Problem
    from regal.regal_method import load_move_ranker
    from regal.search.advantage import GATE_FEATURES
    from regal.search.climb import Climb
    from regal.sim import DeviceSpec

    script = experiment("move_ranker")
    logger = script._GateLogger(load_move_ranker("shipped"))
    climb = Climb(Problem(synth.random_dag(80, 2), DeviceSpec(2)), 2500, 1,
                  rank_moves=logger, draw=4).run(2500)
    rows = np.array(logger.rows)
    assert rows.shape == (climb.steps - 1, len(GATE_FEATURES) + 2) and climb.gated == 0
    assert climb.accepted - 1 <= rows[:, -1].sum() <= climb.accepted
    assert set(np.unique(rows[:, -2])) == {0.0}            # peak memory's regime


def test_the_shipped_gate_acts_under_peak_memory_only():
    from regal.regal_method import load_move_ranker
    from regal.search.advantage import GATE_FEATURES, REGIMES

    ranker = load_move_ranker("shipped")
    assert [gate is not None for gate in ranker.gates] == [name == "peak_memory"
                                                         for name in REGIMES]
    gate = ranker.gates[REGIMES.index("peak_memory")]
    assert gate["coef"].shape == (len(GATE_FEATURES),) and np.isfinite(gate["threshold"]).all()
