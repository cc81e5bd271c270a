"""What the step builder and both conversions need to know of TensorFlow ops: which op types
are variables, views of their input, free bookkeeping, control flow or function calls, and a
tensor's static shape and bytes."""

from __future__ import annotations

import math

import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.graph import GraphError


_VARIABLE_OPS = {"VarHandleOp", "VariableV2", "Variable"}
_FORWARD_OPS = {"Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "Snapshot",
                "PreventGradient", "EnsureShape", "ReadVariableOp", "CheckNumerics"}
_FREE_OPS = _VARIABLE_OPS | _FORWARD_OPS | {
    "Const", "NoOp", "Placeholder", "PlaceholderWithDefault", "Shape", "ShapeN", "Size",
    "Rank", "IdentityN", "HostConst", "ZerosLike", "OnesLike", "BroadcastGradientArgs"}
_CONTROL_FLOW_OPS = {"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
                     "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}
_CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
# opaque scratch outputs whose shape TF leaves unknown: counted as 0 bytes
_OPAQUE_OUTPUTS = {"FusedBatchNormV3": {5}, "FusedBatchNormGradV3": {3, 4}}


def _dims(shape) -> list[int] | None:
    if shape.rank is None:
        return None
    dims = shape.as_list()
    return None if any(d is None for d in dims) else dims


def _numel(dims) -> int:
    return int(math.prod(dims)) if dims is not None else 0


def _tensor_bytes(t) -> int | None:
    """Bytes of a dense tensor; 0 for handles and refs; None when the shape is unknown."""
    dtype = t.dtype
    if dtype._is_ref_dtype or dtype in (tf.resource, tf.variant):  # noqa: SLF001
        return 0
    dims = _dims(t.shape)
    if dims is None:
        return None
    item = 8 if dtype == tf.string else dtype.size
    return _numel(dims) * item


def _variable_bytes(op) -> int:
    shape = tf.TensorShape(op.get_attr("shape"))
    dims = _dims(shape)
    if dims is None:
        raise GraphError(f"tensor {op.name}:0: variable of unknown shape {shape}")
    return _numel(dims) * tf.as_dtype(op.get_attr("dtype")).base_dtype.size
