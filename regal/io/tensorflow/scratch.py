"""Kernel scratch: the temporary memory an op's kernel holds while it runs (static mode,
`kernel_scratch=True`, the default).

`temporary_memory` is 0 for every op except the two conv gradients, whose CPU kernels
(Conv2DCustomBackpropFilter/InputOp) allocate an im2col buffer of `shard` images sized to a
30 MiB working set. With P = output rows x cols, F = filter rows x cols x in depth,
O = out depth, work = P F + P O + F O and W = 30 MiB / itemsize:
filter gradient: shard = ceil(W / work), scratch = shard x P F x itemsize
(`conv2d_backprop_filter_scratch`; independent of the batch, about 10-30 MB);
input gradient: the same, except shard = 1 when the batch is 1 or
work / threads >= 256 KiB / itemsize (`conv2d_backprop_input_scratch`, threads =
SCRATCH_CPU_THREADS = 2). Evidence, TensorFlow 2.21 CPU, oneDNN off, each op's allocator
peak minus its outputs in a traced run: the filter formula matched to the byte for all
35 Conv2DBackpropFilter ops of a MobileNetV2 training step and 8 hand-made shapes, the
input formula for all 24 distinct Conv2DBackpropInput shapes of MobileNetV2, a small
CNN and a ResNet-style net (1x1 and 3x3 filters, stride 1 and 2, 3..1280 channels,
1.8 KB..26 MB). Forward Conv2D takes 0 tracked bytes (Eigen's packing buffers bypass
TF's allocator); the depthwise family and FusedBatchNormGradV3 took 64 B..60 KB, so
those stay 0. On a GPU the analogue is cuDNN's workspace, which depends on the
algorithm cuDNN picks and is not modelled.
"""

from __future__ import annotations

from regal.io.tensorflow.ops import _dims


# TF's CPU conv-gradient kernels size their im2col buffer to this working set (its L3
# target); Conv2DBackpropInput packs one image at a time instead when the batch is 1 or a
# thread's share of one image's work reaches CONV_L2_BYTES, which depends on the number
# of TensorFlow's CPU worker threads: SCRATCH_CPU_THREADS (the cores of the machine that
# measured it; fixed, so a graph's fingerprint does not depend on where it was imported)
CONV_WORKING_SET_BYTES = 30 << 20
CONV_L2_BYTES = 256 << 10
SCRATCH_CPU_THREADS = 2


def conv2d_backprop_filter_scratch(out_rows: int, out_cols: int, filter_rows: int,
                                   filter_cols: int, in_depth: int, out_depth: int,
                                   itemsize: int = 4) -> int:
    """Bytes of the im2col buffer TensorFlow's CPU Conv2DBackpropFilter allocates.

    The kernel packs `shard` images' patches at once, `shard` chosen so that one shard's
    matmul operands fill a 30 MiB working set (its L3-cache target): hence the buffer does
    not grow with the batch. Formula and evidence: module docstring.
    """
    patches = out_rows * out_cols
    filter_total = filter_rows * filter_cols * in_depth
    col = patches * filter_total
    work = col + patches * out_depth + filter_total * out_depth
    if work <= 0:
        return 0
    working_set = CONV_WORKING_SET_BYTES // itemsize
    shard = -(-working_set // work)  # ceil
    return int(shard * col * itemsize)


def conv2d_backprop_input_scratch(batch: int, out_rows: int, out_cols: int,
                                  filter_rows: int, filter_cols: int, in_depth: int,
                                  out_depth: int, itemsize: int = 4,
                                  threads: int = SCRATCH_CPU_THREADS) -> int:
    """Bytes of the col2im buffer TensorFlow's CPU Conv2DBackpropInput allocates.

    Same working-set sharding as the filter gradient (operands A = P O, B = F O, C = P F),
    except that one image at a time is packed (shard = 1) when the batch is 1 or one
    image's work split over `threads` reaches the L2 size: then the buffer is C.
    """
    patches = out_rows * out_cols
    filter_total = filter_rows * filter_cols * in_depth
    col = patches * filter_total
    work = patches * out_depth + filter_total * out_depth + col
    if work <= 0:
        return 0
    if batch == 1 or work // max(threads, 1) >= CONV_L2_BYTES // itemsize:
        return int(col * itemsize)
    shard = -(-(CONV_WORKING_SET_BYTES // itemsize) // work)
    return int(shard * col * itemsize)


def _kernel_scratch(op) -> int:
    """Temporary bytes the op's kernel holds while it runs (see the module docstring)."""
    if op.type not in ("Conv2DBackpropFilter", "Conv2DBackpropInput"):
        return 0
    grad = _dims(op.inputs[2].shape)          # out_backprop
    filt = _dims((op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]).shape)
    if grad is None or filt is None or len(grad) != 4 or len(filt) != 4:
        return 0                              # [rows, cols, in depth, out depth]
    fmt = op.get_attr("data_format")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    rows, cols = (grad[2], grad[3]) if fmt == "NCHW" else (grad[1], grad[2])
    item = op.outputs[0].dtype.size
    if op.type == "Conv2DBackpropFilter":
        return conv2d_backprop_filter_scratch(rows, cols, *filt, itemsize=item)
    return conv2d_backprop_input_scratch(grad[0], rows, cols, *filt, itemsize=item)
