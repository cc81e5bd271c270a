"""CP-SAT against gp-dfs on the real graphs (issue 24 item 9): never worse, and how often better.

    nice -n 5 .venv/bin/python experiments/cpsat_check.py [--time-limit 5] [--devices 2,4]
        [--budget 5000] [--graphs data/real/*.npz]

One worker (CP-SAT and the simulator's threads). Prints one row per graph and device count:
gp-dfs's peak, CP-SAT's, CP-SAT's status, where its answer came from, its wall time; then
the counts of graphs where CP-SAT beat, tied or lost to gp-dfs.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # before the simulator is imported
# the repository root, not experiments/ (whose baselines.py would hide the baselines package)
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import glob  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def main(argv=None) -> int:
    from tqdm import tqdm

    from regal.arguments import (check_device_counts, int_list, non_negative_int,
                                 positive_float, positive_int)
    from regal.user_errors import UserError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="*", default=None)
    parser.add_argument("--devices", type=int_list, default=[2, 4], metavar="D[,D...]")
    parser.add_argument("--time-limit", type=positive_float, default=5.0)
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    args = parser.parse_args(argv)
    if not args.devices:
        parser.error("--devices: expected at least one device count")
    check_device_counts(args)

    from regal.io import load_graph
    from regal.optimizers import Problem, solve
    from regal.sim import DeviceSpec

    paths = args.graphs or sorted(glob.glob(str(Path(__file__).parent.parent / "data/real/*.npz")))
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"--graphs {path}: "
                            + ("not a file" if Path(path).exists() else "no such file"))
    graphs = [(path, load_graph(path)) for path in paths]  # every file read before any run
    counts = {"beat": 0, "tie": 0, "lost": 0}
    print(f"{'graph':34} {'ops':>6} {'d':>2} {'gp-dfs':>14} {'cpsat':>14} {'gain %':>7} "
          f"{'status':>10} {'hint':>13} {'solver':>8} {'seconds':>8}", flush=True)
    jobs = [(path, graph, d) for path, graph in graphs for d in args.devices]
    for path, graph, d in tqdm(jobs, desc="graphs x devices", unit="run", disable=None):
        problem = Problem(graph, DeviceSpec(d), "peak_memory")
        reference = solve("gp-dfs", problem, 1, args.seed)
        began = time.perf_counter()
        found = solve("cpsat", problem, args.budget, args.seed, time_limit=args.time_limit)
        seconds = time.perf_counter() - began
        verdict = ("beat" if found.value < reference.value else
                   "tie" if found.value == reference.value else "lost")
        counts[verdict] += 1
        gain = 100 * (reference.value - found.value) / reference.value
        solver = found.extra.get("solver_status") or "skipped"
        tqdm.write(f"{Path(path).stem:34} {graph.num_nodes:>6} {d:>2} {reference.value:>14.0f} "
                   f"{found.value:>14.0f} {gain:>7.2f} {found.extra['status']:>10} "
                   f"{str(found.extra['hint_method']):>13} {solver:>8} {seconds:>8.1f}",
                   file=sys.stdout)
    print(f"cpsat vs gp-dfs: beat {counts['beat']}, tied {counts['tie']}, lost {counts['lost']}")
    return 1 if counts["lost"] else 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    raise SystemExit(report_user_errors("cpsat_check.py", main))
