"""Distributions as data plus pure functions (TensorFlow-free), in the style of Acme's ppo networks.

Two layers:

- the policy's **action distribution**: per op and head, a categorical over a menu, given
  by logits `[n, K]`. `categorical_sample` / `categorical_greedy` draw in numpy (the TF
  `Policy` and the numpy `NumpyPolicy` both call them, so one seed gives one action);
  `categorical_log_prob`, `categorical_entropy` and `mixture_log_likelihood` take an
  `ArrayOps` so the same formula runs on numpy arrays (`NUMPY`) and, differentiably, on
  TensorFlow tensors (`regal.policy.policy.TF_OPS`);
- the **key distribution** BRKGA searches with: `BetaParams` (alpha, beta arrays of one
  shape) and `KeyDistribution` (named blocks: affinity `[n, d]` in slot space, priority
  `[n]`, transfer `[n]`, elite bias `[n]`), with `beta_log_prob`, `beta_entropy`,
  `beta_sample` (brkga's exact sampler) and `argmax_probabilities` (the chance that each
  slot wins the decoder's argmax).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from scipy import special

__all__ = ["ArrayOps", "NUMPY", "log_softmax", "categorical_sample", "categorical_greedy",
           "categorical_log_prob", "categorical_entropy", "mixture_log_likelihood",
           "BetaParams", "KeyDistribution", "beta_log_prob", "beta_entropy", "beta_sample",
           "argmax_probabilities", "chromosome_parameters"]


# ---------------------------------------------------------------------------
# the action distribution: one categorical per (op, head)


class ArrayOps(NamedTuple):
    """The few array operations the categorical formulas need, for one array library."""

    log_softmax: Callable     # (logits [n, K]) -> [n, K]
    take_rows: Callable       # (values [n, K], index [n]) -> values[i, index[i]]  [n]
    sum: Callable             # (x) -> scalar
    exp: Callable
    logsumexp_rows: Callable  # (x [n, K]) -> [n]
    constant: Callable        # numpy array -> this library's array (float)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return (top + np.log(np.exp(x - top).sum(axis=1, keepdims=True)))[:, 0]


NUMPY = ArrayOps(log_softmax=log_softmax,
                 take_rows=lambda v, i: v[np.arange(len(i)), np.asarray(i)],
                 sum=lambda x: float(np.sum(x)), exp=np.exp, logsumexp_rows=_logsumexp_rows,
                 constant=lambda a: np.asarray(a, np.float64))


def categorical_sample(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One menu index per row, by inverting each row's CDF with one `rng.random(n)`."""
    cdf = np.cumsum(np.exp(log_softmax(logits)), axis=1)
    u = rng.random(len(logits)) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), logits.shape[1] - 1)


def categorical_greedy(logits: np.ndarray) -> np.ndarray:
    """Each row's most likely index (ties: the lowest)."""
    return np.argmax(logits, axis=1)


def categorical_log_prob(logits, index, ops: ArrayOps = NUMPY):
    """Sum over rows of log p(index[row])."""
    return ops.sum(ops.take_rows(ops.log_softmax(logits), index))


def categorical_entropy(logits, ops: ArrayOps = NUMPY):
    """Sum over rows of each row's entropy (nats)."""
    logp = ops.log_softmax(logits)
    return -ops.sum(ops.exp(logp) * logp)


def mixture_log_likelihood(logits, component_log_likelihood, ops: ArrayOps = NUMPY):
    """Sum over rows of log sum_k p(k) L_k: the likelihood of an observed outcome when each
    menu entry k would produce it with likelihood `exp(component_log_likelihood[row, k])`
    (a numpy table; -inf where entry k cannot produce it)."""
    table = ops.constant(component_log_likelihood)
    return ops.sum(ops.logsumexp_rows(ops.log_softmax(logits) + table))


# ---------------------------------------------------------------------------
# the key distribution: Beta per gene


