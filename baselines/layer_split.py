"""layer-split baseline: contiguous stages of the layer sequence, one per device, balanced by
memory (or compute), ops in the framework's order: the split a person makes by hand.

Why: before any placer, this is what people do to fit a model on several GPUs (pipeline-style
"put layers 0-11 on GPU 0 and 12-23 on GPU 1"), so a method that cannot beat it is not worth
running. It never calls the model except to score its answer.

Layers. An op's layer is read from its name (`layer_keys`): a leading gradient scope
(`gradients`, `gradients_N`, `gradient_tape`, `grad`) marks a backward op and is dropped, and
so is `_grad` at the end of its layer's name (`gradients/Mean_grad/...` is the backward of
`Mean`); an optimizer scope ending in `update_X` (`train_op/update_X/...`,
`Adam/update_X/...`, or a leading `update`) marks an optimizer op and leaves `X/...`. The
scopes that enclose the model (a scope holding more than half of the ops, repeated inwards:
`model/`, `resnet50/`) are dropped, and the next name component is the layer:
`model/dense_1/MatMul`, `gradients/model/dense_1/MatMul_grad/...`,
`Adam/update_model/dense_1/kernel/...` and the variable `dense_1/kernel` all belong to layer
`dense_1`. Names without scopes (`node_17`) make every op its own layer.

The layer sequence is the topological order of the layers' entries (`layer_sequence`): a
layer's entry is its first forward op that reads another layer's op (one that has inputs
of its own when there is one, not a shared constant), so neither its variables nor the
constants in its scope, sources that a breadth-first topological order lists first, pull
it forward; a layer without one (the first) sits at its first forward op with inputs. A
name whose forward ops are all sources (the graph's input, a scope of variables only) or
that no forward op carries (`gradients/AddN_5`) is no layer: its ops join the layer of
their latest predecessor in the topological order, or without one of their earliest
successor (an input or a variable goes with the op that reads it). So a graph without
scopes is cut along its topological order, each source with its first reader. A layer's
weight is the memory (`regal.graph.op_bytes`) or compute cost of all its ops, forward,
backward and optimizer.

Stages. The sequence is cut into `d` contiguous stages, stage k on device k, minimising the
heaviest stage (`linear_partition`, exact: a dynamic program over cut positions whose best
cut is found by bisection, O(d L log L) for L layers). Under memory limits that rank
solutions (`regal.sim.ranking_limits`) and that this answer misses, the cut is made again
minimising the heaviest stage's memory relative to its device's limit, and the better answer
kept (`regal.optimizers.limit_free_first`, as m-topo; 2 evaluations then, else 1).
Colocation groups whose members fall in several stages and pins are projected by
`regal.decode.respect_colocation` (a group goes to its pin, else where most of its bytes
are, ties to its leader's device).

Order (`schedule`): the framework's, op id order (an earlier op runs first among the ready
ops of a device, and sends its tensors first), or, for a training step of K micro-batches
(imported with `--microbatches K`: each micro-batch's forward and backward ops under a
`microbatchM/` scope, the summed gradients and the update outside), one of the hand-made
pipeline schedules, per stage: `gpipe` (every micro-batch's forward, then every backward,
Huang et al. 2019) or `1f1b` (PipeDream-flush, Narayanan et al. 2021: stage s of D runs
min(D-1-s, K) forwards, then one forward and one backward in turn, then the remaining
backwards); on a graph without micro-batches both are the framework's order. The
simulator is a list scheduler: a device never waits while one of its ops
is ready, so a schedule is a priority among ready ops, not a wait. Under 1F1B a stage runs
the next forward when the backward it would take is not ready yet, which holds more
activations than a strict 1F1B does (and never a longer step). Ops outside the
micro-batches run first (variables, the input's split) or, when they follow one of the
micro-batches' ops, last (gradient sums, the update), each group in op id order.
"""

from __future__ import annotations

import re

import numpy as np

from regal.decode import order_priority, respect_colocation
from regal.graph import MICROBATCH_SCOPE, microbatch_of, op_bytes
from regal.optimizers import Problem, Solution, check_budget, limit_free_first, score

__all__ = ["solve", "solve_compute", "solve_gpipe", "solve_1f1b", "layer_keys",
           "layer_sequence", "linear_partition", "place", "microbatch_of", "pipeline_order",
           "BALANCES", "SCHEDULES"]

BALANCES = ("memory", "compute")
SCHEDULES = ("framework", "gpipe", "1f1b")

_BACKWARD_SCOPE = re.compile(r"(gradients(_\d+)?|gradient_tape|grad)")
_FORWARD, _BACKWARD, _OPTIMIZER = 0, 1, 2


