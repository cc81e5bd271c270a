"""`Policy`: the TensorFlow side of the policy (see the package docstring); `Action`, the menus
and logits -> action live in the TF-free `regal.policy.menus`, the distribution formulas in
`regal.policy.distributions` (here run on tensors through `TF_OPS`, so they differentiate)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before the first TensorFlow import
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from regal.policy.distributions import (ArrayOps, categorical_entropy,  # noqa: E402
                                        categorical_log_prob)
from regal.policy.features import EDGE_FEATURES, NODE_FEATURES, GraphFeatures, graph_features  # noqa: E402
from regal.policy.inference import as_features  # noqa: E402
from regal.policy.menus import (  # noqa: E402,F401  (re-exported: the TF-free half)
    ACTION_SPACE, CONFIG_FILE, HEADS, KEY_GROUPS, LEARN_PRESETS, PRIOR_LOGIT, WEIGHTS_FILE,
    Action, MenuChoices, check_mode, choose, default_choices, learned_heads, make_action,
    menus_to_json, normalise_menus, prior_biases, read_policy_files)
from regal.policy.model import PolicyNetwork, initialise  # noqa: E402

__all__ = ["Policy", "Action", "MenuChoices", "GraphFeatures", "graph_features", "HEADS",
           "KEY_GROUPS", "LEARN_PRESETS", "TF_OPS"]

# Below this many ops an untraced forward pass runs eagerly: tracing the tf.function costs
# ~1 s once per process, an eager pass ~0.02 s at 100 ops and ~0.2 s at 2,000 ops.
EAGER_MAX_OPS = 2000

TF_OPS = ArrayOps(log_softmax=lambda x: tf.nn.log_softmax(x, axis=-1),
                  take_rows=lambda v, i: tf.gather(v, i, axis=1, batch_dims=1),
                  sum=tf.reduce_sum, exp=tf.exp,
                  logsumexp_rows=lambda x: tf.reduce_logsumexp(x, axis=1),
                  constant=lambda a: tf.constant(np.asarray(a), tf.float32))


class Policy:
    """The GNN policy; see the package docstring for what it chooses.

    `prior_logit` sets the heads' initial biases so that an untrained policy prefers
    `menus.PRIOR` (follow the reference placement moderately) by that many nats; 0 makes
    it nearly uniform over every menu."""

    def __init__(self, num_layers: int = 4, hidden: int = 64, menus: dict | None = None,
                 learn="both", learn_elite_bias: bool = True, seed: int = 0,
                 prior_logit: float = PRIOR_LOGIT, action_space: int = ACTION_SPACE) -> None:
        if action_space != ACTION_SPACE:
            raise ValueError(f"action_space: this version builds {ACTION_SPACE}, got {action_space}")
        self.learned = learned_heads(learn, learn_elite_bias)
        learn = tuple(h for h in self.learned if h in KEY_GROUPS)
        if int(num_layers) < 0 or int(hidden) < 1:
            raise ValueError(f"num_layers must be >= 0 and hidden >= 1, got {num_layers}, {hidden}")
        self.menus = normalise_menus(menus)
        self.default = default_choices(self.menus)
        self.config = {"action_space": ACTION_SPACE, "num_layers": int(num_layers),
                       "hidden": int(hidden), "menus": menus_to_json(self.menus),
                       "learn": [g for g in KEY_GROUPS if g in learn],
                       "learn_elite_bias": bool(learn_elite_bias), "seed": int(seed),
                       "prior_logit": float(prior_logit)}
        self.net = PolicyNetwork({h: len(self.menus[h]) for h in self.learned},
                                 num_layers=int(num_layers), hidden=int(hidden))
        self._build()
        initialise(self.net, int(seed))
        biases = prior_biases(self.menus, logit=float(prior_logit))
        for head, layer in self.net.heads.items():
            kernel, _ = layer.get_weights()
            layer.set_weights([kernel, biases[head]])
        self.eager_max_ops = EAGER_MAX_OPS  # 0: always the traced function (training)
        self._forward = tf.function(self._forward_impl, input_signature=_SIGNATURE,
                                    reduce_retracing=True)
        self._evaluate = tf.function(self._evaluate_impl,
                                     input_signature=_SIGNATURE + [_CHOICES_SIGNATURE],
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

    def _evaluate_impl(self, nodes, op_type, edge_index, edges, choices):
        logits = self.net((nodes, op_type, edge_index, edges))
        log_prob, entropy = tf.constant(0.0), tf.constant(0.0)
        for h in self.learned:
            index = choices[:, HEADS.index(h)]
            log_prob += categorical_log_prob(logits[h], index, TF_OPS)
            entropy += categorical_entropy(logits[h], TF_OPS)
        return log_prob, entropy

    def features(self, graph, devices=None, objective: str = "peak_memory") -> GraphFeatures:
        """Features of `graph` (passed through if already a GraphFeatures)."""
        return as_features(graph, devices, objective)

    @staticmethod
    def _tensors(f: GraphFeatures):
        return (tf.constant(f.nodes), tf.constant(f.op_type), tf.constant(f.edge_index),
                tf.constant(f.edges))

    @property
    def trainable_variables(self):
        return self.net.trainable_variables

    # -- public ----------------------------------------------------------------
    def outputs(self, graph, devices=None, objective: str = "peak_memory") -> dict:
        """Menu logits per learned head as differentiable float32 tensors `[n, menu size]`
        (the input of `regal.policy.losses`)."""
        return self._forward(*self._tensors(self.features(graph, devices, objective)))

    def logits(self, graph, devices=None, objective: str = "peak_memory") -> dict[str, np.ndarray]:
        """Menu logits per learned head, float64 `[n, menu size]` (one forward pass)."""
        f = self.features(graph, devices, objective)
        traced = self._forward.experimental_get_tracing_count() > 0
        if f.num_nodes < self.eager_max_ops and not traced:
            out = self.net(self._tensors(f))  # a one-off call: skip the tracing cost
        else:
            out = self._forward(*self._tensors(f))
        return {h: out[h].numpy().astype(np.float64) for h in self.learned}

    def act(self, graph, devices=None, mode: str = "sample", rng=None, seed=None,
            objective: str = "peak_memory") -> Action:
        """Choose every op's menus: `sample` draws from the policy (with `rng` or `seed`),
        `greedy` takes each head's most likely entry (ties: lowest index)."""
        check_mode(mode)
        f = self.features(graph, devices, objective)
        if mode == "sample" and rng is None:
            rng = np.random.default_rng(seed)
        logits = self.logits(f) if self.learned else {}
        choices, log_prob = choose(logits, self.default, f.num_nodes, mode, rng)
        return make_action(choices, log_prob, f.reference, self.menus)

    def evaluate(self, graph, devices, choices: MenuChoices, objective: str = "peak_memory"):
        """(log-probability of `choices`, entropy) as differentiable float32 tf scalars.

        Both are sums over ops and learned heads (divide by the op count for a
        per-op figure); unlearned heads contribute nothing."""
        f = self.features(graph, devices, objective)
        stacked = np.stack([np.broadcast_to(np.asarray(getattr(choices, h), np.int32),
                                            (f.num_nodes,)) for h in HEADS], axis=1)
        return self._evaluate(*self._tensors(f), tf.constant(stacked))

    def log_prob(self, graph, devices, choices: MenuChoices, objective: str = "peak_memory"):
        """Differentiable log-probability (tf scalar) of `choices`."""
        return self.evaluate(graph, devices, choices, objective)[0]

    def entropy(self, graph, devices=None, objective: str = "peak_memory"):
        """Differentiable entropy (tf scalar) of the policy on `graph`, summed over ops and heads."""
        return self.evaluate(graph, devices, self.default, objective)[1]

    def save(self, directory) -> None:
        """Writes `config.json` and `weights.npz` (one array per variable, in build order),
        each replaced atomically (`regal.files`)."""
        from regal.files import replacing, write_json

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        weights = self.net.get_weights()
        write_json(path / CONFIG_FILE, self.config, indent=2)
        with replacing(path / WEIGHTS_FILE) as tmp:
            np.savez(tmp, **{f"w{i:03d}": w for i, w in enumerate(weights)})

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
# the choices of every head stacked as columns in HEADS order (a tf.function input only)
_CHOICES_SIGNATURE = tf.TensorSpec([None, len(HEADS)], tf.int32)
