"""The move ranker's restart gate (`MoveRanker.restart_now`, `Climb`'s calling a step off):
its inputs on a hand case, its logistic against a written-out one, the weights' round trip, the
climb's counters against an independent derivation, and that a gate which never fires leaves
a climb exactly as it was."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from regal import synth
from regal.optimizers import Problem
from regal.search.advantage import GATE_FEATURES, REGIMES, MoveRanker, gate_features
from regal.search.climb import Climb
from regal.sim import DeviceSpec

G = len(GATE_FEATURES)


def _ranker(gates=None, seed=5):
    rng = np.random.default_rng(seed)
    from regal.search.move_features import FEATURES

    return MoveRanker.linear(rng.normal(size=(len(REGIMES), len(FEATURES))), rng.normal(size=3),
                             rng.normal(size=len(FEATURES)),
                             rng.uniform(0.5, 2, len(FEATURES)), gates=gates)


def _gate(seed=6, threshold=0.0):
    rng = np.random.default_rng(seed)
    return dict(mean=rng.normal(size=G), scale=rng.uniform(0.5, 2, G), coef=rng.normal(size=G),
                bias=np.array([rng.normal()]), threshold=np.array([threshold]))


def test_gate_features_on_a_hand_case():
    climb = SimpleNamespace(current_key=(110.0, 0.0), best_key=(100.0, 0.0), stale=30,
                            patience=120, batch=8, batch_size=32, last_improved=False,
                            fail_run=3, restarts=2)
    # scores: lower is better; advantages -3, -1, -2, 0; the best 2 are 0 and -1
    x = gate_features(climb, np.array([3.0, 1.0, 2.0, 0.0]), 2)
    expected = dict(top_max=0.0, top_mean=-0.5, top_min=-1.0, all_mean=-1.5,
                    all_std=np.sqrt(1.25), top_minus_all=1.0, stale_frac=0.25,
                    batch_frac=0.25, gap_to_best=0.1, last_improved=0.0,
                    log_fail_run=np.log(4.0), log_restarts=np.log(3.0))
    assert tuple(expected) == GATE_FEATURES
    assert x == pytest.approx(list(expected.values()), rel=1e-12)


def test_restart_now_is_the_written_out_logistic_below_its_threshold():
    gate = _gate(threshold=0.3)
    ranker = _ranker(gates=[gate, None, None])
    rng = np.random.default_rng(1)
    for trial in range(30):
        climb = SimpleNamespace(current_key=(float(rng.uniform(100, 120)), 0.0),
                                best_key=(100.0, 0.0), stale=int(rng.integers(0, 100)),
                                patience=100, batch=int(rng.integers(1, 33)), batch_size=32,
                                last_improved=bool(rng.integers(2)),
                                fail_run=int(rng.integers(0, 9)),
                                restarts=int(rng.integers(0, 5)),
                                _advantage_context=SimpleNamespace(regime=0))
        scores = rng.normal(size=4 * climb.batch)
        x = gate_features(climb, scores, climb.batch)
        logit = sum((x[i] - gate["mean"][i]) / gate["scale"][i] * gate["coef"][i]
                    for i in range(G)) + gate["bias"][0]
        assert ranker.gate_logit(climb, scores, climb.batch) == pytest.approx(logit, rel=1e-9)
        assert ranker.restart_now(climb, scores, climb.batch) == (logit < 0.3)
        # a regime without a gate never calls a step off
        climb._advantage_context.regime = 1
        assert ranker.gate_logit(climb, scores, climb.batch) is None
        assert ranker.restart_now(climb, scores, climb.batch) is False


def test_gates_round_trip_and_change_the_weights_identity(tmp_path):
    plain, gated = _ranker(), _ranker(gates=[_gate(), None, _gate(seed=7)])
    for ranker in (plain, gated):
        ranker.save(tmp_path / "r.npz")
        again = MoveRanker.load(tmp_path / "r.npz")
        assert [g is None for g in again.gates] == [g is None for g in ranker.gates]
        for mine, theirs in zip(ranker.gates, again.gates):
            if mine is not None:
                assert all(np.array_equal(mine[k], theirs[k]) for k in mine)
        assert all(np.array_equal(a, b) for a, b in zip(ranker.numbers(), again.numbers()))
    assert len(list(gated.numbers())) == len(list(plain.numbers())) + 10


def test_a_gate_of_the_wrong_shape_or_features_is_refused(tmp_path):
    bad = _gate()
    bad["coef"] = bad["coef"][:-1]
    with pytest.raises(ValueError, match="gate of regime peak_memory"):
        _ranker(gates=[bad, None, None])
    with pytest.raises(ValueError, match="one gate"):
        _ranker(gates=[None])
    _ranker(gates=[_gate(), None, None]).save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz") as z:
        arrays = dict(z)
    arrays["gate_features"] = np.array(["x"] * G)
    np.savez(tmp_path / "other.npz", **arrays)
    with pytest.raises(ValueError, match="other features"):
        MoveRanker.load(tmp_path / "other.npz")


class _Recorder:
    """Ranks like `ranker`; on each step keeps the climb's gate counters beside its
    (accepted, restarts) counts, and calls the step off where `fire(step)` says."""

    def __init__(self, ranker, fire=lambda step: False):
        self.ranker, self.fire, self.seen = ranker, fire, []

    def __call__(self, climb, drawn):
        return self.ranker(climb, drawn)

    rank_drawn = __call__

    def restart_now(self, climb, scores, count):
        self.seen.append((climb.accepted, climb.restarts, climb.last_improved, climb.fail_run))
        return self.fire(len(self.seen))


@pytest.mark.parametrize("fire_every", [0, 5])
def test_the_climbs_counters_match_a_derivation_from_its_accepts_and_kicks(fire_every):
    """last_improved: the climb accepted a move since the previous step; fail_run: steps
    without an accept since the last accept or kick (derived from the counters alone)."""
    problem = Problem(synth.random_dag(70, 11), DeviceSpec(3))
    fire = (lambda step: False) if not fire_every else (lambda step: step % fire_every == 0)
    recorder = _Recorder(_ranker(), fire)
    climb = Climb(problem, 3000, 2, rank_moves=recorder, draw=4)
    climb.run(3000)
    assert climb.gated == (0 if not fire_every else len(recorder.seen) // fire_every)
    fails = 0
    for before, after in zip(recorder.seen, recorder.seen[1:]):
        improved = after[0] > before[0]
        kicked = after[1] > before[1]
        fails = 0 if improved or kicked else fails + 1
        assert after[2] == improved and after[3] == fails
    assert climb.used <= 3000 and climb.restarts >= climb.gated


def test_a_gate_that_never_fires_changes_nothing_and_one_that_always_fires_only_kicks():
    problem = Problem(synth.random_dag(60, 3), DeviceSpec(4))
    never = _ranker(gates=[_gate(threshold=-np.inf), None, None])
    plain = _ranker()
    a = Climb(problem, 2000, 4, rank_moves=plain, draw=4).run(2000)
    b = Climb(problem, 2000, 4, rank_moves=never, draw=4).run(2000)
    assert np.array_equal(a.best, b.best) and a.best_key == b.best_key
    assert (a.used, a.steps, a.restarts, b.gated) == (b.used, b.steps, b.restarts, 0)
    always = _ranker(gates=[_gate(threshold=np.inf), None, None])
    c = Climb(problem, 2000, 4, rank_moves=always, draw=4)
    used, repeats = c.used, c.repeats
    c.run(2000)
    # no batch is ever evaluated: every evaluation (or free repeat) after the starts is a kick
    assert c.gated > 0 and c.accepted == 0 and c.restarts == c.gated
    assert (c.used - used) + (c.repeats - repeats) == c.restarts
    assert c.used == 2000 or c.repeats >= 2 * 2000
