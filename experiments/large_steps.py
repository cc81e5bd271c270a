"""What the policy adds on large unseen training steps (tracker issue 38, item 5: graphs of
10k-100k ops, where the twin leaves most).

Why: the transfer tables' large graphs are 33k-50k ops, where 5,000 evaluations barely move
any search (the policy adds -0.01 to +0.05 points there). Training steps of 10k-15k ops are
the size of the large validation graphs the move ranker was checked on. This runs `regal`,
its no-policy twin `seeded-brkga`, `regal` without its move ranker (the BRKGA prior alone),
local search and BRKGA at the same evaluations on a synthetic split no fit has seen (its
own recipe seed; forward, backward and update ops of random, CNN, inception and transformer
networks), peak memory, 2 and 4 devices; and `regal` and local search once (seed 0) at
`--long-budget` evaluations, so that each graph has a best-known value: the best any run
here found (the split has no store). With `--objective makespan` the same for the step time
under a per-device limit of 1.2 x the graph's best-known peak at that device count (the
transfer experiment's running-time table's limit), which the peak-memory runs give.

    python experiments/large_steps.py   # 6 graphs, 3 seeds, 50,000-evaluation runs: ~45 min

Points: 100 x (BRKGA's value - the method's) / BRKGA's per graph from the means over seeds;
policy adds = 100 x (twin - regal) / twin per graph, the same way; "ranker adds" is `regal`
against `regal` without its ranker. Gap to best-known = 100 x (the method's mean over seeds -
best) / best per graph; issue 38's target is `regal`'s median gap at most half the twin's.
One JSON line per run in `--records` (keyed by graph,
devices, seed, method and the method's code revision: resumable, and a new revision runs
again). Results: experiments/results/large_steps.md (and .jsonl).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             non_negative_int, positive_int)
from regal.files import JsonLinesWriter, read_json_lines, write_text  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402

RECORDS = REPO / "experiments/results/large_steps.jsonl"
OUT = REPO / "experiments/results/large_steps.md"
GRAPHS = REPO / "runs/large_steps"
RECIPE = dict(min_ops=10000, max_ops=15000, seed=20261130, family="mixed", training=True)
BASE, TWIN = "brkga", "seeded-brkga"
NO_RANKER = "regal-no-ranker"       # regal with move_ranker="none": the BRKGA prior alone
METHODS = ("regal", TWIN, NO_RANKER, "local-search", BASE)
LONG_METHODS = ("regal", "local-search")     # once each at --long-budget: the best-known


def recipe(count: int):
    from regal.synth import custom_recipe

    return custom_recipe(count, RECIPE["min_ops"], RECIPE["max_ops"], RECIPE["seed"],
                         RECIPE["family"], RECIPE["training"], name="large_steps")


LIMIT_FACTOR = 1.2       # --objective makespan: each device's limit, x the best-known peak


def revision(method: str, limit: int | None = None) -> str:
    from regal.optimizers import method_revision

    return method_revision("regal" if method == NO_RANKER else method, limit)


def objective_of(row: dict) -> str:
    return row.get("objective", "peak_memory")      # rows before makespan runs were peak


def run(task: dict) -> dict:
    """One run (a worker's call)."""
    from regal.io import load_graph
    from regal.optimizers import Problem, solve
    from regal.sim import DeviceSpec
    from regal.workers import set_numba_threads

    set_numba_threads(1)
    objective, limit = task.get("objective", "peak_memory"), task.get("limit")
    problem = Problem(load_graph(task["path"]), DeviceSpec(task["devices"], memory_limit=limit),
                      objective)
    method, options = task["method"], {}
    if method == NO_RANKER:
        method, options = "regal", dict(move_ranker="none")
    start = time.perf_counter()
    found = solve(method, problem, task["budget"], task["seed"], **options)
    return dict(graph=Path(task["path"]).stem, family=task["family"], devices=task["devices"],
                seed=task["seed"], method=task["method"],
                revision=revision(task["method"], limit), budget=task["budget"],
                objective=objective, limit=limit, value=float(found.value),
                feasible=bool(found.feasible), evaluations=int(found.evaluations),
                wall_s=time.perf_counter() - start, ops=problem.graph.num_nodes)


def key(row: dict) -> tuple:
    """A run's settings: a stored run is reused only for the same ones (the limit too: a
    step-time run under a limit set from other best-known peaks is made again; rows made
    before runs under limits have none)."""
    return (row["graph"], row["devices"], row["seed"], row["method"], row["budget"],
            row["revision"], objective_of(row), row.get("limit"))


def points(base: float, value: float) -> float:
    return 100.0 * (base - value) / base if base else 0.0


def _means(rows: list[dict]) -> dict:
    """(devices, graph) -> method -> {seed: value}."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["devices"], r["graph"]), {}).setdefault(r["method"], {})[r["seed"]] = \
            r["value"]
    return by


def _paired(runs: dict, method: str, base: str) -> float | None:
    """Points of `method` over `base` on one graph, from the means over their common seeds."""
    seeds = sorted(set(runs.get(method, {})) & set(runs.get(base, {})))
    if not seeds:
        return None
    return points(statistics.fmean(runs[base][s] for s in seeds),
                  statistics.fmean(runs[method][s] for s in seeds))


def _summary(values: list[float]) -> list[str]:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return [str(len(values)), f"{statistics.fmean(values):+.2f} ± {se:.2f}",
            f"{statistics.median(values):+.2f}", f"{min(values):+.2f}", f"{max(values):+.2f}"]


def tables(rows: list[dict]) -> str:
    """Each method over BRKGA per device count; then the differences that say what the
    policy and its parts add, per device count and per family."""
    by = _means(rows)
    families = {(r["devices"], r["graph"]): r["family"] for r in rows}
    cells = []
    for devices in sorted({d for d, _ in by}):
        graphs = {g: runs for (d, g), runs in by.items() if d == devices}
        for method in METHODS:
            if method == BASE:
                continue
            over = [p for runs in graphs.values()
                    if (p := _paired(runs, method, BASE)) is not None]
            if over:
                cells.append([devices, method, *_summary(over)])
    lines = markdown_table(["devices", "method", "graphs", "over BRKGA: mean pts ± se",
                            "median", "min", "max"], cells, "rlrrrrr")
    diffs = (("policy adds: regal - twin", "regal", TWIN),
             ("the BRKGA prior alone: regal without the ranker - twin", NO_RANKER, TWIN),
             ("the ranker and gate: regal - regal without the ranker", "regal", NO_RANKER))
    cells = []
    for devices in sorted({d for d, _ in by}):
        groups = [("all", None)] + [(f, f) for f in sorted({families[k] for k in by
                                                             if k[0] == devices})]
        for label, method, base in diffs:
            for name, family in groups:
                values = [p for (d, g), runs in by.items() if d == devices
                          and (family is None or families[(d, g)] == family)
                          and (p := _paired(runs, method, base)) is not None]
                if values:
                    cells.append([devices, label, name, *_summary(values)])
    lines += ["", "Differences per graph, points of the second method's value (positive: the "
              "first is better):", ""]
    lines += markdown_table(["devices", "difference", "family", "graphs", "mean pts ± se",
                             "median", "min", "max"], cells, "rllrrrrr")
    return "\n".join(lines) + "\n"


def best_known(rows: list[dict]) -> dict:
    """(devices, graph) -> the least value any of `rows` found (every budget)."""
    best: dict = {}
    for r in rows:
        k = (r["devices"], r["graph"])
        best[k] = min(best.get(k, r["value"]), r["value"])
    return best


def gap_table(rows: list[dict], best: dict) -> str:
    """Each method's gap to the best-known value per device count (the means over seeds
    of `rows`), and `regal`'s median gap against the twin's."""
    by = _means(rows)
    cells, ratio = [], []
    for devices in sorted({d for d, _ in by}):
        medians = {}
        for method in METHODS:
            gaps = [100.0 * (statistics.fmean(runs[method].values()) - best[(d, g)])
                    / best[(d, g)] for (d, g), runs in by.items()
                    if d == devices and method in runs and best.get((d, g))]
            if gaps:
                medians[method] = statistics.median(gaps)
                fits = [r.get("feasible", True) for r in rows
                        if r["devices"] == devices and r["method"] == method]
                cells.append([devices, method, len(gaps), f"{statistics.fmean(gaps):.2f}",
                              f"{medians[method]:.2f}", f"{max(gaps):.2f}",
                              f"{sum(fits)} of {len(fits)}"])
        if "regal" in medians and TWIN in medians:
            twin, regal = medians[TWIN], medians["regal"]
            ratio.append([devices, f"{twin:.2f}", f"{regal:.2f}",
                          f"{regal / twin:.2f}" if twin > 0 else "-",
                          "yes" if regal <= 0.5 * twin else "no"])
    lines = markdown_table(["devices", "method", "graphs", "gap to best-known: mean %",
                            "median %", "max %", "runs within the limits"], cells, "rlrrrrr")
    lines += ["", "(A run over a limit has the simulator's penalised value, so its gap says "
              "only that it did not fit.)"]
    lines += ["", "`regal`'s median gap against its twin's (issue 38: at most half):", ""]
    lines += markdown_table(["devices", "twin's median gap %", "regal's median gap %",
                             "regal / twin", "at most half"], ratio, "rrrrl")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=positive_int, default=6, help="graphs of the split")
    parser.add_argument("--devices", nargs="+", type=device_count, default=[2, 4])
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--long-budget", type=non_negative_int, default=50000,
                        help="evaluations of the best-known runs (0: none)")
    parser.add_argument("--objective", choices=("peak_memory", "makespan"),
                        default="peak_memory")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--graphs", type=Path, default=GRAPHS,
                        help="folder the split is written to (regenerated from its recipe)")
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    command = " ".join(["python experiments/large_steps.py",
                        *(sys.argv[1:] if argv is None else argv)])
    check_device_counts(args)
    check_output("--graphs", args.graphs, folder=True)
    check_output("--records", args.records)
    check_output("--out", args.out, inputs=(args.records,))
    # the writer first: it holds the file's lock and cuts a torn last line left by a kill
    writer = JsonLinesWriter(args.records, f"--records {args.records} is being written by "
                             "another run")
    try:
        return _run(args, command, writer)
    finally:
        writer.close()


def _run(args, command: str, writer: JsonLinesWriter) -> int:
    """The runs (each written to `writer` as it ends), then the tables."""
    from tqdm import tqdm

    from regal import synth
    from regal.workers import Workers

    try:
        stored = read_json_lines(args.records)
        done = {key(r) for r in stored}
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--records {args.records}: not the records of this script "
                        f"({type(exc).__name__}: {exc})") from None
    rec = recipe(args.count)
    paths = sorted(synth.materialize(rec, args.graphs, progress=False))
    # (graph, devices) -> the limit (makespan) or None
    limits: dict = {(p.stem, d): None for p in paths for d in args.devices}
    if args.objective == "makespan":
        peaks = best_known([r for r in stored if objective_of(r) == "peak_memory"
                            and r["revision"] == revision(r["method"])])
        missing = [f"{g} at {d} devices" for g, d in limits if (d, g) not in peaks]
        if missing:
            raise UserError(f"no peak-memory run of {', '.join(missing)} in {args.records} to "
                            "set the limit from: run without --objective first")
        limits = {(g, d): int(LIMIT_FACTOR * peaks[(d, g)]) for g, d in limits}

    def task(i, p, d, s, m, budget):
        limit = limits[(p.stem, d)]
        if (p.stem, d, s, m, budget, revision(m, limit), args.objective, limit) in done:
            return None
        return dict(path=str(p), family=synth.family_at(rec, i), devices=d, seed=s, method=m,
                    budget=budget, objective=args.objective, limit=limit)

    tasks = [task(i, p, d, s, m, args.budget)
             for i, p in enumerate(paths) for d in args.devices for s in range(args.seeds)
             for m in dict.fromkeys([BASE, TWIN, "regal"] + list(args.methods))]
    if args.long_budget:
        tasks += [task(i, p, d, 0, m, args.long_budget)
                  for i, p in enumerate(paths) for d in args.devices for m in LONG_METHODS]
    tasks = [t for t in tasks if t is not None]
    print(f"large_steps: {len(tasks)} runs to make", flush=True)
    queue, bar = iter(tasks), tqdm(total=len(tasks), desc="runs", unit="run", mininterval=5)

    def start():
        task = next(queue, None)
        return None if task is None else (task, run, task)

    def finish(task, get):
        writer.write(get())
        bar.update()

    try:
        if tasks:
            with Workers(args.workers, jobs=len(tasks), ignore_interrupts=True) as workers:
                workers.run(start, finish)
    finally:
        bar.close()
    # this objective's runs of the current code, under today's limits on these graphs
    current = [r for r in read_json_lines(args.records) if objective_of(r) == args.objective
               and r["revision"] == revision(r["method"], r.get("limit"))
               and limits.get((r["graph"], r["devices"]), r.get("limit")) == r.get("limit")]
    rows = [r for r in current if r["budget"] == args.budget]
    refuse_empty(rows, f"--records {args.records}")
    long = [r for r in current if r["budget"] == args.long_budget] if args.long_budget else []
    objective = "peak memory" if args.objective == "peak_memory" else (
        f"step time under a limit of {LIMIT_FACTOR} x the best-known peak on every device "
        "(an answer over it ranks behind every one within: the simulator's penalty)")
    text = ("# Large unseen training steps: what the policy adds\n\n"
            f"Made by `{command}` ({len(rows):,} runs). Split: "
            f"{args.count} synthetic training steps of {RECIPE['min_ops']:,}-"
            f"{RECIPE['max_ops']:,} ops (recipe seed {RECIPE['seed']}, families random, CNN, "
            "inception, transformer, forward + backward + updates), not used by any fit; "
            f"{args.budget:,} evaluations, {objective}, seeds 0-{args.seeds - 1}. Points over "
            f"BRKGA (at {args.budget:,} evaluations too): 100 x (BRKGA - method) / BRKGA per "
            "graph from the means over seeds.\n\n"
            + tables(rows)
            + "\n## Gap to the best-known value\n\nBest-known: the least value any run in "
            f"the records found for the graph, at any budget ({len(current):,} runs, among "
            f"them {len(long)} of `regal` and local search at {args.long_budget:,} "
            "evaluations, seed 0). Gap = 100 x (mean over seeds - best) / best.\n\n"
            + gap_table(rows, best_known(current)))
    write_text(args.out, text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
