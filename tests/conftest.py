"""Test-session set-up and the fixtures shared by every test file.

Helper functions live in tests/helpers.py (`from helpers import ...`); nothing imports
this file."""

import regal.tfenv  # noqa: F401  (first: Keras 2 for spektral; OR-Tools before TensorFlow)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def counted(monkeypatch):
    """Counts chromosomes evaluated through regal.sim.evaluate: {"n": rows so far}."""
    import regal.sim

    rows = {"n": 0}
    real = regal.sim.evaluate

    def counting(graph, devices, keys, *args, **kwargs):
        rows["n"] += len(np.atleast_2d(keys))
        return real(graph, devices, keys, *args, **kwargs)

    monkeypatch.setattr(regal.sim, "evaluate", counting)
    return rows


class EvaluationClock:
    """Seconds that pass only while chromosomes are scored: `tick` a row. Powers of two, so
    that every reading, and every difference of two, is exact."""

    def __init__(self, tick: float):
        self.tick = tick
        self.now = 1024.0
        self.batches: list[int] = []   # the rows of every batch scored, in order

    def __call__(self) -> float:
        return self.now

    def score(self, rows: int) -> None:
        self.batches.append(rows)
        self.now += self.tick * rows

    def spend(self, seconds: float) -> None:
        """Work that scores nothing but takes time (a heuristic, say)."""
        self.now += seconds


@pytest.fixture
def evaluation_clock(monkeypatch):
    """A clock for deadline tests that a busy machine cannot upset: it stands still except
    while chromosomes are scored through regal.sim.evaluate, each row moving it on
    `clock.tick` seconds (2**-11, about 0.5 ms, unless the test sets it), or when the test
    moves it (`clock.spend(seconds)`). The test installs it where the code under test reads
    the time (`time.perf_counter`, `regal.bestknown._clock`): a deadline then falls after a
    fixed count of evaluations, whatever the machine's load."""
    import regal.sim

    clock = EvaluationClock(2.0**-11)
    real = regal.sim.evaluate

    def scoring(graph, devices, keys, *args, **kwargs):
        clock.score(len(np.atleast_2d(keys)))
        return real(graph, devices, keys, *args, **kwargs)

    monkeypatch.setattr(regal.sim, "evaluate", scoring)
    return clock
