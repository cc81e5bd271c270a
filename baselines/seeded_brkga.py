"""Seeded BRKGA: plain uniform BRKGA whose first population holds the reference heuristics.

Why: the `regal` method puts its reference candidates (balanced split, m-topo, gp-dfs; see
`regal.policy.reference`) into BRKGA's first population. This baseline does exactly the same
seeding with plain uniform keys and BRKGA's default settings, so a table that has both
isolates what the policy's distributions add beyond the seeding. The reference's model
evaluations count in the budget, as they do for `regal`.
"""

from __future__ import annotations

import dataclasses

from regal.optimizers import Problem, Solution

__all__ = ["solve"]


def solve(problem: Problem, budget: int, seed: int = 0, *, progress=None, should_stop=None,
          **brkga_options) -> Solution:
    """BRKGA (uniform keys) from a first population seeded with the reference candidates."""
    from regal.policy.reference import reference_for
    from regal.regal_method import search

    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")
    reference = reference_for(problem.graph, problem.devices, problem.objective)
    found = search(problem, int(budget), seed, initial=reference.seeds,
                   spent=reference.evaluations, progress=progress, should_stop=should_stop,
                   **brkga_options)
    extra = dict(found.extra, reference_source=reference.source,
                 reference_value=reference.value)
    return dataclasses.replace(found, method="seeded-brkga", seed=seed, extra=extra)
