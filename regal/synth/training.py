"""Training steps of a forward graph (backward ops and optimizer updates added), and
augmentation: the same graph with its costs and sizes jittered."""

from __future__ import annotations

import numpy as np

from regal.graph import ComputationGraph, build_graph
from regal.synth.families import _rng

__all__ = ["training_graph", "augment"]


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

    return graph._replace(  # jittered costs no longer follow any FLOP counts: dropped
        tensor_size=ro(size), op_flops=None, op_bytes=None,
        compute_cost=ro(jitter(graph.compute_cost).astype(np.float64)),
        temporary_memory=ro(jitter(graph.temporary_memory).astype(np.int64)),
        persistent_memory=ro(jitter(graph.persistent_memory).astype(np.int64)),
    )
