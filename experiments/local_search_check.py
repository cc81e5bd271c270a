"""Local search against BRKGA-5K on the real graphs, at equal budget (tracker issue 21, item 4).

    nice -n 5 .venv/bin/python experiments/local_search_check.py                 # all 40, d=2,4
    nice -n 5 .venv/bin/python experiments/local_search_check.py --graphs resnet50_train_b32,vgg16_infer_b1

Prints one row per (graph, d): BRKGA-5K's mean peak over the seeds, local search's mean, and
the improvement (brkga - ls) / brkga in percent (docs/design.md §7's metric), then the mean over graphs
per device count. A run's answer for a (method revision, graph, d, seed, budget) never changes,
so both methods' answers are kept in a JSON cache (default /tmp/regal_brkga_cache.json) keyed
by the method, its code revision (`regal.optimizers.REVISIONS`) and the graph's fingerprint,
saved after each run and computed only when missing (a rerun after a kill resumes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from regal.arguments import (check_device_counts, check_output, int_list,  # noqa: E402
                             positive_int)
from regal.files import write_json  # noqa: E402
from regal.user_errors import UserError, report_user_errors  # noqa: E402


# a cache key (`_key`): method@revision/fingerprint/devices/seed/budget
KEY_SHAPE = re.compile(r"^[\w-]+@[^/]*/[0-9a-f]{16}/d\d+/s\d+/b\d+$")


def _load_cache(path: Path) -> dict:
    """The cache's entries ({} when there is no file yet); a file that is not this script's
    cache (another JSON file, garbled text, a folder) is the user's error: it is neither read
    nor overwritten."""
    if path.is_dir():
        raise UserError(f"--cache {path}: is a folder; expected a JSON file")
    try:
        cache = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"--cache {path}: not a cache of this script ({exc}); give another "
                        "--cache") from None
    if not isinstance(cache, dict) or not all(
            isinstance(v, (int, float, list)) and isinstance(k, str) and KEY_SHAPE.match(k)
            for k, v in cache.items()):
        raise UserError(f"--cache {path}: not a cache of this script (expected a JSON object "
                        "of run answers keyed method@revision/fingerprint/dN/sN/bN); give "
                        "another --cache")
    return cache


def _save_cache(path: Path, cache: dict) -> None:
    write_json(path, cache, indent=0, sort_keys=True)   # replaced in one step


def _key(method: str, problem, seed: int, budget: int) -> str:
    from regal.optimizers import method_revision

    return (f"{method}@{method_revision(method)}/{problem.graph.fingerprint()}"
            f"/d{problem.devices.count}/s{seed}/b{budget}")


def _cached(method: str, problem, seed: int, budget: int, cache: dict, cache_path: Path):
    """`method`'s cached answer for this problem and seed, else computed once and saved:
    BRKGA's peak; local search's [peak, seconds]."""
    from regal.optimizers import solve

    key = _key(method, problem, seed, budget)
    if key not in cache:
        cache.update(_load_cache(cache_path))  # another run may have filled it meanwhile
    if key not in cache:
        start = time.perf_counter()
        value = float(solve(method, problem, budget, seed).value)
        cache[key] = value if method == "brkga" else [value, time.perf_counter() - start]
        _save_cache(cache_path, cache)
    return cache[key]


def brkga_value(problem, seed: int, budget: int, cache: dict, cache_path: Path) -> float:
    """BRKGA-`budget`'s peak for this problem and seed, from the cache or computed once."""
    return float(_cached("brkga", problem, seed, budget, cache, cache_path))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-dir", default=str(ROOT / "data" / "real"))
    parser.add_argument("--graphs", help="comma-separated graph names (file stems); default all")
    parser.add_argument("--devices", type=int_list, default="2,4")
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--cache", default="/tmp/regal_brkga_cache.json")
    parser.add_argument("--brkga-only", action="store_true", help="only fill the cache")
    args = parser.parse_args(argv)
    if not args.devices:
        parser.error("--devices: expected device counts, e.g. 2,4")
    check_device_counts(args)

    from tqdm import tqdm

    from regal.io import load_graph
    from regal.optimizers import Problem
    from regal.sim import DeviceSpec

    real_dir = Path(args.real_dir)
    if not real_dir.is_dir():
        raise UserError(f"--real-dir {real_dir}: no such folder")
    files = sorted(real_dir.glob("*.npz"))
    if not files:
        raise UserError(f"--real-dir {real_dir}: no .npz graph files in this folder")
    if args.graphs:
        wanted = args.graphs.split(",")
        by_stem = {p.stem: p for p in files}
        unknown = [w for w in wanted if w not in by_stem]
        if unknown:
            parser.error(f"--graphs: no {', '.join(unknown)} in {args.real_dir}")
        files = [by_stem[w] for w in wanted]
    device_counts = args.devices
    cache_path = Path(args.cache)
    check_output("--cache", cache_path)
    cache = _load_cache(cache_path)

    rows = {d: [] for d in device_counts}
    print(f"{'graph':32s} {'ops':>6s} {'d':>2s} {'brkga-5k':>12s} {'local-search':>12s} "
          f"{'impr %':>7s} {'ls s':>6s}", flush=True)
    bar = tqdm(total=len(files) * len(device_counts), desc="graphs x devices", unit="row",
               disable=None)
    for path in files:
        graph = load_graph(path)
        for d in device_counts:
            problem = Problem(graph, DeviceSpec(d))
            seeds = range(args.seeds)
            brkga = [brkga_value(problem, s, args.budget, cache, cache_path) for s in seeds]
            if args.brkga_only:
                bar.write(f"{path.stem:32s} {graph.num_nodes:6d} {d:2d} "
                          f"{sum(brkga) / len(brkga) / 2**20:12.2f}", file=sys.stdout)
                bar.update()
                continue
            local = [_cached("local-search", problem, s, args.budget, cache, cache_path)
                     for s in seeds]
            seconds = sum(s for _, s in local) / len(local)
            b, ls = sum(brkga) / len(brkga), sum(v for v, _ in local) / len(local)
            improvement = 100.0 * (b - ls) / b
            rows[d].append(improvement)
            bar.write(f"{path.stem:32s} {graph.num_nodes:6d} {d:2d} {b / 2**20:12.2f} "
                      f"{ls / 2**20:12.2f} {improvement:7.2f} {seconds:6.1f}", file=sys.stdout)
            bar.update()
    bar.close()
    if not args.brkga_only:
        print("peaks in MiB; improvement = mean over seeds' peaks, (brkga - ls) / brkga")
        for d in device_counts:
            if rows[d]:
                print(f"d={d}: mean improvement over {len(rows[d])} graphs: "
                      f"{sum(rows[d]) / len(rows[d]):+.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(report_user_errors("local_search_check.py", main))
