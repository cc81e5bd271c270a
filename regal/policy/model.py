"""The spektral GNN: op-type embedding, edge-aware message passing, menu logits.

Architecture (hidden width H, L layers):
  encoder   concat(node features, op-type embedding[8]) -> Dense(H, relu) -> LayerNorm
  L times   CrystalConv(mean aggregation, edge features)   (residual: x + messages)
            -> LayerNorm
  heads     Dense(H, relu) shared trunk -> one Dense per head with tiny initial
            weights, so an untrained policy is nearly uniform over every menu.

CrystalConv (Xie & Grossman) gates each message sigmoid(W_f z) * softplus(W_s z) with
z = [x_receiver, x_sender, edge features]; its update is `x + aggregate(messages)`,
so every layer is residual. Mean aggregation keeps activations on the same scale
for a node with 2 or 2,000 neighbours; degrees are already in the node features.
It runs in spektral's single/disjoint mode on a sparse adjacency built from the
edge list, so memory and time are linear in ops + edges.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # spektral 1.3 needs Keras 2 (tf-keras)
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from spektral.layers import CrystalConv  # noqa: E402

from regal.policy.features import OP_TYPE_BUCKETS  # noqa: E402
from regal.policy.menus import HEADS  # noqa: E402

__all__ = ["PolicyNetwork", "HEADS", "initialise"]

TYPE_EMBEDDING = 8
HEAD_SCALE = 0.01  # initial head weights: Glorot times this


class PolicyNetwork(keras.Model):
    """Maps one graph's features to logits over each head's menu, one row per op."""

    def __init__(self, menu_sizes: dict[str, int], num_layers: int = 4, hidden: int = 64) -> None:
        super().__init__()
        self.menu_sizes = dict(menu_sizes)
        self.type_embedding = keras.layers.Embedding(
            OP_TYPE_BUCKETS, TYPE_EMBEDDING)
        self.encoder = keras.layers.Dense(hidden, activation="relu")
        self.encoder_norm = keras.layers.LayerNormalization()
        self.convs = [CrystalConv(aggregate="mean", activation="softplus") for _ in range(num_layers)]
        self.norms = [keras.layers.LayerNormalization() for _ in range(num_layers)]
        self.trunk = keras.layers.Dense(hidden, activation="relu")
        self.heads = {name: keras.layers.Dense(size, name=f"head_{name}")
                      for name, size in self.menu_sizes.items()}

    def call(self, inputs, training=False):
        nodes, op_type, edge_index, edges = inputs
        n = tf.shape(nodes, out_type=tf.int64)[0]
        adjacency = tf.SparseTensor(edge_index, tf.ones(tf.shape(edge_index)[:1]), tf.stack([n, n]))
        h = tf.concat([nodes, self.type_embedding(op_type)], axis=-1)
        h = self.encoder_norm(self.encoder(h))
        for conv, norm in zip(self.convs, self.norms):
            h = norm(conv([h, adjacency, edges]))
        z = self.trunk(h)
        return {name: head(z) for name, head in self.heads.items()}


def initialise(net: PolicyNetwork, seed: int) -> None:
    """Deterministic weights from one numpy seed (Keras' seeded initialisers repeat
    values across layers of equal shape): Glorot-uniform kernels and embeddings,
    zero biases, unit LayerNorm scales, and heads scaled by HEAD_SCALE: nearly uniform
    menus at the start, yet not exactly zero, so the first gradient reaches every layer."""
    rng = np.random.default_rng(seed)
    values = []
    for w in net.weights:
        name, shape = w.name, tuple(w.shape)
        if name.endswith(("bias:0", "beta:0")):
            values.append(np.zeros(shape, np.float32))
        elif name.endswith("gamma:0"):
            values.append(np.ones(shape, np.float32))
        else:
            limit = np.sqrt(6.0 / (shape[0] + shape[-1])) * (HEAD_SCALE if "head_" in name else 1.0)
            values.append(rng.uniform(-limit, limit, size=shape).astype(np.float32))
    net.set_weights(values)
