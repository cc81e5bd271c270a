"""The `cpsat` method (`solve`): the hint, the model, and the better of their answers by
the simulator; what `Solution.extra` records.

What `solve` does
-----------------
1. The hint: single device, m-topo, gp-dfs, m-etf (graphs up to `_METF_MAX_OPS` ops), a
   short BRKGA (at most `_HINT_BRKGA_MAX` evaluations, warm-started with the others) and a
   short seeded-brkga run (REGAL's pipeline without the policy, `hint._HINT_PIPELINE_MAX`
   evaluations), all through the registry; the best by the simulator's value. Every
   evaluation they make is counted in `evaluations`, as are the trace of the hint and the
   re-scoring of CP-SAT's incumbents (never more than `budget`; with `budget` <= 2 there
   is no hint). With `initial` (a solution, or several) the heuristics are skipped: the
   best of `initial` by the simulator is the hint, and the model gets their time (an
   exact improving phase from a stored best).
2. The lower bound (peak memory): the best of `regal.bounds.lower_bound` and
   `closed_form_bound`. When the hint meets it, the hint is optimal: the model is skipped
   (`model_skipped` says so) and `proven_optimal` is True.
3. The model (`model`), unless it is too large: above `_UNITS_PER_SECOND` x `time_limit`
   units (`_model_units`: (tensors + consumer edges) x devices), or `_MAX_UNITS`, building it
   alone would outlast the limit and its presolve the rest, so the hint is returned with
   status "HINT" and `extra["model_skipped"]` says why; so does a wall-clock run whose
   heuristics left less time than the build needs. On data/real with a 5 s limit the model
   is built for 4 graphs at 2 devices and 2 at 4 (120-400 ops; experiments/cpsat_check.py).
   The peak model's objective is bounded below by the lower bound of step 2 (valid: the
   model relaxes the simulator, `model`'s docstring).
4. The hint enters the model complete: its simulated schedule, serialised by start time
   (peak mode) or replayed with the model's durations (makespan mode), fixed in a copy of
   the model that CP-SAT completes by propagation; that full assignment is the hint.
5. Every incumbent CP-SAT reports, turned into priorities (earlier start = higher
   priority; a producer's transfer priority follows its earliest transfer), is re-scored by
   the simulator (`run._Rescorer`); the search stops as soon as a re-score meets the best
   proven bound (`stopped_by` "bound_met"). The best re-scored incumbent and the hint are
   compared; the better is returned (ties: the hint).

`Solution.extra`: `status` is "OPTIMAL" / "FEASIBLE" (CP-SAT's answer is returned; its model
proved optimal or not), "HINT" (the hint is returned: CP-SAT found nothing better in the
simulator's score, found nothing, or did not run) or "INFEASIBLE" (the model proves the
memory limits cannot be met; the answer is the least-memory one). `solver_status` is
CP-SAT's own; `model_objective` its final incumbent's objective in the model (bytes or µs),
`cpsat_final_value` that incumbent re-scored by the simulator, `cpsat_value` the best
re-scored incumbent's, `hint_value`/`hint_method` the hint's, `heuristics` every heuristic's
value; `bound` a proven lower bound on the simulator's objective, or None (`model`'s
docstring), and `bound_source` the argument that gave it (a `regal.bounds` argument,
"cpsat_closed_form", "cpsat_model" or "cpsat_one_at_a_time"); `proven_optimal` whether the
answer's simulated value meets `bound` (then it is the simulator's optimum, whatever the
model proved);
`stopped_by` "proof", "bound_met", "deterministic_time" or "wall_clock";
`deterministic_time` CP-SAT's own (load-independent) seconds. The time limit: `run`'s
docstring.

Formulations (`formulation`): "auto" picks the sequence or the cumulative formulation by
size (`run._build`); "timed" is the timed one (`timed`'s docstring: the simulator's own
durations, devices in parallel, eager starts; peak memory only, on graphs of at most
`timed.MAX_OPS` ops whose durations are whole numbers of ticks), whose incumbents re-score
to their model value in practice.
The heuristics get `_TIMED_HEURISTIC_SHARE` of the limit (its own incumbents are as good),
and without memory limits the one-at-a-time model runs first, for at most
`_ONE_AT_A_TIME_SHARE` of the model's time (`_one_at_a_time_first`): its bound is often the
tighter one within a limit, and floors the timed model, which is what lets that one prove
(`extra` `one_at_a_time_status`, `one_at_a_time_bound`, `one_at_a_time_value`;
`bound_source` "cpsat_one_at_a_time" when it is the best); its best re-scored answer becomes
the hint when it is better.

Why a model proof is not always a proof of the simulator's optimum: the model relaxes the
list scheduler (`model`'s docstring): it may keep a device idle while an op is ready, or
delay a transfer, which the simulator never does. Where the relaxation's optimum is below
the simulator's, CP-SAT proves the model optimal (status OPTIMAL) but the re-score stays
above the bound: transformer_infer_40 at 2 devices, model 66,936,736 bytes, best simulated
67,198,880 (experiments/results/exact_small.md). `proven_optimal` is the claim to read.

One CP-SAT worker by default (`num_workers`).
"""

