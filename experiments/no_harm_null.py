"""The noise floor of the do-no-harm check: how many graphs a method with no effect at all
puts more than 1% behind itself by the rule of `experiments/no_harm.py`.

Why: the check (tracker issue 38 item 4) flags a graph and device count when a method's mean
over the transfer run's seeds is below -1% against its twin, then reruns both with seeds
0..N-1 (the first ones are the flagging seeds) and counts those still below -1%. Every run's
answer moves by a few percent from one seed to the next, so even the twin against itself
with other seeds fails this check on some graphs. This script measures that: the "method" is
`--method` itself (default `seeded-brkga`) with seeds shifted by `--seed-offset`, against its
own records' seeds, through the same two steps (flag on `--select-seeds`, recheck on
`--seeds`). A real method's count (e.g. `no_harm_twin.md`) means something only above this.
Peak memory, or with `--objective makespan` the step time under each graph's memory limit of
the records; the records' options; resumable (one JSON line per run in `--cache`).

    python experiments/no_harm_null.py --records experiments/results/transfer_full/records.jsonl \\
        --graphs runs/transfer_graphs/synth_test_100 runs/transfer_graphs/real_heldout_all \\
        --out experiments/results/transfer_full/no_harm_null.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from no_harm import (DEFAULT_POLICY, HARM, NULL_CACHE_FIELDS, checked_inputs,  # noqa: E402
                     improvement, open_cache, revisions, run_arguments, standard_error,
                     suspects, threshold)
from regal import optimizers  # noqa: E402
from regal.arguments import non_negative_int, positive_int  # noqa: E402
from regal.files import write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.user_errors import UserError, report_user_errors  # noqa: E402


def recorded(records_file: Path, method: str, budget: int, seeds: int,
             objective: str = "peak_memory") -> dict:
    """(fingerprint, graph, dataset, devices, memory limit) -> {"options": ..., "values":
    {seed: value}} for the method's current runs with every seed 0..seeds-1: the runs
    `no_harm.suspects` reads (peak memory: those without a limit; makespan: those under one;
    `regal`: the shipped policy's), the method paired with itself and none left out."""
    found = suspects(records_file, method, DEFAULT_POLICY, math.inf, budget, against=method,
                     objective=objective)
    runs = {key: {"options": entry["options"][method],
                  "values": {seed: value for seed, (value, _) in entry["seeds"].items()}}
            for key, entry in found.items()}
    return {k: v for k, v in runs.items() if all(s in v["values"] for s in range(seeds))}


def cached_runs(lines: list, args) -> dict:
    """(key, seed) -> value of the cache's lines made with this run's method, budget,
    objective and code revision (a line of other settings is not reused)."""
    done: dict = {}
    for row in lines:
        key = tuple(row.get("key") or ()) if isinstance(row, dict) else ()
        if len(key) != 5 or "revisions" not in row:   # written before runs kept them: not reused
            continue
        if row.get("method") == args.method and row.get("budget") == args.budget \
                and row.get("objective", "peak_memory") == args.objective \
                and row["revisions"] == revisions((args.method,), key[4]):
            done[(*key, row["seed"])] = float(row["value"])
    return done


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    run_arguments(parser)
    parser.add_argument("--method", default="seeded-brkga")
    parser.add_argument("--objective", default="peak_memory", choices=("peak_memory", "makespan"),
                        help="makespan: the runs under a memory limit (each graph's own)")
    parser.add_argument("--seed-offset", type=non_negative_int, default=1000,
                        help="the placebo's seeds: the twin's plus this")
    parser.add_argument("--select-seeds", type=positive_int, default=3,
                        help="seeds of the records the first step flags on")
    parser.add_argument("--seeds", type=positive_int, default=5, help="seeds of the recheck")
    parser.add_argument("--below", type=threshold, default=HARM)
    args = parser.parse_args(argv)
    if not args.records.is_file():
        parser.error(f"--records: {args.records} is not a file")
    if not 1 <= args.select_seeds <= args.seeds:
        parser.error("need 1 <= --select-seeds <= --seeds")
    if args.seed_offset < args.seeds:
        parser.error("--seed-offset must be at least --seeds (the placebo's seeds are new)")
    try:
        optimizers.get_method(args.method)
    except ValueError as exc:
        parser.error(f"--method: {exc}")
    cache, paths = checked_inputs(args)
    runs = {k: v for k, v in recorded(args.records, args.method, args.budget,
                                      args.select_seeds, args.objective).items()
            if k[0] in paths}
    if not runs:
        parser.error(f"--records: no {args.method} runs with seeds 0..{args.select_seeds - 1} "
                     "on the graphs of --graphs")
    writer, lines = open_cache(cache, NULL_CACHE_FIELDS, "run of no_harm_null.py")
    try:
        if any("brkga" in row for row in lines):    # no_harm.py's: each beside a baseline run
            raise UserError(f"--cache {cache}: holds no_harm.py's runs (each beside a baseline "
                            "run), not this script's")
        done = cached_runs(lines, args)
    except BaseException:
        writer.close()
        raise
    start = time.perf_counter()
    problems: dict = {}

    def value(key, seed: int) -> float:
        if seed < args.select_seeds and seed in runs[key]["values"]:
            return runs[key]["values"][seed]
        if (*key, seed) not in done:
            fingerprint, _, _, devices, limit = key
            if key not in problems:
                problems.clear()
                problems[key] = optimizers.Problem(load_graph(paths[fingerprint]),
                                                   DeviceSpec(devices, memory_limit=limit),
                                                   args.objective)
            done[(*key, seed)] = optimizers.solve(args.method, problems[key], args.budget,
                                                  seed, **runs[key]["options"]).value
            writer.write({"key": list(key), "seed": seed, "method": args.method,
                          "budget": args.budget, "objective": args.objective,
                          "revisions": revisions((args.method,), limit),
                          "value": done[(*key, seed)]})
        return done[(*key, seed)]

    def pairs(key, seeds: int) -> list:
        return [(value(key, s), value(key, s + args.seed_offset)) for s in range(seeds)]

    keys = sorted(runs, key=lambda k: (k[2], k[3], k[1]))
    flagged, cells, still = [], [], 0
    try:
        for key in tqdm(keys, desc="flag", unit="pair", disable=None):
            if improvement(pairs(key, args.select_seeds)) < args.below:
                flagged.append(key)
        for key in tqdm(flagged, desc="recheck", unit="pair", disable=None):
            first, now = pairs(key, args.select_seeds), pairs(key, args.seeds)
            still += improvement(now) < HARM
            cells.append([key[2], key[3], key[1], f"{improvement(first):+.2f}%",
                          f"{improvement(now):+.2f}%", f"{standard_error(now):.2f}",
                          "yes" if improvement(now) < HARM else "no"])
    finally:
        writer.close()
    print(f"{len(keys)} pairs, {len(flagged)} flagged, recheck done "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
    lines = [f"# The noise floor of do no harm: {args.method} against itself with seeds + "
             f"{args.seed_offset}", "",
             f"`{args.method}` (the records' options, "
             + ("peak memory" if args.objective == "peak_memory"
                else "step time under the records' memory limits")
             + f", {args.budget:,} evaluations) "
             f"with seeds s + {args.seed_offset} against its own runs with seeds s: a method "
             "with no effect. The rule of `experiments/no_harm.py`: a graph and device count "
             f"is flagged when the mean over seeds 0..{args.select_seeds - 1} is below "
             f"{args.below:+.1f}% (`{args.records}`), then rechecked with seeds "
             f"0..{args.seeds - 1}. Made by `experiments/no_harm_null.py`.", "",
             f"**{len(keys)} graph and device pairs; {len(flagged)} flagged; {still} still "
             f"below {HARM:+.0f}% with {args.seeds} seeds.**", ""]
    lines += markdown_table(["dataset", "devices", "graph",
                             f"{args.select_seeds} seeds", f"{args.seeds} seeds", "SE",
                             f"below {HARM:+.0f}% with {args.seeds} seeds"],
                            cells or [["(none)"] + [""] * 6], "lrlrrrl")
    write_text(args.out, "\n".join(lines) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
