"""The compiled backend against brkga's numpy reference (bit for bit), and the stream it reads."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from brkga import BRKGA, NumpyBackend
from brkga.crossover import CoinThresholds
from brkga.streams import Layout, words
from regal.breed import CompiledBackend


def splitmix64(state: int, count: int) -> list[int]:
    """SplitMix64 written out on Python integers (the published algorithm, step by step)."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) % 2 ** 64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2 ** 64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2 ** 64
        out.append(z ^ (z >> 31))
    return out


def test_stream_is_splitmix64():
    # a widely quoted test vector: the first outputs from state 1234567
    assert words(1234567, range(3)).tolist() == [6457827717110365317, 3203168211198807973,
                                                 9817491932198370423]
    key = 0xFFFF_FFFF_FFFF_FF00                              # wraps around 2**64 at once
    assert words(key, range(40)).tolist() == splitmix64(key, 40)
    assert words(key, [39, 7]).tolist() == [splitmix64(key, 40)[39], splitmix64(key, 8)[7]]


@given(st.integers(0, 50), st.integers(1, 40))
def test_layout_regions_are_disjoint_and_in_order(children, genes):
    lay = Layout.of(children, genes)
    regions = [(lay.coin, lay.parent), (lay.parent, lay.tie), (lay.tie, lay.mutant)]
    assert lay.coin == 0
    assert [hi - lo for lo, hi in regions] == [children * lay.coin_words, children,
                                               children * genes]
    assert lay.coin_words * 4 >= genes > (lay.coin_words - 1) * 4
    assert lay.mutant_words * 2 >= genes > (lay.mutant_words - 1) * 2


def breed_both(key, elites, others, bias, children, mutants, threads=None):
    """Both backends' newcomers, with the parents in one pool listed in shuffled order."""
    coins = CoinThresholds(bias)
    genes = elites.shape[1]
    pool = np.concatenate([others, elites])
    order = np.random.default_rng(7).permutation(len(pool))
    pool[order] = pool.copy()                      # row r of the stack is now pool[order[r]]
    other_rows, elite_rows = order[:len(others)], order[len(others):]
    a = np.full((children + mutants, genes), -1.0)
    b = np.full((children + mutants, genes), -2.0)
    NumpyBackend().breed(key, pool, elite_rows, other_rows, coins, a[:children],
                         a[children:] if mutants else None)
    CompiledBackend(threads).breed(key, pool, elite_rows, other_rows, coins, b[:children],
                                   b[children:] if mutants else None)
    return a, b


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 64 - 1), st.integers(1, 70), st.integers(1, 6), st.integers(1, 9),
       st.integers(0, 12), st.integers(0, 5), st.sampled_from(["scalar", "per gene", "edges"]),
       st.integers(1, 2))
def test_compiled_breeding_is_bit_identical_to_numpy(key, genes, ne, no, children, mutants,
                                                    bias_kind, threads):
    rng = np.random.default_rng(key % 1000)
    elites, others = rng.random((ne, genes)), rng.random((no, genes))
    if bias_kind == "scalar":
        bias = float(rng.choice([0.7, 0.5, 3.5 / 256, 1 / 3]))
    elif bias_kind == "per gene":
        bias = rng.random(genes)
    else:   # probabilities 0 and 1, and ones that sit on a threshold or need the tie draw
        bias = rng.choice([0.0, 1.0, 179 / 256, 3.5 / 65536, 65535.5 / 65536], genes)
    a, b = breed_both(np.uint64(key), elites, others, bias, children, mutants, threads)
    np.testing.assert_array_equal(a.view(np.int64), b.view(np.int64))


def test_children_are_gene_by_gene_copies_of_their_two_parents():
    # every gene of child i is its elite parent's or its other parent's, as the stream says
    rng = np.random.default_rng(0)
    elites, others = rng.random((5, 300)), rng.random((7, 300))
    _, kids = breed_both(np.uint64(99), elites, others, 0.7, 40, 0)
    w = words(99, np.arange(Layout.of(40, 300).parent, Layout.of(40, 300).parent + 40))
    ei, oi = (w >> np.uint64(32)) * 5 >> np.uint64(32), (w & np.uint64(2**32 - 1)) * 7 >> np.uint64(32)
    from_elite = kids == elites[ei.astype(int)]
    assert (from_elite | (kids == others[oi.astype(int)])).all()
    assert stats.binomtest(int(from_elite.sum()), from_elite.size, 0.7).pvalue > 1e-3


def test_mutants_are_uniform_on_the_32_bit_grid():
    rng = np.random.default_rng(1)
    _, b = breed_both(np.uint64(5), rng.random((2, 999)), rng.random((3, 999)), 0.7, 0, 200)
    assert (b * 2 ** 32 == np.floor(b * 2 ** 32)).all() and (b >= 0).all() and (b < 1).all()
    assert stats.kstest(b.reshape(-1), "uniform").pvalue > 1e-3


@pytest.mark.parametrize("alpha, uniform_share", [(None, 0.0), (2.0, 0.0), (2.0, 0.5)])
def test_runs_with_either_backend_are_identical(alpha, uniform_share):
    def objective(keys):
        return np.abs(keys - 0.3).sum(axis=1)

    results = [BRKGA(50, population_size=30, seed=4, alpha=alpha, elite_bias=0.65,
                     backend=backend, uniform_mutant_fraction=uniform_share
                     ).run(objective, budget=600)
               for backend in (NumpyBackend(), CompiledBackend())]
    assert results[0].best_fitness == results[1].best_fitness
    np.testing.assert_array_equal(results[0].best_keys, results[1].best_keys)
    np.testing.assert_array_equal(results[0].history, results[1].history)


def test_compiled_breeding_rejects_rows_it_cannot_breed_from_or_into():
    coins = CoinThresholds(0.7)
    pool, two = np.zeros((4, 6)), np.array([0, 1])
    with pytest.raises(ValueError, match="children"):
        CompiledBackend().breed(1, pool, two, two, coins, np.zeros((6, 4)).T, None)
    with pytest.raises(ValueError, match="pool"):
        CompiledBackend().breed(1, pool.astype(np.float32), two, two, coins, np.zeros((2, 6)), None)
    with pytest.raises(ValueError, match="other_rows"):
        CompiledBackend().breed(1, pool, two, np.array([3, 4]), coins, np.zeros((2, 6)), None)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 8), st.integers(0, 30), st.integers(0, 2 ** 32 - 1),
       st.sampled_from([3, 1000]))
def test_compiled_promotion_matches_numpy(ne, m, seed, levels):
    # few fitness levels make ties between elites and newcomers common
    rng = np.random.default_rng(seed)
    home = 2 * ne
    pool = rng.random((home + m, 4))
    elite_rows = rng.permutation(home)[:ne]
    elite_fitness = rng.integers(0, levels, ne).astype(float)
    scores = rng.integers(0, levels, m).astype(float)
    newcomer_rows = np.arange(home, home + m)
    out = []
    for backend in (NumpyBackend(), CompiledBackend()):
        p, er, ef = pool.copy(), elite_rows.copy(), elite_fitness.copy()
        others = backend.promote(p, home, er, ef, newcomer_rows, scores.copy())
        out.append((p, er, ef, np.asarray(others)))
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)
