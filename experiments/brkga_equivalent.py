"""How many evaluations plain BRKGA needs to reach what REGAL (or local search) finds in 5,000.

For every graph of a transfer run (records of `experiments/transfer.py`) and each device count,
BRKGA runs once with a large budget (default 50,000) and the same seed; its best-so-far curve
gives the first evaluation count at which it is at least as good as the method's 5,000-evaluation
answer of the same seed. A method "reaches BRKGA-50K" on a graph when BRKGA needs 50,000 or more
(or never gets there within the budget). Resumable: one JSON line per (graph, devices, seed,
BRKGA budget) in `--cache`.

    python experiments/brkga_equivalent.py \\
        --records experiments/results/transfer_full/records.jsonl \\
        --graphs runs/transfer_graphs/synth_test_100 runs/transfer_graphs/real_heldout_all \\
        --out experiments/results/transfer_full/brkga_equivalent.md
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
from regal.arguments import check_output, positive_int  # noqa: E402
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.regal_method import same_policy_dir  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402

METHODS = ("regal", "local-search")  # compared with plain BRKGA's curve


def first_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first evaluation count whose best-so-far is <= target (None: never)."""
    for used, best in curve:
        if best <= target:
            return used
    return None


def brkga_curve(path: Path, devices: int, seed: int, budget: int) -> list[tuple[int, float]]:
    problem = optimizers.Problem(load_graph(path), DeviceSpec(devices))
    curve: list[tuple[int, float]] = []
    optimizers.solve("brkga", problem, budget, seed,
                     progress=lambda used, best: curve.append((int(used), float(best))))
    return curve


def targets(records_file: Path, policy=None) -> dict:
    """(fingerprint, graph, dataset, devices, seed) -> {method: value} of the 5K runs; of the
    `regal` runs only those of `policy` (a folder; None: any) and not an ablation variant (a
    records file may hold several policies' runs, e.g. Table 3's)."""
    found: dict = {}
    for r in harness.current_revisions(harness.load_records(records_file)):
        if r.get("status") != "ok" or r["budget"] != 5000 or \
                r["method"] not in METHODS + ("brkga",):
            continue
        if r["objective"] != "peak_memory" or r["memory_limit"] is not None:
            continue
        if r["method"] == "regal":
            options = json.loads(r["options"])
            if options.get("learn") is not None or not (
                    policy is None or same_policy_dir(options.get("policy_dir"), policy)):
                continue  # an ablation variant, or another policy's run
        key = (r["fingerprint"], r["graph"], r["dataset"], r["devices"], r["seed"])
        found.setdefault(key, {})[r["method"]] = float(r["value"])
    return found


CACHE_FIELDS = ("key", "budget", "brkga_5k", "brkga_final",
                *(f"{m}_{what}" for m in METHODS for what in ("value", "needs")))


