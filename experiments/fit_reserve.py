"""What the fit reserve changes: `seeded-brkga` with and without `FIT_RESERVE` on every
step-time run under memory limits of a transfer run's records, paired by seed.

Why: under the step-time objective with limits the pipeline keeps a fifth of the climbs'
budget back (`regal.search.pipeline.finish_fitting`: a misfit is climbed to a fit on peak
memory, then on the step; a fit is climbed once more). It was added for large graphs where
the race never fits (GPT-2 small on 8 devices); this measures what it costs or gains where the
race does fit, on the small graphs the tables are made of. `seeded-brkga` is the pipeline
without the policy, so the policy plays no part. Resumable: one JSON line per run in
`--cache`.

    python experiments/fit_reserve.py --records experiments/results/transfer_full/records.jsonl \\
        --graphs runs/transfer_graphs/synth_test_100 --out experiments/results/fit_reserve.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal.arguments import check_output  # noqa: E402
from regal.files import JsonLinesWriter, read_json_lines, write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.optimizers import Problem, solve  # noqa: E402
from regal.records import read_records  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402
import regal.search.pipeline as pipeline  # noqa: E402

METHOD = "seeded-brkga"
# the pipeline's FIT_RESERVE when the cache's first lines were made (they do not name it)
FIRST_RESERVE = 0.2


def cases(records_file: Path) -> list[dict]:
    """The distinct (graph, devices, limit, seed, budget, options) of the records' step-time
    runs of `METHOD` under a memory limit, in file order (a torn last line, a run under way
    or killed, is left out)."""
    seen, out = set(), []
    for r in read_records(records_file):
        if r.get("method") != METHOD or r.get("memory_limit") is None \
                or r.get("objective") != "makespan":
            continue
        case = {"graph": r["graph"], "fingerprint": r["fingerprint"], "devices": r["devices"],
                "limit": r["memory_limit"], "seed": r["seed"], "budget": r["budget"],
                "options": r["options"]}
        key = json.dumps(case, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def run_case(graph, case: dict, reserve: float) -> dict:
    """One run of `METHOD` with `FIT_RESERVE` = `reserve`."""
    saved = pipeline.FIT_RESERVE
    pipeline.FIT_RESERVE = reserve
    try:
        found = solve(METHOD, Problem(graph, DeviceSpec(case["devices"], case["limit"]),
                                      "makespan"),
                      case["budget"], case["seed"], **json.loads(case["options"]))
    finally:
        pipeline.FIT_RESERVE = saved
    return {"fits": bool(found.feasible), "value": float(found.value),
            "step_us": float(found.makespan)}


def table(rows: list[dict], reserve: float) -> str:
    """Per device count: runs, fits without and with the reserve, and the step's relative
    change where both fit (mean, median, better/worse counts, extremes)."""
    out = []
    for count in sorted({r["devices"] for r in rows}):
        mine = [r for r in rows if r["devices"] == count]
        both = [(r["without"]["step_us"], r["with"]["step_us"]) for r in mine
                if r["without"]["fits"] and r["with"]["fits"]]
        change = [(b - a) / a * 100.0 for a, b in both]
        out.append([str(count), f"{len(mine):,}",
                    f"{sum(r['without']['fits'] for r in mine):,}",
                    f"{sum(r['with']['fits'] for r in mine):,}",
                    f"{statistics.fmean(change):+.3f}", f"{statistics.median(change):+.3f}",
                    f"{sum(c < 0 for c in change)}/{sum(c > 0 for c in change)}",
                    f"{min(change):+.2f} / {max(change):+.2f}"])
    header = ["devices", "runs", "fit without", f"fit with {reserve:g}",
              "step change % (mean)", "median", "shorter/longer", "min / max"]
    return "\n".join(markdown_table(header, out, align="rrrrrrrr"))


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", required=True, help="a transfer run's records.jsonl")
    parser.add_argument("--graphs", required=True, help="the folder of its graph files")
    parser.add_argument("--cache", default=str(REPO / "experiments" / "results" /
                                               "fit_reserve.jsonl"))
    parser.add_argument("--out", default=str(REPO / "experiments" / "results" /
                                             "fit_reserve.md"))
    args = parser.parse_args(argv)
    if not Path(args.records).is_file():
        raise UserError(f"--records {args.records}: no such file")
    if not Path(args.graphs).is_dir():
        raise UserError(f"--graphs {args.graphs}: no such folder")
    check_output("--cache", args.cache, inputs=(args.records,))
    check_output("--out", args.out, inputs=(args.records, args.cache))
    reserve = pipeline.FIT_RESERVE
    todo = cases(Path(args.records))
    refuse_empty(todo, f"--records {args.records}: no step-time runs of {METHOD} under a "
                 "memory limit")
    graphs, rows = {}, []
    # the writer first: it holds the cache's lock and cuts a torn last line left by a kill
    with JsonLinesWriter(args.cache, busy=f"--cache {args.cache} is being written by "
                         "another run") as writer:
        try:
            # a line made with another reserve (the pipeline's changed since) is made again
            done = {json.dumps(r["case"], sort_keys=True): r for r in read_json_lines(args.cache)
                    if r.get("reserve", FIRST_RESERVE) == reserve}
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--cache {args.cache}: not a cache of this script "
                            f"({type(exc).__name__}: {exc})") from None
        missing = sorted({case["graph"] for case in todo
                          if json.dumps(case, sort_keys=True) not in done
                          and not (Path(args.graphs) / f"{case['graph']}.npz").is_file()})
        if missing:
            raise UserError(f"--graphs {args.graphs}: no {missing[0]}.npz (of {len(missing)} "
                            "graph(s) the records ran on that the cache lacks)")
        for case in tqdm(todo, desc="cases", unit="case", disable=None):
            key = json.dumps(case, sort_keys=True)
            if key in done:
                rows.append(done[key])
                continue
            path = Path(args.graphs) / f"{case['graph']}.npz"
            graph = graphs.setdefault(str(path), load_graph(path))
            if graph.fingerprint() != case["fingerprint"]:
                raise UserError(f"--graphs: {path}: fingerprint {graph.fingerprint()}, the "
                                f"records' {case['fingerprint']}: not the graph they ran")
            row = {"case": case, "devices": case["devices"], "reserve": reserve,
                   "without": run_case(graph, case, 0.0),
                   "with": run_case(graph, case, reserve)}
            writer.write(row)
            rows.append(row)
    text = ("# The fit reserve, paired\n\nMade by `python experiments/fit_reserve.py "
            f"{' '.join(argv if argv is not None else sys.argv[1:])}`.\n\n"
            f"`{METHOD}` with `FIT_RESERVE` {reserve:g} (the pipeline's) and 0 (without it) on "
            "each step-time run under a memory limit of the records, same seed and budget. "
            "Step change: (with - without) / without over the runs where both fit.\n\n"
            + table(rows, reserve) + "\n")
    print(text)
    write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
