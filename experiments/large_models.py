"""Large models placed to fit: the case users come for (tracker issue 41, item 4).

For each training step of `data/large` (GPT-2 small / medium / large shapes, a BERT-large-like
encoder; `regal data large`) and each device count, every method gets the same per-device
memory limit below the one-device peak (`--limit-factor` x the one-device peak / devices) and
the same time limit, and must place the graph to fit with the shortest step (objective
makespan). The table says whether each answer fits, its step time against one device, the
seconds to its first answer that fits, and the smallest per-device limit the method can meet:
for the searches the lowest peak they find when minimising peak memory under the same time
limit (a search that minimises the peak meets exactly that uniform limit), for the one-shot
heuristics a bisection over the limit (each probe is one run of the heuristic; `--bisect`
names which).

Every run is one JSON line in `--records` (resumable: a run already there is not repeated);
the tables go to stdout and to `--out`.

    python experiments/large_models.py --graphs data/large --batch 1 --devices 2 4 8 \\
        --time-limit 60 --out experiments/results/large_models.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal import optimizers  # noqa: E402
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.problem import Problem  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.sim.api import infeasible_offset  # noqa: E402
from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             non_negative_int, parse_size, positive_float, positive_int)
from regal.bounds import lower_bound  # noqa: E402
from regal.units import format_bytes  # noqa: E402

SEARCHES = ("regal", "local-search")
ONE_SHOT = ("layer-split", "m-etf", "m-topo")
LIMIT_FACTOR = 1.3   # --limit-factor's default; the records' keys name any other factor
RECORD_FIELDS = ("key", "graph", "devices", "method", "what", "limit")


def one_device_figures(graph) -> tuple[int, float]:
    """Peak bytes and step time of the whole graph on one device (framework order)."""
    one = optimizers.one_device(Problem(graph, DeviceSpec(1), "makespan"))
    return int(max(one.peak)), float(one.makespan)


def placed_run(graph, method: str, devices: DeviceSpec, objective: str, time_limit: float,
               seed: int) -> dict:
    """One run; `first_fit_s`: seconds until the best answer so far first fit the limits."""
    problem = Problem(graph, devices, objective)
    offset = infeasible_offset(graph, devices)
    start = time.perf_counter()
    first = []

    def progress(_evaluations, best):
        if not first and objective == "makespan" and best < offset:
            first.append(time.perf_counter() - start)

    options = {"time_limit": time_limit, "progress": progress} if method in SEARCHES else {}
    solution = optimizers.solve(method, problem, None if method in SEARCHES else 2, seed,
                                **options)
    wall = time.perf_counter() - start
    fits = bool(solution.feasible)
    if fits and not first:
        first.append(wall)  # a one-shot answer, or a search whose first answer already fit
    return {"peak": int(max(solution.peak)), "peaks": [int(p) for p in solution.peak],
            "step_us": float(solution.makespan), "fits": fits, "wall_s": wall,
            "first_fit_s": first[0] if fits else None,
            "evaluations": int(solution.evaluations)}


def smallest_limit(graph, method: str, count: int, high: int, seed: int,
                   steps: int) -> int | None:
    """The smallest uniform limit (bytes, to 1/2**steps of `high`) under which a one-shot
    heuristic's answer fits; None when it does not fit even under `high`."""
    def fits(limit: int) -> bool:
        problem = Problem(graph, DeviceSpec(count, int(limit)), "makespan")
        return bool(optimizers.solve(method, problem, 2, seed).feasible)

    if not fits(high):
        return None
    low = 0
    for _ in range(steps):
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


def graph_files(args) -> list[Path]:
    """The graph files asked for (`--files`, else `--graphs` by `--batch` and `--models`);
    a missing one, or a model or batch that matches none, is the user's error."""
    if args.files:
        files = [Path(f) for f in args.files]
        for path in files:
            if not path.is_file():
                raise UserError(f"--files {path}: no such file")
        return files
    folder = Path(args.graphs)
    if not folder.is_dir():
        raise UserError(f"--graphs {folder}: no such folder")
    everything = sorted(folder.glob("*.npz"))
    files = [f for f in everything if any(f.name.endswith(f"_b{b}.npz") for b in args.batch)]
    if not files:
        raise UserError(f"--graphs {folder}: no graph files for --batch "
                        f"{' '.join(map(str, args.batch))}")
    if args.models:
        unknown = [m for m in args.models if not any(f.name.startswith(m + "_") for f in files)]
        if unknown:
            known = sorted({f.name.split("_train")[0].split("_infer")[0] for f in everything})
            raise UserError(f"--models: no graph of {', '.join(unknown)} at --batch "
                            f"{' '.join(map(str, args.batch))} in {folder} (models there: "
                            f"{', '.join(known)})")
        files = [f for f in files if any(f.name.startswith(m + "_") for m in args.models)]
    return files


