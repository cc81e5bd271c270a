"""Public entry points of the performance model: simulate, evaluate, trace.

Inputs are checked here, in numpy, before any compiled code runs, so a bad argument is a
`ValueError` naming it rather than a crash or a silent wrong answer inside the kernel.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import numba
import numpy as np

from regal.sim import kernel
from regal.sim.devices import DeviceSpec
from regal.sim.speeds import op_durations

__all__ = ["OBJECTIVES", "SimResult", "Trace", "simulate", "evaluate", "trace",
           "infeasible_offset", "objective_values", "ranking_limits"]

OBJECTIVES = ("peak_memory", "makespan")

_PREPARED: "OrderedDict[tuple, tuple]" = OrderedDict()
_PREPARED_MAX = 8


class _Prepared(NamedTuple):
    static: tuple        # the kernel's arrays (`kernel.prepare`)
    offset: float        # `infeasible_offset`
    constrained: bool    # graph.constrained


def _prepared(graph, devices: DeviceSpec) -> _Prepared:
    """What every call on (graph, device count, links, speeds) reads, cached for the last few:
    on a graph of a hundred ops a climb's call simulates in tens of microseconds, and
    recomputing these took as long."""
    key = (id(graph), devices.count, *devices.speed_key())
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is graph:
        _PREPARED.move_to_end(key)
        return hit[1]
    prepared = _Prepared(kernel.prepare(graph, devices), infeasible_offset(graph, devices),
                         bool(graph.constrained))
    _PREPARED[key] = (graph, prepared)  # holding the graph keeps id(graph) unique
    if len(_PREPARED) > _PREPARED_MAX:
        _PREPARED.popitem(last=False)
    return prepared


def _check_devices(devices) -> DeviceSpec:
    if not isinstance(devices, DeviceSpec):
        raise ValueError(f"devices: expected a regal.sim.DeviceSpec, got {type(devices).__name__}")
    return devices


def infeasible_offset(graph, devices: DeviceSpec) -> float:
    """sum(compute_cost) + (d-1) * sum over tensors of (latency + size/bandwidth) (SIM_RULES 11);
    with device speeds, each op's longest time on any device in place of its compute_cost.

    An upper bound on any list schedule's makespan, so infeasible solutions rank last.
    """
    transfers = devices.transfer_time(graph.tensor_size)
    durations = op_durations(graph, devices)
    compute = graph.compute_cost if durations is None else durations.max(axis=0)
    return float(np.sum(compute)) + (devices.count - 1) * float(np.sum(transfers))


def ranking_limits(graph, devices: DeviceSpec, objective: str) -> np.ndarray | None:
    """The memory limits that change how `objective` ranks solutions of `graph` (SIM_RULES
    11): the devices' limits, or None when there are none, when each is at or above every
    byte the graph holds (no device can reach it, so every solution fits), or when, under
    peak memory, one limit holds for every device (a solution then fits iff its peak does,
    so the ranking is the one without it). Constructions, starts and features built for
    these limits only keep a limit that does not bind from changing the answer."""
    limits = devices.limits
    if limits is None or objective == "peak_memory" and bool(np.all(limits == limits[0])):
        return None
    everything = int(np.sum(graph.tensor_size, dtype=np.int64)
                     + np.sum(graph.temporary_memory, dtype=np.int64)
                     + np.sum(graph.persistent_memory, dtype=np.int64))
    return None if bool(np.all(limits >= everything)) else limits


def objective_values(name: str, peaks: np.ndarray, makespans: np.ndarray,
                     devices: DeviceSpec, offset: float) -> np.ndarray:
    """Objective of each row of `peaks` [pop, d] with `makespans` [pop] (SIM_RULES 11)."""
    peaks = np.asarray(peaks, dtype=np.int64)
    makespans = np.asarray(makespans, dtype=np.float64)
    if name not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {name!r}")
    limits = devices.limits
    if name == "peak_memory":
        highest = peaks.max(axis=1).astype(np.float64)
        if limits is None:
            return highest
        # a fit ranks ahead of every misfit: a fit's value is at most the largest limit, a
        # misfit's is above it by its worst excess; under one limit for every device this is
        # max(peak) again, so such a limit changes no ranking
        excess = (peaks - limits).max(axis=1)
        return np.where(excess <= 0, highest, float(limits.max()) + excess.astype(np.float64))
    if limits is None:
        return makespans.copy()
    overflow = np.maximum(peaks - limits, 0).sum(axis=1)
    total = float(limits.sum(dtype=np.float64))  # int64 could wrap over many devices
    if total > 0:
        penalised = makespans * (1.0 + overflow / total) + offset
    else:   # every limit 0: any overflow is infinitely far over (inf, not 0 * inf = NaN)
        penalised = np.full(len(makespans), np.inf)
    return np.where(overflow == 0, makespans, penalised)


@dataclass(frozen=True)
class SimResult:
    """Per-device peak bytes, makespan (µs), feasibility under the devices' memory limits."""

    peak: np.ndarray
    makespan: float
    feasible: bool
    devices: DeviceSpec = field(repr=False)
    offset: float = field(repr=False)

    def objective(self, name: str = "peak_memory") -> float:
        """'peak_memory' = max_k peak[k], 'makespan' = makespan; each ranks a solution over a
        memory limit behind every one within them (SIM_RULES 11)."""
        return float(objective_values(name, self.peak[None, :], np.array([self.makespan]),
                                      self.devices, self.offset)[0])


