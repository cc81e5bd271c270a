"""Local search baseline: peak-directed, batched hill climbing from the best heuristic start.

Why: the REGAL paper's "local search" baseline, made to scale to graphs of thousands of ops
(tracker issue 21). Uniform random neighbours (move any op, swap any two priorities) almost
never touch what sets the objective on a large graph: the peak of one device is set by the
tensors live on it at one instant, a few percent of the ops. So:

1. Start from the best of several cheap constructions, each one evaluation: the topological
   order cut into `d` memory-balanced runs, all ops on one device, and the registry's
   heuristics `gp-dfs`, `m-topo`, `m-etf` (their reported evaluations count against the
   budget; `m-etf` is skipped above `etf_max_ops` ops, where its own pure-Python run
   takes longer than the whole search).
2. Trace the incumbent (`regal.sim.trace`; it re-runs a solution already evaluated, so it is
   not a new evaluation) and find the device and instant of the peak (the device whose
   peak is furthest over its limit, or the busiest device when all fit), and the
   tensor copies live there then, weighted by their bytes, plus the ops whose persistent or
   temporary memory counts there.
3. Draw a batch of neighbours aimed at that instant: move a live tensor's producer together
   with its consumers on the peak device (the tensor then never lives there), move its
   consumers to the device that holds the tensor already, move a window of ops that ran
   around the peak, move a heavy persistent op; or change the order on the peak device: run
   a consumer of a live tensor earlier (it frees the tensor sooner) or its producer later
   (it allocates later), by a jump of random length in that device's execution order. Moves
   go to the device with the lowest peak (while a device is over its limit: the one with
   the most room below its own), sometimes to a random one. A quarter of the
   neighbours combine two or three such changes (some optima need two at once, e.g. a
   producer and its consumer), and a share of uniformly random neighbours (one op moved,
   two priorities swapped) keeps some exploration.
4. Score the whole batch with one `regal.sim.evaluate` call (compiled, parallel) and take the
   best neighbour if it is strictly better (batched first improvement). "Better" is
   lexicographic: the objective, then the sum of device peaks (peak memory) or the largest
   peak (makespan), so moves that lower a non-critical device are kept on plateaus. The batch
   shrinks while improvements are common and grows when they are rare. A neighbour whose
   schedule was scored before (`regal.decode.schedule_digests`: same placement, same order
   on every device and channel) is looked up, not evaluated again: a fifth to a third of
   all neighbours are such repeats (swapping the priorities of ops on different devices
   changes nothing), and their evaluations go to new ones. The random draws do not depend on
   the lookups, so with distinct starts the search takes the same steps as one that paid for
   repeats, and goes further on the same budget. It stops once the free repeats reach
   `REPEATS_PER_EVALUATION` per evaluation of the budget (a tiny graph runs out of schedules).
5. After `patience` neighbours (evaluated or looked up) without improvement, restart from the
   best with a random kick (some ops moved, some priorities swapped).

Colocation groups move as a whole and pinned groups never move; a heuristic start that
breaks a group is projected with `regal.decode.respect_colocation`. No more than `budget`
evaluations are spent, and the same seed gives the same answer.
"""

from __future__ import annotations

import numpy as np

from regal.decode import decode, encode, schedule_digests, split
from regal.optimizers import Problem, Solution, roomiest_device, score

__all__ = ["solve", "Climb", "SEEDLESS", "initial_solutions", "peak_facts", "HEURISTICS"]

HEURISTICS = ("gp-dfs", "m-topo", "m-etf")
# heuristics whose answer does not depend on the seed: climbs of one problem may share them
SEEDLESS = ("m-topo", "m-etf")
# neighbours that repeat a scored schedule cost no evaluation but still take time: once this
# many per evaluation of the budget were free, the search stops (checked between batches), so
# one whose reachable schedules run out (tiny graphs) ends short of its budget
REPEATS_PER_EVALUATION = 2


