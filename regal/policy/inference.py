"""`NumpyPolicy`: the policy's forward pass in numpy, for inference without TensorFlow.

The `regal` method needs one forward pass per graph; importing TensorFlow for it costs
~5 s per process and a small graph's eager TF pass costs more than BRKGA's budget allows
(issue 6). This module reads the same `config.json` + `weights.npz` as `Policy.load` and
computes the same float32 network as `regal.policy.model.PolicyNetwork`:

  h  = LayerNorm(relu([nodes, embedding[op_type]] @ W + b))
  L times, spektral CrystalConv(aggregate="mean", activation="softplus") then LayerNorm:
       z_e   = [h[receiver], h[sender], edge features]         one row per edge e
       m_e   = sigmoid(z_e @ W_f + b_f) * softplus(z_e @ W_s + b_s)
       h     = LayerNorm(h + mean of m_e over the edges into each node; 0 with none)
  logits = relu(h @ W_t + b_t) @ W_head + b_head, per learned head

spektral takes the adjacency's column (edge_index[:, 1]) as the receiver ("target") and
its row as the sender ("source"). Here z_e @ W is split into h @ W_receiver gathered at
the receiver, h @ W_sender gathered at the sender and the edge part, so the big matmuls run
per node, not per edge (see `_mean_message` for the rest). Results agree with TensorFlow's
to ~1e-6 relative (float32 rounding in a different order).

Weights are stored in `net.weights` build order: embedding; encoder kernel, bias; encoder
LayerNorm gamma, beta; per conv layer the gate Dense (`dense_f`, sigmoid) kernel, bias then
the value Dense (`dense_s`, softplus) kernel, bias; per layer LayerNorm gamma, beta; trunk
kernel, bias; then the heads' kernel, bias in sorted head-name order (Keras tracks a dict
of layers by sorted key).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from regal.graph import ComputationGraph
from regal.policy.features import (EDGE_FEATURES, NODE_FEATURES, OP_TYPE_BUCKETS, GraphFeatures,
                                   graph_features)
from regal.policy.menus import (ACTION_SPACE, HEADS, Action, check_mode, choose,
                                default_choices, learned_heads, make_action, normalise_menus,
                                read_policy_files)
from regal.workers import blas_controller, single_threaded_blas

__all__ = ["NumpyPolicy", "as_features", "weight_shapes", "LAYER_NORM_EPSILON"]

TYPE_EMBEDDING = 8          # as regal.policy.model.TYPE_EMBEDDING
LAYER_NORM_EPSILON = 1e-3   # Keras' LayerNormalization default


def as_features(graph, devices=None, objective: str = "peak_memory") -> GraphFeatures:
    """`graph`'s features, with its reference solution for `objective` (passed through if
    already a GraphFeatures)."""
    if isinstance(graph, GraphFeatures):
        return graph
    if not isinstance(graph, ComputationGraph):
        raise ValueError(f"graph: expected a ComputationGraph or GraphFeatures, got "
                         f"{type(graph).__name__}")
    if devices is None:
        raise ValueError("devices: required with a ComputationGraph (an int or a DeviceSpec)")
    return graph_features(graph, devices, objective)


def weight_shapes(num_layers: int, hidden: int, head_sizes: dict[str, int]) -> list[tuple]:
    """Shapes of the stored weight arrays, in `net.weights` build order."""
    h, z = hidden, 2 * hidden + len(EDGE_FEATURES)
    shapes = [(OP_TYPE_BUCKETS, TYPE_EMBEDDING), (len(NODE_FEATURES) + TYPE_EMBEDDING, h), (h,),
              (h,), (h,)]
    shapes += [(z, h), (h,), (z, h), (h,)] * num_layers
    shapes += [(h,), (h,)] * num_layers
    shapes += [(h, h), (h,)]
    for name in sorted(head_sizes):
        shapes += [(h, head_sizes[name]), (head_sizes[name],)]
    return shapes


CHUNK_EDGES = 2048  # edges per block of the message computation: its buffers stay in cache


class _Half(NamedTuple):
    """One Dense of a CrystalConv (gate or value) split by the rows of z it reads."""

    receiver_kernel: np.ndarray  # [H, H]: rows that read h[receiver]
    sender_kernel: np.ndarray    # [H, H]: rows that read h[sender]
    edge_kernel: np.ndarray      # [edge features, H]
    bias: np.ndarray             # [H]

    @classmethod
    def split(cls, kernel: np.ndarray, bias: np.ndarray, scale: float = 1.0) -> "_Half":
        h = kernel.shape[1]
        kernel, bias = kernel * np.float32(scale), bias * np.float32(scale)
        return cls(*(np.ascontiguousarray(k) for k in (kernel[:h], kernel[h:2 * h],
                                                        kernel[2 * h:], bias)))


class _Conv(NamedTuple):
    """One CrystalConv and the LayerNorm after it. The gate half is pre-scaled by 1/2 (exact
    in floating point), so that 2 sigmoid(x) = tanh(x / 2) + 1 needs no multiply per edge."""

    gate: _Half   # sigmoid Dense (spektral's dense_f), times 1/2
    value: _Half  # softplus Dense (dense_s)
    gamma: np.ndarray
    beta: np.ndarray


def _fuse_conv(gate_kernel, gate_bias, value_kernel, value_bias, gamma, beta) -> _Conv:
    return _Conv(gate=_Half.split(gate_kernel, gate_bias, 0.5),
                 value=_Half.split(value_kernel, value_bias), gamma=gamma, beta=beta)


class _Edges(NamedTuple):
    """A graph's edges, and where each message's features land in a flat `[n * H]` sum."""

    sender: np.ndarray
    receiver: np.ndarray
    features: np.ndarray     # [m, edge features] float32
    flat_target: np.ndarray  # [m * H]: receiver * H + feature column
    half_over_degree: np.ndarray  # [n, 1] float32: 0.5 / in-degree (a node with none adds 0)


def _graph_edges(f: GraphFeatures, hidden: int) -> _Edges:
    index = np.asarray(f.edge_index, dtype=np.int64).reshape(-1, 2)
    sender, receiver = np.ascontiguousarray(index[:, 0]), np.ascontiguousarray(index[:, 1])
    if len(index) and (index.min() < 0 or index.max() >= f.num_nodes):
        raise ValueError(f"edge_index: node ids must lie in 0..{f.num_nodes - 1}, got "
                         f"{int(index.min())}..{int(index.max())}")
    degree = np.bincount(receiver, minlength=f.num_nodes)
    flat = (receiver[:, None] * hidden + np.arange(hidden)).ravel()
    return _Edges(sender=sender, receiver=receiver, features=np.asarray(f.edges, np.float32),
                  flat_target=flat,
                  half_over_degree=(0.5 / np.maximum(degree, 1)).astype(np.float32)[:, None])


def _pre_activation(out, scratch, node_parts, half: _Half, edges: "_Edges", a: int, b: int):
    """`z @ kernel + bias` of edges a..b into `out`, from per-node products (receiver part
    with the bias, sender part) gathered at each edge's ends."""
    receiver_part, sender_part = node_parts
    # mode="clip": ids are checked in `_graph_edges`; "raise" would buffer `out`
    np.take(receiver_part, edges.receiver[a:b], axis=0, out=out, mode="clip")
    np.take(sender_part, edges.sender[a:b], axis=0, out=scratch, mode="clip")
    out += scratch
    np.matmul(edges.features[a:b], half.edge_kernel, out=scratch)
    out += scratch


