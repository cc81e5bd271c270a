"""Every method behind one interface (docs/design.md §6): `solve(method, problem, budget, seed)`.

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
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from regal import version
from regal.decode import decode, encode, num_genes, respect_colocation
from regal.graph import ComputationGraph
from regal.sim import DeviceSpec

__all__ = ["OBJECTIVES", "Problem", "Solution", "METHODS", "REVISIONS", "register",
           "method_revision", "LIMITS_REVISION", "get_method",
           "available_methods", "solve", "score", "single_device", "round_robin",
           "roomiest_device", "one_device", "reference_solutions",
           "solve_brkga", "solve_random", "check_budget", "solution_record", "read_solution",
           "execution_order", "describe", "smallest_overflow", "check_time_limit",
           "UNLIMITED_BUDGET"]

OBJECTIVES = ("peak_memory", "makespan")


@dataclass(frozen=True, eq=False)
class Problem:
    """What to optimise: a graph, the devices, and the objective's name."""

    graph: ComputationGraph
    devices: DeviceSpec
    objective: str = "peak_memory"

    def __post_init__(self) -> None:
        if isinstance(self.devices, (int, np.integer)) and not isinstance(self.devices, bool):
            object.__setattr__(self, "devices", DeviceSpec(int(self.devices)))
        if not isinstance(self.devices, DeviceSpec):
            raise ValueError(f"devices: expected a DeviceSpec or a count, got {self.devices!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, "
                             f"got {self.objective!r}")
        if self.graph.has_pins:  # a pin must name one of these devices
            from regal.graph import check_pins
            check_pins(self.graph.names, self.graph.pinned, self.devices.count)

    @property
    def num_genes(self) -> int:
        return num_genes(self.graph.num_nodes, self.devices.count)

    def evaluate(self, keys: np.ndarray) -> np.ndarray:
        """Objective of each chromosome in a batch [k, num_genes] (one model call per row)."""
        from regal.sim import evaluate
        return evaluate(self.graph, self.devices, keys, self.objective)


@dataclass(frozen=True, eq=False)
class Solution:
    """A placement and schedule with the simulator's verdict on it."""

    placement: np.ndarray          # [n] device of each op
    priority: np.ndarray           # [n] node priority (higher runs first)
    transfer_priority: np.ndarray  # [n] priority of the tensors each op produces
    value: float                   # objective value (lower is better)
    peak: np.ndarray               # [d] peak bytes per device
    makespan: float                # µs
    feasible: bool                 # every device within its memory limit
    overflow: int = 0              # bytes over the limits, summed over devices
    objective: str = "peak_memory"
    evaluations: int = 0           # performance-model evaluations used
    wall_time: float = 0.0         # seconds
    method: str = ""
    seed: int | None = None
    extra: dict = field(default_factory=dict)

    def keys(self) -> np.ndarray:
        """The chromosome that decodes to this solution (a BRKGA warm start)."""
        return encode(self.placement, self.priority, self.transfer_priority, len(self.peak))

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("placement", "priority", "transfer_priority", "peak"):
            out[name] = np.asarray(getattr(self, name)).tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Solution":
        data = dict(data)
        data["placement"] = np.asarray(data["placement"], dtype=np.int32)
        for name in ("priority", "transfer_priority"):
            data[name] = np.asarray(data[name], dtype=np.float64)
        data["peak"] = np.asarray(data["peak"], dtype=np.int64)
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Solution":
        return cls.from_dict(json.loads(text))


# ---------------------------------------------------------------------------
# scoring


def score(problem: Problem, placement, priority, transfer_priority) -> dict:
    """The simulator's verdict as Solution fields: value, peak, makespan, feasible, overflow."""
    from regal.sim import simulate

    n = problem.graph.num_nodes
    placement = np.asarray(placement)
    if placement.shape != (n,):
        raise ValueError(f"placement: expected one device per op ({n}), got shape "
                         f"{placement.shape}")
    if not np.issubdtype(placement.dtype, np.integer):
        raise ValueError(f"placement: expected integer devices, got {placement.dtype}")
    placement = placement.astype(np.int32)
    priority = np.asarray(priority, dtype=np.float64)
    transfer_priority = np.asarray(transfer_priority, dtype=np.float64)
    result = simulate(problem.graph, problem.devices, placement, priority, transfer_priority)
    peak = np.asarray(result.peak, dtype=np.int64)
    limits = problem.devices.limits
    overflow = 0 if limits is None else int(np.maximum(peak - limits, 0).sum())
    return dict(placement=placement, priority=priority, transfer_priority=transfer_priority,
                value=float(result.objective(problem.objective)), peak=peak,
                makespan=float(result.makespan), feasible=bool(result.feasible),
                overflow=overflow, objective=problem.objective)


