"""Ways to spend REGAL's budget between BRKGA and local search, compared at equal budget.

Why: at 5,000 evaluations plain local search from the heuristic starts was ahead of REGAL
(then: BRKGA with the policy on half the budget, local search from its best on the other
half) on the synthetic test split. This script measures the schedules tried to close that
gap; its table chose the shipped one (data/policy/README.md quotes it):

    brkga-polish     the `regal` method before: policy BRKGA on 50%, local search from its
                     best on the rest (polish_share 0.5, fresh_climbs 0)
    ls-first         local search from the heuristic starts on 40% of the budget, policy BRKGA
                     with that answer in its first population on 20%, then local search from
                     the better of the two on the rest
    seeded-ls-first  ls-first with uniform keys (what the policy adds to it)
    two-climbs       the `regal` method before the race: policy BRKGA on 20%, then two local
                     searches of 40% each, one from BRKGA's best and one from the heuristic
                     starts; the best answer (polish_share 0.8, fresh_climbs 1, race (0.5,))
    two-climbs-10    two-climbs with BRKGA on 10% (two climbs of 45% each)
    local-search     the baseline: local search from the heuristic starts on all of it
    two-fresh        no BRKGA: two local searches from the heuristic starts, half the budget
                     each (seeds s and s + 1), the better answer (is BRKGA's basin worth more
                     than a second start?)
    race             the shipped `regal` method: policy BRKGA on 10%, then a climb from its
                     best and two afresh from the heuristic starts race by successive halving
                     (all three to 7.5% of the rest, the better two to 22.5%, the leader
                     spends the rest; regal.search.schedule.DEFAULT_SCHEDULE: climb_share
                     0.9, fresh_climbs 2, race (0.075, 0.225))
    race-20          race with BRKGA on 20% (polish_share 0.8)
    seeded-race      race with uniform keys (the `seeded-brkga` baseline: what the policy adds)
    fresh-race       no BRKGA: two local searches from the heuristic starts (seeds s, s + 1)
                     to 20% each, the leader spends the rest (a race without BRKGA's basin)

Every percentage is the improvement over plain BRKGA with the same budget and seeds, per graph
from the means over the seeds (as in the transfer tables), then summarised over the graphs of
a folder. Resumable: one JSON line per (schedule, graph, devices, seed) in `--cache`.

    python experiments/budget_schedules.py --graphs runs/transfer_graphs/synth_test_100 \\
        runs/transfer_graphs/real_heldout_all --out experiments/results/budget_schedules.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal import optimizers, regal_method  # noqa: E402
from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             non_negative_int, positive_int)
from regal.decode import encode  # noqa: E402
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402
from regal.search.pipeline import brkga_phase, race_climbs  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402

SCHEDULES = ("brkga-polish", "ls-first", "seeded-ls-first", "two-climbs", "two-climbs-10",
             "local-search", "two-fresh", "race", "race-20", "seeded-race",
             "fresh-race")
FRESH_RACE_ROUND = 0.2      # fresh-race: each climb's share before the leader goes on
LEAD, MIDDLE = 0.4, 0.2     # ls-first: local search's lead, then BRKGA's share


def _keys(problem, found) -> np.ndarray:
    return encode(found.placement, found.priority, found.transfer_priority,
                  problem.devices.count, problem.graph)[None, :]


def _brkga_params(problem, seed: int, policy: bool):
    """`regal.search.pipeline.brkga_phase` settings, the policy's (slot space) or uniform keys, both with
    the reference candidates in the first population; and the reference."""
    if policy:
        action = regal_method.load_policy().act(problem.graph, problem.devices, mode="greedy",
                                                seed=seed, objective=problem.objective)
        return regal_method.search_params(action), action.reference
    from regal.policy.reference import reference_for

    reference = reference_for(problem.graph, problem.devices, problem.objective)
    return {"initial": reference.seeds, "spent": reference.evaluations}, reference


def _ls_first(problem, budget: int, seed: int, policy: bool):
    lead = optimizers.solve("local-search", problem, int(budget * LEAD), seed)
    params, reference = _brkga_params(problem, seed, policy)
    keys = _keys(problem, lead)
    if "gene_order" in params:   # the policy's BRKGA searches in slot space
        keys = reference.slot_space(keys)
    params["initial"] = np.vstack([params["initial"], keys])
    middle = int(budget * MIDDLE)
    found = brkga_phase(problem, lead.evaluations + middle, seed,
                        **dict(params, spent=lead.evaluations + params.get("spent", 0)))
    start = found if found.value <= lead.value else lead
    left = int(budget) - int(found.evaluations)
    polished = race_climbs(problem, start, left, seed)
    # what was spent: the lead and BRKGA, then the polish's own evaluations
    return polished.value, int(found.evaluations) + int(polished.evaluations) - \
        int(start.evaluations)


def _fresh_race(problem, budget: int, seed: int) -> tuple[float, int]:
    from regal.search.climb import Climb

    first = max(1, int(budget * FRESH_RACE_ROUND))
    climbs = [Climb(problem, first, seed + k) for k in (0, 1)]
    for climb in climbs:
        climb.run(first)
    leader, other = sorted(climbs, key=lambda climb: climb.best_key)  # stable: seed s on ties
    leader.run(budget - other.used)
    return leader.value, int(leader.used) + int(other.used)


def run_schedule(name: str, problem, budget: int, seed: int) -> tuple[float, int]:
    """(value, evaluations used) of one schedule."""
    if name == "brkga":
        found = optimizers.solve("brkga", problem, budget, seed)
    elif name == "brkga-polish":
        found = optimizers.solve("regal", problem, budget, seed, polish_share=0.5,
                                 fresh_climbs=0)
    elif name == "two-climbs":
        found = optimizers.solve("regal", problem, budget, seed, polish_share=0.8,
                                 fresh_climbs=1, race=(0.5,))
    elif name == "two-climbs-10":
        found = optimizers.solve("regal", problem, budget, seed, polish_share=0.9,
                                 fresh_climbs=1, race=(0.5,))
    elif name in ("race", "race-20", "seeded-race"):   # settings pinned: one schedule per name
        found = optimizers.solve("seeded-brkga" if name == "seeded-race" else "regal", problem,
                                 budget, seed, polish_share=0.8 if name == "race-20" else 0.9,
                                 fresh_climbs=2, race=(0.075, 0.225))
    elif name == "fresh-race":
        return _fresh_race(problem, budget, seed)
    elif name == "local-search":
        found = optimizers.solve("local-search", problem, budget, seed)
    elif name in ("ls-first", "seeded-ls-first"):
        return _ls_first(problem, budget, seed, policy=name == "ls-first")
    elif name == "two-fresh":
        first = optimizers.solve("local-search", problem, budget // 2, seed)
        second = optimizers.solve("local-search", problem, budget - int(first.evaluations),
                                  seed + 1)
        return (min(float(first.value), float(second.value)),
                int(first.evaluations) + int(second.evaluations))
    else:
        raise ValueError(f"schedule: unknown {name!r}; expected one of {', '.join(SCHEDULES)}")
    return float(found.value), int(found.evaluations)


def summarise(rows: list[dict], schedules, splits, devices) -> str:
    """Markdown table: per split and device count, each schedule's mean / median / worst graph
    improvement over BRKGA (per graph: mean BRKGA vs mean schedule over the seeds) and the
    graphs below -1%."""
    values = {(r["schedule"], r["split"], r["graph"], r["devices"], r["seed"]): r["value"]
              for r in rows}
    cells = []
    for split in splits:
        for d in devices:
            for name in schedules:
                per_graph = {}
                for (s, sp, g, dd, seed), value in values.items():
                    base = values.get(("brkga", sp, g, dd, seed))
                    if s == name and sp == split and dd == d and base:
                        per_graph.setdefault(g, []).append((base, value))
                if not per_graph:
                    continue
                means = [100.0 * (1.0 - statistics.fmean(v for _, v in pairs)
                                  / statistics.fmean(b for b, _ in pairs))
                         for pairs in per_graph.values()]
                cells.append([split, d, name, f"{statistics.fmean(means):+.2f}%",
                              f"{statistics.median(means):+.2f}%", f"{min(means):+.2f}%",
                              f"{sum(m < -1.0 for m in means)} of {len(means)}"])
    return "\n".join(markdown_table(["split", "devices", "schedule", "mean", "median",
                                      "worst graph", "graphs below -1%"], cells,
                                     "lrlrrrr")) + "\n"


CACHE_FIELDS = ("schedule", "split", "graph", "devices", "seed", "budget", "value")


def read_cache(path: Path) -> list[dict]:
    """The runs in the cache (`regal.files.read_own_rows`: a torn last line cut first, a file
    of anything else refused, neither read nor appended to)."""
    return read_own_rows(path, CACHE_FIELDS, "--cache", "schedule run")

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", required=True,
                        help="folders of graphs (.npz); each is one split, named by the folder")
    parser.add_argument("--devices", type=device_count, nargs="+", default=[2, 4])
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first N graphs of each folder")
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    parser.add_argument("--cache", default=None, help="JSON lines of finished runs (resumable)")
    parser.add_argument("--out", default=None, help="write the table here too")
    args = parser.parse_args(argv)
    check_device_counts(args)
    schedules = [s for s in args.schedules.split(",") if s]
    for name in schedules:
        if name not in SCHEDULES:
            parser.error(f"--schedules: unknown {name!r}; expected some of {', '.join(SCHEDULES)}")
    folders = [Path(f) for f in args.graphs]
    if len({f.name for f in folders}) < len(folders):
        parser.error("--graphs: two folders have the same name (a split is named by its folder)")
    for folder in folders:
        if not folder.is_dir() or not sorted(folder.glob("*.npz")):
            parser.error(f"--graphs: {folder} is not a folder of .npz graphs")
    cache = Path(args.cache) if args.cache else (Path(args.out).with_suffix(".jsonl")
                                                 if args.out else None)
    if cache is not None and cache.is_dir():
        raise UserError(f"--cache {cache}: is a folder; expected a JSON-lines file")
    check_output("--cache", cache)
    check_output("--out", args.out, inputs=(cache,))
    # opening the cache cuts a torn last line (a killed run) and refuses a second writer
    sink = None if cache is None else JsonLinesWriter(
        cache, f"{cache} is being written by another budget_schedules run")
    try:
        rows, made, seconds = _run(args, schedules, folders, cache, sink)
    finally:
        if sink is not None:
            sink.close()
    table = summarise(rows, schedules, [f.name for f in folders], args.devices)
    header = (f"Budget schedules at {args.budget} evaluations, seeds {args.seeds}, improvement "
              f"over plain BRKGA ({made} runs made in {seconds:.0f} s, "
              f"{len(rows) - made} from `{cache}`)\n\n")
    print(header + table)
    if args.out:
        refuse_empty(rows, f"--graphs {' '.join(args.graphs)}")
        write_text(args.out, header + table)
    return 0


def _run(args, schedules, folders, cache, sink) -> tuple[list[dict], int, float]:
    """The runs asked for, from the cache or made (each written to it as it comes): (rows,
    runs made, their seconds)."""
    rows = read_cache(cache) if sink is not None else []
    done = {(r["schedule"], r["split"], r["graph"], r["devices"], r["seed"], r["budget"])
            for r in rows}
    rows = [r for r in rows if r["budget"] == args.budget]
    from tqdm import tqdm

    work = [(folder, path, d, seed) for folder in folders
            for path in sorted(folder.glob("*.npz"))[:args.limit]
            for d in args.devices for seed in args.seeds]
    started, made = time.perf_counter(), 0
    for folder, path, d, seed in tqdm(work, desc="graphs x devices x seeds", unit="run"):
        problem = None
        for name in ["brkga"] + schedules:
            key = (name, folder.name, path.stem, d, seed, args.budget)
            if key in done:
                continue
            problem = problem or optimizers.Problem(load_graph(path), DeviceSpec(d))
            value, used = run_schedule(name, problem, args.budget, seed)
            if used > args.budget:
                raise AssertionError(f"{name} used {used} > {args.budget} evaluations on {path}")
            row = dict(schedule=name, split=folder.name, graph=path.stem, devices=d, seed=seed,
                       budget=args.budget, value=value, evaluations=used)
            rows.append(row)
            done.add(key)
            made += 1
            if sink is not None:
                sink.write(row)
    asked = {(folder.name, path.stem, d, seed) for folder, path, d, seed in work}
    rows = [r for r in rows if (r["split"], r["graph"], r["devices"], r["seed"]) in asked]
    return rows, made, time.perf_counter() - started


if __name__ == "__main__":
    raise SystemExit(report_user_errors("budget_schedules.py", main))
