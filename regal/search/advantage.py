"""A learned move ranker for the climbs: a "local advantage function" over cheap features
of each drawn neighbour's change from the incumbent (after Wu et al., "Learning Local
Advantage Functions for Generalizable Graph Optimizations").

Why: a climb (`regal.search.climb.Climb`) may draw `draw` times its batch and evaluate only
the best-ranked batch (`rank_moves`). An oracle that simulates every drawn neighbour for free
bounds what that can give (`experiments/ceilings.py`); a ranker that reads the change itself,
compiled and without simulating, can only hope for part of it. The features
(`regal.search.move_features`) describe each candidate's diff from the incumbent relative to
what sets the incumbent's peak. `MoveRanker` scores them with a small network per regime
(`REGIMES`: the objective, and under running time whether a device is over its limit; within
one step only the regime's weights matter, so a feature that is constant over the
candidates, like the regime itself, can act only through them) and returns minus the
predicted advantage (lower is better, as `rank_moves` wants). The shipped one is two ReLU
layers of 64 fitted listwise (each logged step's improving moves against the rest of its
draw): it finds the rare improving move of a hard step far more often than a linear fit of
each move alone did (`experiments/results/move_ranker.md`).
The weights are fitted by `experiments/move_ranker.py` (`data/policy/move_ranker.npz`).

A ranker may also carry a restart gate per regime (`MoveRanker.restart_now`): a logistic
model over `GATE_FEATURES` (how well the step's best-ranked batch scores against its whole
draw, and how the climb has fared since its last improvement or kick) of the chance that the
batch holds an improving move. Below its threshold the climb evaluates nothing and restarts
from its best (`Climb`). Why: in the ranker's own climbs on the training graphs 53% of the
steps under peak memory held no improving move among the 4 x batch drawn, and each still cost
up to a batch of evaluations; an oracle that knew which (and skipped them for free) gained
about 1.3 / 2.0 points over the ranker alone (2 / 4 devices, `data/policy/README.md`).
Deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from regal.search.move_features import F, FEATURES, REGIMES, move_features
from regal.workers import single_threaded_blas

__all__ = ["FEATURES", "GATE_FEATURES", "REGIMES", "gate_features", "MoveRanker",
           "network_scores"]


GATE_FEATURES = (
    "top_max",           # the best advantage among the drawn
    "top_mean",          # the mean advantage of the best-ranked `count` (the batch to evaluate)
    "top_min",           # the least advantage in that batch
    "all_mean",          # the mean advantage of everything drawn
    "all_std",           # its spread
    "top_minus_all",     # top_mean - all_mean
    "stale_frac",        # neighbours evaluated since the last improvement or kick / patience
    "batch_frac",        # the climb's batch / its largest
    "gap_to_best",       # (incumbent's value - best value) / best: high just after a kick
    "last_improved",     # 1 when the climb's last evaluated step improved
    "log_fail_run",      # log(1 + evaluated steps without improvement since then or a kick)
    "log_restarts",      # log(1 + kicks so far)
)


def gate_features(climb, scores: np.ndarray, count: int) -> np.ndarray:
    """[len(GATE_FEATURES)] the restart gate's inputs for one climb step: `scores` of the
    drawn neighbours (a ranker's, lower is better), of which the best `count` would be
    evaluated, and the climb's counters (`Climb.fail_run`, `Climb.last_improved`)."""
    advantage = -np.asarray(scores, np.float64)
    top = np.sort(advantage)[::-1][:max(1, int(count))]
    # the means and the spread as ndarray.mean and .std compute them (the same sums), without
    # their wrappers: they were most of this function's time
    top_mean, all_mean = top.sum() / len(top), advantage.sum() / len(advantage)
    spread = advantage - all_mean
    std = np.sqrt((spread * spread).sum() / len(advantage))
    current, best = float(climb.current_key[0]), float(climb.best_key[0])
    return np.array([
        top[0], top_mean, top[-1], all_mean, std,
        top_mean - all_mean, climb.stale / climb.patience,
        climb.batch / climb.batch_size, (current - best) / max(abs(best), 1e-12),
        1.0 if climb.last_improved else 0.0, np.log1p(climb.fail_run),
        np.log1p(climb.restarts)])


def network_scores(layers: list, z: np.ndarray) -> np.ndarray:
    """[m] the output of `layers` ((kernel, bias) pairs, ReLU between them) for inputs z [m, F]."""
    h = z
    for i, (kernel, bias) in enumerate(layers):
        h = h @ kernel + bias
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h[:, 0]


class MoveRanker:
    """A `rank_moves` for `Climb`: minus the learned advantage of each drawn neighbour (lower
    score = better move). Per regime a small network over the features standardised by
    `mean`, `scale`: `layers[regime]` is a list of (kernel [in, out], bias [out]) with a ReLU
    between them and one output; a single layer is a linear advantage `w . z + b`.

    `gates[regime]`, when not None, is a restart gate (`restart_now`): a dict of `mean`,
    `scale`, `coef` ([len(GATE_FEATURES)] each), `bias` and `threshold` (logits).

    `.npz` files hold the layers and gates with the feature and regime names (`save`, `load`;
    names must match). `elapsed` sums the seconds spent in calls (the ranker's own wall time)."""

    def __init__(self, layers, mean=None, scale=None, meta: str = "", gates=None) -> None:
        if len(layers) != len(REGIMES):
            raise ValueError(f"one layer list per regime ({len(REGIMES)}), not {len(layers)}")
        self.layers = [[(np.asarray(k, np.float64), np.asarray(b, np.float64)) for k, b in regime]
                       for regime in layers]
        for regime in self.layers:
            width = F
            for kernel, bias in regime:
                if kernel.shape != (width, len(bias)):
                    raise ValueError(f"layer of shape {kernel.shape} after width {width}")
                width = len(bias)
            if width != 1:
                raise ValueError(f"the last layer has {width} outputs, not 1")
        self.mean = np.zeros(F) if mean is None else np.asarray(mean, np.float64)
        self.scale = np.ones(F) if scale is None else np.asarray(scale, np.float64)
        self.meta = str(meta)
        self.gates = [None] * len(REGIMES) if gates is None else list(gates)
        if len(self.gates) != len(REGIMES):
            raise ValueError(f"one gate (or None) per regime ({len(REGIMES)}), "
                             f"not {len(self.gates)}")
        G = len(GATE_FEATURES)
        for g, gate in enumerate(self.gates):
            if gate is None:
                continue
            gate = {key: np.asarray(gate[key], np.float64) for key in
                    ("mean", "scale", "coef", "bias", "threshold")}
            if any(gate[key].shape != (G,) for key in ("mean", "scale", "coef")) \
                    or gate["bias"].size != 1 or gate["threshold"].size != 1:
                raise ValueError(f"gate of regime {REGIMES[g]}: mean, scale, coef of length "
                                 f"{G}, one bias and one threshold")
            self.gates[g] = gate
        self.elapsed = 0.0
        self.calls = 0

    @classmethod
    def linear(cls, weights, bias=None, mean=None, scale=None, meta: str = "",
               gates=None) -> "MoveRanker":
        """The linear advantage `weights[regime] . z + bias[regime]`."""
        weights = np.asarray(weights, np.float64).reshape(len(REGIMES), F)
        bias = np.zeros(len(REGIMES)) if bias is None else np.asarray(bias, np.float64)
        return cls([[(weights[g][:, None], bias[g:g + 1])] for g in range(len(REGIMES))],
                   mean, scale, meta, gates)

    def advantage(self, features: np.ndarray, regime: int) -> np.ndarray:
        z = (np.asarray(features, np.float64) - self.mean) / self.scale
        return network_scores(self.layers[regime], z)

    def __call__(self, climb, drawn) -> np.ndarray:
        """Scores (lower = better) of the drawn neighbours: chromosomes [m, G] or the
        writes the climb drew (`regal.search.moves.Drawn`)."""
        import time

        started = time.perf_counter()
        x = move_features(climb, drawn)
        with single_threaded_blas():
            scores = -self.advantage(x, climb._advantage_context.regime)
        self.elapsed += time.perf_counter() - started
        self.calls += 1
        return scores

    # a climb hands its drawn neighbours over as writes (no chromosome made for the ones
    # that are not evaluated)
    rank_drawn = __call__

    def gate_logit(self, climb, scores: np.ndarray, count: int) -> float | None:
        """The restart gate's logit of "the best-ranked `count` of these `scores` hold an
        improving move" for `climb`'s step, or None where its regime has no gate."""
        gate = self.gates[climb._advantage_context.regime]
        if gate is None:
            return None
        z = (gate_features(climb, scores, count) - gate["mean"]) / gate["scale"]
        return float(z @ gate["coef"] + gate["bias"].reshape(-1)[0])

    def restart_now(self, climb, scores: np.ndarray, count: int) -> bool:
        """Whether `climb` should skip evaluating this step's batch and restart from its best
        (the gate's logit below its threshold); never where the regime has no gate."""
        logit = self.gate_logit(climb, scores, count)
        return logit is not None and logit < float(
            self.gates[climb._advantage_context.regime]["threshold"].reshape(-1)[0])

    def save(self, path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f"r{g}_{what}{i}": value for g, regime in enumerate(self.layers)
                  for i, pair in enumerate(regime) for what, value in zip(("kernel", "bias"), pair)}
        with open(path, "wb") as f:
            for g, gate in enumerate(self.gates):
                if gate is not None:
                    arrays.update({f"gate{g}_{key}": value for key, value in gate.items()})
            np.savez(f, mean=self.mean, scale=self.scale, features=np.array(FEATURES),
                     regimes=np.array(REGIMES), meta=np.array(self.meta),
                     gate_features=np.array(GATE_FEATURES),
                     depth=np.array([len(regime) for regime in self.layers]), **arrays)

    @classmethod
    def load(cls, path) -> "MoveRanker":
        with np.load(Path(path), allow_pickle=False) as z:
            if tuple(z["features"].tolist()) != FEATURES or tuple(z["regimes"].tolist()) != REGIMES:
                raise ValueError(f"{path}: weights for other features or regimes than "
                                 f"regal.search.move_features'")
            if "depth" not in z.files:
                raise ValueError(f"{path}: not a move ranker file of this version (no layers)")
            layers = [[(z[f"r{g}_kernel{i}"], z[f"r{g}_bias{i}"]) for i in range(int(depth))]
                      for g, depth in enumerate(z["depth"].tolist())]
            gates = [None] * len(REGIMES)
            if any(name.startswith("gate") and name != "gate_features" for name in z.files):
                if tuple(z["gate_features"].tolist()) != GATE_FEATURES:
                    raise ValueError(f"{path}: a restart gate over other features than "
                                     f"regal.search.advantage.GATE_FEATURES")
                gates = [{key: z[f"gate{g}_{key}"] for key in
                          ("mean", "scale", "coef", "bias", "threshold")}
                         if f"gate{g}_coef" in z.files else None for g in range(len(REGIMES))]
            return cls(layers, z["mean"], z["scale"], str(z["meta"]), gates)

    def numbers(self):
        """Every number of the ranker, in a fixed order (what identifies its weights)."""
        yield self.mean
        yield self.scale
        for regime in self.layers:
            for kernel, bias in regime:
                yield kernel
                yield bias
        for gate in self.gates:
            if gate is not None:
                yield from gate.values()
