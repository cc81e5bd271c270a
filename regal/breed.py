"""BRKGA's heavy steps compiled: the children, uniform mutants and elite promotions of
`brkga.NumpyBackend`, bit for bit, breeding in one multi-threaded numba call.

`brkga` stays numpy-only and problem-agnostic; this module plugs into it as a backend
(`BRKGA(..., backend=CompiledBackend())`). Both take every random bit from the positions
`brkga.streams.Layout` assigns in the generation's counter-based stream, so the result of
a run depends on its seed only. Here each thread breeds whole rows: it fills a row's coin
words (SplitMix64 of the counters), then selects every gene with a branch-free bitwise
blend on the float bits (vectorised by LLVM), noting whether any coin's 16-bit value
equals its threshold; only then (one child in ~20 at 3,000 genes) a second pass settles
those coins with a second word. Promotion is compiled too: right after a simulator
batch the interpreter's and numpy's code is cold, and its ~20 small numpy calls took
40-70 us a generation there (~17 us when warm).
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from brkga.crossover import CoinThresholds
from brkga.streams import GOLDEN, MIX1, MIX2, Layout

_U = np.uint64
_TWO_M32 = 2.0 ** -32
_TWO_M53 = 2.0 ** -53


@njit(cache=True, inline="always")
def _word(key, position):
    """Word `position` of the stream `key` (brkga.streams: SplitMix64)."""
    z = key + (position + _U(1)) * GOLDEN
    z = (z ^ (z >> _U(30))) * MIX1
    z = (z ^ (z >> _U(27))) * MIX2
    return z ^ (z >> _U(31))


@njit(cache=True, inline="always")
def _fill(buf, key, first, count):
    for i in range(count):
        buf[i] = _word(key, first + _U(i))


@njit(cache=True, inline="always")
def _child(i, key, lay, pool, elite_rows, other_rows, whole, frac, ties, out, buf):
    genes, coin_words, coin, parent, tie = lay[0], lay[1], lay[3], lay[4], lay[5]
    _fill(buf, key, _U(coin + i * coin_words), coin_words)
    value = buf.view(np.uint16)
    w = _word(key, _U(parent + i))
    elite = pool[elite_rows[(w >> _U(32)) * _U(elite_rows.shape[0]) >> _U(32)]].view(np.int64)
    other = pool[other_rows[(w & _U(0xFFFFFFFF)) * _U(other_rows.shape[0]) >> _U(32)]].view(
        np.int64)
    kid = out[i].view(np.int64)
    tied = False
    for j in range(genes):
        select = -np.int64(value[j] < whole[j])
        tied |= value[j] == whole[j]
        o = other[j]
        kid[j] = o ^ ((o ^ elite[j]) & select)
    if ties and tied:   # one child in ~20 at 3,000 genes
        for j in range(genes):
            if value[j] == whole[j]:
                second = _word(key, _U(tie + i * genes + j)) >> _U(11)
                if np.float64(second) * _TWO_M53 < frac[j]:
                    kid[j] = elite[j]


@njit(cache=True, inline="always")
def _mutant(m, key, lay, out, buf):
    genes, mutant_words, first = lay[0], lay[2], lay[6]
    _fill(buf, key, _U(first + m * mutant_words), mutant_words)
    halves = buf.view(np.uint32)
    row = out[m]
    for j in range(genes):
        row[j] = np.float64(halves[j]) * _TWO_M32


@njit(cache=True, inline="always")
def _in_range(rows, size):
    """Whether every row number lies in 0..size-1 (numba indexes without bounds checks)."""
    for r in rows:
        if r < 0 or r >= size:
            return False
    return True


@njit(cache=True, parallel=True)
def _breed(key, lay, pool, elite_rows, other_rows, whole, frac, ties, children, mutants,
           chunks):
    """Part p of `chunks` (one per thread) breeds children p, p + chunks, ... and mutants
    likewise, so every thread gets its share of both kinds (a mutant costs ~1/3 of a child).
    Returns 0, or 1 (2) when a child would need an elite (other) parent row outside the pool."""
    if children.shape[0] > 0:
        if elite_rows.shape[0] == 0 or not _in_range(elite_rows, pool.shape[0]):
            return 1
        if other_rows.shape[0] == 0 or not _in_range(other_rows, pool.shape[0]):
            return 2
    for part in prange(chunks):
        buf = np.empty(max(lay[1], lay[2]), np.uint64)
        for i in range(part, children.shape[0], chunks):
            _child(i, key, lay, pool, elite_rows, other_rows, whole, frac, ties, children, buf)
        for m in range(part, mutants.shape[0], chunks):
            _mutant(m, key, lay, mutants, buf)
    return 0


@njit(cache=True)
def _promote(pool, home, elite_rows, elite_fitness, newcomer_rows, scores):
    """brkga.NumpyBackend.promote, step for step (a stable merge sort ranks the same way)."""
    ne, m = elite_rows.shape[0], scores.shape[0]
    worst = elite_fitness.max()
    candidates = np.empty(m, np.int64)
    c = 0
    for i in range(m):
        if scores[i] < worst:
            candidates[c] = i
            c += 1
    if c == 0:
        return newcomer_rows
    joint = np.empty(ne + c)
    joint[:ne] = elite_fitness
    for i in range(c):
        joint[ne + i] = scores[candidates[i]]
    ranked = np.argsort(joint, kind="mergesort")[:ne]
    staying = np.zeros(ne, np.bool_)
    entering = np.empty(ne, np.int64)
    count = 0
    for i in ranked:
        if i >= ne:
            entering[count] = candidates[i - ne]
            count += 1
        else:
            staying[i] = True
    taken = np.zeros(home, np.bool_)
    for r in elite_rows:
        taken[r] = True
    others = newcomer_rows.copy()
    leave, free = 0, 0
    for q in range(count):
        while staying[leave]:
            leave += 1
        while taken[free]:
            free += 1
        source = newcomer_rows[entering[q]]
        pool[free, :] = pool[source, :]
        others[entering[q]] = elite_rows[leave]
        elite_rows[leave] = free
        elite_fitness[leave] = scores[entering[q]]
        leave += 1
        free += 1
    return others


class CompiledBackend:
    """A `brkga` backend (see brkga.backend): breeding on numba's threads, promotion compiled."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        self._coins: CoinThresholds | None = None
        self._per_gene: tuple | None = None
        self._layout: tuple | None = None

    def _thresholds(self, coins: CoinThresholds, genes: int) -> tuple:
        """Coin thresholds per gene (16-bit values, tie fractions), kept while `coins` is
        the same object."""
        if self._coins is not coins or self._per_gene[0].shape != (genes,):
            whole = np.ascontiguousarray(np.broadcast_to(coins.whole, (genes,)), np.uint16)
            frac = np.ascontiguousarray(np.broadcast_to(coins.frac, (genes,)), np.float64)
            self._coins, self._per_gene = coins, (whole, frac)
        return self._per_gene

    def breed(self, key, pool: np.ndarray, elite_rows: np.ndarray, other_rows: np.ndarray,
              coins: CoinThresholds, children: np.ndarray, mutants: np.ndarray | None) -> None:
        genes = children.shape[1]
        for name, rows in (("pool", pool), ("children", children), ("mutants", mutants)):
            if rows is not None and (rows.dtype != np.float64 or not rows.flags.c_contiguous
                                     or rows.ndim != 2 or rows.shape[1] != genes):
                raise ValueError(f"{name}: expected C-contiguous float64 rows of {genes} genes")
        elite_rows = np.asarray(elite_rows, dtype=np.int64).reshape(-1)
        other_rows = np.asarray(other_rows, dtype=np.int64).reshape(-1)
        whole, frac = self._thresholds(coins, genes)
        if self._layout is None or self._layout[0] != children.shape:
            self._layout = (children.shape,
                            np.array(Layout.of(len(children), genes), dtype=np.int64))
        lay = self._layout[1]
        if mutants is None:
            mutants = children[:0]
        rows = len(children) + len(mutants)
        threads = get_num_threads() if self.threads is None else self.threads
        bad = _breed(np.uint64(key), lay, pool, elite_rows, other_rows, whole, frac,
                     coins.needs_ties, children, mutants, max(1, min(rows, threads)))
        if bad:
            name = "elite_rows" if bad == 1 else "other_rows"
            raise ValueError(f"{name}: expected row numbers of the pool (0..{len(pool) - 1})")

    @staticmethod
    def promote(pool: np.ndarray, home: int, elite_rows: np.ndarray, elite_fitness: np.ndarray,
                newcomer_rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """brkga.NumpyBackend.promote, compiled (the same elite and non-elite lists)."""
        return _promote(pool, home, elite_rows, elite_fitness, newcomer_rows, scores)
