"""The `regal` method (docs/design.md §6): one GNN forward pass, BRKGA with the policy's choices,
then local search from BRKGA's best and from the heuristic starts, raced.

The policy picks every op's key distributions (relative to the graph's reference solution,
`regal.policy.reference`) and elite bias once (greedy by default); BRKGA then searches in
slot space (`search`), its first population seeded with the reference heuristics' solutions
and a share of its mutants kept uniform (`search_params`), so that a poor choice costs little
against plain BRKGA. The last `POLISH_SHARE` of the budget goes to `local-search` (`polish`):
a climb from BRKGA's best and `FRESH_CLIMBS` climbs afresh from the heuristic starts race by
successive halving (`RACE`), and the climb that leads spends the rest. At 5,000 evaluations
BRKGA finds good basins but climbs them slowly, the peak-directed moves climb fast, and which
basin ends best varies from run to run (measured in data/policy/README.md and
experiments/results/budget_schedules.md). The reference's
evaluations count in the budget. The forward pass is `regal.policy.NumpyPolicy`
(numpy, same weights and logits as the TensorFlow `Policy`), so the method never imports
TensorFlow; training, and a `policy=` object passed in, may still use the TensorFlow one.
Loaded policies are kept per process; `Solution.extra` records the load, policy, BRKGA and
polish times apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from regal.decode import decode
from regal.optimizers import Problem, Solution, score

__all__ = ["DEFAULT_POLICY_DIR", "REPO_ROOT", "UNIFORM_MUTANT_FRACTION", "POLISH_SHARE",
           "FRESH_CLIMBS", "RACE", "check_race",
           "default_policy_dir", "polish", "check_share", "split_budget", "phase_stops",
           "two_phase", "same_policy_dir",
           "resolve_policy_dir", "portable_policy_dir", "policy_content_hash", "load_policy",
           "solve_regal", "ablated_action", "search_params", "search"]

# the source tree this package lives in (editable install or a clone) and its data/policy/
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POLICY_DIR = REPO_ROOT / "data" / "policy"
_LOADED: dict[str, object] = {}
# share of each generation's mutants kept uniform when the policy biases the keys ("do no
# harm": plain BRKGA's exploration never stops)
UNIFORM_MUTANT_FRACTION = 0.5
# share of the budget left to local search after BRKGA (0: BRKGA spends it all); the climbs
# afresh from the heuristic starts that race the climb from BRKGA's best; and each round's
# end, as a share of the polish budget per climb still in the race (3 climbs to 7.5%, the
# better 2 to 22.5%, the leader spends the rest: 70% of it in all;
# experiments/results/budget_schedules_race_*.md compare the schedules)
POLISH_SHARE = 0.9
FRESH_CLIMBS = 2
RACE = (0.075, 0.225)


def default_policy_dir() -> Path:
    """$REGAL_POLICY_DIR if set, else the shipped data/policy/ next to the package."""
    return Path(os.environ.get("REGAL_POLICY_DIR") or DEFAULT_POLICY_DIR)


def resolve_policy_dir(policy_dir=None) -> Path:
    """`policy_dir` as a path to read: a relative path that exists under the repository root
    is taken from there (records store it so, see `portable_policy_dir`), else from the cwd."""
    if policy_dir is None:
        return default_policy_dir()
    path = Path(policy_dir)
    if not path.is_absolute() and (REPO_ROOT / path).exists():
        return REPO_ROOT / path
    return path


def same_policy_dir(first, second) -> bool:
    """Whether two policy folders, as records store them (`portable_policy_dir`) or as given,
    are the same folder."""
    return resolve_policy_dir(first).resolve() == resolve_policy_dir(second).resolve()


def portable_policy_dir(policy_dir) -> str:
    """`policy_dir` relative to the repository root when it lies inside it (so that records
    written in one clone resume in another), else absolute."""
    path = resolve_policy_dir(policy_dir).resolve()
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def policy_content_hash(policy_dir=None) -> str:
    """Content hash of a stored policy (config + weight arrays, not file bytes), 16 hex
    digits: records carry it so that results of a replaced policy are never reused."""
    path = resolve_policy_dir(policy_dir)
    digest = hashlib.sha256((path / "config.json").read_bytes())
    with np.load(path / "weights.npz") as stored:
        for key in sorted(stored.files):
            array = np.ascontiguousarray(stored[key])
            digest.update(f"{key}{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def load_policy(policy_dir=None):
    """The policy stored in `policy_dir` (default: the shipped one), loaded once per process
    for inference (a `NumpyPolicy`: no TensorFlow)."""
    path = resolve_policy_dir(policy_dir)
    key = str(path.resolve())
    if key not in _LOADED:
        if not (path / "config.json").exists():
            raise ValueError(f"policy_dir: {path} holds no policy (config.json); train one with "
                             "`regal train` or pass policy_dir")
        from regal.policy.inference import NumpyPolicy
        _LOADED[key] = NumpyPolicy.load(path)
    return _LOADED[key]


def ablated_action(policy, action, learn=None, learn_elite_bias=None):
    """`action` with the heads that `learn`/`learn_elite_bias` switch off reset to plain
    BRKGA's choice (uniform keys, elite bias 0.7): the Table 3 ablation at inference time."""
    from regal.policy.menus import LEARN_PRESETS, make_action

    if learn is None and learn_elite_bias is None:
        return action
    keep = set(LEARN_PRESETS[learn] if isinstance(learn, str) else (learn or ()))
    if learn is None:
        keep = {"affinity", "priority", "transfer"}
    if learn_elite_bias is None or learn_elite_bias:
        keep.add("elite_bias")
    n = len(action.choices.affinity)
    choices = action.choices._replace(**{
        head: np.full(n, getattr(policy.default, head), np.int32)
        for head in action.choices._fields if head not in keep})
    return make_action(choices, float("nan"), action.reference, policy.menus)


