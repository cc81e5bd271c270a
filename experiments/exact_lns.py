"""The improving exact phase (issue 39 item 3): `cpsat-lns` run from the best-known stores'
own solutions, and what it gains where the portfolio stalls.

    NUMBA_NUM_THREADS=1 nohup .venv/bin/python experiments/exact_lns.py > runs/exact_lns.log 2>&1 &

Sets, each at 2 and 4 devices, peak memory, from each key's stored best:
- `large_net_train`: the large training steps of data/bestknown/large.jsonl (43,926 and 46,193
  ops; regenerated from their recipe, `experiments/transfer.py` LARGE_SPLITS, a few seconds
  each, and matched by fingerprint);
- `real`: data/real (data/bestknown/real.jsonl);
- `synth_test`: the first 20 graphs of the synthetic test split (data/bestknown/synth_test.jsonl,
  regenerated from the recipe).

Every key gets a fixed time (`--seconds-*`, wall seconds on one core: one CP-SAT worker and
NUMBA_NUM_THREADS=1, so CPU seconds too). A value that beats the store is the simulator's
score of the LNS's answer (`regal.optimizers.solve` re-scores it) and goes into the store
through its own monotone merge (`Store.offer`, the key's bound kept), with the seconds
spent (`Store.add_effort`). Each key's result is appended to `--results` as it finishes, so
a killed run resumes where it stopped; the table (`--table`) is written from that file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from regal.bestknown_store import Entry, Store, entry_key, load_store  # noqa: E402
from regal.bounds import gap_to_bound  # noqa: E402
from regal.files import JsonLinesWriter, read_own_rows, write_text  # noqa: E402
from regal.optimizers import Problem, solve  # noqa: E402
from regal.sim import DeviceSpec  # noqa: E402
from regal.user_errors import UserError, refuse_empty  # noqa: E402

STORES = REPO / "data" / "bestknown"
SETS = ("large_net_train", "real", "synth_test")
DEVICES = (2, 4)
SYNTH_GRAPHS = 20
# each set's default --seconds-*: a result row without "time_limit" (every committed one)
# was made with these, and with seed 0
DEFAULT_SECONDS = {"large_net_train": 60.0, "real": 15.0, "synth_test": 10.0}


def _large_recipe():
    import transfer

    return transfer.large_split_recipes(2, transfer.FULL["large_ops"])["large_net_train"]


def _count(name: str) -> int:
    """How many graphs `_graphs(name)` yields (without building them)."""
    if name == "large_net_train":
        return _large_recipe().count
    if name == "real":
        return len(list((REPO / "data" / "real").glob("*.npz")))
    return SYNTH_GRAPHS


def _graphs(name: str):
    """(graph name, graph, store file) of a set, one at a time."""
    if name == "large_net_train":
        from regal import synth

        recipe = _large_recipe()
        for i in range(recipe.count):
            yield f"{name}_{i:05d}", synth.graph_at(recipe, i), STORES / "large.jsonl"
    elif name == "real":
        from regal.io import load_graph

        for path in sorted((REPO / "data" / "real").glob("*.npz")):
            yield path.stem, load_graph(path), STORES / "real.jsonl"
    elif name == "synth_test":
        from regal import synth

        recipe = synth.RECIPES["test"]
        for i in range(SYNTH_GRAPHS):
            yield f"test_{i:05d}", synth.graph_at(recipe, i), STORES / "synth_test.jsonl"
    else:
        raise ValueError(f"unknown set {name!r}")


def _row_key(row: dict) -> tuple:
    """A result's settings: (set, graph, devices, seconds, seed); a row without the last two
    (every committed one) was made with its set's default seconds and seed 0."""
    return (row["set"], row["graph"], row["devices"],
            float(row.get("time_limit", DEFAULT_SECONDS.get(row["set"], 0.0))),
            row.get("seed", 0))


ROW_FIELDS = ("set", "graph", "devices", "before", "after", "windows")


def _done(results: Path) -> dict:
    """The rows of `results` by `_row_key` (`regal.files.read_own_rows`: a torn line cut, a
    file of another script's lines refused, neither read nor appended to)."""
    return {_row_key(row): row
            for row in read_own_rows(results, ROW_FIELDS, "--results", "row of exact_lns.py")}