def _ranks(order: np.ndarray) -> np.ndarray:
    """Priority keys from an order: first gets 1.0, last 0.0, all distinct."""
    n = len(order)
    keys = np.empty(n)
    keys[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return keys


def _rerank(values: np.ndarray) -> np.ndarray:
    """The same order (ties by id) as evenly spaced distinct keys in [0, 1]."""
    order = np.lexsort((np.arange(len(values)), -values))
    return _ranks(order)


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


def _conforming(graph, placement: np.ndarray) -> np.ndarray:
    """`placement` with colocation groups and pins respected (unchanged on a free graph)."""
    if not getattr(graph, "constrained", False):
        return placement
    from regal.decode import respect_colocation
    return respect_colocation(graph, placement)


def initial_solutions(problem: Problem) -> np.ndarray:
    """Chromosomes of the model-free starts: memory-balanced topological runs, and every op
    on the roomiest device (`regal.optimizers.roomiest_device`)."""
    graph, d = problem.graph, problem.devices.count
    priority = _ranks(graph.topo_order)
    runs = encode(_conforming(graph, _balanced_runs(graph, d)), priority, priority, d)
    one = np.full(graph.num_nodes, roomiest_device(problem), np.int32)
    single = encode(_conforming(graph, one), priority, priority, d)
    return np.stack([runs, single]) if d > 1 else single[None, :]


def _given_starts(problem: Problem, initial) -> np.ndarray:
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
        rows.append(encode(_conforming(graph, np.asarray(placement, np.int32)),
                           _rerank(priority), _rerank(transfer), d))
    return np.stack(rows)


def _secondary(objective: str, peaks: np.ndarray) -> np.ndarray:
    return peaks.sum(axis=1).astype(np.float64) if objective == "peak_memory" \
        else peaks.max(axis=1).astype(np.float64)


# ---------------------------------------------------------------------------
# where the peak is


class PeakFacts:
    """What sets the incumbent's peak: device, instant, and what is live there then.

    `tensors` [m] ids of tensor copies live on `device` at `time`, `tensor_bytes` [m] their
    sizes, `remote` [m] True for a copy transferred in (producer on another device);
    `ops` [k] ops holding persistent or temporary bytes there then, `op_bytes` [k];
    `orders[k]` the ops of device k in execution order (`order` = `orders[device]`),
    `position` [n] each op's index in its device's execution order; `start`, `end` [n] op
    times; `peaks` [d]; `weights` the running sum of the tensors' then the ops' bytes.
    """

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def _critical_device(problem: Problem, peaks: np.ndarray) -> int:
    """The device furthest over its limit while one is over (under one limit for every
    device that is the busiest one, so such a limit changes no move), else the busiest."""
    limits = problem.devices.limits
    if limits is not None and (peaks > limits).any():
        return int(np.argmax(peaks - limits))
    return int(np.argmax(peaks))


def peak_facts(problem: Problem, placement, priority, transfer) -> PeakFacts:
    """Traces one solution and lists what is live on its critical device at its peak."""
    from regal.sim import trace

    graph = problem.graph
    n, t = graph.num_nodes, graph.num_tensors
    tr = trace(graph, problem.devices, placement, priority, transfer)
    peaks = np.asarray(tr.result.peak, dtype=np.int64)
    k = _critical_device(problem, peaks)
    times, live_bytes = tr.memory[k]
    at = float(times[int(np.argmax(live_bytes))]) if len(times) else 0.0
    start, end = tr.op_start, tr.op_end
    placement = np.asarray(placement)

    producer = graph.tensor_producer
    home = placement[producer]
    edge_tensor = np.repeat(np.arange(t), np.diff(graph.consumer_ptr))
    consumer = graph.consumer
    # producer-side copy: freed when the producer, its local consumers and its transfers end
    local = placement[consumer] == home[edge_tensor]
    free = end[producer].copy()
    np.maximum.at(free, edge_tensor[local], end[consumer[local]])
    if len(tr.transfer_tensor):
        np.maximum.at(free, tr.transfer_tensor, tr.transfer_end)
    free[np.diff(graph.consumer_ptr) == 0] = np.inf         # graph outputs stay live
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0)
    live_home = (home == k) & (start[producer] <= at) & (free > at) & (own > 0)
    tensors = [np.flatnonzero(live_home)]
    sizes = [own[live_home]]
    # copies transferred onto k: live from the transfer's start to the last consumer there
    into = np.flatnonzero(tr.transfer_dst == k)
    if len(into):
        remote_free = np.full(t, -np.inf)
        on_k = placement[consumer] == k
        np.maximum.at(remote_free, edge_tensor[on_k], end[consumer[on_k]])
        tensor_in = tr.transfer_tensor[into]
        live = (tr.transfer_start[into] <= at) & (remote_free[tensor_in] > at) \
            & (graph.tensor_size[tensor_in] > 0)
        tensors.append(tensor_in[live])
        sizes.append(graph.tensor_size[tensor_in[live]])
    remote = np.concatenate([np.full(len(part), i > 0) for i, part in enumerate(tensors)])
    mine = placement == k
    running = mine & (start <= at) & ((end > at) | (start == at))
    holds = graph.persistent_memory + np.where(running, graph.temporary_memory, 0)
    ops = np.flatnonzero(mine & (holds > 0))
    position = np.zeros(n, np.int64)
    orders = []
    for device in range(problem.devices.count):
        ops_d = np.flatnonzero(placement == device)
        ops_d = ops_d[np.lexsort((ops_d, start[ops_d]))]
        position[ops_d] = np.arange(len(ops_d))
        orders.append(ops_d)
    tensor_bytes = np.concatenate(sizes).astype(np.float64)
    op_bytes = holds[ops].astype(np.float64)
    return PeakFacts(device=k, time=at, tensors=np.concatenate(tensors),
                     tensor_bytes=tensor_bytes, remote=remote, ops=ops, op_bytes=op_bytes,
                     order=orders[k], orders=orders, position=position, start=start, end=end,
                     peaks=peaks, weights=np.cumsum(np.concatenate([tensor_bytes, op_bytes])))


