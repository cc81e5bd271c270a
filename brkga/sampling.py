"""Random keys for the initial population and for mutants.

Random bits are the GA's dearest input, so keys are built from raw 64-bit words
(two 32-bit uniforms per word, `k * 2**-32`: exact multiples of 2**-32, ample
resolution for keys that are only ever compared). Per-gene Beta parameters take
a handful of distinct values (REGAL's policy picks them from a small menu), so
genes are grouped by their (alpha, beta) pair and each group is drawn with
scalar parameters, by an exact closed form where one exists:

    Beta(1, 1) = U                  Beta(a, 1) = U**(1/a)      Beta(1, b) = 1 - U**(1/b)
    Beta(1/2, 1/2) = sin^2(pi U / 2) = (1 - cos(pi U)) / 2
    Beta(a, b), integer a, b: Ga / (Ga + Gb), Ga = -log(U_1 ... U_a) ~ Gamma(a)
    Beta(a, b), a, b < 1: Johnk's rejection (X = U**(1/a), Y = V**(1/b), keep X + Y <= 1)

and numpy's `Generator.beta` otherwise.
"""

from __future__ import annotations

import math

import numpy as np

_TWO_M32 = 2.0 ** -32
_MAX_GAMMA_SUM = 12     # integer a + b up to this use the product-of-uniforms form
_JOHNK_MIN = 0.05       # below this U**(1/a) underflows too often; numpy's beta is safer


