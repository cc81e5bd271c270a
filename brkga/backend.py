"""The GA's two heavy steps behind one interface: breeding a generation, promoting the best.

`BRKGA` keeps the algorithm (what is bred from what, when the budget ends); a backend
does the array work:

    breed(key, pool, elite_rows, other_rows, coins, children, mutants) -> None
        fills `children` ([c, genes]) with crossovers of an elite (a row of `pool` listed
        in `elite_rows`) and a non-elite (listed in `other_rows`) and, unless `mutants`
        is None (Beta mutants: the GA draws those itself), fills `mutants` ([m, genes])
        with uniform keys, taking every random bit from the words `Layout.of(c, genes)`
        assigns in the stream `key` (`brkga.streams`);
    promote(pool, home, elite_rows, elite_fitness, newcomer_rows, scores) -> other_rows
        makes the elite list the best of elites + newcomers (see `NumpyBackend.promote`).

`NumpyBackend` is the reference. A backend that follows the same rules (a compiled,
multi-threaded one outside this package, say) gives the same run bit for bit, so a
run's result depends on its seed only, not on which backend ran it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from brkga.crossover import CoinThresholds, CrossoverBuffers, biased_crossover, uniform_mutants


class Backend(Protocol):
    def breed(self, key, pool: np.ndarray, elite_rows: np.ndarray, other_rows: np.ndarray,
              coins: CoinThresholds, children: np.ndarray,
              mutants: np.ndarray | None) -> None: ...

    def promote(self, pool: np.ndarray, home: int, elite_rows: np.ndarray,
                elite_fitness: np.ndarray, newcomer_rows: np.ndarray,
                scores: np.ndarray) -> np.ndarray: ...


class NumpyBackend:
    """The reference backend (numpy passes; scratch kept from one generation to the next)."""

    def __init__(self) -> None:
        self._buffers: CrossoverBuffers | None = None

    def breed(self, key, pool: np.ndarray, elite_rows: np.ndarray, other_rows: np.ndarray,
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

    @staticmethod
    def promote(pool: np.ndarray, home: int, elite_rows: np.ndarray, elite_fitness: np.ndarray,
                newcomer_rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Makes `elite_rows` (and `elite_fitness`) the best of elites + newcomers, in place;
        returns the non-elites' rows of `pool`.

        Ranks by fitness, ties to the incumbent (elites first, then newcomers in order,
        as a stable sort of [elites, newcomers] would). The newcomers that enter, in rank
        order, are copied into the lowest home rows (pool[:home]) holding no elite, and
        take the places of the elites that leave (in list order) in the elite list; each
        such elite takes its newcomer's place in the non-elite list, and stays where it
        is until the next breeding is done. One row copy per entering newcomer:
        swapping rows between the elite and newcomer blocks took four.
        """
        ne = len(elite_rows)
        # Only a newcomer better than the worst elite can enter; ranking the elites with
        # just those (both in their original order) gives the stable sort's top ne.
        candidates = np.flatnonzero(scores < elite_fitness.max())
        if not len(candidates):
            return newcomer_rows                # nobody enters (ties go to the incumbents)
        joint = np.concatenate([elite_fitness, scores[candidates]])
        ranked = np.argsort(joint, kind="stable")[:ne].tolist()
        entering = [int(candidates[i - ne]) for i in ranked if i >= ne]
        staying = set(i for i in ranked if i < ne)
        leaving = [i for i in range(ne) if i not in staying]
        elites = elite_rows.tolist()
        taken = set(elites)
        free = [r for r in range(home) if r not in taken][:len(entering)]
        pool[free] = pool[newcomer_rows[entering]]
        others = newcomer_rows.copy()
        others[entering] = [elites[i] for i in leaving]
        elite_rows[leaving] = free
        elite_fitness[leaving] = scores[entering]
        return others
