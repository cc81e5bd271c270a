"""The reference solution the policy's actions are relative to (numpy only, no TensorFlow).

Why: devices are interchangeable, so a per-device action has nothing to name a device by,
and a per-op action repeated over an op's `d` affinity keys cannot move the op (the keys
stay exchangeable: argmax picks each device with probability 1/d whatever their Beta).
A reference placement breaks the tie without breaking the symmetry: every op's devices
are named by where they sit relative to its reference device, so "stay", "move to the
next device" and "avoid" mean the same thing whatever the devices are called.

Per (graph, devices, objective) the reference is the best, by the simulator's score, of a
few cheap heuristics (`CANDIDATES`; each costs one model evaluation, counted in the
method's budget): a memory-balanced contiguous split of the topological order
(`regal.search.starts.balanced_runs`), the same split ordered depth-first, m-topo and gp-dfs
(through `regal.optimizers.solve`).

Canonical labels: the reference's devices are relabelled by first use in the topological
order (label 0 = the device of the first op in `graph.topo_order`; unused devices take the
remaining labels in id order), so that relabelling the heuristics' devices changes nothing.
`device_of_label[L]` remembers the actual device behind label L (pins and per-device memory
limits make devices distinguishable; the mapping keeps them where the reference put them).

Slots: for op `v` with canonical reference label `c(v)`, slot `j` is the device with label
`(c(v) + j) mod d`: slot 0 = its reference device, slot 1 = the next device in first-use
order (for a contiguous split: the next pipeline stage), slot d-1 = the previous one.
`gene_order` maps a chromosome in slot space to the device-space chromosome that
`regal.decode` reads; BRKGA searches in slot space, so the whole run is label-invariant.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from regal.decode import order_priority
from regal.graph import ComputationGraph

__all__ = ["Reference", "CANDIDATES", "compute_reference", "reference_for", "as_device_spec",
           "canonical_labels", "order_keys", "align_labels"]

CANDIDATES = ("balanced-topo", "balanced-dfs", "m-topo", "gp-dfs")


def as_device_spec(devices):
    """A `regal.sim.DeviceSpec` from a DeviceSpec, a count, or a DeviceSpec-like object."""
    from regal.sim import DeviceSpec

    if isinstance(devices, DeviceSpec):
        return devices
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        return DeviceSpec(int(devices))
    count = getattr(devices, "count", None)
    if count is None:
        raise ValueError(f"devices: cannot read a device count from {devices!r}")
    return DeviceSpec(int(count), memory_limit=getattr(devices, "memory_limit", None))


def canonical_labels(graph: ComputationGraph, placement: np.ndarray, d: int) -> np.ndarray:
    """`label[device]`: devices numbered by first use along `graph.topo_order`; devices no op
    uses follow in id order."""
    placement = np.asarray(placement)
    first_seen = placement[graph.topo_order]
    _, first = np.unique(first_seen, return_index=True)
    used = first_seen[np.sort(first)]
    unused = np.setdiff1d(np.arange(d), used)
    label = np.empty(d, np.int64)
    label[np.concatenate([used, unused]).astype(np.int64)] = np.arange(d)
    return label


def order_keys(priority: np.ndarray) -> np.ndarray:
    """The order a priority vector runs ops in (higher first, ties to the lower id, as the
    simulator breaks them) as distinct keys `(rank + 0.5) / n` in (0, 1), 1 - 0.5/n first."""
    priority = np.asarray(priority, np.float64)
    n = len(priority)
    ascending = np.lexsort((-np.arange(n), priority))  # last = highest priority, lowest id
    keys = np.empty(n)
    keys[ascending] = (np.arange(n) + 0.5) / n
    return keys


def align_labels(reference_labels: np.ndarray, placement: np.ndarray, d: int) -> np.ndarray:
    """Canonical labels of `placement` renamed to agree with `reference_labels` on as many
    ops as possible (an assignment on the d x d overlap of two canonical labellings, so the
    result does not depend on either's device names). Returns each op's aligned label."""
    from scipy.optimize import linear_sum_assignment

    overlap = np.zeros((d, d), np.int64)
    np.add.at(overlap, (np.asarray(placement, np.int64), np.asarray(reference_labels, np.int64)), 1)
    rows, cols = linear_sum_assignment(-overlap)
    rename = np.empty(d, np.int64)
    rename[rows] = cols
    return rename[np.asarray(placement, np.int64)]


@dataclass(frozen=True, eq=False)
class Reference:
    """One graph's reference solution in canonical labels, and what the policy reads off it."""

    labels: np.ndarray           # [n] int64 canonical reference label of each op
    device_of_label: np.ndarray  # [d] int64 the problem's device behind each label
    priority: np.ndarray         # [n] order keys in (0, 1) (`order_keys`), higher runs first
    transfer: np.ndarray         # [n] order keys of the transfer priorities
    peak: np.ndarray             # [d] float64 peak bytes per label
    value: float                 # the reference's objective value
    source: str                  # which candidate won
    evaluations: int             # model evaluations spent choosing it
    seeds: np.ndarray            # [m, n*(d+2)] device-space chromosomes of every candidate, best first

    @property
    def num_devices(self) -> int:
        return len(self.device_of_label)

    @property
    def placement(self) -> np.ndarray:
        """The reference placement in the problem's devices."""
        return self.device_of_label[self.labels].astype(np.int32)

    def slot_devices(self) -> np.ndarray:
        """`[n, d]`: the problem's device behind slot j of op v."""
        d = self.num_devices
        return self.device_of_label[(self.labels[:, None] + np.arange(d)) % d]

    def gene_order(self) -> np.ndarray:
        """Index `g` with `device_keys = slot_keys[..., g]` (priority/transfer blocks unmoved)."""
        n, d = len(self.labels), self.num_devices
        slot_devices = self.slot_devices()
        order = np.arange(n * (d + 2))
        rows = np.arange(n)[:, None] * d
        order[(rows + slot_devices).ravel()] = (rows + np.arange(d)).ravel()
        return order

    def slot_space(self, device_keys: np.ndarray) -> np.ndarray:
        """Device-space chromosomes -> slot space (the inverse of `gene_order`)."""
        keys = np.asarray(device_keys, np.float64)
        out = np.empty_like(keys)
        out[..., self.gene_order()] = keys
        return out

    def target_slots(self, placement: np.ndarray) -> np.ndarray:
        """Each op's slot under another placement whose labels are first canonicalised, then
        aligned to the reference's (`align_labels`): the supervised target of a solution."""
        d = self.num_devices
        aligned = align_labels(self.labels, np.asarray(placement, np.int64), d)
        return (aligned - self.labels) % d


def _candidate_solutions(problem) -> list:
    from regal.optimizers import Solution, score, solve
    from regal.search.starts import balanced_runs

    graph, d = problem.graph, problem.devices.count
    out = []
    topo = order_priority(graph.topo_order)
    runs = balanced_runs(graph, d)
    out.append(Solution(**score(problem, runs, topo, topo), evaluations=1,
                        method="balanced-topo"))
    gp = solve("gp-dfs", problem, 1, 0)
    out.append(Solution(**score(problem, runs, gp.priority, gp.transfer_priority),
                        evaluations=1, method="balanced-dfs"))
    out.append(solve("m-topo", problem, 1, 0))
    out.append(gp)
    return out


def compute_reference(problem) -> Reference:
    """The best of `CANDIDATES` for `problem` (ties: the earlier candidate)."""
    from regal.decode import encode

    candidates = _candidate_solutions(problem)
    ranked = sorted(range(len(candidates)), key=lambda i: (candidates[i].value, i))
    best = candidates[ranked[0]]
    graph, d = problem.graph, problem.devices.count
    label = canonical_labels(graph, best.placement, d)
    device_of_label = np.argsort(label)
    seeds = np.stack([encode(np.asarray(candidates[i].placement, np.int64),
                             order_keys(candidates[i].priority),
                             order_keys(candidates[i].transfer_priority), d) for i in ranked])
    return Reference(labels=label[np.asarray(best.placement, np.int64)],
                     device_of_label=device_of_label,
                     priority=order_keys(best.priority), transfer=order_keys(best.transfer_priority),
                     peak=np.asarray(best.peak, np.float64)[device_of_label],
                     value=float(best.value), source=best.method,
                     evaluations=int(sum(c.evaluations for c in candidates)), seeds=seeds)


_CACHE: dict[tuple, Reference] = {}


def _counts_digest(graph: ComputationGraph) -> str:
    """A hash of the cost model's op counts (op_flops, op_bytes), which set each op's time
    on devices with speeds but which `ComputationGraph.fingerprint` leaves out."""
    h = hashlib.sha256()
    for counts in (graph.op_flops, graph.op_bytes):
        h.update(b"-" if counts is None else np.ascontiguousarray(counts).tobytes())
    return h.hexdigest()[:16]
_CACHE_SIZE = 4096


def reference_for(graph: ComputationGraph, devices, objective: str = "peak_memory") -> Reference:
    """`compute_reference`, cached per (graph fingerprint, device spec, objective) and process."""
    from regal.optimizers import Problem

    spec = as_device_spec(devices)
    limits = None if spec.memory_limit is None else tuple(int(x) for x in spec.limits)
    key = (graph.fingerprint(), spec.count, limits, *spec.speed_key(), objective)
    if spec.has_speeds:   # then the op counts set the durations, and the fingerprint omits them
        key += (_counts_digest(graph),)
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))  # oldest first
        _CACHE[key] = compute_reference(Problem(graph, spec, objective))
    return _CACHE[key]
