"""In-place forwarding (static mode, `forwarding=True`, the default) modelled as aliases.

TensorFlow's element-wise kernels (`FORWARDING_OPS`: BiasAdd, Relu, AddV2, Mul, ...) write
their output into an input's buffer when they hold its only reference
(`OpKernelContext::forward_input_or_allocate_output`). `with_forwarding` models this as
an alias: output 0 aliases the first input i that has the output's size, whose only
consumer is this op (read on one port), that is not itself an alias (Identity, Reshape,
a variable read) and not held elsewhere (a constant, a feed, a fetched tensor). In the
simulator (docs/design.md §4 and regal/sim/SIM_RULES.md) the output then costs 0 bytes on the op's device and keeps the
input's copy there alive; a transfer of it elsewhere allocates its own size. Evidence
(experiments/results/sim_vs_measured_cpu.md, CPU step-stats replay): without it the
model over-counted one activation per such op, inference CNN rows -24..-38%; with it
those rows are 0.0%.

It works on a ComputationGraph, not on TensorFlow ops, so `regal.measure` applies it to
graphs of its own too.
"""

from __future__ import annotations

import numpy as np

from regal.graph import ComputationGraph


# element-wise kernels that write their output into an input's buffer when TensorFlow holds
# the only reference to it (OpKernelContext::forward_input_or_allocate_output)
FORWARDING_OPS = frozenset({
    "BiasAdd", "Relu", "Relu6", "Elu", "Selu", "Sigmoid", "Tanh", "Softplus", "LeakyRelu",
    "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Abs", "AddV2", "Add", "Sub", "Mul",
    "RealDiv", "Maximum", "Minimum", "SquaredDifference", "ReluGrad", "Relu6Grad",
    "SigmoidGrad", "TanhGrad"})
# producers whose output buffer TensorFlow holds elsewhere too: never forwarded into
_HELD_PRODUCERS = frozenset({"ReadVariableOp", "Const", "HostConst", "Placeholder",
                             "PlaceholderWithDefault", "VarHandleOp", "VariableV2", "Variable"})


class _Ancestry:
    """`is_ancestor(u, v)` by per-node ancestor bitsets, built on first use (n^2/8 bytes)."""

    def __init__(self, graph: ComputationGraph):
        self.graph = graph
        self.bits = None

    def is_ancestor(self, u: int, v: int) -> bool:
        if self.bits is None:
            g = self.graph
            words = (g.num_nodes + 63) // 64
            bits = np.zeros((g.num_nodes, words), dtype=np.uint64)
            for w in g.topo_order.tolist():
                preds = g.predecessors(w)
                if len(preds):
                    row = np.bitwise_or.reduce(bits[preds], axis=0)
                    for p in preds.tolist():
                        row[p >> 6] |= np.uint64(1 << (p & 63))
                    bits[w] = row
            self.bits = bits
        return bool(self.bits[v, u >> 6] & np.uint64(1 << (u & 63)))


def with_forwarding(graph: ComputationGraph, held=()) -> ComputationGraph:
    """`graph` with TensorFlow's in-place buffer forwarding modelled as aliases.

    TensorFlow forwards an input buffer when the op holds the last reference to it. Output
    0 of a FORWARDING_OPS op aliases its first input that has the output's size, that this
    op is sure to consume last (every other consumer is an ancestor of this op, so it has
    finished under any schedule), on one port, that is not itself an alias and whose
    producer is not a variable read, constant or feed; `held` lists tensor ids that TF
    keeps referenced elsewhere (fetched tensors), which are never forwarded into.
    Idempotent; outputs that already alias something are left alone.
    """
    alias = graph.tensor_alias.copy()
    types = graph.op_types
    held = {int(t) for t in held}
    ancestry = _Ancestry(graph)
    for v in range(graph.num_nodes):
        if types[v] not in FORWARDING_OPS:
            continue
        out = int(graph.output_ptr[v])
        if graph.output_ptr[v + 1] - out < 1 or alias[out] != -1:
            continue
        inputs = graph.inputs(v).tolist()
        for t in inputs:
            producer = int(graph.tensor_producer[t])
            if (graph.tensor_size[t] != graph.tensor_size[out] or graph.tensor_alias[t] != -1
                    or t in held or types[producer] in _HELD_PRODUCERS
                    or inputs.count(t) != 1):
                continue
            others = [u for u in set(graph.consumers(t).tolist()) if u != v]
            if all(ancestry.is_ancestor(u, v) for u in others):
                alias[out] = t
                break
    alias.setflags(write=False)
    return graph._replace(tensor_alias=alias)