def read_records(path: Path) -> dict:
    """key -> record of `--records` (`regal.files.read_own_rows`; the writer has cut a torn
    last line); a file of anything else is the user's error."""
    return {row["key"]: row for row in read_own_rows(path, RECORD_FIELDS, "--records",
                                                      "large-model run")}

def run(args) -> list[dict]:
    records_file = Path(args.records)
    with JsonLinesWriter(records_file, f"{records_file} is being written by another run") \
            as writer:
        return _run(args, writer, read_records(records_file))


def _key(path: Path, count: int, method: str, what: str, args, limit: int) -> str:
    """A run's key: with `--limit` that limit; else the factor when it is not the default
    (the records made before the factor was part of the key are all of 1.3)."""
    key = f"{path.name}|{count}|{method}|{what}|{args.time_limit}|{args.seed}"
    if args.limit:
        return key + f"|{limit}"
    return key + ("" if args.limit_factor == LIMIT_FACTOR else f"|x{args.limit_factor}")


def _run(args, writer, done: dict) -> list[dict]:
    from tqdm import tqdm

    files = graph_files(args)
    whats = ("fit",) if args.fit_only else ("fit", "smallest")
    bar = tqdm(total=len(files) * len(args.devices) * len(args.methods) * len(whats),
               desc="large-model runs", unit="run", disable=None)
    out = []
    for path in files:
        graph = load_graph(path)
        one_peak, one_step = one_device_figures(graph)
        for count in args.devices:
            limit = args.limit or int(math.ceil(args.limit_factor * one_peak / count))
            bound = int(lower_bound(graph, count).value)   # above the limit: nothing fits
            for method in args.methods:
                for what in whats:
                    key = _key(path, count, method, what, args, limit)
                    if key in done:
                        out.append(dict(done[key], lower_bound=bound))
                    else:
                        record = _one_run(args, path, graph, count, method, what, key,
                                          (one_peak, one_step), limit, bound)
                        if record is not None:
                            writer.write(record)
                            bar.write(f"{path.name} d={count} {method} {what}: "
                                      f"{_short(record)}", file=sys.stdout)
                            out.append(record)
                    bar.update()
    bar.close()
    return out


def _one_run(args, path, graph, count, method, what, key, one_device, limit, bound):
    """The record of one run (None: a one-shot heuristic that `--bisect` leaves out)."""
    one_peak, one_step = one_device
    record = {"key": key, "graph": path.name, "ops": graph.num_nodes,
              "devices": count, "method": method, "what": what,
              "time_limit": args.time_limit, "seed": args.seed,
              "one_device_peak": one_peak, "one_device_step_us": one_step,
              "limit": limit, "limit_factor": args.limit_factor,
              "lower_bound": bound}
    if what == "fit":
        record.update(placed_run(graph, method, DeviceSpec(count, limit),
                                 "makespan", args.time_limit, args.seed))
    elif method in SEARCHES:
        run_ = placed_run(graph, method, DeviceSpec(count), "peak_memory",
                          args.time_limit, args.seed)
        record.update(smallest=run_["peak"], how="peak search",
                      wall_s=run_["wall_s"])
    elif method not in args.bisect:
        return None
    else:
        start = time.perf_counter()
        record.update(smallest=smallest_limit(graph, method, count, one_peak,
                                              args.seed, args.bisection_steps),
                      how="bisection", wall_s=time.perf_counter() - start)
    return record


def _short(record: dict) -> str:
    if record["what"] == "fit":
        return (f"fits={record['fits']} step={record['step_us'] / 1000:.2f} ms "
                f"wall={record['wall_s']:.1f} s")
    smallest = record["smallest"]
    return f"smallest limit {format_bytes(smallest) if smallest else 'none'}"


