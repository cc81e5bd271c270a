"""The smallest device count that fits: what `regal optimize` adds when its answer is over the
memory limits (`smallest_device_count`, and the lines it prints, `describe_fit`).

For d = D, D+1, D+2, ... up to a cap (4 x D, at most 64, at least D+1), with the user's limit
on every device (under per-device limits, each added device gets the SMALLEST limit given: the
count found is then enough whatever the added devices are, as long as each has at least that
much memory):

1. the proven lower bound (`regal.bounds.lower_bound`) on the highest peak of any placement on
   d devices: above the largest limit, no placement fits, so d is skipped, "provably";
2. the `layer-split` baseline (the split a person makes by hand, at most 2 evaluations);
3. `local-search` from that split and its own cheap starts, at most `budget` evaluations
   (500 by default), stopped at the first placement that fits.

The first d with a fitting placement is the answer: every smaller count was either proven
impossible or searched without success (not proven: a longer search might fit it). The user's
own count D is searched too (when the bound allows it): steps 2-3 minimise the highest peak,
which the user's search (a short step under the limits) may not have, so D itself may fit. Before
any of it, an op whose working set (`regal.bounds.op_working_sets`: its inputs, outputs,
temporary memory and the persistent memory of every op that must share its device) exceeds
the largest limit proves that NO device count fits, and the op is named. The whole search
stops after `seconds` (10 s by default), and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from regal.problem import Problem, Solution
from regal.units import format_bytes

__all__ = ["FIT_METHOD", "FIT_BUDGET", "FIT_SECONDS", "MAX_FIT_DEVICES", "Tried", "FitSearch",
           "fit_cap", "smallest_device_count", "describe_fit"]

FIT_METHOD = "local-search"   # the search tried at each device count
FIT_BUDGET = 500              # its evaluations per device count, at most
FIT_SECONDS = 10.0            # the whole search, at most (it ends at the first count that fits)
MAX_FIT_DEVICES = 64          # the cap on the counts tried (unless the user's is above it)


@dataclass
class Tried:
    """What one device count gave: `outcome` is "proven" (the lower bound is above the
    largest limit), "fits" (`solution` fits), "not found" (searched, nothing fits: not proven
    impossible) or "cut short" (the time cap stopped the search at this count)."""

    count: int
    outcome: str
    bound: object = None            # regal.bounds.Bound at this count
    solution: Solution | None = None


@dataclass
class FitSearch:
    """The result of `smallest_device_count`; `found` is the Tried that fits, or None."""

    devices: int                    # the user's count
    limit: int                      # the largest limit (what a bound must exceed)
    added_limit: int                # the limit of each added device
    per_device: bool                # the user gave limits that differ
    cap: int                        # the largest count tried
    budget: int                     # evaluations per count, at most
    seconds: float                  # the time cap
    tried: list[Tried] = field(default_factory=list)   # from the user's count up
    too_large: tuple[str, int] | None = None   # (op name, bytes): no count fits
    timed_out: bool = False

    @property
    def found(self) -> Tried | None:
        return next((t for t in self.tried if t.outcome == "fits"), None)

    @property
    def unproven(self) -> list[int]:
        """The counts searched without a fit and not proven too few."""
        return [t.count for t in self.tried if t.outcome in ("not found", "cut short")]


def fit_cap(devices: int) -> int:
    """The largest device count tried: 4 x the user's, at most 64, at least one more."""
    return max(devices + 1, min(4 * devices, MAX_FIT_DEVICES))


def _limits(problem: Problem, count: int) -> np.ndarray:
    limits = problem.devices.limits
    extra = np.full(max(0, count - len(limits)), limits.min(), dtype=np.int64)
    return np.concatenate([limits, extra])[:count]