def _stripped(name: str) -> tuple[list[str], int]:
    """An op name's components without its gradient or optimizer scope, and its kind."""
    parts = [p for p in str(name).split("/") if p]
    if len(parts) > 1 and MICROBATCH_SCOPE.fullmatch(parts[0]):   # one micro-batch's op
        parts = parts[1:]
    if len(parts) > 1 and _BACKWARD_SCOPE.fullmatch(parts[0]):
        parts = parts[1:]
        if len(parts) > 1 and MICROBATCH_SCOPE.fullmatch(parts[0]):   # gradients/microbatchM/
            parts = parts[1:]
        return parts, _BACKWARD
    if len(parts) > 1 and parts[0] == "update":   # synthetic training graphs: update/X
        return parts[1:], _OPTIMIZER
    for i, part in enumerate(parts[:3]):   # update_X/..., train_op/update_X/..., a/b/update_X
        if part.startswith("update_") and len(part) > len("update_") and i + 1 < len(parts):
            return [part[len("update_"):]] + parts[i + 1:], _OPTIMIZER
    return parts, _FORWARD


def _model_scopes(paths: list[list[str]]) -> tuple[str, ...]:
    """The scopes that enclose the model: from the top, while one scope holds more than half
    of all ops, that scope (a wrapper, `model/`, or the part of the model most ops lie in;
    cutting inside it only makes finer layers)."""
    n = len(paths)
    prefix: tuple[str, ...] = ()
    inside = list(range(n))
    while True:
        depth = len(prefix)
        counts: dict[str, int] = {}
        for i in inside:
            if len(paths[i]) > depth + 1:   # op i lies in a scope at this depth
                counts[paths[i][depth]] = counts.get(paths[i][depth], 0) + 1
        if not counts:
            return prefix
        top = max(counts, key=lambda c: (counts[c], c))
        if 2 * counts[top] <= n:
            return prefix
        prefix = prefix + (top,)
        inside = [i for i in inside if len(paths[i]) > depth + 1 and paths[i][depth] == top]


def layer_keys(names) -> tuple[list[str], np.ndarray]:
    """(layer name of every op, kind of every op: 0 forward, 1 backward, 2 optimizer); rules
    in the module's docstring."""
    stripped = [_stripped(name) for name in names]
    paths = [p if p else [str(name)] for (p, _), name in zip(stripped, names)]
    kinds = np.asarray([k for _, k in stripped], np.int8)
    model = _model_scopes(paths)
    keys = []
    for path, kind in zip(paths, kinds):
        i = 0
        while i < len(model) and i < len(path) - 1 and path[i] == model[i]:
            i += 1
        key = path[i]
        if kind == _BACKWARD and key.endswith("_grad") and len(key) > len("_grad"):
            key = key[:-len("_grad")]
        keys.append(key)
    return keys, kinds


def layer_sequence(graph) -> tuple[np.ndarray, int]:
    """(layer of every op, number of layers), layers numbered in their sequence (module
    docstring)."""
    n = graph.num_nodes
    keys, kinds = layer_keys(graph.names.tolist())
    names, key_id = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    key_id = key_id.reshape(-1)
    u = len(names)
    rank = np.empty(n, np.int64)
    rank[graph.topo_order] = np.arange(n)
    indegree = np.diff(graph.pred_ptr)
    forward = kinds == _FORWARD
    if not (forward & (indegree > 0)).any():   # nothing reads as the forward pass:
        forward = np.ones(n, bool)               # every name is a layer, sources too
        inner = forward
    else:
        inner = forward & (indegree > 0)
    # a layer's entry: its first forward op that reads another name's op; one that reads an
    # op with inputs of its own first, a source (the graph's input) else; a layer without
    # one sits at its first forward op with inputs
    dst = np.repeat(np.arange(n), indegree)
    src = np.asarray(graph.pred, np.int64)
    cross = forward[dst] & (key_id[src] != key_id[dst])
    position = np.full(u, np.inf)
    for members in (dst[cross & (indegree[src] > 0)], dst[cross], np.flatnonzero(inner)):
        found = np.full(u, n, np.int64)
        np.minimum.at(found, key_id[members], rank[members])
        position = np.where(np.isinf(position) & (found < n), found, position)
    order = np.argsort(position, kind="stable")   # layers in sequence, the rest last
    count = int(np.isfinite(position).sum())
    layer_of_key = np.full(u, -1, np.int64)
    layer_of_key[order[:count]] = np.arange(count)
    layer = layer_of_key[key_id]
    return _orphans_join(graph, layer, rank), max(count, 1)


