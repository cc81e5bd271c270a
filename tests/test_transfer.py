"""Per-graph memory limits (experiments/transfer.py's makespan table): one row per method."""

from __future__ import annotations

import json

import pytest
from helpers import experiment

from regal import report
from regal.bestknown import entry_key

transfer = experiment("transfer")


def rec(graph, method, value, limit, objective="makespan"):
    """A record as the harness writes it (its revision is the current code's)."""
    from regal.optimizers import method_revision
    return dict(method=method, dataset="synth_test", graph=graph, fingerprint=f"fp-{graph}",
                seed=0, budget=5000, devices=2, memory_limit=limit, objective=objective,
                options="{}", status="ok", value=value, feasible=True, evaluations=5000,
                wall_time=1.0, error=None, revision=method_revision(method, limit))


def test_per_graph_limits_make_one_row_per_method():
    """Two graphs with their own limits: one makespan row per method, improvement and gap
    worked out by hand (g1: 100 -> 90, best-known 80; g2: 200 -> 220, best-known 200)."""
    records = [rec("g1", "brkga", 100.0, 1000), rec("g1", "m1", 90.0, 1000),
               rec("g2", "brkga", 200.0, 3000), rec("g2", "m1", 220.0, 3000),
               rec("g1", "brkga", 7.0, None, "peak_memory")]
    store = {entry_key("fp-g1", 2, [1000, 1000], "makespan"): 80.0,
             entry_key("fp-g2", 2, [3000, 3000], "makespan"): 200.0,
             entry_key("fp-g1", 2, None, "peak_memory"): 5.0,
             # under a looser limit than the runs': a shorter step, no yardstick for them
             entry_key("fp-g1", 2, [2000, 2000], "makespan"): 50.0}
    flat, best = report.pool_memory_limits(records, store)
    assert [r["memory_limit"] for r in flat] == [None] * 5
    assert best == {("fp-g1", 2, None, "makespan"): 80.0, ("fp-g2", 2, None, "makespan"): 200.0,
                    ("fp-g1", 2, None, "peak_memory"): 5.0}
    rows = [r for r in report.summarize(records, best_known=store, pool_limits=True)
            if r["objective"] == "makespan"]
    by_method = {r["method"]: r for r in rows}
    assert set(by_method) == {"brkga", "m1"} and by_method["m1"]["graphs"] == 2
    m1 = by_method["m1"]
    assert m1["improvement_pct"] == pytest.approx(100 * (0.10 + -0.10) / 2)
    assert m1["gap_pct"] == pytest.approx(100 * (10 / 80 + 20 / 200) / 2)
    assert (m1["wins"], m1["losses"]) == (1, 1)
    table = transfer.markdown([dict(r, label=r["method"], p_value=r["wilcoxon_p"])
                               for r in rows], "t")
    assert "makespan under a per-graph memory limit" in table and "feasible runs (%)" in table
    # the store's step-time bounds (g1: 75, g2: 160): m1's gap to them, 20% and 37.5%
    bounds = {entry_key("fp-g1", 2, [1000, 1000], "makespan"): 75.0,
              entry_key("fp-g2", 2, [3000, 3000], "makespan"): 160.0}
    bounded = {r["method"]: r for r in report.summarize(records, best_known=store,
                                                        pool_limits=True, known_bounds=bounds)
               if r["objective"] == "makespan"}
    assert bounded["m1"]["gap_bound_pct"] == pytest.approx(100 * (0.20 + 0.375) / 2)
    table = transfer.markdown([dict(r, label=r["method"], p_value=r["wilcoxon_p"])
                               for r in bounded.values()], "t")
    assert "| feasible runs (%) | gap to lower bound (%) |" in table and "| 28.75 |" in table


def test_makespan_limit_is_a_share_above_the_best_known_peak(tmp_path):
    """`makespan_limits`: factor x the store's peak where the store has the graph, else x the
    reference heuristics' best peak (which the limit then lets through)."""
    import numpy as np

    from helpers import random_graph
    from regal.bestknown import Entry, Store
    from regal.io import save_graph
    from regal.optimizers import Problem, solve
    from regal.policy.reference import reference_for
    from regal.sim import DeviceSpec

    graphs = [random_graph(np.random.default_rng(seed), 20) for seed in (1, 2)]
    paths = [tmp_path / f"g{i}.npz" for i in range(2)]
    for graph, path in zip(graphs, paths):
        save_graph(graph, path)
    problem = Problem(graphs[0], DeviceSpec(2))
    found = solve("brkga", problem, 200, 0)
    store_path = tmp_path / "peak.jsonl"
    store = Store(store_path)
    store.offer(Entry.from_solution(problem, found, graph="g0", found_by="brkga",
                                    evaluations=200, seconds=0.0))
    store.close()
    limit_of = transfer.makespan_limits(1.5, stores=[store_path])
    assert limit_of(paths[0], 2) == int(1.5 * found.value)
    assert limit_of(paths[1], 2) == int(1.5 * reference_for(graphs[1], DeviceSpec(2),
                                                            "peak_memory").value)


