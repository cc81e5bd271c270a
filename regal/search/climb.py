"""A climb: peak-directed, batched hill climbing from the best start (the `local-search` method,
and the phase that spends most of `regal`'s budget).

Why: the REGAL paper's "local search" baseline, made to scale to graphs of thousands of ops
(tracker issue 21). Uniform random neighbours (move any op, swap any two priorities) almost
never touch what sets the objective on a large graph: the peak of one device is set by the
tensors live on it at one instant, a few percent of the ops. So:

1. Start from the best of several cheap constructions, each one evaluation: the topological
   order cut into `d` memory-balanced runs, all ops on one device, and the registry's
   heuristics `gp-dfs`, `m-topo`, `m-etf` (their reported evaluations count against the
   budget; `m-etf` is skipped above `etf_max_ops` ops, where its own pure-Python run
   takes longer than the whole search), and on a training step of micro-batches the
   hand-made pipelines (`layer-split-1f1b`, `layer-split`; `regal.search.starts`).
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
   shrinks while improvements are common and grows when they are rare; an `opening`
   (batch, evaluations per op) caps it for the climb's first evaluations (a ranked climb
   gains most from small steps drawn again after each accepted move while improvements are
   easy, `data/policy/README.md`). A neighbour whose
   schedule was scored before (`regal.decode.schedule_digests`: same placement, same order
   on every device and channel) is looked up, not evaluated again: a fifth to a third of
   all neighbours are such repeats (swapping the priorities of ops on different devices
   changes nothing), and their evaluations go to new ones. The random draws do not depend on
   the lookups, so with distinct starts the search takes the same steps as one that paid for
   repeats, and goes further on the same budget. It stops once the free repeats reach
   `REPEATS_PER_EVALUATION` per evaluation of the budget (a tiny graph runs out of schedules).
5. After `patience` neighbours (evaluated or looked up) without improvement, restart from the
   best with a random kick (some ops moved, some priorities swapped).
6. Optionally a move ranker (`rank_moves`) chooses which neighbours are evaluated: each step
   draws `draw` times the batch, the ranker scores them (lower is better) and the batch's
   best-ranked ones are evaluated; with `draw` > 1 each distinct move once, and moves this
   incumbent already sent to evaluation only when too few new ones were drawn (a ranker
   scores a move alike whenever it is drawn: without this, half of a learned ranker's
   choices were its earlier ones again). Drawing costs no evaluation; the ranker's own work
   is its business. This is the seam for learned move guidance, and for its oracle ceiling
   (`experiments/ceilings.py`: a ranker that simulates every drawn neighbour for free).
   With `unranked_share` u > 0 the first round(u x batch) drawn neighbours (as a climb without
   a ranker draws them) go to evaluation whatever their rank, and the ranker picks the rest:
   a hedge, so that a ranking that steers a climb wrong costs at most the ranked share
   (`data/policy/README.md`, "A hedge: part of each batch unranked").
   A ranker with a `restart_now(climb, scores, count)` method may also call a step off:
   then the batch is not evaluated and the climb restarts from its best at once, as if its
   patience had run out (`regal.search.advantage.MoveRanker`'s restart gate: most steps of a
   stalled climb hold no improving move, and each cost a batch of evaluations).

Neighbours are drawn compiled (`regal.search.draw_kernel`, the same draws as the Python
moves it replaced, kept in tests/move_reference.py) as a few writes to the incumbent's keys
each; only those evaluated become chromosomes, and a ranker may read the writes.

Colocation groups move as a whole and pinned groups never move; a heuristic start that
breaks a group is projected with `regal.decode.respect_colocation`. No more than `budget`
evaluations are spent, and the same seed gives the same answer.
"""

from __future__ import annotations

import numpy as np

from regal.decode import decode, schedule_digests, split
from regal.optimizers import Problem, Solution, check_budget, score
from regal.search.moves import Moves, peak_facts, rerank
from regal.search.starts import (default_heuristics, given_starts, heuristic_starts,
                                 initial_solutions)

