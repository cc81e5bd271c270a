"""Biased uniform crossover between an elite and a non-elite parent.

At thousands of genes and dozens of children per generation the GA's own cost
is a few passes over a [children, genes] block, so every pass here is the
cheapest exact one numpy offers: 16 random bits per coin, four per 64-bit word
of the generation's counter-based stream (`brkga.streams`: the same bits whatever
code breeds them, so a compiled backend elsewhere can reproduce these children
bit for bit); a bitwise select on the float bits, with the coin widened from int8
inside the `and` (numpy's `where` and masked copies are branchy: 3-5x slower on
random masks); the other parent gathered straight into the child's row; and
scratch reused across generations (fresh multi-megabyte arrays cost page faults).
What remains is close to the memory traffic floor: read two parents, write one
child per row.
"""

from __future__ import annotations

import numpy as np

from brkga.streams import Layout, counters, mix, stream_key, words

_TWO_M53 = 2.0 ** -53
_LOW32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)

# Children are bred a chunk of rows at a time so that the elite-parent scratch
# stays small (~400 KB, cache-sized) instead of a copy of the whole block.
CHUNK_BYTES = 400_000


class CrossoverBuffers:
    """Scratch arrays for `biased_crossover`, allocated once per run."""

    def __init__(self, count: int, num_genes: int) -> None:
        self.shape = (count, num_genes)
        self.layout = Layout.of(count, num_genes)
        self.chunk = max(1, min(count, CHUNK_BYTES // (8 * num_genes)))
        self.elite_parent = np.empty((self.chunk, num_genes), dtype=np.int64)
        self.from_elite = np.empty(self.shape, dtype=bool)
        self.ties = np.empty(self.shape, dtype=bool)
        self.coin_counters = counters(0, count * self.layout.coin_words)
        self.coin_words = np.empty_like(self.coin_counters)


class CoinThresholds:
    """Bernoulli(p) as random 16-bit values: yes below `whole`, a second draw (yes w.p.
    `frac`) at it.

    With q = 2**16 p = h + f (h = min(floor(q), 2**16 - 1), 0 <= f <= 1): a value below
    h says yes, above h says no, and only a value equal to h (1 in 65,536) needs a
    second draw, yes with probability f. Total: h/2**16 + f/2**16 = p, exactly. (16 bits
    rather than 8: with 8, a 3,000-gene child has ~12 such ties to settle, which cost a
    compiled backend a third of its breeding time; with 16, one child in ~20 has one.)
    `p` is a scalar or one probability per column.
    """

    def __init__(self, p) -> None:
        q = np.asarray(p, dtype=np.float64) * 65536.0
        whole = np.minimum(np.floor(q), 65535.0)
        self.frac = q - whole
        self.whole = whole.astype(np.uint16)
        self.scalar = self.whole.ndim == 0
        self.needs_ties = bool((self.frac > 0).any())


def _key(key) -> np.uint64:
    """A stream key, or a fresh one drawn from a numpy Generator."""
    return stream_key(key) if isinstance(key, np.random.Generator) else np.uint64(key)


def coin_values(key, layout: Layout, count: int, buffers: CrossoverBuffers | None = None
                ) -> np.ndarray:
    """The coins' 16-bit values for `count` rows ([count, genes] uint16, a view of the words)."""
    size = count * layout.coin_words
    if buffers is not None and len(buffers.coin_counters) == size:   # `words`, from cache
        z = mix(np.add(buffers.coin_counters, _key(key), out=buffers.coin_words))
    else:
        z = words(_key(key), np.arange(layout.coin, layout.coin + size, dtype=np.uint64))
    return z.reshape(count, layout.coin_words).view(np.uint16)[:, :layout.genes]


def _tie_winners(key, layout: Layout, value: np.ndarray, coins: CoinThresholds,
                 scratch: np.ndarray) -> np.ndarray:
    """Flat positions whose value hit the threshold and whose second draw says yes."""
    np.equal(value, coins.whole, out=scratch)
    ties = np.flatnonzero(scratch)              # flat: 2-D nonzero is ~10x slower
    if not len(ties):
        return ties
    frac = coins.frac if coins.scalar else coins.frac[ties % layout.genes]
    second = words(key, layout.tie + ties.astype(np.uint64)) >> np.uint64(11)
    return ties[second * _TWO_M53 < frac]


def bernoulli(key, shape: tuple[int, int], p, out: np.ndarray,
              scratch: np.ndarray | None = None, buffers: CrossoverBuffers | None = None
              ) -> np.ndarray:
    """Exact Bernoulli(p) coins (p scalar or one per column) from 16 random bits each.

    `key` is a stream key (or a Generator to draw one from); the bits are the coin and
    tie words of `Layout.of(*shape)`. `out` (and `scratch`, reused for the tie search)
    are C-contiguous bool arrays of `shape`; see `CoinThresholds`.
    """
    key = _key(key)
    coins = p if isinstance(p, CoinThresholds) else CoinThresholds(p)
    layout = buffers.layout if buffers is not None else Layout.of(*shape)
    value = coin_values(key, layout, shape[0], buffers)
    np.less(value, coins.whole, out=out)
    if coins.needs_ties:
        scratch = np.empty(shape, bool) if scratch is None else scratch
        out.reshape(-1)[_tie_winners(key, layout, value, coins, scratch)] = True
    return out


def parents(key, layout: Layout, count: int, num_elites: int, num_others: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Each child's elite and other parent rows, uniform (to 2**-32) with replacement."""
    w = words(key, np.arange(layout.parent, layout.parent + count, dtype=np.uint64))
    elite = ((w >> _32) * np.uint64(num_elites)) >> _32
    other = ((w & _LOW32) * np.uint64(num_others)) >> _32
    return elite.astype(np.intp), other.astype(np.intp)


def uniform_mutants(key, layout: Layout, out: np.ndarray) -> np.ndarray:
    """Uniform keys k * 2**-32 for the rows of `out` ([m, genes], C-contiguous float64)."""
    m = len(out)
    z = words(_key(key), np.arange(layout.mutant, layout.mutant + m * layout.mutant_words,
                                   dtype=np.uint64))
    halves = z.reshape(m, layout.mutant_words).view(np.uint32)[:, :layout.genes]
    np.copyto(out, halves)
    out *= 2.0 ** -32
    return out


def biased_crossover(key, elites: np.ndarray, others: np.ndarray,
                     count: int, elite_bias, out: np.ndarray | None = None,
                     buffers: CrossoverBuffers | None = None, elite_rows=None,
                     other_rows=None) -> np.ndarray:
    """`count` children; each gene comes from the elite parent with probability `elite_bias`.

    `key` is the generation's stream key (or a Generator to draw one from); the coins
    and parents are the words `Layout.of(count, num_genes)` assigns them. Parents are
    drawn uniformly (with replacement) from `elites` and `others` (C-contiguous float64
    rows). `elite_bias` is a scalar, one probability per gene (1.0 copies the elite
    gene, 0.0 the other one) or a `CoinThresholds`. Children are written into `out`
    ([count, num_genes], float64, C-contiguous) when given; genes are copied bit for bit.
    With `elite_rows` (`other_rows`), the parents are the rows of `elites` (`others`)
    those lists name, drawn uniformly from the lists.
    """
    elites = np.ascontiguousarray(elites, dtype=np.float64)
    others = np.ascontiguousarray(others, dtype=np.float64)
    num_genes = elites.shape[1]
    shape = (count, num_genes)
    if out is None:
        out = np.empty(shape)
    elif not out.flags.c_contiguous:            # the bit tricks below need flat rows
        out[...] = biased_crossover(key, elites, others, count, elite_bias, buffers=buffers,
                                    elite_rows=elite_rows, other_rows=other_rows)
        return out
    if buffers is None or buffers.shape != shape:
        buffers = CrossoverBuffers(count, num_genes)
    coins = elite_bias if isinstance(elite_bias, CoinThresholds) else CoinThresholds(elite_bias)
    key = _key(key)
    pick_elite, pick_other = parents(
        key, buffers.layout, count, len(elites if elite_rows is None else elite_rows),
        len(others if other_rows is None else other_rows))
    if elite_rows is not None:
        pick_elite = np.asarray(elite_rows)[pick_elite]
    if other_rows is not None:
        pick_other = np.asarray(other_rows)[pick_other]
    # select = all ones (int8 -1, sign-extended) where the coin says "elite", else 0
    select = bernoulli(key, shape, coins, buffers.from_elite, buffers.ties,
                       buffers).view(np.int8)
    np.negative(select, out=select)
    child, source = out.view(np.int64), others.view(np.int64)
    elite_source, elite = elites.view(np.int64), buffers.elite_parent
    for start in range(0, count, buffers.chunk):
        stop = min(count, start + buffers.chunk)
        kid, parent = child[start:stop], elite[:stop - start]
        np.take(source, pick_other[start:stop], axis=0, out=kid, mode="clip")
        np.take(elite_source, pick_elite[start:stop], axis=0, out=parent, mode="clip")
        # kid = other ^ ((elite ^ other) & select), on the float bits
        np.bitwise_xor(parent, kid, out=parent)
        np.bitwise_and(parent, select[start:stop], out=parent, casting="unsafe")
        np.bitwise_xor(kid, parent, out=kid)
    return out
