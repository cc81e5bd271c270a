"""The paper's Table 1 from harness records (docs/design.md §7), as Markdown, CSV and a bar chart.

Per setting (objective, devices, memory limit) and dataset, for every (method, budget):
- % improvement over BRKGA-5K: mean over graphs of (obj_brkga5k - obj) / obj_brkga5k;
- % gap from best: mean over graphs of (obj - obj_best) / obj_best, where obj_best is the
  best value any record in the folder (any method, budget or dataset, long runs included)
  reached on that graph;
- headroom captured: that improvement / the best-known improvement on the same graphs,
  shown only where the best-known improvement is positive (otherwise it means nothing).
- % gap to lower bound (peak memory): mean over graphs of (obj - bound) / bound, and its
  median over graphs, with the best valid lower bound known for the graph: the larger of
  `regal.bounds` (computed from the graph file) and the one the best-known store keeps beside
  its value (`Entry.bound`);
- certified gap of best: median over graphs of (best - bound) / bound, how far above the
  optimum the best value known can be at most (`regal.bounds.gap_to_bound`, the figure
  `regal optimize` certifies);
- wins / losses against BRKGA-5K (graphs where the seed mean is lower / higher), the
  two-sided Wilcoxon signed-rank p over the paired per-graph means, and the spread over seeds
  (mean over graphs of the seeds' standard deviation / mean).
"Best" is the best-known store's value (`regal.bestknown`, built by long portfolio runs) when
it has an entry for the graph, else (and when a record beats the store) the best record; the
report says for how many graphs the store had no entry.
A method's value on a graph is the mean over its successful seeds; failed runs are counted
but never averaged in.
A run over the memory limit is not failed: its value is the objective's ranking penalty
(behind every run that fits), so the tables count the runs that fit ('fits') and mark with
† every figure that rests on one that does not (`from_unfit_runs`: those fields).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from regal.files import write_text

__all__ = ["BASELINE", "CSV_FIELDS", "baseline_name", "pool_memory_limits", "summarize",
           "wilcoxon_p", "markdown_table", "to_markdown", "to_csv", "write_report"]

BASELINE = ("brkga", 5000)  # BRKGA-5K: method brkga at a budget of 5,000 evaluations
CSV_FIELDS = ("objective", "devices", "memory_limit", "dataset", "method", "budget", "options",
              "graphs",
              "runs", "failed", "improvement_pct", "gap_pct", "headroom_pct", "gap_bound_pct",
              "gap_bound_median_pct", "best_gap_bound_pct", "wins", "losses", "wilcoxon_p",
              "seed_spread_pct", "no_best_known", "store_beaten",
              "mean_value", "mean_wall_s", "mean_evaluations", "feasible_runs", "feasible_pct",
              "from_unfit_runs")


def baseline_name(baseline: tuple[str, int] = BASELINE) -> str:
    """('brkga', 5000) -> 'BRKGA-5K'; ('brkga', 300) -> 'BRKGA-300'."""
    method, budget = baseline
    size = f"{budget // 1000}K" if budget % 1000 == 0 else str(budget)
    return f"{method.upper()}-{size}"


def _name(record) -> str:
    """'brkga on g1 seed 0', as far as the record says."""
    if not isinstance(record, dict):
        return "not an object"
    return f"{record.get('method')!s:.40} on {record.get('graph')!s:.40} seed " \
           f"{record.get('seed')!s:.20}"


def _setting(record: dict) -> tuple:
    return (record["objective"], int(record["devices"]), record.get("memory_limit"))


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _median(values: Iterable[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    half = len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


def _gap_to_bound(value: float, bound: float) -> float | None:
    """(value - bound) / bound (`regal.bounds.gap_to_bound`), None where that is no number
    (a bound of 0 under a positive value, an infinite value)."""
    from regal.bounds import gap_to_bound
    gap = gap_to_bound(value, bound)
    return gap if math.isfinite(gap) else None


def _relative(numer_base: float, numer_sub: float, denom: float) -> float | None:
    """(numer_base - numer_sub) / denom, or None where that means nothing: denom is 0, or
    infinite values (the makespan of runs over a memory limit) leave no ratio."""
    if numer_base == numer_sub:
        return 0.0
    if denom == 0:
        return None
    ratio = (numer_base - numer_sub) / denom
    return None if math.isnan(ratio) else ratio


def wilcoxon_p(base: list[float], mine: list[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p over paired per-graph values (None: nothing to test)."""
    diffs = [a - b for a, b in zip(base, mine) if a != b]
    if len(diffs) < 2:
        return None
    from scipy.stats import wilcoxon
    return float(wilcoxon(base, mine, zero_method="wilcox").pvalue)


