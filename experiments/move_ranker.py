"""A learned move ranker for the climbs (`regal.search.advantage`): log, fit, evaluate.

Why (tracker issue 38, "move guidance"): the climbs spend nine tenths of REGAL's budget, and an
oracle that ranks `draw` x batch drawn neighbours by their true value (simulated for free) and
lets the climb evaluate only the best batch gains +1 to +3 points of peak memory over the
no-policy twin at draw 4 (`experiments/ceilings.py`). This script measures how much of that a
cheap learned ranker (numpy features of each candidate's diff from the incumbent, one linear
model per regime) keeps.

    log     climbs of the whole pipeline (`solve_seeded_brkga`) on the synthetic train split,
            both objectives (running time under a memory limit of `--limit-factor` x the
            reference heuristics' best peak), 2 and 4 devices, with a logging ranker at draw 4
            that simulates every drawn neighbour and stores its features and its true relative
            improvement over the incumbent (objective and tie-break), and returns the true
            ranks (the trajectory follows the oracle: the states a good ranker visits) or, on
            a share `--plain-share` of the steps, the drawing order (the plain climb's states);
            with `--follow WEIGHTS` that ranker's choice instead of the oracle's (the states
            it visits itself; refitting with them changed nothing, `data/policy/README.md`).
            One .npz per run in `--logs` (resumable).
    fit     standardise, fit per regime on the training graphs (linear: least squares on the
            clipped improvement, on it centred per step, on the within-step rank, logistic
            regression on "improves the incumbent"; listwise: two ReLU layers of 64 that put
            each step's best improving moves, those within `TOP_SHARE` of its best gain,
            above the rest of its draw, `_listwise`), report each
            fit's ranking quality on the held-out steps (graphs whose index is 3 mod 4: does
            the top quarter hold an improving move, overall and on the hard steps where under
            2% of the draw improves; its best improvement) against the drawing order, a random
            quarter and the oracle, refit `--method` (default listwise, chosen by the climbs
            on the validation graphs; `best`: the best held-out gain) on every graph and save
            `--weights`.
    gate    the restart gate (`MoveRanker.restart_now`): climbs of the whole pipeline with
            the ranker of `--weights` at `--log-budget` on the `--gate-train` folders (2 and
            4 devices, `--seeds`, `--gate-objectives`), logging per evaluated step the gate's
            inputs (`regal.search.advantage.gate_features`) and whether the batch improved;
            per regime a logistic fit ("improves") with its held-out quality (graphs whose
            index is 3 mod 4: AUC, and what calling off the least likely `share` of the
            steps would have lost), then refit on every step, the threshold at the
            `--gate-share` quantile of its logits; the ranker with the gates is saved to
            `--gate-out`. Steps logs go to `--gate-logs` (one .npz per run, resumable).
    eval    the twin (`solve_seeded_brkga`) against the same with `climb_options=dict(
            rank_moves=ranker, draw=4)` on the validation graphs: points = 100 x (twin -
            learned) / twin per graph from the means over seeds; one JSON line per run in
            `--records` (resumable). With `--ceilings` the oracle's own points on the same
            runs (`experiments/results/ceilings.jsonl`) are shown beside them.
    timing  the ranker's share of the wall time (time inside `rank_moves` / the run's) at
            budget 5,000 on the largest validation graph and on a ~2,000-op graph.
    cost    the policy's time (the ranker, choosing untried moves, and drawing the extra
            (draw - 1) x batch) as a share of the wall time, and the wall time of the learned
            arm over the twin's, at budget 5,000, peak memory, 2 devices (`--cost-devices`),
            on a ~2,000-op and a ~10,000-op graph (`--cost-graphs`; make the 10,000-op one with
            `python -c "from regal.synth.recipes import SplitRecipe, materialize;
            materialize(SplitRecipe('large10k', 1, 10000, 10000, 20240613), DIR)"`),
            the arms alternated `--cost-repeats` times, medians.
    equal   the learned ranker (draw 4) against the twin at equal evaluations (`--budget`
            each) and at equal wall time: the twin given the learned run's seconds, and both
            given the twin's (`time_limit`, with 10 x the budget so that the seconds bind),
            paired per graph and seed, peak memory, 2 and 4 devices; one JSON line per run
            in `--equal-records` (resumable).

    .venv/bin/regal data synth --recipe train --count 60 --out runs/move_logs/train
    python experiments/move_ranker.py all --seeds 4   # ~27 min on one busy core (2 seeds: ~16)
    python experiments/move_ranker.py cost            # ~5 min
    python experiments/move_ranker.py equal --seeds 3 # ~15 min

Defaults: one worker (`--workers`), logs at budget 3,000 (half the steps stored), both
objectives, budgets 1,000 and 5,000, 2 seeds. Results: experiments/results/move_ranker.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             non_negative_float, non_negative_int, positive_int)
from regal.files import JsonLinesWriter, read_own_rows, replacing, write_text  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.search.advantage import GATE_FEATURES, MoveRanker, network_scores  # noqa: E402
from regal.search.move_features import FEATURES, REGIMES, move_features  # noqa: E402
from regal.workers import Workers, set_numba_threads  # noqa: E402

LIMIT_FACTOR = 1.2
DRAW = 4
TRAIN = REPO / "runs/move_logs/train"
LOGS = REPO / "runs/move_logs/logs"
GATE_LOGS = REPO / "runs/move_logs/gate"
WEIGHTS = REPO / "data/policy/move_ranker.npz"
VALID = REPO / "runs/transfer_graphs/synth_valid_40"
LARGE = REPO / "runs/transfer_graphs/large_2_2000-2400/large_00000.npz"
RECORDS = REPO / "experiments/results/move_ranker.jsonl"
OUT = REPO / "experiments/results/move_ranker.md"
CEILINGS = REPO / "experiments/results/ceilings.jsonl"
EQUAL_RECORDS = REPO / "experiments/results/move_ranker_equal.jsonl"
COST_RECORDS = REPO / "experiments/results/move_ranker_cost.jsonl"
LARGE10K = REPO / "runs/transfer_graphs/large10k_1/large10k_00000.npz"
EQUAL_SECTION = "## Compiled drawing and features: the policy's cost, and equal wall time"
CLIP = 0.05          # relative improvements are clipped to +-5% for the least-squares targets
TIE = 0.1            # weight of the tie-break's relative improvement in the targets


def memory_limit(graph, devices: int, objective: str, factor: float) -> int | None:
    """As `experiments/ceilings.py`: none for peak memory; for running time `factor` x the
    reference heuristics' best peak on `devices` devices."""
    if objective == "peak_memory":
        return None
    from regal.policy.reference import reference_for
    from regal.sim import DeviceSpec

    return int(factor * reference_for(graph, DeviceSpec(devices), "peak_memory").value)


def problem_of(path, devices: int, objective: str, factor: float = LIMIT_FACTOR):
    from regal.optimizers import Problem
    from regal.sim import DeviceSpec

    graph = load_graph(path)
    limit = memory_limit(graph, devices, objective, factor)
    return Problem(graph, DeviceSpec(devices, memory_limit=limit), objective), limit


# ---------------------------------------------------------------------------
# log


def _secondary(objective: str, peaks: np.ndarray) -> np.ndarray:
    """The climb's tie-break (`regal.search.climb._secondary`)."""
    return peaks.sum(axis=1).astype(np.float64) if objective == "peak_memory" \
        else peaks.max(axis=1).astype(np.float64)


