"""Ceilings of the levers a policy could pull in REGAL's pipeline, measured with oracles.

Why (tracker issue 38): the shipped policy shapes BRKGA's tenth of the budget and adds about
nothing over its no-policy twin (`seeded-brkga`). Before learning another decision, this
script bounds what a perfect one would give, in points of the twin's value
(100 * (twin - lever) / twin per graph, from the means over seeds):

    move guidance   the climbs draw `k` times their batch and an oracle ranks the drawn
                    neighbours by their true value (simulated for free), so the batch that is
                    evaluated (and paid for) is the best of k x batch: what a perfect learned
                    local advantage function would choose (`Climb(rank_moves=, draw=)`).
                    Arms `move-oracle-4`, `move-oracle-16`.
    schedule        the best of a grid of schedules per graph (BRKGA's share, fresh climbs,
                    population): `brkga-only`, `brkga-50`, `brkga-3` (BRKGA on 3% of the
                    budget), `one-climb`, `four-fresh`, `population-50`, and the twin's own.
                    Two figures: the in-sample oracle (the best grid point on the very seeds
                    it is scored on, an upper bound inflated by seed noise) and the held-out
                    seed choice (the grid point chosen on the other seeds, scored on this
                    one: what a per-graph choice from the graph alone can hope for).
    the policy      `regal` - twin: everything the shipped policy decides now (the solution
                    prior for BRKGA, and since revision `ranker-1` the climbs' move ranker and
                    restart gate), against the move-guidance oracles it could reach; the
                    prior's own oracle ceiling (the best-known solution as the prior) is in
                    data/policy/README.md, "Could a prior steer the climbs?".

Two probes of move guidance beside the oracles: `ranker`, the twin's climbs ranked by the
shipped move ranker (`regal`'s, without its BRKGA prior), and `ranker-chain`, the same but,
under the step time with every device within its limit, the drawn neighbours that move an
op of the incumbent's critical chain (`critical_chain`) first (`ChainFirst`). Not learned:
it asks whether the chain tells the climbs something the ranker's features do not.
And one of how many ranked moves a step should evaluate: `policy-batch-8` is `regal` whose
ranked climb steps evaluate 8 of the 32 drawn (`ranked_batch=8`; the climb's own batch
adapts between 8 and 32), `twin-batch-8` the twin's climbs with the same fixed batch, so
that what the batch gives without the ranking is measured beside it; `policy-opening-8`
caps that batch at 8 only for each ranked climb's first 10 evaluations per op (then it
adapts between 8 and 32 again), `twin-opening-8` the same on the twin's climbs. And two of
a hedge: `policy-unranked-25` / `-50` are `regal` whose ranked steps evaluate the first
quarter / half of their batch in the drawing order, unranked (`unranked_share`).

Objectives: peak memory, and running time with every device under a memory limit of
`--limit-factor` (1.2) x the reference heuristics' best peak (the transfer tables' rule for
graphs without a best-known store). Every run is one JSON line in `--records` (resumable: a
line already there is not run again); the table, of the runs at `--limit-factor` only, goes
to stdout and to `--out`.

    python experiments/ceilings.py --graphs runs/transfer_graphs/synth_valid_40 \\
        --limit 20 --budgets 1000 5000 --seeds 2 --out experiments/results/ceilings.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             positive_float, positive_int)
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402
from regal.workers import Workers  # noqa: E402

TWIN = "twin"
# arm -> options of `solve_seeded_brkga` ("oracle": the move oracle drawing that many times)
ARMS = {
    TWIN: {},
    "move-oracle-4": {"oracle": 4},
    "move-oracle-16": {"oracle": 16},
    "brkga-only": {"polish_share": 0.0},
    "brkga-50": {"polish_share": 0.5},
    "brkga-3": {"polish_share": 0.97},
    "one-climb": {"fresh_climbs": 0},
    "four-fresh": {"fresh_climbs": 4},
    "population-50": {"population_size": 50},
    "policy": None,    # the `regal` method with the shipped policy
    "ranker": {"ranker": "shipped"},       # the shipped move ranker alone
    "ranker-chain": {"ranker": "chain"},   # ... with moves of the critical chain first
    "policy-batch-8": {"regal": {"ranked_batch": 8}},   # `regal`, ranked steps of 8
    "twin-batch-8": {"climb_options": {"batch_size": 8}},  # its placebo: the twin's, of 8
    # `regal` whose ranked climbs take steps of at most 8 for their first 10 evaluations per
    # op, and its placebo
    "policy-opening-8": {"regal": {"ranked_opening": (8, 10)}},
    "twin-opening-8": {"climb_options": {"opening": (8, 10)}},
    # `regal` with a quarter / half of each ranked batch evaluated in the drawing order
    "policy-unranked-25": {"regal": {"unranked_share": 0.25}},
    "policy-unranked-50": {"regal": {"unranked_share": 0.5}},
}
SCHEDULE_GRID = (TWIN, "brkga-only", "brkga-50", "brkga-3", "one-climb", "four-fresh",
                 "population-50")
OBJECTIVES = ("peak_memory", "makespan")
LIMIT_FACTOR = 1.2


def oracle_ranker(problem):
    """A `rank_moves` that ranks drawn neighbours by their simulated (objective, tie-break),
    the climb's own order, at no cost to the budget."""
    from regal.sim import evaluate

    def rank(climb, drawn: np.ndarray) -> np.ndarray:
        values, peaks, _ = evaluate(problem.graph, problem.devices, drawn, problem.objective,
                                    return_details=True)
        tie = peaks.sum(axis=1) if problem.objective == "peak_memory" else peaks.max(axis=1)
        ranks = np.empty(len(drawn))
        ranks[np.lexsort((tie, values))] = np.arange(len(drawn))
        return ranks
    return rank