def _mean_message(h: np.ndarray, conv: _Conv, edges: "_Edges") -> np.ndarray:
    """Mean over the edges into each node of sigmoid(gate) * softplus(value), `[n, H]`, 0 for
    a node with none (spektral's `unsorted_segment_mean`).

    Blocks of CHUNK_EDGES edges keep every per-edge temporary in cache; the messages
    (times 2, see `_Conv`) are summed in float32 and in edge order by one flat `np.add.at`,
    which numpy runs several times faster than `np.add.reduceat` or `np.bincount` here."""
    n, size = h.shape
    parts = {}
    for name, half in (("gate", conv.gate), ("value", conv.value)):
        receiver_part = h @ half.receiver_kernel
        receiver_part += half.bias
        parts[name] = (receiver_part, h @ half.sender_kernel)
    m = len(edges.receiver)
    messages = np.empty((m, size), np.float32)
    chunk = min(CHUNK_EDGES, m)
    buffers = np.empty((3, chunk, size), np.float32)
    for a in range(0, m, chunk):
        b = min(a + chunk, m)
        gate, value, soft = buffers[:, :b - a]
        _pre_activation(gate, soft, parts["gate"], conv.gate, edges, a, b)
        _pre_activation(value, soft, parts["value"], conv.value, edges, a, b)
        # softplus(v) = max(log(1 + exp(min(v, 15))), v): no overflow; the absolute error
        # (< 6e-8, where exp(v) is below float32's resolution at 1) does not matter here
        np.minimum(value, np.float32(15.0), out=soft)
        np.exp(soft, out=soft)
        soft += np.float32(1.0)
        np.log(soft, out=soft)
        np.maximum(soft, value, out=soft)
        # 2 sigmoid(x) = tanh(x / 2) + 1, and the gate already holds x / 2
        np.tanh(gate, out=gate)
        gate += np.float32(1.0)
        np.multiply(gate, soft, out=messages[a:b])
    total = np.zeros(n * size, np.float32)
    np.add.at(total, edges.flat_target, messages.ravel())
    total = total.reshape(n, size)
    total *= edges.half_over_degree
    return total


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=1, keepdims=True)
    return centred * (gamma / np.sqrt(variance + np.float32(LAYER_NORM_EPSILON))) + beta