def smallest_device_count(problem: Problem, budget: int = FIT_BUDGET, seed: int = 0, *,
                          seconds: float = FIT_SECONDS, cap: int | None = None,
                          progress: Callable[[int], None] | None = None) -> FitSearch:
    """The smallest device count whose limits a placement fits (see the module docstring),
    from the problem's own count up. `problem.devices` must have memory
    limits. `progress(count)` is called before each count is searched."""
    from regal import optimizers
    from regal.bounds import lower_bound, op_working_sets

    spec, graph = problem.devices, problem.graph
    if spec.limits is None:
        raise ValueError("smallest_device_count: the problem has no memory limits")
    deadline = time.perf_counter() + float(seconds)
    d0, limits = spec.count, spec.limits
    fit = FitSearch(devices=d0, limit=int(limits.max()), added_limit=int(limits.min()),
                    per_device=bool(np.any(limits != limits[0])),
                    cap=fit_cap(d0) if cap is None else int(cap), budget=int(budget),
                    seconds=float(seconds))
    if graph.num_nodes:
        working = op_working_sets(graph, 2)   # the same for every count >= 2
        v = int(np.argmax(working))
        if working[v] > fit.limit:
            fit.too_large = (str(graph.names[v]), int(working[v]))
            return fit
    for d in range(d0, fit.cap + 1):
        if time.perf_counter() >= deadline:
            fit.timed_out = True
            break
        if progress is not None:
            progress(d)
        bound = lower_bound(graph, d)
        if bound.value > fit.limit:
            fit.tried.append(Tried(d, "proven", bound))
            continue
        # the links and speeds carried over (extra devices as slow as the slowest)
        devices = spec.with_count(d, memory_limit=_limits(problem, d).tolist())
        # minimise the highest peak: a fit ranks ahead of every misfit, and its value is at
        # most the largest limit (regal.sim.objective_values)
        sub = Problem(graph, devices, "peak_memory")
        best = optimizers.solve("layer-split", sub, 2, seed)
        if not best.feasible:
            fitted = []

            def seen(evaluations, value):
                if value <= fit.limit:
                    fitted.append(evaluations)

            def should_stop():
                if time.perf_counter() >= deadline:
                    fit.timed_out = True
                return bool(fitted) or fit.timed_out
            found = optimizers.solve(FIT_METHOD, sub, int(budget), seed, initial=[best],
                                     progress=seen, should_stop=should_stop)
            if found.feasible or found.value < best.value:
                best = found
        if best.feasible:
            fit.tried.append(Tried(d, "fits", bound, best))
            break
        fit.tried.append(Tried(d, "cut short" if fit.timed_out else "not found", bound, best))
        if fit.timed_out:
            break
    return fit


def _counts(counts: list[int]) -> str:
    """'3 devices', '3-5 devices', '3, 5 and 6 devices'."""
    if len(counts) == 1:
        return f"{counts[0]} device{'s' if counts[0] != 1 else ''}"
    if counts == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}-{counts[-1]} devices"
    return f"{', '.join(map(str, counts[:-1]))} and {counts[-1]} devices"


def describe_fit(fit: FitSearch) -> list[str]:
    """The lines `regal optimize` prints about the device count that would fit."""
    limit = format_bytes(fit.limit)
    what = "the largest limit" if fit.per_device else "the limit"
    if fit.too_large is not None:
        name, need = fit.too_large
        return [f"no device count fits: op {name!r} needs {format_bytes(need)} on its device "
                f"when it runs (its inputs, outputs, temporary memory and the persistent "
                f"memory of the ops that share its device), over {what} {limit}"]
    lines = []
    found = fit.found
    if found is not None:
        s = found.solution
        method = "layer-split" if s.method == "layer-split" else \
            f"{FIT_METHOD} minimising peak memory"
        evaluations = f"{s.evaluations:,} evaluation{'' if s.evaluations == 1 else 's'}"
        asked = ", the count asked for" if found.count == fit.devices else ""
        lines.append(f"smallest device count found that fits: {found.count}{asked} ({method}, "
                     f"{evaluations}: peak {format_bytes(max(s.peak))})")
        if asked:
            lines.append("the search above missed it: try a larger --budget, or "
                         "--objective peak_memory")
    else:
        stop = (f" before the {fit.seconds:g} s cap of this search" if fit.timed_out
                else f" ({FIT_METHOD}, at most {fit.budget:,} evaluations each)")
        if fit.tried:
            lines.append(f"no device count up to {fit.tried[-1].count} found that fits{stop}")
        else:
            lines.append(f"no device count searched{stop}")
    proven = [t for t in fit.tried if t.outcome == "proven"]
    if proven:
        counts = _counts([t.count for t in proven])
        if len(proven) == 1:
            lines.append(f"{counts} provably cannot fit (lower bound "
                         f"{format_bytes(proven[0].bound.value)} > {limit})")
        else:  # the lowest of the bounds
            weakest = min(proven, key=lambda t: t.bound.value)
            lines.append(f"{counts} provably cannot fit (lower bound > {limit} at each; "
                         f"{format_bytes(weakest.bound.value)} at {weakest.count})")
    unproven = fit.unproven
    if unproven:
        lines.append(f"{_counts(unproven)}: none found that fits ({FIT_METHOD}, at most "
                     f"{fit.budget:,} evaluations each), not proven impossible")
    if fit.per_device and (found is not None or unproven):
        lines.append(f"(each added device with the smallest limit given, "
                     f"{format_bytes(fit.added_limit)})")
    return lines