def _scored(problem: Problem, placement, priority, transfer_priority, **fields) -> Solution:
    return Solution(**score(problem, placement, priority, transfer_priority), **fields)


def _topological_priority(graph: ComputationGraph) -> np.ndarray:
    """Earlier in the topological order = higher priority, in [0, 1]."""
    n = graph.num_nodes
    priority = np.empty(n)
    priority[graph.topo_order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return priority


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
    return _scored(problem, placement, priority, priority, method="single-device")


def one_device(problem: Problem) -> Solution:
    """What running the whole graph on one device gives: the yardstick `regal optimize`
    prints beside its answer. The user's pins are dropped (one device holds every op anyway)
    and the device is the roomiest, so neither a pin nor a small device changes the
    yardstick; `feasible` says whether the graph fits that device's limit."""
    graph = problem.graph
    if graph.has_pins:
        graph = graph._replace(pinned=np.full(graph.num_nodes, -1, np.int32))
    limits = problem.devices.limits
    alone = DeviceSpec(1, None if limits is None else int(limits.max()),
                       problem.devices.bandwidth, problem.devices.latency)
    priority = _topological_priority(graph)
    found = _scored(Problem(graph, alone, problem.objective),
                    np.zeros(graph.num_nodes, np.int32), priority, priority,
                    method="one-device")
    return found


def reference_solutions(problem: Problem) -> list[Solution]:
    """The yardsticks `regal optimize` compares its answer with: one device, round robin."""
    return [one_device(problem), round_robin(problem)]


def round_robin(problem: Problem) -> Solution:
    """Trivial reference: the i-th op of the topological order goes to device i mod d."""
    graph = problem.graph
    priority = _topological_priority(graph)
    placement = np.empty(graph.num_nodes, dtype=np.int32)
    placement[graph.topo_order] = np.arange(graph.num_nodes) % problem.devices.count
    placement = respect_colocation(graph, placement)  # a group where most of its bytes are
    return _scored(problem, placement, priority, priority, method="round-robin")


# ---------------------------------------------------------------------------
# methods


def _solution_from_keys(problem: Problem, keys: np.ndarray, **fields) -> Solution:
    placement, priority, transfer = decode(keys, problem.graph, problem.devices)
    return _scored(problem, placement, priority, transfer, **fields)


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


def check_budget(budget) -> None:
    """ValueError unless `budget` is a whole number of evaluations >= 1: every method's
    check of its budget."""
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")


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
    "gp-dfs": "baselines.gp_dfs:solve",
    "local-search": "baselines.local_search:solve",
    "tuned-brkga": "baselines.tuned_brkga:solve",
    "m-topo": "baselines.m_topo:solve",
    "m-etf": "baselines.m_etf:solve",
    "regal": "regal.regal_method:solve_regal",
    "seeded-brkga": "regal.search.pipeline:solve_seeded_brkga",
}


# name -> revision of the method's code, "" when never revised. Bump a method's revision
# when a change alters its answers for the same options and seed: the harness keys records
# by it (`regal.harness.KEY_FIELDS`), so stored runs of the earlier code are run again
# instead of being reused, and tables leave them out (`regal.harness.current_revisions`).
REVISIONS: dict[str, str] = {}


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


def method_revision(name: str, memory_limit=None) -> str:
    """The revision of method `name`'s code ("" when never revised; `REVISIONS`), with
    `LIMITS_REVISION` added for a run under `memory_limit` (not None)."""
    revision = REVISIONS.get(name, "")
    if memory_limit is None:
        return revision
    return f"{revision}+{LIMITS_REVISION}" if revision else LIMITS_REVISION


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
    found = method(problem, budget, seed, **options)
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


# ---------------------------------------------------------------------------
# solution files


