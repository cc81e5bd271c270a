"""Biased uniform crossover between an elite and a non-elite parent.

At thousands of genes and dozens of children per generation the GA's own cost
is a few passes over a [children, genes] block, so every pass here is the
cheapest exact one numpy offers: one random byte per coin, taken eight at a
time from raw 64-bit words (`integers` costs 2.5x more, a float per coin 8x);
a bitwise select on the float bits, with the coin widened from int8 inside the
`and` (numpy's `where` and masked copies are branchy: 3-5x slower on random
masks); the other parent gathered straight into the child's row; and scratch
reused across generations (fresh multi-megabyte arrays cost page faults).
What remains is close to the memory traffic floor: read two parents, write one
child per row.
"""

from __future__ import annotations

import numpy as np


# Children are bred a chunk of rows at a time so that the elite-parent scratch
# stays small (~400 KB, cache-sized) instead of a copy of the whole block.
CHUNK_BYTES = 400_000


class CrossoverBuffers:
    """Scratch arrays for `biased_crossover`, allocated once per run."""

    def __init__(self, count: int, num_genes: int) -> None:
        self.shape = (count, num_genes)
        self.chunk = max(1, min(count, CHUNK_BYTES // (8 * num_genes)))
        self.elite_parent = np.empty((self.chunk, num_genes), dtype=np.int64)
        self.from_elite = np.empty(self.shape, dtype=bool)
        self.ties = np.empty(self.shape, dtype=bool)


class CoinThresholds:
    """Bernoulli(p) as random bytes: yes below `whole`, a second draw (yes w.p. `frac`) at it.

    With q = 256 p = h + f (h = min(floor(q), 255), 0 <= f <= 1): a byte below h
    says yes, above h says no, and only a byte equal to h (1 in 256) needs a
    second draw, yes with probability f. Total: h/256 + f/256 = p, exactly.
    `p` is a scalar or one probability per column.
    """

    def __init__(self, p) -> None:
        q = np.asarray(p, dtype=np.float64) * 256.0
        whole = np.minimum(np.floor(q), 255.0)
        self.frac = q - whole
        self.whole = whole.astype(np.uint8)
        self.scalar = self.whole.ndim == 0
        self.needs_ties = bool((self.frac > 0).any())


def random_bytes(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Uniform random bytes of `shape`, eight per raw 64-bit word (the cheapest source)."""
    size = shape[0] * shape[1]
    return rng.bit_generator.random_raw((size + 7) // 8).view(np.uint8)[:size].reshape(shape)


def _tie_winners(rng: np.random.Generator, byte: np.ndarray, coins: CoinThresholds,
                 scratch: np.ndarray) -> np.ndarray:
    """Flat positions whose byte hit the threshold and whose second draw says yes."""
    np.equal(byte, coins.whole, out=scratch)
    ties = np.flatnonzero(scratch)              # flat: 2-D nonzero is ~10x slower
    if not len(ties):
        return ties
    frac = coins.frac if coins.scalar else coins.frac[ties % byte.shape[1]]
    return ties[rng.random(len(ties)) < frac]


def bernoulli(rng: np.random.Generator, shape: tuple[int, int], p, out: np.ndarray,
              scratch: np.ndarray | None = None) -> np.ndarray:
    """Exact Bernoulli(p) coins (p scalar or one per column) from one random byte each.

    `out` (and `scratch`, reused for the tie search) are C-contiguous bool arrays of
    `shape`; see `CoinThresholds`.
    """
    coins = p if isinstance(p, CoinThresholds) else CoinThresholds(p)
    byte = random_bytes(rng, shape)
    np.less(byte, coins.whole, out=out)
    if coins.needs_ties:
        scratch = np.empty(shape, bool) if scratch is None else scratch
        out.reshape(-1)[_tie_winners(rng, byte, coins, scratch)] = True
    return out


def biased_crossover(rng: np.random.Generator, elites: np.ndarray, others: np.ndarray,
                     count: int, elite_bias, out: np.ndarray | None = None,
                     buffers: CrossoverBuffers | None = None) -> np.ndarray:
    """`count` children; each gene comes from the elite parent with probability `elite_bias`.

    Parents are drawn uniformly (with replacement) from `elites` and `others`
    (C-contiguous float64 rows). `elite_bias` is a scalar, one probability per
    gene (1.0 copies the elite gene, 0.0 the other one) or a `CoinThresholds`.
    Children are written into `out` ([count, num_genes], float64, C-contiguous)
    when given; genes are copied bit for bit.
    """
    elites = np.ascontiguousarray(elites, dtype=np.float64)
    others = np.ascontiguousarray(others, dtype=np.float64)
    num_genes = elites.shape[1]
    shape = (count, num_genes)
    if out is None:
        out = np.empty(shape)
    elif not out.flags.c_contiguous:            # the bit tricks below need flat rows
        out[...] = biased_crossover(rng, elites, others, count, elite_bias, buffers=buffers)
        return out
    if buffers is None or buffers.shape != shape:
        buffers = CrossoverBuffers(count, num_genes)
    coins = elite_bias if isinstance(elite_bias, CoinThresholds) else CoinThresholds(elite_bias)
    elite_rows = rng.integers(len(elites), size=count)
    other_rows = rng.integers(len(others), size=count)
    # select = all ones (int8 -1, sign-extended) where the coin says "elite", else 0
    select = bernoulli(rng, shape, coins, buffers.from_elite, buffers.ties).view(np.int8)
    np.negative(select, out=select)
    child, source = out.view(np.int64), others.view(np.int64)
    elite_source, elite = elites.view(np.int64), buffers.elite_parent
    for start in range(0, count, buffers.chunk):
        stop = min(count, start + buffers.chunk)
        kid, parent = child[start:stop], elite[:stop - start]
        np.take(source, other_rows[start:stop], axis=0, out=kid, mode="clip")
        np.take(elite_source, elite_rows[start:stop], axis=0, out=parent, mode="clip")
        # kid = other ^ ((elite ^ other) & select), on the float bits
        np.bitwise_xor(parent, kid, out=parent)
        np.bitwise_and(parent, select[start:stop], out=parent, casting="unsafe")
        np.bitwise_xor(kid, parent, out=kid)
    return out