def _spread(values: list[float]) -> float | None:
    """Standard deviation over seeds / their mean (None for a single seed)."""
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return None
    mean = sum(v / len(values) for v in values)  # no overflow for values near 1.8e308
    if mean == 0:
        return 0.0
    # relative to the mean first: squares of values near 1e300 would overflow to inf / nan
    var = math.fsum((v / mean - 1.0) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var)


def store_key(setting: tuple, fingerprint: str) -> tuple:
    """A record's (setting, fingerprint) as a best-known store key."""
    from regal.bestknown import entry_key
    objective, devices, limit = setting
    return entry_key(fingerprint, devices, limit, objective)


def summarize(records: Iterable[dict], baseline: tuple[str, int] = BASELINE,
              best_known: dict | None = None, bounds: dict | None = None,
              pool_limits: bool = False, known_bounds: dict | None = None) -> list[dict]:
    """One row per (setting, dataset, method, budget, options), metrics in percent.

    The baseline is `baseline` = (method, budget) run with default options. `best_known`
    maps a store key (`regal.bestknown.entry_key`) to the best-known value; `bounds` maps
    (devices, fingerprint) to a valid lower bound on the peak memory; `known_bounds` maps a
    store key to the valid lower bound the store keeps beside its value (a graph's bound is
    the larger of the two). A record that `regal.harness.check_record` rejects is a
    ValueError naming it (`load_records` never returns one).
    """
    from regal.harness import check_record

    records = list(records)
    for index, r in enumerate(records):
        why = check_record(r)
        if why is not None:
            raise ValueError(f"records: record {index} ({_name(r)}): {why}")
    best_known = best_known or {}
    known_bounds = known_bounds or {}
    if pool_limits:  # after the checks: a record's feasibility is judged by its own limit
        known_bounds = _least_of_runs_limits(known_bounds, records)
        records, best_known = pool_memory_limits(records, best_known)
    bounds = bounds or {}

    def bound_of(graph: tuple) -> float | None:
        """The best valid lower bound known for (setting, fingerprint), or None."""
        (objective, devices, _), fingerprint = graph
        found = [b for b in (bounds.get((devices, fingerprint))
                             if objective == "peak_memory" else None,
                             known_bounds.get(store_key(*graph))) if b is not None]
        return max(map(float, found)) if found else None

    best: dict[tuple, float] = {}             # (setting, fingerprint) -> best value ever
    best_fits: dict[tuple, bool] = {}         # ... reached by a run within the memory limit
    per_seed = defaultdict(list)              # (setting, dataset, method, budget, fp) -> values
    seeds_fit = defaultdict(list)             # ... -> each run within the memory limit
    runs = defaultdict(int)
    failed = defaultdict(int)
    wall = defaultdict(list)
    evals = defaultdict(list)
    feasible = defaultdict(list)
    for r in records:
        setting = _setting(r)
        row = (setting, r["dataset"], r["method"], int(r["budget"]), r.get("options") or "{}")
        runs[row] += 1
        if r.get("status") != "ok" or r.get("value") is None:
            failed[row] += 1
            continue
        value = float(r["value"])
        fits = bool(r.get("feasible"))
        graph = (setting, r["fingerprint"])
        if graph not in best or value < best[graph]:
            best[graph], best_fits[graph] = value, fits
        elif value == best[graph]:
            best_fits[graph] = best_fits[graph] or fits
        per_seed[row + (r["fingerprint"],)].append(value)
        seeds_fit[row + (r["fingerprint"],)].append(fits)
        wall[row].append(float(r.get("wall_time") or 0.0))
        evals[row].append(float(r.get("evaluations") or 0))
        feasible[row].append(fits)

    stored = set()  # (setting, fingerprint) that have a store entry
    beaten = set()  # ... whose store entry some record beats: "best" is then a short run's
    for graph in list(best):
        value = best_known.get(store_key(*graph))
        if value is not None:
            stored.add(graph)
            if best[graph] < float(value):
                beaten.add(graph)
            elif float(value) < best[graph]:  # the store's entry, not a run of the table
                best_fits[graph] = True
            best[graph] = min(best[graph], float(value))

    per_graph: dict[tuple, dict[str, float]] = defaultdict(dict)  # row -> {fp: seed mean}
    graph_fits: dict[tuple, dict[str, bool]] = defaultdict(dict)  # row -> {fp: every seed fit}
    spread: dict[tuple, list[float]] = defaultdict(list)
    for key, values in per_seed.items():
        per_graph[key[:5]][key[5]] = sum(values) / len(values)
        graph_fits[key[:5]][key[5]] = all(seeds_fit[key])
        s = _spread(values)
        if s is not None:
            spread[key[:5]].append(s)

    rows = []
    for row in sorted(runs, key=lambda k: (str(k[0]), k[1], k[2], k[3], k[4])):
        setting, dataset, method, budget, options = row
        mine = per_graph.get(row, {})
        base = per_graph.get((setting, dataset) + tuple(baseline) + ("{}",), {})
        shared = [fp for fp in mine if fp in base]
        improvement = _mean(x for x in (_relative(base[fp], mine[fp], base[fp]) for fp in shared)
                            if x is not None)
        possible = _mean(x for x in (_relative(base[fp], best[(setting, fp)], base[fp])
                                     for fp in shared) if x is not None)
        gap = _mean(x for x in (_relative(mine[fp], best[(setting, fp)], best[(setting, fp)])
                                for fp in mine) if x is not None)
        headroom = improvement / possible \
            if improvement is not None and possible is not None and possible > 0 else None
        objective, devices, limit = setting
        bound = {fp: b for fp in mine if (b := bound_of((setting, fp))) is not None}
        mine_to_bound = [x for x in (_gap_to_bound(mine[fp], bound[fp]) for fp in bound)
                         if x is not None]
        best_to_bound = [x for x in (_gap_to_bound(best[(setting, fp)], bound[fp])
                                     for fp in bound) if x is not None]
        to_bound, to_bound_median = _mean(mine_to_bound), _median(mine_to_bound)
        best_certified = _median(best_to_bound)
        is_base = (method, budget, options) == tuple(baseline) + ("{}",)
        wins = None if is_base or not shared else sum(mine[fp] < base[fp] for fp in shared)
        losses = None if is_base or not shared else sum(mine[fp] > base[fp] for fp in shared)
        p_value = None if is_base else wilcoxon_p([base[fp] for fp in shared],
                                                 [mine[fp] for fp in shared])
        # which figures rest on a run over the memory limit (its value is a ranking
        # penalty, not a figure comparable with runs that fit)
        fit = graph_fits.get(row, {})
        base_fit = graph_fits.get((setting, dataset) + tuple(baseline) + ("{}",), {})
        vs_base = any(not (fit[fp] and base_fit[fp]) for fp in shared)
        unfit = dict(
            improvement_pct=vs_base, wins=vs_base, losses=vs_base, wilcoxon_p=vs_base,
            gap_pct=any(not (fit[fp] and best_fits[(setting, fp)]) for fp in mine),
            headroom_pct=vs_base or any(not best_fits[(setting, fp)] for fp in shared),
            gap_bound_pct=any(not fit[fp] for fp in bound),
            gap_bound_median_pct=any(not fit[fp] for fp in bound),
            best_gap_bound_pct=any(not best_fits[(setting, fp)] for fp in bound),
            seed_spread_pct=not all(fit.values()), mean_value=not all(fit.values()))
        rows.append(dict(
            objective=objective, devices=devices, memory_limit=limit, dataset=dataset,
            method=method, budget=budget, options=options, graphs=len(mine), runs=runs[row], failed=failed[row],
            improvement_pct=None if improvement is None else 100 * improvement,
            gap_pct=None if gap is None else 100 * gap,
            headroom_pct=None if headroom is None else 100 * headroom,
            gap_bound_pct=None if to_bound is None else 100 * to_bound,
            gap_bound_median_pct=None if to_bound_median is None else 100 * to_bound_median,
            best_gap_bound_pct=None if best_certified is None else 100 * best_certified,
            wins=wins, losses=losses, wilcoxon_p=p_value,
            seed_spread_pct=None if not spread[row] else 100 * _mean(spread[row]),
            no_best_known=sum((setting, fp) not in stored for fp in mine),
            store_beaten=sum((setting, fp) in beaten for fp in mine),
            mean_value=_mean(mine.values()), mean_wall_s=_mean(wall[row]),
            mean_evaluations=_mean(evals[row]),
            feasible_runs=sum(feasible[row]),
            feasible_pct=None if not feasible[row] else 100 * _mean(map(float, feasible[row]))))
        rows[-1]["from_unfit_runs"] = tuple(field for field, yes in unfit.items()
                                            if yes and rows[-1][field] is not None)
    return rows


