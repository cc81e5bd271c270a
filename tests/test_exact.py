"""Proven optima (issue 39 item 2): what `cpsat` calls proven optimal is the simulator's
optimum, checked against an exhaustive search on graphs of at most 7 ops at 1, 2 and 3
devices, with aliases, repeated inputs, control edges, colocation groups and pins.

The exhaustive search enumerates what the simulator can tell apart (SIM_RULES 3, 5, 12-13):
every placement that honours the groups and pins, every order of the ops of each device
(priorities are compared only among one device's ops) and every order of the producers of
each device whose tensors cross to another device (transfer priorities are compared only on
one channel, whose source is the producer's device).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from regal.bounds import lower_bound
from regal.graph_builder import GraphBuilder
from regal.optimizers import Problem, score, solve
from regal.sim import DeviceSpec, evaluate

from baselines import cpsat
from baselines.cpsat.model import _ancestor_counts
from baselines.cpsat.sequence import _reachability


def _rank_keys(groups: list[list[int]], n: int) -> list[np.ndarray]:
    """Every combination of one order per group, as priority keys (higher runs first);
    ops in no group get 0."""
    out = []
    for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
        key = np.zeros(n)
        for order in orders:
            for rank, v in enumerate(order):
                key[v] = (len(order) - rank) / (n + 1)
        out.append(key)
    return out


def exhaustive_optimum(graph, devices: DeviceSpec) -> float:
    """The least simulated peak memory over every distinguishable solution."""
    n, d = graph.num_nodes, devices.count
    leader = np.asarray(graph.colocation)
    pinned = np.asarray(graph.pinned)
    consumers = [graph.consumers(t) for t in range(graph.num_tensors)]
    best = math.inf
    for placement in itertools.product(range(d), repeat=n):
        placement = np.asarray(placement)
        if (placement != placement[leader]).any() or ((pinned >= 0) & (placement != pinned)).any():
            continue
        per_device = [[v for v in range(n) if placement[v] == k] for k in range(d)]
        senders = [[] for _ in range(d)]
        for t in range(graph.num_tensors):
            p = int(graph.tensor_producer[t])
            if any(placement[int(c)] != placement[p] for c in consumers[t]) \
                    and p not in senders[placement[p]]:
                senders[placement[p]].append(p)
        affinity = np.eye(d)[placement].ravel()
        keys = [np.concatenate([affinity, prio, tprio])
                for prio in _rank_keys(per_device, n)
                for tprio in _rank_keys([s for s in senders if len(s) > 1], n)]
        best = min(best, float(evaluate(graph, devices, np.asarray(keys), "peak_memory",
                                        threads=1).min()))
    return best


def _graph(rng: np.random.Generator, n: int, d: int, constrained: bool):
    """A random DAG of n ops (ids not in topological order): unconsumed outputs, aliases
    (chains too), a tensor read on two ports, control edges, temporary and persistent
    memory, zero costs; with `constrained`, a colocation group and a pin."""
    rank = rng.permutation(n)
    by_rank = np.argsort(rank)
    b = GraphBuilder()
    for v in range(n):
        b.add_op(f"op{v}", float(rng.integers(0, 4)),
                 temporary_memory=int(rng.integers(1, 6)) * 8 * int(rng.random() < 0.3),
                 persistent_memory=int(rng.integers(1, 6)) * 8 * int(rng.random() < 0.3))
    num_outputs = rng.integers(1, 3, size=n)
    inputs = [[] for _ in range(n)]
    for r in range(1, n):
        v = int(by_rank[r])
        earlier = [int(u) for u in by_rank[:r]]
        for _ in range(int(rng.integers(0, 3))):
            u = int(rng.choice(earlier))
            inputs[v].append((u, int(rng.integers(0, num_outputs[u]))))
            if rng.random() < 0.1:
                inputs[v].append(inputs[v][-1])
    for v in range(n):
        for u, port in inputs[v]:
            b.add_input(v, u, port)
        for _ in range(int(num_outputs[v])):
            alias = int(rng.integers(0, len(inputs[v]))) \
                if inputs[v] and rng.random() < 0.3 else -1
            b.add_output(v, int(rng.integers(1, 9)) * 8, alias)
    for _ in range(int(rng.integers(0, 3))):
        lo, hi = sorted(rng.choice(n, size=2, replace=False).tolist())
        b.add_control(int(by_rank[lo]), int(by_rank[hi]))
    if constrained:
        a, c = rng.choice(n, size=2, replace=False).tolist()
        b.colocate(a, c)
        if d > 1:
            b.pin(int(rng.choice([v for v in range(n) if v not in (a, c)])),
                  int(rng.integers(0, d)))
    return b.build()


def _cases(seed: int, count: int, constrained: bool):
    rng = np.random.default_rng(seed)
    for i in range(count):
        d = (1, 2, 3)[i % 3]
        n = int(rng.integers(4, 8 if d < 3 else 7))
        devices = DeviceSpec(d, bandwidth=float(rng.choice([4.0, 16.0])),
                             latency=float(rng.choice([0.0, 1.0])))
        yield _graph(rng, n, d, constrained), devices


def _check(graph, devices) -> tuple[bool, bool, bool]:
    """cpsat against the exhaustive optimum: (proven, the model proved its own optimum,
    proven by the model's bound where regal.bounds fell short)."""
    problem = Problem(graph, devices, "peak_memory")
    optimum = exhaustive_optimum(graph, devices)
    sol = solve("cpsat", problem, 300, 0, time_limit=10.0, reproducible=True)
    extra = sol.extra
    rescored = score(problem, sol.placement, sol.priority, sol.transfer_priority)["value"]
    assert rescored == sol.value                   # the value is the simulator's
    assert extra["bound"] <= optimum <= sol.value  # the bound is valid
    assert extra["proven_optimal"] == (sol.value <= extra["bound"])
    if extra["proven_optimal"]:
        assert sol.value == optimum == extra["bound"]
    leader, pinned = np.asarray(graph.colocation), np.asarray(graph.pinned)
    assert (sol.placement == sol.placement[leader]).all()
    assert ((pinned < 0) | (sol.placement == pinned)).all()
    by_model = bool(extra["proven_optimal"] and extra["bound_source"] == "cpsat_model"
                    and lower_bound(graph, devices).value < optimum)
    return bool(extra["proven_optimal"]), extra["solver_status"] == "OPTIMAL", by_model


@pytest.mark.parametrize("constrained", (False, True))
def test_proven_value_is_the_exhaustive_optimum(constrained):
    proven = model_proved = by_model = 0
    cases = list(_cases(39 + constrained, 12, constrained))
    for graph, devices in cases:
        p, m, b = _check(graph, devices)
        proven += p
        model_proved += m or p
        by_model += b
    # the model proves its optimum on every tiny graph (or the hint meets regal.bounds);
    # most of those optima are the simulator's, some proven only by the model's bound.
    # Elsewhere the model's optimum is below the simulator's: its schedule starts a
    # transfer later than the simulator would (a copy arrives while its producer's device
    # runs on), or keeps a device idle with an op ready. Measured: 10 of 12 proven, 4 by
    # the model's bound alone (free ops); 8 of 12, all by regal.bounds (groups and pins)
    assert model_proved == len(cases)
    assert proven >= len(cases) // 2
    if not constrained:
        assert by_model >= 1


def test_symmetry_breaking_keeps_every_canonical_placement():
    # 3 free ops, 3 devices: the canonical placements (devices numbered by first use along
    # the topological order) are the 5 set partitions of 3 ops; the model allows exactly them
    b = GraphBuilder()
    for name in ("a", "b", "c"):
        b.add_op(name, 1.0, persistent_memory=8)
    graph = b.build()
    problem = Problem(graph, DeviceSpec(3), "peak_memory")
    handles = cpsat.build_sequence_model(problem)
    from ortools.sat.python import cp_model

    class Collect(cp_model.CpSolverSolutionCallback):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def on_solution_callback(self):
            self.seen.add(tuple(next(k for k in range(3) if self.boolean_value(handles.x[v][k]))
                                for v in graph.topo_order))

    model = handles.model
    model.clear_objective()
    solver = cp_model.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    collect = Collect()
    solver.solve(model, collect)
    assert collect.seen == {(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 2)}


def test_time_windows_count_ancestors_and_descendants():
    rng = np.random.default_rng(5)
    graph = _graph(rng, 7, 2, False)
    reach = _reachability(graph)
    ancestors, descendants = _ancestor_counts(graph)
    assert (ancestors == reach.sum(axis=0)).all() and (descendants == reach.sum(axis=1)).all()