def log_run(task: dict) -> dict:
    """One logged pipeline run (a worker's call): writes task["file"], returns a summary."""
    from regal.search.move_features import incumbent_context
    from regal.search.pipeline import solve_seeded_brkga
    from regal.sim import evaluate

    problem, limit = problem_of(task["path"], task["devices"], task["objective"])
    rng = np.random.default_rng(task["seed"] + 7919)
    follow = MoveRanker.load(task["follow"]) if task.get("follow") else None
    rows: dict[str, list] = {"x": [], "r1": [], "r2": [], "regime": [], "step": []}
    steps = [0]

    def logger(climb, drawn: np.ndarray) -> np.ndarray:
        x = move_features(climb, drawn)
        values, peaks, _ = evaluate(problem.graph, problem.devices, drawn, problem.objective,
                                    return_details=True)
        secondary = _secondary(problem.objective, peaks)
        value0, secondary0 = climb.current_key
        r1 = (value0 - values) / max(abs(value0), 1e-12)
        r2 = (secondary0 - secondary) / max(abs(secondary0), 1e-12)
        regime = incumbent_context(climb).regime
        if rng.random() < task["keep"]:
            rows["x"].append(x.astype(np.float32))
            rows["r1"].append(r1.astype(np.float32))
            rows["r2"].append(r2.astype(np.float32))
            rows["regime"].append(np.full(len(drawn), regime, np.int8))
            rows["step"].append(np.full(len(drawn), steps[0], np.int32))
        steps[0] += 1
        if rng.random() < task["plain_share"]:
            return np.zeros(len(drawn))        # the drawing order: the plain climb's choice
        if follow is not None:                 # the states this ranker's own climbs visit
            return -follow.advantage(x, regime)
        ranks = np.empty(len(drawn))
        ranks[np.lexsort((secondary, values))] = np.arange(len(drawn))
        return ranks

    start = time.perf_counter()
    found = solve_seeded_brkga(problem, task["budget"], task["seed"],
                               climb_options=dict(rank_moves=logger, draw=DRAW))
    data = {key: np.concatenate(parts) if parts else np.zeros(0) for key, parts in rows.items()}
    if not rows["x"]:
        data["x"] = np.zeros((0, len(FEATURES)), np.float32)
    path = Path(task["file"])
    with replacing(path) as tmp:
        np.savez_compressed(tmp, **data, graph=task["graph"], devices=task["devices"],
                            objective=task["objective"])
    return dict(file=str(path), rows=int(len(data["r1"])), steps=steps[0],
                value=float(found.value), wall_s=time.perf_counter() - start)


def log_main(args) -> None:
    logs = args.logs[0]
    logs.mkdir(parents=True, exist_ok=True)
    paths = sorted(args.train.glob("*.npz"))[:args.train_count]
    if not paths:
        raise UserError(f"--train {args.train}: no graphs there: run `regal data synth "
                        f"--recipe train --count 60 --out {args.train}`")
    tasks = []
    for i, path in enumerate(paths):
        for objective in ("peak_memory", "makespan"):
            for devices in (2, 4):
                file = logs / f"{path.stem}_{objective}_{devices}.npz"
                if not file.exists():
                    tasks.append(dict(path=str(path), graph=args.graph_base + i,
                                      devices=devices,
                                      objective=objective, budget=args.log_budget, seed=i,
                                      keep=args.keep, plain_share=args.plain_share,
                                      follow=args.follow and str(args.follow),
                                      file=str(file)))
    print(f"log: {len(tasks)} runs to do ({len(paths)} graphs x 2 objectives x 2 device counts)",
          flush=True)
    _run_all(tasks, log_run, args.workers, lambda row: None, "log runs")


def _run_all(tasks, fn, workers: int, finish_row, desc: str) -> None:
    if not tasks:
        return
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), desc=desc, unit="run", mininterval=5)
    queue = iter(tasks)

    def start():
        task = next(queue, None)
        return None if task is None else (task, fn, task)

    def finish(task, get):
        finish_row(get())
        bar.update()

    with Workers(workers, jobs=len(tasks), ignore_interrupts=True) as pool:
        pool.run(start, finish)
    bar.close()


# ---------------------------------------------------------------------------
# fit


def load_logs(folders) -> dict:
    """Every logged row of the runs in `folders` (a folder or a list): x [N, F], r1, r2,
    regime, group (a step of one run), graph (its index: `--graph-base` keeps the graphs
    of several logging runs apart)."""
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    parts = {key: [] for key in ("x", "r1", "r2", "regime", "group", "graph")}
    group_base = 0
    for file in sorted(f for folder in folders for f in Path(folder).glob("*.npz")):
        if file.name.endswith(".tmp.npz"):
            continue
        with np.load(file) as z:
            if not len(z["r1"]):
                continue
            parts["x"].append(z["x"].astype(np.float64))
            parts["r1"].append(z["r1"].astype(np.float64))
            parts["r2"].append(z["r2"].astype(np.float64))
            parts["regime"].append(z["regime"].astype(np.int64))
            parts["group"].append(z["step"].astype(np.int64) + group_base)
            parts["graph"].append(np.full(len(z["r1"]), int(z["graph"])))
            group_base = int(parts["group"][-1].max()) + 1
    if not parts["x"]:
        raise UserError(f"--logs {' '.join(map(str, folders))}: no logs there: run the `log` "
                        "step first")
    return {key: np.concatenate(value) for key, value in parts.items()}


def _target(r1, r2):
    return np.clip(r1, -CLIP, CLIP) + TIE * np.clip(r2, -CLIP, CLIP)


def _improves(r1, r2):
    """The climb's lexicographic "strictly better than the incumbent"."""
    return (r1 > 0) | ((r1 == 0) & (r2 > 0))


# the moves a listwise fit ranks first: those that improve the incumbent by at least this share
# of the step's best improvement. Why not every improving move: on graphs of thousands of ops
# most drawn moves improve a little, and a fit to "improves" ranked the small ones as high as
# the large ones (held-out steps of 5,600-14,600-op training steps, peak memory: best gain in
# the chosen quarter 0.114 points against the drawing order's 0.069 and the oracle's 0.171;
# with this share 0.158, and level on the small graphs' steps; data/policy/README.md)
TOP_SHARE = 0.5


def _top_moves(r1, r2, group):
    """The moves a listwise fit ranks first (`TOP_SHARE`): improving ones whose relative gain
    `r1` is at least `TOP_SHARE` of the best in their step (`group`); in a step where no move
    lowers the objective, every move that improves the tie-break."""
    improves = _improves(r1, r2)
    best = np.zeros(int(group.max()) + 1 if len(group) else 0)
    np.maximum.at(best, group, np.where(improves, r1, 0.0))
    return improves & ((r1 >= TOP_SHARE * best[group]) | (best[group] <= 0))


def _group_center(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(group, return_inverse=True, return_counts=True)
    sums = np.zeros((len(counts),) + values.shape[1:])
    np.add.at(sums, inverse, values)
    return values - (sums / counts.reshape(-1, *([1] * (values.ndim - 1))))[inverse]


def _group_rank(key1, key2, group) -> np.ndarray:
    """Within-step percentile of each candidate by the true key (1 best, 0 worst; ties share)."""
    order = np.lexsort((-key2, -key1, group))      # best first within each group
    out = np.empty(len(key1))
    _, start, counts = np.unique(group[order], return_index=True, return_counts=True)
    for s, c in zip(start, counts):
        idx = order[s:s + c]
        k1, k2 = key1[idx], key2[idx]
        # dense ranks so equal keys share a percentile
        pairs = np.stack([k1, k2], axis=1)
        _, inv = np.unique(-pairs, axis=0, return_inverse=True)
        inv = inv.ravel()
        top = max(inv.max(), 1)
        out[idx] = 1.0 - inv / top
    return out


def _standardiser(x: np.ndarray):
    """(mean, scale) of the rows of `x` per column; a constant column gets scale 1."""
    scale = x.std(axis=0)
    return x.mean(axis=0), np.where(scale > 1e-12, scale, 1.0)


def _ridge(z, y, lam):
    a = z.T @ z + lam * len(y) * np.eye(z.shape[1])
    return np.linalg.solve(a, z.T @ y)


def _logistic(z, y, lam, iterations=30):
    """L2-regularised logistic regression by Newton's method: weights, bias."""
    zb = np.column_stack([z, np.ones(len(y))])
    w = np.zeros(zb.shape[1])
    reg = lam * len(y) * np.eye(zb.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(zb @ w, -30, 30)))
        grad = zb.T @ (p - y) + reg @ w
        hess = (zb * (p * (1 - p))[:, None]).T @ zb + reg + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], w[-1]


def _steps(improves, group):
    """The rows of the steps with an improving candidate, each step's rows together, and
    where each step starts among them."""
    count = np.bincount(group, weights=improves.astype(np.float64))
    keep = np.flatnonzero(count[group] > 0)
    keep = keep[np.argsort(group[keep], kind="stable")]
    _, starts = np.unique(group[keep], return_index=True)
    return keep, starts


