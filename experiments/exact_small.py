"""Proven optima on small graphs (issue 39 item 2): CP-SAT on every graph of at most
`--max-ops` ops, at 2 and 4 devices, peak memory, one worker, `--time-limit` seconds each.

    nice -n 5 .venv/bin/python experiments/exact_small.py [--time-limit 60] [--devices 2,4]
        [--max-ops 100] [--sets synth-test,samples,tests] [--out experiments/results/exact_small]
        [--formulation auto|sequence|cumulative|timed] [--label cpsat] [--store STORE]
        [--no-store-hint]

Graph sets: `synth-test` the first 20 of the synthetic test split (`regal.synth.RECIPES`),
`samples` data/synth/samples/*.npz (one per family and a training step), `tests` the
CostGraphDef files under tests/data that load (the REGAL readme's example and a 6-op graph);
data/real has no graph of 100 ops or fewer (the smallest, vgg16_infer, has 120).

Per graph and device count: the answer's simulated value, the best proven lower bound
(`extra["bound"]`: CP-SAT's bound on its relaxation, never below regal.bounds), whether the
answer is proven optimal (value == bound: the simulator's re-score meets a valid lower
bound), wall seconds, CP-SAT deterministic seconds and process CPU seconds. The machine's
cores are shared with other work, so wall and CPU seconds are noisy; deterministic time is
the load-independent measure. Records go to OUT.jsonl (one line per graph x devices x time
limit x label x formulation x seed x budget x hint; resumable: done records are skipped, and a
rerun with other settings runs again) and the table to OUT.md, followed by
the comparison with the records of `--before` (the cpsat of before this change, made with
`--label before --out experiments/results/exact_small_before`) when they exist.

With `--store`, each key the store has is hinted with its stored best instead of the
heuristics (cpsat's `initial`; `--no-store-hint` keeps the heuristics' hint), and a better
answer, or a higher bound, is offered back to the store (its monotone writer): an exact
improving phase over the stores (issue 39 item 3).

"Proven" is the simulator's claim, not the model's: the answer's simulated value equals a
proven lower bound on every solution's (regal.bounds, or CP-SAT's bound on its relaxation).
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

from regal.files import read_own_rows  # noqa: E402
from regal.user_errors import UserError, refuse_empty  # noqa: E402

_ROOT = Path(__file__).resolve().parent.parent


SETS = ("synth-test", "samples", "tests")
DEFAULT_BUDGET = 5000


def graph_sets(names: list[str], max_ops: int):
    """(name, graph) for every graph of the named sets with at most `max_ops` ops."""
    from regal.io import load_graph
    from regal.synth import graph_at, recipe_named

    for name in names:
        if name == "synth-test":
            recipe = recipe_named("test", 20)
            for i in range(20):
                graph = graph_at(recipe, i)
                if graph.num_nodes <= max_ops:
                    yield f"test_{i:05d}", graph
        elif name == "samples":
            for path in sorted(glob.glob(str(_ROOT / "data/synth/samples/*.npz"))):
                graph = load_graph(path)
                if graph.num_nodes <= max_ops:
                    yield Path(path).stem, graph
        elif name == "tests":
            for path in sorted(glob.glob(str(_ROOT / "tests/data/*.pbtxt"))):
                try:
                    graph = load_graph(path)
                except Exception:  # noqa: BLE001 - the folder holds deliberately broken files
                    continue
                if graph.num_nodes <= max_ops:
                    yield Path(path).stem, graph
        else:
            raise UserError(f"--sets: unknown graph set {name!r}; one of {', '.join(SETS)}")


def _formulation_option(record: dict) -> str:
    """The --formulation a record was made with. Records written before the key named it
    (every committed one) were made with the default, auto, except those of
    experiments/results/exact_small_timed.jsonl (label "timed"), made with --formulation
    timed."""
    if "formulation_option" in record:
        return record["formulation_option"]
    return "timed" if "timed" in (record.get("formulation"), record.get("label")) else "auto"


def _key(record: dict) -> tuple:
    """A run's settings: a rerun with other settings runs again instead of reusing it.
    Records without the newer fields were made with the defaults then in force (budget
    5000, the heuristics' hint; `_formulation_option`)."""
    return (record["graph"], record["devices"], record["time_limit"], record["label"],
            _formulation_option(record), record.get("seed", 0),
            record.get("budget", DEFAULT_BUDGET), record.get("hint", "heuristics"))


RECORD_FIELDS = ("graph", "devices", "time_limit", "label", "value")


def read_records(path: Path, flag: str = "--out", cut: bool = True) -> list[dict]:
    """The records of `path` ([] when it does not exist; `regal.files.read_own_rows`: a torn
    last line cut, or left out when `cut` is false, as for `--before`; another script's
    lines refused, neither read nor appended to)."""
    return read_own_rows(path, RECORD_FIELDS, flag, "record of exact_small.py", cut=cut)


def one_record(name: str, graph, d: int, time_limit: float, budget: int, seed: int,
               label: str, options: dict, store=None, store_hint: bool = True) -> dict:
    """One cpsat run; with `store` (a `regal.bestknown.Store`), hinted with the key's stored
    best when it has one (cpsat's `initial`; not with `store_hint` False: the heuristics then
    make the hint, as without a store), and its answer and bound offered back."""
    from regal.bestknown import Entry, entry_key
    from regal.bounds import Bound
    from regal.optimizers import Problem, score, solve
    from regal.sim import DeviceSpec

    problem = Problem(graph, DeviceSpec(d), "peak_memory")
    stored = None
    if store is not None:
        stored = store.get(entry_key(graph.fingerprint(), d, None, "peak_memory"))
        if stored is not None and store_hint:
            options = {**options, "initial": stored.solution(problem)}
    cpu = time.process_time()
    began = time.perf_counter()
    found = solve("cpsat", problem, budget, seed, time_limit=time_limit, **options)
    wall = time.perf_counter() - began
    cpu = time.process_time() - cpu
    rescored = score(problem, found.placement, found.priority, found.transfer_priority)["value"]
    extra = found.extra
    bound = extra.get("bound")
    improved = None
    if stored is not None:
        proven = None if bound is None else Bound(value=float(bound),
                                                  source=str(extra.get("bound_source")),
                                                  proven=True)
        improved = store.offer(Entry.from_solution(
            problem, found, graph=name, found_by=f"cpsat({options.get('formulation', 'auto')})",
            evaluations=stored.evaluations + int(found.evaluations),
            seconds=stored.seconds + wall, bound=proven))
    return {"graph": name, "ops": int(graph.num_nodes), "devices": d,
            "time_limit": float(time_limit), "label": label, "seed": seed,
            "value": float(found.value), "rescored": float(rescored),
            "bound": None if bound is None else float(bound),
            "proven": bool(bound is not None and found.value <= bound),
            "status": extra.get("status"), "solver_status": extra.get("solver_status"),
            "formulation": extra.get("formulation"), "hint_method": extra.get("hint_method"),
            "hint_value": extra.get("hint_value"),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "deterministic_s": extra.get("deterministic_time"),
            "proven_at_s": extra.get("proven_at_s"),
            "stored_value": None if stored is None else float(stored.value),
            "store_improved": improved}


def _gap(record: dict) -> float | None:
    bound = record["bound"]
    if not bound:
        return None
    return 100.0 * (record["value"] - bound) / bound


def table(records: list[dict], title: str) -> str:
    lines = [f"# {title}", "",
             "cpsat, one worker, peak memory; proven = the simulator's value of the answer "
             "equals a proven lower bound. Wall and CPU seconds are from 2 cores shared with "
             "other work (CPU well below wall: the process waited); CP-SAT's deterministic "
             "seconds do not depend on the load. Made by `experiments/exact_small.py`.", "",
             "| graph | ops | devices | value (bytes) | bound (bytes) | gap % | proven | "
             "status | wall s | CPU s | det. s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for r in records:
        gap = _gap(r)
        det = r.get("deterministic_s")
        lines.append(
            f"| {r['graph']} | {r['ops']} | {r['devices']} | {r['value']:,.0f} | "
            f"{'-' if r['bound'] is None else format(r['bound'], ',.0f')} | "
            f"{'-' if gap is None else format(gap, '.2f')} | "
            f"{'yes' if r['proven'] else 'no'} | {r['status']} | {r['wall_s']:.1f} | "
            f"{r.get('cpu_s', float('nan')):.1f} | {'-' if det is None else format(det, '.1f')} |")
    proven = sum(r["proven"] for r in records)
    lines += ["", f"proven optimal: {proven} of {len(records)}"]
    for d in sorted({r["devices"] for r in records}):
        rows = [r for r in records if r["devices"] == d]
        lines.append(f"- {d} devices: {sum(r['proven'] for r in rows)} of {len(rows)}")
    return "\n".join(lines) + "\n"


def comparison(before: list[dict], after: list[dict]) -> str:
    """Before and after, row by row (graph x devices), with the proven counts and the
    median gap between the answer and its bound."""
    old = {(r["graph"], r["devices"]): r for r in before}
    lines = ["", "## Before and after", "",
             "| graph | devices | value before | bound before | gap % before | value after | "
             "bound after | gap % after |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    pairs = [(old[(r["graph"], r["devices"])], r) for r in after
             if (r["graph"], r["devices"]) in old]
    for b, a in pairs:
        cells = []
        for r in (b, a):
            gap = _gap(r)
            cells += [f"{r['value']:,.0f}",
                      "-" if r["bound"] is None else f"{r['bound']:,.0f}",
                      "-" if gap is None else f"{gap:.2f}" + (" (proven)" if r["proven"] else "")]
        lines.append(f"| {a['graph']} | {a['devices']} | " + " | ".join(cells) + " |")

    def median_gap(rows):
        gaps = sorted(g for g in (_gap(r) for r in rows) if g is not None)
        if not gaps:
            return float("nan")
        mid = len(gaps) // 2
        return gaps[mid] if len(gaps) % 2 else 0.5 * (gaps[mid - 1] + gaps[mid])

    lines.append("")
    for d in sorted({a["devices"] for _, a in pairs}):
        bs = [b for b, a in pairs if a["devices"] == d]
        afs = [a for b, a in pairs if a["devices"] == d]
        lines.append(f"- {d} devices: proven {sum(r['proven'] for r in bs)} -> "
                     f"{sum(r['proven'] for r in afs)} of {len(afs)}; median gap "
                     f"{median_gap(bs):.2f}% -> {median_gap(afs):.2f}%")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from tqdm import tqdm

    from regal.arguments import (check_device_counts, check_output, int_list,
                                 non_negative_int, positive_float, positive_int)
    from regal.files import JsonLinesWriter, write_text

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=positive_float, default=60.0)
    parser.add_argument("--devices", type=int_list, default=[2, 4], metavar="D[,D...]")
    parser.add_argument("--max-ops", type=positive_int, default=100)
    parser.add_argument("--sets", default="synth-test,samples,tests",
                        help=f"graph sets, a comma list of {', '.join(SETS)}")
    parser.add_argument("--graphs", default=None, help="only these graph names (comma list)")
    parser.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--label", default="cpsat")
    parser.add_argument("--formulation", default="auto",
                        choices=("auto", "sequence", "cumulative", "timed"),
                        help="the cpsat model (baselines/cpsat: timed keeps the simulator's "
                             "timing and eager starts)")
    parser.add_argument("--out", default=str(_ROOT / "experiments/results/exact_small"))
    parser.add_argument("--title", default="Proven optima on small graphs (issue 39 item 2)")
    parser.add_argument("--store", default=None,
                        help="a best-known store (.jsonl): hint each key with its stored best, "
                             "and offer the answer and the bound back to it")
    parser.add_argument("--no-store-hint", action="store_true",
                        help="with --store: hint with the heuristics, as without a store (they "
                             "may find what the store lacks), and still offer the answer back")
    parser.add_argument("--before", default=str(_ROOT / "experiments/results/exact_small_before"),
                        help="records to compare with (their .jsonl), when the file exists")
    args = parser.parse_args(argv)
    if args.no_store_hint and args.store is None:
        parser.error("--no-store-hint: only with --store")
    if not args.devices:
        parser.error("--devices: expected at least one device count")
    check_device_counts(args)
    sets = [name for name in args.sets.split(",") if name]
    unknown = [name for name in sets if name not in SETS]
    if unknown or not sets:
        raise UserError(f"--sets: unknown graph set {(unknown or [args.sets])[0]!r}; one of "
                        f"{', '.join(SETS)}")
    out = Path(args.out)
    jsonl, md = out.with_suffix(".jsonl"), out.with_suffix(".md")
    check_output("--out", jsonl)
    check_output("--out", md)
    if args.store is not None:
        if not Path(args.store).is_file():
            raise UserError(f"--store {args.store}: no such file")
        check_output("--store", args.store)
    only = None if args.graphs is None else [g for g in args.graphs.split(",") if g]
    graphs = [(name, graph) for name, graph in graph_sets(sets, args.max_ops)
              if only is None or name in only]
    missing = sorted(set(only or ()) - {name for name, _ in graphs})
    if missing:
        raise UserError(f"--graphs: no graph {missing[0]!r} of at most --max-ops "
                        f"{args.max_ops} ops in --sets {','.join(sets)}")

    # --before read first: a file of another script's lines is refused before any run
    before = Path(args.before).with_suffix(".jsonl")
    before_rows = read_records(before, "--before", cut=False) \
        if before.exists() and before.resolve() != jsonl.resolve() else None

    store = None
    if args.store is not None:
        from regal.bestknown import Store

        store = Store(args.store, write=True)
    hint = "store" if store is not None and not args.no_store_hint else "heuristics"
    settings = {"formulation_option": args.formulation, "budget": args.budget, "hint": hint}
    # the writer first: it cuts a torn last line, so the next record starts a line of its own
    writer = JsonLinesWriter(jsonl, busy=f"{jsonl}: another exact_small.py run writes it")
    try:
        records = read_records(jsonl)
        done = {_key(r) for r in records}
        wanted, jobs = [], []
        for name, graph in graphs:
            for d in args.devices:
                key = _key({"graph": name, "devices": d, "time_limit": float(args.time_limit),
                            "label": args.label, "seed": args.seed, **settings})
                wanted.append(key)
                if key not in done:
                    jobs.append((name, graph, d, key))
                    done.add(key)
        for name, graph, d, key in tqdm(jobs, desc="cpsat runs", unit="run", disable=None):
            record = one_record(name, graph, d, args.time_limit, args.budget, args.seed,
                                args.label, {"formulation": args.formulation}, store,
                                not args.no_store_hint)
            record.update(settings)
            records.append(record)
            writer.write(record)
            gap = _gap(record)
            shown = -1.0 if gap is None else gap
            tqdm.write(f"{name:24} {record['ops']:>4} d={d} value {record['value']:>12,.0f} "
                       f"bound {record['bound'] or 0:>12,.0f} gap {shown:6.2f}% "
                       f"{'PROVEN' if record['proven'] else 'open  '} {record['status']:>8} "
                       f"wall {record['wall_s']:6.1f} s det {record['deterministic_s'] or 0:6.1f}",
                       file=sys.stdout)
    finally:
        writer.close()
    order = {key: i for i, key in enumerate(wanted)}
    rows = sorted((r for r in records if _key(r) in order), key=lambda r: order[_key(r)])
    refuse_empty(rows, "--graphs/--sets")
    text = table(rows, args.title)
    if before_rows is not None:
        text += comparison(before_rows, rows)
    write_text(md, text)
    print(text[text.index("proven optimal:"):], end="")
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    raise SystemExit(report_user_errors("exact_small.py", main))
