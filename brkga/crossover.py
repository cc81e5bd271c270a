"""Biased uniform crossover between an elite and a non-elite parent.

At thousands of genes and dozens of children per generation the GA's own cost
is a few full passes over a [children, genes] block, so every pass here is the
cheapest exact one numpy offers: one random byte per coin (instead of a float),
a bitwise select (instead of a masked copy), and buffers reused across
generations (fresh multi-megabyte arrays cost more in page faults than the
arithmetic on them).
"""

from __future__ import annotations

import numpy as np


class CrossoverBuffers:
    """Scratch arrays for `biased_crossover`, allocated once per run."""

    def __init__(self, count: int, num_genes: int) -> None:
        self.shape = (count, num_genes)
        self.elite_parent = np.empty(self.shape)
        self.from_elite = np.empty(self.shape, dtype=bool)
        self.select = np.empty(self.shape, dtype=np.uint64)


def bernoulli(rng: np.random.Generator, shape: tuple[int, int], p, out: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(p) coins (p scalar or one per column) from one random byte each.

    `out` is a C-contiguous bool array of `shape`.

    With q = 256 p = h + f (h = min(floor(q), 255), 0 <= f <= 1): a byte below h
    says yes, above h says no, and only a byte equal to h (1 in 256) needs a
    second draw, yes with probability f. Total: h/256 + f/256 = p.
    """
    q = np.asarray(p, dtype=np.float64) * 256.0
    whole = np.minimum(np.floor(q), 255.0)
    frac = q - whole
    whole = whole.astype(np.uint8)
    byte = rng.integers(0, 256, size=shape, dtype=np.uint8)
    np.less(byte, whole, out=out)
    ties = np.flatnonzero(byte == whole)  # flat: 2-D nonzero is ~10x slower
    if len(ties):
        frac = np.broadcast_to(frac, (shape[1],))[ties % shape[1]]
        out.reshape(-1)[ties] = rng.random(len(ties)) < frac
    return out


def biased_crossover(rng: np.random.Generator, elites: np.ndarray, others: np.ndarray,
                     count: int, elite_bias: np.ndarray | float,
                     out: np.ndarray | None = None,
                     buffers: CrossoverBuffers | None = None) -> np.ndarray:
    """`count` children; each gene comes from the elite parent with probability `elite_bias`.

    Parents are drawn uniformly (with replacement) from `elites` and `others`.
    `elite_bias` is a scalar or one probability per gene (1.0 copies the elite
    gene, 0.0 the other one). Children are written into `out` ([count,
    num_genes], float64, C-contiguous) when given; genes are copied bit for bit.
    """
    num_genes = elites.shape[1]
    if out is None:
        out = np.empty((count, num_genes))
    if buffers is None or buffers.shape != (count, num_genes):
        buffers = CrossoverBuffers(count, num_genes)
    np.take(elites, rng.integers(len(elites), size=count), axis=0,
            out=buffers.elite_parent, mode="clip")
    np.take(others, rng.integers(len(others), size=count), axis=0, out=out, mode="clip")
    bernoulli(rng, (count, num_genes), elite_bias, out=buffers.from_elite)
    # out = other ^ ((elite ^ other) & all-ones-where-elite), on the float bits
    select, child, elite = buffers.select, out.view(np.uint64), buffers.elite_parent.view(np.uint64)
    np.copyto(select, buffers.from_elite, casting="unsafe")
    np.negative(select, out=select)
    np.bitwise_xor(elite, child, out=elite)
    np.bitwise_and(elite, select, out=elite)
    np.bitwise_xor(child, elite, out=child)
    return out
