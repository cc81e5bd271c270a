"""The timed formulation of the CP-SAT peak-memory model (baselines/cpsat/timed.py): every
simulated schedule is one of its solutions, at a model peak no higher than the simulator's
(so its bound is a lower bound on the simulated optimum); a schedule the simulator cannot
make (a device idle with a ready op, a producer's tensors crossing out of id order) is not;
its optimum lies between the one-at-a-time models' optimum and the exhaustive optimum, and
the `cpsat` method runs it."""

from __future__ import annotations

import numpy as np
import pytest
from ortools.sat.python import cp_model

from regal.decode import decode
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, score, solve
from regal.sim import DeviceSpec, trace

from baselines.cpsat import build_model
from baselines.cpsat.hint import _canonical_labels, _schedule_of
from baselines.cpsat.model import _symmetric
from baselines.cpsat.timed import MAX_OPS, exact_ticks

from test_exact import _graph, exhaustive_optimum


def _solve(model: cp_model.CpModel) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 60.0
    solver.status = solver.solve(model)
    return solver


def _fixed(handles, problem, placement, op_start: dict, transfer_start: dict):
    """A copy of the model with the placement and every start time fixed."""
    model = handles.model.clone()
    var = lambda v: model.get_int_var_from_proto_index(v.index)  # noqa: E731
    d = problem.devices.count
    if d > 1:
        for v in range(problem.graph.num_nodes):
            for k in range(d):
                model.add(var(handles.x[v][k]) == int(placement[v] == k))
    for v, begin in op_start.items():
        model.add(var(handles.start[v]) == begin)
    for key, begin in transfer_start.items():
        model.add(var(handles.transfer_start[key]) == begin)
    return model


def _fixed_to_trace(handles, problem, sim_trace):
    graph, d = problem.graph, problem.devices.count
    placement = np.asarray(sim_trace.op_device)
    relabel = _canonical_labels(placement, graph, d) if _symmetric(problem) else np.arange(d)
    op_start, transfer_start = _schedule_of(problem, handles, sim_trace, relabel, False)
    return _fixed(handles, problem, relabel[placement], op_start, transfer_start)


def _devices(rng, d: int) -> DeviceSpec:
    """Fast links (copies never queue) or slow ones (copies queue on a channel and outlast
    the ops), each with exact decimal transfer times."""
    if rng.random() < 0.5:
        return DeviceSpec(d)
    return DeviceSpec(d, bandwidth=float(rng.choice([4.0, 16.0])),
                      latency=float(rng.choice([0.5, 2.0])))


@pytest.mark.parametrize("seed", range(4))
def test_every_simulated_schedule_is_a_solution(seed):
    """Random graphs (aliases, repeated inputs, control edges, zero costs, groups and pins)
    at 1-4 devices, random keys: the simulator's schedule, in the model's exact ticks, is a
    solution whose model peak is at most the simulated one."""
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(6):
        d = int(rng.integers(1, 5))
        graph = _graph(rng, int(rng.integers(4, 10)), d, bool(rng.random() < 0.4))
        problem = Problem(graph, _devices(rng, d))
        handles = build_model(problem, timed=True)
        assert handles.formulation == "timed"
        for _ in range(5):
            keys = rng.random((1, graph.num_nodes * (d + 2)))
            placement, priority, transfer = (a[0] for a in decode(keys, graph,
                                                                  problem.devices)[:3])
            sim_trace = trace(graph, problem.devices, placement, priority, transfer)
            solver = _solve(_fixed_to_trace(handles, problem, sim_trace))
            assert solver.status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
            peak = int(sim_trace.result.peak.max())
            assert solver.objective_value * handles.memory_unit <= peak
            checked += 1
    assert checked == 30


