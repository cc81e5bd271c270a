"""Table 1 metrics against numbers worked out by hand on a few fake records."""

from __future__ import annotations

import csv
import io
import json

import pytest

from regal import report
from regal.cli import main


def rec(dataset, graph, method, budget, seed, value, devices=2, status="ok", options="{}"):
    return dict(method=method, dataset=dataset, graph=graph, fingerprint=f"fp-{graph}",
                seed=seed, budget=budget, devices=devices, memory_limit=None,
                objective="peak_memory", options=options, status=status,
                value=value if status == "ok" else None, feasible=status == "ok",
                evaluations=budget, wall_time=1.0, error=None if status == "ok" else "boom")


# dataset A: graphs g1, g2; dataset B: g1 again (same fingerprint) and g3.
# best values: g1 = 80 (brkga 50K on A), g2 = 190 (brkga 50K), g3 = 50 (m1 on B).
RECORDS = [
    rec("A", "g1", "brkga", 5000, 0, 100.0), rec("A", "g1", "brkga", 5000, 1, 110.0),
    rec("A", "g2", "brkga", 5000, 0, 200.0),
    rec("A", "g1", "m1", 5000, 0, 84.0),
    rec("A", "g2", "m1", 5000, 0, 210.0), rec("A", "g2", "m1", 5000, 1, 0.0, status="failed"),
    rec("A", "g1", "brkga", 50000, 0, 80.0), rec("A", "g2", "brkga", 50000, 0, 190.0),
    rec("B", "g1", "brkga", 5000, 0, 120.0), rec("B", "g1", "m1", 5000, 0, 90.0),
    rec("B", "g3", "brkga", 5000, 0, 50.0), rec("B", "g3", "m1", 5000, 0, 50.0),
    # the same method with other options is a row of its own, never averaged with m1
    rec("A", "g1", "m1", 5000, 0, 80.0, options='{"time_limit": 10.0}'),
    # another setting (4 devices): its values must not leak into the 2-device best
    rec("A", "g1", "m1", 5000, 0, 1.0, devices=4),
]


def row(rows, dataset, method, budget=5000, devices=2):
    (found,) = [r for r in rows if (r["dataset"], r["method"], r["budget"], r["devices"],
                                    r["options"]) == (dataset, method, budget, devices, "{}")]
    return found


def test_metrics_match_hand_computation():
    rows = report.summarize(RECORDS)
    m1 = row(rows, "A", "m1")
    # improvement: g1 (105-84)/105 = 0.2, g2 (200-210)/200 = -0.05 -> mean 0.075
    assert m1["improvement_pct"] == pytest.approx(7.5)
    # gap: g1 (84-80)/80 = 0.05, g2 (210-190)/190 -> mean
    assert m1["gap_pct"] == pytest.approx(100 * (0.05 + 20 / 190) / 2)
    # best-known improvement: g1 25/105, g2 10/200; headroom = 0.075 / its mean
    assert m1["headroom_pct"] == pytest.approx(100 * 0.075 / ((25 / 105 + 0.05) / 2))
    assert (m1["graphs"], m1["runs"], m1["failed"]) == (2, 3, 1)

    base = row(rows, "A", "brkga")
    assert base["improvement_pct"] == 0.0 and base["headroom_pct"] == 0.0
    assert base["gap_pct"] == pytest.approx(100 * (25 / 80 + 10 / 190) / 2)
    long = row(rows, "A", "brkga", 50000)
    assert long["gap_pct"] == 0.0 and long["headroom_pct"] == pytest.approx(100.0)
    assert long["improvement_pct"] == pytest.approx(100 * (25 / 105 + 10 / 200) / 2)

    b = row(rows, "B", "m1")
    # g1: best 80 comes from dataset A; g3: nothing beats 50 (no headroom there)
    assert b["improvement_pct"] == pytest.approx(100 * (30 / 120 + 0) / 2)
    assert b["gap_pct"] == pytest.approx(100 * (10 / 80 + 0) / 2)
    assert b["headroom_pct"] == pytest.approx(100 * (0.25 / 2) / ((40 / 120 + 0) / 2))

    (timed,) = [r for r in rows if r["options"] != "{}"]
    assert (timed["graphs"], timed["runs"], timed["gap_pct"]) == (1, 1, 0.0)
    assert timed["improvement_pct"] == pytest.approx(100 * 25 / 105)

    four = row(rows, "A", "m1", devices=4)
    assert four["gap_pct"] == 0.0 and four["improvement_pct"] is None  # no baseline there