__all__ = ["Climb", "local_search", "check_opening", "check_unranked_share",
           "REPEATS_PER_EVALUATION"]

# neighbours that repeat a scored schedule cost no evaluation but still take time: once this
# many per evaluation of the budget were free, the search stops (checked between batches), so
# one whose reachable schedules run out (tiny graphs) ends short of its budget
REPEATS_PER_EVALUATION = 2


def _secondary(objective: str, peaks: np.ndarray) -> np.ndarray:
    return peaks.sum(axis=1).astype(np.float64) if objective == "peak_memory" \
        else peaks.max(axis=1).astype(np.float64)


def check_opening(opening) -> tuple[int, float]:
    """`opening` as (batch, evaluations per op), or a ValueError that names what is wrong."""
    try:
        batch, per_op = opening
        ok = isinstance(batch, (int, np.integer)) and not isinstance(batch, bool) \
            and batch >= 1 and float(per_op) >= 0.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"opening must be (a positive integer batch, evaluations per op >= 0), "
                         f"got {opening!r}")
    return int(batch), float(per_op)


def check_unranked_share(share) -> float:
    """`share` as a float in [0, 1], or a ValueError that names it."""
    try:
        ok = not isinstance(share, bool) and 0.0 <= float(share) <= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"unranked_share must be a number in [0, 1], got {share!r}")
    return float(share)


