"""Learner side (TensorFlow, imported inside `Learner` only): `Episode`, `advantages` and
`Learner`, one REINFORCE or supervised step per call."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Episode:
    """K sampled actions on one graph and their rewards."""

    features: object        # regal.policy.GraphFeatures (with its reference)
    choices: list           # K regal.policy.MenuChoices
    rewards: np.ndarray     # [K]


def advantages(rewards: list[np.ndarray]) -> list[np.ndarray]:
    """Per-graph mean baseline, then one scale for the whole step (std of all advantages)."""
    centred = [np.asarray(r, np.float64) - np.mean(r) for r in rewards]
    scale = np.concatenate(centred).std() + 1e-8
    return [c / scale for c in centred]


class Learner:
    """One REINFORCE or supervised step per call; owns the policy's Adam optimizer."""

    def __init__(self, policy, learning_rate: float = 1e-3, entropy_coef: float = 1e-3,
                 clip_norm: float = 1.0) -> None:
        import tensorflow as tf
        import tf_keras

        self.tf = tf
        self.policy = policy
        self.entropy_coef = float(entropy_coef)
        self.clip_norm = float(clip_norm)
        self.optimizer = tf_keras.optimizers.Adam(learning_rate)
        self.optimizer.build(policy.trainable_variables)

    def _apply(self, tape, loss) -> float:
        tf = self.tf
        variables = self.policy.trainable_variables
        grads = tape.gradient(loss, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        clipped, norm = tf.clip_by_global_norm(grads, self.clip_norm)
        self.optimizer.apply_gradients(zip(clipped, variables))
        return float(norm)

    def update(self, episodes: list[Episode]) -> dict:
        """REINFORCE (`losses.reinforce_loss`) with the per-graph mean baseline, advantages
        scaled by their std over the step, log-probabilities and entropies per op."""
        from regal.policy.losses import reinforce_loss

        tf = self.tf
        centred = [np.asarray(e.rewards, np.float64) - np.mean(e.rewards) for e in episodes]
        scale = np.concatenate(centred).std() + 1e-8
        rewards = np.concatenate([np.asarray(e.rewards, np.float64) for e in episodes]) / scale
        baselines = np.concatenate([np.full(len(e.rewards), np.mean(e.rewards))
                                    for e in episodes]) / scale
        with tf.GradientTape() as tape:
            log_probs, entropy = [], tf.constant(0.0)
            for episode in episodes:
                n = float(episode.features.num_nodes)
                for k, choices in enumerate(episode.choices):
                    log_prob, ent = self.policy.evaluate(episode.features, None, choices)
                    log_probs.append(log_prob / n)
                    if k == 0:
                        entropy += ent / n
            mean_entropy = entropy / len(episodes)
            loss = reinforce_loss(log_probs, rewards, baselines, mean_entropy, self.entropy_coef)
            pg_loss = loss + self.entropy_coef * mean_entropy
        norm = self._apply(tape, loss)
        return {"loss": float(loss), "pg_loss": float(pg_loss),
                "entropy_per_op": float(mean_entropy), "grad_norm": norm}

    def supervised_update(self, targets: list[tuple]) -> dict:
        """One step of `losses.supervised_loss` on [(features, target tables)]: the mean over
        graphs of the best-known solutions' negative log-likelihood per op."""
        from regal.policy.losses import supervised_loss

        tf = self.tf
        with tf.GradientTape() as tape:
            total = tf.constant(0.0)
            for features, tables in targets:
                total += supervised_loss(self.policy.outputs(features), tables) \
                    / float(features.num_nodes)
            loss = total / len(targets)
        norm = self._apply(tape, loss)
        return {"loss": float(loss), "nll_per_op": float(loss), "grad_norm": norm}

    def state(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.optimizer.variables]

    def set_state(self, values: list[np.ndarray]) -> None:
        slots = self.optimizer.variables
        if len(values) != len(slots):
            raise ValueError("checkpoint: optimizer state does not match the policy")
        for var, value in zip(slots, values):
            var.assign(value)