def _fmt(value, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def _label(row: dict) -> str:
    """'cpsat' or, with non-default options, 'cpsat (time_limit=10.0)'."""
    options = json.loads(row.get("options") or "{}")
    if not options:
        return row["method"]
    return f"{row['method']} ({', '.join(f'{k}={v}' for k, v in sorted(options.items()))})"


def _setting_title(objective: str, devices: int, limit) -> str:
    from regal.units import format_bytes

    memory = "no memory limit" if limit is None else f"memory limit {format_bytes(limit)}"
    return f"{objective}, {devices} devices, {memory}"


def _ordered(rows: list[dict], baseline) -> list[dict]:
    """BRKGA-5K first, then best improvement first (rows without one last)."""
    def key(r):
        is_base = (r["method"], r["budget"], r["options"]) == tuple(baseline) + ("{}",)
        imp = r["improvement_pct"]
        return (not is_base, imp is None, -(imp or 0.0), r["method"], r["budget"])
    return sorted(rows, key=key)


UNFIT_NOTE = ("† rests on runs that do not fit the memory limit (fits: runs within it / runs "
              "that ended): such a run's value is the objective's ranking penalty, behind "
              "every run that fits, so the figure does not compare with those of runs that "
              "fit.")


def mark_unfit(row: dict, field: str, text: str) -> str:
    """`text` with † where the figure rests on a run over the memory limit (`UNFIT_NOTE`)."""
    return text + "†" if field in row.get("from_unfit_runs", ()) else text


def _columns(name: str) -> list[tuple]:
    """Table 1's columns: (header, alignment, the reference it needs or None, cell of a row).
    A column whose reference a table lacks is left out, and the table says why once."""
    def wins(r):
        return "-" if r["wins"] is None else mark_unfit(r, "wins", f"{r['wins']}/{r['losses']}")

    def p_value(r):
        return "-" if r["wilcoxon_p"] is None else \
            mark_unfit(r, "wilcoxon_p", f"{r['wilcoxon_p']:.2g}")

    def figure(field, digits=2, signed=False):  # from_unfit_runs names no missing figure
        return lambda r: mark_unfit(r, field, _fmt(r[field], digits, signed))

    return [("method", "l", None, _label),
            ("budget", "r", None, lambda r: str(r["budget"])),
            ("graphs", "r", None, lambda r: str(r["graphs"])),
            ("runs", "r", None, lambda r: str(r["runs"])),
            ("failed", "r", None, lambda r: str(r["failed"])),
            ("fits", "r", "limit", lambda r: f"{r['feasible_runs']}/{r['runs'] - r['failed']}"),
            (f"% impr. over {name}", "r", "baseline", figure("improvement_pct", signed=True)),
            ("W/L", "r", "baseline", wins),
            ("Wilcoxon p", "r", "baseline", p_value),
            ("% gap from best", "r", None, figure("gap_pct")),
            ("% gap to lower bound", "r", "bound", figure("gap_bound_pct")),
            ("median % gap to lower bound", "r", "bound", figure("gap_bound_median_pct")),
            ("certified gap of best %", "r", "bound", figure("best_gap_bound_pct")),
            ("headroom captured %", "r", "baseline", figure("headroom_pct", 1)),
            ("seed spread %", "r", "seeds", figure("seed_spread_pct")),
            ("mean wall s", "r", None, lambda r: _fmt(r["mean_wall_s"], 2))]


def _missing_references(part: list[dict], baseline, dataset: str) -> dict:
    """The references one dataset's table lacks -> why, in a sentence ('' for a column that
    simply has nothing to say: 'fits' without a memory limit or a run over one)."""
    objective, limit = part[0]["objective"], part[0]["memory_limit"]
    missing = {}
    if limit is None and all(r["feasible_runs"] == r["runs"] - r["failed"] for r in part):
        missing["limit"] = ""
    if not any((r["method"], r["budget"], r["options"]) == tuple(baseline) + ("{}",)
               and r["graphs"] for r in part):
        missing["baseline"] = (
            f"no {baseline[0]} run at budget {baseline[1]} with its default options (no "
            f"--time-limit) on {dataset}, so no columns that compare with "
            f"{baseline_name(baseline)}: improvement, W/L, Wilcoxon p, headroom")
    if all(r["gap_bound_pct"] is None for r in part):
        missing["bound"] = "no lower-bound column: " + (
            "lower bounds are for the peak-memory objective" if objective != "peak_memory" else
            "no bound for these graphs; `regal report` computes them from the graph files "
            "at the records' paths, unless --no-bounds, and reads those the best-known "
            "stores keep")
    if all(r["seed_spread_pct"] is None for r in part):
        one_seed = all(r["runs"] - r["failed"] <= r["graphs"] for r in part)
        missing["seeds"] = "no seed-spread column: " + (
            "one seed per graph" if one_seed else "no graph has two finite values")
    return missing


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[str]],
                   align: str | None = None) -> list[str]:
    """The lines of one Markdown table, the project's one table formatter (the report and the
    experiments' tables): `align` has a letter per column, "l" left or "r" right; by default
    the first column left and the others right (a name, then figures)."""
    header = list(header)
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header):
        raise ValueError(f"markdown_table: {len(header)} columns but align {align!r}")
    return ["| " + " | ".join(header) + " |",
            "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |",
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)]


