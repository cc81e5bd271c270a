"""The starts of a climb: model-free constructions, a given solution, and the registry's
cheap heuristics (`HEURISTICS`), each scored once and counted in the budget."""

from __future__ import annotations

import numpy as np

from regal.decode import decode, encode, order_priority
from regal.graph import op_bytes
from regal.optimizers import Problem, roomiest_device
from regal.search.moves import rerank

__all__ = ["HEURISTICS", "PIPELINE_STARTS", "SEEDLESS", "default_heuristics", "balanced_runs", "initial_solutions", "given_starts",
           "heuristic_starts", "conforming"]

HEURISTICS = ("gp-dfs", "m-topo", "m-etf")
# the hand-made pipelines, starts too on a training step of micro-batches only: there they
# are what a person would write (1F1B, and the layer split in the framework's order) and a
# climb from them keeps their step (GPT-2 small, 4 micro-batches on 4 devices: the climbs
# ended 3.5% behind the plain split without them); on any other graph they are the layer
# split in the framework's order, far behind the other starts (0.98x one device's step)
PIPELINE_STARTS = ("layer-split-1f1b", "layer-split")
# heuristics whose answer does not depend on the seed: climbs of one problem may share them
SEEDLESS = ("m-topo", "m-etf") + PIPELINE_STARTS


def default_heuristics(graph) -> tuple:
    """The registry heuristics a climb starts from: `HEURISTICS`, and `PIPELINE_STARTS` on a
    training step of micro-batches (`regal.graph.has_microbatches`)."""
    from regal.graph import has_microbatches

    return HEURISTICS + PIPELINE_STARTS if has_microbatches(graph) else HEURISTICS


def conforming(graph, placement: np.ndarray) -> np.ndarray:
    """`placement` with colocation groups and pins respected (unchanged on a free graph)."""
    if not getattr(graph, "constrained", False):
        return placement
    from regal.decode import respect_colocation
    return respect_colocation(graph, placement)


def balanced_runs(graph, d: int) -> np.ndarray:
    """The topological order cut into `d` consecutive runs of near-equal memory (the bytes an
    op holds: persistent, temporary and its own outputs, `op_bytes`), then projected onto the
    graph's colocation groups and pins (`conforming`). A climb's first start, and the
    policy's reference candidates (`regal.policy.reference`)."""
    memory = op_bytes(graph)[graph.topo_order]
    cumulative = np.cumsum(memory)
    total = cumulative[-1] if len(cumulative) and cumulative[-1] > 0 else 1
    run = np.minimum((d * (cumulative - memory / 2) / total).astype(np.int64), d - 1)
    placement = np.empty(graph.num_nodes, np.int32)
    placement[graph.topo_order] = run
    return conforming(graph, placement)


def initial_solutions(problem: Problem) -> np.ndarray:
    """Chromosomes of the model-free starts: memory-balanced topological runs, and every op
    on the roomiest device (`regal.optimizers.roomiest_device`)."""
    graph, d = problem.graph, problem.devices.count
    priority = order_priority(graph.topo_order)
    runs = encode(balanced_runs(graph, d), priority, priority, d)
    one = np.full(graph.num_nodes, roomiest_device(problem), np.int32)
    single = encode(conforming(graph, one), priority, priority, d)
    return np.stack([runs, single]) if d > 1 else single[None, :]


def given_starts(problem: Problem, initial) -> np.ndarray:
    """Solutions or chromosomes -> [m, genes] keys that respect the colocation groups."""
    from regal.optimizers import Solution

    items = [initial] if isinstance(initial, Solution) else list(initial) \
        if isinstance(initial, (list, tuple)) else list(np.atleast_2d(initial))
    graph, d = problem.graph, problem.devices.count
    rows = []
    for item in items:
        if isinstance(item, Solution):
            placement, priority, transfer = item.placement, item.priority, item.transfer_priority
        else:
            placement, priority, transfer = decode(np.asarray(item, np.float64), graph, d)
        rows.append(encode(conforming(graph, np.asarray(placement, np.int32)),
                           rerank(priority), rerank(transfer), d))
    return np.stack(rows)


def heuristic_starts(problem: Problem, names, budget: int, seed: int, etf_max_ops: int,
                      should_stop=None, known: dict | None = None):
    """(chromosome, Solution, evaluations, name) of each registry heuristic within the budget
    (none more once `should_stop()` says so: a time limit ends the starts too).

    The heuristic's answer is scored by the registry; when the colocation projection changed
    its placement, the caller scores the projected chromosome itself."""
    from regal.optimizers import solve as run_method

    graph, d = problem.graph, problem.devices.count
    out = []
    for name in names:
        if name == "m-etf" and graph.num_nodes > etf_max_ops:
            continue
        if budget < 1 or (should_stop is not None and should_stop()):
            break
        if known is not None and name in SEEDLESS and name in known:
            found = known[name]           # the same answer whatever the seed: not run again
        else:
            found = run_method(name, problem, 1, seed)
            if known is not None and name in SEEDLESS:
                known[name] = found
        used = max(1, int(found.evaluations))
        if used > budget:
            break
        budget -= used
        placement = conforming(graph, np.asarray(found.placement, np.int32))
        keys = encode(placement, rerank(found.priority), rerank(found.transfer_priority), d)
        out.append((keys, found, used, name))
    return out