def uniform(rng: np.random.Generator, size: int, out: np.ndarray | None = None,
            positive: bool = False) -> np.ndarray:
    """`size` uniforms `k * 2**-32` in [0, 1) (in (0, 1] when `positive`), two per raw word."""
    words = rng.bit_generator.random_raw((size + 1) // 2)
    halves = words.view(np.uint32)[:size]
    if out is None:
        out = np.empty(size)
    out = out.reshape(-1)
    np.multiply(halves, _TWO_M32, out=out)
    if positive:
        out += _TWO_M32
    return out


def _minus_gamma(rng: np.random.Generator, shape: int, out: np.ndarray,
                 scratch: np.ndarray) -> np.ndarray:
    """-Gamma(shape) for integer `shape`, as log(U_1 ... U_shape) with U in (0, 1]."""
    uniform(rng, len(out), out=out, positive=True)
    for _ in range(shape - 1):
        out *= uniform(rng, len(out), out=scratch, positive=True)
    return np.log(out, out=out)


def _johnk(rng: np.random.Generator, a: float, b: float, out: np.ndarray) -> np.ndarray:
    """Johnk's exact rejection sampler for Beta(a, b) with a, b <= 1."""
    accept = math.exp(math.lgamma(a + 1) + math.lgamma(b + 1) - math.lgamma(a + b + 1))
    filled = 0
    while filled < len(out):
        want = len(out) - filled
        batch = int(want / accept * 1.05) + 16
        x = uniform(rng, batch, positive=True)
        y = uniform(rng, batch, positive=True)
        np.power(x, 1.0 / a, out=x)
        np.power(y, 1.0 / b, out=y)
        y += x
        keep = np.flatnonzero(y <= 1.0)[:want]
        np.divide(x[keep], y[keep], out=out[filled:filled + len(keep)])
        filled += len(keep)
    return out


def beta_draws(rng: np.random.Generator, size: int, a: float, b: float,
               out: np.ndarray | None = None) -> np.ndarray:
    """`size` exact Beta(a, b) variates (float64, into `out` when given), cheapest method."""
    u = np.empty(size) if out is None else out.reshape(-1)
    if a == 1.0 and b == 1.0:
        uniform(rng, size, out=u)
    elif b == 1.0:
        uniform(rng, size, out=u)
        np.sqrt(u, out=u) if a == 2.0 else np.power(u, 1.0 / a, out=u)
    elif a == 1.0:
        uniform(rng, size, out=u)
        np.power(u, 1.0 / b, out=u)
        np.subtract(1.0, u, out=u)
    elif a == 0.5 and b == 0.5:                 # sin^2(pi U / 2) = (1 - cos(pi U)) / 2
        uniform(rng, size, out=u)
        u *= np.pi
        np.cos(u, out=u)
        u *= -0.5
        u += 0.5
    elif a == int(a) and b == int(b) and a + b <= _MAX_GAMMA_SUM:
        scratch, other = np.empty(size), np.empty(size)
        _minus_gamma(rng, int(a), u, scratch)
        _minus_gamma(rng, int(b), other, scratch)
        other += u
        np.divide(u, other, out=u)
    elif _JOHNK_MIN <= a <= 1.0 and _JOHNK_MIN <= b <= 1.0:
        _johnk(rng, a, b, u)
    else:
        u[...] = rng.beta(a, b, size=size)
    return u if out is None else out


class KeySampler:
    """Draws chromosomes whose gene j ~ Beta(alpha[j], beta[j]) (uniform when both are None).

    Built once per GA: the grouping of genes by (alpha, beta) pair is done here,
    so every call only draws. An all-(1, 1) parameter vector draws exactly the
    random numbers of the uniform case.
    """

    def __init__(self, num_genes: int, alpha: np.ndarray | None = None,
                 beta: np.ndarray | None = None) -> None:
        self.num_genes = int(num_genes)
        a = np.ones(num_genes) if alpha is None else np.broadcast_to(alpha, (num_genes,))
        b = np.ones(num_genes) if beta is None else np.broadcast_to(beta, (num_genes,))
        pairs, group = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        group = group.reshape(-1)
        self.uniform = len(pairs) == 1 and tuple(pairs[0]) == (1.0, 1.0)
        self.pairs = [(float(p[0]), float(p[1])) for p in pairs]
        # Group g's draws for `count` chromosomes are one flat run of count * width[g]
        # values, laid [chromosome, rank of the gene in its group]; one gather puts
        # every value in its place: flat index = first[j] + row * width[group[j]].
        self.width = np.bincount(group, minlength=len(pairs))
        order = np.argsort(group, kind="stable")
        rank = np.empty(num_genes, dtype=np.intp)
        rank[order] = np.arange(num_genes) - np.repeat(np.cumsum(self.width) - self.width,
                                                       self.width)
        self.group, self.rank = group, rank
        self._index: dict[int, np.ndarray] = {}
        self._scratch = np.empty(0)

    def _gather_index(self, count: int) -> np.ndarray:
        if count not in self._index:
            starts = count * (np.cumsum(self.width) - self.width)
            first = starts[self.group] + self.rank
            self._index[count] = first + np.arange(count)[:, None] * self.width[self.group]
        return self._index[count]

    def sample(self, rng: np.random.Generator, count: int,
               out: np.ndarray | None = None) -> np.ndarray:
        """`count` chromosomes, written into `out` ([count, num_genes] C-contiguous float64)."""
        if out is None:
            out = np.empty((count, self.num_genes))
        elif not out.flags.c_contiguous:        # draws are written through a flat view
            out[...] = self.sample(rng, count)
            return out
        if count == 0:
            return out
        if self.uniform:
            uniform(rng, out.size, out=out)
            return out
        if len(self.pairs) == 1:
            beta_draws(rng, out.size, *self.pairs[0], out=out)
            return out
        if len(self._scratch) < out.size:
            self._scratch = np.empty(out.size)
        grouped, start = self._scratch[:out.size], 0
        for (a, b), width in zip(self.pairs, self.width.tolist()):
            beta_draws(rng, count * width, a, b, out=grouped[start:start + count * width])
            start += count * width
        np.take(grouped, self._gather_index(count), out=out)
        return out


def sample_keys(rng: np.random.Generator, count: int, num_genes: int,
                alpha: np.ndarray | None = None, beta: np.ndarray | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """`count` chromosomes; gene j ~ Beta(alpha[j], beta[j]), or U[0, 1) when both are None.

    Written into `out` ([count, num_genes], C-contiguous float64) when given.
    A GA draws repeatedly with one `KeySampler` instead (it groups genes once).
    """
    return KeySampler(num_genes, alpha, beta).sample(rng, count, out=out)