def run(sets, seconds: dict, results: Path, write: bool, seed: int) -> None:
    # the writer first: it cuts a torn last line, so the next row starts a line of its own
    writer = JsonLinesWriter(results, busy=f"{results}: another exact_lns.py run writes it")
    try:
        _run(sets, seconds, results, write, seed, writer)
    finally:
        writer.close()


def _run(sets, seconds: dict, results: Path, write: bool, seed: int, writer) -> None:
    done = _done(results)
    bar = tqdm(total=sum(_count(name) for name in sets) * len(DEVICES), desc="keys",
               unit="key", disable=None)
    for set_name in sets:
        for graph_name, graph, store_path in _graphs(set_name):
            for d in DEVICES:
                bar.update(1)
                if (set_name, graph_name, d, float(seconds[set_name]), seed) in done:
                    continue
                key = entry_key(graph.fingerprint(), d, None, "peak_memory")
                entry = load_store(store_path)[0].get(key)
                if entry is None:
                    tqdm.write(f"{set_name} {graph_name} d={d}: no store entry, skipped")
                    continue
                problem = Problem(graph, DeviceSpec(d), "peak_memory")
                start = entry.solution(problem)
                wall, cpu = time.perf_counter(), time.process_time()
                found = solve("cpsat-lns", problem, None, seed, initial=start,
                              time_limit=seconds[set_name])
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                stored, store_error = False, None
                # a gain is the LNS's own: below the stored value and the stored solution's
                # re-score today (they differ only if the simulator changed)
                improved = found.value < min(entry.value, start.value)
                if write and improved:
                    try:
                        store = Store(store_path)
                        try:
                            effort = store.effort.get(key, 0.0)
                            stored = store.offer(Entry.from_solution(
                                problem, found, graph=entry.graph, found_by="cpsat-lns",
                                evaluations=entry.evaluations + found.evaluations,
                                seconds=effort + cpu))
                            store.add_effort(key, cpu)
                        finally:
                            store.close()
                    except (OSError, ValueError) as exc:  # another writer holds the store
                        store_error = str(exc)
                row = {"set": set_name, "graph": graph_name, "devices": d,
                       "time_limit": float(seconds[set_name]), "seed": seed,
                       "ops": graph.num_nodes, "before": entry.value, "after": found.value,
                       "start_rescored": start.value, "bound": entry.bound,
                       "improved": improved, "stored": stored,
                       "store_error": store_error,
                       "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
                       "windows": found.extra.get("windows"),
                       "windows_improved": found.extra.get("improved"),
                       "windows_proven": found.extra.get("proven"),
                       "window_size": found.extra.get("window_size"),
                       "rules": found.extra.get("rules"), "evaluations": found.evaluations}
                writer.write(row)
                tqdm.write(f"{set_name} {graph_name} d={d}: {entry.value:.6g} -> "
                           f"{found.value:.6g} "
                           f"({100 * (entry.value - found.value) / entry.value:.4f}%), "
                           f"{found.extra.get('windows')} windows, {cpu:.0f} CPU-s")
    bar.close()


def table_rows(results: Path, seconds: dict, seed: int) -> list[dict]:
    """The rows of `results` made with these settings: the sets of `seconds`, each with its
    seconds, and `seed`."""
    return [row for key, row in _done(results).items()
            if key[0] in seconds and key[3:] == (float(seconds[key[0]]), seed)]


