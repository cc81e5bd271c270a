"""Proven lower bounds on the step time (makespan, SIM_RULES 9) of every placement and order.

`step_time_bound(graph, devices)` is the max of three arguments, each valid for EVERY
placement that honours the graph's colocation groups and pins and every priority order, under
the rules of regal/sim/SIM_RULES.md ([Rn] below), with or without memory limits (a limit only
takes placements away). An op's duration on a device is its cost there [R3]; op v "may run"
on every device, or only on its pin.

1. critical_path: op v is ready only once each predecessor (data or control) has finished
   [R2]; a transfer in between only adds time [R5]. So along any path of the graph the ops run
   one after another, each for at least its least duration over the devices it may run on,
   and the last finishes by the makespan [R9]: the longest such path is a bound.
2. work: each device runs one op at a time [R3], so the makespan is at least each device's
   busy time, and so at least their mean: the sum over ops of their least durations, / d.
3. one_device: the ops of one colocation group share a device, and the ops pinned to one
   device run there: each set runs one op at a time on one device, so the makespan is at
   least its least total duration over the devices it may use.

Why: the step-time searches had no certificate (`regal optimize` printed one for peak memory
only). On the synthetic test split under memory limits the best-known step times are a
median 0% (2 devices) and 2.1% (4 devices) above this bound: the answers are proven close to
optimal there (experiments/certified_step_time.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["StepBound", "step_time_bound", "ARGUMENTS", "RELATIVE_SLACK", "PROVEN_TOLERANCE"]

ARGUMENTS = {
    "critical_path": "the longest path of least op durations",
    "work": "the least total op duration / devices",
    "one_device": "the least total duration of a group, or of the ops pinned to a device",
}

# float sums of durations in another order than the simulator's: a bound this much below its
# exact value can never pass a schedule's makespan by rounding alone
RELATIVE_SLACK = 1e-9
# a step time at most this far above the bound (relative) equals the optimum: the bound's own
# slack plus as much again for the makespan's float sums, so a step time that meets its
# bound reads "proven optimal" wherever a certificate is printed or counted
PROVEN_TOLERANCE = 2 * RELATIVE_SLACK


@dataclass(frozen=True)
class StepBound:
    """A lower bound on the step time in µs; `source` names the argument that gave `value`
    (a key of `components`, which holds every argument's value)."""

    value: float
    source: str
    components: dict[str, float] = field(default_factory=dict)


def _durations(graph, devices) -> np.ndarray:
    """[d, n] op v's time on device p [R3]; inf where v is pinned elsewhere."""
    from regal.sim.speeds import op_durations

    d = devices.count
    durations = op_durations(graph, devices)
    if durations is None:
        durations = np.broadcast_to(graph.compute_cost.astype(np.float64), (d, graph.num_nodes))
    durations = np.array(durations, dtype=np.float64)
    pinned = np.asarray(graph.pinned)
    elsewhere = (pinned[None, :] >= 0) & (np.arange(d)[:, None] != pinned[None, :])
    durations[elsewhere] = np.inf
    return durations


def step_time_bound(graph, devices) -> StepBound:
    """The best of the three arguments of the module docstring (µs), a little below its exact
    value (`RELATIVE_SLACK`). `devices`: a regal.sim.DeviceSpec or a device count."""
    from regal.sim import DeviceSpec

    if not isinstance(devices, DeviceSpec):
        devices = DeviceSpec(int(devices))
    durations = _durations(graph, devices)
    least = durations.min(axis=0)                  # finite: a pin names one of the devices
    finish = np.zeros(graph.num_nodes)
    pred_ptr, pred = graph.pred_ptr, graph.pred
    for v in graph.topo_order:
        before = pred[pred_ptr[v]:pred_ptr[v + 1]]
        finish[v] = (finish[before].max() if len(before) else 0.0) + least[v]
    critical = float(finish.max(initial=0.0))
    work = float(least.sum()) / devices.count
    # groups (leaders' sums), then the ops pinned to each device: least total over devices
    leaders = np.asarray(graph.colocation)
    group_totals = np.zeros((devices.count, graph.num_nodes))
    np.add.at(group_totals, (slice(None), leaders), durations)
    one_device = float(group_totals.min(axis=0).max(initial=0.0))
    pinned = np.asarray(graph.pinned)
    for p in range(devices.count):
        one_device = max(one_device, float(durations[p, pinned == p].sum()))
    components = {"critical_path": critical, "work": work, "one_device": one_device}
    source = max(components, key=components.get)
    return StepBound(value=components[source] * (1.0 - RELATIVE_SLACK), source=source,
                     components=components)
