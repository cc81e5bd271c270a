"""The BRKGA loop: elites survive unevaluated, mutants are sampled, the rest are bred.

Every generation keeps the `elite` best chromosomes (their fitness is already
known, so they are never evaluated again), draws `mutant` new ones from the
per-gene Beta distributions, and fills the population with biased crossovers
of an elite and a non-elite parent. The run stops when the evaluation budget is
spent (the last generation is truncated so that the budget is never exceeded), or
earlier when an optional `should_stop()` says so between generations.

The population never moves as a whole: one pool holds a home area for the
elites and two newcomer blocks used in turn (children and mutants are written
into the idle one, which is then the contiguous batch to evaluate); the elites
and non-elites are lists of pool rows. Only a newcomer that enters the elite is
copied (home), a few rows per generation instead of re-sorting every row.

Breeding (children, and uniform mutants) and promotion to the elite are handed to a
backend (`brkga.backend`); breeding takes its random bits by position from one
counter-based stream per generation, so a compiled backend outside this package
(REGAL's `regal.breed`, on all cores) reproduces the numpy one bit for bit. Splitting
numpy's passes over two Python threads was built and measured here and did not pay
(each pass lasts 5-35 us, less than a thread wake-up on the 2-core VM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from brkga.backend import Backend, NumpyBackend
from brkga.crossover import CoinThresholds
from brkga.sampling import KeySampler
from brkga.streams import stream_key
from brkga.termination import Budget

EvaluateBatch = Callable[[np.ndarray], np.ndarray]
Callback = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Result:
    best_keys: np.ndarray   # [num_genes] keys of the best chromosome found
    best_fitness: float     # its fitness (lower is better)
    evaluations: int        # fitness evaluations used (never more than the budget)
    history: np.ndarray     # best fitness after each generation (generation 0 first)


def _per_gene(name: str, value, num_genes: int) -> np.ndarray:
    """A scalar or one value per gene, as a float64 vector of length `num_genes`."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number or one number per gene") from None
    if arr.ndim == 0:
        arr = np.full(num_genes, float(arr))
    if arr.shape != (num_genes,):
        raise ValueError(f"{name}: expected a number or one value per gene ({num_genes}), "
                         f"got shape {arr.shape}")
    return arr


def _fraction(name: str, value) -> float:
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {value}")
    return value


