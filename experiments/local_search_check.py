"""Local search against BRKGA-5K on the real graphs, at equal budget (tracker issue 21, item 4).

    nice -n 5 .venv/bin/python experiments/local_search_check.py                 # all 40, d=2,4
    nice -n 5 .venv/bin/python experiments/local_search_check.py --graphs resnet50_train_b32,vgg16_infer_b1

Prints one row per (graph, d): BRKGA-5K's mean peak over the seeds, local search's mean, and
the improvement (brkga - ls) / brkga in percent (docs/design.md §7's metric), then the mean over graphs
per device count. BRKGA's answer for a (graph, d, seed, budget) never changes, so it is read from
a JSON cache (default /tmp/regal_brkga_cache.json) keyed by the graph's fingerprint and computed
only when missing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _save_cache(path: Path, cache: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
    tmp.replace(path)


def brkga_value(problem, seed: int, budget: int, cache: dict, cache_path: Path) -> float:
    """BRKGA-`budget`'s peak for this problem and seed, from the cache or computed once."""
    from regal.optimizers import solve

    key = f"{problem.graph.fingerprint()}/d{problem.devices.count}/s{seed}/b{budget}"
    if key not in cache:
        cache.update(_load_cache(cache_path))  # another run may have filled it meanwhile
    if key not in cache:
        cache[key] = solve("brkga", problem, budget, seed).value
        _save_cache(cache_path, cache)
    return float(cache[key])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-dir", default=str(ROOT / "data" / "real"))
    parser.add_argument("--graphs", help="comma-separated graph names (file stems); default all")
    parser.add_argument("--devices", default="2,4")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=5000)
    parser.add_argument("--cache", default="/tmp/regal_brkga_cache.json")
    parser.add_argument("--brkga-only", action="store_true", help="only fill the cache")
    args = parser.parse_args(argv)

    from regal.io import load_graph
    from regal.optimizers import Problem, solve
    from regal.sim import DeviceSpec

    files = sorted(Path(args.real_dir).glob("*.npz"))
    if args.graphs:
        wanted = args.graphs.split(",")
        by_stem = {p.stem: p for p in files}
        unknown = [w for w in wanted if w not in by_stem]
        if unknown:
            parser.error(f"--graphs: no {', '.join(unknown)} in {args.real_dir}")
        files = [by_stem[w] for w in wanted]
    device_counts = [int(x) for x in args.devices.split(",")]
    cache_path = Path(args.cache)
    cache = _load_cache(cache_path)

    rows = {d: [] for d in device_counts}
    print(f"{'graph':32s} {'ops':>6s} {'d':>2s} {'brkga-5k':>12s} {'local-search':>12s} "
          f"{'impr %':>7s} {'ls s':>6s}", flush=True)
    for path in files:
        graph = load_graph(path)
        for d in device_counts:
            problem = Problem(graph, DeviceSpec(d))
            seeds = range(args.seeds)
            brkga = [brkga_value(problem, s, args.budget, cache, cache_path) for s in seeds]
            if args.brkga_only:
                print(f"{path.stem:32s} {graph.num_nodes:6d} {d:2d} "
                      f"{sum(brkga) / len(brkga) / 2**20:12.2f}", flush=True)
                continue
            start = time.perf_counter()
            local = [solve("local-search", problem, args.budget, s).value for s in seeds]
            seconds = (time.perf_counter() - start) / len(local)
            b, ls = sum(brkga) / len(brkga), sum(local) / len(local)
            improvement = 100.0 * (b - ls) / b
            rows[d].append(improvement)
            print(f"{path.stem:32s} {graph.num_nodes:6d} {d:2d} {b / 2**20:12.2f} "
                  f"{ls / 2**20:12.2f} {improvement:7.2f} {seconds:6.1f}", flush=True)
    if not args.brkga_only:
        print("peaks in MiB; improvement = mean over seeds' peaks, (brkga - ls) / brkga")
        for d in device_counts:
            if rows[d]:
                print(f"d={d}: mean improvement over {len(rows[d])} graphs: "
                      f"{sum(rows[d]) / len(rows[d]):+.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