def critical_chain(graph, placement, traced) -> np.ndarray:
    """[n] bool: the ops of a traced schedule's critical chain. Walked back from the op that
    ends last (the lowest id among ties) through what let each op start: the input that
    arrived last (its producer's end on the same device, else its copy's arrival there) or,
    when it ended no earlier, the op that ran before it on its device; the walk stops where
    neither reaches the op's start."""
    n = graph.num_nodes
    start, end = traced.op_start, traced.op_end
    on = np.zeros(n, bool)
    if not n:
        return on
    arrival = {(int(t), int(j)): float(e) for t, j, e in
               zip(traced.transfer_tensor, traced.transfer_dst, traced.transfer_end)}
    before = {}
    for j in np.unique(placement):
        ops = sorted((float(start[v]), v) for v in np.flatnonzero(placement == j))
        for (_, u), (_, v) in zip(ops, ops[1:]):
            before[v] = u
    v = max(range(n), key=lambda u: (end[u], -u))
    tolerance = 1e-9 * max(1.0, float(end.max()))
    while not on[v]:
        on[v] = True
        best, when = None, -np.inf
        for t in np.unique(graph.input_tensor[graph.input_ptr[v]:graph.input_ptr[v + 1]]).tolist():
            p = int(graph.tensor_producer[t])
            at = float(end[p]) if placement[p] == placement[v] \
                else arrival.get((t, int(placement[v])), float(end[p]))
            if at > when:
                best, when = p, at
        if v in before and end[before[v]] >= when:
            best, when = before[v], float(end[before[v]])
        if best is None or when < start[v] - tolerance:
            break
        v = best
    return on


class ChainFirst:
    """A `rank_moves` probe: `ranker`'s order, except that in the `makespan_fit` regime (the
    step time, every device within its limit) the drawn neighbours that move an op of the
    incumbent's critical chain to another device come first (each group in `ranker`'s
    order). Its restart gate is `ranker`'s (none acts under the step time)."""

    def __init__(self, problem, ranker) -> None:
        self.problem, self.ranker, self.chain = problem, ranker, (None, None)

    def rank_drawn(self, climb, drawn) -> np.ndarray:
        from regal.decode import decode

        scores = np.asarray(self.ranker(climb, drawn), np.float64)
        context = climb._advantage_context
        if context.regime != 1:
            return scores
        facts = climb.moves.facts
        if self.chain[0] is not facts:
            self.chain = (facts, critical_chain(self.problem.graph, context.place0,
                                                facts.trace))
        place = decode(drawn.keys(), self.problem.graph, self.problem.devices)[0]
        on_chain = ((place != context.place0) & self.chain[1]).any(axis=1)
        spread = float(scores.max() - scores.min()) + 1.0
        return scores - spread * on_chain

    def restart_now(self, climb, scores, count) -> bool:
        return self.ranker.restart_now(climb, scores, count)


