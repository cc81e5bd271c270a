"""experiments/event_search.py (issue 39: a lower bound that keeps the timing): its event loop
is the simulator's, and its bound is the exhaustive optimum on graphs small enough to
enumerate (tests/test_exact.py's search), never above it."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import experiment, random_case
from regal.bounds import lower_bound
from regal.sim import DeviceSpec, simulate
from test_exact import _cases, exhaustive_optimum

search = experiment("event_search")


def test_following_a_solution_gives_the_simulators_peaks():
    """With the solution's own choices at every branch, each device's peak to the byte
    (aliases, control edges, groups and pins, zero costs, 1-8 devices, slow and fast links)."""
    rng = np.random.default_rng(46)
    for _ in range(300):
        case = random_case(rng)
        devices = DeviceSpec(case["count"], bandwidth=case["bandwidth"],
                             latency=case["latency"])
        args = (case["placement"], case["priority"], case["transfer_priority"])
        assert search.EventSearch(case["graph"], devices).follow(*args) == \
            simulate(case["graph"], devices, *args).peak.tolist()


@pytest.mark.parametrize("seed, constrained", [(0, False), (1, True)])
def test_the_bound_is_the_exhaustive_optimum_on_tiny_graphs(seed, constrained):
    """Every simulated schedule is a leaf, so the least leaf is at most the optimum; on these
    graphs it is the optimum (a device's choices are a static order's)."""
    for graph, devices in _cases(seed, 12, constrained):
        optimum = int(exhaustive_optimum(graph, devices))
        floor = lower_bound(graph, devices).value
        found = search.event_search_bound(graph, devices, floor, optimum, time_limit=30)
        assert found.complete and found.value == optimum, (found, optimum)


def test_a_target_below_the_optimum_is_refuted_and_one_above_is_not():
    graph, devices = next(_cases(2, 3, False))
    optimum = int(exhaustive_optimum(graph, devices))
    es = search.EventSearch(graph, devices)
    assert es.least_peak_below(optimum)[0] is None          # nothing below the optimum
    assert es.least_peak_below(optimum + 1)[0] == optimum   # the optimum itself is a leaf
