"""A problem-agnostic Biased Random-Key Genetic Algorithm (numpy only).

The problem is a function `evaluate_batch(keys[k, num_genes]) -> fitness[k]`
(lower is better); the algorithm is `BRKGA`; the termination is a budget of
fitness evaluations, or an optional `should_stop()` hook asked between generations.
Nothing here knows about graphs: REGAL's decoder lives in `regal.decode`, and its
policy only chooses `alpha`, `beta` and `elite_bias`.
"""

from brkga.algorithm import BRKGA, Result
from brkga.backend import Backend, NumpyBackend
from brkga.crossover import CrossoverBuffers, biased_crossover
from brkga.sampling import KeySampler, sample_keys
from brkga.termination import Budget

__all__ = ["BRKGA", "Result", "Backend", "Budget", "CrossoverBuffers", "KeySampler",
           "NumpyBackend", "biased_crossover", "sample_keys"]
