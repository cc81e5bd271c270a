"""Problems shared by the tests of a climb's compiled drawing (tests/test_climb.py) and of
the move ranker's compiled features (tests/test_advantage.py)."""

from __future__ import annotations

import numpy as np

from helpers import random_graph
from regal import synth
from regal.optimizers import Problem
from regal.sim import DeviceSpec, evaluate


def with_groups_and_pins(graph, rng, d):
    """`graph` with a few random colocation groups and a few pinned ops (whose groups then
    are pinned), for `d` devices; pins that would put one group on two devices are dropped."""
    from regal.constraints import with_constraints
    from regal.graph import GraphError

    names = [str(name) for name in graph.names.tolist()]
    n = len(names)
    groups = [[names[int(v)] for v in rng.choice(n, size=int(rng.integers(2, 5)), replace=False)]
              for _ in range(max(1, n // 12))]
    pins = {names[int(v)]: int(rng.integers(d)) for v in rng.choice(n, size=max(1, n // 15),
                                                                       replace=False)}
    while True:
        try:
            return with_constraints(graph, pins=pins, colocate=groups, num_devices=d)
        except GraphError:
            pins.popitem()


def drawing_cases():
    """Problems for the drawing and feature agreement tests: small random graphs, 1 to 4
    devices, free and with groups and pins, peak memory and time under per-device limits."""
    rng = np.random.default_rng(11)
    cases = []
    for i, d in enumerate((1, 2, 3, 4, 2, 3)):
        graph = random_graph(rng, int(rng.integers(8, 45))) if i % 2 else \
            synth.random_dag(int(rng.integers(40, 160)), int(rng.integers(1, 99)))
        single = float(evaluate(graph, DeviceSpec(1), np.concatenate(
            [np.ones(graph.num_nodes), np.linspace(1, 0, graph.num_nodes),
             np.linspace(1, 0, graph.num_nodes)])[None, :], "peak_memory")[0])
        if i >= 2:
            graph = with_groups_and_pins(graph, rng, d)
        cases.append(Problem(graph, DeviceSpec(d)))
        if d > 1:       # a per-device limit: the moves aim at the device most over its own
            limits = [int(single * f) for f in np.linspace(0.3, 0.6, d)]
            cases.append(Problem(graph, DeviceSpec(d, memory_limit=limits), "makespan"))
    return cases
