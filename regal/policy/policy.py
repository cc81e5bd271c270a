"""`Policy` and `Action`: the TensorFlow side of the policy (see the package docstring)."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before the first TensorFlow import
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from regal.graph import ComputationGraph  # noqa: E402
from regal.policy.features import EDGE_FEATURES, NODE_FEATURES, GraphFeatures, graph_features  # noqa: E402
from regal.policy.model import HEADS, PolicyNetwork, initialise  # noqa: E402

__all__ = [
    "Policy", "Action", "GraphFeatures", "graph_features", "HEADS", "KEY_GROUPS",
    "DEFAULT_BETA_MENU", "DEFAULT_ELITE_MENU", "UNIFORM_BETA", "BRKGA_ELITE_BIAS",
    "gene_parameters",
]

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
# Below this many ops an untraced forward pass runs eagerly: tracing the tf.function costs
# ~1 s once per process, an eager pass ~0.02 s at 100 ops and ~0.2 s at 2,000 ops.
EAGER_MAX_OPS = 2000


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


def _normalise_menus(menus: dict | None) -> dict:
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


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


class Policy:
    """The GNN policy; see the module docstring for what it chooses."""

    def __init__(self, num_layers: int = 4, hidden: int = 64, menus: dict | None = None,
                 learn="both", learn_elite_bias: bool = True, seed: int = 0) -> None:
        if isinstance(learn, str):
            if learn not in LEARN_PRESETS:
                raise ValueError(f"learn: unknown preset {learn!r}; expected one of "
                                 f"{sorted(LEARN_PRESETS)} or a tuple of {KEY_GROUPS}")
            learn = LEARN_PRESETS[learn]
        bad = [g for g in learn if g not in KEY_GROUPS]
        if bad:
            raise ValueError(f"learn: unknown key group {bad[0]!r}; expected {KEY_GROUPS}")
        if int(num_layers) < 0 or int(hidden) < 1:
            raise ValueError(f"num_layers must be >= 0 and hidden >= 1, got {num_layers}, {hidden}")
        self.menus = _normalise_menus(menus)
        self.learned = tuple(g for g in KEY_GROUPS if g in learn) + (
            ("elite_bias",) if learn_elite_bias else ())
        self.default_index = np.array(
            [self.menus[g].index(UNIFORM_BETA) for g in KEY_GROUPS]
            + [self.menus["elite_bias"].index(BRKGA_ELITE_BIAS)], dtype=np.int32)
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
        if isinstance(graph, GraphFeatures):
            return graph
        if not isinstance(graph, ComputationGraph):
            raise ValueError(f"graph: expected a ComputationGraph or GraphFeatures, got "
                             f"{type(graph).__name__}")
        if devices is None:
            raise ValueError("devices: required with a ComputationGraph (an int or a DeviceSpec)")
        return graph_features(graph, devices)

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
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode: expected 'sample' or 'greedy', got {mode!r}")
        f = self.features(graph, devices)
        n = f.num_nodes
        if mode == "sample" and rng is None:
            rng = np.random.default_rng(seed)
        logits = self.logits(f) if self.learned else {}
        indices = np.tile(self.default_index, (n, 1))
        log_prob = 0.0
        for h, lg in logits.items():
            logp = _log_softmax(lg)
            if mode == "greedy":
                idx = np.argmax(lg, axis=1)
            else:
                cdf = np.cumsum(np.exp(logp), axis=1)
                u = rng.random(n) * cdf[:, -1]
                idx = np.minimum((cdf < u[:, None]).sum(axis=1), lg.shape[1] - 1)
            indices[:, HEADS.index(h)] = idx
            log_prob += float(logp[np.arange(n), idx].sum())
        alpha, beta, elite = gene_parameters(indices, f.num_devices, self.menus)
        return Action(alpha=alpha, beta=beta, elite_bias=elite, indices=indices,
                      log_prob=log_prob, num_devices=f.num_devices)

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
        try:
            config = json.loads((path / CONFIG_FILE).read_text())
            stored = np.load(path / WEIGHTS_FILE)
        except FileNotFoundError as exc:
            raise ValueError(f"policy directory {str(path)!r}: missing {Path(exc.filename).name}") from None
        policy = cls(**config)
        weights = [stored[k] for k in sorted(stored.files)]
        expected = [tuple(w.shape) for w in policy.net.weights]
        if [w.shape for w in weights] != expected:
            raise ValueError(f"policy directory {str(path)!r}: weights do not match its config")
        policy.net.set_weights(weights)
        return policy


_SIGNATURE = [tf.TensorSpec([None, len(NODE_FEATURES)], tf.float32),
              tf.TensorSpec([None], tf.int32),
              tf.TensorSpec([None, 2], tf.int64),
              tf.TensorSpec([None, len(EDGE_FEATURES)], tf.float32)]
