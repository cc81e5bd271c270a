"""Random keys for the initial population and for mutants.

Random bits are the GA's dearest input, so keys are built from raw 64-bit words
(two 32-bit uniforms per word, `k * 2**-32`: exact multiples of 2**-32, ample
resolution for keys that are only ever compared). Per-gene Beta parameters take
a handful of distinct values (REGAL's policy picks them from a small menu), so
genes are grouped by their (alpha, beta) pair and each group is drawn with
scalar parameters, by an exact closed form where one exists:

    Beta(1, 1) = U          Beta(2, 1) = sqrt(U)        Beta(1, b) = 1 - Beta(b, 1)
    Beta(2, 2) = median(U_1, U_2, U_3), on the raw 32-bit integers
    Beta(a, b), integers = the a-th smallest of a + b - 1 uniforms
               = prod_{j=a}^{a+b-1} U_j**(1/j) = exp(sum_j log(U_j) / j)   (b factors;
                 1 - the same with a and b swapped when a < b: min(a, b) factors)
    Beta(a, b), a, b <= 1: Johnk's rejection (X = U**(1/a), Y = V**(1/b), keep X + Y <= 1);
               at a = b = 1/2 the powers are squares: (U, V) in the quarter disk (79% kept)

and numpy's `Generator.beta` otherwise. The product form is Renyi's: the largest
of m uniforms is U**(1/m), and given it the others are uniform below it. Each form
is exact (up to the 2**-32 grid of U); per variate on this machine (2-core EPYC VM):
log + scale + exp 1.9 ns against `power` 2.7 ns; Beta(5, 2) from two factors 7.7 ns
against 17 ns for Gamma(5) / (Gamma(5) + Gamma(2)) from products of uniforms; the
median of three 4.9 ns against 11 ns for two Gamma(2); the quarter disk 9.2 ns
against 15 ns for (1 - cos(pi U)) / 2; Johnk with logs 12.5 ns against 14.7 ns with
`power`. 20 mutants over REGAL's 8-pair menu at 3,000 genes: ~760 -> ~420 us
(median of 5 interleaved rounds; experiments/bench_brkga.py has the whole run).
"""

from __future__ import annotations

import math

import numpy as np

_TWO_M32 = 2.0 ** -32
_MAX_ORDER_FACTORS = 8  # integer (a, b) with min(a, b) up to this use the order-statistic form
_MAX_ORDER_RANK = 1000  # ... and max(a, b) up to this (past it numpy's beta is the safer bet)
_JOHNK_MIN = 0.05       # below this U**(1/a) underflows too often; numpy's beta is safer
# Past this many distinct (alpha, beta) pairs (per-gene parameters, e.g. Betas whose means
# follow a reference order), genes whose pair is shared by fewer than _SHARED_PAIR genes are
# drawn by one vectorised `Generator.beta` call instead of one call per pair.
_MANY_PAIRS = 64
_SHARED_PAIR = 32


