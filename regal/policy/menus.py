"""The TensorFlow-free half of the policy: the action space (version 2), `Action`, logits -> action.

Both the TensorFlow `Policy` (training) and the numpy `NumpyPolicy` (inference) turn their
logits into an `Action` through `choose` and `make_action`, so the two draw exactly the
same random numbers and make the same choices for the same logits. The formulas
(categorical draws, Beta parameters) live in `regal.policy.distributions`.

Menus (one categorical per op and head):

- `affinity`: a `PlacementEntry`, the Beta of each slot class of the op's affinity keys
  in slot space (`regal.policy.reference`): its reference device, the next and the previous
  device in first-use order, and the others. At d = 2 the single other device is "next"
  (so `to_previous` only weakens the reference there); at d = 1 only the reference slot exists.
- `priority`, `transfer`: a concentration kappa; the op's key ~ Beta(1 + kappa m,
  1 + kappa (1 - m)), whose mode is m, the op's key in the reference order. kappa = 0 is
  uniform; 100 reproduces the reference order up to a rank correlation of ~0.97.
- `elite_bias`: the probability that a child inherits the elite parent's gene.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from regal.policy.distributions import (BetaParams, KeyDistribution, argmax_probabilities,
                                        beta_log_prob, categorical_greedy, categorical_log_prob,
                                        categorical_sample, chromosome_parameters, log_softmax)

__all__ = [
    "ACTION_SPACE", "HEADS", "KEY_GROUPS", "SLOT_CLASSES", "PlacementEntry", "PLACEMENT_MENU",
    "ORDER_MENU", "ELITE_MENU", "BRKGA_ELITE_BIAS", "DEFAULT_MENUS", "PRIOR", "PRIOR_LOGIT",
    "LEARN_PRESETS", "CONFIG_FILE", "WEIGHTS_FILE", "MenuChoices", "Action", "normalise_menus",
    "menus_to_json", "learned_heads", "default_choices", "check_mode", "choose", "make_action",
    "key_distribution", "slot_classes", "placement_table", "target_log_likelihoods",
    "prior_biases", "read_policy_files", "log_softmax",
]

ACTION_SPACE = 2  # config["action_space"]; 1 (absent) = per-op Betas repeated over devices
HEADS = ("affinity", "priority", "transfer", "elite_bias")
KEY_GROUPS = ("affinity", "priority", "transfer")
SLOT_CLASSES = ("reference", "next", "previous", "other")
BRKGA_ELITE_BIAS = 0.7
LEARN_PRESETS = {"both": KEY_GROUPS, "placement": ("affinity",),
                 "scheduling": ("priority", "transfer"), "none": ()}
CONFIG_FILE, WEIGHTS_FILE = "config.json", "weights.npz"
_U = (1.0, 1.0)


class PlacementEntry(NamedTuple):
    """(alpha, beta) of each slot class of one op's affinity keys."""

    name: str
    reference: tuple
    next: tuple
    previous: tuple
    other: tuple