class Climb:
    """One local-search lineage that can be advanced a share at a time (`run`): its incumbent,
    best, batch size, patience and the schedules it has scored persist between calls, so a
    paused climb goes on where it stopped (its draws differ from one uninterrupted `run`
    only from the batch the pause cut short). Racing several climbs
    (`regal.search.pipeline.race_climbs`) needs that: a climb that is paused and resumed must not
    pay for its starts or its repeats again.

    The constructor scores the starts (model-free constructions, `initial`, then the
    registry's `heuristics`), at most `budget` evaluations; `solve` documents the options.
    `opening` (batch, evaluations per op), when given, caps the batch at that batch until
    the climb has spent that many evaluations per op of the graph (`batch_size`).
    `unranked_share` of each ranked batch is evaluated in the drawing order (`_drawn`).
    `known`, a dict shared by climbs of one problem, keeps the answers of the `SEEDLESS`
    heuristics so that they run once (m-ETF takes a quarter second on 1,000 ops); each
    climb still counts their evaluations, so sharing changes no answer.
    """

    def __init__(self, problem: Problem, budget: int, seed: int = 0, *, batch_size: int = 32,
                 patience: int | None = None, heuristics=None, etf_max_ops: int = 1000,
                 directed: float = 0.85, initial=None, should_stop=None,
                 known: dict | None = None, rank_moves=None, draw: int = 1,
                 opening: tuple[int, float] | None = None,
                 unranked_share: float = 0.0) -> None:
        check_budget(budget)
        if int(draw) != draw or draw < 1:
            raise ValueError(f"draw must be a positive integer, got {draw}")
        if draw > 1 and rank_moves is None:
            raise ValueError("draw > 1 needs rank_moves, which chooses among the drawn")
        self.rank_moves, self.draw = rank_moves, int(draw)
        self.unranked_share = check_unranked_share(unranked_share)
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if not 0.0 <= directed <= 1.0:
            raise ValueError(f"directed must be in [0, 1], got {directed}")
        graph, devices = problem.graph, problem.devices
        n, d = graph.num_nodes, devices.count
        self.problem, self.seed, self.directed = problem, seed, directed
        self.largest_batch = batch_size
        if opening is not None:
            batch, per_op = check_opening(opening)
            opening = (batch, per_op * n)
        self.opening = opening             # (batch, evaluations) or None
        self.patience = max(4 * batch_size, n) if patience is None else int(patience)
        if self.patience < 1:
            raise ValueError(f"patience must be positive, got {self.patience}")
        self.moves = Moves(problem, np.random.default_rng(seed))
        self.scored: dict[bytes, np.ndarray] = {}    # schedule digest -> (objective, secondary)
        self.repeats = self.used = 0
        objective = problem.objective

        # 1. starts: model-free constructions, then the registry's heuristics
        starts = initial_solutions(problem)
        names = ["runs", "single"] if d > 1 else ["single"]
        if initial is not None:
            given = given_starts(problem, initial)
            starts, names = np.vstack([given, starts]), ["initial"] * len(given) + names
        starts, names = starts[:budget], names[:budget]
        scores, self.used = self._score(starts)
        if heuristics is None:
            heuristics = default_heuristics(graph)
        for keys, found, cost, name in heuristic_starts(problem, heuristics, budget - self.used,
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
        self._tried = None     # the untried-first filter's set, made at its first use
        self._refresh(self.current)
        self.batch = min(16, self.batch_size)
        self.stale = self.restarts = self.steps = self.accepted = 0
        # what a restart gate reads (`restart_now`): evaluated steps without improvement since
        # the last improvement or kick, whether the last evaluated step improved; and how
        # many steps it called off
        self.fail_run, self.last_improved, self.gated = 0, False, 0

    @property
    def batch_size(self) -> int:
        """The largest batch a step may evaluate now: `largest_batch`, or in the climb's
        opening (`opening`: while it has spent fewer than its evaluations) at most the
        opening's batch (the batch adapts within it; a restart gate reads it too)."""
        if self.opening is not None and self.used < self.opening[1]:
            return min(self.opening[0], self.largest_batch)
        return self.largest_batch

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
        priority[:] = rerank(priority)
        transfer[:] = rerank(transfer)
        placement, prio, tprio = decode(keys, graph, devices)
        # the hashes of the moves sent to evaluation from this incumbent: an open-addressing
        # set (`regal.search.draw_kernel.untried_first`) kept at most half full, and its count
        if self._tried is not None:
            self._tried.fill(0)
        self._tried_state = np.zeros(2, np.int64)
        self.moves.placement = placement
        self.moves.facts = peak_facts(self.problem, placement, prio, tprio)

    def _drawn(self, count: int) -> np.ndarray | None:
        """The `count` neighbours of the incumbent to evaluate: as drawn without a move ranker,
        else the best-ranked `count` of `draw * count` drawn (ties keep the drawing order).
        A ranker with a `rank_drawn(climb, drawn)` method reads the drawn neighbours as writes
        to the incumbent's keys (`regal.search.moves.Drawn`), and only the chosen ones are
        made into chromosomes; any other is called with the chromosomes of all of them.
        With `unranked_share` the first round(share x `count`) drawn go first whatever their
        rank (the ranker's scores still feed `restart_now`). None when the ranker's
        `restart_now` calls the step off."""
        drawn = self.moves.draw(self.current, count * self.draw, self.directed)
        if self.rank_moves is None:
            return drawn.keys()
        rank_drawn = getattr(self.rank_moves, "rank_drawn", None)
        ranks = rank_drawn(self, drawn) if rank_drawn is not None \
            else self.rank_moves(self, drawn.keys())
        ranks = np.asarray(ranks, dtype=np.float64)
        if ranks.shape != (len(drawn),):
            raise ValueError(f"rank_moves: expected {len(drawn)} scores, got shape {ranks.shape}")
        order = np.argsort(ranks, kind="stable")
        unranked = int(round(self.unranked_share * count))
        if unranked:            # the first drawn first, in their order, then the rest by rank
            order = np.concatenate([np.arange(unranked), order[order >= unranked]])
        if self.draw > 1:
            order = self._untried_first(drawn, order, count)
            restart_now = getattr(self.rank_moves, "restart_now", None)
            if restart_now is not None and restart_now(self, ranks, count):
                return None
        return drawn.keys(order[:count])

    def _untried_first(self, drawn, order: np.ndarray, count: int) -> np.ndarray:
        """The first `count` of `order` (best-ranked first) with the neighbours this incumbent
        has not sent to evaluation yet, each once, ahead of the others (repeats, in rank
        order); the fresh ones among them are marked as tried. Why: a ranker scores a move
        alike every time it is drawn, so without this it picks the same top moves again, step
        after step and twice in one batch; they are looked up, not paid for, but half the
        neighbours a learned ranker chose were such repeats (2,179-op graph), which took time
        and steps and told the climb nothing new."""
        from regal.search.draw_kernel import rehashed, row_hashes, untried_first

        hashes = row_hashes(self.moves.n, drawn.row_ptr, drawn.kind, drawn.op,
                            drawn.value.view(np.int64))
        need = 2 * (int(self._tried_state[0]) + len(hashes))
        table = self._tried
        if table is None or len(table) < need:
            size = 1 << max(6, (need - 1).bit_length())
            table = self._tried = np.zeros(size, np.uint64) if table is None \
                else rehashed(table, size)
        return untried_first(hashes, np.asarray(order, np.int64), int(count), table,
                             self._tried_state)

    def run(self, budget: int, progress=None, should_stop=None) -> "Climb":
        """Climbs until this lineage has spent `budget` evaluations in all (its starts
        included), `should_stop()` says so, or `REPEATS_PER_EVALUATION * budget` neighbours
        repeated scored schedules; `progress(used, best)` after each batch."""
        budget = int(budget)
        while self.used < budget and self.repeats < REPEATS_PER_EVALUATION * budget \
                and (should_stop is None or not should_stop()):
            if self.stale >= self.patience:
                self.current = self.moves.kick(self.best)
                rows, cost = self._score(self.current[None, :])
                self.current_key, self.used = tuple(rows[0]), self.used + cost
                self.stale, self.restarts = 0, self.restarts + 1
                self.fail_run, self.last_improved = 0, False
                if self.current_key < self.best_key:
                    self.best, self.best_key = self.current.copy(), self.current_key
                self._refresh(self.current)
                continue
            count = min(self.batch, budget - self.used)
            candidates = self._drawn(count)
            if candidates is None:               # called off: restart from the best now
                self.steps, self.gated, self.stale = self.steps + 1, self.gated + 1, self.patience
                self.batch = min(self.batch_size, self.batch * 2)
                continue
            keys, cost = self._score(candidates)
            self.used += cost
            self.steps += 1
            j = int(np.lexsort(keys.T[::-1])[0])
            value, secondary = self.current_key          # lexicographic, as tuples compare
            better = int(np.count_nonzero((keys[:, 0] < value)
                                          | ((keys[:, 0] == value) & (keys[:, 1] < secondary))))
            self.last_improved = tuple(keys[j]) < self.current_key
            if self.last_improved:
                self.current, self.current_key = candidates[j].copy(), tuple(keys[j])
                self.stale, self.accepted, self.fail_run = 0, self.accepted + 1, 0
                if self.current_key < self.best_key:
                    self.best, self.best_key = self.current.copy(), self.current_key
                self._refresh(self.current)
            else:
                self.stale += count
                self.fail_run += 1
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
                               "repeats": self.repeats, "gated": self.gated})



def local_search(problem: Problem, budget: int, seed: int = 0, *, batch_size: int = 32,
          patience: int | None = None, heuristics=None, etf_max_ops: int = 1000,
          directed: float = 0.85, initial=None, progress=None, should_stop=None) -> Solution:
    """Peak-directed hill climbing with restarts; at most `budget` evaluations, fewer when
    `should_stop()` (asked before each heuristic start and each step) says to stop or when
    `REPEATS_PER_EVALUATION * budget` neighbours repeated schedules already scored.

    `batch_size` is the largest batch (the search adapts between 8 and it), `heuristics`
    the registry methods tried as starts (None: `regal.search.starts.default_heuristics`),
    `directed` the share of peak-directed neighbours, `initial` extra starts (Solutions or
    chromosomes: a warm start, e.g. a best-known one).
    """
    lineage = Climb(problem, budget, seed, batch_size=batch_size, patience=patience,
                    heuristics=heuristics, etf_max_ops=etf_max_ops, directed=directed,
                    initial=initial, should_stop=should_stop)
    return lineage.run(budget, progress, should_stop).solution()