def test_current_records_point_at_the_graphs_here():
    """Records name the clone they were made in; the tables read graphs from here (by
    fingerprint), drop graphs that changed, and drop makespan runs under another limit."""
    from regal.harness import GraphEntry

    entries = [GraphEntry("synth_test", "g1", "/here/g1.npz", "fp-g1", 10),
               GraphEntry("synth_test", "g2", "/here/g2.npz", "fp-g2", 10)]
    records = [dict(rec("g1", "brkga", 1.0, None, "peak_memory"), graph_path="/there/g1.npz"),
               dict(rec("g2", "brkga", 1.0, 2000), graph_path="/there/g2.npz"),
               dict(rec("g2", "m1", 1.0, 1999), graph_path="/there/g2.npz"),
               dict(rec("g3", "brkga", 1.0, None, "peak_memory"), graph_path="/there/g3.npz")]
    kept = transfer.current_records(records, entries, lambda path, d: 1000 * d)
    assert [(r["graph"], r["method"], r["graph_path"]) for r in kept] == [
        ("g1", "brkga", "/here/g1.npz"), ("g2", "brkga", "/here/g2.npz")]


def test_rerun_of_an_unknown_method_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "records.jsonl").write_text('{"method": "brkga"}\n')
    with pytest.raises(SystemExit) as exc:
        transfer.main(["--quick", "--out", str(out), "--rerun", "brkga,nope"])
    assert exc.value.code == 2 and "'nope'" in capsys.readouterr().err
    assert (out / "records.jsonl").read_text() == '{"method": "brkga"}\n'   # nothing removed


def test_tables_show_only_this_runs_settings():
    """Records of an earlier schedule stay in the file but not in the tables: one row per
    method, with the options the run gave it."""
    polish = {"polish_share": 0.9, "fresh_climbs": 2, "race": [0.075, 0.225]}
    regal = dict(polish, policy_dir="data/policy")
    label = transfer.table1_labeler({"regal": regal, "seeded-brkga": polish,
                                     "cpsat": {"time_limit": 2.0}})

    def row(method, options):
        return {"method": method, "options": json.dumps(options, sort_keys=True)}

    assert label(row("regal", dict(regal))) == "**REGAL**"
    assert label(row("regal", dict(regal, polish_share=0.8))) is None
    assert label(row("seeded-brkga", {"race": [0.075, 0.225], "fresh_climbs": 2,
                                      "polish_share": 0.9})) == "seeded-brkga"
    assert label(row("seeded-brkga", {"fresh_share": 0.5, "polish_share": 0.8})) is None
    assert label(row("cpsat", {"time_limit": 2.0})) == "cpsat"
    assert label(row("cpsat", {"time_limit": 30.0})) is None
    assert label(row("brkga", {})) == "BRKGA-5K" and label(row("local-search", {})) == "local-search"
    assert label(row("local-search", {"batch_size": 8})) is None


def test_generalisation_splits_are_random_dags_and_network_inference_and_training_steps():
    """The full run's large splits are >= 10x the training set; the network-like ones hold
    no random DAG, the training-step split holds gradients and updates, inference has none."""
    from regal import synth

    full = transfer.large_split_recipes(2, transfer.FULL["large_ops"])
    assert set(full) == {"large", "large_net", "large_net_train"}
    assert all(r.min_ops >= 10 * transfer.TRAIN_MAX_OPS for r in full.values())
    assert full["large"].families == ("random",)
    assert "random" not in full["large_net"].families and not full["large_net"].training
    assert full["large_net_train"].training
    # the graphs themselves, at --quick's sizes (cheap to build)
    quick = transfer.large_split_recipes(1, transfer.QUICK["large_ops"])
    kinds = {}
    for name, recipe in quick.items():
        graph = synth.graph_at(recipe, 0)
        assert recipe.min_ops * 0.97 <= graph.num_nodes <= recipe.max_ops * 1.03
        kinds[name] = {str(t) for t in graph.op_types}
    assert kinds["large"] == {""}                       # random DAGs carry no op types
    backward = {t for t in kinds["large_net_train"] if t.endswith("Grad") or t.startswith("Apply")}
    assert backward
    assert not {t for t in kinds["large_net"] if t.endswith("Grad") or t.startswith("Apply")}


