"""The generic BRKGA: search quality, budget accounting, seeding, sampling, bad input."""

import numpy as np
import pytest
from scipy import stats

from brkga import BRKGA, Budget, KeySampler, NumpyBackend, biased_crossover, sample_keys
from brkga.crossover import CrossoverBuffers, bernoulli
from brkga.sampling import beta_draws, uniform
from brkga.streams import Layout, words


class Recorder:
    """An evaluate_batch that records every call, with a known-answer objective."""

    def __init__(self, objective):
        self.objective = objective
        self.batches = []

    def __call__(self, keys):
        self.batches.append(np.array(keys, copy=True))
        return self.objective(keys)

    @property
    def rows(self):
        return sum(len(b) for b in self.batches)


def zeros_count(keys):
    """OneMax in disguise: genes >= 0.5 are 1-bits; the optimum (0) is all ones."""
    return (keys < 0.5).sum(axis=1).astype(float)


def inversions(keys):
    """Number of inversions of the permutation argsort(keys); the optimum (0) is sorted keys."""
    order = np.argsort(keys, axis=1)
    i, j = np.triu_indices(keys.shape[1], k=1)
    return (order[:, i] > order[:, j]).sum(axis=1).astype(float)


# -- search ------------------------------------------------------------------

def test_finds_onemax_optimum():
    result = BRKGA(30, population_size=50, seed=3).run(zeros_count, budget=3000)
    assert result.best_fitness == 0.0
    assert (result.best_keys >= 0.5).all()
    assert zeros_count(result.best_keys[None])[0] == result.best_fitness


def test_finds_sorted_permutation():
    result = BRKGA(8, population_size=60, seed=0).run(inversions, budget=4000)
    assert result.best_fitness == 0.0
    assert (np.diff(np.argsort(result.best_keys)) == 1).all()


def test_history_is_monotone_and_ends_at_best():
    result = BRKGA(20, population_size=20, seed=1).run(zeros_count, budget=500)
    assert (np.diff(result.history) <= 0).all()
    assert result.history[-1] == result.best_fitness
    # 20 in generation 0, then 16 per generation (4 elites kept): 500 = 20 + 30*16
    assert len(result.history) == 31


# -- budget ------------------------------------------------------------------

@pytest.mark.parametrize("budget", [100, 101, 179, 180, 181, 1000, 1234])
def test_budget_is_exact(budget):
    ev = Recorder(zeros_count)
    result = BRKGA(10, population_size=100, seed=0).run(ev, budget=budget)
    assert ev.rows == budget == result.evaluations
    assert len(ev.batches[0]) == 100
    assert all(0 < len(b) <= 80 for b in ev.batches[1:])
    assert len(result.history) == len(ev.batches)


def test_budget_with_warm_start_counts_seeds():
    ev = Recorder(zeros_count)
    seeds = np.full((3, 12), 0.9)
    result = BRKGA(12, population_size=10, seed=0).run(ev, budget=37, initial=seeds)
    assert ev.rows == 37 == result.evaluations
    np.testing.assert_array_equal(ev.batches[0][:3], seeds)
    assert result.best_fitness == 0.0 and result.history[0] == 0.0


def test_warm_start_single_chromosome():
    ev = Recorder(inversions)
    best = np.linspace(0.1, 0.9, 6)
    result = BRKGA(6, population_size=10, seed=0).run(ev, budget=10, initial=best)
    np.testing.assert_array_equal(ev.batches[0][0], best)
    np.testing.assert_array_equal(result.best_keys, best)


def test_budget_object():
    b = Budget(10)
    assert b.grant(4) == 4 and b.grant(8) == 6 and b.grant(3) == 0
    assert b.exhausted and b.used == 10


# -- determinism -------------------------------------------------------------

def test_same_seed_same_result_and_other_seed_differs():
    runs = [BRKGA(15, population_size=20, seed=s).run(inversions, budget=400) for s in (7, 7, 8)]
    np.testing.assert_array_equal(runs[0].best_keys, runs[1].best_keys)
    np.testing.assert_array_equal(runs[0].history, runs[1].history)
    assert not np.array_equal(runs[0].best_keys, runs[2].best_keys)


def test_run_is_repeatable_on_one_instance():
    ga = BRKGA(10, population_size=10, seed=5, alpha=2.0, beta=3.0)
    a, b = ga.run(zeros_count, 200), ga.run(zeros_count, 200)
    np.testing.assert_array_equal(a.best_keys, b.best_keys)


# -- sampling ----------------------------------------------------------------

