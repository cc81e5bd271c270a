"""REGAL's search pipeline: BRKGA (seeded, and steered by the policy's keys when there is one),
then climbs from its best and afresh from the heuristic starts, raced (`Schedule`).

`run_pipeline` runs it for given BRKGA settings: `regal` passes the policy's
(`regal.regal_method`), `seeded-brkga` (`solve_seeded_brkga`, here) plain uniform keys with
the same seeded first population, so a table that has both isolates what the policy adds.
Training rollouts run it without the fresh climbs (they do not depend on the policy).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from regal.decode import decode
from regal.optimizers import Problem, Solution, check_budget, score, solve_brkga
from regal.search.climb import Climb
from regal.search.schedule import (DEFAULT_SCHEDULE, Schedule, check_race, phase_stops,
                                   split_budget)

__all__ = ["race_climbs", "FIT_RESERVE", "FIT_STALL", "finish_fitting", "fit_first", "brkga_phase",
           "run_pipeline", "solve_seeded_brkga", "schedule_of"]


def _best_of(*solutions: Solution | None) -> Solution:
    """The best of `solutions` (None skipped); the earliest wins a tie."""
    best = None
    for solution in solutions:
        if solution is not None and (best is None or solution.value < best.value):
            best = solution
    return best


def race_climbs(problem: Problem, found: Solution, budget: int, seed: int, *,
                fresh_climbs: int = 0, race=(), time_left: float | None = None,
                progress: Callable[[int, float], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                climb_options: dict | None = None, give_up_unfit: bool = False) -> Solution:
    """`found` improved by climbs with `budget` more evaluations; never worse than `found`.

    Without `fresh_climbs` one climb from `found` spends it all. Otherwise climbs race by
    successive halving: the climb from `found` (seed; no heuristic starts, `found` already
    beats them) and `fresh_climbs` climbs afresh from the heuristic starts (seeds seed + 1,
    ...) each run to `race[0]` of the budget, the better half (rounded up; ties to the
    earlier climb) go on to `race[1]`, and so on; the last one left spends the rest. Climbs
    are paused and resumed (`regal.search.climb.Climb`), never restarted. Why: which
    basin ends best varies from run to run, one climb's early lead predicts it, and the
    winner gets most of the budget (experiments/results/budget_schedules.md). With
    `time_left`, the seconds until the deadline that `should_stop` enforces, each climb's
    turn ends by its share of the time left once the climbs are built (their heuristic starts
    take time of their own) too. The answer counts every evaluation; `extra` keeps
    `found`'s and adds the climbs' (keys named `polish_*`, as records store them).
    `climb_options` go to every `Climb` (a move ranker: `rank_moves`, `draw`).

    With `give_up_unfit` (a step-time problem under memory limits) the race stops after its
    first round when none of the climbs going on has found a placement within the limits, and
    leaves the rest of `budget` unspent (`extra["race_gave_up"]`) for `finish_fitting`. Why: a
    climb on the step time stretched by the overflow gives up overflow only slowly, and on
    graphs of 10,000 ops at 4 devices a fit from the race's misfit takes 1,800-5,400
    peak-memory evaluations, more than the fit reserve holds (experiments/large_steps.py).
    Where a climb fits after the first round the race runs as without it, and so does a race
    of one climb (no fresh climbs, or no rounds)."""
    fresh_climbs, race = check_race(fresh_climbs, race)
    climb_options = dict(climb_options or {})
    start = time.perf_counter()
    spent, budget = int(found.evaluations), int(budget)
    # fresh climbs pay for their starts: under 8 evaluations each they are not worth it
    if fresh_climbs and int(budget * race[0]) < 8:
        fresh_climbs, race = 0, ()
    deadline = None if time_left is None else start + float(time_left)
    best_so_far = [float(found.value)]
    climbs: list = []
    raced_from = start         # the turns share the time left once every climb is built

    def used_by_all() -> int:
        return sum(int(climb.used) for climb in climbs)

    def stop_at(share: float):
        """`should_stop` for a turn that ends at `share` of the budget, and of the time left
        after the climbs were built (their heuristic starts take time of their own)."""
        end = None if deadline is None else raced_from + (deadline - raced_from) * share

        def stop() -> bool:
            if should_stop is not None and should_stop():
                return True
            return end is not None and time.perf_counter() >= end
        return stop

    def reporting(climb):
        if progress is None:
            return None
        others = used_by_all() - int(climb.used)

        def report(used: int, best: float) -> None:
            best_so_far[0] = min(best_so_far[0], float(best))
            progress(spent + others + used, best_so_far[0])
        return report

    first = budget if not fresh_climbs else max(1, int(budget * race[0]))
    climbs.append(Climb(problem, first, seed, heuristics=(), initial=[found], **climb_options))
    known: dict = {}    # the seed-free heuristics' answers, run once for every fresh climb
    for k in range(fresh_climbs):
        if should_stop is not None and should_stop():
            break
        climbs.append(Climb(problem, first, seed + 1 + k, should_stop=should_stop,
                            known=known, **climb_options))
    raced_from = time.perf_counter()
    alive = list(range(len(climbs)))
    allotted, before, gave_up = 0.0, 0.0, False
    for round_, share in enumerate(race if len(climbs) > 1 else ()):
        target = max(1, int(budget * share))   # floors: the rounds never overspend
        for rank, i in enumerate(alive):     # each climb's turn ends by its share of the time
            climbs[i].run(target, reporting(climbs[i]),
                          stop_at(allotted + (rank + 1) * (share - before)))
        allotted, before = allotted + len(alive) * (share - before), share
        alive = sorted(alive, key=lambda i: (climbs[i].best_key, i))[:(len(alive) + 1) // 2]
        if give_up_unfit and round_ == 0 \
                and not any(climbs[i].solution().feasible for i in alive):
            gave_up = True
            break
    if not gave_up:
        leader = min(alive, key=lambda i: (climbs[i].best_key, i))
        climbs[leader].run(budget - (used_by_all() - int(climbs[leader].used)),
                           reporting(climbs[leader]), should_stop)
    used = used_by_all()
    best = min(range(len(climbs)), key=lambda i: (climbs[i].best_key, i))
    answer = climbs[best].solution()
    better = _best_of(answer, found)     # the climb from `found` starts there: a guard only
    extra = dict(found.extra, before_polish=float(found.value),
                 polish_evaluations=used, polish_time=time.perf_counter() - start,
                 polish_restarts=sum(int(climb.restarts) for climb in climbs),
                 climbed_value=climbs[0].value,
                 lineage_values=[climb.value for climb in climbs],
                 lineage_evaluations=[int(climb.used) for climb in climbs],
                 lineage_steps=[int(climb.steps) for climb in climbs],
                 polish_winner="climb" if best == 0 else f"fresh-{best}",
                 **({"race_gave_up": True} if gave_up else {}))
    return dataclasses.replace(better, evaluations=spent + used, method=found.method,
                               seed=seed, extra=extra)


# the share of the climbs' budget (and time) kept back, under a step-time objective with
# memory limits, for `finish_fitting`
FIT_RESERVE = 0.2
# `fit_first`'s climb from the race's answer hands over to one afresh when its best has not
# improved in this share of the fit's budget
FIT_STALL = 0.25


def _limits_rank_steps(problem: Problem) -> bool:
    """Whether memory limits rank the answers of a step-time problem (SIM_RULES 11)."""
    from regal.sim import ranking_limits

    return problem.objective != "peak_memory" and \
        ranking_limits(problem.graph, problem.devices, problem.objective) is not None


def _until(end: float, asked=None) -> Callable[[], bool]:
    """A `should_stop` that says stop at `end` (a `time.perf_counter()`) or when `asked()`."""
    def stop() -> bool:
        return (asked is not None and asked()) or time.perf_counter() >= end
    return stop


def finish_fitting(problem: Problem, found: Solution, budget: int, seed: int, *,
                   time_left: float | None = None,
                   should_stop: Callable[[], bool] | None = None,
                   climb_options: dict | None = None,
                   progress: Callable[[int, float], None] | None = None) -> Solution:
    """The last `budget` evaluations (and `time_left` seconds) of a step-time search under
    memory limits: when the race's answer `found` is over the limits, `fit_first` climbs it to
    a fit on peak memory; then one climb on the step from the better of the two (seed + 99,
    no heuristic starts). Never worse than `found`; counts every evaluation; `progress` as
    in `race_climbs`; `climb_options` (a move ranker) go to the climbs on peak memory too.

    Why a reserve after the race rather than a fit before it: a lineage that fits ranks ahead
    of every one that does not, so a fit raced from the start eliminates the climbs that would
    have fitted a little later with a shorter step (it cost 4-6 points over BRKGA-5K on the
    quick makespan table at 4 devices); kept to the end it only acts where the race failed."""
    start = time.perf_counter()
    end = None if time_left is None else start + float(time_left)
    budget = int(budget)
    fitted = fit_first(problem, found, budget, seed, time_left=time_left,
                       should_stop=should_stop, climb_options=climb_options, progress=progress)
    used = int(fitted.evaluations) - int(found.evaluations)
    if progress is not None:
        progress(int(fitted.evaluations), float(fitted.value))
    if budget - used < 4 or (should_stop is not None and should_stop()):
        return fitted
    stop = should_stop if end is None else _until(end, should_stop)
    climb = Climb(problem, budget - used, seed + 99, heuristics=(), initial=[fitted],
                  should_stop=stop, **dict(climb_options or {}))

    def report(evaluations: int, best: float) -> None:
        progress(int(fitted.evaluations) + evaluations, min(float(best), float(fitted.value)))

    climb.run(budget - used, None if progress is None else report, stop)
    better = _best_of(climb.solution(method=found.method), fitted)
    extra = dict(fitted.extra, finish_evaluations=int(climb.used),
                 finish_time=time.perf_counter() - start)
    return dataclasses.replace(better, evaluations=int(fitted.evaluations) + int(climb.used),
                               seed=found.seed, extra=extra)


def fit_first(problem: Problem, found: Solution, budget: int, seed: int, *,
              time_left: float | None = None,
              should_stop: Callable[[], bool] | None = None,
              climb_options: dict | None = None,
              progress: Callable[[int, float], None] | None = None) -> Solution:
    """`found` if it fits or memory limits do not rank the problem's running time; else climbs
    that minimise peak memory under the same limits, each stopped at its first placement that
    fits: one from `found` and the heuristic starts, until it fits or its best peak (as each
    evaluated batch reports it) has not improved in `FIT_STALL` of `budget` (at least 16
    evaluations), then, if it found no fit, one afresh from the
    heuristic starts only (seed + 1) on what is left of `budget` and `time_left`. The answer
    is the best of them under the problem's own objective, re-scored there, counting every
    evaluation. `climb_options` go to both climbs (`regal`'s move ranker, whose peak-memory
    weights then steer them: on 10,000-op training steps at 4 devices plain climbs need
    1,700-5,400 evaluations to fit, often more than a 5,000-evaluation run has left).
    `progress(evaluations, best)` after each batch: every evaluation so far (`found`'s
    included) and `found`'s value, the best under the problem's objective until the end.

    Why: under a step-time objective a misfit is ranked by its step time stretched by its
    overflow (SIM_RULES 11), so a climb may trade a little overflow for a shorter step and
    never reach a fit that a climb on peak memory finds at once (GPT-2 small on 8 devices at
    0.17x its one-device peak: no fit in 60 s, while the peak search went 17% under the
    limit). A climb that follows from the fit keeps it: every fit ranks ahead of every
    misfit (`finish_fitting`). The second climb because the race's misfit can sit where peak
    memory too is at a local optimum above the limit, while the heuristics' basin fits
    (a 53-op graph at 4 devices: 1,800 evaluations from the misfit stayed over the limit, 450
    from the heuristic starts fitted); the first goes on while it improves because on large
    graphs a fit is many small steps away (a fixed half of the budget stopped it short)."""
    from regal.sim import ranking_limits

    limits = ranking_limits(problem.graph, problem.devices, problem.objective)
    if problem.objective == "peak_memory" or limits is None or found.feasible \
            or budget // 2 < 8 or (should_stop is not None and should_stop()):
        return found
    start = time.perf_counter()
    end = None if time_left is None else start + float(time_left)
    largest = float(np.max(limits))
    peak_problem = dataclasses.replace(problem, objective="peak_memory")
    budget = int(budget)

    options = dict(climb_options or {})
    stall = max(16, int(FIT_STALL * budget))

    def from_found():
        return Climb(peak_problem, budget, seed, initial=[found], should_stop=should_stop,
                     **options), stall

    def afresh():       # built only when the first found no fit: its starts cost time
        return Climb(peak_problem, budget - used, seed + 1, should_stop=should_stop,
                     **options), None

    results, used = [found], 0
    for make in (from_found, afresh):
        if budget - used < 8 or (should_stop is not None and should_stop()) \
                or (end is not None and time.perf_counter() >= end):
            break
        climb, patience = make()
        improved = [climb.value, int(climb.used)]     # the best so far and when it was found

        def note(evaluations: int, best: float, improved=improved) -> None:
            if best < improved[0]:
                improved[:] = [best, evaluations]
            if progress is not None:
                progress(int(found.evaluations) + used + evaluations, float(found.value))

        def stop(climb=climb, patience=patience, improved=improved) -> bool:
            return climb.value <= largest or (should_stop is not None and should_stop()) \
                or (end is not None and time.perf_counter() >= end) \
                or (patience is not None and int(climb.used) - improved[1] >= patience)

        if not stop():
            climb.run(budget - used, note, stop)
        used += int(climb.used)
        placement, priority, transfer = decode(climb.best, problem.graph, problem.devices)
        results.append(Solution(**score(problem, placement, priority, transfer),
                                evaluations=int(found.evaluations) + used, method=found.method,
                                seed=found.seed))
        if results[-1].feasible:
            break
    better = _best_of(*results)
    extra = dict(found.extra, fit_first_evaluations=used,
                 fit_first_time=time.perf_counter() - start,
                 fit_first_fits=bool(results[-1].feasible), fit_first_climbs=len(results) - 1)
    return dataclasses.replace(better, evaluations=int(found.evaluations) + used, extra=extra)


def brkga_phase(problem: Problem, budget: int, seed: int, *, population_size: int = 100,
                spent: int = 0, **brkga_options) -> Solution:
    """`regal.optimizers.solve_brkga` on the BRKGA phase's `budget`, of which `spent` went to
    the reference heuristics; when that leaves less than one generation the population
    shrinks to what is left (at least 3). `brkga_options` are solve_brkga's (a policy's
    `gene_order`, Betas, elite bias, seeds, uniform mutants; `progress`, `should_stop`)."""
    left = int(budget) - int(spent)
    if left < 3:
        raise ValueError(f"budget: {budget} evaluations leave {left} after the reference's "
                         f"{spent}; need at least 3")
    return solve_brkga(problem, budget, seed, population_size=min(int(population_size), left),
                       spent=int(spent), **brkga_options)


def run_pipeline(problem: Problem, budget: int, seed: int, params: dict, *,
                 schedule: Schedule = DEFAULT_SCHEDULE, time_limit: float | None = None,
                 started: float | None = None,
                 progress: Callable[[int, float], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 climb_options: dict | None = None, **brkga_options) -> Solution:
    """`brkga_phase` with `params` on BRKGA's share of the budget (and of `time_limit`
    seconds from `started`, default now), then `race_climbs` on whatever BRKGA left (the
    schedule's share, or more when the time limit ended BRKGA early); `extra["stopped_by"]`
    under a time limit (`phase_stops`). BRKGA always gets what its reference and seeds need
    (at least its `spent` evaluations plus a population of max(3, seeds)), taken from the
    climbs. `climb_options` go to the climbs (`race_climbs`)."""
    from regal.optimizers import check_time_limit

    if time_limit is not None:
        time_limit = check_time_limit(time_limit)
    started = time.perf_counter() if started is None else float(started)
    seeds = params.get("initial")
    population = max(3, 0 if seeds is None else len(np.atleast_2d(seeds)))
    brkga_budget, climb_budget = split_budget(budget, schedule.climb_share,
                                              keep=int(params.get("spent", 0)) + population)
    first_stop, last_stop, stopped_by = phase_stops(
        time_limit, schedule.climb_share if climb_budget else 0.0, should_stop, started)
    found = brkga_phase(problem, brkga_budget, seed, progress=progress,
                        should_stop=first_stop, **params, **brkga_options)
    left = int(budget) - int(found.evaluations)
    if climb_budget and left >= 8 and not (last_stop is not None and last_stop()):
        time_left = None if time_limit is None else started + time_limit - time.perf_counter()
        reserve = int(left * FIT_RESERVE) if _limits_rank_steps(problem) else 0
        race_stop, race_time = last_stop, time_left
        if reserve and time_left is not None:   # the race ends by its share of the time too
            race_time = time_left * (1.0 - FIT_RESERVE)
            race_end = time.perf_counter() + race_time
            race_stop = _until(race_end, last_stop)
        found = race_climbs(problem, found, left - reserve, seed,
                            fresh_climbs=schedule.fresh_climbs, race=schedule.race,
                            time_left=race_time, progress=progress, should_stop=race_stop,
                            climb_options=climb_options, give_up_unfit=bool(reserve))
        if reserve and not (last_stop is not None and last_stop()):
            time_left = None if time_limit is None \
                else started + time_limit - time.perf_counter()
            found = finish_fitting(problem, found, int(budget) - int(found.evaluations), seed,
                                   time_left=time_left, should_stop=last_stop,
                                   climb_options=climb_options, progress=progress)
    if time_limit is not None:
        found = dataclasses.replace(found, extra=dict(found.extra, stopped_by=stopped_by()))
    return found


def solve_seeded_brkga(problem: Problem, budget: int, seed: int = 0, *,
                       polish_share: float | None = None, fresh_climbs: int | None = None,
                       race=None, time_limit: float | None = None, progress=None,
                       should_stop=None, climb_options: dict | None = None,
                       **brkga_options) -> Solution:
    """`regal` without the policy: plain uniform BRKGA whose first population holds the
    reference heuristics' solutions (`regal.policy.reference`, whose evaluations count in the
    budget), then the same race of climbs (`polish_share`, `fresh_climbs`, `race`: the
    schedule's fields; defaults `DEFAULT_SCHEDULE`; `climb_options` as in `run_pipeline`)."""
    from regal.policy.reference import reference_for

    started = time.perf_counter()
    check_budget(budget)
    schedule = schedule_of(polish_share, fresh_climbs, race)
    reference = reference_for(problem.graph, problem.devices, problem.objective)
    params = dict(initial=reference.seeds, spent=reference.evaluations)
    found = run_pipeline(problem, int(budget), seed, params, schedule=schedule,
                         time_limit=time_limit, started=started, progress=progress,
                         should_stop=should_stop, climb_options=climb_options,
                         **brkga_options)
    extra = dict(found.extra, reference_source=reference.source,
                 reference_value=reference.value)
    return dataclasses.replace(found, method="seeded-brkga", seed=seed, extra=extra)


def schedule_of(polish_share=None, fresh_climbs=None, race=None) -> Schedule:
    """The `Schedule` a method's options give (None: the default's field)."""
    default = DEFAULT_SCHEDULE
    return Schedule(default.climb_share if polish_share is None else polish_share,
                    default.fresh_climbs if fresh_climbs is None else fresh_climbs,
                    default.race if race is None else race)
