"""Random keys for the initial population and for mutants."""

from __future__ import annotations

import numpy as np


def sample_keys(rng: np.random.Generator, count: int, num_genes: int,
                alpha: np.ndarray | None = None, beta: np.ndarray | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """`count` chromosomes; gene j ~ Beta(alpha[j], beta[j]), or U[0, 1) when both are None.

    One vectorized draw for the whole block: numpy broadcasts the per-gene
    parameters over the rows, so there is no loop per individual or gene.
    Written into `out` ([count, num_genes], C-contiguous float64) when given.
    """
    if out is None:
        out = np.empty((count, num_genes))
    if alpha is None and beta is None:
        rng.random(out=out)
        return out
    a = np.ones(num_genes) if alpha is None else alpha
    b = np.ones(num_genes) if beta is None else beta
    out[...] = rng.beta(a, b, size=(count, num_genes))
    return out
