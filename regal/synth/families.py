"""The graph families: REGAL-like random DAGs and network-like graphs (CNN, inception,
transformer) built with a small shape-tracking builder. Each is a pure function of a seed.

Units: random DAGs use REGAL's abstract scale (sizes/costs ~50). The network-like families
use bytes (float32 tensors from shapes) and microseconds (a roofline-style estimate), like the
graphs imported from TensorFlow. Every size, memory and cost is a non-negative integer, as in
a CostGraphDef.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from regal.graph import ComputationGraph, build_graph
from regal.graph_builder import GraphBuilder

__all__ = ["random_dag", "layered_cnn", "inception_like", "transformer_like"]

_MAX_OPS = 1_000_000


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