# ---------------------------------------------------------------------------
# neighbours


class _Search:
    """Neighbour generation on one-hot/ranked chromosomes (all randomness from `rng`)."""

    def __init__(self, problem: Problem, rng: np.random.Generator) -> None:
        graph = problem.graph
        self.graph = graph
        self.n = graph.num_nodes
        self.d = problem.devices.count
        limits = problem.devices.limits
        self.limits = None if limits is None else limits.astype(np.float64)
        self.rng = rng
        n = self.n
        leaders = getattr(graph, "colocation", None)
        pinned = getattr(graph, "pinned", None)
        self.grouped = leaders is not None and bool((leaders != np.arange(n)).any())
        self.leaders = np.arange(n) if leaders is None else np.asarray(leaders)
        self.movable = np.ones(n, bool) if pinned is None else np.asarray(pinned) < 0
        if self.grouped:
            order = np.argsort(self.leaders, kind="stable")
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(self.leaders, minlength=n), out=ptr[1:])
            self._members = (order, ptr)
        self.facts: PeakFacts | None = None
        self.placement = np.zeros(n, np.int32)

    # -- helpers

    def _group_of(self, ops: np.ndarray) -> np.ndarray:
        """`ops` widened to whole colocation groups, pinned groups left out."""
        ops = np.unique(np.asarray(ops, dtype=np.int64))
        if self.grouped and len(ops):
            order, ptr = self._members
            leaders = np.unique(self.leaders[ops])
            ops = np.concatenate([order[ptr[L]:ptr[L + 1]] for L in leaders])
        return ops[self.movable[ops]]

    def _assign(self, affinity: np.ndarray, ops, device: int) -> bool:
        ops = self._group_of(ops)
        ops = ops[self.placement[ops] != device]
        if not len(ops):
            return False
        affinity[ops] = 0.0
        affinity[ops, device] = 1.0
        return True

    def _target(self, avoid: int) -> int:
        """The device with the lowest peak (ties: lowest id), sometimes a random other one;
        while a device is over its limit, the one with the most room below its limit (under
        one limit for every device that is the lowest peak again)."""
        peaks = self.facts.peaks.astype(np.float64).copy()
        if self.rng.random() < 0.3:
            others = [k for k in range(self.d) if k != avoid]
            return int(others[int(self.rng.integers(len(others)))])
        if self.limits is not None and (peaks > self.limits).any():
            peaks -= self.limits
        peaks[avoid] = np.inf
        return int(np.argmin(peaks))

    def _pick(self, cumulative: np.ndarray) -> int:
        """An index drawn with probability proportional to its weight (running sums given)."""
        total = cumulative[-1]
        if total <= 0:
            return int(self.rng.integers(len(cumulative)))
        return min(int(np.searchsorted(cumulative, self.rng.random() * total, side="right")),
                   len(cumulative) - 1)

    def _consumers(self, tensor: int) -> np.ndarray:
        g = self.graph
        return g.consumer[g.consumer_ptr[tensor]:g.consumer_ptr[tensor + 1]]

    # -- uniform moves (exploration)

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
        now = int(self.placement[v])
        k = int(self.rng.integers(self.d - 1))
        k = k + 1 if k >= now else k
        self._assign(affinity, [v], k)

    def random_neighbour(self, keys: np.ndarray) -> np.ndarray:
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
        strength = max(1, int(round(0.02 * self.n)))
        for _ in range(strength):
            if self.d > 1:
                self._move(affinity)
            self._swap(priority)
        if self.rng.random() < 0.5:
            self._swap(transfer)
        return out

    # -- peak-directed moves

    def _reorder(self, priority: np.ndarray, v: int, earlier: bool) -> bool:
        """Moves op v a random number of places earlier/later in its device's run order."""
        f = self.facts
        device = int(self.placement[v])
        order = f.orders[device]
        here = int(f.position[v])
        room = here if earlier else len(order) - 1 - here
        if room <= 0:
            return False
        # jump lengths spread over scales: 1, 2, 4, ... up to the whole run order
        jump = min(room, max(1, int(2.0 ** (self.rng.random() * np.log2(room + 1)))))
        other = int(order[here - jump if earlier else here + jump])
        spacing = 1.0 / (2.0 * self.n + 2.0)
        value = priority[other] + (spacing if earlier else -spacing)
        if value == priority[v]:
            return False
        priority[v] = value
        return True

    def directed_neighbour(self, keys: np.ndarray) -> np.ndarray | None:
        f = self.facts
        out = keys.copy()
        affinity, priority, _ = split(out, self.n, self.d)
        g = self.graph
        k = f.device
        r = self.rng.random()
        multi = self.d > 1
        if not len(f.tensors) and not len(f.ops):
            return None
        # one live item, tensors and ops' persistent/temporary bytes alike, by its bytes
        i = self._pick(f.weights)
        if i >= len(f.tensors):
            v = int(f.ops[i - len(f.tensors)])
            s = self.rng.random()
            if multi and s < 0.35:
                done = self._assign(affinity, [v], self._target(k))
            elif multi and s < 0.7:
                # with the readers of its outputs there, so its outputs do not come back
                readers = np.concatenate([self._consumers(int(x)) for x in
                                          range(g.output_ptr[v], g.output_ptr[v + 1])] or [[]])
                readers = readers.astype(np.int64)
                readers = readers[self.placement[readers] == k]
                done = self._assign(affinity, np.append(readers, v), self._target(k))
            else:
                done = self._reorder(priority, v, earlier=self.rng.random() < 0.5)
            return out if done else None
        tensor, remote = int(f.tensors[i]), bool(f.remote[i])
        producer = int(g.tensor_producer[tensor])
        consumers = self._consumers(tensor)
        here = consumers[self.placement[consumers] == k]
        waiting = here[f.end[here] > f.time]          # consumers that still hold the tensor
        if multi and r < 0.55:
            s = self.rng.random()
            if remote:
                # run the consumers where the tensor already is, or elsewhere off the peak
                home = int(self.placement[producer])
                target = home if s < 0.6 else self._target(k)
                done = self._assign(affinity, here, target)
            elif s < 0.5:
                done = self._assign(affinity, np.append(here, producer), self._target(k))
            elif s < 0.7:
                done = self._assign(affinity, [producer], self._target(k))
            else:
                # a window of the peak device's run order around the producer
                at = int(f.position[producer])
                width = max(1, int(2.0 ** (self.rng.random() * np.log2(max(2, len(f.order))))))
                lo = max(0, at - int(self.rng.integers(width)))
                done = self._assign(affinity, f.order[lo:lo + width], self._target(k))
            return out if done else None
        if remote and (not len(waiting) or self.rng.random() < 0.5):
            # the copy arrives as soon as its producer (elsewhere) ends: produce it later
            done = self._reorder(priority, producer, earlier=False)
        elif len(waiting) and (remote or self.rng.random() < 0.6):
            v = int(waiting[np.argmax(f.end[waiting])])
            if self.rng.random() < 0.3:
                v = int(waiting[int(self.rng.integers(len(waiting)))])
            done = self._reorder(priority, v, earlier=True)
        elif not remote:
            done = self._reorder(priority, producer, earlier=False)
        else:
            return None
        return out if done else None

    def neighbours(self, keys: np.ndarray, count: int, directed_share: float) -> np.ndarray:
        batch = []
        tries = 0
        while len(batch) < count:
            tries += 1
            candidate = None
            if self.facts is not None and self.rng.random() < directed_share and tries < 20 * count:
                candidate = self.directed_neighbour(keys)
                # now and then two or three peak-directed changes at once, to leave optima
                # that no single change improves
                for _ in range(int(self.rng.random() < 0.25) * int(self.rng.integers(1, 3))):
                    if candidate is None:
                        break
                    candidate = self.directed_neighbour(candidate)
            if candidate is None:
                candidate = self.random_neighbour(keys)
            batch.append(candidate)
        return np.stack(batch)