@dataclass(frozen=True)
class Trace:
    """What happened when: per op, per transfer, and each device's memory step curve.

    memory[k] = (times, bytes): live bytes on device k after each change, in event order;
    several points may share a time (an allocation and a free at one instant), and the value
    holds until the next point. max(bytes) == result.peak[k]. The curves are held once,
    device after device: device k's points are `memory_times[memory_ptr[k]:memory_ptr[k +
    1]]` and `memory_live[...]` (a move ranker reads them so), and `memory` are views of them.
    """

    result: SimResult
    op_device: np.ndarray       # [n] int32
    op_start: np.ndarray        # [n] float64 µs
    op_end: np.ndarray          # [n] float64 µs
    transfer_tensor: np.ndarray  # [m] int32
    transfer_src: np.ndarray    # [m] int32
    transfer_dst: np.ndarray    # [m] int32
    transfer_start: np.ndarray  # [m] float64 µs
    transfer_end: np.ndarray    # [m] float64 µs
    memory_ptr: np.ndarray      # [d + 1] int64
    memory_times: np.ndarray    # float64 µs, device after device
    memory_live: np.ndarray     # int64 bytes, the same points

    @property
    def memory(self) -> tuple:
        """d pairs (times float64, bytes int64): each device's curve (views)."""
        ptr = self.memory_ptr
        return tuple((self.memory_times[a:b], self.memory_live[a:b])
                     for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist()))


def _check_placement(placement, n: int, d: int) -> np.ndarray:
    arr = np.asarray(placement)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"placement: expected one device per op ({n}), got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"placement: expected integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            v = int(np.flatnonzero(bad)[0])
            raise ValueError(f"placement: op {v}: expected an integer device, got {arr[v]}")
    bad = (arr < 0) | (arr >= d)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise ValueError(f"placement: op {v}: device {arr[v]} is outside 0..{d - 1}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _check_priority(name: str, values, n: int) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers, got {values!r:.60}") from None
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name}: expected one value per op ({n}), got shape {arr.shape}")
    bad = np.isnan(arr)
    if bad.any():
        raise ValueError(f"{name}: op {int(np.flatnonzero(bad)[0])} is NaN")
    return np.ascontiguousarray(arr)


def _check_constraints(graph, dev: np.ndarray, d: int, constrained: bool) -> None:
    """SIM_RULES 13: pins within 0..d-1; every op on its group leader's device and its pin."""
    from regal.decode import colocation_violation
    from regal.graph import check_pins

    if not constrained:
        return
    check_pins(graph.names, graph.pinned, d)
    bad = colocation_violation(graph, dev)
    if bad is not None:
        raise ValueError(f"placement: {bad[1]}")


def _run_one(graph, devices, placement, priority, transfer_priority, record: bool):
    devices = _check_devices(devices)
    n, d = graph.num_nodes, devices.count
    dev = _check_placement(placement, n, d)
    prepared = _prepared(graph, devices)
    _check_constraints(graph, dev, d, prepared.constrained)
    prio = _check_priority("priority", priority, n)
    tprio = _check_priority("transfer_priority", transfer_priority, n)
    makespan, peak, work = kernel.simulate_one(prepared.static, d, dev, prio, tprio, record)
    if makespan < 0:
        raise RuntimeError("simulator bug: not every op ran; please report the graph")
    limits = devices.limits
    feasible = True if limits is None else bool(np.all(peak <= limits))
    result = SimResult(peak=peak, makespan=float(makespan), feasible=feasible,
                       devices=devices, offset=prepared.offset)
    return result, dev, work


