"""The baseline comparison (issue 5, docs/design.md §7): every method on the synthetic test split and
on the real graph set, through the resumable harness, then Table 1.

    .venv/bin/python experiments/baseline_table.py --quick     # a few minutes: small subsets
    .venv/bin/python experiments/baseline_table.py             # 100 synthetic + real inference b1

Raw records go to runs/ (git-ignored; rerun the same command to resume after a kill);
tables (Markdown, CSV, bar chart) go to experiments/results/baselines[_quick]/ (none is committed
now: the current comparison of methods is experiments/results/transfer_full/, and the
earlier baseline tables are in git history, see experiments/results/README.md).
A method name that regal.optimizers.METHODS does not know is refused (exit code 2), as is a
--real-dir that holds no graph matching --real-pattern.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from regal.arguments import (check_device_counts, check_output, int_list,  # noqa: E402
                             non_negative_int, positive_float, positive_int)
from regal.user_errors import UserError, report_user_errors  # noqa: E402

ALL_METHODS = ("brkga", "tuned-brkga", "cpsat", "gp-dfs", "local-search", "random", "m-topo",
               "m-etf")

FULL = dict(synth=100, real_pattern="_infer_b1", real_max_ops=None, seeds=3, budget=5000,
            long_budget=50000, cpsat_time_limit=10.0)
QUICK = dict(synth=8, real_pattern="_infer_b1", real_max_ops=700, seeds=2, budget=500,
             long_budget=2000, cpsat_time_limit=3.0)


def synth_folder(count: int, graphs_dir: Path) -> Path:
    """The first `count` graphs of the synthetic test split, written once (resumable)."""
    from regal import synth

    folder = graphs_dir / "synth_test"
    synth.materialize(synth.recipe_named("test", count=count), folder)
    return folder


def real_files(real_dir: Path, pattern: str) -> list[Path]:
    """The graph files of `real_dir` whose name contains `pattern`; a folder that is not there
    or holds none is the user's error (a typo would silently drop the real set)."""
    if not real_dir.is_dir():
        raise UserError(f"--real-dir {real_dir}: no such folder")
    files = sorted(p for p in real_dir.glob("*.npz") if pattern in p.stem)
    if not files:
        raise UserError(f"--real-dir {real_dir}: no .npz graph whose name contains "
                        f"{pattern!r} (--real-pattern)")
    return files


def real_folder(real_dir: Path, pattern: str, max_ops: int | None, graphs_dir: Path) -> Path | None:
    """A folder of links to the real graphs whose name contains `pattern` (and with at most
    `max_ops` ops), so the harness sees exactly that subset as dataset 'real'."""
    from regal.io import load_graph

    files = real_files(real_dir, pattern)
    if max_ops is not None:
        files = [p for p in files if load_graph(p).num_nodes <= max_ops]
    if not files:
        return None
    folder = graphs_dir / "real"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {p.name for p in files}
    for link in folder.glob("*.npz"):
        if link.name not in wanted or not link.exists():  # not chosen, or a dangling link
            link.unlink()
    for p in files:
        link = folder / p.name
        if not link.is_symlink():
            link.symlink_to(p.resolve())
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small subsets and budgets")
    parser.add_argument("--methods", default=",".join(ALL_METHODS))
    parser.add_argument("--synth", type=non_negative_int,
                        help="graphs of the synthetic test split (0: none)")
    parser.add_argument("--real-dir", default=str(ROOT / "data" / "real"))
    parser.add_argument("--real-pattern", help="only real graphs whose name contains this")
    parser.add_argument("--no-real", action="store_true", help="no real graphs: the synthetic "
                        "test split only")
    parser.add_argument("--seeds", type=positive_int)
    parser.add_argument("--devices", type=int_list, default="2",
                        help="device counts, e.g. 2,4 (default 2)")
    parser.add_argument("--budget", type=positive_int)
    parser.add_argument("--long-budget", type=non_negative_int,
                        help="one long brkga run per graph for the best-known value (0: none)")
    parser.add_argument("--cpsat-time-limit", type=positive_float)
    parser.add_argument("--workers", type=positive_int, default=None)
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--runs", help="folder for raw records (default runs/baselines[_quick])")
    parser.add_argument("--tables", help="folder for tables (default "
                        "experiments/results/baselines[_quick])")
    args = parser.parse_args(argv)
    if not args.devices:
        parser.error("--devices: expected device counts, e.g. 2,4")
    check_device_counts(args)

    from regal.harness import run_experiment
    from regal.optimizers import get_method
    from regal.report import write_report

    config = dict(QUICK if args.quick else FULL)
    for name in ("synth", "real_pattern", "seeds", "budget", "long_budget", "cpsat_time_limit"):
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    tag = "baselines_quick" if args.quick else "baselines"
    runs = Path(args.runs or ROOT / "runs" / tag)
    tables = Path(args.tables or ROOT / "experiments" / "results" / tag)
    check_output("--runs", runs, folder=True)
    check_output("--tables", tables, folder=True)

    methods = [m for m in args.methods.split(",") if m]
    for name in methods:      # unknown, or not installed (cpsat without OR-Tools)
        try:
            get_method(name)
        except ValueError as exc:
            raise UserError(f"--methods: {exc}") from None
    if "brkga" not in methods:
        raise UserError("--methods: brkga is the baseline of every table; it must be among "
                        "the methods")
    devices = args.devices
    if not args.no_real:
        real_files(Path(args.real_dir), config["real_pattern"])    # before any work
    datasets = {"synth_test": synth_folder(config["synth"], runs / "graphs")} \
        if config["synth"] else {}
    real = None if args.no_real else real_folder(
        Path(args.real_dir), config["real_pattern"], config["real_max_ops"], runs / "graphs")
    if args.no_real:
        pass
    elif real is None:
        print(f"no real graphs matching {config['real_pattern']!r} in {args.real_dir} with at "
              f"most {config['real_max_ops']} ops: skipped")
    else:
        datasets["real"] = real
    if not datasets:
        raise UserError("--synth 0 and no real graph (--no-real, or none within the size "
                        "limit): no graphs to run, so no table was written")
    print(f"config: {config}; methods: {', '.join(methods)}; datasets: "
          + ", ".join(f"{k} ({len(list(v.glob('*.npz')))} graphs)" for k, v in datasets.items()))

    options = {"cpsat": {"time_limit": config["cpsat_time_limit"]}} if "cpsat" in methods else {}
    common = dict(devices=devices, objectives="peak_memory", workers=args.workers, ray=args.ray)
    summary = run_experiment(methods, datasets, runs, seeds=config["seeds"],
                             budgets=config["budget"], method_options=options, **common)
    print(f"main grid: {summary.ran} ran, {summary.skipped} already recorded, "
          f"{summary.failed} failed")
    if config["long_budget"]:
        long = run_experiment(["brkga"], datasets, runs, seeds=[0],
                              budgets=config["long_budget"], **common)
        print(f"long brkga runs (best-known values): {long.ran} ran, {long.skipped} recorded")
    # only the graphs chosen now: data/real may have been rebuilt since older records
    from regal.harness import find_graphs
    current = {e.fingerprint for e in find_graphs(datasets)}
    result = write_report(runs, tables, baseline=("brkga", config["budget"]),
                          keep=lambda r: r["fingerprint"] in current)
    print(result["markdown"])
    print("wrote " + ", ".join(os.path.relpath(f, ROOT) for f in result["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(report_user_errors("baseline_table.py", main))