def to_markdown(rows: list[dict], baseline: tuple[str, int] = BASELINE) -> str:
    """Table 1: a section per setting and a table per dataset."""
    if not rows:
        return "No records.\n"
    groups = defaultdict(list)
    for r in rows:
        groups[(r["objective"], r["devices"], r["memory_limit"])].append(r)
    name = baseline_name(baseline)
    lines = [f"# Table 1: improvement over {name} and gap from best", ""]
    for setting in sorted(groups, key=str):
        lines += [f"## {_setting_title(*setting)}", ""]
        by_dataset = defaultdict(list)
        for r in groups[setting]:
            by_dataset[r["dataset"]].append(r)
        for dataset in sorted(by_dataset):
            part = _ordered(by_dataset[dataset], baseline)
            graphs = max(r["graphs"] for r in part)
            missing = _missing_references(part, baseline, dataset)
            columns = [c for c in _columns(name) if c[2] not in missing]
            lines += [f"### {dataset} ({graphs} graphs)", ""]
            lines += markdown_table([c[0] for c in columns],
                                    ([c[3](r) for c in columns] for r in part),
                                    "".join(c[1] for c in columns))
            lines.append("")
            if any(r["from_unfit_runs"] for r in part):
                lines += [UNFIT_NOTE, ""]
            no_store = max(r["no_best_known"] for r in part)
            beaten = max(r["store_beaten"] for r in part)
            lines += [f"Best-known store: entries for {graphs - no_store} of {graphs} graphs"
                      + ("" if not no_store else
                         f"; for the other {no_store}, best = the best record")
                      + ("" if not beaten else
                         f"; a record beats the store's entry on {beaten}") + ".", ""]
            lines += [f"({why})" for why in missing.values() if why] + \
                     ([""] if any(missing.values()) else [])
    lines += ["Improvement and gaps: mean over graphs of per-graph relative differences; each "
              "graph's value is the mean over seeds. Best = the best-known store's value (long "
              "portfolio runs), or a record's where one is lower or the store has no entry. "
              "Lower bound: the larger of `regal bounds` (valid for peak memory) and the one "
              "the store keeps beside its value; median % gap to lower bound: the median over "
              "graphs of the same per-graph gaps; certified gap of best = median over graphs "
              "of (best - bound) / bound, the most the best value known can be above the "
              "optimum. Headroom = improvement / "
              "best-known improvement, shown where the latter is positive. W/L = graphs "
              f"better / worse than {name}; p = two-sided Wilcoxon signed-rank test on the "
              "paired per-graph means; seed spread = mean over graphs of std / mean over "
              "seeds; fits = runs within the memory limit / runs that ended (failed runs "
              "are not counted).", ""]
    return "\n".join(lines)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r[k] is None else
                             round(r[k], 6) if isinstance(r[k], float) else
                             " ".join(r[k]) if isinstance(r[k], tuple) else r[k])
                         for k in CSV_FIELDS})
    return buffer.getvalue()


