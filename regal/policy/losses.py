"""Losses apart from the loop (Acme `bc/losses.py` style): pure functions of tensors.

- `supervised_loss`: negative log-likelihood of a best-known solution under the policy.
  The policy's law of an op's keys is a mixture over its menu entries; the target's
  likelihood under each entry is a numpy table (`menus.target_log_likelihoods`: the chance
  that the entry's slot Betas decode to the target's slot, the Beta density of its order
  keys), so the loss is -sum_ops log sum_k softmax(logits)_k * table_k, differentiable in
  the logits. Device labels are canonicalised as the reference's (`Reference.target_slots`).
- `reinforce_loss`: the score-function estimator with a baseline and an entropy bonus.

Both return float32 scalars; the learner (`regal.train.Learner`) divides by op counts and
averages over graphs.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from regal.policy.distributions import mixture_log_likelihood  # noqa: E402

__all__ = ["supervised_loss", "reinforce_loss"]


def supervised_loss(policy_outputs: dict, target_log_likelihoods: dict):
    """-sum over ops and the heads in both dicts of log p(target): `policy_outputs` are the
    logits `[n, K]` per head (`Policy.outputs`), `target_log_likelihoods` the `[n, K]` tables
    of `menus.target_log_likelihoods` (heads missing from either are skipped)."""
    from regal.policy.policy import TF_OPS

    total = tf.constant(0.0)
    for head, table in target_log_likelihoods.items():
        if head in policy_outputs:
            total -= mixture_log_likelihood(policy_outputs[head], np.asarray(table, np.float32),
                                            TF_OPS)
    return total


def reinforce_loss(log_probs, rewards, baselines, entropy, coef: float):
    """-mean_i((rewards_i - baselines_i) * log_probs_i) - coef * entropy.

    `log_probs` are differentiable; rewards and baselines are constants (no gradient flows
    through them); `entropy` is a differentiable scalar (already averaged as wanted)."""
    log_probs = tf.stack(list(log_probs)) if isinstance(log_probs, (list, tuple)) \
        else tf.convert_to_tensor(log_probs, tf.float32)
    advantage = tf.stop_gradient(tf.cast(np.asarray(rewards, np.float64)
                                         - np.asarray(baselines, np.float64), tf.float32))
    return -tf.reduce_mean(advantage * log_probs) - float(coef) * entropy
