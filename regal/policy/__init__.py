"""REGAL's policy: a GNN that picks, per op, BRKGA's Beta key distributions and elite bias.

For every op the policy makes four categorical choices (the *heads*):

- `affinity`, `priority`, `transfer`: an index into a menu of Beta(alpha, beta)
  pairs, one per key group of DESIGN §5. The affinity choice is one per op,
  broadcast over its `d` affinity genes: devices are interchangeable, so a
  per-device choice would have nothing to tell devices apart and would break
  the symmetry between them; a Beta shared by the op's genes still shapes how
  decisively BRKGA's crossover and mutants move the op between devices.
- `elite_bias`: an index into a menu of elite-bias probabilities, repeated over
  all `d + 2` genes of the op.

`Action` holds the chosen indices, their log-probability and the per-gene
`alpha`, `beta`, `elite_bias` arrays (length `n * (d + 2)`, chromosome layout:
affinity `[n, d]` row-major, then priority `[n]`, then transfer `[n]`).

`NumpyPolicy` (regal/policy/inference.py) runs the same network on the same stored
weights in numpy, without TensorFlow: the `regal` method's inference path.

A REINFORCE learner uses `act` to sample (numpy, no gradient) and
`log_prob`/`entropy`/`evaluate` under a `tf.GradientTape` to differentiate
the log-probability of the sampled indices w.r.t. `trainable_variables`.

Ablations: `learn` names the learned key groups ("both", "placement" =
affinity, "scheduling" = priority + transfer, or a tuple); `learn_elite_bias`
toggles the elite-bias head. An unlearned head always picks uniform Beta(1, 1)
or BRKGA's default elite bias 0.7 and adds nothing to log-prob or entropy.
"""

from __future__ import annotations

from regal.policy.features import GraphFeatures, graph_features

# TensorFlow loads only when `Policy` is first used, so the numpy-only featuriser, menus
# and `NumpyPolicy` (and code that merely imports this package) stay cheap.
_MENUS = ("Action", "gene_parameters", "HEADS", "KEY_GROUPS", "DEFAULT_BETA_MENU",
          "DEFAULT_ELITE_MENU", "UNIFORM_BETA", "BRKGA_ELITE_BIAS", "LEARN_PRESETS")
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
