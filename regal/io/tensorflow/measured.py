"""Run mode (`run=True`): one step executed, and TensorFlow's measured cost graph of it.

The graph is executed in a `tf.compat.v1.Session` with `build_cost_model=1` and a full
trace, and TensorFlow's own CostGraphDef of that step (real output sizes, measured op
times) is converted by `regal.io.costgraph`. Run mode initialises every variable randomly
(timings do not depend on weight values) and, unless `grappler=True`, disables graph
rewriting so the measured ops keep the names and structure of the static graph (oneDNN's
CPU rewrite is off too, see the package's `__init__`). TensorFlow's cost graph reports no
persistent memory for resource variables, so each variable's bytes are added to its first
reader exactly as in static mode (`convert`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf  # loaded by the package's __init__, through regal.tfenv

from regal.graph import ComputationGraph, GraphError
from regal.io.tensorflow.convert import _variable_owners, colocation_pairs
from regal.io.tensorflow.step import _Step


def _random_value(rng: np.random.Generator, shape, dtype: tf.DType) -> np.ndarray:
    if dtype.is_floating:
        return (0.05 * rng.standard_normal(shape)).astype(dtype.as_numpy_dtype)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        return rng.integers(0, 2, size=shape).astype(dtype.as_numpy_dtype)
    raise GraphError(f"cannot make a random feed of dtype {dtype.name}")


def _run_cost_graph(step: _Step, ops: list, *, seed: int, grappler: bool,
                    warmup_runs: int) -> ComputationGraph:
    from regal.io.costgraph import parse_costgraph_bytes

    rng = np.random.default_rng(seed)
    graph = step.graph
    with graph.as_default():
        tf.compat.v1.set_random_seed(seed)
        inits = []
        for op in ops:
            if op.type == "VarHandleOp":
                dtype = tf.as_dtype(op.get_attr("dtype"))
                shape = tf.TensorShape(op.get_attr("shape")).as_list()
                inits.append(tf.raw_ops.AssignVariableOp(
                    resource=op.outputs[0], value=tf.constant(_random_value(rng, shape, dtype))))
            elif op.type in ("VariableV2", "Variable"):
                dtype = tf.as_dtype(op.get_attr("dtype")).base_dtype
                shape = tf.TensorShape(op.get_attr("shape")).as_list()
                inits.append(tf.compat.v1.assign(op.outputs[0],
                                                 _random_value(rng, shape, dtype)))
        init = tf.group(*inits)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.build_cost_model = 1
    config.graph_options.build_cost_model_after = warmup_runs  # measure warm steps only
    if not grappler:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
        config.graph_options.optimizer_options.do_constant_folding = False
        config.graph_options.optimizer_options.do_common_subexpression_elimination = False
        config.graph_options.optimizer_options.do_function_inlining = False
    feed = {ph: _random_value(rng, ph.shape.as_list(), ph.dtype) for ph in step.feeds}
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        for _ in range(warmup_runs):
            sess.run(step.fetches, feed)
        sess.run(step.fetches, feed, options=options, run_metadata=metadata)
    if not metadata.cost_graph.node:
        raise GraphError("the traced run returned an empty cost graph")
    graph = parse_costgraph_bytes(metadata.cost_graph.SerializeToString(), source="cost graph")
    return _with_variable_memory(graph, ops)


def _with_variable_memory(graph: ComputationGraph, ops: list) -> ComputationGraph:
    """Charges each variable's bytes to its first reader (or itself) in a measured graph,
    and gives it the colocation groups of the ops it shares by name with the step."""
    from regal.graph import group_leaders

    index = {name: i for i, name in enumerate(graph.names.tolist())}
    persistent = graph.persistent_memory.copy()
    for owner, nbytes in _variable_owners(ops).items():
        if owner in index:
            persistent[index[owner]] += nbytes
    persistent.setflags(write=False)
    pairs = [(index[ops[a].name], index[ops[b].name]) for a, b in colocation_pairs(ops)
             if ops[a].name in index and ops[b].name in index]
    leaders = group_leaders(graph.num_nodes, pairs)
    leaders.setflags(write=False)
    return graph._replace(persistent_memory=persistent, colocation=leaders)