def search_params(action, seed_population: bool = True,
                  uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION) -> dict:
    """`search` keyword arguments that run BRKGA with `action`: its per-gene Betas and elite
    bias in slot space, the slot -> device gene order (none when the placement keys are
    uniform: slots and devices are then alike), the reference's candidates in the first
    population (`seed_population`), a uniform share of the mutants when keys are biased,
    and the evaluations the reference cost (counted in the budget)."""
    params = action.brkga_params()
    reference = action.reference
    order = None if action.placement_is_uniform() else reference.gene_order()
    if order is not None:
        params["gene_order"] = order
    if seed_population:
        params["initial"] = reference.seeds if order is None else reference.slot_space(
            reference.seeds)
    if params["alpha"] is not None and uniform_mutant_fraction:
        params["uniform_mutant_fraction"] = float(uniform_mutant_fraction)
    params["spent"] = int(reference.evaluations)
    return params


def check_share(value, name: str, of: str) -> float:
    """`value` as a share in [0, 1) (a real number, not a bool); ValueError naming `name`."""
    number = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
    if not (number and 0.0 <= value < 1.0):
        raise ValueError(f"{name}: expected a share of {of} in [0, 1), got {value!r}")
    return float(value)


def split_budget(budget: int, share: float = POLISH_SHARE, keep: int = 0) -> tuple[int, int]:
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


def _first_of(*solutions: Solution | None) -> Solution:
    """The best of `solutions` (None skipped); the earliest wins a tie."""
    best = None
    for solution in solutions:
        if solution is not None and (best is None or solution.value < best.value):
            best = solution
    return best


def _local_search_module():
    """The registry's local-search module (`regal` names baselines only through the registry)."""
    import importlib

    from regal.optimizers import get_method

    return importlib.import_module(get_method("local-search").__module__)


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


