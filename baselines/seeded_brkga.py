"""Seeded BRKGA: plain uniform BRKGA whose first population holds the reference heuristics.

Why: the `regal` method puts its reference candidates (balanced split, m-topo, gp-dfs; see
`regal.policy.reference`) into BRKGA's first population. This baseline does exactly the same
seeding with plain uniform keys and BRKGA's default settings, so a table that has both
isolates what the policy's distributions add beyond the seeding. Like `regal`, it leaves
the last `regal.regal_method.POLISH_SHARE` of the budget to local search: a climb from BRKGA's
best and `FRESH_CLIMBS` climbs afresh from the heuristic starts, raced by `RACE`.
The reference's model evaluations count in the budget, as they do for `regal`.
"""

from __future__ import annotations

import dataclasses
import time

from regal.optimizers import Problem, Solution

__all__ = ["solve"]


def solve(problem: Problem, budget: int, seed: int = 0, *, polish_share: float | None = None,
          fresh_climbs: int | None = None, race=None, time_limit: float | None = None, progress=None,
          should_stop=None, **brkga_options) -> Solution:
    """BRKGA (uniform keys) from a first population seeded with the reference candidates,
    then local search with `polish_share` of the budget and of `time_limit`, `fresh_climbs`
    climbs from the heuristic starts racing the one from BRKGA's best by `race` (defaults:
    regal's; `regal.regal_method.two_phase`)."""
    from regal.policy.reference import reference_for
    from regal.regal_method import FRESH_CLIMBS, POLISH_SHARE, RACE, two_phase

    started = time.perf_counter()
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")
    reference = reference_for(problem.graph, problem.devices, problem.objective)
    params = dict(initial=reference.seeds, spent=reference.evaluations)
    found = two_phase(problem, int(budget), seed, params,
                      polish_share=POLISH_SHARE if polish_share is None else polish_share,
                      fresh_climbs=FRESH_CLIMBS if fresh_climbs is None else fresh_climbs,
                      race=RACE if race is None else race,
                      time_limit=time_limit, started=started, progress=progress,
                      should_stop=should_stop, **brkga_options)
    extra = dict(found.extra, reference_source=reference.source,
                 reference_value=reference.value)
    return dataclasses.replace(found, method="seeded-brkga", seed=seed, extra=extra)