def test_headroom_only_where_someone_beat_the_baseline():
    records = [rec("C", "g", "brkga", 5000, 0, 100.0), rec("C", "g", "worse", 5000, 0, 120.0)]
    rows = report.summarize(records)
    assert row(rows, "C", "worse")["improvement_pct"] == pytest.approx(-20.0)
    assert row(rows, "C", "worse")["headroom_pct"] is None
    assert row(rows, "C", "brkga")["headroom_pct"] is None


def test_all_failed_method_has_no_numbers():
    records = [rec("C", "g", "brkga", 5000, 0, 100.0),
               rec("C", "g", "broken", 5000, 0, 0.0, status="failed")]
    broken = row(report.summarize(records), "C", "broken")
    assert (broken["graphs"], broken["failed"], broken["gap_pct"]) == (0, 1, None)
    assert broken["improvement_pct"] is None


def test_write_report_files(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "long").mkdir(parents=True)
    # records may be spread over several files (e.g. a long-run folder inside)
    short = [r for r in RECORDS if r["budget"] == 5000]
    long = [r for r in RECORDS if r["budget"] != 5000]
    (results / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in short))
    (results / "long" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in long))
    out = tmp_path / "tables"
    assert main(["report", str(results), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "### A (2 graphs)" in printed and "### B (2 graphs)" in printed
    assert "| m1 | 5000 | 2 | 3 | 1 | +7.50 |" in printed
    assert "| m1 (time_limit=10.0) | 5000 | 1 | 1 | 0 | +23.81 |" in printed
    table = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert len(table) == len(report.summarize(RECORDS))
    m1 = [t for t in table if (t["dataset"], t["method"], t["devices"], t["options"]) ==
          ("A", "m1", "2", "{}")]
    assert float(m1[0]["improvement_pct"]) == pytest.approx(7.5)
    assert (out / "table.md").read_text() == report.to_markdown(report.summarize(RECORDS))
    for name in ("chart_peak_memory_2dev.png", "chart_peak_memory_4dev.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_baseline_is_said(tmp_path):
    text = report.to_markdown(report.summarize([rec("C", "g", "m1", 1000, 0, 5.0)]))
    assert "no brkga run at budget 5000 with its default options (no --time-limit) on C" in text
    assert report.baseline_name(("brkga", 5000)) == "BRKGA-5K"
    assert report.baseline_name(("brkga", 300)) == "BRKGA-300"


def test_report_errors(tmp_path):
    assert main(["report", str(tmp_path / "absent")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2


def test_best_known_store_bounds_and_paired_statistics():
    """With a store and bounds: best = min(store, records); the other columns by hand."""
    from regal.bestknown import entry_key

    records = [
        rec("A", "g1", "brkga", 5000, 0, 100.0), rec("A", "g1", "brkga", 5000, 1, 120.0),
        rec("A", "g2", "brkga", 5000, 0, 200.0),
        rec("A", "g3", "brkga", 5000, 0, 40.0),
        rec("A", "g1", "m1", 5000, 0, 90.0), rec("A", "g1", "m1", 5000, 1, 90.0),
        rec("A", "g2", "m1", 5000, 0, 210.0),
        rec("A", "g3", "m1", 5000, 0, 30.0),
    ]
    store = {entry_key("fp-g1", 2, None, "peak_memory"): 50.0,   # far below every record
             entry_key("fp-g2", 2, None, "peak_memory"): 250.0}  # above a record: record wins
    bounds = {(2, "fp-g1"): 40.0, (2, "fp-g2"): 100.0}             # g3: no bound
    rows = report.summarize(records, best_known=store, bounds=bounds)
    base, m1 = row(rows, "A", "brkga"), row(rows, "A", "m1")
    # brkga means: g1 110, g2 200, g3 40; m1: g1 90, g2 210, g3 30; best: g1 50, g2 200, g3 30
    assert m1["improvement_pct"] == pytest.approx(100 * (20 / 110 - 10 / 200 + 10 / 40) / 3)
    assert m1["gap_pct"] == pytest.approx(100 * (40 / 50 + 10 / 200 + 0) / 3)
    assert m1["gap_bound_pct"] == pytest.approx(100 * (50 / 40 + 110 / 100) / 2)
    possible = (60 / 110 + 0 + 10 / 40) / 3
    assert m1["headroom_pct"] == pytest.approx(100 * m1["improvement_pct"] / 100 / possible)
    assert (m1["wins"], m1["losses"]) == (2, 1)
    assert base["wins"] is None and base["wilcoxon_p"] is None
    from scipy.stats import wilcoxon
    assert m1["wilcoxon_p"] == pytest.approx(wilcoxon([110, 200, 40], [90, 210, 30]).pvalue)
    # spread over seeds: only g1 has two seeds; brkga: std(100, 120) / 110
    assert base["seed_spread_pct"] == pytest.approx(100 * (200 ** 0.5) / 110)
    assert m1["seed_spread_pct"] == 0.0
    assert m1["no_best_known"] == 1  # g3 has no store entry
    assert m1["store_beaten"] == base["store_beaten"] == 1  # g2: brkga's 200 < the store's 250
    text = report.to_markdown(rows)
    assert "entries for 2 of 3 graphs" in text and "gap to lower bound" in text
    assert "a record beats the store's entry on 1." in text


# ---------------------------------------------------------------------------
# issue 24: foreign and garbled JSON lines never break the report nor change its numbers


def test_foreign_jsonl_files_leave_the_table_unchanged(tmp_path, capsys):
    from pathlib import Path
    clean, messy = tmp_path / "clean", tmp_path / "messy"
    for folder in (clean, messy):
        folder.mkdir()
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    store = Path(report.__file__).resolve().parent.parent / "data" / "bestknown"
    (messy / "run").mkdir()
    (messy / "run" / "history.jsonl").write_text(  # a `regal train` run's history
        '{"step": 1, "loss": 0.5, "wall_time": 1.0}\n{"step": 2, "loss": 0.4}\n')
    (messy / "notes.jsonl").write_text('{"note": "rerun on Monday"}\n')
    (messy / "store.jsonl").write_bytes(next(store.glob("*.jsonl")).read_bytes())
    with open(messy / "records.jsonl", "ab") as f:
        f.write(b'42\n{"objective": "peak_memory"}\n\xff\xfe\n' + b"[" * 100_000 + b"\n")
    assert main(["report", str(clean), "--no-chart", "--no-bounds"]) == 0
    want = capsys.readouterr()
    assert want.err == ""
    assert main(["report", str(messy), "--no-chart", "--no-bounds"]) == 0
    got = capsys.readouterr()
    assert got.out.split("wrote")[0] == want.out.split("wrote")[0]
    warnings = got.err.splitlines()
    assert len(warnings) == 4 and all(w.startswith("regal: warning: ") for w in warnings)
    for name, count in (("history.jsonl", "2 lines"), ("notes.jsonl", "1 line "),
                        ("store.jsonl", "lines"), ("records.jsonl", "4 lines")):
        (line,) = [w for w in warnings if f"{name}: skipped" in w]
        assert count in line and "line 1" in line or name == "records.jsonl"
    assert "records.jsonl: skipped 4 lines" in got.err and "(first: line 15:" in got.err


def test_only_foreign_files_is_an_error_naming_one(tmp_path, capsys):
    (tmp_path / "history.jsonl").write_text('{"step": 1}\n')
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "history.jsonl: skipped 1 line" in err


@pytest.mark.parametrize("change, why", [
    (dict(devices=[2]), "'devices'"), (dict(value=float("inf")), "'value'"),
    (dict(options=None), "'options'"), (dict(objective="speed"), "'objective'"),
])
def test_summarize_names_a_bad_record(change, why):
    records = RECORDS[:3] + [dict(RECORDS[3], **change)]
    with pytest.raises(ValueError, match=f"record 3 .*{why}"):
        report.summarize(records)



def test_infeasible_makespans_give_no_nan():
    """Over a memory limit the makespan is infinite: equal infinities are 0 % apart, an
    infinite baseline leaves no ratio ('-'), never NaN."""
    def infeasible(graph, method, value):
        return dict(rec("A", graph, method, 5000, 0, value), objective="makespan",
                    memory_limit=0, feasible=value != float("inf"))
    records = [infeasible("g1", "brkga", float("inf")), infeasible("g1", "m1", float("inf")),
               infeasible("g2", "brkga", float("inf")), infeasible("g2", "m1", 50.0)]
    rows = report.summarize(records)
    m1 = row(rows, "A", "m1")
    assert m1["gap_pct"] == 0.0  # g1: inf vs best inf -> 0; g2: 50 is the best -> 0
    assert m1["improvement_pct"] == 0.0  # g1: 0; g2: inf -> 50 has no ratio, left out
    assert row(rows, "A", "brkga")["gap_pct"] == float("inf")  # g2: infeasible, best 50
    assert "nan" not in report.to_markdown(rows) + report.to_csv(rows)


def test_seed_spread_of_huge_or_infinite_values_is_a_number_or_none():
    """Found by the slow fuzz run: makespan records under a 0-byte limit carry ranking
    penalties near 1e300, whose squared deviations overflowed into a NaN spread."""
    from regal.report import _spread

    assert _spread([1e300, 1.2e300]) == pytest.approx((2 * 0.1 ** 2) ** 0.5 / 1.1)
    assert _spread([100.0, 120.0]) == pytest.approx((200 ** 0.5) / 110)
    assert _spread([1.5e308, 1.7e308]) == pytest.approx((2 * 0.1 ** 2) ** 0.5 / 1.6)
    assert _spread([1.0, float("inf")]) is None and _spread([5.0]) is None
    assert _spread([0.0, 0.0]) == 0.0


# ---------------------------------------------------------------------------
# issue 36 item 11: runs over the memory limit are marked, a missing BRKGA-5K drops the
# columns that need it (said once), limits print in human units

LIMIT = 700 * 2**20


def limited(graph, method, value, dataset="C", seed=0):
    """A peak-memory run under LIMIT whose peak is `value` (over the limit: it does not fit)."""
    return dict(rec(dataset, graph, method, 5000, seed, float(value)), memory_limit=LIMIT,
                peak=[int(value), 0], feasible=value <= LIMIT)


def test_runs_over_the_limit_are_counted_and_every_figure_from_them_marked():
    over, under = LIMIT + 2**20, LIMIT - 2**20
    records = [limited("g1", "brkga", under - 10), limited("g2", "brkga", under - 5),
               limited("g1", "m1", over), limited("g2", "m1", under - 20),   # m1 misses g1
               limited("g1", "m2", under - 12), limited("g2", "m2", under - 6)]
    rows = report.summarize(records)
    m1, m2, base = row(rows, "C", "m1"), row(rows, "C", "m2"), row(rows, "C", "brkga")
    assert (m1["feasible_runs"], m1["failed"]) == (1, 0)
    assert set(m1["from_unfit_runs"]) == {"improvement_pct", "wins", "losses", "wilcoxon_p",
                                          "gap_pct", "headroom_pct", "mean_value"}
    # m2 and the baseline compare only runs that fit (g2's best is m1's, which fits)
    assert m2["from_unfit_runs"] == base["from_unfit_runs"] == ()
    text = report.to_markdown(rows)
    (m1_line,) = [line for line in text.splitlines() if line.startswith("| m1 |")]
    (m2_line,) = [line for line in text.splitlines() if line.startswith("| m2 |")]
    assert "| fits |" in text and "| 1/2 |" in m1_line and "| 2/2 |" in m2_line
    cells = m1_line.split(" | ")
    assert sum(c.endswith("†") for c in cells) == 5, m1_line   # impr., W/L, p, gap, headroom
    assert "†" not in m2_line
    assert text.count("† rests on runs that do not fit the memory limit") == 1
    table = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    (m1_csv,) = [t for t in table if t["method"] == "m1"]
    assert m1_csv["feasible_runs"] == "1" and "gap_pct" in m1_csv["from_unfit_runs"].split()


def test_missing_baseline_drops_its_columns_and_says_why_once():
    records = [limited("g1", "m1", 10), limited("g2", "m1", 20),
               limited("g1", "m2", 12), limited("g2", "m2", 18)]
    text = report.to_markdown(report.summarize(records, bounds={}))
    (header,) = [line for line in text.splitlines() if line.startswith("| method |")]
    for column in ("impr. over", "W/L", "Wilcoxon", "headroom", "lower bound", "seed spread"):
        assert column not in header
    assert "% gap from best" in header and "| fits |" in header
    assert text.count("no brkga run at budget 5000 with its default options (no --time-limit) on C") == 1
    assert text.count("no seed-spread column: one seed per graph") == 1
    assert text.count("no lower-bound column") == 1
    body = [line for line in text.splitlines() if line.startswith("| m")]
    assert body and all("| - |" not in line for line in body)   # no column left empty


def test_memory_limit_prints_in_human_units():
    text = report.to_markdown(report.summarize([limited("g1", "m1", 10)]))
    assert "## peak_memory, 2 devices, memory limit 700.00 MiB" in text
    assert "734,003,200" not in text


def test_markdown_table_aligns_a_name_then_figures_and_checks_its_columns():
    from regal.report import markdown_table
    assert markdown_table(["method", "value"], [["a", 1], ["b", "2.5"]]) == [
        "| method | value |", "| --- | ---: |", "| a | 1 |", "| b | 2.5 |"]
    assert markdown_table(["x", "y", "z"], [], "lrl")[1] == "| --- | ---: | --- |"
    with pytest.raises(ValueError, match="3 columns"):
        markdown_table(["x", "y", "z"], [], "lr")


# ---------------------------------------------------------------------------
# issue 39 item 4: the certified gap in the tables


def _store_line(graph, value, bound):
    """A best-known store solution line for rec()'s fingerprint of `graph`, 2 devices."""
    line = {"kind": "solution", "fingerprint": f"fp-{graph}", "graph": graph, "ops": 1,
            "devices": 2, "memory_limit": None, "objective": "peak_memory",
            "value": float(value), "placement": [0], "priority": [0], "transfer_priority": [0]}
    return line if bound is None else dict(line, bound=float(bound), bound_source="op_start")


def test_certified_gap_columns_equal_a_hand_computation(tmp_path, capsys):
    """On a hand-made records file and store: the median over graphs of (seed mean - bound)
    / bound per method, and of (best - bound) / bound, from the bounds the store keeps; a
    graph without a bound is left out."""
    records = [rec("A", "g1", "brkga", 5000, 0, 100.0), rec("A", "g1", "m1", 5000, 0, 88.0),
               rec("A", "g1", "m1", 5000, 1, 92.0),
               rec("A", "g2", "brkga", 5000, 0, 200.0), rec("A", "g2", "m1", 5000, 0, 210.0),
               rec("A", "g3", "brkga", 5000, 0, 40.0), rec("A", "g3", "m1", 5000, 0, 30.0),
               rec("A", "g4", "brkga", 5000, 0, 55.0), rec("A", "g4", "m1", 5000, 0, 60.0)]
    results = tmp_path / "results"
    results.mkdir()
    (results / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store = tmp_path / "store.jsonl"
    store.write_text("".join(json.dumps(line) + "\n" for line in [
        _store_line("g1", 80, 64), _store_line("g2", 190, 150), _store_line("g3", 35, None),
        _store_line("g4", 50, 50)]))
    assert main(["report", str(results), "--best-known", str(store), "--no-chart"]) == 0
    capsys.readouterr()
    # by hand: bounds g1 64, g2 150, g4 50 (g3 none); best g1 80, g2 190, g4 50
    m1_gaps = sorted([(90 - 64) / 64, (210 - 150) / 150, (60 - 50) / 50])
    brkga_gaps = sorted([(100 - 64) / 64, (200 - 150) / 150, (55 - 50) / 50])
    best_gaps = sorted([(80 - 64) / 64, (190 - 150) / 150, 0.0])
    want = {"m1": (m1_gaps[1], sum(m1_gaps) / 3, best_gaps[1]),
            "brkga": (brkga_gaps[1], sum(brkga_gaps) / 3, best_gaps[1])}
    lines = (results / "table.md").read_text().splitlines()
    (header,) = [line for line in lines if line.startswith("| method |")]
    columns = [c.strip() for c in header.strip("|").split("|")]
    median_at = columns.index("median % gap to lower bound")
    best_at = columns.index("certified gap of best %")
    mean_at = columns.index("% gap to lower bound")
    for method, (median, mean, best) in want.items():
        (line,) = [line for line in lines if line.startswith(f"| {method} |")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[median_at] == f"{100 * median:.2f}", (method, line)
        assert cells[mean_at] == f"{100 * mean:.2f}", (method, line)
        assert cells[best_at] == f"{100 * best:.2f}", (method, line)
    table = {t["method"]: t for t in csv.DictReader(io.StringIO(
        (results / "table.csv").read_text()))}
    for method, (median, mean, best) in want.items():
        assert float(table[method]["gap_bound_median_pct"]) == pytest.approx(100 * median)
        assert float(table[method]["best_gap_bound_pct"]) == pytest.approx(100 * best)
    text = (results / "table.md").read_text()
    assert "certified gap of best = median over graphs" in text


def test_the_larger_bound_counts_and_bounds_pool_with_limits():
    """A graph's bound is the larger of the computed one and the store's; without either
    there are no bound figures; pooled limits keep the least of a key's bounds."""
    from regal.bestknown import entry_key

    records = [rec("A", "g1", "m1", 5000, 0, 90.0), rec("A", "g2", "m1", 5000, 0, 120.0)]
    known = {entry_key("fp-g1", 2, None, "peak_memory"): 60.0,
             entry_key("fp-g2", 2, None, "peak_memory"): 100.0}
    rows = report.summarize(records, bounds={(2, "fp-g1"): 75.0, (2, "fp-g2"): 80.0},
                            known_bounds=known)
    m1 = row(rows, "A", "m1")
    assert m1["gap_bound_pct"] == pytest.approx(100 * (15 / 75 + 20 / 100) / 2)
    assert m1["gap_bound_median_pct"] == pytest.approx(100 * (15 / 75 + 20 / 100) / 2)
    assert m1["best_gap_bound_pct"] == pytest.approx(100 * (15 / 75 + 20 / 100) / 2)
    bare = row(report.summarize(records), "A", "m1")
    assert bare["gap_bound_median_pct"] is None and bare["best_gap_bound_pct"] is None
    limited_records = [dict(r, memory_limit=1000) for r in records]
    pooled = report.summarize(limited_records, pool_limits=True, known_bounds={
        entry_key("fp-g1", 2, 1000, "peak_memory"): 60.0,
        entry_key("fp-g1", 2, 2000, "peak_memory"): 70.0})
    assert row(pooled, "A", "m1")["best_gap_bound_pct"] == pytest.approx(100 * 30 / 60)
