"""The static compute-cost model: an op's time from a FLOP estimate under a roofline.

Its own module because it is a model with its own constants, read by `convert` for every op
that is not free bookkeeping; the tests check its numbers against hand-computed FLOPs.
"""

from __future__ import annotations

import math

import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.io.tensorflow.ops import _dims, _numel


# Static cost model: cost_us = LAUNCH_US + max(flops / FLOPS_PER_US, bytes / BYTES_PER_US),
# bytes = inputs + outputs read and written. The constants describe a V100-class GPU at
# realistic (not peak) fp32 efficiency: 10 TFLOP/s sustained, 500 GB/s effective bandwidth,
# and a 1 µs launch overhead. Bookkeeping ops (constants, handles, forwarding, shapes) cost 0.
# They live in regal.sim.speeds (no TensorFlow there), which times ops on other devices.
from regal.sim.speeds import BYTES_PER_US, FLOPS_PER_US, LAUNCH_US  # noqa: E402,F401


def _in_dims(op, i: int) -> list[int]:
    dims = _dims(op.inputs[i].shape) if i < len(op.inputs) else None
    return dims if dims is not None else [0]


def _einsum_flops(op, out_numel: int) -> int:
    equation = op.get_attr("equation").decode() if isinstance(
        op.get_attr("equation"), bytes) else op.get_attr("equation")
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    size = {}
    for sub, t in zip(lhs.split(","), op.inputs):
        dims = _dims(t.shape) or []
        head, _, tail = sub.partition("...")
        for letter, d in zip(head, dims):
            size[letter] = d
        for letter, d in zip(tail, dims[len(dims) - len(tail):] if tail else []):
            size[letter] = d
    contracted = set(lhs) - set(rhs) - {",", "."}
    return 2 * out_numel * int(math.prod(size.get(c, 1) for c in contracted))


def _flops(op, out_dims: list) -> int:
    """FLOP estimate: 2mnk for products and convolutions, ~numel for everything else."""
    kind = op.type
    out = out_dims[0] if out_dims else None
    out_numel = _numel(out) if out is not None else 0
    if kind == "MatMul":
        a = _in_dims(op, 0)
        k = a[0] if op.get_attr("transpose_a") else a[-1]
        return 2 * out_numel * k
    if kind in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        a = _in_dims(op, 0)
        k = a[-2] if op.get_attr("adj_x") else a[-1]
        return 2 * out_numel * k
    if kind == "Einsum":
        return _einsum_flops(op, out_numel)
    if kind in ("Conv2D", "Conv3D"):
        return 2 * out_numel * _numel(_in_dims(op, 1)[:-1])
    if kind in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        return 2 * _numel(_in_dims(op, 2)) * _numel(_in_dims(op, 1)[:-1])
    if kind in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2"):
        return 2 * _numel(_in_dims(op, 2)) * _numel((out or [0])[:-1])
    if kind == "DepthwiseConv2dNative":
        return 2 * out_numel * _numel(_in_dims(op, 1)[:2])
    if kind == "DepthwiseConv2dNativeBackpropInput":
        return 2 * _numel(_in_dims(op, 2)) * _numel(_in_dims(op, 1)[:2])
    if kind == "DepthwiseConv2dNativeBackpropFilter":
        return 2 * _numel(_in_dims(op, 2)) * _numel((out or [0])[:2])
    sizes = [_numel(d) for d in out_dims if d is not None]
    sizes += [_numel(_dims(t.shape)) for t in op.inputs
              if t.dtype not in (tf.resource, tf.variant) and _dims(t.shape) is not None]
    return max(sizes, default=0)
