"""What `regal optimize` prints about its answer: the figures a person reads (peaks against
limits, step time, both against one device), whether it fits, and its gain over the
yardsticks (`regal.optimizers.reference_solutions`)."""

from __future__ import annotations

import numpy as np

from regal.problem import Problem, Solution

__all__ = ["describe", "smallest_overflow"]


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


# said when the count asked for is neither fitted nor proven impossible by a method other than
# `regal`, whose pipeline climbs to a fit steered by its learned move ranker: on the six
# 10,000-15,000-op training steps at 4 devices under 1.2 x their best-known peak it fitted on
# 18 of 18 runs, local search on 9 (experiments/results/large_steps_makespan.md)
REGAL_FIT_HINT = ("the count asked for may still fit: --method regal climbs to a fit first "
                  "when its search finds none, its learned move ranker steering the climb")


def describe(problem: Problem, solution: Solution, references: list[Solution],
             fit=None) -> list[str]:
    """Lines that `regal optimize` prints: the peak memory (per device, against its limit)
    and the step time (makespan), each beside the whole graph on one device (`one_device`),
    whether the answer fits and by how much it does not, and its gain over each reference
    (over `layer-split`, the split a person makes by hand, in words: `_against_layer_split`).
    Each figure is a peak or a time, never a ranking penalty, and a figure over a limit says
    whose and which. Every figure in human units (KiB/MiB/GiB, us/ms/s). `fit`: a
    `regal.fit_search.FitSearch` for an answer over the limits, whose lines (the smallest
    device count that fits) follow the overflow's."""
    from regal.units import format_change, format_duration_us
    limits = problem.devices.limits
    one = next((ref for ref in references if ref.method == "one-device"), None)
    objective = problem.objective.replace("_", " ")
    lines = [f"method {solution.method}, seed {solution.seed}: {solution.evaluations:,} "
             f"evaluation{'s' * (solution.evaluations != 1)} in {solution.wall_time:.1f} s, "
             f"objective {objective}"]

    # devices of unequal speeds: the yardstick is the fastest device (`optimizers.one_device`)
    which = "" if one is None or one.extra.get("fastest_device") is None else \
        f" (the fastest, device {one.extra['fastest_device']})"

    def against_one(value: float, reference: float, human) -> str:
        change = format_change(value, reference)
        return f" ({change + ' ' if change else ''}vs one device{which} {human(reference)})"

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
        if fit is not None:
            from regal.fit_search import describe_fit
            lines += describe_fit(fit)
            if solution.method != "regal" and fit.devices in fit.unproven:
                lines.append(REGAL_FIT_HINT)
    human = _bytes if problem.objective == "peak_memory" else format_duration_us
    for ref in references:
        if ref.method == "one-device":
            continue  # beside every figure above
        if ref.method == "layer-split":
            lines.append(_against_layer_split(problem, solution, ref))
            continue
        figure, mine = _figure(problem.objective, ref), _figure(problem.objective, solution)
        if ref.feasible and solution.feasible or problem.objective == "peak_memory":
            gain = f"{(figure - mine) / figure * 100:+.2f}%" if figure else "+0.00%"
        else:  # a step time over a limit is no step time to compare with
            gain = "n/a"
        note = "" if ref.feasible else f", does not fit: {_over_limits(problem, ref)}"
        lines.append(f"improvement over {ref.method} ({human(figure)}{note}): {gain}")
    return lines


def _against_layer_split(problem: Problem, solution: Solution, split: Solution) -> str:
    """'step time vs layer-split: 4.10 ms (fits) -> this placement is 12.3% shorter', or
    'layer-split does not fit: device 1 is 3.20 MiB over its 20.00 MiB limit' (the
    objective's figure: peak memory is 'lower'/'higher')."""
    from regal.units import format_duration_us
    peak = problem.objective == "peak_memory"
    name, human = ("peak memory", _bytes) if peak else ("step time", format_duration_us)
    figure, mine = _figure(problem.objective, split), _figure(problem.objective, solution)
    if not split.feasible:
        return (f"layer-split does not fit: {_over_limits(problem, split)} ({name} "
                f"{human(figure)})" + (" -> this placement fits" if solution.feasible else ""))
    fits = " (fits)" if problem.devices.limits is not None else ""
    head = f"{name} vs layer-split: {human(figure)}{fits} -> "
    if not solution.feasible:
        return head + "layer-split fits, this placement does not"
    change = (figure - mine) / figure * 100 if figure else 0.0
    if round(change, 1) == 0:
        return head + "the same as this placement's (within 0.1%)"
    word = ("lower" if change > 0 else "higher") if peak else \
        ("shorter" if change > 0 else "longer")
    return head + f"this placement is {abs(change):.1f}% {word}"


def smallest_overflow(candidates: list[Solution]) -> Solution:
    """The candidate that overflows the memory limits least (ties: the lower objective; the
    one-device yardstick, which runs on other devices than the problem's, is left out)."""
    candidates = [s for s in candidates if s.method != "one-device"]
    return min(candidates, key=lambda s: (s.overflow, s.value))
