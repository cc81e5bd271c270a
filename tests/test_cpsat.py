"""CP-SAT baseline (issue 21 item 3, issue 24 item 9): hint, status, bound, time limit.

Truth comes from outside the model: the simulator's exhaustive optimum over placements x
priority orders on tiny graphs (the model's peak-memory optimum must not exceed it), the
simulator's re-score of every answer, and hand-made cases.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from regal import synth
from regal.bounds import lower_bound
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, score, single_device, solve
from regal.sim import DeviceSpec, evaluate

from helpers import random_graph

from baselines import cpsat
from baselines.cpsat import run

STATUSES = ("OPTIMAL", "FEASIBLE", "HINT", "INFEASIBLE")


def _sim_optimum(graph, devices) -> float:
    """Least simulated peak over placements x op orders x transfer orders (tiny graphs)."""
    n, d = graph.num_nodes, devices.count
    perms = np.array(list(itertools.permutations(range(n))), np.float64) / max(n - 1, 1)
    best = math.inf
    for placement in itertools.product(range(d), repeat=n):
        affinity = np.zeros((n, d))
        affinity[np.arange(n), placement] = 1.0
        keys = np.array([np.concatenate([affinity.ravel(), p, t]) for p in perms for t in perms])
        best = min(best, float(evaluate(graph, devices, keys, "peak_memory").min()))
    return best


def _tiny(count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [random_graph(rng, num_ops=int(rng.integers(2, 5)), integer=True)
            for _ in range(count)]


def _limited_makespan_case():
    """A graph whose CP-SAT answer (no hint) the simulator re-scores infeasible: the model
    delays ready ops to save memory, which a list scheduler never does (found by trying
    random small graphs; helpers.random_graph, seed 0)."""
    rng = np.random.default_rng(0)
    graph = random_graph(rng, num_ops=int(rng.integers(4, 9)), integer=True)
    single = single_device(Problem(graph, DeviceSpec(1))).value
    devices = DeviceSpec(2, memory_limit=int(0.7 * single), bandwidth=4.0, latency=1.0)
    return Problem(graph, devices, "makespan")


# ---------------------------------------------------------------------------
# the bound


@pytest.mark.parametrize("seed", range(4))
def test_bound_never_exceeds_the_simulated_optimum(seed):
    # integer graphs: sizes are multiples of 8, so the model works in 8-byte units (gcd)
    for graph in _tiny(3, seed):
        for limits in (None, [10_000, 10]):  # unequal limits: no canonical relabelling
            devices = DeviceSpec(2, memory_limit=limits, bandwidth=4.0, latency=1.0)
            problem = Problem(graph, devices, "peak_memory")
            best = _sim_optimum(graph, devices)
            sol = solve("cpsat", problem, 50, 0, time_limit=10.0, reproducible=True)
            # the model proved its optimum, or the hint met the lower bound (no model run)
            assert sol.extra["solver_status"] == "OPTIMAL" or sol.extra["proven_optimal"]
            assert sol.extra["bound"] <= best <= sol.value
            assert sol.extra["proven_optimal"] == (sol.value == sol.extra["bound"])
            assert sol.value <= sol.extra["hint_value"]
            value, proven = cpsat.lower_bound(problem, time_limit=10.0)
            assert proven and value <= best
            assert cpsat.closed_form_bound(problem) <= best


def test_memory_unit_scaling_and_bound_on_a_hand_case():
    # a -> b -> c, 24-byte tensors (gcd 24), one device: peak is exactly two tensors (48)
    b = GraphBuilder()
    a, mid, c = (b.add_op(name, 1.0) for name in ("a", "b", "c"))
    b.add_output(a, 24)
    b.add_input(mid, a)
    b.add_output(mid, 24)
    b.add_input(c, mid)
    problem = Problem(b.build(), DeviceSpec(1), "peak_memory")
    sol = solve("cpsat", problem, 20, 0, time_limit=5.0, reproducible=True)
    assert sol.value == 48 and sol.extra["bound"] == 48
    assert cpsat.lower_bound(problem, 5.0) == (48.0, True)


# ---------------------------------------------------------------------------
# the hint and the status


@pytest.mark.parametrize("objective", ("peak_memory", "makespan"))
def test_never_worse_than_the_hint_or_any_heuristic(objective):
    for n, seed in ((30, 1), (60, 2)):
        graph = synth.random_dag(n, seed)
        single = single_device(Problem(graph, DeviceSpec(1))).value
        limit = int(0.6 * single) if objective == "makespan" else None
        problem = Problem(graph, DeviceSpec(2, memory_limit=limit), objective)
        sol = solve("cpsat", problem, 300, 0, time_limit=1.0, reproducible=True)
        assert sol.extra["status"] in STATUSES
        assert sol.value <= sol.extra["hint_value"]
        assert sol.value <= min(sol.extra["heuristics"].values())
        for name in ("gp-dfs", "m-topo", "m-etf"):
            assert sol.value <= solve(name, problem, 1, 0).value
        assert sol.evaluations <= 300


def test_status_tells_where_the_answer_came_from():
    graph = synth.random_dag(6, 3)
    problem = Problem(graph, DeviceSpec(2), "peak_memory")
    # budget 2: no heuristic fits, so the answer is CP-SAT's own
    own = solve("cpsat", problem, 2, 0, time_limit=5.0, reproducible=True)
    assert own.extra["status"] == "OPTIMAL" and own.extra["hint_method"] is None
    assert own.value == own.extra["cpsat_value"]
    hinted = solve("cpsat", problem, 200, 0, time_limit=5.0, reproducible=True)
    if hinted.extra["status"] == "HINT":  # CP-SAT found nothing strictly better
        assert hinted.value == hinted.extra["hint_value"]
        assert hinted.extra["cpsat_value"] is None or \
            hinted.extra["cpsat_value"] >= hinted.extra["hint_value"]
    else:
        assert hinted.extra["status"] == "OPTIMAL"
        assert hinted.value == hinted.extra["cpsat_value"] < hinted.extra["hint_value"]


def test_a_model_too_large_to_build_returns_the_hint(monkeypatch):
    monkeypatch.setattr(run, "_MAX_UNITS", 0)
    problem = Problem(synth.random_dag(20, 4), DeviceSpec(2), "peak_memory")
    sol = solve("cpsat", problem, 200, 0, time_limit=5.0)
    assert sol.extra["status"] == "HINT" and sol.extra["solver_status"] is None
    assert sol.extra["model_skipped"] and sol.value == sol.extra["hint_value"]
    # without the model, the bound is the best of regal.bounds and the closed form
    cheap = max(cpsat.closed_form_bound(problem), lower_bound(problem.graph, problem.devices).value)
    assert sol.extra["bound"] == cheap <= sol.value
    assert cpsat.lower_bound(problem, 5.0) == (cheap, False)


def test_infeasible_limits_are_reported():
    b = GraphBuilder()
    for name in ("a", "b"):
        b.add_op(name, 10.0, persistent_memory=100)
    problem = Problem(b.build(), DeviceSpec(2, memory_limit=50), "makespan")
    sol = solve("cpsat", problem, 50, 0, time_limit=5.0, reproducible=True)
    assert sol.extra["status"] == "INFEASIBLE" and not sol.feasible
    assert sol.extra["peak_bound"] == 100.0 and sol.overflow == 100


def test_evaluations_count_every_model_call(counted):
    problem = Problem(synth.random_dag(30, 5), DeviceSpec(2), "peak_memory")
    sol = solve("cpsat", problem, 157, 0, time_limit=1.0, reproducible=True)
    # single device, gp-dfs, m-topo, m-etf (1 each), BRKGA's rows, the hint's trace and
    # the scoring of CP-SAT's answer (when it found one)
    scored = 0 if sol.extra["cpsat_value"] is None else 1
    assert sol.evaluations == 4 + counted["n"] + 1 + scored <= 157


# ---------------------------------------------------------------------------
# the model's objective against the simulator's


def test_makespan_model_disagreement_is_caught_by_the_hint():
    problem = _limited_makespan_case()
    # CP-SAT alone: its optimal model schedule meets the limits, the list scheduler's
    # replay of it does not (it starts a ready op the model kept waiting to save memory)
    alone = solve("cpsat", problem, 1, 0, time_limit=5.0, reproducible=True)
    assert alone.extra["solver_status"] == "OPTIMAL" and not alone.feasible
    assert alone.extra["model_objective"] < alone.value
    # with the hint the answer is the better of the two by the simulator: feasible here
    hinted = solve("cpsat", problem, 200, 0, time_limit=5.0, reproducible=True)
    assert hinted.extra["cpsat_value"] == alone.value
    assert hinted.feasible and hinted.extra["status"] == "HINT"
    assert hinted.value == hinted.extra["hint_value"] < alone.value


def test_peak_model_optimum_is_at_most_the_rescore():
    for graph in _tiny(6, 7):
        problem = Problem(graph, DeviceSpec(2, bandwidth=4.0, latency=1.0), "peak_memory")
        sol = solve("cpsat", problem, 1, 0, time_limit=10.0, reproducible=True)
        assert sol.extra["solver_status"] == "OPTIMAL"
        assert sol.extra["model_objective"] == sol.extra["bound"] <= sol.value
        assert sol.value == score(problem, sol.placement, sol.priority,
                                  sol.transfer_priority)["value"]


# ---------------------------------------------------------------------------
# time limit


def test_time_limit_is_recorded_and_honoured_as_wall_clock():
    graph = synth.random_dag(80, 6)
    problem = Problem(graph, DeviceSpec(2), "peak_memory")
    solve("cpsat", problem, 120, 0, time_limit=0.5)  # compiles the simulator and BRKGA
    sol = solve("cpsat", problem, 120, 0, time_limit=3.0)
    assert sol.extra["time_limit"] == 3.0 and sol.extra["reproducible"] is False
    assert sol.extra["model_skipped"] is None
    # about the limit: CP-SAT stops at the deadline; building the model and completing the
    # hint cannot be interrupted (a fraction of a second on 80 ops when idle; 5x the limit
    # leaves 12 s for them on a busy 2-core machine)
    assert sol.extra["solver_wall_time"] < 5 * 3.0
    if sol.extra["stopped_by"] != "proof":
        assert sol.extra["solver_wall_time"] > 0.9 * 3.0


def test_bad_arguments():
    problem = Problem(synth.random_dag(5, 1), DeviceSpec(2))
    with pytest.raises(ValueError, match="time_limit"):
        solve("cpsat", problem, 10, 0, time_limit=0)
    with pytest.raises(ValueError, match="formulation"):
        solve("cpsat", problem, 10, 0, formulation="dense")


def test_colocation_groups_and_pins_hold():
    b = GraphBuilder()
    ops = [b.add_op(f"op{i}", 1.0, temporary_memory=8 * (i + 1)) for i in range(6)]
    for i in range(1, 6):
        b.add_output(ops[i - 1], 16)
        b.add_input(ops[i], ops[i - 1])
    b.colocate(ops[0], ops[5])
    b.colocate(ops[1], ops[4])
    b.pin(ops[2], 1)
    graph = b.build()
    problem = Problem(graph, DeviceSpec(2), "peak_memory")
    for budget in (1, 100):  # CP-SAT's own answer, then the better of it and the hint
        sol = solve("cpsat", problem, budget, 0, time_limit=10.0, reproducible=True)
        p = sol.placement
        assert p[0] == p[5] and p[1] == p[4] and p[2] == 1
    # brute force over the placements that respect the constraints: the bound stays below
    best = math.inf
    n = graph.num_nodes
    perms = np.array(list(itertools.permutations(range(n))), np.float64) / (n - 1)
    for placement in itertools.product(range(2), repeat=n):
        if placement[0] != placement[5] or placement[1] != placement[4] or placement[2] != 1:
            continue
        affinity = np.zeros((n, 2))
        affinity[np.arange(n), placement] = 1.0
        keys = np.array([np.concatenate([affinity.ravel(), q, q]) for q in perms])
        best = min(best, float(evaluate(graph, problem.devices, keys, "peak_memory").min()))
    assert sol.extra["bound"] <= best
