"""Every method behind one interface (docs/design.md §6): `solve(method, problem, budget, seed)`.

A method is a function `method(problem, budget, seed, **options) -> Solution`
(options may include `progress(evaluations, best)`). `METHODS` maps a name to
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

from regal.decode import decode, encode, num_genes, respect_colocation
from regal.graph import ComputationGraph
from regal.sim import DeviceSpec

__all__ = ["OBJECTIVES", "Problem", "Solution", "METHODS", "register", "get_method",
           "available_methods", "solve", "score", "single_device", "round_robin",
           "solve_brkga", "solve_random", "solution_record", "read_solution",
           "execution_order", "describe", "smallest_overflow"]

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


def single_device(problem: Problem) -> Solution:
    """Trivial reference: every op on device 0, run in topological order."""
    priority = _topological_priority(problem.graph)
    placement = np.zeros(problem.graph.num_nodes, dtype=np.int32)
    placement = respect_colocation(problem.graph, placement)  # pinned groups go to their pin
    return _scored(problem, placement, priority, priority, method="single-device")


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
                alpha=None, beta=None, initial=None,
                progress: Callable[[int, float], None] | None = None) -> Solution:
    """BRKGA over the chromosome of docs/design.md §5 (uniform keys by default: BRKGA-5K is budget=5000).

    The GA's array work runs compiled (`regal.breed`): the same run, bit for bit, as
    brkga's numpy backend, at a fraction of its time."""
    from brkga import BRKGA
    from regal.breed import CompiledBackend

    ga = BRKGA(problem.num_genes, population_size=population_size,
               elite_fraction=elite_fraction, mutant_fraction=mutant_fraction,
               elite_bias=elite_bias, alpha=alpha, beta=beta, seed=seed,
               backend=CompiledBackend())
    callback = None if progress is None else (lambda _gen, used, best: progress(used, best))
    result = ga.run(problem.evaluate, budget, initial=_warm_start(problem, initial),
                    callback=callback)
    return _solution_from_keys(problem, result.best_keys, evaluations=result.evaluations,
                               extra={"history": result.history.tolist(),
                                      "population_size": population_size})


def solve_random(problem: Problem, budget: int, seed: int, *, batch_size: int = 100,
                 progress: Callable[[int, float], None] | None = None) -> Solution:
    """Random search: `budget` uniform chromosomes, scored in batches; keeps the best."""
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    rng = np.random.default_rng(seed)
    best_keys, best, used = None, np.inf, 0
    while used < budget:
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
    "seeded-brkga": "baselines.seeded_brkga:solve",
}


def register(name: str, method: Callable | str) -> None:
    """Adds a method: a function, or a lazy "module:function" path."""
    METHODS[name] = method


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


def solve(method_name: str, problem: Problem, budget: int, seed: int = 0, **options) -> Solution:
    """Runs one method and returns its answer re-scored by the simulator.

    An answer that splits a colocation group or breaks a pin is projected first
    (`regal.decode.respect_colocation`), and `extra["colocation_repaired"]` records how many
    ops that moved (0 when it conformed; absent for graphs without constraints).
    """
    method = get_method(method_name)
    if options.get("progress") is not None and not _accepts(method, "progress"):
        options.pop("progress")
    else:
        options = {k: v for k, v in options.items() if not (k == "progress" and v is None)}
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
    return Solution(**rescored, evaluations=int(found.evaluations), wall_time=wall_time,
                    method=method_name, seed=seed, extra=extra)


# ---------------------------------------------------------------------------
# solution files


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("regal")
    except Exception:  # not installed: running from a source tree
        return "unknown"


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
                    source: str | None = None) -> dict:
    """The content of solution.json: op name -> device and order, plus provenance."""
    graph, devices = problem.graph, problem.devices
    order = execution_order(problem, solution)
    return {
        "format": "regal-solution/1",
        "regal_version": _version(),
        "graph": {"fingerprint": graph.fingerprint(), "ops": graph.num_nodes, "source": source},
        "devices": {"count": devices.count,
                    "memory_limit": None if devices.memory_limit is None
                    else list(devices.memory_limit),
                    "bandwidth": devices.bandwidth, "latency": devices.latency},
        "objective": problem.objective,
        "method": solution.method,
        "budget": budget,
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


def _value(objective: str, value: float) -> str:
    return _bytes(value) if objective == "peak_memory" else f"{value:,.1f} us"


def describe(problem: Problem, solution: Solution, references: list[Solution]) -> list[str]:
    """Lines that `regal optimize` prints: per-device peaks, makespan, feasibility, gains."""
    limits = problem.devices.limits
    lines = [f"method {solution.method}, seed {solution.seed}: {solution.evaluations} "
             f"evaluations in {solution.wall_time:.1f} s",
             f"objective {problem.objective}: {_value(problem.objective, solution.value)}"]
    for k, peak in enumerate(solution.peak):
        limit = "" if limits is None else f" / limit {_bytes(limits[k])}"
        ops = int((solution.placement == k).sum())
        lines.append(f"  device {k}: peak {_bytes(peak)}{limit} ({ops} ops)")
    lines.append(f"makespan {solution.makespan:,.1f} us")
    if solution.feasible:
        lines.append("feasible: yes")
    else:
        least = smallest_overflow([solution, *references])
        lines.append(f"feasible: NO - overflow {_bytes(solution.overflow)} over the memory "
                     "limits (summed over devices)")
        lines.append(f"smallest overflow found: {_bytes(least.overflow)} ({least.method})")
    for ref in references:
        gain = (ref.value - solution.value) / ref.value * 100 if ref.value else 0.0
        note = "" if ref.feasible else ", infeasible"
        lines.append(f"improvement over {ref.method} ({_value(problem.objective, ref.value)}"
                     f"{note}): {gain:+.2f}%")
    return lines


def smallest_overflow(candidates: list[Solution]) -> Solution:
    """The candidate that overflows the memory limits least (ties: the lower objective)."""
    return min(candidates, key=lambda s: (s.overflow, s.value))