def test_beta_sampling_matches_distribution():
    alpha = np.array([0.5, 1.0, 2.0, 5.0])
    beta = np.array([0.5, 3.0, 2.0, 1.5])
    keys = sample_keys(np.random.default_rng(0), 4000, 4, alpha, beta)
    for j in range(4):
        p = stats.kstest(keys[:, j], stats.beta(alpha[j], beta[j]).cdf).pvalue
        assert p > 0.01, (j, p)
    # and a wrong distribution is rejected, so the test has teeth
    assert stats.kstest(keys[:, 3], "uniform").pvalue < 1e-6


def test_initial_population_uses_per_gene_beta():
    alpha, beta = np.array([0.7, 4.0, 1.0]), np.array([2.0, 0.8, 1.0])
    ev = Recorder(zeros_count)
    BRKGA(3, population_size=3000, alpha=alpha, beta=beta, seed=2).run(ev, budget=3000)
    first = ev.batches[0]
    for j in range(3):
        assert stats.kstest(first[:, j], stats.beta(alpha[j], beta[j]).cdf).pvalue > 0.01


def test_uniform_when_no_beta_parameters():
    keys = sample_keys(np.random.default_rng(1), 4000, 2)
    for j in range(2):
        assert stats.kstest(keys[:, j], "uniform").pvalue > 0.01


# every sampling method: closed forms, products of uniforms, Johnk, numpy's fallback
@pytest.mark.parametrize("a, b", [
    (1.0, 1.0),      # U
    (3.0, 1.0),      # U**(1/a)
    (2.0, 1.0),      # sqrt(U)
    (0.4, 1.0),      # U**(1/a), a < 1
    (1.0, 4.0),      # 1 - U**(1/b)
    (0.5, 0.5),      # Johnk with squares: the quarter disk
    (2.0, 2.0),      # median of three 32-bit uniforms
    (2.0, 5.0),      # order statistic: 1 - exp(log U / 5 + log V / 6)
    (5.0, 2.0),      # order statistic: exp(log U / 5 + log V / 6)
    (3.0, 4.0),      # order statistic, three factors, mirrored
    (4.0, 3.0),      # order statistic, three factors
    (6.0, 1.0),      # order statistic, one factor: U**(1/6)
    (1.0, 3.5),      # 1 - U**(1/b) as exp of a log, non-integer b
    (2.5, 1.0),      # U**(1/a) as exp of a log, non-integer a
    (9.0, 9.0),      # integers past the order-statistic limit: numpy's beta
    (0.3, 0.3),      # Johnk
    (0.9, 0.2),      # Johnk, low acceptance
    (2.5, 3.5),      # numpy's beta
    (0.02, 0.5),     # numpy's beta (too small for Johnk)
])
def test_each_beta_method_matches_its_distribution(a, b):
    x = beta_draws(np.random.default_rng(11), 20_000, a, b)
    assert ((x >= 0) & (x <= 1)).all()
    assert stats.kstest(x, stats.beta(a, b).cdf).pvalue > 0.01
    # teeth: the neighbouring distribution is rejected
    assert stats.kstest(x, stats.beta(a * 1.25, b).cdf).pvalue < 1e-3


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (2.0, 2.0), (2.0, 5.0), (5.0, 2.0), (3.0, 4.0),
                                  (0.3, 0.3)])
def test_closed_forms_at_high_resolution(a, b):
    # 300,000 draws: KS resolves a CDF error of ~0.3%; mean and variance against theory
    x = beta_draws(np.random.default_rng(5), 300_000, a, b)
    assert ((x >= 0) & (x <= 1)).all()
    assert stats.kstest(x, stats.beta(a, b).cdf).pvalue > 1e-3
    mean, var = stats.beta(a, b).stats()
    assert abs(x.mean() - mean) < 4 * np.sqrt(var / len(x))
    assert abs(x.var() - var) < 0.02 * var


@pytest.mark.parametrize("size", [0, 1, 2, 17, 1001])
def test_every_method_fills_exactly_the_requested_size(size):
    for a, b in [(0.5, 0.5), (2.0, 2.0), (5.0, 2.0), (0.3, 0.3), (1.0, 3.5)]:
        out = np.full(size + 2, -1.0)
        beta_draws(np.random.default_rng(0), size, a, b, out=out[1:size + 1])
        assert out[0] == out[-1] == -1.0                # nothing written outside
        assert ((out[1:size + 1] >= 0) & (out[1:size + 1] <= 1)).all()


def test_median_of_three_keeps_the_32_bit_grid():
    k = beta_draws(np.random.default_rng(0), 10_000, 2.0, 2.0) * 2.0 ** 32
    assert (k == np.floor(k)).all()