from __future__ import annotations

import time

from ortools.sat.python import cp_model

from baselines.cpsat.bounds import _exact_durations, closed_form_bound
from baselines.cpsat.hint import best_heuristic, rescored
from baselines.cpsat.model import _model_limits
from baselines.cpsat.run import (_HEURISTIC_SHARE, _MIN_SOLVE, _UNITS_PER_SECOND, _deadline,
                                 _largest_model, _model_fits, _model_units, _ModelRun,
                                 _priorities, _run_model)
from regal.optimizers import Problem, Solution, check_budget, score
from regal.sim import DeviceSpec

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
           cp_model.INFEASIBLE: "INFEASIBLE", cp_model.MODEL_INVALID: "MODEL_INVALID",
           cp_model.UNKNOWN: "UNKNOWN"}
_RESERVED = 2            # evaluations kept back: tracing the hint, scoring CP-SAT's answer
_REGAL_BOUND_MAX_OPS = 5000  # above: the closed-form bound only (regal.bounds takes seconds)
_ONE_AT_A_TIME_SHARE = 0.15  # of the model's time, the most the one-at-a-time model gets
_TIMED_HEURISTIC_SHARE = 0.2  # the heuristics' share of the limit with the timed model


def solve(problem: Problem, budget: int, seed: int = 0, *, time_limit: float = 10.0,
          reproducible: bool = False, num_workers: int = 1, formulation: str = "auto",
          initial=None, progress=None) -> Solution:
    """The better (simulator's score) of the best cheap heuristic and CP-SAT's answer hinted
    with it, within about `time_limit` wall-clock seconds.

    With `reproducible`, `time_limit` is CP-SAT deterministic time instead (a seed then
    always gives the same answer; the wall clock only guards at 3 x the limit + 10 s).

    `evaluations` counts every model evaluation: the heuristics', the hint's BRKGA, the
    trace of the hint and the scoring of CP-SAT's answer (never more than `budget`).
    `extra` records status (OPTIMAL / FEASIBLE: CP-SAT's answer; HINT: the hint's, CP-SAT
    found nothing better or did not run; INFEASIBLE: the memory limits cannot be met), the
    solver's own status, the model's objective and bound, the time limit and what stopped
    the solver (this module's docstring).
    """
    from regal.sim import trace

    check_budget(budget)
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    if formulation not in ("auto", "sequence", "cumulative", "timed"):
        raise ValueError(f"formulation: expected auto, sequence, cumulative or timed, got "
                         f"{formulation!r}")
    if formulation == "timed":
        from baselines.cpsat.timed import timed_ticks

        timed_ticks(problem)   # refuses what it cannot model before any work
    graph, devices = problem.graph, problem.devices
    if devices.has_speeds:
        raise ValueError("cpsat: device speeds are not modelled (its intervals are each op's "
                         "compute_cost, the reference device's); drop --device-flops, "
                         "--device-bandwidth and --device-preset, or use another method")
    began = time.perf_counter()
    deadline = _deadline(float(time_limit), reproducible)
    fits = _model_fits(problem, time_limit)
    # without a model to solve, the hint's BRKGA may use most of the time
    share = (_TIMED_HEURISTIC_SHARE if formulation == "timed" else _HEURISTIC_SHARE) \
        if fits else 0.8
    if initial is not None:
        hint, used, heuristics = _best_initial(problem, initial)
    else:
        hint, used, heuristics = best_heuristic(
            problem, budget - _RESERVED if budget > _RESERVED else 0, seed,
            None if reproducible else share * time_limit)
    heuristics_seconds = time.perf_counter() - began
    extra = {"time_limit": float(time_limit), "reproducible": bool(reproducible),
             "num_workers": int(num_workers), "heuristics_seconds": heuristics_seconds,
             "heuristics": heuristics, "hint_method": None if hint is None else hint.method,
             "hint_value": None if hint is None else float(hint.value),
             "solver_status": None, "model_objective": None, "model_objective_name": None,
             "cpsat_value": None, "bound": None, "stopped_by": None, "model_skipped": None}
    if problem.objective == "peak_memory":
        bound = _peak_lower_bound(problem)
        extra["bound"], extra["bound_source"] = float(bound.value), bound.source
    if hint is not None and extra["bound"] is not None and hint.value <= extra["bound"]:
        extra["model_skipped"] = "the hint meets the lower bound: it is optimal"
    elif not fits:
        extra["model_skipped"] = (f"model size {_model_units(problem)} > "
                                  f"{_largest_model(time_limit)}")
    elif not reproducible and (deadline - time.perf_counter()) * _UNITS_PER_SECOND < \
            _model_units(problem):
        extra["model_skipped"] = "the heuristics left too little time to build the model"
    hint_trace = None
    if hint is not None and extra["model_skipped"] is None:
        hint_trace = trace(graph, devices, hint.placement, hint.priority,
                           hint.transfer_priority)
        used += 1

    if formulation == "timed" and extra["model_skipped"] is None \
            and _model_limits(problem) is None:
        hint, hint_trace, more = _one_at_a_time_first(problem, hint, hint_trace, extra,
                                                      time_limit, deadline, seed, num_workers,
                                                      reproducible, budget - used - 1)
        used += more
        if hint is not None and hint.value <= extra["bound"]:
            extra["model_skipped"] = "the one-at-a-time model's answer meets the bound"

    run, answer, infeasible = None, None, False
    if extra["model_skipped"] is None:
        # every incumbent is re-scored (the evaluations left, less one for the final
        # answer), so the best by the simulator is kept and a bound met ends the search
        left = budget - used - 1
        run = _run_model(problem, formulation, hint, hint_trace, time_limit, deadline, seed,
                         num_workers, reproducible, lower=extra["bound"],
                         score=lambda *solution: score(problem, *solution), evaluations=left)
        if run.rescorer is not None:
            used += run.rescorer.scored
        infeasible = run.status == cp_model.INFEASIBLE
        extra["model_objective_name"] = problem.objective
        if infeasible:
            # the limits cannot be met: the least-memory answer is the next best thing
            extra["infeasible_status"] = _STATUS[run.status]
            extra["model_objective_name"] = "peak_memory"
            fallback = Problem(graph, DeviceSpec(devices.count, None, devices.bandwidth,
                                                 devices.latency), "peak_memory")
            run = _run_model(fallback, formulation, hint, hint_trace, time_limit,
                             max(deadline, time.perf_counter() + _MIN_SOLVE * time_limit),
                             seed, num_workers, reproducible)
        extra["solver_status"] = _STATUS.get(run.status, str(run.status))
        extra["stopped_by"] = run.stopped_by
        extra["deterministic_time"] = float(run.solver.deterministic_time)
        extra["formulation"] = run.handles.formulation
        _record_model(extra, problem, run)
        found = run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        rescored = None if infeasible or run.rescorer is None else run.rescorer
        if found and rescored is not None and rescored.last is not None:
            fields = rescored.last           # the final incumbent, re-scored already
        elif found and used < budget:
            fields = score(problem, *_priorities(run.solver, run.handles, graph,
                                                 devices.count))
            used += 1
        else:
            fields = None
        if fields is not None:
            extra["cpsat_final_value"] = fields["value"]
            if rescored is not None and rescored.best is not None \
                    and rescored.best["value"] < fields["value"]:
                fields = rescored.best       # an earlier incumbent re-scored better
            extra["cpsat_value"] = fields["value"]
            if hint is None or fields["value"] < hint.value:
                answer = fields
    if answer is not None:
        status = "OPTIMAL" if run.status == cp_model.OPTIMAL else "FEASIBLE"
    else:
        status = "HINT"
        if hint is None:  # a tiny budget and no CP-SAT answer: the single-device answer
            from regal.optimizers import single_device
            hint = single_device(problem)
            used += 1
            extra["hint_method"], extra["hint_value"] = "single-device", float(hint.value)
        answer = score(problem, hint.placement, hint.priority, hint.transfer_priority)
    extra["status"] = "INFEASIBLE" if infeasible else status
    # proven optimal: the simulator's value of the answer meets a proven lower bound
    extra["proven_optimal"] = bool(not infeasible and extra["bound"] is not None
                                   and answer["value"] <= extra["bound"])
    extra["solver_wall_time"] = time.perf_counter() - began
    if progress is not None:
        progress(used, float(answer["value"]))
    return Solution(**answer, evaluations=used, method="cpsat", seed=seed, extra=extra)