def _slug(objective: str, devices: int, limit) -> str:
    return f"{objective}_{devices}dev" + ("" if limit is None else f"_{limit}B")


SHIPPED_STORES = Path(__file__).resolve().parent.parent / "data" / "bestknown"


def _store_entries(stores=None) -> dict:
    """Store key -> best entry over the given store files (default: the shipped stores)."""
    from regal.bestknown import read_stores

    if stores is None:
        stores = sorted(SHIPPED_STORES.glob("*.jsonl")) if SHIPPED_STORES.is_dir() else []
    return read_stores(stores)


def best_known_values(stores=None, entries: dict | None = None) -> dict:
    """Store key -> best value over the given store files (default: the shipped stores), or
    over `entries` already read (`read_stores`)."""
    entries = _store_entries(stores) if entries is None else entries
    return {key: entry.value for key, entry in entries.items()
            if entry.value >= 0}  # a size or a time


def best_known_bounds(stores=None, entries: dict | None = None) -> dict:
    """Store key -> the valid lower bound the store keeps beside its value (keys that have
    one), over the given store files or `entries` as `best_known_values`."""
    entries = _store_entries(stores) if entries is None else entries
    return {key: entry.bound for key, entry in entries.items()
            if entry.bound is not None and entry.value >= 0}


def lower_bounds(records: list[dict]) -> dict:
    """(devices, fingerprint) -> lower bound, for every peak-memory record whose graph file
    is still there and unchanged (others simply get no bound column)."""
    from regal.bounds import lower_bound
    from regal.io import load_graph

    wanted = defaultdict(set)  # path -> {(devices, fingerprint)}
    for r in records:
        if r.get("objective") == "peak_memory" and r.get("graph_path"):
            wanted[r["graph_path"]].add((int(r["devices"]), r["fingerprint"]))
    out = {}
    for path, keys in wanted.items():
        if not Path(path).is_file():  # moved, or not a regular file (a pipe would block)
            continue
        try:
            graph = load_graph(path)
        except (OSError, ValueError):
            continue
        fingerprint = graph.fingerprint()
        for devices, fp in keys:
            if fp == fingerprint:
                out[(devices, fp)] = float(lower_bound(graph, devices).value)
    return out