def test_uniform_keys_are_exact_multiples_of_two_to_minus_32():
    u = uniform(np.random.default_rng(0), 10_001)
    k = u * 2.0 ** 32
    assert ((u >= 0) & (u < 1)).all() and (k == np.floor(k)).all()
    assert len(np.unique(k)) > 9_990
    assert ((uniform(np.random.default_rng(0), 1001, positive=True) > 0)).all()


def test_grouped_sampler_puts_each_gene_in_its_place():
    # genes interleave 5 distributions with very different means; each column must
    # follow its own (alpha, beta), whatever the grouping did internally
    menu = np.array([(1.0, 1.0), (8.0, 1.0), (1.0, 8.0), (0.5, 0.5), (2.0, 5.0)])
    pick = np.random.default_rng(0).integers(len(menu), size=40)
    alpha, beta = menu[pick, 0], menu[pick, 1]
    sampler = KeySampler(40, alpha, beta)
    rng = np.random.default_rng(1)
    keys = np.concatenate([sampler.sample(rng, count) for count in (1500, 700, 1500)])
    for j in range(40):
        assert stats.kstest(keys[:, j], stats.beta(alpha[j], beta[j]).cdf).pvalue > 1e-3, j


def test_all_ones_beta_is_exactly_plain_uniform_brkga():
    plain = BRKGA(12, population_size=10, seed=4).run(inversions, 200)
    ones = BRKGA(12, population_size=10, seed=4, alpha=np.ones(12),
                 beta=np.ones(12)).run(inversions, 200)
    np.testing.assert_array_equal(plain.history, ones.history)
    np.testing.assert_array_equal(plain.best_keys, ones.best_keys)


def test_mutants_use_beta():
    # a huge mutant share: 2 elites, 96 mutants, 2 children per generation
    alpha, beta = 6.0, 1.0
    ev = Recorder(zeros_count)
    BRKGA(1, population_size=100, elite_fraction=0.02, mutant_fraction=0.96,
          alpha=alpha, beta=beta, seed=1).run(ev, budget=100 + 98 * 20)
    mutants = np.concatenate([b[2:, 0] for b in ev.batches[1:]])
    assert stats.kstest(mutants, stats.beta(alpha, beta).cdf).pvalue > 0.01


# -- elites and crossover ----------------------------------------------------

def test_elites_are_never_reevaluated():
    # A noisy objective: a re-evaluated elite would get a fresh score and lose its
    # lucky one, so the best kept score must be the minimum of every score handed out.
    noise = np.random.default_rng(9)
    scores = []

    def noisy(keys):
        out = noise.random(len(keys))
        scores.append(out)
        return out

    result = BRKGA(20, population_size=30, seed=0).run(noisy, budget=30 + 24 * 10)
    assert [len(s) for s in scores] == [30] + [24] * 10   # 6 elites skipped every generation
    running_min = np.minimum.accumulate([s.min() for s in scores])
    np.testing.assert_array_equal(result.history, running_min)


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_scores_handed_out_are_not_modified(backend):
    # The GA only reads an evaluator's scores (it does not copy them), so an evaluator
    # that keeps or reuses its arrays must find them as it returned them.
    returned, copies = [], []

    def evaluate(keys):
        out = keys.sum(axis=1)
        returned.append(out)
        copies.append(out.copy())
        return out

    if backend == "compiled":
        from regal.breed import CompiledBackend
        chosen = CompiledBackend()
    else:
        chosen = NumpyBackend()
    BRKGA(12, population_size=20, seed=3, backend=chosen).run(evaluate, budget=200)
    assert len(returned) > 5
    for out, copy in zip(returned, copies):
        np.testing.assert_array_equal(out, copy)


def test_per_gene_elite_bias_one_copies_elite_parent():
    rng = np.random.default_rng(0)
    elites = np.arange(3 * 6, dtype=float).reshape(3, 6) / 100      # distinct rows
    others = 0.5 + np.arange(5 * 6, dtype=float).reshape(5, 6) / 100
    bias = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    kids = biased_crossover(rng, elites, others, 200, bias)
    first = [tuple(r) for r in elites[:, :3]]
    second = [tuple(r) for r in others[:, 3:]]
    assert all(tuple(k[:3]) in first for k in kids)
    assert all(tuple(k[3:]) in second for k in kids)
    # a row of the first half always comes with its own elite row (one parent per child)
    assert len({tuple(k[:3]) for k in kids}) == 3