class BetaParams(NamedTuple):
    """Beta(alpha, beta) per entry; both arrays of one shape, > 0."""

    alpha: np.ndarray
    beta: np.ndarray

    @classmethod
    def uniform(cls, shape) -> "BetaParams":
        return cls(np.ones(shape), np.ones(shape))


class KeyDistribution(NamedTuple):
    """What BRKGA draws keys from, per op; affinity in slot space (slot 0 = reference device)."""

    affinity: BetaParams     # [n, d]
    priority: BetaParams     # [n]
    transfer: BetaParams     # [n]
    elite_bias: np.ndarray   # [n] probability that a child takes the elite parent's gene

    @property
    def num_nodes(self) -> int:
        return len(self.elite_bias)


def beta_log_prob(params: BetaParams, x) -> np.ndarray:
    """log density of Beta(alpha, beta) at x (elementwise; x in (0, 1))."""
    a, b, x = np.asarray(params.alpha), np.asarray(params.beta), np.asarray(x, np.float64)
    return (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - special.betaln(a, b)


def beta_entropy(params: BetaParams) -> np.ndarray:
    """Differential entropy of each Beta (nats; 0 for the uniform)."""
    a, b = np.asarray(params.alpha), np.asarray(params.beta)
    return (special.betaln(a, b) - (a - 1) * special.digamma(a) - (b - 1) * special.digamma(b)
            + (a + b - 2) * special.digamma(a + b))


def beta_sample(params: BetaParams, rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` draws of every entry (`[count, *shape]`), by brkga's exact key sampler."""
    from brkga.sampling import sample_keys

    a = np.asarray(params.alpha, np.float64)
    flat = sample_keys(rng, count, a.size, a.ravel(), np.asarray(params.beta, np.float64).ravel())
    return flat.reshape(count, *a.shape)


def argmax_probabilities(params: BetaParams, points: int = 4001) -> np.ndarray:
    """`[..., d]`: probability that slot j holds the largest of the d independent keys,
    P(argmax = j) = integral of f_j(x) prod_{i != j} F_i(x) dx (trapezoid on a grid dense
    where the densities are steep, rows renormalised; ties have probability zero)."""
    from scipy import stats

    a, b = np.asarray(params.alpha, np.float64), np.asarray(params.beta, np.float64)
    u = np.linspace(0.0, 1.0, points)
    x = 0.5 - 0.5 * np.cos(np.pi * u)           # denser near 0 and 1
    dist = stats.beta(a[..., None], b[..., None])
    pdf = np.nan_to_num(dist.pdf(x), posinf=0.0)
    cdf = dist.cdf(x)                           # [..., d, points]
    # prod over i != j of F_i: exclusive prefix times exclusive suffix products (no division)
    ones = np.ones_like(cdf[..., :1, :])
    prefix = np.cumprod(np.concatenate([ones, cdf[..., :-1, :]], axis=-2), axis=-2)
    suffix = np.cumprod(np.concatenate([ones, cdf[..., :0:-1, :]], axis=-2), axis=-2)[..., ::-1, :]
    prob = np.trapezoid(pdf * prefix * suffix, x, axis=-1)
    return prob / prob.sum(axis=-1, keepdims=True)


def chromosome_parameters(keys: KeyDistribution) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alpha, beta, elite_bias) per gene in chromosome layout (slot space): affinity `[n, d]`
    row-major, then priority, then transfer; each op's elite bias repeated over its genes."""
    d = keys.affinity.alpha.shape[1]
    alpha = np.concatenate([keys.affinity.alpha.ravel(), keys.priority.alpha,
                            keys.transfer.alpha])
    beta = np.concatenate([keys.affinity.beta.ravel(), keys.priority.beta, keys.transfer.beta])
    bias = np.asarray(keys.elite_bias, np.float64)
    elite = np.concatenate([np.repeat(bias, d), bias, bias])
    return alpha.astype(np.float64), beta.astype(np.float64), elite