# ---------------------------------------------------------------------------
# the search


def _heuristic_starts(problem: Problem, names, budget: int, seed: int, etf_max_ops: int,
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
        placement = _conforming(graph, np.asarray(found.placement, np.int32))
        keys = encode(placement, _rerank(found.priority), _rerank(found.transfer_priority), d)
        out.append((keys, found, used, name))
    return out


class Climb:
    """One local-search lineage that can be advanced a share at a time (`run`): its incumbent,
    best, batch size, patience and the schedules it has scored persist between calls, so a
    paused climb goes on where it stopped (its draws differ from one uninterrupted `run`
    only from the batch the pause cut short). Racing several climbs
    (`regal.regal_method.polish`) needs that: a climb that is paused and resumed must not
    pay for its starts or its repeats again.

    The constructor scores the starts (model-free constructions, `initial`, then the
    registry's `heuristics`), at most `budget` evaluations; `solve` documents the options.
    `known`, a dict shared by climbs of one problem, keeps the answers of the `SEEDLESS`
    heuristics so that they run once (m-ETF takes a quarter second on 1,000 ops); each
    climb still counts their evaluations, so sharing changes no answer.
    """

    def __init__(self, problem: Problem, budget: int, seed: int = 0, *, batch_size: int = 32,
                 patience: int | None = None, heuristics=HEURISTICS, etf_max_ops: int = 1000,
                 directed: float = 0.85, initial=None, should_stop=None,
                 known: dict | None = None) -> None:
        if int(budget) != budget or budget < 1:
            raise ValueError(f"budget must be a positive integer, got {budget}")
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if not 0.0 <= directed <= 1.0:
            raise ValueError(f"directed must be in [0, 1], got {directed}")
        graph, devices = problem.graph, problem.devices
        n, d = graph.num_nodes, devices.count
        self.problem, self.seed, self.batch_size, self.directed = problem, seed, batch_size, directed
        self.patience = max(4 * batch_size, n) if patience is None else int(patience)
        if self.patience < 1:
            raise ValueError(f"patience must be positive, got {self.patience}")
        self.search = _Search(problem, np.random.default_rng(seed))
        self.scored: dict[bytes, np.ndarray] = {}    # schedule digest -> (objective, secondary)
        self.repeats = self.used = 0
        objective = problem.objective

        # 1. starts: model-free constructions, then the registry's heuristics
        starts = initial_solutions(problem)
        names = ["runs", "single"] if d > 1 else ["single"]
        if initial is not None:
            given = _given_starts(problem, initial)
            starts, names = np.vstack([given, starts]), ["initial"] * len(given) + names
        starts, names = starts[:budget], names[:budget]
        scores, self.used = self._score(starts)
        for keys, found, cost, name in _heuristic_starts(problem, heuristics, budget - self.used,
                                                         seed, etf_max_ops, should_stop, known):
            self.used += cost
            decoded = decode(keys, graph, devices)
            if np.array_equal(decoded[0], found.placement):
                row = np.array([found.value, _secondary(objective, found.peak[None, :])[0]])
                self.scored.setdefault(schedule_digests(graph, *decoded)[0], row)
            elif self.used < budget:                 # projected onto the groups: score it anew
                rows, cost = self._score(keys[None, :])
                row, self.used = rows[0], self.used + cost
            else:
                continue
            starts = np.vstack([starts, keys[None, :]])
            scores = np.vstack([scores, np.asarray(row, np.float64)[None, :]])
            names.append(name)
        i = int(np.lexsort(scores.T[::-1])[0])
        self.current, self.current_key = starts[i].copy(), tuple(scores[i])
        self.best, self.best_key = self.current.copy(), self.current_key
        self.initial_value, self.start_name = self.current_key[0], names[i]
        self._refresh(self.current)
        self.batch = min(16, batch_size)
        self.stale = self.restarts = self.steps = self.accepted = 0

    @property
    def value(self) -> float:
        """The best objective found so far."""
        return float(self.best_key[0])

    def _score(self, keys: np.ndarray):
        """Scores of a batch and how many evaluations it cost: a schedule already scored
        (here or earlier in the batch) is looked up, not simulated again."""
        from regal.sim import evaluate

        graph, devices = self.problem.graph, self.problem.devices
        digests = schedule_digests(graph, *decode(keys, graph, devices))
        first: dict[bytes, int] = {}
        for i, h in enumerate(digests):
            if h not in self.scored:
                first.setdefault(h, i)
        new = list(first.values())
        if new:
            values, peaks, _ = evaluate(graph, devices, keys[new], self.problem.objective,
                                        return_details=True)
            rows = np.column_stack([values, _secondary(self.problem.objective, peaks)])
            for i, row in zip(new, rows):
                self.scored[digests[i]] = row
        self.repeats += len(keys) - len(new)
        return np.stack([self.scored[h] for h in digests]), len(new)

    def _refresh(self, keys: np.ndarray) -> None:
        """Re-ranks the priorities and traces the new incumbent for peak-directed moves."""
        graph, devices = self.problem.graph, self.problem.devices
        affinity, priority, transfer = split(keys, graph.num_nodes, devices.count)
        priority[:] = _rerank(priority)
        transfer[:] = _rerank(transfer)
        placement, prio, tprio = decode(keys, graph, devices)
        self.search.placement = placement
        self.search.facts = peak_facts(self.problem, placement, prio, tprio)

    def run(self, budget: int, progress=None, should_stop=None) -> "Climb":
        """Climbs until this lineage has spent `budget` evaluations in all (its starts
        included), `should_stop()` says so, or `REPEATS_PER_EVALUATION * budget` neighbours
        repeated scored schedules; `progress(used, best)` after each batch."""
        budget = int(budget)
        while self.used < budget and self.repeats < REPEATS_PER_EVALUATION * budget \
                and (should_stop is None or not should_stop()):
            if self.stale >= self.patience:
                self.current = self.search.kick(self.best)
                rows, cost = self._score(self.current[None, :])
                self.current_key, self.used = tuple(rows[0]), self.used + cost
                self.stale, self.restarts = 0, self.restarts + 1
                if self.current_key < self.best_key:
                    self.best, self.best_key = self.current.copy(), self.current_key
                self._refresh(self.current)
                continue
            count = min(self.batch, budget - self.used)
            candidates = self.search.neighbours(self.current, count, self.directed)
            keys, cost = self._score(candidates)
            self.used += cost
            self.steps += 1
            j = int(np.lexsort(keys.T[::-1])[0])
            better = int(sum(tuple(row) < self.current_key for row in keys))
            if tuple(keys[j]) < self.current_key:
                self.current, self.current_key = candidates[j].copy(), tuple(keys[j])
                self.stale, self.accepted = 0, self.accepted + 1
                if self.current_key < self.best_key:
                    self.best, self.best_key = self.current.copy(), self.current_key
                self._refresh(self.current)
            else:
                self.stale += count
            # many improving neighbours: smaller batches climb faster; none: look wider
            if better * 4 >= count:
                self.batch = max(min(8, self.batch_size), self.batch // 2)
            elif better == 0:
                self.batch = min(self.batch_size, self.batch * 2)
            if progress is not None:
                progress(self.used, float(self.best_key[0]))
        return self

    def solution(self, method: str = "local-search") -> Solution:
        """The best solution so far, scored by the simulator, with the climb's counters."""
        graph, devices = self.problem.graph, self.problem.devices
        placement, priority, transfer = decode(self.best, graph, devices)
        return Solution(**score(self.problem, placement, priority, transfer),
                        evaluations=self.used, method=method, seed=self.seed,
                        extra={"initial_value": float(self.initial_value),
                               "start": self.start_name, "restarts": self.restarts,
                               "steps": self.steps, "accepted": self.accepted,
                               "repeats": self.repeats})


def solve(problem: Problem, budget: int, seed: int = 0, *, batch_size: int = 32,
          patience: int | None = None, heuristics=HEURISTICS, etf_max_ops: int = 1000,
          directed: float = 0.85, initial=None, progress=None, should_stop=None) -> Solution:
    """Peak-directed hill climbing with restarts; at most `budget` evaluations, fewer when
    `should_stop()` (asked before each heuristic start and each step) says to stop or when
    `REPEATS_PER_EVALUATION * budget` neighbours repeated schedules already scored.

    `batch_size` is the largest batch (the search adapts between 8 and it), `heuristics`
    the registry methods tried as starts, `directed` the share of peak-directed neighbours,
    `initial` extra starts (Solutions or chromosomes: a warm start, e.g. a best-known one).
    """
    climb = Climb(problem, budget, seed, batch_size=batch_size, patience=patience,
                  heuristics=heuristics, etf_max_ops=etf_max_ops, directed=directed,
                  initial=initial, should_stop=should_stop)
    return climb.run(budget, progress, should_stop).solution()