def test_elite_bias_one_in_run_breeds_elite_copies():
    ev = Recorder(zeros_count)
    ga = BRKGA(8, population_size=10, elite_fraction=0.3, mutant_fraction=0.2,
               elite_bias=np.ones(8), seed=0)
    ga.run(ev, budget=17)      # generation 0 (10) + 7 newcomers: 5 children, 2 mutants
    elites = ev.batches[0][np.argsort(zeros_count(ev.batches[0]), kind="stable")[:3]]
    children = ev.batches[1][:5]
    assert all(any(np.array_equal(c, e) for e in elites) for c in children)


def test_bernoulli_coins_are_exact():
    p = np.array([0.0, 1.0, 0.7, 3.5 / 256, 65535.5 / 65536, 1 / 3])
    n = 200_000
    coins = bernoulli(np.uint64(3), (n, len(p)), p, np.empty((n, len(p)), bool))
    assert coins[:, 0].sum() == 0 and coins[:, 1].all()
    for j in range(2, len(p)):
        assert stats.binomtest(int(coins[:, j].sum()), n, p[j]).pvalue > 0.01, j


def test_bernoulli_coins_follow_the_stream_layout_with_tie_draws():
    # a reference written from the Layout's words: value < h, or value == h and a second
    # draw below the fraction; 1.5/2**16 needs that draw (else its rate would be 1/2**16)
    key, n, cols = np.uint64(11), 40_000, 50
    p = np.full(cols, 1.5 / 65536)
    p[::2] = 0.3 + np.arange(25) / 65536 / 3        # thresholds with fractions of 1/3, 2/3
    coins = bernoulli(key, (n, cols), p, np.empty((n, cols), bool))
    lay = Layout.of(n, cols)
    value = words(key, np.arange(n * lay.coin_words)).view(np.uint16).reshape(n, -1)[:, :cols]
    q = p * 65536
    h = np.floor(q)
    second = words(key, lay.tie + np.arange(n * cols).reshape(n, cols)) >> np.uint64(11)
    expected = (value < h) | ((value == h) & (second * 2.0 ** -53 < q - h))
    assert ((value == h) & (second * 2.0 ** -53 < q - h)).sum() >= 5    # tie draws happened
    np.testing.assert_array_equal(coins, expected)


def test_crossover_rates_per_gene_across_chunks():
    # per-gene biases that need the tie draw, and a block split into several chunks
    bias = np.array([0.7, 3.5 / 256, 1 / 3, 0.5, 1.0, 0.0])
    count = 30_000
    buffers = CrossoverBuffers(count, len(bias))
    assert buffers.chunk < count
    kids = biased_crossover(np.random.default_rng(5), np.ones((3, 6)), np.zeros((4, 6)),
                            count, bias, buffers=buffers)
    assert kids[:, 4].all() and not kids[:, 5].any()
    for j in range(4):
        assert stats.binomtest(int(kids[:, j].sum()), count, bias[j]).pvalue > 0.01, j


def test_promote_keeps_the_best_rows():
    rng = np.random.default_rng(2)
    for ne, m in [(4, 9), (1, 5), (6, 3)]:
        fe = rng.integers(0, 6, ne).astype(float)           # ties on purpose
        fn = rng.integers(0, 6, m).astype(float)
        home = 2 * ne
        pool = rng.random((home + m, 5))
        elite_rows = rng.permutation(home)[:ne]              # elites anywhere at home
        newcomer_rows = np.arange(home, home + m)
        keys = {r: pool[r].copy() for r in np.concatenate([elite_rows, newcomer_rows])}
        candidates = np.concatenate([elite_rows, newcomer_rows])
        ef = fe.copy()
        others = NumpyBackend.promote(pool, home, elite_rows, ef, newcomer_rows, fn.copy())
        allf = np.concatenate([fe, fn])
        winners = np.argsort(allf, kind="stable")[:ne]      # incumbents win ties
        assert (elite_rows < home).all()                      # elites live at home
        assert sorted(map(tuple, pool[elite_rows])) == sorted(tuple(keys[r])
                                                              for r in candidates[winners])
        assert sorted(ef) == sorted(allf[winners])
        for r, f in zip(elite_rows, ef):                     # each elite keeps its fitness
            assert f == allf[[np.array_equal(pool[r], keys[c]) for c in candidates]][0]
        losers = set(candidates.tolist()) - set(candidates[winners].tolist())
        assert sorted(others) == sorted(losers)              # non-elites stay where they are
        for r in others:
            np.testing.assert_array_equal(pool[r], keys[r])


def test_elite_bias_is_the_inheritance_rate():
    rng = np.random.default_rng(0)
    kids = biased_crossover(rng, np.ones((4, 1000)), np.zeros((4, 1000)), 50, 0.7)
    assert abs(kids.mean() - 0.7) < 0.01