def _uint32s(rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` random 32-bit integers, two per raw 64-bit word."""
    return rng.bit_generator.random_raw((size + 1) // 2).view(np.uint32)[:size]


def uniform(rng: np.random.Generator, size: int, out: np.ndarray | None = None,
            positive: bool = False) -> np.ndarray:
    """`size` uniforms `k * 2**-32` in [0, 1) (in (0, 1] when `positive`), two per raw word."""
    halves = _uint32s(rng, size)
    if out is None:
        out = np.empty(size)
    out = out.reshape(-1)
    np.copyto(out, halves)                      # a plain cast, then a float64 multiply:
    out *= _TWO_M32                             # 22 vs 28 us per 60,000 for uint32 * float
    if positive:
        out += _TWO_M32
    return out


def _median_of_three(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Beta(2, 2): the median of three uniforms, taken on their 32-bit integers."""
    size = len(out)
    ints = _uint32s(rng, 3 * size)
    a, b, c = ints[:size], ints[size:2 * size], ints[2 * size:3 * size]
    low = np.minimum(a, b)
    np.maximum(a, b, out=a)
    np.minimum(a, c, out=a)
    np.maximum(low, a, out=low)
    return np.multiply(low, _TWO_M32, out=out)


def _order_statistic(rng: np.random.Generator, a: int, b: int, out: np.ndarray) -> np.ndarray:
    """Beta(a, b) for integers: the a-th smallest of a + b - 1 uniforms (see the module doc)."""
    flip = a < b                                # draw the fewer factors, then mirror
    low, count = (b, a) if flip else (a, b)
    size = len(out)
    logs = uniform(rng, count * size, positive=True).reshape(count, size)
    np.log(logs, out=logs)
    if count == 1:
        np.multiply(logs[0], 1.0 / low, out=out)
    else:
        logs *= (1.0 / np.arange(low, low + count, dtype=np.float64))[:, None]
        np.add(logs[0], logs[1], out=out)
        for row in logs[2:]:
            out += row
    np.exp(out, out=out)
    if flip:
        np.subtract(1.0, out, out=out)
    return out


def _johnk(rng: np.random.Generator, a: float, b: float, out: np.ndarray) -> np.ndarray:
    """Johnk's exact rejection sampler for Beta(a, b) with a, b <= 1.

    X = U**(1/a), Y = V**(1/b), kept when X + Y <= 1: X / (X + Y) ~ Beta(a, b). Powers are
    taken as exp of logs; at a = b = 1/2 they are squares, i.e. (U, V) uniform in the
    quarter disk and U^2 / (U^2 + V^2) = cos^2 of a uniform angle.
    """
    accept = math.exp(math.lgamma(a + 1) + math.lgamma(b + 1) - math.lgamma(a + b + 1))
    squares = a == 0.5 and b == 0.5
    inverse = np.array([[1.0 / a], [1.0 / b]])
    filled = 0
    while filled < len(out):
        want = len(out) - filled
        batch = int(want / accept * 1.05) + 16
        xy = uniform(rng, 2 * batch, positive=True).reshape(2, batch)
        if squares:
            np.square(xy, out=xy)
        else:
            np.log(xy, out=xy)
            xy *= inverse
            np.exp(xy, out=xy)
        x, y = xy
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
    elif a == 2.0 and b == 1.0:
        uniform(rng, size, out=u)
        np.sqrt(u, out=u)
    elif a == 2.0 and b == 2.0:
        _median_of_three(rng, u)
    elif (a == int(a) and b == int(b) and min(a, b) <= _MAX_ORDER_FACTORS
          and max(a, b) <= _MAX_ORDER_RANK):
        _order_statistic(rng, int(a), int(b), u)
    elif b == 1.0 or a == 1.0:                  # U**(1/a); 1 - U**(1/b)
        uniform(rng, size, out=u, positive=True)
        np.log(u, out=u)
        u *= 1.0 / (a if b == 1.0 else b)
        np.exp(u, out=u)
        if a == 1.0:
            np.subtract(1.0, u, out=u)
    elif _JOHNK_MIN <= a <= 1.0 and _JOHNK_MIN <= b <= 1.0:
        _johnk(rng, a, b, u)
    else:
        u[...] = rng.beta(a, b, size=size)
    return u if out is None else out


class KeySampler:
    """Draws chromosomes whose gene j ~ Beta(alpha[j], beta[j]) (uniform when both are None).

    Built once per GA: the grouping of genes by (alpha, beta) pair is done here,
    so every call only draws. An all-(1, 1) parameter vector draws exactly the
    random numbers of the uniform case. With more than `_MANY_PAIRS` distinct pairs,
    genes of rare pairs are drawn in one vectorised numpy call (a different, equally exact
    stream than the grouped forms; runs with few pairs draw what they always drew).
    """

    def __init__(self, num_genes: int, alpha: np.ndarray | None = None,
                 beta: np.ndarray | None = None, scatter: bool = True) -> None:
        self.num_genes = int(num_genes)
        a = np.ones(num_genes) if alpha is None else np.broadcast_to(alpha, (num_genes,))
        b = np.ones(num_genes) if beta is None else np.broadcast_to(beta, (num_genes,))
        pairs, group = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        group = group.reshape(-1)
        # many distinct pairs: rare pairs' genes are "scattered" (one vectorised draw),
        # the others keep the grouped closed forms in a sampler of their own
        self._scattered = None
        if len(pairs) > _MANY_PAIRS and scatter:
            shared = np.bincount(group, minlength=len(pairs)) >= _SHARED_PAIR
            rare = np.flatnonzero(~shared[group])
            common = np.flatnonzero(shared[group])
            self._scattered = (rare, np.ascontiguousarray(a[rare], np.float64),
                               np.ascontiguousarray(b[rare], np.float64), common,
                               KeySampler(len(common), a[common], b[common], scatter=False)
                               if len(common) else None)
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
        if self._scattered is not None:
            rare, a, b, common, grouped = self._scattered
            if len(common):
                out[:, common] = grouped.sample(rng, count)
            out[:, rare] = rng.beta(a, b, size=(count, len(rare)))
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
        # every index is in range: 'clip' skips numpy's bounds check (60 -> 35 us here)
        np.take(grouped, self._gather_index(count), out=out, mode="clip")
        return out


def sample_keys(rng: np.random.Generator, count: int, num_genes: int,
                alpha: np.ndarray | None = None, beta: np.ndarray | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """`count` chromosomes; gene j ~ Beta(alpha[j], beta[j]), or U[0, 1) when both are None.

    Written into `out` ([count, num_genes], C-contiguous float64) when given.
    A GA draws repeatedly with one `KeySampler` instead (it groups genes once).
    """
    return KeySampler(num_genes, alpha, beta).sample(rng, count, out=out)