def polish(problem: Problem, found: Solution, budget: int, seed: int, *,
           fresh_climbs: int = 0, race=(), time_left: float | None = None,
           progress: Callable[[int, float], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> Solution:
    """`found` improved by local search with `budget` more evaluations; never worse than
    `found`.

    Without `fresh_climbs` one climb from `found` spends it all. Otherwise climbs race by
    successive halving: the climb from `found` (seed; no heuristic starts, `found` already
    beats them) and `fresh_climbs` climbs afresh from the heuristic starts (seeds seed + 1,
    ...) each run to `race[0]` of the budget, the better half (rounded up; ties to the
    earlier climb) go on to `race[1]`, and so on; the last one left spends the rest. Climbs
    are paused and resumed (`baselines.local_search.Climb`), never restarted. Why: which
    basin ends best varies from run to run, one climb's early lead predicts it, and the
    winner gets most of the budget (experiments/results/budget_schedules.md). With
    `time_left`, the seconds until the deadline that `should_stop` enforces, each climb's
    turn ends by its share of the time left once the climbs are built (their heuristic starts
    take time of their own) too. The answer counts every evaluation; `extra` keeps
    `found`'s and adds the polish's."""
    fresh_climbs, race = check_race(fresh_climbs, race)
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

    Climb = _local_search_module().Climb
    first = budget if not fresh_climbs else max(1, int(budget * race[0]))
    climbs.append(Climb(problem, first, seed, heuristics=(), initial=[found]))
    known: dict = {}    # the seed-free heuristics' answers, run once for every fresh climb
    for k in range(fresh_climbs):
        if should_stop is not None and should_stop():
            break
        climbs.append(Climb(problem, first, seed + 1 + k, should_stop=should_stop,
                            known=known))
    raced_from = time.perf_counter()
    alive = list(range(len(climbs)))
    allotted, before = 0.0, 0.0
    for share in race if len(climbs) > 1 else ():
        target = max(1, int(budget * share))   # floors: the rounds never overspend
        for rank, i in enumerate(alive):     # each climb's turn ends by its share of the time
            climbs[i].run(target, reporting(climbs[i]),
                          stop_at(allotted + (rank + 1) * (share - before)))
        allotted, before = allotted + len(alive) * (share - before), share
        alive = sorted(alive, key=lambda i: (climbs[i].best_key, i))[:(len(alive) + 1) // 2]
    leader = min(alive, key=lambda i: (climbs[i].best_key, i))
    climbs[leader].run(budget - (used_by_all() - int(climbs[leader].used)),
                       reporting(climbs[leader]), should_stop)
    used = used_by_all()
    best = min(range(len(climbs)), key=lambda i: (climbs[i].best_key, i))
    answer = climbs[best].solution()
    better = _first_of(answer, found)     # the climb from `found` starts there: a guard only
    extra = dict(found.extra, before_polish=float(found.value),
                 polish_evaluations=used, polish_time=time.perf_counter() - start,
                 polish_restarts=sum(int(climb.restarts) for climb in climbs),
                 climbed_value=climbs[0].value,
                 lineage_values=[climb.value for climb in climbs],
                 lineage_evaluations=[int(climb.used) for climb in climbs],
                 lineage_steps=[int(climb.steps) for climb in climbs],
                 polish_winner="climb" if best == 0 else f"fresh-{best}")
    return dataclasses.replace(better, evaluations=spent + used, method=found.method,
                               seed=seed, extra=extra)


def search(problem: Problem, budget: int, seed: int, *, population_size: int = 100,
           elite_fraction: float = 0.2, mutant_fraction: float = 0.2, elite_bias=0.7,
           alpha=None, beta=None, gene_order=None, initial=None,
           uniform_mutant_fraction: float = 0.0, spent: int = 0,
           progress: Callable[[int, float], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> Solution:
    """BRKGA over keys in slot space: a chromosome `keys` is scored as `keys[gene_order]`
    (device space, docs/design.md §5); without `gene_order` this is plain `solve_brkga`, draw for draw.
    `spent` evaluations were used before (the reference) and come off `budget` (unless that
    leaves less than one generation; the population then shrinks to what is left, >= 3).
    `should_stop()` ends the search early between generations (`brkga.BRKGA.run`)."""
    from brkga import BRKGA
    from regal.breed import CompiledBackend

    left = int(budget) - int(spent)
    if left < 3:
        raise ValueError(f"budget: {budget} evaluations leave {left} after the reference's "
                         f"{spent}; need at least 3")
    population_size = min(int(population_size), left)
    ga = BRKGA(problem.num_genes, population_size=population_size,
               elite_fraction=elite_fraction, mutant_fraction=mutant_fraction,
               elite_bias=elite_bias, alpha=alpha, beta=beta, seed=seed,
               backend=CompiledBackend(), uniform_mutant_fraction=uniform_mutant_fraction)
    order = None if gene_order is None else np.asarray(gene_order, np.int64)

    def evaluate(keys: np.ndarray) -> np.ndarray:
        return problem.evaluate(keys if order is None else keys[:, order])

    callback = None if progress is None else \
        (lambda _gen, used, best: progress(used + int(spent), best))
    result = ga.run(evaluate, left, initial=initial, callback=callback, should_stop=should_stop)
    keys = result.best_keys if order is None else result.best_keys[order]
    placement, priority, transfer = decode(keys, problem.graph, problem.devices)
    return Solution(**score(problem, placement, priority, transfer),
                    evaluations=result.evaluations + int(spent),
                    extra={"history": result.history.tolist(),
                           "population_size": population_size})


def two_phase(problem: Problem, budget: int, seed: int, params: dict, *,
              polish_share: float = POLISH_SHARE, fresh_climbs: int = FRESH_CLIMBS,
              race=RACE, time_limit: float | None = None, started: float | None = None,
              progress: Callable[[int, float], None] | None = None,
              should_stop: Callable[[], bool] | None = None, **brkga_options) -> Solution:
    """`search` with `params` on BRKGA's share of the budget (and of `time_limit` seconds
    from `started`, default now), then `polish` on whatever BRKGA left (its share, or more
    when the time limit ended it early; `fresh_climbs` climbs afresh from the heuristic
    starts race the climb from BRKGA's best by `race`); `extra["stopped_by"]` under a time limit
    (`phase_stops`). BRKGA always gets what its reference and seeds need (at least its
    `spent` evaluations plus a population of max(3, seeds)), taken from the polish."""
    from regal.optimizers import check_time_limit

    if time_limit is not None:
        time_limit = check_time_limit(time_limit)
    fresh_climbs, race = check_race(fresh_climbs, race)
    started = time.perf_counter() if started is None else float(started)
    seeds = params.get("initial")
    population = max(3, 0 if seeds is None else len(np.atleast_2d(seeds)))
    brkga_budget, polish_budget = split_budget(budget, polish_share,
                                               keep=int(params.get("spent", 0)) + population)
    first_stop, last_stop, stopped_by = phase_stops(
        time_limit, polish_share if polish_budget else 0.0, should_stop, started)
    found = search(problem, brkga_budget, seed, progress=progress, should_stop=first_stop,
                   **params, **brkga_options)
    left = int(budget) - int(found.evaluations)
    if polish_budget and left >= 8 and not (last_stop is not None and last_stop()):
        time_left = None if time_limit is None else started + time_limit - time.perf_counter()
        found = polish(problem, found, left, seed, fresh_climbs=fresh_climbs, race=race,
                       time_left=time_left,
                       progress=progress, should_stop=last_stop)
    if time_limit is not None:
        found = dataclasses.replace(found, extra=dict(found.extra, stopped_by=stopped_by()))
    return found


def solve_regal(problem: Problem, budget: int, seed: int, *, policy_dir=None, policy=None,
                policy_hash: str | None = None, mode: str = "greedy", learn=None,
                learn_elite_bias=None, seed_population: bool = True,
                uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION,
                polish_share: float = POLISH_SHARE, fresh_climbs: int = FRESH_CLIMBS,
                race=RACE, time_limit: float | None = None,
                progress: Callable[[int, float], None] | None = None,
                should_stop: Callable[[], bool] | None = None, **brkga_options) -> Solution:
    """REGAL: the policy's per-op choices relative to the reference solution, then BRKGA,
    then climbs from BRKGA's best and afresh from the heuristic starts, raced (`polish`),
    `budget` evaluations in all (the reference's included) with `seed`.

    `policy` (a loaded Policy or NumpyPolicy) wins over `policy_dir`; a relative `policy_dir` is looked up
    under the repository root first. `policy_hash`, when given, must match the stored
    policy's content (`policy_content_hash`): a record made with other weights is never
    reproduced silently with the current ones. `mode="sample"` draws the action with
    `seed` instead of taking each head's most likely entry. `learn`/`learn_elite_bias`
    switch heads off at inference (ablations with one set of weights). `seed_population`
    puts the reference heuristics' solutions in the first population;
    `uniform_mutant_fraction` of the mutants stay uniform (see `search_params`).
    `polish_share` of the budget, and of `time_limit` seconds when given, goes to the local
    search (`two_phase`; 0: BRKGA only), where `fresh_climbs` climbs afresh from the
    heuristic starts race the one from BRKGA's best by `race` (0: one climb from BRKGA's
    best). `should_stop()` ends the search early.
    """
    start = time.perf_counter()
    source = "object"
    if policy is None:
        source = str(resolve_policy_dir(policy_dir))
        if policy_hash is not None:
            stored = policy_content_hash(policy_dir)
            if stored != policy_hash:
                raise ValueError(f"policy_hash: {source} holds a policy with content hash "
                                 f"{stored}, not {policy_hash}")
        policy = load_policy(policy_dir)
    loaded = time.perf_counter()
    action = policy.act(problem.graph, problem.devices, mode=mode, seed=seed,
                        objective=problem.objective)
    action = ablated_action(policy, action, learn, learn_elite_bias)
    params = search_params(action, seed_population, uniform_mutant_fraction)
    acted = time.perf_counter()
    found = two_phase(problem, budget, seed, params, polish_share=polish_share,
                      fresh_climbs=fresh_climbs, race=race, time_limit=time_limit,
                      started=start,
                      progress=progress,
                      should_stop=should_stop, **brkga_options)
    done = time.perf_counter()
    counts = {head: np.bincount(getattr(action.choices, head),
                                minlength=len(policy.menus[head])).tolist()
              for head in action.choices._fields}
    extra = dict(found.extra)
    reference = action.reference
    extra.update(policy_load_time=loaded - start, policy_time=acted - loaded,
                 brkga_time=done - acted - extra.get("polish_time", 0.0),
                 search_time=done - acted, policy_mode=mode, menu_counts=counts,
                 policy_source=source, reference_source=reference.source,
                 reference_value=reference.value, reference_evaluations=reference.evaluations)
    return dataclasses.replace(found, extra=extra)