def execution_order(problem: Problem, solution: Solution) -> np.ndarray:
    """Position of every op in its device's run order, from the simulator's trace."""
    from regal.sim import trace

    tr = trace(problem.graph, problem.devices, solution.placement, solution.priority,
               solution.transfer_priority)
    start = np.asarray(tr.op_start, dtype=np.float64)
    order = np.empty(problem.graph.num_nodes, dtype=np.int64)
    for k in range(problem.devices.count):
        ops = np.flatnonzero(solution.placement == k)
        # ties (zero-cost ops at one instant) keep the simulator's id order
        ops = ops[np.lexsort((ops, start[ops]))]
        order[ops] = np.arange(len(ops))
    return order


def solution_record(problem: Problem, solution: Solution, budget: int,
                    source: str | None = None, imported: ComputationGraph | None = None) -> dict:
    """The content of solution.json: op name -> device and order, plus provenance.

    `imported`: the graph before the user's pins and colocations (`regal optimize --pin`),
    whose fingerprint is recorded too (`graph.imported_fingerprint`, only when it differs),
    so `regal apply` can match the solution to the model, which imports without them.
    """
    graph, devices = problem.graph, problem.devices
    order = execution_order(problem, solution)
    about = {"fingerprint": graph.fingerprint(), "ops": graph.num_nodes, "source": source}
    if imported is not None and imported.fingerprint() != about["fingerprint"]:
        if imported.names.tolist() != graph.names.tolist():
            raise ValueError("solution_record: `imported` has other ops than the problem's graph")
        about["imported_fingerprint"] = imported.fingerprint()
    return {
        "format": "regal-solution/1",
        "regal_version": version(),
        "graph": about,
        "devices": {"count": devices.count,
                    "memory_limit": None if devices.memory_limit is None
                    else list(devices.memory_limit),
                    "bandwidth": devices.bandwidth, "latency": devices.latency},
        "objective": problem.objective,
        "method": solution.method,
        "budget": budget,
        "time_limit": solution.extra.get("time_limit"),  # seconds (--time-limit), or None
        "seed": solution.seed,
        "result": {"value": solution.value, "peak": solution.peak.tolist(),
                   "makespan": solution.makespan, "feasible": solution.feasible,
                   "overflow": solution.overflow, "evaluations": solution.evaluations,
                   "wall_time": solution.wall_time},
        "ops": {str(name): {"device": int(solution.placement[v]), "order": int(order[v]),
                            "priority": float(solution.priority[v]),
                            "transfer_priority": float(solution.transfer_priority[v])}
                for v, name in enumerate(graph.names)},
    }


def read_solution(record: dict, problem: Problem) -> Solution:
    """A solution.json record -> Solution re-scored on `problem` (checks the graph hash).

    The record may have been edited by hand: every field used is checked, and a bad one is a
    ValueError naming the op (by name) and the field, never a TypeError or a silent cast.
    """
    from regal.io.solution import check_op_entry

    def is_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    graph, count = problem.graph, problem.devices.count
    if not isinstance(record, dict):
        raise ValueError(f"solution: expected a JSON object, got {type(record).__name__}")
    about = record.get("graph")
    if not isinstance(about, dict) or about.get("fingerprint") != graph.fingerprint():
        raise ValueError("solution: graph fingerprint differs from the graph given")
    ops = record.get("ops")
    if not isinstance(ops, dict):
        raise ValueError("solution: 'ops': expected an object of op name -> entry")
    names = [str(name) for name in graph.names]
    missing = [name for name in names if name not in ops]
    if missing:
        raise ValueError(f"solution: op {missing[0]!r} has no entry")
    rows = []
    for name in names:
        check_op_entry("solution", name, ops[name], count)
        rows.append(ops[name])
    result = record.get("result", {})
    evaluations = result.get("evaluations", 0) if isinstance(result, dict) else None
    if not is_int(evaluations) or evaluations < 0:
        raise ValueError(f"solution: 'result': expected an object with a whole number of "
                         f"evaluations, got {result!r:.40}")
    method, seed = record.get("method", ""), record.get("seed")
    if not isinstance(method, str) or not (seed is None or is_int(seed)):
        raise ValueError(f"solution: 'method' must be text and 'seed' an integer or null, got "
                         f"{method!r:.40} and {seed!r:.40}")
    placement = np.array([r["device"] for r in rows], dtype=np.int32)
    priority = np.array([r["priority"] for r in rows], dtype=np.float64)
    transfer = np.array([r["transfer_priority"] for r in rows], dtype=np.float64)
    return _scored(problem, placement, priority, transfer, method=method, seed=seed,
                   evaluations=evaluations)


# ---------------------------------------------------------------------------
# human-readable summary