def read_cache(path: Path) -> dict:
    """(graph key, BRKGA budget) -> the cached row (`regal.files.read_own_rows`: a torn last
    line cut first, a file of anything else refused). Each row's budget is part of its key:
    a rerun with another `--budget` runs BRKGA again instead of reusing these."""
    done = {}
    for number, row in enumerate(read_own_rows(path, CACHE_FIELDS, "--cache",
                                               "row of brkga_equivalent.py"), 1):
        if not isinstance(row["key"], list) or len(row["key"]) != 5:
            raise UserError(f"--cache {path}: line {number} is not a row of "
                            "brkga_equivalent.py (its key is not five values)")
        done[(tuple(row["key"]), row["budget"])] = row
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", required=True, type=Path)
    parser.add_argument("--graphs", nargs="+", required=True, type=Path,
                        help="folders holding the run's graph files (matched by fingerprint)")
    parser.add_argument("--policy", default="data/policy",
                        help="compare the regal runs of this policy folder only (relative: to "
                        "the repository root first; default the shipped data/policy)")
    parser.add_argument("--budget", type=positive_int, default=50000)
    parser.add_argument("--seeds", type=positive_int, default=1, help="seeds 0..N-1 (default 1)")
    parser.add_argument("--out", required=True, type=Path, help="Markdown table")
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON lines of finished graphs (default: OUT with .jsonl)")
    args = parser.parse_args(argv)
    cache = args.cache or args.out.with_suffix(".jsonl")
    if not args.records.exists():
        raise UserError(f"--records {args.records}: no such file or folder")
    for folder in args.graphs:
        if not folder.is_dir():
            raise UserError(f"--graphs {folder}: no such folder")
    if cache.is_dir():
        raise UserError(f"--cache {cache}: is a folder; expected a JSON-lines file")
    check_output("--cache", cache, inputs=(args.records,))
    check_output("--out", args.out, inputs=(args.records, cache))

    paths = {e.fingerprint: e.path for e in harness.find_graphs(
        {folder.name: folder for folder in args.graphs})}
    wanted = {k: v for k, v in targets(args.records, args.policy).items()
              if k[4] < args.seeds and k[0] in paths and "regal" in v}
    from tqdm import tqdm

    # opening the cache cuts a torn last line (a killed run) and refuses a second writer
    with JsonLinesWriter(cache, f"{cache} is being written by another run") as writer:
        done = read_cache(cache)
        todo = [key for key in sorted(wanted, key=lambda k: (k[2], k[3], k[1], k[4]))
                if (key, args.budget) not in done]
        for key in tqdm(todo, desc="BRKGA curves", unit="curve", disable=None):
            fingerprint, graph, dataset, devices, seed = key
            curve = brkga_curve(paths[fingerprint], devices, seed, args.budget)
            row = {"key": list(key), "budget": args.budget,
                   "brkga_5k": wanted[key].get("brkga", first_value(curve, 5000)),
                   "brkga_final": curve[-1][1],
                   **{f"{m}_value": wanted[key].get(m) for m in METHODS},
                   **{f"{m}_needs": (None if wanted[key].get(m) is None else
                                     first_reach(curve, wanted[key][m])) for m in METHODS}}
            writer.write(row)
            done[(key, args.budget)] = row
    # the rows of this budget and these seeds: the ones the header names
    rows = [row for (key, budget), row in done.items()
            if budget == args.budget and key[4] < args.seeds]
    refuse_empty(rows, f"--records {args.records} with --graphs "
                       f"{' '.join(map(str, args.graphs))} (no graph of the records found, "
                       f"or no regal run of --policy {args.policy} at 5,000 "
                       "evaluations)")
    write_text(args.out, table(rows, args))
    print(f"wrote {args.out}")
    return 0


def first_value(curve, evaluations: int) -> float:
    """BRKGA's best after `evaluations` (the curve's last point at or before it): BRKGA-5K
    where the records lack it (a 5K run also scores part of the next generation)."""
    return min(best for used, best in curve if used <= evaluations)


def table(rows: list[dict], args) -> str:
    lines = ["# Evaluations plain BRKGA needs to match a 5,000-evaluation answer", "",
             f"BRKGA (uniform keys, population 100) run to {args.budget:,} evaluations per graph and "
             f"device count, seed(s) 0..{args.seeds - 1}; for each method's 5K answer of the same seed, "
             f"the first evaluation count at which BRKGA's best is as good. 'never' = not within "
             f"{args.budget:,}. Median over graphs with 'never' counted as more than the budget. "
             f"Records: `{args.records}`. Made by `experiments/brkga_equivalent.py`.", ""]
    cells = []
    groups: dict = {}
    for row in rows:
        _, _, dataset, devices, _ = row["key"]
        groups.setdefault((dataset, devices), []).append(row)
    for (dataset, devices), group in sorted(groups.items()):
        gain = statistics.mean((r["brkga_5k"] - r["brkga_final"]) / r["brkga_5k"] * 100
                               for r in group)
        for method in METHODS:
            needs = [r[f"{method}_needs"] for r in group if r[f"{method}_value"] is not None]
            if not needs:
                continue
            as_numbers = [math.inf if n is None else n for n in needs]
            median = statistics.median(as_numbers)
            far = sum(n >= args.budget for n in as_numbers)
            cells.append([dataset, devices, len(needs), method,
                          "never" if math.isinf(median) else f"{median:,.0f}",
                          f"{far} of {len(needs)}", f"{gain:+.2f}"])
    lines += markdown_table(["dataset", "devices", "graphs", "method",
                             "median evaluations BRKGA needs",
                             f"graphs where BRKGA needs >= {args.budget:,} or never",
                             f"BRKGA-{args.budget / 1000:g}K over BRKGA-5K (%)"], cells, "lrrlrrr")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(report_user_errors("brkga_equivalent.py", main))