def memory_limit(graph, devices: int, objective: str, factor: float) -> int | None:
    """The limit of one device under `objective`: none for peak memory; for running time
    `factor` x the reference heuristics' best peak on `devices` devices."""
    if objective == "peak_memory":
        return None
    from regal.policy.reference import reference_for
    from regal.sim import DeviceSpec

    return int(factor * reference_for(graph, DeviceSpec(devices), "peak_memory").value)


def run_arm(task: dict) -> dict:
    """One run of one arm (a worker's call): the answer's value, evaluations and seconds."""
    from regal import optimizers
    from regal.search.pipeline import solve_seeded_brkga
    from regal.sim import DeviceSpec

    graph = load_graph(task["path"])
    limit = memory_limit(graph, task["devices"], task["objective"], task["factor"])
    problem = optimizers.Problem(graph, DeviceSpec(task["devices"], memory_limit=limit),
                                 task["objective"])
    options = ARMS[task["arm"]]
    start = time.perf_counter()
    if options is None or "regal" in options:
        found = optimizers.solve("regal", problem, task["budget"], task["seed"],
                                 **(options or {}).get("regal", {}))
    else:
        options = dict(options)
        draw = options.pop("oracle", 0)
        ranker = options.pop("ranker", None)
        if draw:
            options["climb_options"] = dict(rank_moves=oracle_ranker(problem), draw=draw)
        elif ranker is not None:
            from regal.regal_method import RANKER_DRAW, load_move_ranker

            shipped = load_move_ranker("shipped")
            options["climb_options"] = dict(rank_moves=shipped if ranker == "shipped"
                                            else ChainFirst(problem, shipped), draw=RANKER_DRAW)
        found = solve_seeded_brkga(problem, task["budget"], task["seed"], **options)
    return dict(task, value=float(found.value), evaluations=int(found.evaluations),
                wall_s=time.perf_counter() - start, limit=limit, ops=graph.num_nodes)


RECORD_FIELDS = ("set", "path", "devices", "objective", "budget", "seed", "arm", "factor",
                 "value")


def read_records(path: Path) -> list[dict]:
    """The runs in `--records` (`regal.files.read_own_rows`: a torn last line cut first,
    another script's lines or garbled text refused)."""
    return read_own_rows(path, RECORD_FIELDS, "--records", "ceiling run")

def _key(row: dict) -> tuple:
    return (row["set"], Path(row["path"]).name, row["devices"], row["objective"],
            row["budget"], row["seed"], row["arm"], row["factor"])


def points(twin: float, other: float) -> float:
    return 100.0 * (twin - other) / twin


LEVERS = {"move-oracle-4": "move guidance, oracle of 4", "move-oracle-16": "move guidance, oracle of 16",
          "schedule oracle (in-sample)": "schedule per graph, oracle (in-sample)",
          "schedule choice (held-out seed)": "schedule per graph, chosen on other seeds",
          "policy": "the shipped policy (regal - twin)",
          "ranker": "move guidance, the shipped ranker",
          "ranker-chain": "the shipped ranker, critical chain first",
          "policy-batch-8": "regal with ranked steps of 8 (probe)",
          "twin-batch-8": "the twin with steps of 8 (its placebo)",
          "policy-opening-8": "regal, ranked steps of at most 8 for 10 evaluations per op (probe)",
          "twin-opening-8": "the twin with that opening (its placebo)",
          "policy-unranked-25": "regal, a quarter of each ranked batch unranked (probe)",
          "policy-unranked-50": "regal, half of each ranked batch unranked (probe)"}