def test_policy_adds_by_hand():
    """REGAL minus its twin in points of BRKGA-5K, per graph over the seeds both have: graph
    a (seeds 0, 1): BRKGA mean 100, twin 90, REGAL 88 -> +2; graph b: BRKGA 200, twin 150,
    REGAL 154 -> -2; runs of other options, budgets or failed runs are left out."""
    transfer = experiment("transfer")
    opts = {"regal": {"policy_dir": "p"}, "seeded-brkga": {"race": [0.1]}}

    def rec(method, graph, seed, value, options=None, budget=5000, status="ok"):
        options = opts.get(method, {}) if options is None else options
        return dict(method=method, dataset="d", devices=2, objective="peak_memory",
                    fingerprint=graph, seed=seed, value=value, budget=budget, status=status,
                    options=json.dumps(options, sort_keys=True))

    records = [rec("brkga", "a", 0, 100), rec("brkga", "a", 1, 100),
               rec("seeded-brkga", "a", 0, 80), rec("seeded-brkga", "a", 1, 100),
               rec("regal", "a", 0, 88), rec("regal", "a", 1, 88), rec("regal", "a", 2, 1),
               rec("brkga", "b", 0, 200), rec("seeded-brkga", "b", 0, 150),
               rec("regal", "b", 0, 154),
               rec("regal", "b", 0, 1, options={"policy_dir": "other"}),
               rec("regal", "b", 0, 1, budget=1000), rec("brkga", "c", 0, 5),
               rec("regal", "c", 0, 1, status="error")]
    [row] = transfer.policy_adds(records, opts)
    assert (row["graphs"], row["ahead"], row["behind"]) == (2, 1, 1)
    assert row["mean"] == pytest.approx(0.0) and row["low"] == pytest.approx(-2.0)
    assert row["high"] == pytest.approx(2.0) and row["se"] == pytest.approx(2.0)
    assert "| d | 2 | peak_memory | 2 | +0.00 (2.00) |" in transfer.policy_adds_markdown([row])
    assert "†" not in transfer.policy_adds_markdown([row])
    # a BRKGA-5K run over the limit sets the scale of graph a: the row says so
    records[0] = dict(records[0], feasible=False)
    [row] = transfer.policy_adds(records, opts)
    assert row["unfit_scale"] == 1
    text = transfer.policy_adds_markdown([row])
    assert "| +0.00 (2.00)† |" in text and "d at 2 devices (peak_memory): 1 of 2" in text


def test_the_makespan_table_marks_figures_of_runs_over_the_limit():
    """A BRKGA-5K run over its graph's limit counts at its ranking penalty: the improvement,
    p, wins/losses and headroom that rest on it carry †, and the table says what † means; a
    table whose runs all fit has no †."""
    fit = [rec("g1", "brkga", 100.0, 1000), rec("g1", "m1", 90.0, 1000),
           rec("g2", "brkga", 200.0, 3000), rec("g2", "m1", 180.0, 3000)]
    store = {entry_key("fp-g1", 2, [1000, 1000], "makespan"): 80.0,
             entry_key("fp-g2", 2, [3000, 3000], "makespan"): 160.0}

    def table(records):
        rows = [r for r in report.summarize(records, best_known=store, pool_limits=True)
                if r["objective"] == "makespan"]
        return transfer.markdown([dict(r, label=r["method"], p_value=r["wilcoxon_p"])
                                  for r in rows], "t")

    assert "†" not in table(fit)
    unfit = [dict(fit[0], value=900.0, feasible=False)] + fit[1:]
    text = table(unfit)
    m1 = next(line for line in text.splitlines() if line.startswith("| m1 "))
    assert m1.count("†") >= 3 and report.UNFIT_NOTE in text


def test_pooled_store_bounds_are_those_of_the_runs_limits():
    """A bound held for a tighter limit than the runs' may exceed their optimum: only the
    bounds of the limits the records ran under are pooled (the least of them)."""
    records = [rec("g1", "m1", 90.0, 1000)]
    bounds = {entry_key("fp-g1", 2, [1000, 1000], "makespan"): 75.0,
              entry_key("fp-g1", 2, [500, 500], "makespan"): 120.0}   # a tighter limit's
    [row] = [r for r in report.summarize(records, pool_limits=True, known_bounds=bounds)
             if r["method"] == "m1"]
    assert row["gap_bound_pct"] == pytest.approx(100 * (90 - 75) / 75)
    del bounds[entry_key("fp-g1", 2, [1000, 1000], "makespan")]   # the tighter limit's alone
    [row] = [r for r in report.summarize(records, pool_limits=True, known_bounds=bounds)
             if r["method"] == "m1"]
    assert row["gap_bound_pct"] is None          # no bound of its own limit: none claimed


def test_large_graphs_run_the_twin_and_the_paper_with_only_their_options():
    """The large-graph runs take BRKGA-5K, REGAL and, when the run runs them, the twin and
    regal-paper; the options handed on name only those (the harness refuses options of a
    method it does not run, as --quick's cpsat options once were)."""
    from regal.harness import check_grid

    options = {"regal": {"a": 1}, "seeded-brkga": {"b": 2}, "regal-paper": {"c": 3},
               "cpsat": {"time_limit": 2.0}}
    run, given = transfer.large_graph_methods(
        ["local-search", "seeded-brkga", "cpsat", "regal-paper"], options)
    assert run == ["brkga", "seeded-brkga", "regal-paper", "regal"]
    assert given == {"regal": {"a": 1}, "seeded-brkga": {"b": 2}, "regal-paper": {"c": 3}}
    check_grid(run, method_options=given)
    run, given = transfer.large_graph_methods(["local-search", "cpsat"], options)
    assert run == ["brkga", "regal"] and given == {"regal": {"a": 1}}