def simulate(graph, devices: DeviceSpec, placement, priority, transfer_priority) -> SimResult:
    """Runs the performance model on one solution (arrays indexed like graph.names)."""
    result, _, _ = _run_one(graph, devices, placement, priority, transfer_priority, False)
    return result


def trace(graph, devices: DeviceSpec, placement, priority, transfer_priority) -> Trace:
    """`simulate` with the schedule and memory curves recorded (same kernel, same numbers)."""
    result, dev, work = _run_one(graph, devices, placement, priority, transfer_priority, True)
    counters = work[kernel.W_COUNTERS]
    m = int(counters[kernel._TRANSFERS])
    points = int(counters[kernel._MEM_EVENTS])
    tensor = work[kernel.W_TR_TENSOR][:m].copy()
    t = graph.num_tensors
    mem_t = work[kernel.W_MEM_T][:points]
    mem_d = work[kernel.W_MEM_D][:points]
    mem_v = work[kernel.W_MEM_V][:points]
    # each device's points in event order: one stable sort by device, cut at the counts
    by_device = np.argsort(mem_d, kind="stable")
    ptr = np.zeros(devices.count + 1, np.int64)
    np.cumsum(np.bincount(mem_d, minlength=devices.count), out=ptr[1:])
    return Trace(result=result, op_device=dev, op_start=work[kernel.W_OP_START].copy(),
                 op_end=work[kernel.W_OP_END].copy(), transfer_tensor=tensor,
                 transfer_src=dev[graph.tensor_producer[tensor]].astype(np.int32),
                 transfer_dst=work[kernel.W_COPY_DEV][t:t + m].copy(),
                 transfer_start=work[kernel.W_TR_START][:m].copy(),
                 transfer_end=work[kernel.W_TR_END][:m].copy(), memory_ptr=ptr,
                 memory_times=mem_t[by_device], memory_live=mem_v[by_device])


def evaluate(graph, devices: DeviceSpec, keys, objective: str = "peak_memory",
             threads: int | None = None, return_details: bool = False):
    """Objective of every chromosome in `keys` [population, n*(d+2)] (SIM_RULES 12-13).

    Decoding and simulation run compiled, in parallel over `threads` (default: numba's
    current thread count). With `return_details`, also returns peaks [pop, d] and makespans.
    """
    devices = _check_devices(devices)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    n, d = graph.num_nodes, devices.count
    genes = n * (d + 2)
    try:
        keys = np.ascontiguousarray(keys, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("keys: expected a [population, genes] array of numbers") from None
    if keys.ndim != 2 or keys.shape[1] != genes:
        raise ValueError(f"keys: expected shape [population, {genes}] ({n} ops x ({d} devices"
                         f" + 2)), got {keys.shape}")
    if keys.size and np.isnan(keys.min()):  # min is NaN iff a key is: one pass, no mask
        i, j = np.argwhere(np.isnan(keys))[0]
        raise ValueError(f"keys: individual {i}, gene {j} is NaN")
    max_threads = numba.config.NUMBA_NUM_THREADS
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                or not 1 <= threads <= max_threads):
        raise ValueError(f"threads: expected an integer in 1..{max_threads}, got {threads!r}")
    pop = keys.shape[0]
    peaks = np.empty((pop, d), dtype=np.int64)
    makespans = np.empty(pop, dtype=np.float64)
    prepared = _prepared(graph, devices)
    if prepared.constrained:
        from regal.graph import check_pins
        check_pins(graph.names, graph.pinned, d)
    if pop:
        previous = numba.get_num_threads()
        use = previous if threads is None else int(threads)
        if use != previous:
            numba.set_num_threads(use)
        try:
            if prepared.constrained:  # SIM_RULES 13: groups decided by their leader's row or pin
                kernel.evaluate_batch_grouped(prepared.static, graph.colocation, graph.pinned, d,
                                              keys, min(pop, use), peaks, makespans)
            else:
                kernel.evaluate_batch(prepared.static, d, keys, min(pop, use), peaks, makespans)
        finally:
            if use != previous:
                numba.set_num_threads(previous)
        if (makespans < 0).any():
            raise RuntimeError("simulator bug: not every op ran; please report the graph")
    values = objective_values(objective, peaks, makespans, devices, prepared.offset)
    if return_details:
        return values, peaks, makespans
    return values
