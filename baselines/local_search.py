"""Local search baseline: batched hill climbing over device moves and priority swaps.

Why: the REGAL paper's "local search" baseline — how far plain neighbourhood search gets with
the same evaluation budget as the BRKGA. A solution is a chromosome (DESIGN §5) with a one-hot
affinity block and priorities that are distinct ranks, so every neighbour is one change:

- move one op to another device;
- swap the node priorities of two ops close in priority order;
- swap the transfer priorities of two ops close in transfer order.

Each step draws a batch of random neighbours, scores the whole batch in one call of
`regal.sim.evaluate` (compiled, parallel) and moves to the best one if it is strictly better
(batched first improvement). "Better" is lexicographic: the objective, then the sum of the
device peaks (peak memory) or the largest peak (makespan), so that moves which help a
non-critical device are not lost on the objective's plateaus. After `patience` evaluations
without improvement the search restarts from the best solution with a random kick (some ops
moved, some priorities swapped). The start is the better of two simple solutions: all ops on
one device, and the topological order cut into `d` consecutive memory-balanced runs. No more
than `budget` chromosomes are ever evaluated.
"""

from __future__ import annotations

import numpy as np

from regal.decode import decode, encode, split
from regal.optimizers import Problem, Solution, score

__all__ = ["solve", "initial_solutions"]


def _ranks(order: np.ndarray) -> np.ndarray:
    """Priority keys from an order: first gets 1.0, last 0.0, all distinct."""
    n = len(order)
    keys = np.empty(n)
    keys[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return keys


def _balanced_runs(graph, d: int) -> np.ndarray:
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0).astype(np.int64)
    memory = np.zeros(graph.num_nodes, np.int64)
    np.add.at(memory, graph.tensor_producer, own)
    memory += graph.temporary_memory.astype(np.int64) + graph.persistent_memory.astype(np.int64)
    cumulative = np.cumsum(memory[graph.topo_order])
    total = cumulative[-1] if cumulative[-1] > 0 else 1
    device = np.minimum((d * (cumulative - memory[graph.topo_order] / 2) / total).astype(int), d - 1)
    placement = np.empty(graph.num_nodes, np.int32)
    placement[graph.topo_order] = device
    return placement


def initial_solutions(problem: Problem) -> np.ndarray:
    """Chromosomes of the starting candidates: memory-balanced topological runs, one device."""
    graph, d = problem.graph, problem.devices.count
    priority = _ranks(graph.topo_order)
    runs = encode(_balanced_runs(graph, d), priority, priority, d)
    single = encode(np.zeros(graph.num_nodes, np.int32), priority, priority, d)
    return np.stack([runs, single]) if d > 1 else single[None, :]


def _secondary(objective: str, peaks: np.ndarray, makespans: np.ndarray) -> np.ndarray:
    return peaks.sum(axis=1).astype(np.float64) if objective == "peak_memory" \
        else peaks.max(axis=1).astype(np.float64)


class _Search:
    """Neighbour generation on one-hot/ranked chromosomes."""

    def __init__(self, problem: Problem, rng: np.random.Generator) -> None:
        self.n = problem.graph.num_nodes
        self.d = problem.devices.count
        self.rng = rng

    def _swap(self, block: np.ndarray) -> None:
        n = self.n
        if n < 2:
            return
        order = np.argsort(-block, kind="stable")
        i = int(self.rng.integers(n))
        step = min(int(self.rng.geometric(0.3)), n - 1)   # mostly near neighbours in order
        j = i + step if i + step < n and (i - step < 0 or self.rng.random() < 0.5) else i - step
        a, b = order[i], order[j]
        block[a], block[b] = block[b], block[a]

    def _move(self, affinity: np.ndarray) -> None:
        v = int(self.rng.integers(self.n))
        now = int(np.argmax(affinity[v]))
        k = int(self.rng.integers(self.d - 1))
        k = k + 1 if k >= now else k
        affinity[v] = 0.0
        affinity[v, k] = 1.0

    def neighbour(self, keys: np.ndarray) -> np.ndarray:
        out = keys.copy()
        affinity, priority, transfer = split(out, self.n, self.d)
        r = self.rng.random()
        if self.d > 1 and r < 0.4:
            self._move(affinity)
        elif r < 0.85:
            self._swap(priority)
        else:
            self._swap(transfer)
        return out

    def kick(self, keys: np.ndarray) -> np.ndarray:
        out = keys.copy()
        affinity, priority, transfer = split(out, self.n, self.d)
        strength = max(1, int(round(0.05 * self.n)))
        for _ in range(strength):
            if self.d > 1:
                self._move(affinity)
            self._swap(priority)
        if self.rng.random() < 0.5:
            self._swap(transfer)
        return out


def solve(problem: Problem, budget: int, seed: int = 0, *, batch_size: int = 32,
          patience: int | None = None, progress=None) -> Solution:
    """Hill climbing with restarts; at most `budget` evaluations."""
    from regal.sim import evaluate

    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a positive integer, got {budget}")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    graph, devices, objective = problem.graph, problem.devices, problem.objective
    n = graph.num_nodes
    patience = max(2 * batch_size, 2 * n) if patience is None else int(patience)
    if patience < 1:
        raise ValueError(f"patience must be positive, got {patience}")
    rng = np.random.default_rng(seed)
    search = _Search(problem, rng)

    def score_batch(keys: np.ndarray):
        values, peaks, makespans = evaluate(graph, devices, keys, objective,
                                            return_details=True)
        return np.column_stack([values, _secondary(objective, peaks, makespans)])

    starts = initial_solutions(problem)[:budget]
    scores = score_batch(starts)
    used = len(starts)
    i = int(np.lexsort(scores.T[::-1])[0])
    current, current_key = starts[i].copy(), tuple(scores[i])
    best, best_key = current.copy(), current_key
    initial_value = current_key[0]
    stale, restarts, steps = 0, 0, 0
    while used < budget:
        if stale >= patience:
            current = search.kick(best)
            kicked = score_batch(current[None, :])
            used += 1
            current_key = tuple(kicked[0])
            stale, restarts = 0, restarts + 1
            if current_key < best_key:
                best, best_key = current.copy(), current_key
            continue
        count = min(batch_size, budget - used)
        batch = np.stack([search.neighbour(current) for _ in range(count)])
        keys = score_batch(batch)
        used += count
        steps += 1
        j = int(np.lexsort(keys.T[::-1])[0])
        if tuple(keys[j]) < current_key:
            current, current_key = batch[j].copy(), tuple(keys[j])
            stale = 0
            if current_key < best_key:
                best, best_key = current.copy(), current_key
        else:
            stale += count
        if progress is not None:
            progress(used, float(best_key[0]))
    placement, priority, transfer = decode(best, graph, devices)
    return Solution(**score(problem, placement, priority, transfer), evaluations=used,
                    method="local-search", seed=seed,
                    extra={"initial_value": float(initial_value), "restarts": restarts,
                           "steps": steps})
