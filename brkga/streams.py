"""Counter-based random words: word i of the stream `key` is a pure function of (key, i).

A generation's newcomers (the coins and parents of its children, its uniform mutants)
take their random bits by position instead of in sequence, so any implementation --
this numpy one, or a compiled and multi-threaded one outside the package -- breeds
the same bits in any order and on any number of threads. The function is SplitMix64
(Steele, Lea and Flood, 2014): word i is its output after i + 1 steps from the state
`key`, mix(key + (i + 1) * GOLDEN) mod 2**64, a stream that passes BigCrush.

`Layout` says which words of a generation's stream feed what; every backend follows it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)   # the SplitMix64 increment (2**64 / golden ratio)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
_30, _27, _31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a uint64 array, in place (and returned)."""
    z ^= z >> _30
    z *= MIX1
    z ^= z >> _27
    z *= MIX2
    z ^= z >> _31
    return z


def counters(first: int, count: int) -> np.ndarray:
    """(i + 1) * GOLDEN mod 2**64 for i in first .. first + count - 1 (add a key, then `mix`)."""
    return (np.arange(first + 1, first + count + 1, dtype=np.uint64) * GOLDEN)


def words(key, positions) -> np.ndarray:
    """Words at `positions` (any shape of non-negative integers) of the stream `key`."""
    z = (np.asarray(positions, dtype=np.uint64) + np.uint64(1)) * GOLDEN
    z += np.uint64(key)
    return mix(z)


def stream_key(rng: np.random.Generator) -> np.uint64:
    """A fresh stream key drawn from `rng` (one raw 64-bit word)."""
    return np.uint64(rng.bit_generator.random_raw())


class Layout(NamedTuple):
    """Where a generation's words go, for `children` crossovers and `mutants` of `genes` genes.

    Child i's coins are the 16-bit quarters of words coin + i * coin_words + [0, coin_words)
    (quarter j is gene j's, low quarter first); its parents come from word parent + i (high
    half: the elite, low half: the other, each scaled as floor(half * count / 2**32)); a coin whose
    value equals its threshold draws again from word tie + i * genes + j. Mutant m's keys
    are the 32-bit halves of words mutant + m * mutant_words + [0, mutant_words) (gene j
    is half j, low half first), times 2**-32.
    """

    genes: int
    coin_words: int
    mutant_words: int
    coin: int
    parent: int
    tie: int
    mutant: int

    @classmethod
    def of(cls, children: int, genes: int) -> "Layout":
        coin_words, mutant_words = (genes + 3) // 4, (genes + 1) // 2
        parent = children * coin_words
        tie = parent + children
        mutant = tie + children * genes
        return cls(genes, coin_words, mutant_words, 0, parent, tie, mutant)
