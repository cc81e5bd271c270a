"""The paper's Table 1 from harness records (DESIGN §7), as Markdown, CSV and a bar chart.

Per setting (objective, devices, memory limit) and dataset, for every (method, budget):
- % improvement over BRKGA-5K: mean over graphs of (obj_brkga5k - obj) / obj_brkga5k;
- % gap from best: mean over graphs of (obj - obj_best) / obj_best, where obj_best is the
  best value any record in the folder (any method, budget or dataset, long runs included)
  reached on that graph;
- headroom captured: that improvement / the best-known improvement on the same graphs,
  shown only where the best-known improvement is positive (otherwise it means nothing).
A method's value on a graph is the mean over its successful seeds; failed runs are counted
but never averaged in.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable

__all__ = ["BASELINE", "CSV_FIELDS", "baseline_name", "summarize", "to_markdown", "to_csv", "write_report"]

BASELINE = ("brkga", 5000)  # BRKGA-5K: method brkga at a budget of 5,000 evaluations
CSV_FIELDS = ("objective", "devices", "memory_limit", "dataset", "method", "budget", "options",
              "graphs",
              "runs", "failed", "improvement_pct", "gap_pct", "headroom_pct", "mean_value",
              "mean_wall_s", "mean_evaluations", "feasible_pct")


def baseline_name(baseline: tuple[str, int] = BASELINE) -> str:
    """('brkga', 5000) -> 'BRKGA-5K'; ('brkga', 300) -> 'BRKGA-300'."""
    method, budget = baseline
    size = f"{budget // 1000}K" if budget % 1000 == 0 else str(budget)
    return f"{method.upper()}-{size}"


def _setting(record: dict) -> tuple:
    return (record["objective"], int(record["devices"]), record.get("memory_limit"))


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _relative(numer_base: float, numer_sub: float, denom: float) -> float | None:
    """(numer_base - numer_sub) / denom, or None where denom is 0 (nothing to compare to)."""
    if denom == 0:
        return 0.0 if numer_base == numer_sub else None
    return (numer_base - numer_sub) / denom


def summarize(records: Iterable[dict], baseline: tuple[str, int] = BASELINE) -> list[dict]:
    """One row per (setting, dataset, method, budget, options), metrics in percent.

    The baseline is `baseline` = (method, budget) run with default options.
    """
    records = list(records)
    best: dict[tuple, float] = {}             # (setting, fingerprint) -> best value ever
    per_seed = defaultdict(list)              # (setting, dataset, method, budget, fp) -> values
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
        graph = (setting, r["fingerprint"])
        best[graph] = min(best.get(graph, math.inf), value)
        per_seed[row + (r["fingerprint"],)].append(value)
        wall[row].append(float(r.get("wall_time") or 0.0))
        evals[row].append(float(r.get("evaluations") or 0))
        feasible[row].append(bool(r.get("feasible")))

    per_graph: dict[tuple, dict[str, float]] = defaultdict(dict)  # row -> {fp: seed mean}
    for key, values in per_seed.items():
        per_graph[key[:5]][key[5]] = sum(values) / len(values)

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
        rows.append(dict(
            objective=objective, devices=devices, memory_limit=limit, dataset=dataset,
            method=method, budget=budget, options=options, graphs=len(mine), runs=runs[row], failed=failed[row],
            improvement_pct=None if improvement is None else 100 * improvement,
            gap_pct=None if gap is None else 100 * gap,
            headroom_pct=None if headroom is None else 100 * headroom,
            mean_value=_mean(mine.values()), mean_wall_s=_mean(wall[row]),
            mean_evaluations=_mean(evals[row]),
            feasible_pct=None if not feasible[row] else 100 * _mean(map(float, feasible[row]))))
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
    memory = "no memory limit" if limit is None else f"memory limit {limit:,} bytes"
    return f"{objective}, {devices} devices, {memory}"


def _ordered(rows: list[dict], baseline) -> list[dict]:
    """BRKGA-5K first, then best improvement first (rows without one last)."""
    def key(r):
        is_base = (r["method"], r["budget"], r["options"]) == tuple(baseline) + ("{}",)
        imp = r["improvement_pct"]
        return (not is_base, imp is None, -(imp or 0.0), r["method"], r["budget"])
    return sorted(rows, key=key)


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
            lines += [f"### {dataset} ({graphs} graphs)", "",
                      "| method | budget | graphs | runs | failed | % impr. over "
                      f"{name} | % gap from best | headroom captured % "
                      "| mean wall s |",
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for r in part:
                lines.append(
                    f"| {_label(r)} | {r['budget']} | {r['graphs']} | {r['runs']} | "
                    f"{r['failed']} | {_fmt(r['improvement_pct'], signed=True)} | "
                    f"{_fmt(r['gap_pct'])} | {_fmt(r['headroom_pct'], 1)} | "
                    f"{_fmt(r['mean_wall_s'], 2)} |")
            lines.append("")
            if not any((r["method"], r["budget"], r["options"]) == tuple(baseline) + ("{}",)
                       and r["graphs"]
                       for r in part):
                lines += [f"(no {baseline[0]} run at budget {baseline[1]} on {dataset}: "
                          "no improvement column)", ""]
    lines += ["Improvement and gap: mean over graphs of per-graph relative differences; each "
              "graph's value is the mean over seeds. Best = the best value any record in the "
              "results reached on that graph. Headroom = improvement / best-known improvement, "
              "shown where the latter is positive.", ""]
    return "\n".join(lines)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r[k] is None else
                             round(r[k], 6) if isinstance(r[k], float) else r[k])
                         for k in CSV_FIELDS})
    return buffer.getvalue()


def _slug(objective: str, devices: int, limit) -> str:
    return f"{objective}_{devices}dev" + ("" if limit is None else f"_{limit}B")


def write_report(results, out=None, baseline: tuple[str, int] = BASELINE,
                 chart: bool = True, keep=None) -> dict:
    """Reads every record under `results` (those `keep(record)` accepts, if given); writes
    table.md, table.csv and a bar chart per setting into `out` (default: `results`).
    Returns {"markdown": text, "rows": [...], "files": [...]}."""
    from regal.harness import load_records

    records = [r for r in load_records(results) if keep is None or keep(r)]
    if not records:
        raise ValueError(f"results: no records (*.jsonl) under {results}")
    rows = summarize(records, baseline)
    out = Path(results if out is None else out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {out} is a file, expected a folder")
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(rows, baseline)
    files = [out / "table.md", out / "table.csv"]
    files[0].write_text(markdown)
    files[1].write_text(to_csv(rows))
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
    return {"markdown": markdown, "rows": rows, "files": [str(f) for f in files]}
