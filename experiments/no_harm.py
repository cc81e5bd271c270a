"""The do-no-harm check with more seeds: graphs where a method looked worse than BRKGA-5K
(or than `--against`, e.g. its no-policy twin `seeded-brkga`).

Why: BRKGA-5K's answer moves by 1-2% from one seed to the next, so a mean over the 3 seeds of
a transfer run can put a graph below -1% by luck alone. For every graph and device count of a
transfer run's records where the method's mean over the run's seeds is below `--below` percent
(default 0) against `--against` (default BRKGA) of the same seeds, this runs both again with
seeds 0..N-1 (default 20; the first ones reproduce the records, which is checked) and reports
the mean improvement, its standard error over the seeds, and whether the graph is still below
-1%. `--objective makespan` checks the runs under memory limits (each graph's limit from its
records). Resumable: one JSON line per (graph, devices, seed) in `--cache`.

    python experiments/no_harm.py --records experiments/results/transfer_full/records.jsonl \\
        --graphs runs/transfer_graphs/synth_test_100 runs/transfer_graphs/real_heldout_all \\
        --out experiments/results/transfer_full/no_harm.md
    python experiments/no_harm.py ... --against seeded-brkga --seeds 5 --below -1 \\
        --out experiments/results/transfer_full/no_harm_twin.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal import harness, optimizers  # noqa: E402
from regal.arguments import check_output, checked_policy_dir, positive_int  # noqa: E402
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.regal_method import (portable_policy_dir, resolve_policy_dir,  # noqa: E402
                                same_policy_dir)
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402

HARM = -1.0   # the rule: no graph more than 1% worse than BRKGA-5K
DEFAULT_POLICY = "data/policy"   # regal's runs of the shipped policy


def suspects(records_file: Path, method: str, policy, below: float, budget: int,
             against: str = "brkga", objective: str = "peak_memory") -> dict:
    """(fingerprint, graph, dataset, devices, memory limit) -> {"options": {method name: its
    options}, "seeds": {seed: (against, method)}} where the method's mean improvement over
    `against` on the records' seeds is below `below` percent (peak memory: the runs without a
    limit; makespan: those under one). Of `regal` runs only `policy`'s, no ablation variant."""
    runs: dict = {}
    for r in harness.current_revisions(harness.load_records(records_file)):
        if r.get("status") != "ok" or r["budget"] != budget or r["objective"] != objective \
                or (r["memory_limit"] is None) != (objective == "peak_memory") \
                or r["method"] not in (against, method):
            continue
        options = json.loads(r["options"])
        if r["method"] == "regal" and (options.get("learn") is not None
                                       or not same_policy_dir(options.get("policy_dir"),
                                                              policy)):
            continue
        key = (r["fingerprint"], r["graph"], r["dataset"], r["devices"], r["memory_limit"])
        entry = runs.setdefault(key, {"options": {}, "values": {}})
        entry["options"][r["method"]] = options
        entry["values"].setdefault(r["seed"], {})[r["method"]] = float(r["value"])
    found = {}
    for key, entry in runs.items():
        pairs = {s: (v[against], v[method]) for s, v in entry["values"].items()
                 if against in v and method in v}
        if pairs and improvement(pairs.values()) < below:
            found[key] = {"options": entry["options"], "seeds": pairs}
    return found


def improvement(pairs) -> float:
    """Mean over seeds of BRKGA's and of the method's values -> the method's improvement (%),
    the transfer tables' per-graph rule."""
    pairs = list(pairs)
    base = statistics.fmean(b for b, _ in pairs)
    return 100.0 * (base - statistics.fmean(m for _, m in pairs)) / base


def standard_error(pairs) -> float:
    """Standard error (%) of the mean per-seed improvement (paired by seed)."""
    per_seed = [100.0 * (b - m) / b for b, m in pairs]
    if len(per_seed) < 2:
        return float("nan")
    return statistics.stdev(per_seed) / len(per_seed) ** 0.5