def _one_at_a_time_first(problem: Problem, hint, hint_trace, extra: dict, time_limit: float,
                         deadline: float, seed: int, num_workers: int, reproducible: bool,
                         left: int):
    """The timed formulation's first step: the one-at-a-time model ("auto") for at most
    `_ONE_AT_A_TIME_SHARE` of the model's time (it stops at its proof). Why: within a limit
    its bound is often far tighter than the timed model's (transformer_infer_40 at 2
    devices: 66,936,736 bytes proven in seconds, where the timed model's own bound stays at
    56.7 M after a minute), and a floor is what lets the timed model prove its optimum
    (at 4 devices, floored at regal.bounds' 41,852,832, it proves 41,951,232 in 36 s; without
    a floor not in 90 s). Raises `extra["bound"]` in place; its best re-scored incumbent,
    when better than the hint, becomes the hint. Returns (hint, its trace, evaluations)."""
    from regal.sim import trace

    now = time.perf_counter()
    run = _run_model(problem, "auto", hint, hint_trace, _ONE_AT_A_TIME_SHARE * time_limit,
                     now + _ONE_AT_A_TIME_SHARE * max(deadline - now, 0.0), seed, num_workers,
                     reproducible, lower=extra["bound"],
                     score=lambda *solution: score(problem, *solution), evaluations=left)
    used = 0 if run.rescorer is None else run.rescorer.scored
    extra["one_at_a_time_status"] = _STATUS.get(run.status, str(run.status))
    if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        bound = float(run.solver.best_objective_bound) * run.handles.memory_unit
        extra["one_at_a_time_bound"] = bound
        if bound > (extra["bound"] or 0.0):
            extra["bound"], extra["bound_source"] = bound, "cpsat_one_at_a_time"
    best = None if run.rescorer is None else run.rescorer.best
    if best is not None:
        extra["one_at_a_time_value"] = best["value"]
        if hint is None or best["value"] < hint.value:
            hint = Solution(**best, evaluations=used, method="cpsat-one-at-a-time")
            extra["hint_method"], extra["hint_value"] = hint.method, float(hint.value)
            hint_trace = trace(problem.graph, problem.devices, hint.placement, hint.priority,
                               hint.transfer_priority)
            used += 1
    return hint, hint_trace, used


