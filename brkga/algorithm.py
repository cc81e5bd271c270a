"""The BRKGA loop: elites survive unevaluated, mutants are sampled, the rest are bred.

Every generation keeps the `elite` best chromosomes (their fitness is already
known, so they are never evaluated again), draws `mutant` new ones from the
per-gene Beta distributions, and fills the population with biased crossovers
of an elite and a non-elite parent. The run stops when the evaluation budget is
spent; the last generation is truncated so that the budget is never exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from brkga.crossover import CrossoverBuffers, biased_crossover
from brkga.sampling import sample_keys
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
    1.0, so both missing means uniform keys.
    """

    def __init__(self, num_genes: int, population_size: int = 100, elite_fraction: float = 0.2,
                 mutant_fraction: float = 0.2, elite_bias=0.7, alpha=None, beta=None,
                 seed: int | None = 0) -> None:
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

        self.alpha = None if alpha is None else self._beta_param("alpha", alpha)
        self.beta = None if beta is None else self._beta_param("beta", beta)
        self.seed = seed

    def _beta_param(self, name: str, value) -> np.ndarray:
        arr = _per_gene(name, value, self.num_genes)
        if not (np.isfinite(arr) & (arr > 0)).all():
            raise ValueError(f"{name} must be finite and > 0 for every gene")
        return arr

    # -- pieces -------------------------------------------------------------
    def sample(self, rng: np.random.Generator, count: int, out=None) -> np.ndarray:
        return sample_keys(rng, count, self.num_genes, self.alpha, self.beta, out=out)

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

    @staticmethod
    def _evaluate(evaluate_batch: EvaluateBatch, keys: np.ndarray) -> np.ndarray:
        fitness = np.asarray(evaluate_batch(keys), dtype=np.float64).reshape(-1)
        if fitness.shape != (len(keys),):
            raise ValueError(f"evaluate_batch returned {fitness.size} values for "
                             f"{len(keys)} chromosomes")
        return np.where(np.isnan(fitness), np.inf, fitness)

    # -- the loop -----------------------------------------------------------
    def run(self, evaluate_batch: EvaluateBatch, budget: int, initial=None,
            callback: Callback | None = None) -> Result:
        """Minimises `evaluate_batch` with at most `budget` evaluations.

        `initial` ([m, num_genes] or [num_genes], m <= population_size) seeds the
        first population (warm start); the rest is sampled. `callback(generation,
        evaluations, best_fitness)` is called after every generation.
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
        children = size - ne - nm

        # Two buffers: the sorted population, and the next one being filled in place.
        population = np.empty((size, self.num_genes))
        scratch = np.empty_like(population)
        buffers = CrossoverBuffers(children, self.num_genes)
        scratch[:len(seeds)] = seeds
        self.sample(rng, size - len(seeds), out=scratch[len(seeds):])
        spent.grant(size)
        fitness = self._evaluate(evaluate_batch, scratch)
        order = np.argsort(fitness, kind="stable")
        np.take(scratch, order, axis=0, out=population, mode="clip")
        fitness = fitness[order]
        history = [fitness[0]]
        if callback is not None:
            callback(0, spent.used, float(fitness[0]))

        generation = 0
        while not spent.exhausted:
            generation += 1
            granted = spent.grant(size - ne)
            # scratch = [elites | children | mutants]; only the first ne + granted rows count
            scratch[:ne] = population[:ne]
            biased_crossover(rng, population[:ne], population[ne:], children,
                             self.elite_bias, out=scratch[ne:ne + children], buffers=buffers)
            self.sample(rng, nm, out=scratch[ne + children:])
            live = ne + granted
            scores = self._evaluate(evaluate_batch, scratch[ne:live])
            fitness = np.concatenate([fitness[:ne], scores])
            order = np.argsort(fitness, kind="stable")
            np.take(scratch[:live], order, axis=0, out=population[:live], mode="clip")
            fitness = fitness[order]
            if live < size:  # truncated last generation: the population shrinks
                population = population[:live]
            history.append(fitness[0])
            if callback is not None:
                callback(generation, spent.used, float(fitness[0]))

        return Result(best_keys=population[0].copy(), best_fitness=float(fitness[0]),
                      evaluations=spent.used, history=np.asarray(history))