PLACEMENT_MENU = (
    PlacementEntry("uniform", _U, _U, _U, _U),
    PlacementEntry("follow_weakly", (2.0, 1.0), _U, _U, _U),
    PlacementEntry("follow", (5.0, 1.0), _U, _U, _U),
    PlacementEntry("follow_strongly", (20.0, 1.0), (1.0, 4.0), (1.0, 4.0), (1.0, 4.0)),
    PlacementEntry("avoid", (1.0, 5.0), _U, _U, _U),
    PlacementEntry("to_next", (1.0, 2.0), (5.0, 1.0), _U, _U),
    PlacementEntry("to_previous", (1.0, 2.0), _U, (5.0, 1.0), _U),
)
ORDER_MENU = (0.0, 5.0, 20.0, 100.0)
ELITE_MENU = (0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_MENUS = {"affinity": PLACEMENT_MENU, "priority": ORDER_MENU, "transfer": ORDER_MENU,
                 "elite_bias": ELITE_MENU}
# An untrained policy's preference (head biases of PRIOR_LOGIT on these entries): follow the
# reference placement moderately (Beta(5, 1) on the reference slot) and its node order
# weakly (kappa 5), keep BRKGA's transfer order and elite bias. Chosen among four fixed
# actions on six real graphs at d = 4, budget 5,000 (data/policy/README.md).
PRIOR = {"affinity": "follow", "priority": 5.0, "transfer": 0.0, "elite_bias": BRKGA_ELITE_BIAS}
PRIOR_LOGIT = 3.0


class MenuChoices(NamedTuple):
    """One menu index per op and head (`[n]` int32 each; a scalar in `default_choices`)."""

    affinity: np.ndarray
    priority: np.ndarray
    transfer: np.ndarray
    elite_bias: np.ndarray


# ---------------------------------------------------------------------------
# menus


def _pair(value, where: str) -> tuple:
    pair = tuple(float(v) for v in value)
    if len(pair) != 2 or not (np.isfinite(pair).all() and min(pair) > 0):
        raise ValueError(f"{where}: need an (alpha, beta) pair, both finite and > 0")
    return pair


def normalise_menus(menus: dict | None) -> dict:
    """Full, validated menus per head from `{head: entries}` (missing heads: the defaults).
    Affinity entries are PlacementEntry-like dicts or lists (name, four pairs); each menu
    must hold plain BRKGA's choice (uniform entry, kappa 0, elite bias 0.7)."""
    menus = dict(menus or {})
    unknown = set(menus) - set(HEADS)
    if unknown:
        raise ValueError(f"menus: unknown key {sorted(unknown)[0]!r}; expected one of {HEADS}")
    out = {}
    entries = []
    for i, raw in enumerate(menus.get("affinity", PLACEMENT_MENU)):
        values = [raw[f] for f in PlacementEntry._fields] if isinstance(raw, dict) else list(raw)
        if len(values) != 5:
            raise ValueError(f"menus['affinity'][{i}]: need a name and four (alpha, beta) pairs")
        entries.append(PlacementEntry(str(values[0]), *(
            _pair(v, f"menus['affinity'][{i}].{c}") for v, c in zip(values[1:], SLOT_CLASSES))))
    if not any(all(p == _U for p in e[1:]) for e in entries):
        raise ValueError("menus['affinity']: must include the uniform entry (every slot Beta(1, 1))")
    out["affinity"] = tuple(entries)
    for head in ("priority", "transfer"):
        kappas = tuple(float(k) for k in menus.get(head, ORDER_MENU))
        if not kappas or any(not (np.isfinite(k) and k >= 0) for k in kappas):
            raise ValueError(f"menus[{head!r}]: need concentrations >= 0")
        if 0.0 not in kappas:
            raise ValueError(f"menus[{head!r}]: must include 0 (uniform Beta(1, 1))")
        out[head] = kappas
    bias = tuple(float(b) for b in menus.get("elite_bias", ELITE_MENU))
    if not bias or any(not 0.0 <= b <= 1.0 for b in bias):
        raise ValueError("menus['elite_bias']: need probabilities in [0, 1]")
    if BRKGA_ELITE_BIAS not in bias:
        raise ValueError(f"menus['elite_bias']: must include BRKGA's default {BRKGA_ELITE_BIAS}")
    out["elite_bias"] = bias
    return out


def menus_to_json(menus: dict) -> dict:
    """The config.json form of normalised menus."""
    return {"affinity": [{"name": e.name, **{c: list(getattr(e, c)) for c in SLOT_CLASSES}}
                         for e in menus["affinity"]],
            "priority": list(menus["priority"]), "transfer": list(menus["transfer"]),
            "elite_bias": list(menus["elite_bias"])}


def learned_heads(learn, learn_elite_bias: bool) -> tuple[str, ...]:
    """The learned heads in HEADS order from a `learn` preset or tuple of key groups."""
    if isinstance(learn, str):
        if learn not in LEARN_PRESETS:
            raise ValueError(f"learn: unknown preset {learn!r}; expected one of "
                             f"{sorted(LEARN_PRESETS)} or a tuple of {KEY_GROUPS}")
        learn = LEARN_PRESETS[learn]
    learn = tuple(learn)
    bad = [g for g in learn if g not in KEY_GROUPS]
    if bad:
        raise ValueError(f"learn: unknown key group {bad[0]!r}; expected {KEY_GROUPS}")
    return tuple(g for g in KEY_GROUPS if g in learn) + (("elite_bias",) if learn_elite_bias else ())


def _uniform_index(menus: dict, head: str) -> int:
    if head == "affinity":
        return next(i for i, e in enumerate(menus["affinity"]) if all(p == _U for p in e[1:]))
    return list(menus[head]).index(0.0 if head != "elite_bias" else BRKGA_ELITE_BIAS)


def default_choices(menus: dict) -> MenuChoices:
    """Plain BRKGA's entry of every head (uniform keys, elite bias 0.7), as scalars."""
    return MenuChoices(*(np.int32(_uniform_index(menus, h)) for h in HEADS))


def prior_biases(menus: dict, prior: dict | None = None, logit: float = PRIOR_LOGIT) -> dict:
    """Head bias vectors that make `prior`'s entry (default PRIOR) `logit` more likely than
    the others: an untrained policy's sensible default."""
    prior = PRIOR if prior is None else prior
    out = {}
    for head in HEADS:
        bias = np.zeros(len(menus[head]), np.float32)
        want = prior.get(head)
        if want is not None:
            names = [e.name for e in menus[head]] if head == "affinity" else list(menus[head])
            if want in names:
                bias[names.index(want)] = logit
        out[head] = bias
    return out


# ---------------------------------------------------------------------------
# choices -> key distribution


def slot_classes(d: int) -> np.ndarray:
    """`[d]` index into SLOT_CLASSES of each slot (0 reference, 1 next, d-1 previous)."""
    cls = np.full(d, SLOT_CLASSES.index("other"))
    cls[0] = 0
    if d >= 3:
        cls[d - 1] = SLOT_CLASSES.index("previous")
    if d >= 2:
        cls[1] = SLOT_CLASSES.index("next")
    return cls


def placement_table(menus: dict, d: int) -> BetaParams:
    """`[K, d]` Beta parameters of every affinity entry's slots on `d` devices."""
    pairs = np.array([[entry[1 + c] for c in slot_classes(d)] for entry in menus["affinity"]],
                     np.float64).reshape(len(menus["affinity"]), d, 2)
    return BetaParams(pairs[..., 0], pairs[..., 1])


def _order_params(kappa: np.ndarray, mode: np.ndarray) -> BetaParams:
    return BetaParams(1.0 + kappa * mode, 1.0 + kappa * (1.0 - mode))


def key_distribution(choices: MenuChoices, reference, menus: dict) -> KeyDistribution:
    """The per-op, per-slot Betas and elite biases that `choices` stand for on `reference`."""
    table = placement_table(menus, reference.num_devices)
    idx = np.asarray(choices.affinity)
    order = {h: np.asarray(menus[h], np.float64)[np.asarray(getattr(choices, h))]
             for h in ("priority", "transfer")}
    return KeyDistribution(
        affinity=BetaParams(table.alpha[idx], table.beta[idx]),
        priority=_order_params(order["priority"], np.asarray(reference.priority)),
        transfer=_order_params(order["transfer"], np.asarray(reference.transfer)),
        elite_bias=np.asarray(menus["elite_bias"], np.float64)[np.asarray(choices.elite_bias)])


def target_log_likelihoods(menus: dict, reference, slots: np.ndarray, priority_keys: np.ndarray,
                           transfer_keys: np.ndarray) -> dict:
    """Per head, `[n, K]`: log-likelihood of a target solution under each menu entry.

    Affinity: log P(the decoder's argmax picks the target slot), from the entry's slot
    Betas (`argmax_probabilities`); priority/transfer: the Beta log-density of the target's
    order key (`reference.order_keys` of its priorities) under each concentration."""
    d = reference.num_devices
    prob = argmax_probabilities(placement_table(menus, d))        # [K, d]
    with np.errstate(divide="ignore"):
        out = {"affinity": np.log(prob[:, np.asarray(slots, np.int64)].T)}
    for head, keys, mode in (("priority", priority_keys, reference.priority),
                             ("transfer", transfer_keys, reference.transfer)):
        kappa = np.asarray(menus[head], np.float64)[None, :]
        params = _order_params(kappa, np.asarray(mode, np.float64)[:, None])
        out[head] = beta_log_prob(params, np.asarray(keys, np.float64)[:, None])
    return out


# ---------------------------------------------------------------------------
# logits -> action


@dataclass(frozen=True, eq=False)
class Action:
    """One choice for a whole graph: menu indices, the key distribution they stand for
    (slot space), the reference they are relative to, and their log-probability."""

    choices: MenuChoices
    keys: KeyDistribution
    reference: object        # regal.policy.reference.Reference
    log_prob: float

    @property
    def num_devices(self) -> int:
        return self.reference.num_devices

    def brkga_params(self) -> dict:
        """kwargs for `brkga.BRKGA` (slot-space chromosome layout): None / a scalar where
        the choice is plain BRKGA's, so an all-uniform action draws what plain BRKGA draws."""
        alpha, beta, elite = chromosome_parameters(self.keys)
        uniform = bool((alpha == 1.0).all() and (beta == 1.0).all())
        same_bias = bool((elite == elite[0]).all())
        return {"alpha": None if uniform else alpha, "beta": None if uniform else beta,
                "elite_bias": float(elite[0]) if same_bias else elite}

    def placement_is_uniform(self) -> bool:
        return bool((self.keys.affinity.alpha == 1.0).all() and (self.keys.affinity.beta == 1.0).all())


def check_mode(mode: str) -> None:
    if mode not in ("sample", "greedy"):
        raise ValueError(f"mode: expected 'sample' or 'greedy', got {mode!r}")


def choose(logits: dict, default: MenuChoices, num_nodes: int, mode: str, rng
           ) -> tuple[MenuChoices, float]:
    """(choices, their log-probability) from float64 logits per learned head: `greedy` takes
    each row's argmax, `sample` draws each learned head in HEADS order (one `rng.random(n)`
    each); an unlearned head takes its default entry and adds nothing."""
    n = int(num_nodes)
    picked, log_prob = {}, 0.0
    for head in HEADS:
        if head not in logits:
            picked[head] = np.full(n, default._asdict()[head], np.int32)
            continue
        lg = logits[head]
        idx = categorical_greedy(lg) if mode == "greedy" else categorical_sample(lg, rng)
        picked[head] = idx.astype(np.int32)
        log_prob += categorical_log_prob(lg, idx)
    return MenuChoices(**picked), float(log_prob)


def make_action(choices: MenuChoices, log_prob: float, reference, menus: dict) -> Action:
    return Action(choices=choices, keys=key_distribution(choices, reference, menus),
                  reference=reference, log_prob=float(log_prob))


def read_policy_files(directory) -> tuple[dict, list[np.ndarray]]:
    """(config, weight arrays in build order) of a stored policy; ValueError naming a
    missing file or a policy of another action space."""
    path = Path(directory)
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        with np.load(path / WEIGHTS_FILE) as stored:
            weights = [stored[k] for k in sorted(stored.files)]
    except FileNotFoundError as exc:
        raise ValueError(f"policy directory {str(path)!r}: missing {Path(exc.filename).name}") from None
    space = config.get("action_space", 1)
    if space != ACTION_SPACE:
        raise ValueError(f"policy directory {str(path)!r}: a policy of action space {space} "
                         f"(this version reads {ACTION_SPACE}: placements and orders relative "
                         "to a reference solution); train one with `regal train`")
    return config, weights