def table(results: Path, seconds: dict, command: str, seed: int = 0) -> str:
    rows = table_rows(results, seconds, seed)
    lines = ["# The improving exact phase: `cpsat-lns` from the best-known stores",
             "",
             f"Command: `{command}`",
             "",
             "Each key: `cpsat-lns` (baselines/cpsat/lns.py) started from the store's best, for a "
             "fixed time on one core (one CP-SAT worker, NUMBA_NUM_THREADS=1): "
             + ", ".join(f"{name} {s:g} s" for name, s in seconds.items())
             + " per key; 2 s of CP-SAT per window. Improvement = (store - LNS) / store, "
             "the simulator's values; certified gap = (value - bound) / bound, the store's "
             "lower bound. Improvements were written into the stores through `Store.offer`. "
             f"Keys took {sum(r['seconds'] for r in rows) / 60:.0f} min in all "
             f"({sum(r['cpu_seconds'] for r in rows) / 60:.0f} CPU-min).",
             "",
             "| set | devices | ops | keys tried | keys improved | median improvement % | "
             "max improvement % | median gap before % | median gap after % | "
             "max gap closed (points) | windows per key |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for set_name in SETS:
        for d in (*DEVICES, None):
            mine = [r for r in rows if r["set"] == set_name and (d is None or r["devices"] == d)]
            if not mine:
                continue
            gains = [100 * (r["before"] - r["after"]) / r["before"] for r in mine]
            bounded = [r for r in mine if r["bound"]]
            before = [100 * gap_to_bound(r["before"], r["bound"]) for r in bounded]
            after = [100 * gap_to_bound(r["after"], r["bound"]) for r in bounded]
            closed = max((b - a for b, a in zip(before, after)), default=0.0)
            ops = [r["ops"] for r in mine]
            lines.append(
                f"| {set_name} | {d if d is not None else 'both'} | "
                f"{min(ops):,}-{max(ops):,} | {len(mine)} | {sum(r['improved'] for r in mine)} | "
                f"{statistics.median(gains):.4f} | {max(gains):.4f} | "
                f"{statistics.median(before):.3f} | {statistics.median(after):.3f} | "
                f"{closed:.4f} | {statistics.median(r['windows'] for r in mine):.0f} |"
                if bounded else f"| {set_name} | {d} | | {len(mine)} | | | | | | | |")
    improved = [r for r in rows if r["improved"]]
    lines += ["", f"Keys improved: {len(improved)} of {len(rows)}; written into the stores: "
              f"{sum(r['stored'] for r in rows)}.", ""]
    if improved:
        lines += ["| set | graph | devices | before | after | improvement % | gap before % | "
                  "gap after % |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in sorted(improved, key=lambda r: (r["set"], r["graph"], r["devices"])):
            gap = (lambda v: f"{100 * gap_to_bound(v, r['bound']):.3f}") if r["bound"] \
                else (lambda v: "–")
            lines.append(f"| {r['set']} | {r['graph']} | {r['devices']} | {r['before']:.6g} | "
                         f"{r['after']:.6g} | {100 * (r['before'] - r['after']) / r['before']:.4f}"
                         f" | {gap(r['before'])} | {gap(r['after'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from regal.arguments import check_output, non_negative_int, positive_float

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--seconds-large", type=positive_float,
                        default=DEFAULT_SECONDS["large_net_train"])
    parser.add_argument("--seconds-real", type=positive_float, default=DEFAULT_SECONDS["real"])
    parser.add_argument("--seconds-synth", type=positive_float,
                        default=DEFAULT_SECONDS["synth_test"])
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--no-write", action="store_true", help="leave the stores alone")
    parser.add_argument("--table-only", action="store_true",
                        help="write the table from --results, run nothing")
    parser.add_argument("--command", default=None,
                        help="the command the table's header names (default: this one)")
    parser.add_argument("--results", type=Path,
                        default=REPO / "experiments" / "results" / "exact_lns.jsonl")
    parser.add_argument("--table", type=Path,
                        default=REPO / "experiments" / "results" / "exact_lns.md")
    args = parser.parse_args(argv)
    seconds = {"large_net_train": args.seconds_large, "real": args.seconds_real,
               "synth_test": args.seconds_synth}
    if args.table_only:
        if not args.results.is_file():
            raise UserError(f"--results {args.results}: no such file")
    else:
        check_output("--results", args.results)
    check_output("--table", args.table, inputs=(args.results,))
    if not args.table_only:
        run(args.sets, seconds, args.results, not args.no_write, args.seed)
    command = args.command or ("NUMBA_NUM_THREADS=1 .venv/bin/python experiments/exact_lns.py "
                               + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    chosen = {k: v for k, v in seconds.items() if k in args.sets}
    refuse_empty(table_rows(args.results, chosen, args.seed),
                 f"--results {args.results} (for these --sets, --seconds-* and --seed)")
    text = table(args.results, chosen, command, args.seed)
    write_text(args.table, text)
    print(text)
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    raise SystemExit(report_user_errors("exact_lns.py", main))