def _two_devices_graph():
    """p on device 0 makes t0 and t1 (both read on device 1 by q); a and b are free ops."""
    b = GraphBuilder()
    p, q, a, c = (b.add_op(name, cost) for name, cost in
                  (("p", 2.0), ("q", 1.0), ("a", 2.0), ("b", 3.0)))
    b.add_output(p, 8)
    b.add_output(p, 8)
    b.add_input(q, p, 0)
    b.add_input(q, p, 1)
    b.add_output(a, 8)
    b.add_output(c, 8)
    b.pin(p, 0)
    for v in (q, a, c):
        b.pin(v, 1)
    return b.build()


def test_what_the_simulator_cannot_do_is_not_a_solution():
    """Hand-made: copies of 8 bytes take 1 + 8 / 4 = 3 µs. Device 1 runs a, b and q; it may
    not idle while a or b is ready, and p's two tensors cross in id order."""
    graph = _two_devices_graph()
    problem = Problem(graph, DeviceSpec(2, bandwidth=4.0, latency=1.0))
    handles = build_model(problem, timed=True)
    scale = round(1 / handles.tick)
    p, q, a, b = (graph.index_of(name) for name in "pqab")
    placement = np.zeros(4, np.int64)
    placement[[q, a, b]] = 1
    t0, t1 = (int(t) for t in graph.outputs(p))

    def feasible(starts: dict, copies: dict) -> bool:
        op_start = {v: int(round(s * scale)) for v, s in starts.items()}
        transfer_start = {(t, 1): int(round(s * scale)) for t, s in copies.items()}
        solver = _solve(_fixed(handles, problem, placement, op_start, transfer_start))
        return solver.status in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    # the simulator's kind of schedule: a, then b, copies back to back from p's end (2 µs),
    # q once both copies are in (8 µs)
    assert feasible({p: 0, a: 0, b: 2, q: 8}, {t0: 2, t1: 5})
    # device 1 idles from 2 to 3 while b is ready
    assert not feasible({p: 0, a: 0, b: 3, q: 8}, {t0: 2, t1: 5})
    # the channel idles from 2 to 3 while t0 is ready
    assert not feasible({p: 0, a: 0, b: 2, q: 9}, {t0: 3, t1: 6})
    # t1 crosses before t0
    assert not feasible({p: 0, a: 0, b: 2, q: 8}, {t1: 2, t0: 5})
    # and the simulator itself, from any priorities, makes the first one
    sim_trace = trace(graph, problem.devices, placement, np.array([0.0, 0.0, 0.9, 0.1]),
                      np.zeros(4))
    assert sim_trace.op_start.tolist() == [0.0, 8.0, 0.0, 2.0]


def _optimum(handles) -> float:
    solver = _solve(handles.model)
    assert solver.status == cp_model.OPTIMAL
    return solver.objective_value * handles.memory_unit


def test_optimum_between_the_one_at_a_time_models_and_the_exhaustive_optimum():
    """On random graphs of 4-6 ops at 2 and 3 devices: one-at-a-time optimum <= timed
    optimum <= the simulator's exhaustive optimum, and the timed model is exact on more of
    them (it keeps the parallel timing the others drop)."""
    rng = np.random.default_rng(11)
    exact_timed = exact_serial = 0
    cases = 16
    for i in range(cases):
        d = (2, 3)[i % 2]
        graph = _graph(rng, int(rng.integers(4, 7)), d, bool(rng.random() < 0.3))
        problem = Problem(graph, DeviceSpec(d))
        serial = _optimum(build_model(problem))
        timed = _optimum(build_model(problem, timed=True))
        best = exhaustive_optimum(graph, problem.devices)
        assert serial <= timed <= best
        exact_timed += timed == best
        exact_serial += serial == best
    assert exact_timed > exact_serial


