"""The baseline comparison (issue 5, docs/design.md §7): every method on the synthetic test split and
on the real graph set, through the resumable harness, then Table 1.

    .venv/bin/python experiments/baseline_table.py --quick     # a few minutes: small subsets
    .venv/bin/python experiments/baseline_table.py             # 100 synthetic + real inference b1

Raw records go to runs/ (git-ignored; rerun the same command to resume after a kill);
tables (Markdown, CSV, bar chart) go to experiments/results/baselines[_quick]/ (none is committed
now: the current comparison of methods is experiments/results/transfer_full/, and the
earlier baseline tables are in git history, see experiments/results/README.md).
Methods not registered yet in regal.optimizers.METHODS are skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALL_METHODS = ("brkga", "tuned-brkga", "cpsat", "gp-dfs", "local-search", "random", "m-topo",
               "m-etf")

FULL = dict(synth=100, real_pattern="_infer_b1", real_max_ops=None, seeds=3, budget=5000,
            long_budget=50000, cpsat_time_limit=10.0)
QUICK = dict(synth=8, real_pattern="_infer_b1", real_max_ops=700, seeds=2, budget=500,
             long_budget=2000, cpsat_time_limit=3.0)


def available(methods) -> tuple[list[str], list[str]]:
    """(methods that load, methods that do not) - the baselines land one by one."""
    from regal import optimizers

    ok, missing = [], []
    for name in methods:
        try:
            optimizers.get_method(name)
            ok.append(name)
        except ValueError as exc:
            print(f"skipping {name}: {exc}")
            missing.append(name)
    return ok, missing


def synth_folder(count: int, graphs_dir: Path) -> Path:
    """The first `count` graphs of the synthetic test split, written once (resumable)."""
    from regal import synth

    folder = graphs_dir / "synth_test"
    synth.materialize(synth.recipe_named("test", count=count), folder)
    return folder


def real_folder(real_dir: Path, pattern: str, max_ops: int | None, graphs_dir: Path) -> Path | None:
    """A folder of links to the real graphs whose name contains `pattern` (and with at most
    `max_ops` ops), so the harness sees exactly that subset as dataset 'real'."""
    from regal.io import load_graph

    files = sorted(p for p in real_dir.glob("*.npz") if pattern in p.stem) \
        if real_dir.is_dir() else []
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small subsets and budgets")
    parser.add_argument("--methods", default=",".join(ALL_METHODS))
    parser.add_argument("--synth", type=int, help="graphs of the synthetic test split")
    parser.add_argument("--real-dir", default=str(ROOT / "data" / "real"))
    parser.add_argument("--real-pattern", help="only real graphs whose name contains this")
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--devices", default="2", help="device counts, e.g. 2,4 (default 2)")
    parser.add_argument("--budget", type=int)
    parser.add_argument("--long-budget", type=int,
                        help="one long brkga run per graph for the best-known value (0: none)")
    parser.add_argument("--cpsat-time-limit", type=float)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--runs", help="folder for raw records (default runs/baselines[_quick])")
    parser.add_argument("--tables", help="folder for tables (default "
                        "experiments/results/baselines[_quick])")
    args = parser.parse_args(argv)

    from regal.harness import run_experiment
    from regal.report import write_report

    config = dict(QUICK if args.quick else FULL)
    for name in ("synth", "real_pattern", "seeds", "budget", "long_budget", "cpsat_time_limit"):
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    tag = "baselines_quick" if args.quick else "baselines"
    runs = Path(args.runs or ROOT / "runs" / tag)
    tables = Path(args.tables or ROOT / "experiments" / "results" / tag)

    methods, missing = available([m for m in args.methods.split(",") if m])
    if missing:
        print(f"not registered yet, skipped: {', '.join(missing)}")
    if "brkga" not in methods:
        raise SystemExit("brkga is the baseline of every table; it must be among the methods")
    devices = [int(x) for x in args.devices.split(",") if x.strip()]
    datasets = {"synth_test": synth_folder(config["synth"], runs / "graphs")} \
        if config["synth"] else {}
    real = real_folder(Path(args.real_dir), config["real_pattern"], config["real_max_ops"],
                       runs / "graphs")
    if real is None:
        print(f"no real graphs matching {config['real_pattern']!r} in {args.real_dir}: skipped")
    else:
        datasets["real"] = real
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
    sys.exit(main())