def lever_gains(rows: list[dict]) -> dict:
    """(set, objective, devices, budget) -> lever -> per-graph points over the twin."""
    by, out = {}, {}
    for r in rows:
        by.setdefault((r["set"], r["objective"], r["devices"], r["budget"]), {}) \
          .setdefault(Path(r["path"]).name, {}).setdefault(r["arm"], {})[r["seed"]] = r["value"]
    for (name, objective, devices, budget), graphs in sorted(by.items()):
        levers: dict[str, list[float]] = {}
        for arms in graphs.values():
            if TWIN not in arms:
                continue
            seeds = sorted(arms[TWIN])
            twin = statistics.fmean(arms[TWIN].values())
            for arm in ARMS:
                if arm != TWIN and set(arms.get(arm, {})) >= set(seeds):
                    levers.setdefault(arm, []).append(
                        points(twin, statistics.fmean(arms[arm][s] for s in seeds)))
            grid = [a for a in SCHEDULE_GRID if set(arms.get(a, {})) >= set(seeds)]
            if len(grid) == len(SCHEDULE_GRID):
                mean = {a: statistics.fmean(arms[a][s] for s in seeds) for a in grid}
                levers.setdefault("schedule oracle (in-sample)", []).append(
                    points(twin, min(mean.values())))
                if len(seeds) > 1:   # chosen on the other seeds, scored on this one
                    held = [arms[min(grid, key=lambda a: (statistics.fmean(
                        arms[a][o] for o in seeds if o != s), grid.index(a)))][s]
                        for s in seeds]
                    levers.setdefault("schedule choice (held-out seed)", []).append(
                        points(twin, statistics.fmean(held)))
        out[(name, objective, devices, budget)] = levers
    return out


def pivot(rows: list[dict]) -> str:
    """Each graph set, objective, device count and budget (rows) against the levers (columns):
    mean points over the twin (median in brackets) and the graphs measured."""
    gains = lever_gains(rows)
    cells = []
    for setting in sorted(gains):
        name, objective, devices, budget = setting
        levers = gains[setting]
        count = max((len(g) for g in levers.values()), default=0)
        cells.append([name, "peak memory" if objective == "peak_memory" else "time under limits",
                      devices, f"{budget:,}", count] + [
            f"{statistics.fmean(g):+.2f} ({statistics.median(g):+.2f})"
            if (g := levers.get(lever)) else "–" for lever in LEVERS])
    return "\n".join(markdown_table(["graphs", "objective", "devices", "budget", "n",
                                      *LEVERS.values()], cells, "llrrr" + "r" * len(LEVERS))) + "\n"