class NumpyPolicy:
    """The stored GNN policy, inference only (no gradients, no TensorFlow).

    Same `menus`, `learned`, `default`, `config`, `logits` and `act` as `Policy`."""

    def __init__(self, config: dict, weights: list[np.ndarray]) -> None:
        self.config = dict(config)
        if config.get("action_space", 1) != ACTION_SPACE:
            raise ValueError(f"config: action space {config.get('action_space', 1)}, this "
                             f"version reads {ACTION_SPACE}")
        num_layers, hidden = int(config.get("num_layers", 4)), int(config.get("hidden", 64))
        if num_layers < 0 or hidden < 1:
            raise ValueError(f"num_layers must be >= 0 and hidden >= 1, got {num_layers}, {hidden}")
        self.menus = normalise_menus(config.get("menus"))
        self.learned = learned_heads(config.get("learn", "both"),
                                     bool(config.get("learn_elite_bias", True)))
        self.default = default_choices(self.menus)
        expected = weight_shapes(num_layers, hidden, {h: len(self.menus[h]) for h in self.learned})
        if [tuple(np.shape(w)) for w in weights] != expected:
            raise ValueError("weights do not match the config: expected shapes "
                             f"{expected}, got {[tuple(np.shape(w)) for w in weights]}")
        w = iter([np.ascontiguousarray(a, dtype=np.float32) for a in weights])
        embedding, kernel = next(w), next(w)
        f = len(NODE_FEATURES)
        self._node_kernel = kernel[:f]
        self._type_table = embedding @ kernel[f:]  # embedding then its encoder rows, per op type
        self._encoder_bias, self._encoder_norm = next(w), (next(w), next(w))
        dense = [(next(w), next(w), next(w), next(w)) for _ in range(num_layers)]
        norms = [(next(w), next(w)) for _ in range(num_layers)]
        self._convs = [_fuse_conv(*gate_value, *norm) for gate_value, norm in zip(dense, norms)]
        self._trunk = (next(w), next(w))
        heads = {name: (next(w), next(w)) for name in sorted(self.learned)}
        self._head_names = tuple(h for h in HEADS if h in heads)
        self._head_kernel = np.concatenate([heads[h][0] for h in self._head_names], axis=1) \
            if heads else np.zeros((hidden, 0), np.float32)
        self._head_bias = np.concatenate([heads[h][1] for h in self._head_names]) \
            if heads else np.zeros(0, np.float32)
        self._head_split = np.cumsum([len(self.menus[h]) for h in self._head_names])[:-1]
        self.hidden = hidden
        blas_controller()  # its one-off library scan counts as load time, not forward time

    @classmethod
    def load(cls, directory) -> "NumpyPolicy":
        """The policy `Policy.save` wrote to `directory` (config.json + weights.npz)."""
        path = Path(directory)
        config, weights = read_policy_files(path)
        try:
            return cls(config, weights)
        except ValueError as exc:
            if str(exc).startswith("weights do not match"):
                raise ValueError(f"policy directory {str(path)!r}: weights do not match its "
                                 "config") from None
            raise

    def features(self, graph, devices=None, objective: str = "peak_memory") -> GraphFeatures:
        return as_features(graph, devices, objective)

    def embed(self, graph, devices=None) -> np.ndarray:
        """Every op's float32 embedding after the last message-passing layer, `[n, H]`."""
        with single_threaded_blas():
            return self._embed(as_features(graph, devices))

    def _embed(self, f: GraphFeatures) -> np.ndarray:
        nodes = np.asarray(f.nodes, np.float32)
        op_type = np.asarray(f.op_type, np.int64)
        h = nodes @ self._node_kernel + self._type_table[op_type] + self._encoder_bias
        h = _layer_norm(np.maximum(h, np.float32(0.0), out=h), *self._encoder_norm)
        if not self._convs:
            return h
        edges = _graph_edges(f, self.hidden)
        for conv in self._convs:
            if len(edges.receiver):
                h += _mean_message(h, conv, edges)
            h = _layer_norm(h, conv.gamma, conv.beta)
        return h

    def logits(self, graph, devices=None) -> dict[str, np.ndarray]:
        """Menu logits per learned head, float64 `[n, menu size]` (float32 arithmetic)."""
        if not self._head_names:
            return {}
        with single_threaded_blas():
            h = self._embed(as_features(graph, devices))
            trunk = h @ self._trunk[0] + self._trunk[1]
            np.maximum(trunk, np.float32(0.0), out=trunk)
            out = trunk @ self._head_kernel + self._head_bias
        parts = np.split(out.astype(np.float64), self._head_split, axis=1)
        return dict(zip(self._head_names, parts))

    def act(self, graph, devices=None, mode: str = "sample", rng=None, seed=None,
            objective: str = "peak_memory") -> Action:
        """As `Policy.act`: the same choices and random draws for the same logits and rng."""
        check_mode(mode)
        f = as_features(graph, devices, objective)
        if mode == "sample" and rng is None:
            rng = np.random.default_rng(seed)
        logits = self.logits(f) if self.learned else {}
        choices, log_prob = choose(logits, self.default, f.num_nodes, mode, rng)
        return make_action(choices, log_prob, f.reference, self.menus)
