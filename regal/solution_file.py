"""solution.json: the file `regal optimize --out` writes (op name -> device and order, with
provenance) and reading one back against a problem, every field checked."""

from __future__ import annotations

import numpy as np

from regal import version
from regal.graph import ComputationGraph
from regal.problem import Problem, Solution, scored

__all__ = ["execution_order", "solution_record", "read_solution"]


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


def _speeds_record(devices) -> dict:
    """The devices' speeds for solution.json, only when set (a file without them reads as
    devices at the cost model's reference speed): `flops` FLOP/µs and `memory_bandwidth`
    bytes/µs per device (the device's own memory; `bandwidth` is the link), and the presets
    they came from."""
    if not devices.has_speeds:
        return {}
    record = {"flops": None if devices.flops is None else list(devices.flops),
              "memory_bandwidth": None if devices.memory_bandwidth is None
              else list(devices.memory_bandwidth)}
    if devices.presets is not None:
        record["presets"] = list(devices.presets)
    return record


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
                    "bandwidth": devices.bandwidth, "latency": devices.latency,
                    **_speeds_record(devices)},
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


def read_solution(record: dict, problem: Problem, imported: str | None = None) -> Solution:
    """A solution.json record -> Solution re-scored on `problem` (checks the graph hash).
    `imported`: the fingerprint of `problem`'s graph before --pin / --colocate, so that a
    solution of the same graph under other constraints is named as such.

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
        base = graph.fingerprint() if imported is None else imported
        if isinstance(about, dict) and base in (about.get("fingerprint"),
                                                about.get("imported_fingerprint")):
            raise ValueError("solution: made for this graph under other --pin / --colocate "
                             "constraints; give the ones of the run that wrote it")
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
    return scored(problem, placement, priority, transfer, method=method, seed=seed,
                   evaluations=evaluations)