def listwise_gradient(params: list, x, y, starts):
    """(loss, gradients) of the listwise loss for the layers `params` ([kernel, bias, ...],
    ReLU between): rows `x` ordered by step, step `starts`, `y` 1 for improving."""
    seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
    acts = [x]                                        # each layer's input
    for i in range(0, len(params), 2):
        h = acts[-1] @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = np.maximum(h, 0.0)
        acts.append(h)
    score = acts[-1][:, 0]
    top = np.maximum.reduceat(score, starts)
    e = np.exp(score - top[seg])
    total = np.add.reduceat(e, starts)
    good = np.add.reduceat(e * y, starts)
    loss = float(np.mean(np.log(total) - np.log(good)))
    # d loss / d score: (softmax over the step - softmax over its improving ones) / steps
    grad = ((e / total[seg] - y * e / good[seg]) / len(starts))[:, None]
    grads = [None] * len(params)
    for i in range(len(params) - 2, -1, -2):
        grads[i] = acts[i // 2].T @ grad
        grads[i + 1] = grad.sum(axis=0)
        if i:
            grad = (grad @ params[i].T) * (acts[i // 2] > 0)
    return loss, grads


def _listwise(z, improves, group, hidden=(64, 64), iterations=200, lr=3e-3, seed=0):
    """A ReLU network (`hidden` widths, one output) fitted listwise: over every step (`group`)
    with a candidate in `improves` (the moves to rank first: `_top_moves`), the mean of
    -log(the softmax mass of those among all its candidates), by full-batch Adam. Why
    listwise: the climb needs the rare improving move of a hard step ranked above the rest of
    that step's draw, and a fit of each move alone (logistic) is ruled by the easy steps,
    where most moves improve. Returns the layers."""
    rng = np.random.default_rng(seed)
    keep, starts = _steps(improves, group)
    x = z[keep].astype(np.float32)
    y = improves[keep].astype(np.float32)
    widths = (z.shape[1],) + tuple(hidden) + (1,)
    params = []
    for a, b in zip(widths, widths[1:]):
        gain = np.sqrt((2.0 if b > 1 else 1.0) / a)
        params += [(rng.standard_normal((a, b)) * gain).astype(np.float32),
                   np.zeros(b, np.float32)]
    moments = [(np.zeros_like(q), np.zeros_like(q)) for q in params]
    for it in range(1, iterations + 1):
        _, grads = listwise_gradient(params, x, y, starts)
        for q, g, (m, v) in zip(params, grads, moments):
            m *= 0.9
            m += 0.1 * g
            v *= 0.999
            v += 0.001 * g * g
            q -= lr * (m / (1 - 0.9 ** it)) / (np.sqrt(v / (1 - 0.999 ** it)) + 1e-8)
    return [(params[i].astype(np.float64), params[i + 1].astype(np.float64))
            for i in range(0, len(params), 2)]


FITS = ("ls_clip", "ls_centred", "ls_rank", "logistic", "listwise")
LOGISTIC_LAM = 1e-5     # ridge of the logistic fit (1e-3 and 1e-2 ranked held-out steps no better)
MIN_STEPS = 100         # a regime with fewer held-out steps borrows the nearest regime's fit
# ... where it has one. A device over its limit (makespan_over) has none: with makespan_fit's
# weights there the climbs lost to the drawing order under tight limits (validation, 4 devices,
# limit 0.9 x the heuristics' peak: -2.32 points against +1.12 with zero weights, which keep
# the drawing order), so it keeps zero weights until enough such steps are logged.
FALLBACK = {1: 0}


def fit_layers(data: dict, mask: np.ndarray, mean, scale, method: str, regime: int) -> list:
    """One regime's layers (`MoveRanker`) fitted on the rows in `mask`: a linear fit or the
    listwise network."""
    rows = mask & (data["regime"] == regime)
    if method == "listwise" and rows.sum() >= 50:
        z = (data["x"][rows] - mean) / scale
        return _listwise(z, _top_moves(data["r1"][rows], data["r2"][rows], data["group"][rows]),
                         data["group"][rows])
    w, b = fit_weights(data, mask, mean, scale, method, regime)
    return [(w[:, None], np.array([b]))]


def fit_weights(data: dict, mask: np.ndarray, mean, scale, method: str, regime: int,
                lam: float = 1e-3):
    """(weights [F], bias) for one regime from the rows in `mask` (a linear fit)."""
    rows = mask & (data["regime"] == regime)
    if rows.sum() < 50:
        return np.zeros(len(FEATURES)), 0.0
    z = (data["x"][rows] - mean) / scale
    r1, r2, group = data["r1"][rows], data["r2"][rows], data["group"][rows]
    if method == "ls_clip":
        y = _target(r1, r2)
        zc, yc = z - z.mean(axis=0), y - y.mean()
        w = _ridge(zc, yc, lam)
        return w, float(y.mean() - z.mean(axis=0) @ w)
    if method == "ls_centred":
        y = _target(r1, r2)
        return _ridge(_group_center(z, group), _group_center(y, group), lam), 0.0
    if method == "ls_rank":
        y = _group_rank(r1, r2, group)
        return _ridge(_group_center(z, group), _group_center(y, group), lam), 0.0
    if method == "logistic":
        w, b = _logistic(z, _improves(r1, r2).astype(np.float64), LOGISTIC_LAM)
        return w, float(b)
    raise ValueError(method)


HARD = 0.02     # a hard step: some but under 2% of its drawn moves improve the incumbent


def ranking_quality(data: dict, mask: np.ndarray, scores: np.ndarray, draw: int = DRAW,
                    seed: int = 0) -> dict:
    """Per held-out step: the share of steps whose chosen batch (the best-scored len/draw
    candidates; higher score = better) holds a move that improves the incumbent, and the mean
    best improvement (points, value clipped at 20%) in it; the same share over the hard steps
    (`HARD`: where a climb stalls and the choice matters); for the model, the drawing order
    (the plain climb), a random batch (10 draws) and the oracle. name -> (hit, gain, steps,
    hit on hard steps, hard steps)."""
    rng = np.random.default_rng(seed)
    rows = np.flatnonzero(mask)
    group = data["group"][rows]
    order = np.argsort(group, kind="stable")
    rows, group = rows[order], group[order]
    _, start, counts = np.unique(group, return_index=True, return_counts=True)
    stats = {name: [[], [], []] for name in ("model", "plain", "random", "oracle")}
    for s, c in zip(start, counts):
        if c < draw:
            continue
        idx = rows[s:s + c]
        q = c // draw
        r1, r2 = data["r1"][idx], data["r2"][idx]
        better = _improves(r1, r2)
        gain = np.maximum(np.minimum(r1, 0.2), 0.0) * 100
        hard = 0 < better.mean() < HARD

        def record(name, chosen):
            stats[name][0].append(float(better[chosen].any()))
            stats[name][1].append(float(gain[chosen].max()))
            if hard:
                stats[name][2].append(float(better[chosen].any()))
        record("model", np.argsort(-scores[idx], kind="stable")[:q])
        record("plain", np.arange(q))
        hits, gains = [], []
        for _ in range(10):
            chosen = rng.permutation(c)[:q]
            hits.append(float(better[chosen].any()))
            gains.append(float(gain[chosen].max()))
        stats["random"][0].append(statistics.fmean(hits))
        stats["random"][1].append(statistics.fmean(gains))
        if hard:
            stats["random"][2].append(statistics.fmean(hits))
        record("oracle", np.lexsort((-r2, -r1))[:q])

    def mean(values):
        return statistics.fmean(values) if values else float("nan")
    return {name: (mean(h), mean(g), len(h), mean(hh), len(hh))
            for name, (h, g, hh) in stats.items()}


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def fit_main(args) -> str:
    data = load_logs(args.logs)
    held = (data["graph"] % 4) == 3
    train = ~held
    mean, scale = _standardiser(data["x"][train])
    lines = [f"Logged rows: {len(data['r1']):,} in {len(np.unique(data['group'])):,} steps "
             f"({int(train.sum()):,} rows on training graphs, {int(held.sum()):,} held out: "
             "graphs whose index is 3 mod 4). Improving share per regime: " + ", ".join(
                 f"{REGIMES[g]} {_improves(data['r1'], data['r2'])[data['regime'] == g].mean():.3f}"
                 f" of {int((data['regime'] == g).sum()):,}"
                 for g in range(len(REGIMES)) if (data["regime"] == g).any()) + ".", ""]
    cells, chosen = [], {}
    z = (data["x"] - mean) / scale
    for regime in range(len(REGIMES)):
        mask = held & (data["regime"] == regime)
        if len(np.unique(data["group"][mask])) < MIN_STEPS:
            continue
        best = None
        for method in FITS:
            quality = ranking_quality(data, mask, network_scores(
                fit_layers(data, train, mean, scale, method, regime), z))
            if method == FITS[0]:
                for name in ("plain", "random", "oracle"):
                    hit, gain, steps, hard_hit, hard_steps = quality[name]
                    cells.append([REGIMES[regime], name, steps, f"{hit:.3f}", f"{gain:.3f}",
                                  f"{hard_hit:.3f}", hard_steps])
            hit, gain, steps, hard_hit, hard_steps = quality["model"]
            cells.append([REGIMES[regime], method, steps, f"{hit:.3f}", f"{gain:.3f}",
                          f"{hard_hit:.3f}", hard_steps])
            if best is None or gain > best[1]:
                best = (method, gain)
        chosen[regime] = best[0] if args.method == "best" else args.method
    lines += markdown_table(["regime", "batch chosen by", "held-out steps",
                             "P(batch holds an improving move)",
                             "mean best gain in batch (pts)",
                             f"P(...) on hard steps (under {HARD:.0%} improve)", "hard steps"],
                            cells, "llrrrrr")
    how = "best held-out gain" if args.method == "best" else f"`--method {args.method}`"
    lines += ["", f"Chosen per regime ({how}): " + ", ".join(
        f"{REGIMES[g]}: {m}" for g, m in chosen.items()) + "."]
    # refit the chosen methods on every graph and save
    mean_all, scale_all = _standardiser(data["x"])
    layers = [[(np.zeros((len(FEATURES), 1)), np.zeros(1))] for _ in REGIMES]
    everything = np.ones(len(data["r1"]), bool)
    borrowed = {}
    for regime in range(len(REGIMES)):
        source = regime
        while source not in chosen and source in FALLBACK:
            source = FALLBACK[source]
        if source not in chosen:
            continue
        if source != regime:
            borrowed[REGIMES[regime]] = REGIMES[source]
        layers[regime] = fit_layers(data, everything, mean_all, scale_all, chosen[source],
                                    source)
    if borrowed:
        lines += ["", "Too few held-out steps to fit on their own (under "
                  f"{MIN_STEPS}), so they take another regime's weights: " + ", ".join(
                      f"{a} <- {b}" for a, b in borrowed.items()) + "."]
    unfitted = [REGIMES[g] for g in range(len(REGIMES))
                if g not in chosen and REGIMES[g] not in borrowed]
    if unfitted:
        lines += ["", f"Too few held-out steps and no regime to borrow from: {', '.join(unfitted)} "
                  "keep zero weights (every move scores alike: the drawing order)."]
    ranker = MoveRanker(layers, mean_all, scale_all,
                        meta=json.dumps(dict(fits={REGIMES[g]: m for g, m in chosen.items()},
                                             borrowed=borrowed,
                                             rows=int(len(data["r1"])), draw=DRAW,
                                             made_by="experiments/move_ranker.py fit")))
    ranker.save(args.weights)
    lines += ["", f"Weights saved to `{_shown(args.weights)}`: per regime, layer widths " +
              ", ".join(f"{REGIMES[g]} " + " -> ".join(
                  [str(len(FEATURES))] + [str(len(bias)) for _, bias in regime])
                  for g, regime in enumerate(layers)) + " (standardised features in, the "
              "advantage out, higher = better)."]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------
# gate


class _GateLogger:
    """A `rank_moves` that ranks with `ranker` and, through `restart_now` (which never calls a
    step off), keeps each step's gate inputs; the climb's `last_improved` at its next step
    is the label (a kick comes only after a step without improvement, so it stays right)."""

    def __init__(self, ranker) -> None:
        self.ranker, self.rows = ranker, []

    def __call__(self, climb, drawn):
        return self.ranker(climb, drawn)

    rank_drawn = __call__

    def restart_now(self, climb, scores, count) -> bool:
        from regal.search.advantage import gate_features

        pending = getattr(climb, "_gate_pending", None)
        if pending is not None:
            self.rows.append(np.r_[pending, float(climb.last_improved)])
        climb._gate_pending = np.r_[gate_features(climb, scores, count),
                                    climb._advantage_context.regime]
        return False


def gate_log_run(task: dict) -> dict:
    """One logged run for the gate (a worker's call): writes task["file"]."""
    from regal.search.pipeline import solve_seeded_brkga

    problem, _ = problem_of(task["path"], task["devices"], task["objective"])
    logger = _GateLogger(MoveRanker.load(task["weights"]))
    solve_seeded_brkga(problem, task["budget"], task["seed"],
                       climb_options=dict(rank_moves=logger, draw=DRAW))
    rows = np.array(logger.rows) if logger.rows else np.zeros((0, len(GATE_FEATURES) + 2))
    path = Path(task["file"])
    with replacing(path) as tmp:
        np.savez_compressed(tmp, rows=rows, graph=task["graph"])
    return dict(file=str(path), rows=len(rows))


def _auc(score: np.ndarray, label: np.ndarray) -> float:
    """P(a random positive scores above a random negative), ties half."""
    from scipy.stats import rankdata

    pos = label > 0
    ranks = rankdata(score)
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / max(n1 * n0, 1))


def gate_main(args) -> str:
    tasks = []
    args.gate_logs.mkdir(parents=True, exist_ok=True)
    for f, folder in enumerate(args.gate_train):
        for i, path in enumerate(sorted(folder.glob("*.npz"))):
            for objective in args.gate_objectives:
                for devices in (2, 4):
                    for seed in range(args.seeds):
                        file = args.gate_logs / f"{folder.name}_{path.stem}_{objective}_{devices}_{seed}.npz"
                        if not file.exists():
                            tasks.append(dict(path=str(path), graph=1000 * f + i,
                                              devices=devices, objective=objective,
                                              budget=args.log_budget, seed=seed,
                                              weights=str(args.weights), file=str(file)))
    print(f"gate: {len(tasks)} runs to log", flush=True)
    _run_all(tasks, gate_log_run, args.workers, lambda row: None, "gate runs")
    parts, graphs = [], []
    for file in sorted(args.gate_logs.glob("*.npz")):
        if file.name.endswith(".tmp.npz"):
            continue
        with np.load(file) as z:
            if len(z["rows"]):
                parts.append(z["rows"])
                graphs.append(np.full(len(z["rows"]), int(z["graph"])))
    if not parts:
        raise UserError(f"--gate-logs {args.gate_logs}: no gate logs there")
    rows, graph = np.concatenate(parts), np.concatenate(graphs)
    G = len(GATE_FEATURES)
    x, regime, label = rows[:, :G], rows[:, G].astype(int), rows[:, G + 1]
    held = graph % 4 == 3
    ranker = MoveRanker.load(args.weights)
    gates = [None] * len(REGIMES)
    cells = []
    for g, name in enumerate(REGIMES):
        mask = regime == g
        if name not in args.gate_regimes or (mask & held).sum() < MIN_STEPS \
                or len(np.unique(label[mask & ~held])) < 2:
            continue
        train = mask & ~held
        mean, scale = _standardiser(x[train])
        w, b = _logistic((x[train] - mean) / scale, label[train], LOGISTIC_LAM, iterations=50)
        logit = (x[mask & held] - mean) / scale @ w + b
        y = label[mask & held]
        order = np.argsort(logit, kind="stable")
        losses = []
        for share in (0.1, 0.2, 0.3, 0.4):
            off = order[:int(share * len(order))]
            losses.append(f"{y[off].sum() / max(y.sum(), 1):.2f}")
        cells.append([name, int(train.sum()), int((mask & held).sum()), f"{y.mean():.3f}",
                      f"{_auc(logit, y):.3f}", *losses])
        mean, scale = _standardiser(x[mask])                       # refit on every step
        w, b = _logistic((x[mask] - mean) / scale, label[mask], LOGISTIC_LAM, iterations=50)
        logits = (x[mask] - mean) / scale @ w + b
        gates[g] = dict(mean=mean, scale=scale, coef=w, bias=np.array([b]),
                        threshold=np.array([np.quantile(logits, args.gate_share)]))
    meta = json.loads(ranker.meta) if ranker.meta.startswith("{") else {"ranker": ranker.meta}
    meta["gate"] = dict(regimes=[REGIMES[g] for g in range(len(REGIMES)) if gates[g]],
                        share=args.gate_share, steps=int(len(rows)),
                        made_by="experiments/move_ranker.py gate")
    out = MoveRanker(ranker.layers, ranker.mean, ranker.scale, json.dumps(meta), gates)
    out.save(args.gate_out)
    lines = [f"Logged steps: {len(rows):,} ({int(held.sum()):,} on held-out graphs), from "
             f"{len(parts)} runs with the ranker of `{_shown(args.weights)}` at "
             f"{args.log_budget:,} evaluations.", ""]
    lines += markdown_table(["regime", "training steps", "held-out steps",
                             "held-out share that improves", "held-out AUC",
                             "improving steps lost calling off the least likely 10%", "20%",
                             "30%", "40%"], cells, "lrrrrrrrr")
    lines += ["", "Gate weights (standardised inputs, refit on every step): " + "; ".join(
        f"{REGIMES[g]}: " + ", ".join(f"{n} {c:+.2f}" for n, c in zip(GATE_FEATURES, gate["coef"]))
        + f", threshold {float(gate['threshold'][0]):+.3f} (the {args.gate_share:.0%} quantile "
        "of its logits)" for g, gate in enumerate(gates) if gate is not None) + ".",
        "", f"Saved to `{_shown(args.gate_out)}` (the ranker's layers unchanged)."]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------
# eval


ARMS = ("twin", "learned", "placebo")


def draw_order(climb, drawn) -> np.ndarray:
    """The placebo ranker: keeps the drawing order, so the climb evaluates the first batch of
    the `DRAW` x batch drawn (each distinct move once, as with any ranker); the plain climb,
    with other random draws (the noise floor of a paired comparison with the twin)."""
    return np.zeros(len(drawn))


draw_order.rank_drawn = draw_order     # reads the drawn writes: no chromosome made to rank


def eval_run(task: dict) -> dict:
    """One run of one arm: twin, learned or placebo."""
    from regal.search.pipeline import solve_seeded_brkga

    problem, limit = problem_of(task["path"], task["devices"], task["objective"],
                                task["factor"])
    options = {}
    ranker = None
    if task["arm"] == "learned":
        ranker = MoveRanker.load(task["weights"])
        options["climb_options"] = dict(rank_moves=ranker, draw=DRAW)
    elif task["arm"] == "placebo":
        options["climb_options"] = dict(rank_moves=draw_order, draw=DRAW)
    start = time.perf_counter()
    found = solve_seeded_brkga(problem, task["budget"], task["seed"], **options)
    wall = time.perf_counter() - start
    return dict(task, value=float(found.value), evaluations=int(found.evaluations),
                wall_s=wall, ranker_s=0.0 if ranker is None else ranker.elapsed,
                limit=limit, ops=problem.graph.num_nodes)


def _key(row: dict) -> tuple:
    return (Path(row["path"]).name, row["devices"], row["objective"], row["budget"],
            row["seed"], row["arm"], row.get("weights_id", "") if row["arm"] == "learned" else "")


def weights_id(path: Path) -> str:
    """A hash of a weights file's numbers (not its bytes: a zip stores its time of writing):
    learned runs of other weights are not reused."""
    import hashlib

    h = hashlib.blake2b(digest_size=6)
    for values in MoveRanker.load(path).numbers():
        h.update(np.ascontiguousarray(values, np.float64).tobytes())
    return h.hexdigest()


def points(twin: float, other: float) -> float:
    return 100.0 * (twin - other) / twin


def table(rows: list[dict], oracle: list[dict]) -> str:
    by: dict = {}
    for r in rows:
        by.setdefault((r["objective"], r["devices"], r["budget"]), {}) \
          .setdefault(Path(r["path"]).name, {}).setdefault(r["arm"], {})[r["seed"]] = r
    # the oracle's values from the ceilings records, keyed like ours
    oracle_by: dict = {}
    for r in oracle:
        if r.get("arm") == "move-oracle-4" and r.get("factor", LIMIT_FACTOR) == LIMIT_FACTOR:
            oracle_by[(r["objective"], r["devices"], r["budget"], Path(r["path"]).name,
                       r["seed"])] = r["value"]
    cells = []
    pooled: dict = {}       # objective -> arm -> per-graph points, every device count and budget
    for (objective, devices, budget), graphs in sorted(by.items()):
        per_graph: dict = {}
        for arm in ARMS[1:]:
            gains, oracle_gains, share, slower, counts = [], [], [], [], []
            for name, arms in sorted(graphs.items()):
                twin, other = arms.get("twin", {}), arms.get(arm, {})
                seeds = sorted(set(twin) & set(other))
                if not seeds or set(twin) != set(other):
                    continue
                t = statistics.fmean(twin[s]["value"] for s in seeds)
                gains.append(points(t, statistics.fmean(other[s]["value"] for s in seeds)))
                per_graph.setdefault(arm, {})[name] = gains[-1]
                counts.append(len(seeds))
                share.extend(other[s]["ranker_s"] / other[s]["wall_s"] for s in seeds)
                slower.extend(other[s]["wall_s"] / twin[s]["wall_s"] for s in seeds)
                # the oracle on the seeds it was run with, against the twin on the same seeds
                both = [s for s in seeds if (objective, devices, budget, name, s) in oracle_by]
                if both:
                    oracle_gains.append(points(
                        statistics.fmean(twin[s]["value"] for s in both),
                        statistics.fmean(oracle_by[(objective, devices, budget, name, s)]
                                         for s in both)))
            if not gains:
                continue
            oracle_text = f"{statistics.fmean(oracle_gains):+.2f} ({len(oracle_gains)})" \
                if oracle_gains else "-"
            cells.append([objective, devices, budget, arm, len(gains), min(counts),
                          f"{statistics.fmean(gains):+.2f} ± {_se(gains):.2f}",
                          f"{statistics.median(gains):+.2f}",
                          f"{min(gains):+.2f}", f"{max(gains):+.2f}",
                          sum(g >= 0.5 for g in gains), sum(g <= -0.5 for g in gains),
                          oracle_text, f"{100 * statistics.fmean(share):.1f}%",
                          f"{statistics.fmean(slower):.2f}x"])
        for arm, values in per_graph.items():
            pooled.setdefault(objective, {}).setdefault(arm, []).extend(values.values())
        if "learned" in per_graph and "placebo" in per_graph:
            common = sorted(set(per_graph["learned"]) & set(per_graph["placebo"]))
            pooled[objective].setdefault("learned - placebo", []).extend(
                per_graph["learned"][g] - per_graph["placebo"][g] for g in common)
    lines = markdown_table(
        ["objective", "devices", "budget", "arm", "graphs", "seeds", "mean pts ± se",
         "median pts", "min", "max", "graphs >= +0.5", "graphs <= -0.5",
         "oracle-4 mean pts (graphs)", "ranker time share", "wall / twin's"], cells,
        "lrrlrrrrrrrrrrr")
    lines += ["", "Pooled over device counts and budgets (one value per graph and setting; "
              "± the standard error over them):", ""]
    lines += markdown_table(["objective", "arm", "values", "mean pts ± se"], [
        [objective, arm, len(values), f"{statistics.fmean(values):+.2f} ± {_se(values):.2f}"]
        for objective, arms in sorted(pooled.items()) for arm, values in arms.items()],
        "llrr")
    return "\n".join(lines) + "\n"


def _se(values) -> float:
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def eval_main(args) -> str:
    writer = JsonLinesWriter(args.records, f"{args.records} is being written by another run")
    try:
        done = {_key(row): row for row in read_records("--records", args.records, EVAL_FIELDS)}
    except BaseException:
        writer.close()
        raise
    paths = sorted(args.valid.glob("*.npz"))[:args.valid_count]
    current = weights_id(args.weights)
    tasks = []
    for budget in args.budgets:
        for objective in args.objectives:
            for devices in (2, 4):
                for path in paths:
                    for seed in range(args.seeds):
                        for arm in args.arms:
                            task = dict(path=str(path), devices=devices, objective=objective,
                                        budget=budget, seed=seed, arm=arm,
                                        factor=LIMIT_FACTOR, weights=str(args.weights),
                                        weights_id=current)
                            if _key(task) not in done:
                                tasks.append(task)
    print(f"eval: {len(tasks)} runs to do", flush=True)

    def finish(row):
        writer.write(row)
        done[_key(row)] = row
    try:
        _run_all(tasks, eval_run, args.workers, finish, "eval runs")
    finally:
        writer.close()
    oracle = []
    if args.ceilings:
        oracle = read_records("--ceilings", args.ceilings, CEILINGS_FIELDS, cut=False)
        oracle = [r for r in oracle if r.get("set") == args.valid.name]
    rows = [r for r in done.values() if Path(r["path"]).parent.name == args.valid.name
            and (r["arm"] != "learned" or r.get("weights_id") == current)]
    refuse_empty(rows, f"--records {args.records} (no runs on --valid {args.valid.name})")
    text = ("Points: 100 x (twin - arm) / twin per graph from the means over seeds (positive: "
            f"the arm is better); learned = the same pipeline with `rank_moves=MoveRanker`, "
            f"draw {DRAW}; placebo = draw {DRAW} in drawing order (the plain climb with other "
            f"random draws: the noise floor); first {args.valid_count} graphs of "
            f"`{args.valid.name}` (seeds: how many per graph); running time under a limit of "
            "1.2 x the reference heuristics' best peak. oracle-4: the free-simulation ranker "
            "at the same draw (`experiments/results/ceilings.jsonl`, on the graphs and seeds "
            "it has, against the twin on those seeds). "
            "Ranker time share: seconds inside the ranker / the run's wall seconds; wall / "
            "twin's: the run's wall seconds over the twin's (means over runs; drawing 4 x the "
            "neighbours costs time of its own).\n\n"
            + table(rows, oracle))
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------
# timing


def timing_main(args) -> str:
    from regal.search.pipeline import solve_seeded_brkga

    candidates = sorted(args.valid.glob("*.npz"))
    largest = max(candidates, key=lambda p: load_graph(p).num_nodes)
    cells = []
    for path in (largest, args.large):
        if not Path(path).is_file():
            continue
        problem, _ = problem_of(path, 2, "peak_memory")
        start = time.perf_counter()
        twin = solve_seeded_brkga(problem, 5000, 0)
        twin_wall = time.perf_counter() - start
        ranker = MoveRanker.load(args.weights)
        start = time.perf_counter()
        learned = solve_seeded_brkga(problem, 5000, 0,
                                     climb_options=dict(rank_moves=ranker, draw=DRAW))
        wall = time.perf_counter() - start
        cells.append([f"{Path(path).parent.name}/{Path(path).name}", problem.graph.num_nodes,
                      f"{twin_wall:.2f}", f"{wall:.2f}", f"{ranker.elapsed:.2f}",
                      f"{100 * ranker.elapsed / wall:.1f}%", ranker.calls,
                      f"{twin.value:.0f}", f"{learned.value:.0f}"])
    text = ("Budget 5,000, peak memory, 2 devices, seed 0, one process (numba on 1 thread):\n\n"
            + "\n".join(markdown_table(
                ["graph", "ops", "twin wall s", "learned wall s", "in ranker s",
                 "ranker share", "ranker calls", "twin value", "learned value"], cells,
                "lrrrrrrrr")) + "\n")
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------
# cost: the policy's share of the wall time, and the wall time against the twin's


class _Clock:
    """Seconds spent in `Moves.draw` and `Climb._untried_first` while installed (a context)."""

    def __enter__(self):
        from regal.search.climb import Climb
        from regal.search.moves import Moves

        self.draw_s = self.untried_s = 0.0
        self.saved = [(Moves, "draw", Moves.draw), (Climb, "_untried_first",
                                                    Climb._untried_first)]
        clock = self

        def timed(fn, field):
            def wrapper(*a, **k):
                start = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    setattr(clock, field, getattr(clock, field) + time.perf_counter() - start)
            return wrapper
        Moves.draw = timed(Moves.draw, "draw_s")
        Climb._untried_first = timed(Climb._untried_first, "untried_s")
        return self

    def __exit__(self, *exc):
        for owner, name, fn in self.saved:
            setattr(owner, name, fn)


def cost_run(path, arm: str, budget: int, seed: int, weights, devices: int = 2) -> dict:
    """One timed run (peak memory): wall and CPU seconds, and for the learned arm
    the policy's seconds: the ranker's, choosing untried moves, and (draw - 1) / draw of
    the drawing (the neighbours drawn only to be ranked)."""
    from regal.search.pipeline import solve_seeded_brkga

    problem, _ = problem_of(path, devices, "peak_memory")
    options, ranker = {}, None
    if arm == "learned":
        ranker = MoveRanker.load(weights)
        options["climb_options"] = dict(rank_moves=ranker, draw=DRAW)
    with _Clock() as clock:
        cpu, start = time.process_time(), time.perf_counter()
        found = solve_seeded_brkga(problem, budget, seed, **options)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    ranker_s = 0.0 if ranker is None else ranker.elapsed
    extra_draw = clock.draw_s * (DRAW - 1) / DRAW if ranker is not None else 0.0
    import numba

    return dict(graph=f"{Path(path).parent.name}/{Path(path).name}",
                ops=problem.graph.num_nodes, devices=devices, arm=arm, budget=budget,
                threads=numba.get_num_threads(),
                seed=seed, wall_s=wall, cpu_s=cpu, value=float(found.value), draw_s=clock.draw_s,
                ranker_s=ranker_s, untried_s=clock.untried_s,
                policy_s=ranker_s + clock.untried_s + extra_draw)


def cost_main(args) -> str:
    """Both arms on each graph, alternated `--cost-repeats` times after one warm-up each
    (numba's code loaded), one process; medians over the repeats."""
    rows = []
    run = time.strftime("%Y-%m-%dT%H:%M:%S")
    graphs = [Path(p) for p in args.cost_graphs if Path(p).is_file()]
    missing = [str(p) for p in args.cost_graphs if not Path(p).is_file()]
    if missing:
        print(f"cost: skipping missing graphs {missing}", flush=True)
    from tqdm import tqdm

    # each row is written as it is made: a kill keeps the repeats done
    with JsonLinesWriter(args.cost_records, f"{args.cost_records} is being written") as writer:
        read_records("--cost-records", args.cost_records, COST_FIELDS)   # refused if not ours
        bar = tqdm(total=len(graphs) * len(args.cost_devices) * (1 + args.cost_repeats),
                   desc="cost runs (pairs)", unit="pair", disable=None)
        for path, devices in itertools.product(graphs, args.cost_devices):
            for arm in ("twin", "learned"):
                cost_run(path, arm, 300, 0, args.weights, devices)           # warm-up
            bar.update()
            for repeat in range(args.cost_repeats):
                for arm in ("twin", "learned"):
                    row = cost_run(path, arm, args.budget, 0, args.weights, devices)
                    row.update(repeat=repeat, run=run)
                    writer.write(row)
                    bar.write(json.dumps(row), file=sys.stdout)
                    rows.append(row)
                bar.update()
        bar.close()
    return cost_table(rows)


def cost_table(rows: list[dict]) -> str:
    by: dict = {}
    for r in rows:
        by.setdefault((r["graph"], r["ops"], r.get("devices", 2)), {}) \
            .setdefault(r["arm"], []).append(r)
    cells = []
    for (graph, ops, devices), arms in sorted(by.items(), key=lambda item: item[0][1:]):
        twin, learned = arms.get("twin", []), arms.get("learned", [])
        if not twin or not learned:
            continue
        med = statistics.median
        share = [r["policy_s"] / r["wall_s"] for r in learned]
        cells.append([graph, ops, devices, len(learned), f"{med(r['wall_s'] for r in twin):.2f}",
                      f"{med(r['wall_s'] for r in learned):.2f}",
                      f"{med(r['ranker_s'] for r in learned):.3f}",
                      f"{med(r['untried_s'] for r in learned):.3f}",
                      f"{med(r['draw_s'] for r in learned):.3f}",
                      f"{100 * med(share):.1f}%",
                      f"{med(a['wall_s'] / b['wall_s'] for a, b in zip(learned, twin)):.2f}x",
                      f"{med(a['cpu_s'] / b['cpu_s'] for a, b in zip(learned, twin)):.2f}x",
                      f"{twin[0]['value']:.0f}", f"{learned[0]['value']:.0f}"])
    return "\n".join(markdown_table(
        ["graph", "ops", "devices", "repeats", "twin wall s", "learned wall s", "ranker s",
         "untried s", "drawing s (all)", "policy share of wall", "wall learned / twin",
         "CPU learned / twin", "twin value", "learned value"], cells,
        "lrrrrrrrrrrrrr")) + "\n"


# ---------------------------------------------------------------------------
# equal: the learned ranker against the twin at equal evaluations and at equal wall time


EQUAL_ARMS = ("twin", "learned", "twin@learned_s", "twin@twin_s", "learned@twin_s")


def equal_run(task: dict) -> dict:
    """One run: `twin` / `learned` at `budget` evaluations; `X@Y_s` arm X with arm Y's wall
    seconds at `budget` evaluations (`seconds`: same graph, device count and seed) and 10 x the
    budget, so that the seconds bind: `twin@learned_s` the twin given the learned run's time;
    `twin@twin_s` and `learned@twin_s` both given the twin's (a time limit changes how the
    pipeline splits its work, so only two timed runs compare like with like)."""
    from regal.search.pipeline import solve_seeded_brkga

    problem, _ = problem_of(task["path"], task["devices"], "peak_memory")
    options, ranker = {}, None
    if task["arm"].startswith("learned"):
        ranker = MoveRanker.load(task["weights"])
        options["climb_options"] = dict(rank_moves=ranker, draw=DRAW)
    budget = task["budget"]
    if "@" in task["arm"]:
        options["time_limit"] = task["seconds"]
        budget = 10 * budget
    cpu, start = time.process_time(), time.perf_counter()
    found = solve_seeded_brkga(problem, budget, task["seed"], **options)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return dict(task, value=float(found.value), evaluations=int(found.evaluations),
                wall_s=wall, cpu_s=cpu, ranker_s=0.0 if ranker is None else ranker.elapsed,
                ops=problem.graph.num_nodes)


def _equal_key(row: dict) -> tuple:
    return (Path(row["path"]).parent.name, Path(row["path"]).name, row["devices"],
            row["budget"], row["seed"], row["arm"], row.get("weights_id", ""))


def equal_main(args) -> str:
    writer = JsonLinesWriter(args.equal_records, f"{args.equal_records} is being written")
    try:
        done = {_equal_key(row): row
                for row in read_records("--equal-records", args.equal_records, EQUAL_FIELDS)}
    except BaseException:
        writer.close()
        raise
    current = weights_id(args.weights)
    paths = sorted(args.valid.glob("*.npz"))[:args.valid_count] + \
        [Path(p) for p in args.equal_large if Path(p).is_file()]

    def task(path, devices, seed, arm, seconds=None):
        return dict(path=str(path), devices=devices, budget=args.budget, seed=seed, arm=arm,
                    weights=str(args.weights), weights_id=current, seconds=seconds)

    def finish(row):
        writer.write(row)
        done[_equal_key(row)] = row
    if args.workers == 1 and paths:          # numba's code loaded before any timed run
        for arm in ("twin", "learned"):
            equal_run(dict(task(paths[0], 2, 0, arm), budget=300))
    try:
        # first the runs at equal evaluations, then the timed ones (they need those seconds)
        for stage in (("twin", "learned"), ("twin@learned_s", "twin@twin_s", "learned@twin_s")):
            tasks = []
            for path in paths:
                for devices in (2, 4):
                    for seed in range(args.seeds):
                        for arm in stage:
                            seconds = None
                            if "@" in arm:
                                other = arm.split("@")[1][:-len("_s")]
                                source = done.get(_equal_key(task(path, devices, seed, other)))
                                if source is None:
                                    continue
                                seconds = source["wall_s"]
                            t = task(path, devices, seed, arm, seconds)
                            if _equal_key(t) not in done:
                                tasks.append(t)
            print(f"equal: {len(tasks)} runs to do ({', '.join(stage)})", flush=True)
            _run_all(tasks, equal_run, args.workers, finish, "equal runs")
    finally:
        writer.close()
    rows = [r for r in done.values() if r.get("weights_id") == current
            and r["budget"] == args.budget]
    return equal_table(rows)


def equal_table(rows: list[dict]) -> str:
    by: dict = {}
    for r in rows:
        group = "synth_valid_40[:16]" if Path(r["path"]).parent.name == VALID.name \
            else Path(r["path"]).parent.name
        by.setdefault((group, r["devices"]), {}).setdefault(Path(r["path"]).name, {}) \
          .setdefault(r["seed"], {})[r["arm"]] = r
    cells = []
    comparisons = (("equal evaluations", "twin", "learned"),
                   ("equal wall: twin given learned's seconds", "twin@learned_s", "learned"),
                   ("equal wall: both given twin's seconds", "twin@twin_s", "learned@twin_s"))
    for (group, devices), graphs in sorted(by.items()):
        for label, base, arm in comparisons:
            gains, seeds_used, ratio, evals = [], [], [], []
            for name, seeds in sorted(graphs.items()):
                both = [s for s, arms in seeds.items() if base in arms and arm in arms]
                if not both:
                    continue
                b = statistics.fmean(seeds[s][base]["value"] for s in both)
                a = statistics.fmean(seeds[s][arm]["value"] for s in both)
                gains.append(points(b, a))
                seeds_used.append(len(both))
                ratio.extend(seeds[s][arm]["wall_s"] / seeds[s][base]["wall_s"] for s in both)
                evals.extend(seeds[s][x]["evaluations"] for s in both for x in (base, arm)
                             if "@" in x)
            if not gains:
                continue
            spread = f" ± {_se(gains):.2f}" if len(gains) > 1 else ""
            cells.append([group, devices, label, len(gains), min(seeds_used),
                          f"{statistics.fmean(gains):+.2f}{spread}",
                          f"{statistics.median(gains):+.2f}", f"{min(gains):+.2f}",
                          f"{max(gains):+.2f}", sum(g > 0 for g in gains),
                          sum(g < 0 for g in gains), f"{statistics.median(ratio):.2f}x",
                          f"{statistics.median(evals):.0f}" if evals else "-"])
    return "\n".join(markdown_table(
        ["graphs", "devices", "comparison", "graphs", "seeds", "mean pts ± se", "median",
         "min", "max", "graphs ahead", "graphs behind", "wall arm / base (median)",
         "evaluations of the timed arm (median)"], cells, "lrlrrrrrrrrrr")) + "\n"


def equal_section(args) -> str:
    """The section `cost` and `equal` write into `--out`, from their records (the latest
    `cost` run; every `equal` run of the current weights and budget)."""
    by_threads: dict = {}                     # the latest run on each number of threads
    for r in read_records("--cost-records", args.cost_records, COST_FIELDS):
        by_threads.setdefault(r.get("threads", 1), []).append(r)
    cost_tables = []
    for threads, rows in sorted(by_threads.items()):
        latest = max(r.get("run", "") for r in rows)
        cost_tables.append(f"Numba on {threads} thread{'s' if threads > 1 else ''} "
                           f"(`--workers {threads}`, run {latest}):\n\n"
                           + cost_table([r for r in rows if r.get("run", "") == latest]))
    current = weights_id(args.weights)
    equal_rows = [r for r in read_records("--equal-records", args.equal_records, EQUAL_FIELDS)
                  if r.get("weights_id") == current and r["budget"] == args.budget]
    return ("Made by `python experiments/move_ranker.py cost` and `... equal` (commands in "
            "the notes below; one process, numba on one thread unless said, on a machine shared with other "
            "jobs: wall times are noisy). The climbs draw their neighbours compiled, as writes "
            "to the incumbent's keys (`regal.search.draw_kernel`; the same draws as before, so "
            "the twin's answers are unchanged); the ranker reads the writes (features over the "
            "changed ops only, compiled) and the climb evaluates each distinct move once per "
            "incumbent (before, half of the learned arm's choices were its earlier choices "
            "again).\n\n"
            f"### Cost: budget {args.budget:,}, peak memory, seed 0\n\n"
            "Policy = the ranker + choosing untried moves + (draw - 1) / draw of the drawing "
            "(the neighbours drawn only to be ranked); medians over the alternated repeats, "
            "after a warm-up run of each arm (numba's compiled code loaded). The learned arm "
            "is the twin with the ranker and its restart gate (no BRKGA prior). Its wall "
            "over the twin's is more than the policy's share: a step called off by the gate "
            "costs its ranking and a restart (a kick and a new trace) but no evaluation, and "
            "the learned arm takes more improving steps, each traced anew. On several threads "
            "the simulator's batches run on all of them, and on graphs of 2,000 ops or more "
            "the ranker's features too (`regal.search.move_features.LANE_OPS`); the rest of "
            "the policy runs on one.\n\n"
            + "\n".join(cost_tables) + "\n"
            f"### Learned (draw {DRAW}) against the twin, budget {args.budget:,}, peak memory\n\n"
            "Points = 100 x (base - arm) / base per graph from the means over seeds (positive: "
            "the learned arm is better). Equal wall: a timed run gets the wall seconds that "
            "the named arm took at the budget on the same graph, device count and seed "
            "(`time_limit`, 10 x the budget so that the seconds bind); \"twin given learned's "
            "seconds\" compares that timed twin with the learned run itself, \"both given "
            "twin's seconds\" two timed runs (a time limit changes how the pipeline splits "
            "its work: BRKGA by its share of the seconds, the race by its shares of them). "
            "Wall arm / base: the runs' wall seconds; evaluations: what the timed runs spent "
            "(median).\n\n" + (equal_table(equal_rows) if equal_rows else
                                  "Not run for these weights yet (`python "
                                  "experiments/move_ranker.py equal --seeds 3`); "
                                  "`experiments/results/equal_time.md` has `regal` with them "
                                  "against every method at equal wall time.\n"))


def read_records(flag: str, path: Path, fields: tuple, cut: bool = True) -> list[dict]:
    """The rows of a JSON-lines records file, `regal.files.read_own_rows` (`cut` false for
    another script's file, `--ceilings`: its torn last line is left out, not cut)."""
    return read_own_rows(path, fields, flag, cut=cut)


# what tells this script's records apart (a ceilings run has no `weights` nor `ranker_s`)
EVAL_FIELDS = ("path", "devices", "objective", "budget", "seed", "arm", "value", "weights",
               "ranker_s")
EQUAL_FIELDS = ("path", "devices", "budget", "seed", "arm", "value", "weights", "ranker_s",
                "cpu_s")
COST_FIELDS = ("graph", "ops", "arm", "wall_s", "policy_s", "untried_s")
CEILINGS_FIELDS = ("arm", "objective", "devices", "budget", "path", "seed", "value")


def _replace_section(path: Path, title: str, body: str) -> None:
    """`path` with the section `title` (up to the next "## ") set to `body` (added at the end
    when absent)."""
    text = path.read_text() if path.is_file() else ""
    block = f"{title}\n\n{body.rstrip()}\n"
    if title in text:
        start = text.index(title)
        end = text.find("\n## ", start + len(title))
        text = text[:start] + block + ("" if end < 0 else text[end:])
    else:
        text = text.rstrip() + "\n\n" + block
    write_text(path, text)


def _graph_folder(flag: str, folder: Path) -> None:
    if not Path(folder).is_dir():
        raise UserError(f"{flag} {folder}: no such folder")
    if not any(Path(folder).glob("*.npz")):
        raise UserError(f"{flag} {folder}: no .npz graph files in this folder")


def check_arguments(parser, args) -> None:
    """Every input the step reads and every output it writes, checked before any work: a
    mistake is one line naming the flag (exit code 2), and no section of `--out` is
    replaced by an empty one."""
    step = args.step
    for name in ("keep", "plain_share", "gate_share"):
        if getattr(args, name) > 1:
            parser.error(f"--{name.replace('_', '-')}: expected a share in 0..1, "
                         f"got {getattr(args, name)}")
    try:
        check_device_counts(argparse.Namespace(devices=args.cost_devices))
    except ValueError as exc:
        raise UserError(str(exc).replace("--devices", "--cost-devices")) from None
    if step in ("log", "all"):
        _graph_folder("--train", args.train)
        check_output("--logs", args.logs[0], folder=True)
        if args.follow is not None and not args.follow.is_file():
            raise UserError(f"--follow {args.follow}: no such file")
    if step == "fit":
        for folder in args.logs:
            if not folder.is_dir():
                raise UserError(f"--logs {folder}: no such folder")
    if step in ("fit", "all"):
        check_output("--weights", args.weights)
    if step in ("gate", "all"):
        for folder in args.gate_train:
            _graph_folder("--gate-train", folder)
        check_output("--gate-logs", args.gate_logs, folder=True)
        check_output("--gate-out", args.gate_out)
    if step in ("eval", "timing", "equal", "all"):
        _graph_folder("--valid", args.valid)
    if step in ("gate", "eval", "timing", "cost", "equal") and not args.weights.is_file():
        raise UserError(f"--weights {args.weights}: no such file (the `fit` step writes it)")
    if step in ("eval", "all"):
        check_output("--records", args.records)
        if args.ceilings is not None and args.ceilings.is_dir():
            raise UserError(f"--ceilings {args.ceilings}: is a folder; expected a JSON-lines "
                            "file")
    if step == "cost":
        check_output("--cost-records", args.cost_records)
        if not any(Path(p).is_file() for p in args.cost_graphs):
            raise UserError(f"--cost-graphs {' '.join(map(str, args.cost_graphs))}: none of "
                            "these files exists")
    if step == "equal":
        check_output("--equal-records", args.equal_records)
    check_output("--out", args.out, inputs=(args.records, args.cost_records,
                                            args.equal_records))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("log", "fit", "gate", "eval", "timing", "cost",
                                         "equal", "all"))
    parser.add_argument("--train", type=Path, default=TRAIN)
    parser.add_argument("--train-count", type=positive_int, default=60)
    parser.add_argument("--logs", type=Path, nargs="+", default=[LOGS],
                        help="log: writes into the first; fit: reads them all")
    parser.add_argument("--graph-base", type=non_negative_int, default=0,
                        help="log: the first graph's index (graphs whose index is 3 mod 4 "
                             "are held out by fit; give each logging run its own range)")
    parser.add_argument("--log-budget", type=positive_int, default=3000)
    parser.add_argument("--keep", type=non_negative_float, default=0.5,
                        help="share of logged steps stored")
    parser.add_argument("--plain-share", type=non_negative_float, default=0.3,
                        help="share of logging steps that follow the drawing order")
    parser.add_argument("--follow", type=Path, default=None,
                        help="log: the climbs follow this ranker's choice (weights file) "
                             "instead of the oracle's, on the steps not in drawing order")
    parser.add_argument("--weights", type=Path, default=WEIGHTS)
    parser.add_argument("--gate-train", type=Path, nargs="+", default=[TRAIN],
                        help="gate: folders of training graphs (their index + 1000 x the "
                             "folder's keeps graphs apart for the held-out split)")
    parser.add_argument("--gate-logs", type=Path, default=GATE_LOGS)
    parser.add_argument("--gate-objectives", nargs="+", default=["peak_memory"],
                        choices=("peak_memory", "makespan"))
    parser.add_argument("--gate-regimes", nargs="+", default=["peak_memory"], choices=REGIMES,
                        help="gate: the regimes that get one (under running time the gate "
                             "changed nothing on the validation graphs)")
    parser.add_argument("--gate-share", type=non_negative_float, default=0.15,
                        help="gate: the share of logged steps whose logit is below the "
                             "threshold (0.15 was the best of 0.11, 0.15, 0.20, 0.26 on the "
                             "validation graphs)")
    parser.add_argument("--gate-out", type=Path, default=WEIGHTS)
    parser.add_argument("--method", choices=FITS + ("best",), default="listwise",
                        help="fit: the fit shipped per regime (best: the best held-out gain); "
                             "listwise was chosen by the climbs on the validation graphs")
    parser.add_argument("--valid", type=Path, default=VALID)
    parser.add_argument("--valid-count", type=positive_int, default=16)
    parser.add_argument("--budgets", nargs="+", type=positive_int, default=[1000, 5000])
    parser.add_argument("--objectives", nargs="+", default=["peak_memory", "makespan"],
                        choices=("peak_memory", "makespan"))
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                        help="twin, learned (the ranker at draw 4), placebo (draw 4 in drawing "
                             "order: the noise floor)")
    parser.add_argument("--large", type=Path, default=LARGE)
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--ceilings", type=Path, default=CEILINGS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--workers", type=positive_int, default=1)
    parser.add_argument("--budget", type=positive_int, default=5000,
                        help="cost and equal: evaluations")
    parser.add_argument("--cost-graphs", nargs="+", type=Path, default=[LARGE, LARGE10K])
    parser.add_argument("--cost-repeats", type=positive_int, default=3)
    parser.add_argument("--cost-devices", nargs="+", type=device_count, default=[2])
    parser.add_argument("--cost-records", type=Path, default=COST_RECORDS)
    parser.add_argument("--equal-records", type=Path, default=EQUAL_RECORDS)
    parser.add_argument("--equal-large", nargs="*", type=Path, default=[],
                        help="equal: graphs beyond the validation ones (e.g. the ~2,000-op)")
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if args.workers == 1:
        set_numba_threads(1)
    command = " ".join(["python experiments/move_ranker.py", *(argv or sys.argv[1:])])
    sections = []
    if args.step in ("log", "all"):
        log_main(args)
    for step, title, run in (("fit", "## Fit: held-out ranking quality", fit_main),
                             ("gate", "## The restart gate", gate_main),
                             ("eval", "## Evaluation against the twin", eval_main),
                             ("timing", "## The ranker's share of the wall time", timing_main)):
        if args.step == "all":
            sections.append(f"{title}\n\n" + run(args))
        elif args.step == step:    # one step alone: its section of --out, with its command
            _replace_section(args.out, title, f"Made by `{command}`.\n\n" + run(args))
    if args.step in ("cost", "equal"):
        text = cost_main(args) if args.step == "cost" else equal_main(args)
        print(text, flush=True)
        _replace_section(args.out, EQUAL_SECTION, equal_section(args))
    if args.step == "all":
        write_text(args.out, "# A learned move ranker for the climbs\n\nMade by "
                   f"`{command}` (numba on one thread).\n\n" + "\n".join(sections))
        if args.cost_records.is_file() or args.equal_records.is_file():
            _replace_section(args.out, EQUAL_SECTION, equal_section(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(report_user_errors("move_ranker.py", main))
