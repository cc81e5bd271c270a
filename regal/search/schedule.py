"""The schedule of a `regal` run: how its budget is split between BRKGA and the climbs.

One value (`Schedule`): BRKGA searches with `1 - climb_share` of the budget (after the
reference heuristics), then climbs race on the rest: one from BRKGA's best and
`fresh_climbs` afresh from the heuristic starts, each run to `race[0]` of the climbs' budget,
the better half on to `race[1]`, and so on; the one that leads then spends what is left
(successive halving). Why these numbers: docs/design.md §6 and the budget-schedule tables
in experiments/results/ (at 5,000 evaluations BRKGA finds good basins but climbs them slowly,
the peak-directed moves climb fast, and which basin ends best varies from run to run).
`seeded-brkga` and `regal` share it (`regal.search.pipeline`); the methods take its fields
as the options `polish_share`, `fresh_climbs` and `race` (names their records are keyed by).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["Schedule", "DEFAULT_SCHEDULE", "check_share", "check_race", "split_budget",
           "phase_stops"]


def check_share(value, name: str, of: str) -> float:
    """`value` as a share in [0, 1) (a real number, not a bool); ValueError naming `name`."""
    number = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
    if not (number and 0.0 <= value < 1.0):
        raise ValueError(f"{name}: expected a share of {of} in [0, 1), got {value!r}")
    return float(value)


def check_race(fresh_climbs, race) -> tuple[int, tuple[float, ...]]:
    """(`fresh_climbs`, `race`) checked: a count >= 0 and increasing shares in (0, 1) whose
    successive halving of `fresh_climbs + 1` climbs allots no more than the whole polish;
    ValueError naming the field."""
    if isinstance(fresh_climbs, bool) or not isinstance(fresh_climbs, (int, np.integer)) \
            or fresh_climbs < 0:
        raise ValueError(f"fresh_climbs: expected a count >= 0, got {fresh_climbs!r}")
    try:
        shares = tuple(float(share) for share in race)
    except (TypeError, ValueError):
        raise ValueError(f"race: expected a sequence of shares, got {race!r}") from None
    if fresh_climbs and not shares:
        raise ValueError("race: fresh climbs need at least one round")
    if any(not 0.0 < share < 1.0 for share in shares) or \
            any(b <= a for a, b in zip(shares, shares[1:])):
        raise ValueError(f"race: expected increasing shares in (0, 1), got {race!r}")
    alive, allotted, before = int(fresh_climbs) + 1, 0.0, 0.0
    for share in shares:
        allotted, before, alive = allotted + alive * (share - before), share, (alive + 1) // 2
    if allotted > 1.0 + 1e-9:
        raise ValueError(f"race: rounds {race!r} give {int(fresh_climbs) + 1} climbs "
                         f"{allotted:.3g} times the polish budget")
    return int(fresh_climbs), shares


@dataclass(frozen=True)
class Schedule:
    """`climb_share` of the budget (and of a time limit) to the climbs, after BRKGA; the
    climbs afresh from the heuristic starts that race the one from BRKGA's best; the race's
    rounds, as shares of the climbs' budget (3 climbs to 7.5%, the better 2 to 22.5%, the
    leader spends the rest: 70% of it in all)."""

    climb_share: float = 0.9
    fresh_climbs: int = 2
    race: tuple = (0.075, 0.225)

    def __post_init__(self) -> None:
        object.__setattr__(self, "climb_share",
                           check_share(self.climb_share, "polish_share", "the budget"))
        fresh, race = check_race(self.fresh_climbs, self.race)
        object.__setattr__(self, "fresh_climbs", fresh)
        object.__setattr__(self, "race", race)


DEFAULT_SCHEDULE = Schedule()


def split_budget(budget: int, share: float = DEFAULT_SCHEDULE.climb_share, keep: int = 0) -> tuple[int, int]:
    """(BRKGA's evaluations, local search's) out of `budget`: `share` of it to the polish, but
    never so much that BRKGA has fewer than `keep`, and none when that is under 8 (too few for
    local search to do more than score its starts)."""
    share = check_share(share, "polish_share", "the budget")
    polish_budget = min(int(round(int(budget) * float(share))), int(budget) - int(keep))
    if polish_budget < 8:
        return int(budget), 0
    return int(budget) - polish_budget, polish_budget


def phase_stops(time_limit: float | None, share: float, asked=None, start: float | None = None):
    """`should_stop` hooks of the BRKGA phase and of the polish, and what stopped the run.

    Under `time_limit` seconds (from `start`, a `time.perf_counter()`; default now) BRKGA
    stops at `1 - share` of it and the polish at the deadline, so both phases run whatever
    the budget (`share` 0: BRKGA gets all of it). `asked()`, a caller's own hook, stops
    either phase too. The third value is a function that says what ended the run:
    "time_limit", "should_stop" or "budget"."""
    if time_limit is None:
        return asked, asked, lambda: "should_stop" if asked is not None and asked() else "budget"
    start = time.perf_counter() if start is None else float(start)
    deadline = start + float(time_limit)
    switch = start + float(time_limit) * (1.0 - share)
    stopped: list[str] = []

    def until(end: float, last: bool):
        def should_stop() -> bool:
            if asked is not None and asked():
                stopped.append("should_stop")
                return True
            if time.perf_counter() >= end:
                if last:
                    stopped.append("time_limit")
                return True
            return False
        return should_stop

    first = until(switch, share == 0)
    return first, until(deadline, True), lambda: stopped[0] if stopped else "budget"