class BRKGA:
    """Biased Random-Key GA minimising `evaluate_batch` over keys in [0, 1]^num_genes.

    `elite_bias` (scalar or per gene) is the probability that a child inherits the
    elite parent's gene. `alpha`/`beta` (scalar or per gene) are the Beta
    parameters of the initial population and of mutants; a missing one counts as
    1.0, so both missing means uniform keys. `backend` breeds each generation's
    children (and uniform mutants) from a stream key and promotes the best to the
    elite (`brkga.backend`; default: the numpy reference); any backend gives the same
    run for the same seed. `uniform_mutant_fraction` of every generation's mutants (and of
    the sampled part of the first population) are uniform keys whatever `alpha`/`beta` say:
    a search with biased keys keeps some plain BRKGA exploration (0, the default, draws
    exactly the numbers it drew before the option existed).
    """

    def __init__(self, num_genes: int, population_size: int = 100, elite_fraction: float = 0.2,
                 mutant_fraction: float = 0.2, elite_bias=0.7, alpha=None, beta=None,
                 seed: int | None = 0, backend: Backend | None = None,
                 uniform_mutant_fraction: float = 0.0) -> None:
        if int(num_genes) != num_genes or num_genes < 1:
            raise ValueError(f"num_genes must be a positive integer, got {num_genes}")
        if int(population_size) != population_size or population_size < 3:
            raise ValueError(f"population_size must be an integer >= 3, got {population_size}")
        self.num_genes = int(num_genes)
        self.population_size = int(population_size)
        self.elite_fraction = _fraction("elite_fraction", elite_fraction)
        self.mutant_fraction = _fraction("mutant_fraction", mutant_fraction)
        if self.elite_fraction + self.mutant_fraction >= 1.0:
            raise ValueError("elite_fraction + mutant_fraction must be < 1, got "
                             f"{self.elite_fraction} + {self.mutant_fraction}")
        self.num_elites = max(1, int(round(self.elite_fraction * self.population_size)))
        self.num_mutants = max(1, int(round(self.mutant_fraction * self.population_size)))
        if self.num_elites + self.num_mutants >= self.population_size:
            raise ValueError(f"population_size {population_size} is too small: "
                             f"{self.num_elites} elites + {self.num_mutants} mutants leave "
                             "no room for offspring")

        bias = _per_gene("elite_bias", elite_bias, self.num_genes)
        if not ((bias >= 0.0) & (bias <= 1.0)).all():
            raise ValueError("elite_bias must lie in [0, 1]")
        # a scalar stays a scalar: comparing against it is cheaper than a row
        self.elite_bias = float(bias[0]) if np.ndim(elite_bias) == 0 else bias

        self.uniform_mutant_fraction = float(uniform_mutant_fraction)
        if not 0.0 <= self.uniform_mutant_fraction <= 1.0:
            raise ValueError(f"uniform_mutant_fraction must lie in [0, 1], got "
                             f"{uniform_mutant_fraction}")
        self.alpha = None if alpha is None else self._beta_param("alpha", alpha)
        self.beta = None if beta is None else self._beta_param("beta", beta)
        self.seed = seed
        self._sampler = KeySampler(self.num_genes, self.alpha, self.beta)
        self._coins = CoinThresholds(self.elite_bias)
        self.backend = NumpyBackend() if backend is None else backend

    def _beta_param(self, name: str, value) -> np.ndarray:
        arr = _per_gene(name, value, self.num_genes)
        if not (np.isfinite(arr) & (arr > 0)).all():
            raise ValueError(f"{name} must be finite and > 0 for every gene")
        return arr

    # -- pieces -------------------------------------------------------------
    def sample(self, rng: np.random.Generator, count: int, out=None) -> np.ndarray:
        return self._sampler.sample(rng, count, out=out)

    def _check_initial(self, initial) -> np.ndarray:
        if initial is None:
            return np.empty((0, self.num_genes))
        arr = np.asarray(initial, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.num_genes:
            raise ValueError(f"initial: expected chromosomes of {self.num_genes} genes, "
                             f"got shape {np.shape(initial)}")
        if len(arr) > self.population_size:
            raise ValueError(f"initial: {len(arr)} chromosomes exceed population_size "
                             f"{self.population_size}")
        if not ((arr >= 0.0) & (arr <= 1.0)).all():
            raise ValueError("initial: keys must lie in [0, 1]")
        return arr

    def _newcomers(self, rng: np.random.Generator, pool: np.ndarray, elite_rows: np.ndarray,
                   other_rows: np.ndarray, children: np.ndarray, mutants: np.ndarray) -> None:
        """Breeds `children` and draws `mutants`. One stream key feeds the children and
        uniform mutants (drawn only when there is one of them: generation 0 with Beta
        keys and no uniform share has neither); Beta mutants come from the run's generator
        afterwards. With Beta keys, the first `uniform_mutant_fraction` of the mutants
        are uniform."""
        uniform = self._sampler.uniform
        plain = len(mutants) if uniform else int(round(self.uniform_mutant_fraction * len(mutants)))
        if len(children) or uniform or plain:
            self.backend.breed(stream_key(rng), pool, elite_rows, other_rows, self._coins,
                               children, mutants[:plain] if uniform or plain else None)
        if not uniform:
            self.sample(rng, len(mutants) - plain, out=mutants[plain:])

    @staticmethod
    def _evaluate(evaluate_batch: EvaluateBatch, keys: np.ndarray) -> np.ndarray:
        fitness = np.asarray(evaluate_batch(keys), dtype=np.float64).reshape(-1)  # read only
        if fitness.shape != (len(keys),):
            raise ValueError(f"evaluate_batch returned {fitness.size} values for "
                             f"{len(keys)} chromosomes")
        if np.isnan(fitness.sum()):             # one pass; NaN (or inf - inf) seen there
            fitness = np.where(np.isnan(fitness), np.inf, fitness)
        return fitness

    # -- the loop -----------------------------------------------------------
    def run(self, evaluate_batch: EvaluateBatch, budget: int, initial=None,
            callback: Callback | None = None,
            should_stop: Callable[[], bool] | None = None) -> Result:
        """Minimises `evaluate_batch` with at most `budget` evaluations.

        `initial` ([m, num_genes] or [num_genes], m <= population_size) seeds the
        first population (warm start); the rest is sampled. `callback(generation,
        evaluations, best_fitness)` is called after every generation. `should_stop()`,
        asked before each generation after the first, ends the run early when it returns
        True (a wall-clock deadline: anytime search); without it the run is the same, draw
        for draw.
        The batch handed to `evaluate_batch` is a view of a buffer that the next
        generation overwrites: copy it if you keep it beyond the call.
        """
        if int(budget) != budget or budget < self.population_size:
            raise ValueError(f"budget must be an integer >= population_size "
                             f"({self.population_size}), got {budget}")
        seeds = self._check_initial(initial)
        rng = np.random.default_rng(self.seed)
        spent = Budget(int(budget))
        size, ne, nm = self.population_size, self.num_elites, self.num_mutants
        fresh = size - ne                   # newcomers per generation
        children = fresh - nm

        # The pool is [home (2 ne rows) | block A | block B]. Elites live at home; each
        # generation's newcomers are written into the block that did not get the previous
        # ones (the non-elites being bred from sit in the other block, or at home), and a
        # newcomer that enters the elite is copied into a free home row. Generation 0
        # is home's second half + block A.
        home = 2 * ne
        pool = np.empty((home + 2 * fresh, self.num_genes))
        blocks = (home, home + fresh)       # first row of A and of B
        first = pool[ne:ne + size]
        first[:len(seeds)] = seeds
        no_rows = np.empty(0, dtype=np.intp)
        self._newcomers(rng, pool, no_rows, no_rows, pool[:0], first[len(seeds):])
        spent.grant(size)
        scores = self._evaluate(evaluate_batch, first)
        elite_rows = np.arange(ne, home, dtype=np.intp)
        elite_fitness = scores[:ne].copy()
        other_rows = self.backend.promote(pool, home, elite_rows, elite_fitness,
                                          np.arange(home, home + fresh, dtype=np.intp),
                                          scores[ne:])
        history = [elite_fitness.min()]
        if callback is not None:
            callback(0, spent.used, float(history[-1]))

        generation = 0
        while not spent.exhausted and (should_stop is None or not should_stop()):
            generation += 1
            granted = spent.grant(fresh)
            start = blocks[generation % 2]
            batch = pool[start:start + fresh]
            self._newcomers(rng, pool, elite_rows, other_rows, batch[:children],
                            batch[children:])
            scores = self._evaluate(evaluate_batch, batch[:granted])
            other_rows = self.backend.promote(pool, home, elite_rows, elite_fitness,
                                              np.arange(start, start + granted, dtype=np.intp),
                                              scores)
            history.append(elite_fitness.min())
            if callback is not None:
                callback(generation, spent.used, float(history[-1]))

        best = int(np.argmin(elite_fitness))
        return Result(best_keys=pool[elite_rows[best]].copy(),
                      best_fitness=float(elite_fitness[best]),
                      evaluations=spent.used, history=np.asarray(history))