# -- bad input ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    (dict(elite_fraction=0.0), "elite_fraction"),
    (dict(elite_fraction=1.0), "elite_fraction"),
    (dict(mutant_fraction=-0.1), "mutant_fraction"),
    (dict(mutant_fraction=1.5), "mutant_fraction"),
    (dict(elite_fraction=0.6, mutant_fraction=0.4), "elite_fraction + mutant_fraction"),
    (dict(elite_bias=1.2), "elite_bias"),
    (dict(elite_bias=np.full(4, 0.5)), "elite_bias"),
    (dict(alpha=0.0), "alpha"),
    (dict(alpha=np.ones(4)), "alpha"),
    (dict(beta=-1.0), "beta"),
    (dict(beta=[1.0, 2.0, np.nan, 1.0, 1.0]), "beta"),
    (dict(population_size=2), "population_size"),
    (dict(num_genes=0), "num_genes"),
])
def test_bad_parameters_name_the_argument(kwargs, name):
    args = dict(num_genes=5) | kwargs
    with pytest.raises(ValueError, match=name.replace("+", r"\+")):
        BRKGA(**args)


def test_bad_run_arguments():
    ga = BRKGA(5, population_size=10)
    with pytest.raises(ValueError, match="budget"):
        ga.run(zeros_count, budget=9)
    with pytest.raises(ValueError, match="initial"):
        ga.run(zeros_count, budget=10, initial=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="initial"):
        ga.run(zeros_count, budget=10, initial=np.full((1, 5), 1.5))
    with pytest.raises(ValueError, match="initial"):
        ga.run(zeros_count, budget=10, initial=np.zeros((11, 5)))
    with pytest.raises(ValueError, match="evaluate_batch"):
        ga.run(lambda k: np.zeros(len(k) + 1), budget=10)


def test_callback_reports_progress():
    seen = []
    BRKGA(5, population_size=10, seed=0).run(zeros_count, 50, callback=lambda *a: seen.append(a))
    assert [s[0] for s in seen] == list(range(len(seen)))
    assert [s[1] for s in seen] == [10, 18, 26, 34, 42, 50]
    assert all(b >= a for (_, _, a), (_, _, b) in zip(seen[1:], seen[:-1]))


def test_uniform_mutant_share():
    """With Beta(20, 1) keys (mean 0.95), the first `uniform_mutant_fraction` of each
    generation's mutants are uniform and the rest Beta; 0 draws what the GA always drew."""
    seen = []

    def record(keys):
        seen.append(keys.copy())
        return keys.sum(axis=1)                 # minimise: the GA keeps low-key children

    ga = BRKGA(400, population_size=20, elite_fraction=0.2, mutant_fraction=0.5, alpha=20.0,
               seed=1, uniform_mutant_fraction=0.4)
    ga.run(record, budget=60)                   # generation 0 (20 rows), then 2 x 16
    first, later = seen[0], seen[1]
    mutants = later[16 - 10:]                   # the last 10 newcomers are mutants
    assert stats.kstest(mutants[:4].ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(mutants[4:].ravel(), stats.beta(20, 1).cdf).pvalue > 1e-3
    # generation 0: 40% of the 20 sampled rows uniform
    assert stats.kstest(first[:8].ravel(), "uniform").pvalue > 1e-3
    assert first[8:].mean() > 0.9
    a = BRKGA(30, population_size=10, alpha=3.0, seed=2).run(lambda k: k.sum(axis=1), 100)
    b = BRKGA(30, population_size=10, alpha=3.0, seed=2, uniform_mutant_fraction=0.0).run(
        lambda k: k.sum(axis=1), 100)
    np.testing.assert_array_equal(a.best_keys, b.best_keys)
    with pytest.raises(ValueError, match="uniform_mutant_fraction"):
        BRKGA(30, uniform_mutant_fraction=1.5)


def test_many_distinct_pairs_are_drawn_by_one_vectorised_call():
    """Per-gene Betas (a mean per gene, as REGAL's order actions make) plus two shared pairs:
    every gene still follows its own law."""
    n = 300
    mode = (np.arange(n) + 0.5) / n
    alpha = np.concatenate([np.full(100, 20.0), np.ones(100), 1 + 30 * mode])
    beta = np.concatenate([np.ones(100), np.full(100, 4.0), 1 + 30 * (1 - mode)])
    sampler = KeySampler(len(alpha), alpha, beta)
    keys = sampler.sample(np.random.default_rng(0), 3000)
    for j in (0, 150, 200, 349, 499):
        assert stats.kstest(keys[:, j], stats.beta(alpha[j], beta[j]).cdf).pvalue > 1e-3, j
    assert sampler._scattered is not None and len(sampler._scattered[0]) == n
