"""Procedural computation graphs: REGAL-like random DAGs, network-like families, augmentation.

Why: the policy trains on many graphs, and the REGAL paper's synthetic set (10,000 train /
1,000 validation / 1,000 test random graphs, tensor sizes and op costs around 50) is a recipe,
not something to commit. Every generator here is a pure function of a seed, so a split is a
`SplitRecipe` and any single graph of it is rebuilt with `graph_at(recipe, index)`.

Units: random DAGs use REGAL's abstract scale (sizes/costs ~50). The network-like families
use bytes (float32 tensors from shapes) and microseconds (a roofline-style estimate), like the
graphs imported from TensorFlow. Every size, memory and cost is a non-negative integer, as in
a CostGraphDef.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from regal.graph import ComputationGraph, GraphBuilder, build_graph

__all__ = [
    "FAMILIES", "SYNTH_VERSION", "REGAL_SYNTHETIC", "RECIPES", "SplitRecipe",
    "random_dag", "layered_cnn", "inception_like", "transformer_like", "training_graph",
    "augment", "generate", "min_ops", "graph_at", "materialize", "recipe_named",
    "custom_recipe", "recipe_to_dict",
]

# Bumped whenever a generator changes the graphs it returns for a given seed.
SYNTH_VERSION = 1

FAMILIES = ("random", "cnn", "inception", "transformer")
_FAMILY_ALIASES = {"mixed": FAMILIES}

# The REGAL paper's split sizes; seeds and op range are this project's choice.
REGAL_SYNTHETIC = {"train": 10000, "valid": 1000, "test": 1000}
_REGAL_SEEDS = {"train": 20190507, "valid": 20190508, "test": 20190509}
_REGAL_OPS = (50, 200)

_MAX_OPS = 1_000_000
# ratio (training graph ops / forward ops) used for the first guess of the forward size
_TRAINING_RATIO_GUESS = 2.3


def _rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_num_ops(num_ops, minimum: int, what: str = "num_ops") -> int:
    if isinstance(num_ops, (bool, np.bool_)) or not isinstance(num_ops, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {num_ops!r}")
    if not minimum <= num_ops <= _MAX_OPS:
        raise ValueError(f"{what} must be between {minimum} and {_MAX_OPS}, got {num_ops}")
    return int(num_ops)


def _around(rng: np.random.Generator, mean: float, count: int, spread: float = 0.2) -> np.ndarray:
    """Positive integers around `mean` with relative noise `spread` (REGAL: ~50 with noise)."""
    return np.maximum(1, np.rint(rng.normal(mean, spread * mean, count))).astype(np.int64)


# ---------------------------------------------------------------------------
# REGAL-like random DAGs


def random_dag(num_ops: int, rng, *, mean_size: float = 50.0, mean_cost: float = 50.0,
               locality: float = 6.0) -> ComputationGraph:
    """A random acyclic graph with exactly `num_ops` ops, in the spirit of REGAL's synthetic set.

    Op `v` reads from earlier ops only (so ids are a topological order); most inputs come from
    the last few ops (`locality` is the mean distance back), a few from anywhere earlier, so the
    depth is a realistic fraction of the size rather than a chain or a star.
    """
    n = _check_num_ops(num_ops, 2)
    rng = _rng(rng)
    # outputs: one, sometimes two or three
    n_out = 1 + rng.binomial(2, 0.1, n)
    output_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(n_out, out=output_ptr[1:])
    t = int(output_ptr[-1])
    producer = np.repeat(np.arange(n), n_out)
    size = _around(rng, mean_size, t)

    # inputs: op 0 and ~3% of the others are sources; the rest read 1 + Poisson(0.8) tensors
    fan_in = 1 + rng.poisson(0.8, n)
    fan_in[rng.random(n) < 0.03] = 0
    fan_in[0] = 0
    consumer = np.repeat(np.arange(n), fan_in)
    e = len(consumer)
    back = 1 + np.floor(rng.exponential(locality - 1.0, e)).astype(np.int64)
    far = rng.random(e) < 0.08
    back[far] = 1 + np.floor(rng.random(int(far.sum())) * consumer[far]).astype(np.int64)
    src = np.maximum(consumer - back, 0)
    port = np.floor(rng.random(e) * n_out[src]).astype(np.int64)
    tensor = output_ptr[src] + port
    key = np.unique(consumer * t + tensor)  # one edge per (consumer, tensor), grouped by consumer
    consumer, tensor = key // t, key % t
    input_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(consumer, minlength=n), out=input_ptr[1:])

    # aliases: ~5% of ops with inputs forward their first input (reshape/identity-like)
    alias = np.full(t, -1, np.int64)
    has_input = np.diff(input_ptr) > 0
    for v in np.flatnonzero(has_input & (rng.random(n) < 0.05)):
        first = int(tensor[input_ptr[v]])
        out = int(output_ptr[v])
        alias[out] = first
        size[out] = size[first]  # ascending ids: `first` < `out`, already final

    # control edges: ~5% of ops wait on a recent earlier op
    has_ctrl = np.flatnonzero(rng.random(n) < 0.05)
    has_ctrl = has_ctrl[has_ctrl > 0]
    cback = 1 + np.floor(rng.exponential(locality, len(has_ctrl))).astype(np.int64)
    csrc = np.maximum(has_ctrl - cback, 0)

    cost = _around(rng, mean_cost, n).astype(np.float64)
    persistent = np.where(rng.random(n) < 0.1, _around(rng, mean_size, n), 0)
    temporary = np.where(rng.random(n) < 0.1, _around(rng, mean_size, n), 0)
    return build_graph(
        names=[f"node_{i}" for i in range(n)], compute_cost=cost,
        temporary_memory=temporary, persistent_memory=persistent,
        tensor_producer=producer, tensor_size=size, tensor_alias=alias,
        input_ptr=input_ptr, input_tensor=tensor, control_src=csrc, control_dst=has_ctrl,
    )


# ---------------------------------------------------------------------------
# network-like families: a small builder that tracks shapes, bytes and a cost estimate

_FLOPS_PER_US = 5e6      # 5 TFLOP/s
_BYTES_PER_US = 5e5      # 500 GB/s
_LAUNCH_US = 2.0
_F32 = 4


class _Net:
    """Adds typed ops to a GraphBuilder; a tensor reference is (op, port)."""

    def __init__(self, rng: np.random.Generator, prefix: str) -> None:
        self.rng = rng
        self.prefix = prefix
        self.builder = GraphBuilder()
        self.sizes: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self.builder)

    def cost(self, flops: float, bytes_moved: float) -> int:
        """Roofline estimate with +-10% noise, in whole microseconds."""
        us = _LAUNCH_US + max(flops / _FLOPS_PER_US, bytes_moved / _BYTES_PER_US)
        return max(1, int(round(us * float(np.exp(self.rng.normal(0.0, 0.1))))))

    def op(self, op_type: str, inputs: Sequence[tuple[int, int]], out_sizes: Sequence[int], *,
           flops: float = 0.0, persistent: int = 0, temporary: int = 0,
           alias_port: int = -1) -> list[tuple[int, int]]:
        b = self.builder
        in_bytes = sum(self.size_of(x) for x in inputs)
        cost = self.cost(flops, in_bytes + sum(out_sizes) + persistent)
        v = b.add_op(f"{self.prefix}/{op_type.lower()}_{len(b)}", cost, op_type=op_type,
                     persistent_memory=int(persistent), temporary_memory=int(temporary))
        for p, port in inputs:
            b.add_input(v, p, port)
        outs = []
        for k, s in enumerate(out_sizes):
            b.add_output(v, int(s), alias_port if k == 0 else -1)
            self.sizes[(v, k)] = int(s)
            outs.append((v, k))
        return outs

    def one(self, *args, **kwargs) -> tuple[int, int]:
        return self.op(*args, **kwargs)[0]

    def size_of(self, x: tuple[int, int]) -> int:
        return self.sizes[x]

    def build(self) -> ComputationGraph:
        return self.builder.build()


def _fill_and_finish(net: _Net, x, num_ops: int, head_ops: int, head) -> None:
    """Pads with elementwise ops so that the head lands the graph on exactly `num_ops` ops."""
    while len(net) + head_ops < num_ops:
        kind = ("Identity" if net.rng.random() < 0.2
                else str(net.rng.choice(["Relu", "Mul", "Tanh"])))
        s = net.size_of(x)
        x = net.one(kind, [x], [s], flops=s / _F32, alias_port=0 if kind == "Identity" else -1)
    head(x)
    assert len(net) == num_ops, (len(net), num_ops)


# -- CNN ---------------------------------------------------------------------

_CNN_PROLOGUE, _CNN_HEAD = 2, 4


def layered_cnn(num_ops: int, rng) -> ComputationGraph:
    """A conv net with exactly `num_ops` ops: stages of conv/bn/relu units, residual skips,
    stride-2 downsampling (activations shrink), and sometimes a U-Net decoder (activations
    grow again and long skips keep encoder activations alive). Weights are persistent memory.
    """
    n = _check_num_ops(num_ops, _CNN_PROLOGUE + _CNN_HEAD)
    rng = _rng(rng)
    net = _Net(rng, "cnn")
    batch = int(rng.choice([1, 2, 4, 8, 16, 32]))
    hw = int(rng.choice([32, 64, 128, 224]))
    ch = int(rng.choice([16, 32, 64]))
    residual_p = float(rng.uniform(0.3, 1.0))
    unet = rng.random() < 0.3
    classes = int(rng.choice([10, 100, 1000]))

    def act(h, c):
        return batch * h * h * c * _F32

    def conv(x, h, c_in, c_out, k, stride):
        h2 = max(1, h // stride)
        out = act(h2, c_out)
        flops = 2.0 * batch * h2 * h2 * k * k * c_in * c_out
        workspace = int(out * rng.uniform(0.0, 0.5)) if rng.random() < 0.5 else 0
        y = net.one("Conv2D", [x], [out], flops=flops, persistent=k * k * c_in * c_out * _F32,
                    temporary=workspace)
        return y, h2

    def bn(x, c):
        s = net.size_of(x)
        return net.one("FusedBatchNorm", [x], [s], flops=4 * s / _F32, persistent=4 * c * _F32)

    def relu(x):
        s = net.size_of(x)
        return net.one("Relu", [x], [s], flops=s / _F32)

    x = net.one("Placeholder", [], [act(hw, 3)])
    stem_k, stem_s = (7, 2) if hw >= 128 else (3, 1)
    x, h = conv(x, hw, 3, ch, stem_k, stem_s)
    c = ch

    stages = 1
    while h >> stages >= 4 and stages < 5:
        stages += 1
    n_stage_slots = stages + (stages - 1 if unet else 0)
    est_units = max(1, (n - _CNN_PROLOGUE - _CNN_HEAD) // 5)
    per_stage = max(1, est_units // n_stage_slots)

    encoder_skips = []  # (tensor, h, c) at the end of each encoder stage, for the decoder
    slot, in_slot = 0, 0
    while True:
        residual = rng.random() < residual_p
        new_slot = in_slot >= per_stage and slot < n_stage_slots - 1
        decoding = unet and new_slot and slot + 1 >= stages
        projection = residual and new_slot  # shape changes: a 1x1 conv on the shortcut
        size = (8 if projection else 7 if residual else 3) + (2 if decoding else 0)
        if len(net) + size + _CNN_HEAD > n:
            break
        stride = 1
        if new_slot:
            slot += 1
            in_slot = 0
            if decoding:  # upsample, concat with the matching encoder stage's activation
                skip, sh, sc = encoder_skips.pop()
                x = net.one("ResizeNearestNeighbor", [x], [act(sh, c)], flops=act(sh, c) / _F32)
                h = sh
                x = net.one("ConcatV2", [x, skip], [act(h, c + sc)])
                c_in, c = c + sc, max(ch, c // 2)
            else:
                encoder_skips.append((x, h, c))
                stride, c_in, c = 2, c, c * 2
        else:
            c_in = c
        in_slot += 1
        if residual:
            y, h2 = conv(x, h, c_in, c, 3, stride)
            y = relu(bn(y, c))
            y, h2 = conv(y, h2, c, c, 3, 1)
            y = bn(y, c)
            shortcut = conv(x, h, c_in, c, 1, stride)[0] if projection else x
            y = net.one("AddV2", [y, shortcut], [act(h2, c)], flops=act(h2, c) / _F32)
            x = relu(y)
        else:
            y, h2 = conv(x, h, c_in, c, 3, stride)
            x = relu(bn(y, c))
        h = h2

    def head(x):  # reads the final channel count `c`
        _pooled_classifier(net, x, "Mean", batch, c, classes)

    _fill_and_finish(net, x, n, _CNN_HEAD, head)
    return net.build()


def _pooled_classifier(net, x, pool_op: str, batch: int, channels: int, classes: int) -> None:
    """Global pool, flatten (an alias), dense layer with its weights, softmax: 4 ops."""
    p = net.one(pool_op, [x], [batch * channels * _F32], flops=net.size_of(x) / _F32)
    p = net.one("Reshape", [p], [batch * channels * _F32], alias_port=0)
    logits = net.one("MatMul", [p], [batch * classes * _F32],
                     flops=2.0 * batch * channels * classes, persistent=channels * classes * _F32)
    net.one("Softmax", [logits], [batch * classes * _F32], flops=5 * batch * classes)


# -- Inception -------------------------------------------------------------------

_INC_PROLOGUE, _INC_HEAD = 3, 4


def inception_like(num_ops: int, rng) -> ComputationGraph:
    """An Inception-style net with exactly `num_ops` ops: blocks of 2-4 parallel branches
    (1x1; 1x1-3x3; 1x1-3x3-3x3; pool-1x1) joined by a concat, reduction blocks that halve the
    resolution, and sometimes an auxiliary classifier that branches off mid-way.
    """
    n = _check_num_ops(num_ops, _INC_PROLOGUE + _INC_HEAD)
    rng = _rng(rng)
    net = _Net(rng, "inception")
    batch = int(rng.choice([1, 2, 4, 8, 16, 32]))
    hw = int(rng.choice([32, 64, 128, 224, 299]))
    c = int(rng.choice([32, 64, 96]))
    classes = int(rng.choice([10, 100, 1000]))
    reduce_every = int(rng.integers(2, 5))
    aux_at = int(rng.integers(2, 6)) if rng.random() < 0.5 else -1

    def act(h, ch):
        return batch * h * h * ch * _F32

    def conv_relu(x, h, c_in, c_out, k, stride=1):
        h2 = max(1, h // stride)
        out = act(h2, c_out)
        y = net.one("Conv2D", [x], [out], flops=2.0 * batch * h2 * h2 * k * k * c_in * c_out,
                    persistent=k * k * c_in * c_out * _F32,
                    temporary=int(out * rng.uniform(0, 0.3)) if rng.random() < 0.3 else 0)
        return net.one("Relu", [y], [out], flops=out / _F32), h2

    x = net.one("Placeholder", [], [act(hw, 3)])
    x, h = conv_relu(x, hw, 3, c, 3, 2 if hw >= 128 else 1)

    def block_plan():
        extra = rng.choice([1, 2, 3], size=int(rng.integers(1, 4)), replace=False)
        kinds = [0] + sorted(extra.tolist())
        ops = {0: 2, 1: 4, 2: 6, 3: 3}
        return kinds, sum(ops[k] for k in kinds) + 1

    blocks = 0
    while True:
        kinds, size = block_plan()
        aux = blocks == aux_at
        if len(net) + size + (6 if aux else 0) + _INC_HEAD > n:
            break
        reduce = blocks > 0 and blocks % reduce_every == 0 and h >= 8
        stride = 2 if reduce else 1
        c_out_total = c * 2 if reduce else c
        share = np.maximum(1, np.rint(rng.dirichlet(np.ones(len(kinds))) * c_out_total)).astype(int)
        outs = []
        for kind, cb in zip(kinds, share.tolist()):
            if kind == 0:
                y, h2 = conv_relu(x, h, c, cb, 1, stride)
            elif kind == 1:
                y, hh = conv_relu(x, h, c, max(1, cb // 2), 1)
                y, h2 = conv_relu(y, hh, max(1, cb // 2), cb, 3, stride)
            elif kind == 2:
                y, hh = conv_relu(x, h, c, max(1, cb // 2), 1)
                y, hh = conv_relu(y, hh, max(1, cb // 2), cb, 3)
                y, h2 = conv_relu(y, hh, cb, cb, 3, stride)
            else:
                p = net.one("MaxPool", [x], [act(h, c)], flops=9 * act(h, c) / _F32)
                y, h2 = conv_relu(p, h, c, cb, 1, stride)
            outs.append(y)
        h, c = h2, int(share.sum())
        x = net.one("ConcatV2", outs, [act(h, c)])
        blocks += 1
        if aux:  # auxiliary classifier: a second sink that keeps a mid-way activation alive
            a = net.one("AvgPool", [x], [act(max(1, h // 4), c)], flops=act(h, c) / _F32)
            a, _ = conv_relu(a, max(1, h // 4), c, 128, 1)
            a = net.one("Reshape", [a], [net.size_of(a)], alias_port=0)
            width = net.size_of(a) // (batch * _F32)
            a = net.one("MatMul", [a], [batch * classes * _F32],
                        flops=2.0 * batch * width * classes,
                        persistent=width * classes * _F32)
            net.one("Softmax", [a], [batch * classes * _F32], flops=5 * batch * classes)

    def head(x):  # reads the final channel count `c`
        _pooled_classifier(net, x, "AvgPool", batch, c, classes)

    _fill_and_finish(net, x, n, _INC_HEAD, head)
    return net.build()


# -- Transformer ---------------------------------------------------------------------

_TF_PROLOGUE, _TF_HEAD = 3, 3


def transformer_like(num_ops: int, rng) -> ComputationGraph:
    """A transformer with exactly `num_ops` ops: embedding, then alternating attention
    (layernorm, q/k/v projections, head reshapes, scores matmul, softmax, context matmul,
    output projection, residual add) and MLP (layernorm, matmul, gelu, matmul, residual)
    sub-blocks; sometimes encoder-decoder, where every decoder cross-attention reads the
    encoder's output, which therefore lives until the end.
    """
    n = _check_num_ops(num_ops, _TF_PROLOGUE + _TF_HEAD)
    rng = _rng(rng)
    net = _Net(rng, "transformer")
    batch = int(rng.choice([1, 2, 4, 8, 16]))
    seq = int(rng.choice([64, 128, 256, 512]))
    d = int(rng.choice([128, 256, 512, 768, 1024]))
    heads = int(rng.choice([2, 4, 8, 16]))
    vocab = int(rng.choice([1000, 8000, 32000]))
    enc_dec = rng.random() < 0.3
    hidden = batch * seq * d * _F32
    scores = batch * heads * seq * seq * _F32

    def embed():
        ids = net.one("Placeholder", [], [batch * seq * 4])
        e = net.one("Gather", [ids], [hidden], persistent=vocab * d * _F32)
        return net.one("AddV2", [e], [hidden], flops=batch * seq * d, persistent=seq * d * _F32)

    def layernorm(x):
        return net.one("LayerNorm", [x], [hidden], flops=8 * batch * seq * d,
                       persistent=2 * d * _F32)

    def dense(x, d_in, d_out, kind="MatMul"):
        return net.one(kind, [x], [batch * seq * d_out * _F32],
                       flops=2.0 * batch * seq * d_in * d_out,
                       persistent=(d_in * d_out + d_out) * _F32)

    def split_heads(x):
        return net.one("Reshape", [x], [net.size_of(x)], alias_port=0)

    def attention(x, memory=None):  # 13 ops
        y = layernorm(x)
        kv_src = y if memory is None else memory
        q = split_heads(dense(y, d, d))
        k = split_heads(dense(kv_src, d, d))
        v = split_heads(dense(kv_src, d, d))
        s = net.one("BatchMatMul", [q, k], [scores], flops=2.0 * batch * seq * seq * d)
        p = net.one("Softmax", [s], [scores], flops=5.0 * scores / _F32)
        ctx = net.one("BatchMatMul", [p, v], [hidden], flops=2.0 * batch * seq * seq * d)
        ctx = net.one("Reshape", [ctx], [hidden], alias_port=0)
        o = dense(ctx, d, d)
        return net.one("AddV2", [o, x], [hidden], flops=batch * seq * d)

    def mlp(x):  # 5 ops
        y = layernorm(x)
        y = dense(y, d, 4 * d)
        y = net.one("Gelu", [y], [net.size_of(y)], flops=8.0 * batch * seq * 4 * d)
        y = dense(y, 4 * d, d)
        return net.one("AddV2", [y, x], [hidden], flops=batch * seq * d)

    x = embed()
    budget = n - _TF_PROLOGUE - _TF_HEAD
    memory = None
    # encoder-decoder: the first half of the budget is the encoder
    switch_at = _TF_PROLOGUE + budget // 2 if enc_dec else n + 1
    units = 0
    while True:
        if memory is None and len(net) >= switch_at and len(net) + 4 + 13 + _TF_HEAD <= n:
            memory = layernorm(x)      # encoder output, read by every cross-attention
            x = embed()                # decoder input
            units = 0
        plan = [13, 13, 5] if memory is not None else [13, 5]
        size = plan[units % len(plan)]
        if len(net) + size + _TF_HEAD > n:
            break
        step = units % len(plan)
        if size == 5:
            x = mlp(x)
        elif memory is not None and step == 1:
            x = attention(x, memory)
        else:
            x = attention(x)
        units += 1

    def head(x):
        y = layernorm(x)
        logits = dense(y, d, vocab)
        net.one("Softmax", [logits], [net.size_of(logits)], flops=5.0 * batch * seq * vocab)

    _fill_and_finish(net, x, n, _TF_HEAD, head)
    return net.build()


# ---------------------------------------------------------------------------
# training graphs


def training_graph(forward: ComputationGraph) -> ComputationGraph:
    """Forward graph + loss + a backward op per differentiable forward op + optimizer updates.

    The backward op of `v` reads the upstream gradients of `v`'s outputs and `v`'s own input
    activations, so every activation stays live until the backward pass reaches it (the memory
    shape of real training). It emits the gradient of each input that needs one, plus a weight
    gradient when `v` holds persistent memory; an update op per weight-holding op reads that
    gradient and holds optimizer state as persistent memory. Forward ops, tensors and edges keep
    their ids; new ops are appended.
    """
    g = forward
    n, t = g.num_nodes, g.num_tensors
    size = g.tensor_size
    cost = g.compute_cost
    ip, it = g.input_ptr, g.input_tensor
    op_ptr = g.output_ptr
    persistent = g.persistent_memory
    cp, cons = g.consumer_ptr, g.consumer

    inputs_of = [np.unique(it[ip[v]:ip[v + 1]]).tolist() for v in range(n)]
    differentiable = np.array([bool(inputs_of[v]) or persistent[v] > 0 for v in range(n)])
    consumed = np.diff(cp) > 0
    producer = g.tensor_producer
    sink_ops = [v for v in range(n) if op_ptr[v + 1] > op_ptr[v]
                and not consumed[op_ptr[v]:op_ptr[v + 1]].any()]

    names, types, costs, temps, pers = [], [], [], [], []
    new_inputs: list[list[int]] = []
    new_sizes: list[list[int]] = []
    next_tensor = t
    median_cost = float(np.median(cost))

    def add(name, op_type, c, temp, p, ins, outs) -> int:
        nonlocal next_tensor
        names.append(name)
        types.append(op_type)
        costs.append(c)
        temps.append(temp)
        pers.append(p)
        new_inputs.append(ins)
        new_sizes.append(outs)
        first = next_tensor
        next_tensor += len(outs)
        return first

    # loss: reads every output of every sink op, emits the gradient of each differentiable one
    loss_inputs = [int(x) for v in sink_ops for x in range(op_ptr[v], op_ptr[v + 1])]
    seeded = [x for x in loss_inputs if differentiable[producer[x]]]
    first = add("loss", "Loss", max(1.0, round(median_cost)), 0, 0, loss_inputs,
                [int(size[x]) for x in seeded])
    grad_of_output: dict[tuple[int, int], int] = {}  # (consumer op, tensor) -> gradient tensor
    for k, x in enumerate(seeded):
        grad_of_output[(-1, x)] = first + k

    weight_grad: dict[int, int] = {}
    prefix = "grad"
    for v in g.topo_order[::-1].tolist():
        if not differentiable[v]:
            continue
        upstream = []
        for x in range(op_ptr[v], op_ptr[v + 1]):
            for w in cons[cp[x]:cp[x + 1]].tolist():
                upstream.append(grad_of_output[(w, x)])
            if (-1, x) in grad_of_output:
                upstream.append(grad_of_output[(-1, x)])
        needs = [x for x in inputs_of[v] if differentiable[producer[x]]]
        outs = [int(size[x]) for x in needs]
        if persistent[v] > 0:
            outs.append(int(persistent[v]))
        base = str(g.op_types[v])
        first = add(f"{prefix}/{g.names[v]}", f"{base}Grad" if base else "Grad",
                    max(1.0, 2.0 * float(cost[v])), int(g.temporary_memory[v]), 0,
                    upstream + inputs_of[v], outs)
        for k, x in enumerate(needs):
            grad_of_output[(v, x)] = first + k
        if persistent[v] > 0:
            weight_grad[v] = first + len(needs)

    for v, gt in weight_grad.items():
        add(f"update/{g.names[v]}", "ApplyMomentum", max(1.0, round(0.25 * float(cost[v]))), 0,
            int(persistent[v]), [gt], [])

    m = len(names)
    out_counts = np.array([len(s) for s in new_sizes], np.int64)
    in_counts = np.array([len(i) for i in new_inputs], np.int64)
    all_inputs = np.concatenate([it, np.array([x for i in new_inputs for x in i], np.int64)])
    input_ptr = np.concatenate([ip[:-1], ip[-1] + np.concatenate([[0], np.cumsum(in_counts)])])
    return build_graph(
        names=np.concatenate([g.names, np.array(names, dtype=str)]),
        op_types=np.concatenate([g.op_types, np.array(types, dtype=str)]),
        compute_cost=np.concatenate([cost, costs]),
        temporary_memory=np.concatenate([g.temporary_memory, temps]),
        persistent_memory=np.concatenate([persistent, pers]),
        is_final=np.concatenate([g.is_final, np.zeros(m, bool)]),
        tensor_producer=np.concatenate([producer, np.repeat(np.arange(n, n + m), out_counts)]),
        tensor_size=np.concatenate([size, np.array([s for o in new_sizes for s in o], np.int64)]),
        tensor_alias=np.concatenate([g.tensor_alias, np.full(next_tensor - t, -1)]),
        input_ptr=input_ptr, input_tensor=all_inputs,
        control_src=np.asarray(g.control_pred), control_dst=np.repeat(
            np.arange(n), np.diff(g.control_ptr)),
    )


# ---------------------------------------------------------------------------
# augmentation


def augment(graph: ComputationGraph, rng, scale: float = 0.2) -> ComputationGraph:
    """Same structure, sizes/costs/memories times independent log-normal(0, `scale`) factors.

    Integers stay integers (rounded, never negative; zero stays zero). An alias that had its
    source's size keeps it, so reshapes stay the size of what they reshape.
    """
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a non-negative number, got {scale}")
    rng = _rng(rng)

    def jitter(a: np.ndarray) -> np.ndarray:
        return np.rint(a * np.exp(rng.normal(0.0, scale, len(a))))

    size = jitter(graph.tensor_size).astype(np.int64)
    alias = graph.tensor_alias
    old = graph.tensor_size
    for x in np.flatnonzero(alias >= 0):  # ascending: the source is final before its alias
        if old[x] == old[alias[x]]:
            size[x] = size[alias[x]]

    def ro(a):
        a = np.ascontiguousarray(a)
        a.setflags(write=False)
        return a

    return graph._replace(
        tensor_size=ro(size),
        compute_cost=ro(jitter(graph.compute_cost).astype(np.float64)),
        temporary_memory=ro(jitter(graph.temporary_memory).astype(np.int64)),
        persistent_memory=ro(jitter(graph.persistent_memory).astype(np.int64)),
    )


# ---------------------------------------------------------------------------
# one entry point


_BUILDERS = {
    "random": random_dag, "cnn": layered_cnn, "inception": inception_like,
    "transformer": transformer_like,
}
_MIN_FORWARD = {"random": 2, "cnn": _CNN_PROLOGUE + _CNN_HEAD,
                "inception": _INC_PROLOGUE + _INC_HEAD, "transformer": _TF_PROLOGUE + _TF_HEAD}


def _families(family) -> tuple[str, ...]:
    names = (family,) if isinstance(family, str) else tuple(family)
    out: list[str] = []
    for f in names:
        if f in _FAMILY_ALIASES:
            out.extend(_FAMILY_ALIASES[f])
        elif f in _BUILDERS:
            out.append(f)
        else:
            raise ValueError(f"family {f!r} is unknown; choose from "
                             f"{', '.join(FAMILIES + tuple(_FAMILY_ALIASES))}")
    if not out:
        raise ValueError("families must name at least one family")
    return tuple(dict.fromkeys(out))


def min_ops(family, training: bool = False) -> int:
    """The smallest op count `generate` accepts for `family` (a name, 'mixed' or a list)."""
    fams = _families(family)
    need = max(_MIN_FORWARD[f] for f in fams)
    return 3 * need if training else need


def generate(family: str, num_ops: int, seed, *, training: bool = False) -> ComputationGraph:
    """One graph of `family` ('random', 'cnn', 'inception', 'transformer' or 'mixed').

    Op counts are exact for inference graphs; with `training=True` the forward size is chosen
    so that forward + backward + updates lands near `num_ops` (within a few percent).
    """
    fams = _families(family)
    _check_num_ops(num_ops, min_ops(fams, training))
    rng = _rng(seed)
    fam = fams[int(rng.integers(len(fams)))] if len(fams) > 1 else fams[0]
    build = _BUILDERS[fam]
    sub_seed = int(rng.integers(2**63))
    if not training:
        return build(int(num_ops), sub_seed)
    lo = _MIN_FORWARD[fam]
    fwd = max(lo, int(round(num_ops / _TRAINING_RATIO_GUESS)))
    graph = training_graph(build(fwd, sub_seed))
    for _ in range(3):  # secant-free correction: the ratio barely moves with size
        if abs(graph.num_nodes - num_ops) <= 0.03 * num_ops:
            break
        fwd2 = max(lo, int(round(fwd * num_ops / graph.num_nodes)))
        if fwd2 == fwd:
            break
        fwd = fwd2
        graph = training_graph(build(fwd, sub_seed))
    return graph


# ---------------------------------------------------------------------------
# splits as recipes


@dataclass(frozen=True)
class SplitRecipe:
    """How to regenerate a split: graph `i` depends only on (`seed`, `i`) and the parameters."""

    name: str
    count: int
    min_ops: int
    max_ops: int
    seed: int
    families: tuple[str, ...] = ("random",)
    training: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or os.sep in self.name:
            raise ValueError(f"name must be a non-empty file-name prefix, got {self.name!r}")
        for field in ("count", "min_ops", "max_ops", "seed"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{field} must be an integer, got {value!r}")
        if self.count < 1:
            raise ValueError(f"count must be at least 1, got {self.count}")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        families = _families(self.families)
        object.__setattr__(self, "families", families)
        object.__setattr__(self, "training", bool(self.training))
        need = min_ops(families, self.training)
        if self.min_ops < need:
            raise ValueError(f"min_ops must be at least {need} for families "
                             f"{', '.join(families)}{' (training)' if self.training else ''}, "
                             f"got {self.min_ops}")
        if self.min_ops > self.max_ops:
            raise ValueError(f"min_ops ({self.min_ops}) must not exceed max_ops ({self.max_ops})")
        if self.max_ops > _MAX_OPS:
            raise ValueError(f"max_ops must be at most {_MAX_OPS}, got {self.max_ops}")


RECIPES = {
    name: SplitRecipe(name=name, count=count, min_ops=_REGAL_OPS[0], max_ops=_REGAL_OPS[1],
                      seed=_REGAL_SEEDS[name], families=("random",))
    for name, count in REGAL_SYNTHETIC.items()
}


def recipe_named(name: str, count: int | None = None) -> SplitRecipe:
    """A REGAL-like split ('train', 'valid', 'test'), optionally only its first `count`."""
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown; choose from {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    if count is not None:
        if count > recipe.count:
            raise ValueError(f"count must be at most {recipe.count} for recipe {name!r}, "
                             f"got {count}")
        recipe = dataclasses.replace(recipe, count=count)
    return recipe


def custom_recipe(count: int, min_ops: int, max_ops: int, seed: int, family: str = "random",
                  training: bool = False, name: str = "synth") -> SplitRecipe:
    return SplitRecipe(name=name, count=count, min_ops=min_ops, max_ops=max_ops, seed=seed,
                       families=_families(family), training=training)


def graph_at(recipe: SplitRecipe, index: int) -> ComputationGraph:
    """Graph `index` of `recipe`, rebuilt on its own (no other graph of the split is needed)."""
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
            or not 0 <= index < recipe.count:
        raise ValueError(f"index must be in 0..{recipe.count - 1}, got {index!r}")
    # the same stream SeedSequence(seed).spawn(count)[index] would give, without the others
    seq = np.random.SeedSequence(recipe.seed, spawn_key=(int(index),))
    rng = np.random.default_rng(seq)
    num_ops = int(rng.integers(recipe.min_ops, recipe.max_ops + 1))
    fams = recipe.families
    fam = fams[int(rng.integers(len(fams)))]
    return generate(fam, num_ops, int(rng.integers(2**63)), training=recipe.training)


def recipe_to_dict(recipe: SplitRecipe) -> dict:
    d = dataclasses.asdict(recipe)
    d["families"] = list(recipe.families)
    return d


def _regenerate_command(recipe: SplitRecipe) -> str:
    """The shortest way to rebuild `recipe`'s folder, for recipe.json."""
    if recipe.name in RECIPES and \
            dataclasses.replace(RECIPES[recipe.name], count=recipe.count) == recipe:
        extra = "" if recipe.count == RECIPES[recipe.name].count else f" --count {recipe.count}"
        return f"regal data synth --recipe {recipe.name}{extra} --out DIR"
    if len(recipe.families) == 1:
        family = recipe.families[0]
    elif set(recipe.families) == set(FAMILIES):
        family = "mixed"
    else:
        family = None
    if recipe.name != "synth" or family is None or recipe.families != _families(family):
        return "python -c: regal.synth.materialize(regal.synth.SplitRecipe(**recipe), DIR)"
    return (f"regal data synth --count {recipe.count} --min-ops {recipe.min_ops} "
            f"--max-ops {recipe.max_ops} --seed {recipe.seed} --family {family}"
            f"{' --training' if recipe.training else ''} --out DIR")


