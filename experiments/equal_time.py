"""REGAL against the other searches at equal wall time (tracker issue 38, item 5).

Why: the transfer tables compare methods at equal evaluations, but `regal` also pays for its
policy and its reference heuristics, and BRKGA evaluates faster than the climbs; a user with
a time budget asks who is best in the same seconds. Per graph, device count and seed:

1. `regal` at `--budget` evaluations, untimed: its wall seconds T;
2. every method of `--methods` (regal included) with `time_limit=T` and 10 x the budget, so
   the seconds bind and every method gets exactly the same time (a time limit changes how the
   pipelines split their work, so regal's own timed run is the one compared).

Peak memory, or with `--objective makespan` the step time under a per-device limit of 1.2 x
the graph's best-known peak (as the transfer experiment's running-time table).
Points: 100 x (BRKGA's value - the method's) / BRKGA's per graph from the means over seeds
(BRKGA given the same seconds), and `regal` minus each other method the same way (positive:
regal is better). One process, one run at a time (timed runs share nothing); one JSON line
per run in `--records` (resumable: a killed run loses at most the run under way).

    python experiments/equal_time.py --graphs runs/transfer_graphs/synth_test_100 \\
        runs/transfer_graphs/real_heldout_all --count 30 --seeds 2

Results: experiments/results/equal_time.md (and .jsonl).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             positive_int)
from regal.files import JsonLinesWriter, read_json_lines, write_text  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402

RECORDS = REPO / "experiments/results/equal_time.jsonl"
OUT = REPO / "experiments/results/equal_time.md"
METHODS = ("regal", "seeded-brkga", "local-search", "brkga")
BASE = "brkga"


def revisions_of(method: str, limit: int | None) -> list[str]:
    """The code revisions a run depends on: its method's, and `regal`'s, whose seconds every
    timed run gets (under `limit`, the limits revisions too). A stored run of other code is
    made again, and the table reads only runs of the current code."""
    from regal.optimizers import method_revision

    return [method_revision(method, limit), method_revision("regal", limit)]


def run(path: Path, devices: int, seed: int, method: str, budget: int,
        seconds: float | None, objective: str = "peak_memory", limit: int | None = None) -> dict:
    """One run: `method` at `budget` evaluations, or with `seconds` and 10 x `budget`."""
    from regal.io import load_graph
    from regal.optimizers import Problem, solve
    from regal.sim import DeviceSpec

    problem = Problem(load_graph(path), DeviceSpec(devices, memory_limit=limit), objective)
    options = {} if seconds is None else dict(time_limit=seconds)
    start = time.perf_counter()
    found = solve(method, problem, budget if seconds is None else 10 * budget, seed, **options)
    return dict(set=path.parent.name, graph=path.stem, devices=devices, seed=seed,
                method=method, budget=budget, seconds=seconds, objective=objective,
                memory_limit=limit, revisions=revisions_of(method, limit),
                value=float(found.value),
                evaluations=int(found.evaluations), wall_s=time.perf_counter() - start,
                ops=problem.graph.num_nodes)


def objective_of(row: dict) -> str:
    """A record's objective (records made before --objective existed are peak memory)."""
    return row.get("objective", "peak_memory")


def key(row: dict) -> tuple:
    """A run's settings: a stored run is reused only for the same ones (the memory limit
    too: a step-time run under another graph's best-known peak is made again)."""
    timed = row["seconds"] is not None
    return (row["set"], row["graph"], row["devices"], row["seed"], row["method"],
            row["budget"], timed, objective_of(row), tuple(row.get("revisions") or ()),
            row.get("memory_limit"))


def points(base: float, value: float) -> float:
    return 100.0 * (base - value) / base if base else 0.0