def test_cpsat_method_with_the_timed_formulation():
    """The answer is the simulator's value of its solution, its bound is below the
    exhaustive optimum, and a proof is claimed only at that optimum."""
    rng = np.random.default_rng(5)
    for i in range(4):
        d = 2 + i % 2
        graph = _graph(rng, 6, d, False)
        problem = Problem(graph, DeviceSpec(d))
        found = solve("cpsat", problem, 200, 0, time_limit=20.0, formulation="timed")
        assert found.value == score(problem, found.placement, found.priority,
                                    found.transfer_priority)["value"]
        best = exhaustive_optimum(graph, problem.devices)
        assert found.value >= best
        assert found.extra["bound"] <= best
        if found.extra["proven_optimal"]:
            assert found.value == best
        if found.extra["model_skipped"] is None:
            assert found.extra["formulation"] == "timed"


def test_the_timed_formulation_refuses_what_it_cannot_model():
    b = GraphBuilder()
    x = b.add_op("x", 1.0 / 3.0)
    b.add_output(x, 8)
    b.add_input(b.add_op("y", 1.0), x, 0)
    graph = b.build()
    assert exact_ticks(Problem(graph, DeviceSpec(2))) is None
    with pytest.raises(ValueError, match="whole numbers of ticks"):
        solve("cpsat", Problem(graph, DeviceSpec(2)), 50, 0, formulation="timed")
    with pytest.raises(ValueError, match="peak memory only"):
        solve("cpsat", Problem(_two_devices_graph(), DeviceSpec(2), "makespan"), 50, 0,
              formulation="timed")
    with pytest.raises(ValueError, match="peak memory only"):
        build_model(Problem(_two_devices_graph(), DeviceSpec(2), "makespan"), timed=True)
    chain = GraphBuilder()
    for v in range(MAX_OPS + 1):
        chain.add_op(f"op{v}", 1.0)
        chain.add_output(v, 8)
        if v:
            chain.add_input(v, v - 1, 0)
    with pytest.raises(ValueError, match=f"at most {MAX_OPS} ops"):
        solve("cpsat", Problem(chain.build(), DeviceSpec(2)), 50, 0, formulation="timed")


def test_cpsat_starts_from_initial_without_the_heuristics():
    """`initial` replaces the heuristics: the best of the given solutions is the hint, and
    the answer is never worse than it."""
    rng = np.random.default_rng(8)
    graph = _graph(rng, 7, 2, False)
    problem = Problem(graph, DeviceSpec(2))
    given = [solve("gp-dfs", problem, 1, 0), solve("m-topo", problem, 1, 0)]
    best = min(given, key=lambda s: s.value)
    found = solve("cpsat", problem, 50, 0, time_limit=10.0, formulation="timed",
                  initial=given)
    assert found.extra["heuristics"] == {s.method: s.value for s in given}
    # the hint: the best given, or the one-at-a-time model's answer when that is better
    assert found.extra["hint_value"] <= best.value
    assert found.extra["hint_method"] in (best.method, "cpsat-one-at-a-time")
    assert found.value <= best.value
    with pytest.raises(ValueError, match="no solution"):
        solve("cpsat", problem, 50, 0, initial=[])


def test_the_one_at_a_time_model_runs_first_and_floors_the_timed_one():
    """Before the timed model, the one-at-a-time model: its bound counts (never above the
    answer) and floors the timed model, and the answer is still the simulator's."""
    from pathlib import Path

    from regal.io import load_graph

    path = Path(__file__).resolve().parent.parent / "data/synth/samples/transformer_infer_40.npz"
    problem = Problem(load_graph(path), DeviceSpec(2))
    found = solve("cpsat", problem, 100_000, 0, time_limit=4.0, formulation="timed")
    extra = found.extra
    assert extra["formulation"] == "timed" and extra["solver_status"] != "OPTIMAL"
    assert extra["one_at_a_time_status"] in ("OPTIMAL", "FEASIBLE", "UNKNOWN")
    assert extra["bound"] >= extra["one_at_a_time_bound"]
    assert extra["bound"] <= found.value
    if extra["model_objective"] is not None:     # the timed model's, floored
        assert extra["model_objective"] >= extra["one_at_a_time_bound"]
    assert found.value == score(problem, found.placement, found.priority,
                                found.transfer_priority)["value"]
    assert found.evaluations <= 100_000
