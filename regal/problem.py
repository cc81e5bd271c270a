"""What to optimise and what an answer is: `Problem` (graph, devices, objective), `Solution`
(a placement and schedule with the simulator's verdict on it) and `score`, the verdict itself.
Every method, the harness and the CLI share these (docs/design.md §6)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from regal.decode import encode, num_genes
from regal.graph import ComputationGraph
from regal.sim import DeviceSpec

__all__ = ["OBJECTIVES", "Problem", "Solution", "score", "scored"]

OBJECTIVES = ("peak_memory", "makespan")


@dataclass(frozen=True, eq=False)
class Problem:
    """What to optimise: a graph, the devices, and the objective's name."""

    graph: ComputationGraph
    devices: DeviceSpec
    objective: str = "peak_memory"

    def __post_init__(self) -> None:
        if not isinstance(self.graph, ComputationGraph):
            raise ValueError(f"graph: expected a ComputationGraph (regal.io.load_graph reads "
                             f"one from a file), got {type(self.graph).__name__}")
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
        for name in ("value", "makespan"):  # "Infinity" as `to_json` spells it
            if isinstance(data.get(name), str):
                data[name] = float(data[name])
        return cls(**data)

    def to_json(self) -> str:
        """Standard JSON: an infinite value (a makespan over the limits) is the string
        "Infinity" (regal.files.json_text), which `from_json` reads back."""
        from regal.files import json_text
        return json_text(self.to_dict())

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


def scored(problem: Problem, placement, priority, transfer_priority, **fields) -> Solution:
    return Solution(**score(problem, placement, priority, transfer_priority), **fields)
