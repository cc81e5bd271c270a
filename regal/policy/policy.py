"""`Policy`: the TensorFlow side of the policy (see the package docstring); `Action`, the menus
and logits -> action live in the TF-free `regal.policy.menus` and are re-exported here."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before the first TensorFlow import
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from regal.policy.features import EDGE_FEATURES, NODE_FEATURES, GraphFeatures, graph_features  # noqa: E402
from regal.policy.inference import as_features  # noqa: E402
from regal.policy.menus import (  # noqa: E402,F401  (re-exported: the TF-free half)
    BRKGA_ELITE_BIAS, CONFIG_FILE, DEFAULT_BETA_MENU, DEFAULT_ELITE_MENU, HEADS, KEY_GROUPS,
    LEARN_PRESETS, UNIFORM_BETA, WEIGHTS_FILE, Action, check_mode, choose_indices,
    default_indices, gene_parameters, learned_heads, log_softmax as _log_softmax, make_action,
    normalise_menus as _normalise_menus, read_policy_files)
from regal.policy.model import PolicyNetwork, initialise  # noqa: E402

__all__ = [
    "Policy", "Action", "GraphFeatures", "graph_features", "HEADS", "KEY_GROUPS",
    "DEFAULT_BETA_MENU", "DEFAULT_ELITE_MENU", "UNIFORM_BETA", "BRKGA_ELITE_BIAS",
    "gene_parameters", "LEARN_PRESETS",
]

# Below this many ops an untraced forward pass runs eagerly: tracing the tf.function costs
# ~1 s once per process, an eager pass ~0.02 s at 100 ops and ~0.2 s at 2,000 ops.
EAGER_MAX_OPS = 2000


class Policy:
    """The GNN policy; see the module docstring for what it chooses."""

    def __init__(self, num_layers: int = 4, hidden: int = 64, menus: dict | None = None,
                 learn="both", learn_elite_bias: bool = True, seed: int = 0) -> None:
        self.learned = learned_heads(learn, learn_elite_bias)
        learn = tuple(h for h in self.learned if h in KEY_GROUPS)
        if int(num_layers) < 0 or int(hidden) < 1:
            raise ValueError(f"num_layers must be >= 0 and hidden >= 1, got {num_layers}, {hidden}")
        self.menus = _normalise_menus(menus)
        self.default_index = default_indices(self.menus)
        self.config = {"num_layers": int(num_layers), "hidden": int(hidden),
                       "menus": {h: [list(p) if isinstance(p, tuple) else p for p in self.menus[h]]
                                 for h in HEADS},
                       "learn": [g for g in KEY_GROUPS if g in learn],
                       "learn_elite_bias": bool(learn_elite_bias), "seed": int(seed)}
        self.net = PolicyNetwork({h: len(self.menus[h]) for h in self.learned},
                                 num_layers=int(num_layers), hidden=int(hidden))
        self._build()
        initialise(self.net, int(seed))
        self.eager_max_ops = EAGER_MAX_OPS  # 0: always the traced function (training)
        self._forward = tf.function(self._forward_impl, input_signature=_SIGNATURE,
                                    reduce_retracing=True)
        self._evaluate = tf.function(self._evaluate_impl,
                                     input_signature=_SIGNATURE + [tf.TensorSpec([None, 4], tf.int32)],
                                     reduce_retracing=True)

    # -- plumbing ------------------------------------------------------------
    def _build(self) -> None:
        """Creates the variables with one tiny call; `initialise` then overwrites them, so
        Keras' warning about reused unseeded initialisers is moot."""
        nodes = np.zeros((2, len(NODE_FEATURES)), np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.net((nodes, np.zeros(2, np.int32), np.array([[0, 1], [1, 0]], np.int64),
                      np.zeros((2, len(EDGE_FEATURES)), np.float32)))

    def _forward_impl(self, nodes, op_type, edge_index, edges):
        return self.net((nodes, op_type, edge_index, edges))

    def _evaluate_impl(self, nodes, op_type, edge_index, edges, indices):
        logits = self.net((nodes, op_type, edge_index, edges))
        log_prob, entropy = tf.constant(0.0), tf.constant(0.0)
        for h in self.learned:
            logp = tf.nn.log_softmax(logits[h], axis=-1)
            chosen = tf.gather(logp, indices[:, HEADS.index(h)], axis=1, batch_dims=1)
            log_prob += tf.reduce_sum(chosen)
            entropy -= tf.reduce_sum(tf.exp(logp) * logp)
        return log_prob, entropy

    def features(self, graph, devices=None) -> GraphFeatures:
        """Features of `graph` (passed through if already a GraphFeatures)."""
        return as_features(graph, devices)

    @staticmethod
    def _tensors(f: GraphFeatures):
        return (tf.constant(f.nodes), tf.constant(f.op_type), tf.constant(f.edge_index),
                tf.constant(f.edges))

    @property
    def trainable_variables(self):
        return self.net.trainable_variables

    # -- public ----------------------------------------------------------------
    def logits(self, graph, devices=None) -> dict[str, np.ndarray]:
        """Menu logits per learned head, float64 `[n, menu size]` (one forward pass)."""
        f = self.features(graph, devices)
        traced = self._forward.experimental_get_tracing_count() > 0
        if f.num_nodes < self.eager_max_ops and not traced:
            out = self.net(self._tensors(f))  # a one-off call: skip the tracing cost
        else:
            out = self._forward(*self._tensors(f))
        return {h: out[h].numpy().astype(np.float64) for h in self.learned}

    def act(self, graph, devices=None, mode: str = "sample", rng=None, seed=None) -> Action:
        """Choose every op's menus: `sample` draws from the policy (with `rng` or `seed`),
        `greedy` takes each head's most likely entry (ties: lowest index)."""
        check_mode(mode)
        f = self.features(graph, devices)
        if mode == "sample" and rng is None:
            rng = np.random.default_rng(seed)
        logits = self.logits(f) if self.learned else {}
        indices, log_prob = choose_indices(logits, self.default_index, f.num_nodes, mode, rng)
        return make_action(indices, log_prob, f.num_devices, self.menus)

    def evaluate(self, graph, devices, indices):
        """(log-probability of `indices`, entropy) as differentiable float32 tf scalars.

        Both are sums over ops and learned heads (divide by the op count for a
        per-op figure); unlearned heads contribute nothing."""
        idx = np.asarray(indices, dtype=np.int32)
        f = self.features(graph, devices)
        if idx.shape != (f.num_nodes, len(HEADS)):
            raise ValueError(f"indices: expected shape ({f.num_nodes}, {len(HEADS)}), "
                             f"got {idx.shape}")
        return self._evaluate(*self._tensors(f), tf.constant(idx))

    def log_prob(self, graph, devices, indices):
        """Differentiable log-probability (tf scalar) of the menu `indices` `[n, 4]`."""
        return self.evaluate(graph, devices, indices)[0]

    def entropy(self, graph, devices=None):
        """Differentiable entropy (tf scalar) of the policy on `graph`, summed over ops and heads."""
        f = self.features(graph, devices)
        return self._evaluate(*self._tensors(f),
                              tf.constant(np.tile(self.default_index, (f.num_nodes, 1))))[1]

    def save(self, directory) -> None:
        """Writes `config.json` and `weights.npz` (one array per variable, in build order)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        weights = self.net.get_weights()
        (path / CONFIG_FILE).write_text(json.dumps(self.config, indent=2) + "\n")
        np.savez(path / WEIGHTS_FILE, **{f"w{i:03d}": w for i, w in enumerate(weights)})

    @classmethod
    def load(cls, directory) -> "Policy":
        path = Path(directory)
        config, weights = read_policy_files(path)
        policy = cls(**config)
        expected = [tuple(w.shape) for w in policy.net.weights]
        if [w.shape for w in weights] != expected:
            raise ValueError(f"policy directory {str(path)!r}: weights do not match its config")
        policy.net.set_weights(weights)
        return policy


_SIGNATURE = [tf.TensorSpec([None, len(NODE_FEATURES)], tf.float32),
              tf.TensorSpec([None], tf.int32),
              tf.TensorSpec([None, 2], tf.int64),
              tf.TensorSpec([None, len(EDGE_FEATURES)], tf.float32)]
