"""Two methods against BRKGA-5K and against each other, over many seeds (no_harm.py's caches).

Why: with 3 seeds a graph's mean moves by about a point from luck, so "method A is ahead of
method B by 0.2 points" means little. `experiments/no_harm.py --below inf --seeds N` runs a
method and BRKGA on every graph of a transfer run with seeds 0..N-1; this reads two such
caches and prints, per dataset and device count: each method's mean and median improvement
over BRKGA-5K (per graph: mean over the seeds, the transfer tables' rule), the mean of their
per-graph difference with its standard error over graphs, the graphs where each is ahead, and
the two-sided Wilcoxon signed-rank p of the per-graph values (the tables' rule,
`regal.report.wilcoxon_p`).

    python experiments/no_harm.py ... --method regal --below inf --seeds 10 --out A.md
    python experiments/no_harm.py ... --method seeded-brkga --below inf --seeds 10 --out B.md
    python experiments/paired_seeds.py A.jsonl B.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from no_harm import improvement  # noqa: E402  the transfer tables' per-graph rule
from regal.report import markdown_table, wilcoxon_p  # noqa: E402  (no_harm put the repository on the path)
from regal.user_errors import UserError, report_user_errors  # noqa: E402


def read_cache(path: Path) -> tuple[str, dict]:
    """(method, {(dataset, devices, graph, fingerprint, memory limit): {seed: (brkga, value)}})
    of one no_harm cache; ValueError unless it holds the runs of one method at one budget
    against one method. Its keys are no_harm.py's: (fingerprint, graph, dataset, devices,
    memory limit), or without the limit (caches written before runs under limits: None). A
    torn last line (a kill mid-write) is left out."""
    runs: dict = defaultdict(dict)
    methods, budgets, against = set(), set(), set()
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()                     # torn by a kill: no_harm.py cuts it on its next run
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            fingerprint, graph, dataset, devices, *limit = row["key"]
            if len(limit) > 1:
                raise ValueError(f"a key of {len(row['key'])} values")
            runs[(dataset, int(devices), graph, fingerprint, limit[0] if limit else None)][
                int(row["seed"])] = (float(row["brkga"]), float(row["value"]))
            methods.add(row["method"])
            budgets.add(int(row["budget"]))
            against.add(row.get("against", "brkga"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a no_harm.py cache line ({exc})") from None
    if len(methods) != 1:
        raise ValueError(f"{path}: expected the runs of one method, found {sorted(methods)}")
    if len(budgets) != 1:
        raise ValueError(f"{path}: expected the runs of one budget, found {sorted(budgets)}")
    if len(against) != 1:
        raise ValueError(f"{path}: expected the runs against one method, found "
                         f"{sorted(against)}")
    return methods.pop(), dict(runs)


def compare(first: dict, second: dict) -> list[dict]:
    """One row per (dataset, devices): the graphs and seeds both caches hold."""
    groups: dict = defaultdict(list)
    for key in sorted(set(first) & set(second)):
        seeds = sorted(set(first[key]) & set(second[key]))
        # the same seed must have given the same BRKGA run in both caches
        seeds = [s for s in seeds if first[key][s][0] == second[key][s][0]]
        if seeds:
            groups[key[:2]].append((improvement([first[key][s] for s in seeds]),
                                    improvement([second[key][s] for s in seeds]), len(seeds)))
    rows = []
    for (dataset, devices), values in sorted(groups.items()):
        a = [x for x, _, _ in values]
        b = [y for _, y, _ in values]
        diff = [x - y for x, y in zip(a, b)]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
        rows.append(dict(dataset=dataset, devices=devices, graphs=len(values),
                         seeds=min(s for _, _, s in values), mean_a=statistics.fmean(a),
                         median_a=statistics.median(a), mean_b=statistics.fmean(b),
                         median_b=statistics.median(b), diff=statistics.fmean(diff), se=se,
                         a_ahead=sum(d > 0 for d in diff), b_ahead=sum(d < 0 for d in diff),
                         p=wilcoxon_p(a, b)))
    return rows


def markdown(name_a: str, name_b: str, rows: list[dict]) -> str:
    header = ["dataset", "devices", "graphs", "seeds", f"{name_a}: mean / median",
              f"{name_b}: mean / median", f"{name_a} - {name_b} (SE)",
              f"graphs ahead {name_a} / {name_b}", "Wilcoxon p"]
    cells = [[r["dataset"], r["devices"], r["graphs"], r["seeds"],
              f"{r['mean_a']:+.2f}% / {r['median_a']:+.2f}%",
              f"{r['mean_b']:+.2f}% / {r['median_b']:+.2f}%",
              f"{r['diff']:+.2f} ({r['se']:.2f})", f"{r['a_ahead']} / {r['b_ahead']}",
              "–" if r["p"] is None else f"{r['p']:.3f}"] for r in rows]
    return "\n".join(markdown_table(header, cells)) + "\n"


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="no_harm.py cache of the first method")
    parser.add_argument("second", type=Path, help="no_harm.py cache of the second method")
    args = parser.parse_args(argv)
    for path in (args.first, args.second):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    name_a, first = read_cache(args.first)
    name_b, second = read_cache(args.second)
    rows = compare(first, second)
    if not rows:
        raise UserError(f"{args.first} and {args.second}: the two caches share no graph and "
                        "seed (with the same run of the method both are measured against)")
    print("Improvement over BRKGA-5K of the same seeds (per graph: mean over seeds).\n")
    print(markdown(name_a, name_b, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