def pool_memory_limits(records: Iterable[dict], best_known: dict) -> tuple[list[dict], dict]:
    """`records` and best-known store keys with their memory limit dropped, so that graphs
    that each have their own limit (e.g. 1.2 x their own best-known peak: one absolute limit
    is loose for some graphs of a split and infeasible for others) make one row per method
    instead of a setting per graph. Runs of a graph under two limits then share a row: pool
    only records made with one limit per (graph, devices, objective). A store entry is kept
    only when some record ran under its limit (`_least_of_runs_limits`)."""
    records = list(records)
    pooled = [dict(r, memory_limit=None) if r.get("memory_limit") is not None else r
              for r in records]
    return pooled, _least_of_runs_limits(best_known, records)


def _least_of_runs_limits(by_store_key: dict, records: list[dict]) -> dict:
    """Store values or bounds with their memory limit dropped, as `pool_memory_limits` drops
    it: per key, the least of those under the limits the records ran under. Another limit's
    never counts: a lower value found under a looser limit is no best-known for runs under a
    tighter one, and a tighter limit's bound may exceed a looser one's optimum (each holds
    for its own limit's problem; the least of the runs' own is no more than any of them)."""
    from regal.bestknown import entry_key

    ran = {entry_key(r["fingerprint"], r["devices"], r.get("memory_limit"), r["objective"])
           for r in records}
    keys: dict = {}
    for (fingerprint, devices, limit, objective), value in by_store_key.items():
        if (fingerprint, devices, limit, objective) in ran:
            key = (fingerprint, devices, None, objective)
            keys[key] = min(keys.get(key, math.inf), value)
    return keys


