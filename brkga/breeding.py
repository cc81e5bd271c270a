"""A generation's newcomers from one stream key: children by biased crossover, uniform mutants.

`BRKGA` hands this step to a breeder: any callable

    breeder(key, pool, elite_rows, other_rows, coins, children, mutants) -> None

that fills `children` ([c, genes]) with crossovers of an elite (a row of `pool` listed in
`elite_rows`) and a non-elite (listed in `other_rows`) and, unless
`mutants` is None (Beta mutants: the GA draws those itself), fills `mutants` ([m, genes])
with uniform keys, taking every random bit from the words `Layout.of(c, genes)` assigns
in the stream `key` (`brkga.streams`). `NumpyBreeder` is the reference; a breeder that
follows the same layout (a compiled, multi-threaded one, say) gives the same children
bit for bit, so a run's result depends on its seed only, not on which breeder ran it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from brkga.crossover import CoinThresholds, CrossoverBuffers, biased_crossover, uniform_mutants

Breeder = Callable[[np.uint64, np.ndarray, np.ndarray, np.ndarray, CoinThresholds,
                    np.ndarray, "np.ndarray | None"], None]


class NumpyBreeder:
    """The reference breeder (numpy passes; scratch kept from one generation to the next)."""

    def __init__(self) -> None:
        self._buffers: CrossoverBuffers | None = None

    def __call__(self, key, pool: np.ndarray, elite_rows: np.ndarray, other_rows: np.ndarray,
                 coins: CoinThresholds, children: np.ndarray, mutants: np.ndarray | None) -> None:
        shape = children.shape
        if self._buffers is None or self._buffers.shape != shape:
            self._buffers = CrossoverBuffers(*shape)
        if shape[0]:
            biased_crossover(key, pool, pool, shape[0], coins, out=children,
                             buffers=self._buffers, elite_rows=elite_rows,
                             other_rows=other_rows)
        if mutants is not None:
            uniform_mutants(key, self._buffers.layout, mutants)