def _bytes(value: float) -> str:
    from regal.units import format_bytes
    return format_bytes(value)


def _figure(objective: str, solution: Solution) -> float:
    """The objective's own figure (peak bytes or step µs), never a ranking penalty."""
    return float(max(solution.peak, default=0)) if objective == "peak_memory" \
        else float(solution.makespan)


def _over_limits(problem: Problem, solution: Solution) -> str:
    """'device 0 is 14.51 MiB over its 20 MiB limit' for the device furthest over its limit."""
    limits = problem.devices.limits
    k = int(np.argmax(np.asarray(solution.peak) - limits))
    return (f"device {k} is {_bytes(int(solution.peak[k]) - int(limits[k]))} over its "
            f"{_bytes(limits[k])} limit")


def describe(problem: Problem, solution: Solution, references: list[Solution]) -> list[str]:
    """Lines that `regal optimize` prints: the peak memory (per device, against its limit)
    and the step time (makespan), each beside the whole graph on one device (`one_device`),
    whether the answer fits and by how much it does not, and its gain over each reference.
    Each figure is a peak or a time, never a ranking penalty, and a figure over a limit says
    whose and which. Every figure in human units (KiB/MiB/GiB, us/ms/s)."""
    from regal.units import format_change, format_duration_us
    limits = problem.devices.limits
    one = next((ref for ref in references if ref.method == "one-device"), None)
    objective = problem.objective.replace("_", " ")
    lines = [f"method {solution.method}, seed {solution.seed}: {solution.evaluations:,} "
             f"evaluations in {solution.wall_time:.1f} s, objective {objective}"]

    def against_one(value: float, reference: float, human) -> str:
        change = format_change(value, reference)
        return f" ({change + ' ' if change else ''}vs one device {human(reference)})"

    highest = max(solution.peak, default=0)
    peak_lines = [f"peak memory {_bytes(highest)}"
                  + ("" if one is None else against_one(highest, max(one.peak), _bytes))]
    for k, device_peak in enumerate(solution.peak):
        limit = ""
        if limits is not None:
            limit = f" / limit {_bytes(limits[k])}"
            if device_peak > limits[k]:
                limit += f", OVER by {_bytes(int(device_peak) - int(limits[k]))}"
        ops = int((solution.placement == k).sum())
        peak_lines.append(f"  device {k}: peak {_bytes(device_peak)}{limit} ({ops:,} ops)")
    step_lines = [f"step time {format_duration_us(solution.makespan)}"
                  + ("" if one is None else against_one(solution.makespan, one.makespan,
                                                        format_duration_us))]
    # the objective's figure first
    lines += peak_lines + step_lines if problem.objective == "peak_memory" else \
        step_lines + peak_lines
    if one is not None and not one.feasible:
        lines.append(f"one device: the whole graph needs {_bytes(max(one.peak))}, over the "
                     f"largest device's {_bytes(limits.max())} limit (its step time assumes "
                     "the memory were there)")
    if solution.feasible:
        lines.append("feasible: yes" if limits is not None else
                     "feasible: yes (no memory limits)")
    else:
        least = smallest_overflow([solution, *references])
        lines.append(f"feasible: NO - {_over_limits(problem, solution)} "
                     f"({_bytes(solution.overflow)} over the limits, summed over devices)")
        lines.append(f"smallest overflow found: {_bytes(least.overflow)} ({least.method})")
    human = _bytes if problem.objective == "peak_memory" else format_duration_us
    for ref in references:
        if ref.method == "one-device":
            continue  # beside every figure above
        figure, mine = _figure(problem.objective, ref), _figure(problem.objective, solution)
        if ref.feasible and solution.feasible or problem.objective == "peak_memory":
            gain = f"{(figure - mine) / figure * 100:+.2f}%" if figure else "+0.00%"
        else:  # a step time over a limit is no step time to compare with
            gain = "n/a"
        note = "" if ref.feasible else f", does not fit: {_over_limits(problem, ref)}"
        lines.append(f"improvement over {ref.method} ({human(figure)}{note}): {gain}")
    return lines


def smallest_overflow(candidates: list[Solution]) -> Solution:
    """The candidate that overflows the memory limits least (ties: the lower objective; the
    one-device yardstick, which runs on other devices than the problem's, is left out)."""
    candidates = [s for s in candidates if s.method != "one-device"]
    return min(candidates, key=lambda s: (s.overflow, s.value))