def materialize(recipe: SplitRecipe, out_dir, progress: bool = True) -> list[Path]:
    """Writes `{name}_{index:05d}.npz` for every graph of `recipe` into `out_dir`, plus
    `recipe.json`. Files already there are kept, so a killed run resumes where it stopped.
    Refuses a folder whose recipe.json describes a different recipe (other than its count).
    """
    from tqdm import tqdm

    from regal.files import write_json
    from regal.io import save_graph

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, but {out} is a file")
    meta_path = out / "recipe.json"
    mine = recipe_to_dict(recipe)
    if meta_path.exists():
        try:
            theirs = json.loads(meta_path.read_text()).get("recipe", {})
        except (json.JSONDecodeError, AttributeError):
            theirs = None
        same = isinstance(theirs, dict) and {k: v for k, v in theirs.items() if k != "count"} == \
            {k: v for k, v in mine.items() if k != "count"}
        if not same:
            raise ValueError(f"out folder {out} holds a different recipe (see {meta_path}); "
                             f"choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    write_json(meta_path, {
        "generator": f"regal.synth v{SYNTH_VERSION}",
        "recipe": mine,
        "files": f"{recipe.name}_{{index:05d}}.npz, index 0..{recipe.count - 1}",
        "regenerate": _regenerate_command(recipe),
        "one_graph": f"regal.synth.graph_at(regal.synth.SplitRecipe(**recipe), index)",
    }, indent=2, sort_keys=True)
    paths = []
    for i in tqdm(range(recipe.count), desc=recipe.name, unit="graph",
                  disable=not progress):
        path = out / f"{recipe.name}_{i:05d}.npz"
        if not path.exists():
            save_graph(graph_at(recipe, i), path)
        paths.append(path)
    return paths