def threshold(text: str) -> float:
    """--below: percent, any number or inf (every graph), not NaN (which no graph is below)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of percent, got {text!r}") \
            from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("expected a number of percent, got nan")
    return value


def run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options this check shares with `no_harm_null.py`: the records and graphs it reads,
    the budget, the table and its cache."""
    parser.add_argument("--records", required=True, type=Path)
    parser.add_argument("--graphs", nargs="+", required=True, type=Path,
                        help="folders holding the run's graph files (matched by fingerprint)")
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--out", required=True, type=Path, help="Markdown table")
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON lines of finished runs (default: OUT with .jsonl)")


def checked_inputs(args) -> tuple[Path, dict]:
    """The checks this check shares with `no_harm_null.py`, made before any work (--records is
    checked first, by each): --out and the cache writable (neither one of the inputs), --graphs
    folders of graph files. Returns the cache's path and {fingerprint: graph path} of --graphs."""
    cache = args.cache or args.out.with_suffix(".jsonl")
    check_output("--out", args.out, inputs=(args.records, cache))
    check_output("--cache", cache, inputs=(args.records,))
    for folder in args.graphs:
        if not folder.is_dir():
            raise UserError(f"--graphs {folder}: no such folder")
    try:
        paths = {e.fingerprint: e.path for e in harness.find_graphs(
            {folder.name: folder for folder in args.graphs})}
    except ValueError as exc:
        raise UserError(f"--graphs: {str(exc).removeprefix('graphs: ')}") from None
    return cache, paths


# what every line of a cache holds: this script's (the baseline's value, "brkga", beside the
# method's) and no_harm_null.py's (the method's alone)
CACHE_FIELDS = ("key", "seed", "method", "budget", "brkga", "value")
NULL_CACHE_FIELDS = ("key", "seed", "method", "budget", "value")


def open_cache(cache: Path, fields=CACHE_FIELDS,
               kind: str = "run of no_harm.py") -> tuple[JsonLinesWriter, list[dict]]:
    """The cache's writer (it holds the file's lock and cuts a torn last line left by a kill)
    and the lines the cache holds; a file of another script's lines is refused, neither read
    nor appended to (`regal.files.read_own_rows`)."""
    writer = JsonLinesWriter(cache, busy=f"--cache {cache}: being written by another run")
    try:
        lines = read_own_rows(cache, fields, "--cache", kind)
    except BaseException:
        writer.close()
        raise
    return writer, lines


def cached_runs(lines: list, args, policy: str | None) -> dict:
    """(key, seed) -> (against's value, the method's value) of the cache's lines made with
    this run's settings: method, --against, --budget, the code revisions and, when `regal`
    runs (`policy` not None), --policy; a line without a policy was made with the shipped
    one, the only one used before lines kept it. A line of other settings is not reused."""
    done: dict = {}
    for row in lines:
        key = tuple(row.get("key") or ()) if isinstance(row, dict) else ()
        if len(key) != 5 or "revisions" not in row:   # written before runs kept them
            continue
        if row.get("method") == args.method and row.get("budget") == args.budget \
                and row.get("against") == args.against \
                and row["revisions"] == revisions((args.method, args.against), key[4]) \
                and (policy is None or same_policy_dir(row.get("policy", DEFAULT_POLICY),
                                                       policy)):
            done[(*key, row["seed"])] = (float(row["brkga"]), float(row["value"]))
    return done