def _best_initial(problem: Problem, initial) -> tuple[Solution, int, dict]:
    """(the best of `initial` re-scored, evaluations, name -> value), as `best_heuristic`
    gives them."""
    found = rescored(problem, initial)
    best, values = None, {}
    for i, (solution, fields) in enumerate(found):
        name = solution.method or f"initial{i}"
        values[name] = float(fields["value"])
        if best is None or fields["value"] < best.value:
            best = Solution(**fields, evaluations=1, method=name)
    return best, len(found), values


def _peak_lower_bound(problem: Problem):
    """The best cheap proven lower bound on the simulated peak memory: `regal.bounds` (its
    default work budget: 0.01 s on 100 ops, about 3 s on a loaded core at 14,000 ops, so
    only up to `_REGAL_BOUND_MAX_OPS` ops) and the closed form."""
    from regal.bounds import Bound, lower_bound

    closed = int(closed_form_bound(problem))
    if problem.graph.num_nodes > _REGAL_BOUND_MAX_OPS:
        return Bound(value=closed, source="cpsat_closed_form", proven=True)
    return lower_bound(problem.graph, problem.devices, extra={"cpsat_closed_form": closed})


def _record_model(extra: dict, problem: Problem, run: _ModelRun) -> None:
    """The model's objective and bound in bytes or µs; `bound` only where it is a proven
    lower bound on the simulator's objective (`model`'s docstring)."""
    handles, solver = run.handles, run.solver
    peak_model = handles.objective == "peak_memory"
    scale = handles.memory_unit if peak_model else handles.tick
    if run.hint_objective is not None:
        extra["hint_model_objective"] = run.hint_objective * scale
    if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        extra["model_objective"] = float(solver.objective_value) * scale
    if run.status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        model_bound = float(solver.best_objective_bound) * scale
        extra["model_bound"] = model_bound
        if peak_model:
            key = "bound" if problem.objective == "peak_memory" else "peak_bound"
            if key == "bound" and model_bound > (extra.get(key) or 0.0):
                extra["bound_source"] = "cpsat_model"
            extra[key] = max(extra.get(key) or 0.0, model_bound)
        elif _exact_durations(problem):
            extra["bound"] = model_bound