def table(rows: list[dict], methods) -> str:
    """Per set and device count: each method's points over BRKGA given the same seconds, and
    regal's lead over each other method (means over seeds first, then over graphs)."""
    by: dict = {}
    for r in rows:
        if r["seconds"] is None:
            continue
        group = by.setdefault((r["set"], r["devices"], objective_of(r)), {})
        group.setdefault(r["graph"], {}).setdefault(r["method"], {})[r["seed"]] = r
    cells = []
    for (name, devices, objective), graphs in sorted(by.items()):
        for method in methods:
            if method == BASE:
                continue
            over, lead, evals = [], [], []
            for runs in graphs.values():
                seeds = sorted(set(runs.get(method, {})) & set(runs.get(BASE, {}))
                               & set(runs.get("regal", {})))
                if not seeds:
                    continue
                mean = {m: statistics.fmean(runs[m][s]["value"] for s in seeds)
                        for m in (method, BASE, "regal")}
                over.append(points(mean[BASE], mean[method]))
                lead.append(points(mean[method], mean["regal"]))
                evals.extend(runs[method][s]["evaluations"] for s in seeds)
            if not over:
                continue
            se = statistics.stdev(lead) / len(lead) ** 0.5 if len(lead) > 1 else 0.0
            cells.append([name, devices, objective, method, len(over),
                          f"{statistics.fmean(over):+.2f}", f"{statistics.median(over):+.2f}",
                          "–" if method == "regal" else f"{statistics.fmean(lead):+.2f} ± {se:.2f}",
                          "–" if method == "regal" else f"{sum(x > 0 for x in lead)} / "
                          f"{sum(x < 0 for x in lead)}",
                          f"{statistics.median(evals):,.0f}"])
    return "\n".join(markdown_table(
        ["graphs", "devices", "objective", "method", "graphs",
         "over BRKGA, same seconds: mean pts", "median", "regal's lead: mean pts ± se",
         "regal ahead / behind", "evaluations in the seconds (median)"], cells,
        "lrllrrrrrr")) + "\n"


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", type=Path, required=True,
                        help="folders of .npz graphs (a set each)")
    parser.add_argument("--count", type=positive_int, default=None,
                        help="first graphs of each folder")
    parser.add_argument("--devices", nargs="+", type=device_count, default=[2, 4])
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory",
                        help="makespan: under 1.2 x each graph's best-known peak per device")
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    check_device_counts(args)
    for folder in args.graphs:
        if not folder.is_dir() or not any(folder.glob("*.npz")):
            raise UserError(f"--graphs: {folder} holds no .npz graphs")
    check_output("--records", args.records)
    check_output("--out", args.out, inputs=(args.records,))
    methods = list(dict.fromkeys(["regal", BASE] + list(args.methods)))
    from regal.optimizers import get_method
    from regal.workers import set_numba_threads
    from tqdm import tqdm

    for method in methods:
        try:
            get_method(method)
        except ValueError as exc:
            raise UserError(f"--methods: {exc}") from None
    set_numba_threads(1)

    if args.objective == "makespan":
        from transfer import makespan_limits
        limit_of = makespan_limits()
    else:
        def limit_of(path, devices):   # peak memory: no limit
            return None
    cases = [(path, d, s) for folder in args.graphs
             for path in sorted(folder.glob("*.npz"))[:args.count]
             for d in args.devices for s in range(args.seeds)]
    # (set, graph, devices) -> this run's memory limit (makespan: from today's store)
    limits = {(path.parent.name, path.stem, d): limit_of(path, d) for path, d, _ in cases}
    # the writer first: it holds the file's lock and cuts a torn last line left by a kill
    writer = JsonLinesWriter(args.records, f"--records {args.records} is being written by "
                             "another run")
    try:
        try:
            done = {key(r): r for r in read_json_lines(args.records)}
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--records {args.records}: not the records of this script "
                            f"({type(exc).__name__}: {exc})") from None
        first = cases[0][0] if cases else None
        if first is not None:       # numba's compiled code loaded before any timed run
            for method in methods:
                run(first, 2, 0, method, 300, None, args.objective, limit_of(first, 2))
        for path, d, s in tqdm(cases, desc="cases", unit="case", mininterval=5):
            limit = limits[(path.parent.name, path.stem, d)]
            probe = dict(set=path.parent.name, graph=path.stem, devices=d, seed=s,
                         budget=args.budget, objective=args.objective, memory_limit=limit)
            untimed = done.get(key(dict(probe, method="regal", seconds=None,
                                        revisions=revisions_of("regal", limit))))
            if untimed is None:
                untimed = run(path, d, s, "regal", args.budget, None, args.objective, limit)
                writer.write(untimed)
                done[key(untimed)] = untimed
            for method in methods:
                if key(dict(probe, method=method, seconds=1.0,
                            revisions=revisions_of(method, limit))) not in done:
                    row = run(path, d, s, method, args.budget, untimed["wall_s"],
                              args.objective, limit)
                    writer.write(row)
                    done[key(row)] = row
    finally:
        writer.close()
    # of this objective's runs on these graphs, those under today's limits only
    rows = [r for r in done.values() if r["budget"] == args.budget
            and r.get("revisions") == revisions_of(r["method"], r.get("memory_limit"))
            and (objective_of(r) != args.objective or limits.get(
                (r["set"], r["graph"], r["devices"]), r.get("memory_limit"))
                == r.get("memory_limit"))]
    refuse_empty(rows, f"--records {args.records}")
    text = ("# REGAL at equal wall time\n\n"
            f"Made by `python experiments/equal_time.py` ({len(rows):,} runs). Per graph, device "
            "count and seed, every method gets the wall seconds `regal` took for "
            f"{args.budget:,} evaluations untimed on it (`time_limit`, with 10 x the budget so "
            "that the seconds bind); peak memory, or the step time under 1.2 x the graph's "
            "best-known peak per device (objective makespan); points = 100 x (BRKGA's value - the "
            "method's) / BRKGA's per graph from the means over seeds, BRKGA given the same "
            "seconds; regal's lead = 100 x (method - regal) / method the same way (positive: "
            "regal better). One process, numba on one thread, on 2 cores shared with other "
            "work: the seconds are noisy.\n\n" + table(rows, methods))
    write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