def table(rows: list[dict]) -> str:
    """Per graph set, objective, device count and budget: each lever's points over the twin
    (mean, median, max over graphs; graphs where it gains at least half a point)."""
    cells = []
    for (name, objective, devices, budget), levers in sorted(lever_gains(rows).items()):
        for lever, gains in levers.items():
            cells.append([name, objective, devices, budget, lever, len(gains),
                          f"{statistics.fmean(gains):+.2f}", f"{statistics.median(gains):+.2f}",
                          f"{max(gains):+.2f}", f"{min(gains):+.2f}",
                          sum(g >= 0.5 for g in gains)])
    return "\n".join(markdown_table(
        ["graphs", "objective", "devices", "budget", "lever", "n", "mean pts", "median pts",
         "max", "min", "graphs >= +0.5"], cells, "llrrlrrrrrr")) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", required=True, type=Path,
                        help="graph folders (each one set of the table) or files")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first N graphs of each set")
    parser.add_argument("--max-ops", type=positive_int, default=None, help="skip larger graphs")
    parser.add_argument("--devices", nargs="+", type=device_count, default=[2, 4])
    parser.add_argument("--budgets", nargs="+", type=positive_int, default=[1000, 5000])
    parser.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(OBJECTIVES))
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms")
    parser.add_argument("--limit-factor", type=positive_float, default=LIMIT_FACTOR,
                        help="running time: each device's limit, this x the heuristics' best "
                        "peak (default 1.2); the table shows the runs made with it")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--records", type=Path, default=REPO / "experiments/results/ceilings.jsonl")
    parser.add_argument("--out", type=Path, default=REPO / "experiments/results/ceilings.md")
    parser.add_argument("--table-only", action="store_true", help="no runs: the table of --records")
    args = parser.parse_args(argv)
    check_device_counts(args)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; expected some of {', '.join(ARMS)}")
    for folder in args.graphs:
        if not folder.exists():
            parser.error(f"--graphs: {folder}: no such file or folder")
        if not args.table_only and folder.is_dir() and not any(folder.glob("*.npz")):
            parser.error(f"--graphs: {folder}: no .npz graph files in this folder")
    if args.records.is_dir():
        raise UserError(f"--records {args.records}: is a folder; expected a JSON-lines file")
    if args.table_only and not args.records.is_file():
        raise UserError(f"--records {args.records}: no such file (--table-only tabulates it)")
    check_output("--records", args.records)
    check_output("--out", args.out, inputs=(args.records,))

    # opening the records cuts a torn last line (a killed run) and refuses a second writer
    writer = None if args.table_only else JsonLinesWriter(
        args.records, f"{args.records} is being written by another ceilings run")
    try:
        done = {_key(row): row for row in read_records(args.records)}
        tasks = []
        if not args.table_only:
            tasks = _tasks(args, arms, done)
        if tasks:
            _run(tasks, args.workers, writer, done)
    finally:
        if writer is not None:
            writer.close()
    # the runs made at this --limit-factor only: the header names it, and a table mixing
    # limits would compare arms run under different ones
    rows = [row for row in done.values() if row["factor"] == args.limit_factor]
    factors = ", ".join(f"{f:g}" for f in sorted({row["factor"] for row in done.values()}))
    refuse_empty(rows, f"--records {args.records} (no runs at --limit-factor "
                       f"{args.limit_factor:g}; it holds {factors or 'none'})")
    # a lever is measured against the twin on the same graphs and seeds: none such, no table
    refuse_empty([lever for levers in lever_gains(rows).values() for lever in levers.values()
                  if lever], f"--records {args.records} (no lever run beside the twin at "
                 f"--limit-factor {args.limit_factor:g})")
    text = ("# Ceilings of the policy's levers, in points over the no-policy twin\n\n"
            f"Made by `experiments/ceilings.py` from `{args.records.name}` ({len(rows)} runs). "
            "Points: 100 x (twin - lever) / twin per graph from the means over seeds; "
            f"running time under a limit of {args.limit_factor:g} x the heuristics' best "
            "peak on every device.\n\n## Levers by setting: mean points (median)\n\n"
            + pivot(rows) + "\n## Every arm\n\n" + table(rows))
    write_text(args.out, text)
    print(text)
    return 0


def _tasks(args, arms, done) -> list[dict]:
    """The runs asked for that `done` lacks."""
    tasks = []
    for folder in args.graphs:
        paths = sorted(folder.glob("*.npz")) if folder.is_dir() else [folder]
        paths = paths[:args.limit] if args.limit else paths
        for path in paths:
            if args.max_ops and load_graph(path).num_nodes > args.max_ops:
                continue
            for budget in args.budgets:
                for objective in args.objectives:
                    for devices in args.devices:
                        for seed in range(args.seeds):
                            for arm in arms:
                                task = dict(set=folder.name, path=str(path), devices=devices,
                                            objective=objective, budget=budget, seed=seed,
                                            arm=arm, factor=args.limit_factor)
                                if _key(task) not in done:
                                    tasks.append(task)
    return tasks


def _run(tasks, workers: int, writer, done) -> None:
    """Runs `tasks`, each row written to the records as it comes."""
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), desc="ceiling runs", unit="run")
    queue = iter(tasks)

    def start():
        task = next(queue, None)
        return None if task is None else (task, run_arm, task)

    def finish(task, get):
        row = get()
        writer.write(row)
        done[_key(row)] = row
        bar.update()

    with Workers(workers, jobs=len(tasks), ignore_interrupts=True) as pool:
        pool.run(start, finish)
    bar.close()


if __name__ == "__main__":
    raise SystemExit(report_user_errors("ceilings.py", main))
