"""Every method behind one interface (docs/design.md §6): `solve(method, problem, budget, seed)`,
the registry of methods, the two methods of plain search (BRKGA, random) and the trivial
yardsticks (one device, round robin; `reference_solutions` adds layer-split).

A method is a function `method(problem, budget, seed, **options) -> Solution`
(options may include `progress(evaluations, best)`, and for searches `should_stop()`, which
`solve` uses for `time_limit`). `METHODS` maps a name to
the function itself or to a "module:function" string that is imported on first
use, so baselines and the policy (which imports TensorFlow) register here
without this module importing them. `solve` times the method and re-scores its
answer with the simulator, so no method can report a number the model would not give.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import time
from typing import Callable

import numpy as np

from regal.decode import decode, respect_colocation
from regal.graph import ComputationGraph
# the types, the solution file and the printed summary live in their own modules; the
# public API (README, "Python API") names them from here
from regal.problem import OBJECTIVES, Problem, Solution, score, scored
from regal.sim import DeviceSpec
from regal.solution_file import execution_order, read_solution, solution_record
from regal.summary import describe, smallest_overflow

__all__ = ["OBJECTIVES", "Problem", "Solution", "METHODS", "REVISIONS", "register",
           "method_revision", "LIMITS_REVISION", "METHOD_LIMITS_REVISIONS", "get_method",
           "available_methods", "solve", "score", "single_device", "round_robin",
           "roomiest_device", "one_device", "reference_solutions",
           "solve_brkga", "solve_random", "check_budget", "check_seed", "check_options",
           "check_initial",
           "limit_free_first", "solution_record", "read_solution",
           "execution_order", "describe", "smallest_overflow", "check_time_limit",
           "UNLIMITED_BUDGET"]


# ---------------------------------------------------------------------------
# yardsticks: trivial solutions


def _topological_priority(graph: ComputationGraph) -> np.ndarray:
    """Earlier in the topological order = higher priority, in [0, 1]."""
    from regal.decode import order_priority
    return order_priority(graph.topo_order)


def roomiest_device(problem: Problem) -> int:
    """The device with the largest memory limit (the lowest such), of the limits that change
    the ranking (`regal.sim.ranking_limits`); device 0 when there are none."""
    from regal.sim import ranking_limits

    limits = ranking_limits(problem.graph, problem.devices, problem.objective)
    return 0 if limits is None else int(np.argmax(limits))


def single_device(problem: Problem) -> Solution:
    """Trivial reference: every op on the roomiest device, run in topological order (pinned
    groups stay on their pins)."""
    priority = _topological_priority(problem.graph)
    placement = np.full(problem.graph.num_nodes, roomiest_device(problem), np.int32)
    placement = respect_colocation(problem.graph, placement)  # pinned groups go to their pin
    return scored(problem, placement, priority, priority, method="single-device")


def one_device(problem: Problem) -> Solution:
    """What running the whole graph on one device gives: the yardstick `regal optimize`
    prints beside its answer. The user's pins are dropped (one device holds every op anyway)
    and the device is the roomiest, so neither a pin nor a small device changes the
    yardstick; `feasible` says whether the graph fits that device's limit. With device speeds
    it runs at the fastest device's (the least total op time, `regal.sim.speeds`); when the
    speeds differ, `extra["fastest_device"]` names it and `describe` says so."""
    import dataclasses

    from regal.sim.speeds import fastest_device

    graph, devices = problem.graph, problem.devices
    if graph.has_pins:
        graph = graph._replace(pinned=np.full(graph.num_nodes, -1, np.int32))
    limits = devices.limits
    limit = None if limits is None else int(limits.max())
    if devices.has_speeds:
        k = fastest_device(problem.graph, devices)
        alone = dataclasses.replace(devices.with_count(1, limit),
                                    flops=devices.flops and devices.flops[k],
                                    memory_bandwidth=devices.memory_bandwidth
                                    and devices.memory_bandwidth[k])
    else:
        alone = DeviceSpec(1, limit, devices.bandwidth, devices.latency)
    priority = _topological_priority(graph)
    found = scored(Problem(graph, alone, problem.objective),
                   np.zeros(graph.num_nodes, np.int32), priority, priority, method="one-device")
    if len(set(zip(devices.flops or [None] * devices.count,
                   devices.memory_bandwidth or [None] * devices.count))) > 1:
        found.extra["fastest_device"] = k
    return found


def reference_solutions(problem: Problem) -> list[Solution]:
    """The yardsticks `regal optimize` compares its answer with: one device, round robin, and
    `layer-split`, the split a person makes by hand (at most 2 evaluations: the split balanced
    by memory, and under limits it misses, the split balanced against them)."""
    return [one_device(problem), round_robin(problem), solve("layer-split", problem, 2, 0)]


def round_robin(problem: Problem) -> Solution:
    """Trivial reference: the i-th op of the topological order goes to device i mod d."""
    graph = problem.graph
    priority = _topological_priority(graph)
    placement = np.empty(graph.num_nodes, dtype=np.int32)
    placement[graph.topo_order] = np.arange(graph.num_nodes) % problem.devices.count
    placement = respect_colocation(graph, placement)  # a group where most of its bytes are
    return scored(problem, placement, priority, priority, method="round-robin")


# ---------------------------------------------------------------------------
# methods


def _solution_from_keys(problem: Problem, keys: np.ndarray, **fields) -> Solution:
    placement, priority, transfer = decode(keys, problem.graph, problem.devices)
    return scored(problem, placement, priority, transfer, **fields)


def _warm_start(problem: Problem, initial) -> np.ndarray | None:
    """Solutions or chromosomes -> an [m, num_genes] block of keys (or None)."""
    if initial is None:
        return None
    if isinstance(initial, Solution):
        initial = [initial]
    if isinstance(initial, (list, tuple)) and initial and isinstance(initial[0], Solution):
        return np.stack([s.keys() for s in initial])
    return np.atleast_2d(np.asarray(initial, dtype=np.float64))


def solve_brkga(problem: Problem, budget: int, seed: int, *, population_size: int = 100,
                elite_fraction: float = 0.2, mutant_fraction: float = 0.2, elite_bias=0.7,
                alpha=None, beta=None, initial=None, gene_order=None,
                uniform_mutant_fraction: float = 0.0, spent: int = 0,
                progress: Callable[[int, float], None] | None = None,
                should_stop: Callable[[], bool] | None = None) -> Solution:
    """BRKGA over the chromosome of docs/design.md §5 (uniform keys by default: BRKGA-5K is
    budget=5000).

    The GA's array work runs compiled (`regal.breed`): the same run, bit for bit, as
    brkga's numpy backend, at a fraction of its time. The rest serves the `regal` pipeline
    (`regal.search.pipeline`): with `gene_order` a chromosome `keys` is scored as
    `keys[gene_order]` (the policy's slot space, `regal.policy.reference`); `spent`
    evaluations were used before (the reference heuristics) and come off `budget`;
    `uniform_mutant_fraction` of the mutants stay uniform when `alpha`/`beta` bias them."""
    from brkga import BRKGA
    from regal.breed import CompiledBackend

    ga = BRKGA(problem.num_genes, population_size=population_size,
               elite_fraction=elite_fraction, mutant_fraction=mutant_fraction,
               elite_bias=elite_bias, alpha=alpha, beta=beta, seed=seed,
               backend=CompiledBackend(), uniform_mutant_fraction=uniform_mutant_fraction)
    order = None if gene_order is None else np.asarray(gene_order, np.int64)
    evaluate = problem.evaluate if order is None else \
        (lambda keys: problem.evaluate(keys[:, order]))
    callback = None if progress is None else \
        (lambda _gen, used, best: progress(used + int(spent), best))
    result = ga.run(evaluate, budget - spent, initial=_warm_start(problem, initial),
                    callback=callback, should_stop=should_stop)
    keys = result.best_keys if order is None else result.best_keys[order]
    return _solution_from_keys(problem, keys, evaluations=result.evaluations + int(spent),
                               extra={"history": result.history.tolist(),
                                      "population_size": population_size})


def limit_free_first(problem: Problem, budget: int, build: Callable) -> tuple[dict, int]:
    """A construction's answer under memory limits, and the evaluations it cost:
    `build(None)`, its limit-free answer (`score` fields); when that misses the limits that
    rank solutions (`regal.sim.ranking_limits`) and the budget allows a second evaluation,
    also `build(limits)`, and the better of the two (ties: the limit-free one). So a limit
    the limit-free answer meets changes nothing, and a limit never makes it worse."""
    from regal.sim import ranking_limits

    found, used = build(None), 1
    limits = ranking_limits(problem.graph, problem.devices, problem.objective)
    if limits is not None and not found["feasible"] and budget >= 2:
        bounded = build(limits)
        used += 1
        if bounded["value"] < found["value"]:
            found = bounded
    return found, used


def check_budget(budget) -> None:
    """ValueError unless `budget` is a whole number of evaluations >= 1: every method's
    check of its budget (and `solve`'s, before any method)."""
    if isinstance(budget, (bool, np.bool_)) or not isinstance(
            budget, (int, np.integer, float, np.floating)) or not math.isfinite(budget) \
            or int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")


def check_initial(problem: Problem, initial) -> None:
    """ValueError naming `initial` when a given Solution places another number of ops, or
    uses a device this problem does not have (a solution of another graph or device count);
    chromosomes and other forms are left to the method."""
    solutions = [initial] if isinstance(initial, Solution) else \
        [x for x in initial if isinstance(x, Solution)] \
        if isinstance(initial, (list, tuple)) else []
    n, d = problem.graph.num_nodes, problem.devices.count
    for i, s in enumerate(solutions):
        placement = np.asarray(s.placement)
        if len(placement) != n or (n and int(placement.max()) >= d):
            raise ValueError(f"initial: solution {i} places {len(placement)} ops on up to "
                             f"{int(placement.max(initial=0)) + 1} devices; this problem has "
                             f"{n} ops and {d} devices")


def check_seed(seed) -> None:
    """ValueError unless `seed` is an integer >= 0 (numpy's generators take no other)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


def solve_random(problem: Problem, budget: int, seed: int, *, batch_size: int = 100,
                 progress: Callable[[int, float], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> Solution:
    """Random search: `budget` uniform chromosomes, scored in batches; keeps the best
    (`should_stop()`, asked before every batch after the first, ends it early)."""
    check_budget(budget)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    rng = np.random.default_rng(seed)
    best_keys, best, used = None, np.inf, 0
    while used < budget and (best_keys is None or should_stop is None or not should_stop()):
        keys = rng.random((min(batch_size, budget - used), problem.num_genes))
        values = problem.evaluate(keys)
        used += len(keys)
        i = int(np.argmin(values))
        if best_keys is None or values[i] < best:
            best_keys, best = keys[i].copy(), float(values[i])
        if progress is not None:
            progress(used, best)
    return _solution_from_keys(problem, best_keys, evaluations=used)


# ---------------------------------------------------------------------------
# registry

# name -> function, or "module:function" imported on first use (so listing the
# methods never imports OR-Tools or TensorFlow). A new method adds one line here:
# "gp-dfs": "baselines.gp_dfs:solve", "regal": "regal.policy.<module>:solve", ...
METHODS: dict[str, Callable | str] = {
    "brkga": solve_brkga,
    "random": solve_random,
    "cpsat": "baselines.cpsat:solve",
    "cpsat-lns": "baselines.cpsat.lns:solve",
    "gp-dfs": "baselines.gp_dfs:solve",
    "local-search": "baselines.local_search:solve",
    "tuned-brkga": "baselines.tuned_brkga:solve",
    "m-topo": "baselines.m_topo:solve",
    "m-etf": "baselines.m_etf:solve",
    "layer-split": "baselines.layer_split:solve",
    "layer-split-compute": "baselines.layer_split:solve_compute",
    "layer-split-gpipe": "baselines.layer_split:solve_gpipe",
    "layer-split-1f1b": "baselines.layer_split:solve_1f1b",
    "regal": "regal.regal_method:solve_regal",
    "regal-paper": "regal.regal_method:solve_regal_paper",
    "seeded-brkga": "regal.search.pipeline:solve_seeded_brkga",
}


# name -> revision of the method's code, "" when never revised. Bump a method's revision
# when a change alters its answers for the same options and seed: the harness keys records
# by it (`regal.harness.KEY_FIELDS`), so stored runs of the earlier code are run again
# instead of being reused, and tables leave them out (`regal.harness.current_revisions`).
# "cpsat": "exact-1" = the model's objective floored at regal.bounds, device symmetry broken,
# time windows, seeded-brkga among the hints, every incumbent re-scored (issue 39 item 2);
# "regal": "ranker-1" = its climbs rank four times their batch with the learned move ranker
# (data/policy/move_ranker.npz, issue 38); "ranker-2" = that ranker refitted with moves
# logged on network-like graphs and the real training families too; "ranker-3" = refitted
# with moves of 5,600-14,600-op training steps too, each step's best improving moves first;
# "ranker-4" = the same ranker with a restart gate under peak memory (a climb step whose
# batch is unlikely to improve is called off and the climb restarts from its best)
REVISIONS: dict[str, str] = {"cpsat": "exact-1", "regal": "ranker-4"}


def register(name: str, method: Callable | str, revision: str = "") -> None:
    """Adds a method: a function, or a lazy "module:function" path, and its code's revision
    (`REVISIONS`)."""
    if not isinstance(revision, str):
        raise ValueError(f"revision: expected text, got {revision!r}")
    METHODS[name] = method
    REVISIONS[name] = revision


# the revision of how memory limits rank and shape every method's answers, part of the
# revision of each run under a limit (runs without one keep their method's): "limits-1" =
# under per-device limits a fit ranks ahead of every misfit for peak memory too, and the
# constructions build for a limit only when their limit-free answer misses it (issue 36)
LIMITS_REVISION = "limits-1"
# methods whose own handling of limits was revised since, and their limits revision in its
# place: "limits-2" = under a step-time objective, a pipeline whose BRKGA phase ends over the
# limits climbs on peak memory to a fit before its step-time climbs
# (`regal.search.pipeline.fit_first`; issue 41); "limits-3" = when the peak climb from that
# answer finds no fit, a second one afresh from the heuristic starts (issue 38, do no harm)
# "limits-4" (regal only) = its move ranker leaves a climb whose incumbent is over a limit to
# the drawing order (zero weights for the makespan_over regime, which had borrowed
# makespan_fit's: issue 38); "limits-5" = the race of climbs gives up after its first round
# when none of the climbs going on fits, `fit_first`'s climb from the misfit goes on while it
# improves, and the fit climbs get the pipeline's move ranker (issue 38: on 10,000-op
# training steps at 4 devices the pipelines had stayed over the limits)
METHOD_LIMITS_REVISIONS: dict[str, str] = {"regal": "limits-5", "seeded-brkga": "limits-5"}


def method_revision(name: str, memory_limit=None) -> str:
    """The revision of method `name`'s code ("" when never revised; `REVISIONS`), with
    its limits revision (`METHOD_LIMITS_REVISIONS`, else `LIMITS_REVISION`) added for a run
    under `memory_limit` (not None)."""
    revision = REVISIONS.get(name, "")
    if memory_limit is None:
        return revision
    limits = METHOD_LIMITS_REVISIONS.get(name, LIMITS_REVISION)
    return f"{revision}+{limits}" if revision else limits


def available_methods() -> list[str]:
    return sorted(METHODS)


def get_method(name: str) -> Callable:
    try:
        method = METHODS[name]
    except KeyError:
        raise ValueError(f"method: unknown method {name!r} (known: "
                         f"{', '.join(available_methods())})") from None
    if isinstance(method, str):
        module, _, attr = method.partition(":")
        try:
            method = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"method {name!r} is not available ({method}: {exc})") from None
        METHODS[name] = method
    return method


def _accepts(function: Callable, name: str) -> bool:
    params = inspect.signature(function).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


# the evaluation budget of a run that only its time limit stops (`solve(..., budget=None,
# time_limit=...)`): more than any run can spend
UNLIMITED_BUDGET = 2 ** 62


def check_time_limit(value) -> float:
    """A time limit in seconds: a finite number > 0 (ValueError naming `time_limit`)."""
    import math

    number = not isinstance(value, bool) and isinstance(value, (int, float, np.number))
    if not (number and math.isfinite(value) and value > 0):
        raise ValueError(f"time_limit: expected a finite number of seconds > 0, got {value!r}")
    return float(value)


def check_options(method_name: str, options) -> None:
    """ValueError naming an option `method_name` does not take, where its signature says so
    (a method with a **options catch-all, such as regal's, is left to `solve`)."""
    params = inspect.signature(get_method(method_name)).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    known = [name for name, p in params.items()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)][3:]
    for name in options:  # `solve` takes time_limit and progress for every method
        if name not in params and name not in ("time_limit", "progress"):
            raise ValueError(f"method {method_name!r} takes no option {name!r} (it takes: "
                             f"{', '.join(known) or 'none'})")


def _names(function: Callable, name: str) -> bool:
    """Whether `function` names keyword `name` itself (a **options catch-all does not count)."""
    return name in inspect.signature(function).parameters


def solve(method_name: str, problem: Problem, budget: int | None, seed: int = 0,
          **options) -> Solution:
    """Runs one method and returns its answer re-scored by the simulator.

    An answer that splits a colocation group or breaks a pin is projected first
    (`regal.decode.respect_colocation`), and `extra["colocation_repaired"]` records how many
    ops that moved (0 when it conformed; absent for graphs without constraints).

    `time_limit=SECONDS` makes every method anytime. A method that takes a time limit itself
    gets it (cpsat; regal and seeded-brkga, which split it between BRKGA and the local-search
    polish as they split the budget); one that takes `should_stop` (brkga, random,
    local-search, tuned-brkga) searches until the limit, counted from this call, or until
    `budget` evaluations are spent, whichever comes first (`budget=None`: no budget); a one-shot
    heuristic (m-topo, gp-dfs, ...) just runs. Searches stop between batches of evaluations,
    so a run may end one batch (and its setup: the first population, a policy's reference
    heuristics) past the limit; the best answer found is kept. `extra["time_limit"]` records
    the limit and, for searches, `extra["stopped_by"]` ("time_limit" or "budget"). Without
    `time_limit` nothing changes: a seed and budget give the same run as before.
    """
    method = get_method(method_name)
    if not isinstance(problem, Problem):
        raise ValueError(f"problem: expected a regal.optimizers.Problem(graph, devices), got "
                         f"{type(problem).__name__}")
    check_seed(seed)
    if budget is not None:
        check_budget(budget)
        budget = int(budget)
    check_options(method_name, options)
    if options.get("initial") is not None:
        check_initial(problem, options["initial"])
    if options.get("progress") is not None and not _accepts(method, "progress"):
        options.pop("progress")
    else:
        options = {k: v for k, v in options.items() if not (k == "progress" and v is None)}
    time_limit = options.pop("time_limit", None)
    stopped = []  # what stopped the search, when not its budget
    hooked = False  # a should_stop built here for the time limit
    if time_limit is not None:
        time_limit = check_time_limit(time_limit)
        if budget is None:
            budget = UNLIMITED_BUDGET
        if _names(method, "time_limit"):
            options["time_limit"] = time_limit
        elif _names(method, "should_stop"):
            deadline = time.perf_counter() + time_limit
            asked = options.get("should_stop")

            def should_stop() -> bool:
                if time.perf_counter() >= deadline:
                    stopped.append("time_limit")
                elif asked is not None and asked():
                    stopped.append("should_stop")
                return bool(stopped)
            options["should_stop"] = should_stop
            hooked = True
    elif budget is None:
        raise ValueError(f"budget: expected a number of evaluations for method {method_name!r} "
                         "(None needs a time_limit)")
    start = time.perf_counter()
    try:
        found = method(problem, budget, seed, **options)
    except TypeError as exc:  # an option the method does not take: say so, by its name
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unknown is None or unknown.group(1) not in options:
            raise
        raise ValueError(f"method {method_name!r} takes no option {unknown.group(1)!r}") \
            from None
    wall_time = time.perf_counter() - start
    placement = found.placement
    extra = dict(found.extra)
    if problem.graph.constrained:
        placement = respect_colocation(problem.graph, np.asarray(found.placement))
        extra["colocation_repaired"] = int((placement != np.asarray(found.placement)).sum())
    rescored = score(problem, placement, found.priority, found.transfer_priority)
    if not np.isclose(found.value, rescored["value"], rtol=1e-12, atol=0.0):
        extra["reported_value"] = float(found.value)
    if time_limit is not None:
        extra["time_limit"] = time_limit
        if hooked:
            extra["stopped_by"] = stopped[0] if stopped else "budget"
    return Solution(**rescored, evaluations=int(found.evaluations), wall_time=wall_time,
                    method=method_name, seed=seed, extra=extra)
