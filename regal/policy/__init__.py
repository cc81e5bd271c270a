"""REGAL's policy: a GNN that picks, per op, how BRKGA draws its keys relative to a reference.

Action space 2 (`config["action_space"]`). Per graph, a reference solution is computed once
(`regal.policy.reference`: the best of a few cheap heuristics by the simulator's score), its
devices relabelled by first use in topological order, and given to the GNN as features. For
every op the policy then makes four categorical choices (the *heads*, `regal.policy.menus`):

- `affinity`: how the op's `d` affinity keys are drawn, in *slot space*: slot 0 is the op's
  reference device, slot 1 the next device, slot d-1 the previous one. Menu: uniform,
  follow weakly / moderately / strongly, avoid the reference, move to the next / previous
  device. BRKGA searches in slot space (`Reference.gene_order` maps a chromosome to the
  device space the decoder reads), so renaming the devices changes nothing, and "follow"
  decodes to the reference device in >= 90% of draws instead of 1/d.
- `priority`, `transfer`: a concentration kappa of a Beta whose mode is the op's position in
  the reference order; kappa = 0 is uniform, 100 nearly reproduces the order.
- `elite_bias`: the probability that a child inherits the elite parent's gene.

Why a menu per op rather than continuous heads: REINFORCE on a categorical has an exact,
cheap log-probability and entropy; the menu entries are interpretable (one entry is "plain
BRKGA" for every head, which the ablations and "do no harm" rely on); BRKGA's sampler draws
a few shared (alpha, beta) pairs by exact closed forms; and a menu entry's likelihood of a
best-known solution (the supervised loss) is a small table (`menus.target_log_likelihoods`).
The order heads' Betas are per op anyway (their mode follows the reference order).

`Action` holds the choices (`MenuChoices`, one `[n]` array per head), the `KeyDistribution`
they stand for, the reference and their log-probability. Distributions are data plus pure
functions (`regal.policy.distributions`), used by the TF `Policy` (training) and the numpy
`NumpyPolicy` (regal/policy/inference.py: the `regal` method's inference path) alike, so
both make the same choices from the same logits and seed. Losses: `regal.policy.losses`.

Ablations: `learn` names the learned key groups ("both", "placement" = affinity,
"scheduling" = priority + transfer, or a tuple); `learn_elite_bias` toggles the elite-bias
head. An unlearned head always picks plain BRKGA's entry and adds nothing to log-prob or
entropy. An untrained policy prefers `menus.PRIOR` (follow the reference moderately) by
`prior_logit` nats.
"""

from __future__ import annotations

from regal.policy.features import GraphFeatures, graph_features

# TensorFlow loads only when `Policy` is first used, so the numpy-only featuriser, menus
# and `NumpyPolicy` (and code that merely imports this package) stay cheap.
_MENUS = ("Action", "MenuChoices", "HEADS", "KEY_GROUPS", "PLACEMENT_MENU", "ORDER_MENU",
          "ELITE_MENU", "BRKGA_ELITE_BIAS", "LEARN_PRESETS", "ACTION_SPACE", "key_distribution")
_LAZY = ("Policy", "NumpyPolicy", *_MENUS)

__all__ = ["GraphFeatures", "graph_features", *_LAZY]


def __getattr__(name: str):
    if name in _MENUS:
        from regal.policy import menus
        return getattr(menus, name)
    if name == "NumpyPolicy":
        from regal.policy.inference import NumpyPolicy
        return NumpyPolicy
    if name == "Policy":
        from regal.policy.policy import Policy
        return Policy
    raise AttributeError(f"module 'regal.policy' has no attribute {name!r}")