def write_report(results, out=None, baseline: tuple[str, int] = BASELINE,
                 chart: bool = True, keep=None, best_known=None, bounds: bool = True,
                 pool_limits: bool = False) -> dict:
    """Reads every record under `results` (those `keep(record)` accepts, if given); writes
    table.md, table.csv and a bar chart per setting into `out` (default: `results`, or the
    folder of a `results` file).
    `best_known`: store files (default: the shipped stores under data/bestknown/), for the
    best values and the lower bounds they keep. `bounds`: also compute lower bounds from the
    records' graph files (`lower_bounds`; the larger of the two counts).
    `pool_limits`: one setting for runs whose graphs each have their own memory limit
    (`pool_memory_limits`, as in `summarize`).
    Returns {"markdown": text, "rows": [...], "files": [...], "skipped": [sentence per
    file with lines that are not compare records]}."""
    from regal.harness import current_revisions, load_records, skipped_lines

    skipped: dict = {}  # lines that are not compare records: said once per file
    records = [r for r in load_records(results, skipped) if keep is None or keep(r)]
    current = current_revisions(records)
    stale = Counter(r["method"] for r in records) - Counter(r["method"] for r in current)
    earlier = [f"{count} record(s) of {method} made by its earlier code (another revision) "
               f"left out; `regal compare` remakes them" for method, count in sorted(stale.items())]
    records = current
    if not records:
        why = "" if not (skipped or earlier) else \
            f" ({(skipped_lines(skipped) + earlier)[0]})"
        raise ValueError(f"results: no records (*.jsonl) under {results}{why}")
    entries = _store_entries(best_known)
    rows = summarize(records, baseline, best_known=best_known_values(entries=entries),
                     bounds=lower_bounds(records) if bounds else None, pool_limits=pool_limits,
                     known_bounds=best_known_bounds(entries=entries))
    if out is None:
        out = Path(results).parent if Path(results).is_file() else Path(results)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {out} is a file, expected a folder")
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(rows, baseline)
    files = [out / "table.md", out / "table.csv"]
    write_text(files[0], markdown)   # each whole or not at all
    write_text(files[1], to_csv(rows))
    if chart:
        from regal.plots import plot_method_bars

        settings = sorted({(r["objective"], r["devices"], r["memory_limit"]) for r in rows},
                          key=str)
        for setting in settings:
            part = [r for r in rows if (r["objective"], r["devices"], r["memory_limit"]) ==
                    setting]
            path = out / f"chart_{_slug(*setting)}.png"
            plot_method_bars(part, path, title=_setting_title(*setting),
                             baseline_label=baseline_name(baseline))
            files.append(path)
    return {"markdown": markdown, "rows": rows, "files": [str(f) for f in files],
            "skipped": skipped_lines(skipped) + earlier}