def tables(records: list[dict]) -> str:
    by = {}
    for r in records:
        by.setdefault((r["graph"], r["devices"]), {}).setdefault(r["method"], {})[r["what"]] = r
    rows = []
    for (graph, count), methods in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for method, parts in methods.items():
            fit, small = parts.get("fit"), parts.get("smallest")
            base = fit or small
            step = "" if fit is None else f"{fit['step_us'] / 1000:.1f}"
            ratio = "" if fit is None else f"{fit['step_us'] / base['one_device_step_us']:.3f}"
            rows.append([
                graph.removesuffix(".npz"), f"{base['ops']:,}", str(count),
                format_bytes(base["one_device_peak"]), format_bytes(base["limit"]), method,
                "" if fit is None else ("yes" if fit["fits"] else "no, proven"
                                        if base.get("lower_bound", 0) > base["limit"] else "no"),
                step if fit and fit["fits"] else (f"({step})" if step else ""),
                ratio if fit and fit["fits"] else (f"({ratio})" if ratio else ""),
                "" if fit is None or fit["first_fit_s"] is None else f"{fit['first_fit_s']:.1f}",
                "" if small is None else (format_bytes(small["smallest"]) if small["smallest"]
                                          else "none"),
                "" if small is None or not small["smallest"]
                else f"{small['smallest'] / base['one_device_peak']:.3f}",
            ])
    header = ["graph", "ops", "devices", "one-device peak", "limit", "method", "fits",
              "step ms", "step / one device", "first fit s", "smallest limit",
              "smallest / one-device peak"]
    return "\n".join(markdown_table(header, rows, align="lrrrrlllrrrr"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", default=str(REPO / "data" / "large"))
    parser.add_argument("--models", nargs="+", help="a subset, e.g. gpt2_small")
    parser.add_argument("--files", nargs="+", help="these graph files instead of --graphs")
    parser.add_argument("--limit", type=parse_size, default=None,
                        help="one per-device limit for every graph (e.g. 3GiB) instead of "
                        "--limit-factor")
    parser.add_argument("--title", help="the table's heading")
    parser.add_argument("--fit-only", action="store_true",
                        help="no smallest-limit runs")
    parser.add_argument("--batch", type=positive_int, nargs="+", default=[1])
    parser.add_argument("--devices", type=device_count, nargs="+", default=[2, 4, 8])
    parser.add_argument("--methods", nargs="+", default=list(SEARCHES + ONE_SHOT))
    parser.add_argument("--time-limit", type=positive_float, default=60.0)
    parser.add_argument("--limit-factor", type=positive_float, default=LIMIT_FACTOR)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--bisect", nargs="+", default=["layer-split", "m-topo"],
                        help="one-shot heuristics whose smallest limit is bisected (default "
                        "layer-split m-topo; m-etf takes minutes a run on 10k ops)")
    parser.add_argument("--bisection-steps", type=non_negative_int, default=7,
                        help="one-shot heuristics' smallest limit to 1/2**N of the one-device "
                        "peak (default 7)")
    parser.add_argument("--records", default=str(REPO / "experiments" / "results" /
                                                 "large_models.jsonl"))
    parser.add_argument("--out", default=str(REPO / "experiments" / "results" /
                                             "large_models.md"))
    args = parser.parse_args(argv)
    check_device_counts(args)
    for flag, names in (("--methods", args.methods), ("--bisect", args.bisect)):
        for name in names:
            try:
                optimizers.get_method(name)
            except ValueError as exc:
                raise UserError(f"{flag}: {exc}") from None
    graph_files(args)
    if Path(args.records).is_dir():
        raise UserError(f"--records {args.records}: is a folder; expected a JSON-lines file")
    check_output("--records", args.records)
    check_output("--out", args.out, inputs=(args.records,))
    records = run(args)
    refuse_empty(records, "--methods and --devices")
    title = args.title or "Large models placed to fit"
    text = (f"# {title}\n\nMade by `python experiments/large_models.py "
            f"{' '.join(argv if argv is not None else sys.argv[1:])}`.\n\n"
            + (f"Per-device limit {format_bytes(args.limit)} for every graph; " if args.limit
               else f"Per-device limit = {args.limit_factor} x the one-device peak / devices; ")
            + f"time limit {args.time_limit:g} s per search run (one process); step in "
            "parentheses: the answer does not fit; \"no, proven\": the lower bound on any "
            "placement's highest peak (`regal.bounds`) is above the limit, so nothing fits."
            + ("" if args.fit_only else " Smallest limit: searches, the lowest peak found "
               "minimising peak memory; one-shot heuristics, bisection.")
            + " One-device figures: the whole graph in a topological order (breadth first: "
            "on a micro-batched graph it runs the micro-batches side by side).\n\n"
            + tables(records) + "\n")
    print(text)
    write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(report_user_errors("large_models.py", main))