def _orphans_join(graph, layer: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """`layer` with each op of no layer (-1) in the layer of its latest predecessor in the
    topological order that has one; else of its earliest successor that has one; else 0."""
    if not (layer < 0).any():
        return layer
    layer = layer.copy()
    orphans = [int(v) for v in graph.topo_order if layer[v] < 0]
    for v in orphans:
        preds = graph.predecessors(v)
        preds = preds[layer[preds] >= 0]
        if len(preds):
            layer[v] = layer[preds[np.argmax(rank[preds])]]
    for v in reversed(orphans):
        if layer[v] < 0:
            succs = graph.successors(v)
            succs = succs[layer[succs] >= 0]
            layer[v] = layer[succs[np.argmin(rank[succs])]] if len(succs) else 0
    return layer


def linear_partition(weights, d: int, capacity=None) -> np.ndarray:
    """Stage (0..d-1) of each item of the sequence `weights`: contiguous stages in order,
    minimising the heaviest stage's weight, or, given `capacity`, its weight divided by its
    stage's capacity (a weight > 0 over capacity 0 is infinite). Exact: a dynamic program
    over the last cut, found by bisection (the earlier stages' best only grows with the
    cut, the last stage's weight only shrinks). Without capacities every one of the first
    min(d, items) stages holds an item (splitting a stage never makes the heaviest one
    heavier); with them a stage may stay empty. Among equal answers, the later cut: the
    later stages take less (so an idle device is a last one)."""
    w = np.asarray(weights, np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights: expected finite non-negative numbers")
    if isinstance(d, bool) or int(d) != d or d < 1:
        raise ValueError(f"d: expected a positive number of stages, got {d!r}")
    d, L = int(d), len(w)
    cap = np.ones(d) if capacity is None else np.asarray(capacity, np.float64)
    if cap.shape != (d,) or not np.all(np.isfinite(cap)) or np.any(cap < 0):
        raise ValueError(f"capacity: expected {d} finite non-negative numbers")
    stage = np.zeros(L, np.int64)
    nonempty = capacity is None
    stages = min(d, L) if nonempty else d
    if L == 0 or stages == 1:
        return stage
    S = np.concatenate([[0.0], np.cumsum(w)])
    js = np.arange(L + 1)

    def load(k, i, j):   # stage k holding items i..j-1
        span = S[j] - S[i]
        if cap[k] == 0:
            return np.where(span > 0, np.inf, 0.0)
        return span / cap[k]

    # dp[j]: the best heaviest stage of items 0..j-1 on stages 0..k (inf: impossible)
    dp = load(0, np.zeros(L + 1, np.int64), js)
    if nonempty:
        dp[0] = np.inf
    choice = np.zeros((stages, L + 1), np.int64)
    for k in range(1, stages):
        prev = dp
        lo = k if nonempty else 0                  # the earliest cut stage k may start at
        hi = np.maximum(js - 1, lo) if nonempty else js   # the latest
        valid = js >= lo
        if cap[k] == 0:
            cross = np.searchsorted(S, S, "left")  # the earliest cut with nothing after it
        else:   # the first cut where the earlier stages weigh at least the last one
            h = np.maximum.accumulate(np.where(valid, cap[k] * prev + S, -np.inf))
            cross = np.searchsorted(h, S, "left")
        rising = np.maximum.accumulate(np.where(valid, prev, -np.inf))
        latest = np.searchsorted(rising, prev[np.clip(cross, lo, L)], "right") - 1
        best_value = np.full(L + 1, np.inf)
        best_cut = np.full(L + 1, -1, np.int64)
        for cand in (cross - 1, cross, cross + 1, latest):
            i = np.clip(cand, lo, hi)
            value = np.maximum(prev[i], load(k, i, js))
            better = (value < best_value) | ((value == best_value) & (i > best_cut))
            best_value = np.where(better, value, best_value)
            best_cut = np.where(better, i, best_cut)
        if nonempty:
            best_value[js <= k] = np.inf
        dp, choice[k] = best_value, best_cut
    j = L
    for k in range(stages - 1, 0, -1):
        i = int(choice[k, j])
        stage[i:j] = k
        j = i
    return stage


def place(graph, d: int, balance: str = "memory", limits=None) -> tuple[np.ndarray, dict]:
    """(device of every op before colocation is projected, what the split was): stages
    balanced by `balance`; given `limits`, by memory relative to each device's limit."""
    if balance not in BALANCES:
        raise ValueError(f"balance: expected one of {', '.join(BALANCES)}, got {balance!r}")
    layer, count = layer_sequence(graph)
    if limits is not None or balance == "memory":
        per_op = op_bytes(graph).astype(np.float64)
    else:
        per_op = np.asarray(graph.compute_cost, np.float64)
    weights = np.bincount(layer, weights=per_op, minlength=count)
    stage = linear_partition(weights, d, None if limits is None else limits)
    placement = stage[layer].astype(np.int32)
    info = {"balance": balance if limits is None else "memory/limits", "layers": count,
            "stage_layers": np.bincount(stage, minlength=d).tolist(),
            "stage_weights": np.bincount(stage, weights=weights, minlength=d).tolist()}
    return placement, info


def _stage_sequence(schedule: str, stage: int, stages: int, count: int) -> list[tuple]:
    """A stage's (kind, micro-batch) slots in its schedule's order."""
    forwards = [(_FORWARD, m) for m in range(count)]
    backwards = [(_BACKWARD, m) for m in range(count)]
    if schedule == "gpipe":
        return forwards + backwards
    warm = min(stages - 1 - stage, count)
    sequence = forwards[:warm]
    for j in range(count - warm):
        sequence += [forwards[warm + j], backwards[j]]
    return sequence + backwards[count - warm:]


def pipeline_order(graph, placement: np.ndarray, stages: int, schedule: str) -> np.ndarray:
    """The op order (a permutation) that runs each stage's micro-batches in `schedule`'s
    order (module docstring); op id order within a slot and without micro-batches."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    n = graph.num_nodes
    if schedule == "framework":
        return np.arange(n)
    names = graph.names.tolist()
    batch = microbatch_of(names)
    count = int(batch.max()) + 1
    if count < 1:   # one batch: every schedule is the framework's order
        return np.arange(n)
    kinds = layer_keys(names)[1]
    # outside the micro-batches: what follows one of their ops (gradient sums, the update)
    # runs after them, the rest (variables, the input's split) before
    after = np.zeros(n, bool)
    ptr, pred = graph.pred_ptr, graph.pred
    for v in graph.topo_order:
        sources = pred[ptr[v]:ptr[v + 1]]
        after[v] = bool(len(sources)) and bool(((batch[sources] >= 0) | after[sources]).any())
    first, after_backward, last = -1, 2 * count, 2 * count + 1
    slot = np.where(kinds == _OPTIMIZER, last, np.where(after, after_backward, first))
    position = {k: {pair: i for i, pair in enumerate(_stage_sequence(schedule, k, stages, count))}
                for k in range(stages)}
    inside = np.flatnonzero(batch >= 0)
    for v in inside:
        kind = _BACKWARD if kinds[v] == _BACKWARD else _FORWARD
        slot[v] = position[int(placement[v]) % stages][(kind, int(batch[v]))]
    return np.lexsort((np.arange(n), slot))


def solve(problem: Problem, budget: int, seed: int = 0, *, balance: str = "memory",
          schedule: str = "framework", progress=None) -> Solution:
    """Splits, orders by op id (or by a pipeline `schedule`), scores once; under limits it
    misses, once more with stages balanced against the limits
    (`regal.optimizers.limit_free_first`; `seed` is unused)."""
    check_budget(budget)
    if balance not in BALANCES:
        raise ValueError(f"balance: expected one of {', '.join(BALANCES)}, got {balance!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    graph = problem.graph
    count = problem.devices.count

    def placed(limits) -> dict:
        placement, info = place(graph, count, balance, limits)
        placement = respect_colocation(graph, placement)
        priority = order_priority(pipeline_order(graph, placement, count, schedule))
        return dict(score(problem, placement, priority, priority),
                    extra=dict(info, schedule=schedule))
    found, used = limit_free_first(problem, budget, placed)
    name = "layer-split" if balance == "memory" else "layer-split-compute"
    if schedule != "framework":
        name = f"layer-split-{schedule}"
    return Solution(**found, evaluations=used, method=name, seed=seed)


def solve_gpipe(problem: Problem, budget: int, seed: int = 0, progress=None) -> Solution:
    """`solve` with GPipe's schedule over the micro-batches (`layer-split-gpipe`)."""
    return solve(problem, budget, seed, schedule="gpipe")


def solve_1f1b(problem: Problem, budget: int, seed: int = 0, progress=None) -> Solution:
    """`solve` with the one-forward-one-backward schedule (`layer-split-1f1b`)."""
    return solve(problem, budget, seed, schedule="1f1b")


def solve_compute(problem: Problem, budget: int, seed: int = 0, progress=None) -> Solution:
    """`solve` with stages balanced by compute cost (the `layer-split-compute` method)."""
    return solve(problem, budget, seed, balance="compute")
