"""The performance model (docs/design.md §4): a compiled event-driven list scheduler.

`simulate` scores one solution, `evaluate` a whole population of chromosomes in parallel,
`trace` records the schedule and memory curves. Rules: docs/design.md §4 as read by regal/sim/SIM_RULES.md.
`regal.sim.speeds`: devices of other speeds (an op's time on each device, GPU presets).
"""

from regal.sim.api import (OBJECTIVES, SimResult, Trace, evaluate, infeasible_offset,
                           objective_values, ranking_limits, simulate, trace)
from regal.sim.devices import DEFAULT_BANDWIDTH, DEFAULT_LATENCY, DeviceSpec

__all__ = ["DeviceSpec", "DEFAULT_BANDWIDTH", "DEFAULT_LATENCY", "OBJECTIVES", "SimResult",
           "Trace", "simulate", "evaluate", "trace", "infeasible_offset", "objective_values",
           "ranking_limits"]
