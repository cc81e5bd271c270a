"""The TensorFlow-free half of the policy: menus, `Action`, and logits -> action.

Both the TensorFlow `Policy` (training) and the numpy `NumpyPolicy` (inference) turn
their logits into an `Action` through `choose_indices` and `make_action`, so the two
draw exactly the same random numbers and make the same choices for the same logits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "HEADS", "KEY_GROUPS", "UNIFORM_BETA", "BRKGA_ELITE_BIAS", "DEFAULT_BETA_MENU",
    "DEFAULT_ELITE_MENU", "LEARN_PRESETS", "CONFIG_FILE", "WEIGHTS_FILE", "Action",
    "gene_parameters", "normalise_menus", "learned_heads", "default_indices", "log_softmax",
    "check_mode", "choose_indices", "make_action", "read_policy_files",
]

HEADS = ("affinity", "priority", "transfer", "elite_bias")
KEY_GROUPS = ("affinity", "priority", "transfer")
UNIFORM_BETA = (1.0, 1.0)
BRKGA_ELITE_BIAS = 0.7
# (alpha, beta): uniform; U-shaped (keys pushed to 0 or 1); bell-shaped around 0.5;
# strongly high / low; moderately low / high; strongly U-shaped.
DEFAULT_BETA_MENU = ((1.0, 1.0), (0.5, 0.5), (2.0, 2.0), (5.0, 1.0), (1.0, 5.0),
                     (2.0, 5.0), (5.0, 2.0), (0.3, 0.3))
DEFAULT_ELITE_MENU = (0.5, 0.6, 0.7, 0.8, 0.9)
LEARN_PRESETS = {"both": KEY_GROUPS, "placement": ("affinity",),
                 "scheduling": ("priority", "transfer"), "none": ()}
CONFIG_FILE, WEIGHTS_FILE = "config.json", "weights.npz"


@dataclass(frozen=True)
class Action:
    """One choice for a whole graph: per-gene BRKGA parameters plus what produced them."""

    alpha: np.ndarray       # [n*(d+2)] float64, chromosome layout
    beta: np.ndarray        # [n*(d+2)] float64
    elite_bias: np.ndarray  # [n*(d+2)] float64, each op's bias repeated over its genes
    indices: np.ndarray     # [n, 4] int32 menu indices, columns in HEADS order
    log_prob: float         # sum over ops and learned heads of log p(index)
    num_devices: int

    def brkga_params(self) -> dict:
        """kwargs for `brkga.BRKGA`: None / a scalar where the choice is plain BRKGA's,
        so an all-uniform action draws exactly the random numbers plain BRKGA draws."""
        uniform = bool((self.alpha == 1.0).all() and (self.beta == 1.0).all())
        same_bias = bool((self.elite_bias == self.elite_bias[0]).all())
        return {"alpha": None if uniform else self.alpha, "beta": None if uniform else self.beta,
                "elite_bias": float(self.elite_bias[0]) if same_bias else self.elite_bias}


def gene_parameters(indices: np.ndarray, num_devices: int, menus: dict):
    """(alpha, beta, elite_bias) per gene, chromosome layout, from `[n, 4]` menu indices."""
    idx = np.asarray(indices)
    d = int(num_devices)
    ab = {g: np.asarray(menus[g], np.float64)[idx[:, HEADS.index(g)]] for g in KEY_GROUPS}
    bias = np.asarray(menus["elite_bias"], np.float64)[idx[:, 3]]
    alpha = np.concatenate([np.repeat(ab["affinity"][:, 0], d), ab["priority"][:, 0],
                            ab["transfer"][:, 0]])
    beta = np.concatenate([np.repeat(ab["affinity"][:, 1], d), ab["priority"][:, 1],
                           ab["transfer"][:, 1]])
    elite = np.concatenate([np.repeat(bias, d), bias, bias])
    return alpha, beta, elite


def normalise_menus(menus: dict | None) -> dict:
    """Full menus per head from `{"beta": ..., "elite_bias": ..., <group>: ...}`; validated."""
    menus = dict(menus or {})
    unknown = set(menus) - {"beta", "elite_bias", *KEY_GROUPS}
    if unknown:
        raise ValueError(f"menus: unknown key {sorted(unknown)[0]!r}; expected 'beta', "
                         f"'elite_bias' or one of {KEY_GROUPS}")
    shared = menus.get("beta", DEFAULT_BETA_MENU)
    out = {}
    for g in KEY_GROUPS:
        pairs = [tuple(float(v) for v in p) for p in menus.get(g, shared)]
        if not pairs or any(len(p) != 2 or not (np.isfinite(p).all() and min(p) > 0) for p in pairs):
            raise ValueError(f"menus[{g!r}]: need (alpha, beta) pairs, both finite and > 0")
        if UNIFORM_BETA not in pairs:
            raise ValueError(f"menus[{g!r}]: must include uniform Beta(1, 1)")
        out[g] = pairs
    bias = [float(b) for b in menus.get("elite_bias", DEFAULT_ELITE_MENU)]
    if not bias or any(not 0.0 <= b <= 1.0 for b in bias):
        raise ValueError("menus['elite_bias']: need probabilities in [0, 1]")
    if BRKGA_ELITE_BIAS not in bias:
        raise ValueError(f"menus['elite_bias']: must include BRKGA's default {BRKGA_ELITE_BIAS}")
    out["elite_bias"] = bias
    return out


def learned_heads(learn, learn_elite_bias: bool) -> tuple[str, ...]:
    """The learned heads in HEADS order from a `learn` preset or tuple of key groups."""
    if isinstance(learn, str):
        if learn not in LEARN_PRESETS:
            raise ValueError(f"learn: unknown preset {learn!r}; expected one of "
                             f"{sorted(LEARN_PRESETS)} or a tuple of {KEY_GROUPS}")
        learn = LEARN_PRESETS[learn]
    bad = [g for g in learn if g not in KEY_GROUPS]
    if bad:
        raise ValueError(f"learn: unknown key group {bad[0]!r}; expected {KEY_GROUPS}")
    return tuple(g for g in KEY_GROUPS if g in learn) + (("elite_bias",) if learn_elite_bias else ())


def default_indices(menus: dict) -> np.ndarray:
    """Plain BRKGA's entry of every head: uniform Beta(1, 1) and elite bias 0.7."""
    return np.array([menus[g].index(UNIFORM_BETA) for g in KEY_GROUPS]
                    + [menus["elite_bias"].index(BRKGA_ELITE_BIAS)], dtype=np.int32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def check_mode(mode: str) -> None:
    if mode not in ("sample", "greedy"):
        raise ValueError(f"mode: expected 'sample' or 'greedy', got {mode!r}")


def choose_indices(logits: dict, default_index: np.ndarray, num_nodes: int, mode: str, rng):
    """(`[n, 4]` menu indices, their log-probability) from float64 logits per learned head
    (in HEADS order): `greedy` takes each row's argmax (ties: lowest index), `sample`
    inverts each row's CDF with one `rng.random(n)` per head."""
    n = int(num_nodes)
    indices = np.tile(default_index, (n, 1))
    log_prob = 0.0
    for h, lg in logits.items():
        logp = log_softmax(lg)
        if mode == "greedy":
            idx = np.argmax(lg, axis=1)
        else:
            cdf = np.cumsum(np.exp(logp), axis=1)
            u = rng.random(n) * cdf[:, -1]
            idx = np.minimum((cdf < u[:, None]).sum(axis=1), lg.shape[1] - 1)
        indices[:, HEADS.index(h)] = idx
        log_prob += float(logp[np.arange(n), idx].sum())
    return indices, log_prob


def make_action(indices: np.ndarray, log_prob: float, num_devices: int, menus: dict) -> Action:
    alpha, beta, elite = gene_parameters(indices, num_devices, menus)
    return Action(alpha=alpha, beta=beta, elite_bias=elite, indices=indices,
                  log_prob=log_prob, num_devices=int(num_devices))


def read_policy_files(directory) -> tuple[dict, list[np.ndarray]]:
    """(config, weight arrays in build order) of a stored policy; ValueError naming a
    missing file."""
    path = Path(directory)
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        with np.load(path / WEIGHTS_FILE) as stored:
            weights = [stored[k] for k in sorted(stored.files)]
    except FileNotFoundError as exc:
        raise ValueError(f"policy directory {str(path)!r}: missing {Path(exc.filename).name}") from None
    return config, weights