def revisions(methods, memory_limit) -> list[str]:
    """The code revisions of `methods` for a run under `memory_limit`, stored with each cached
    run: a run of other code (a method revised since) is not reused."""
    return [optimizers.method_revision(name, memory_limit) for name in methods]


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    run_arguments(parser)
    parser.add_argument("--method", default="regal")
    parser.add_argument("--against", default="brkga",
                        help="the method it must not be worse than (default brkga)")
    parser.add_argument("--objective", default="peak_memory", choices=("peak_memory", "makespan"))
    parser.add_argument("--policy", default=DEFAULT_POLICY,
                        help="for regal: the runs of this policy folder only (default the shipped)")
    parser.add_argument("--below", type=threshold, default=0.0,
                        help="recheck graphs whose mean improvement is below this (%%)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    args = parser.parse_args(argv)
    if not args.records.is_file():
        parser.error(f"--records: {args.records} is not a file")
    if args.seeds < 2:
        parser.error(f"--seeds: need at least 2, got {args.seeds}")
    for flag, name in (("--method", args.method), ("--against", args.against)):
        try:
            optimizers.get_method(name)
        except ValueError as exc:
            parser.error(f"{flag}: {exc}")
    regal_runs = "regal" in (args.method, args.against)
    if regal_runs:
        checked_policy_dir(str(resolve_policy_dir(args.policy)))
    cache, paths = checked_inputs(args)
    # every graph of --graphs the records pair the two methods on; then those below the line
    paired = {k: v for k, v in suspects(args.records, args.method, args.policy, math.inf,
                                        args.budget, args.against, args.objective).items()
              if k[0] in paths}
    refuse_empty(paired, f"--records {args.records}: no {args.method} and {args.against} runs "
                 f"at --budget {args.budget} ({args.objective}) on the graphs of --graphs")
    found = {k: v for k, v in paired.items() if improvement(v["seeds"].values()) < args.below}
    policy = portable_policy_dir(args.policy)
    writer, lines = open_cache(cache)
    try:
        done = cached_runs(lines, args, policy if regal_runs else None)
        for key in tqdm(sorted(found, key=lambda k: (k[2], k[3], k[1])), desc="graphs",
                        unit="graph", disable=None):
            fingerprint, graph, dataset, devices, limit = key
            problem = None
            options = found[key]["options"]
            for seed in range(args.seeds):
                if (*key, seed) in done:
                    continue
                problem = problem or optimizers.Problem(
                    load_graph(paths[fingerprint]), DeviceSpec(devices, memory_limit=limit),
                    args.objective)
                base = optimizers.solve(args.against, problem, args.budget, seed,
                                        **options.get(args.against, {})).value
                value = optimizers.solve(args.method, problem, args.budget, seed,
                                         **options.get(args.method, {})).value
                done[(*key, seed)] = (base, value)
                # "brkga": the baseline's value (named so before)
                writer.write({"key": list(key), "seed": seed, "method": args.method,
                              "against": args.against, "budget": args.budget,
                              "revisions": revisions((args.method, args.against), limit),
                              "policy": policy, "brkga": base, "value": value})
    finally:
        writer.close()
    write_text(args.out, table(found, done, args))
    print(args.out.read_text())
    return 0


def table(found: dict, done: dict, args) -> str:
    base = "BRKGA" if args.against == "brkga" else args.against
    lines = [f"# Do no harm with {args.seeds} seeds: {args.method} against {base}-"
             f"{args.budget // 1000}K" + ("" if args.objective == "peak_memory"
                                          else ", step time under memory limits"), "",
             f"Graphs whose mean improvement over the records' seeds was below {args.below:+.1f}%"
             f" (`{args.records}`), run again with seeds 0..{args.seeds - 1}, same options. "
             f"Improvement = (mean {base} - mean method) / mean {base}; SE = standard error of "
             "the per-seed improvements. Made by `experiments/no_harm.py`.", ""]
    cells = []
    for key in sorted(found, key=lambda k: (k[2], k[3], k[1])):
        _, graph, dataset, devices, _ = key
        recorded = found[key]["seeds"]
        pairs = [done[(*key, s)] for s in range(args.seeds) if (*key, s) in done]
        same = all(done.get((*key, s)) == recorded[s] for s in recorded if s < args.seeds)
        now = improvement(pairs)
        cells.append([dataset, devices, graph, len(recorded),
                      f"{improvement(recorded.values()):+.2f}%", f"{now:+.2f}%",
                      f"{standard_error(pairs):.2f}", "yes" if now < HARM else "no",
                      "yes" if same else "NO"])
    if not found:
        cells.append(["(none)"] + [""] * 8)
    lines += markdown_table(["dataset", "devices", "graph", "records' seeds",
                             "improvement there", f"{args.seeds} seeds", "SE",
                             f"below -1% with {args.seeds} seeds", "records reproduced"],
                            cells, "lrlrrrrll")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
