"""Methods behind one interface, re-scoring, solution files and `regal optimize` end to end."""

import json
import re

import numpy as np
import pytest

from regal import optimizers as opt
from regal.cli import main
from regal.decode import decode
from regal.graph_builder import GraphBuilder
from regal.sim import DeviceSpec, simulate, trace
from regal.synth import generate


def small_problem(objective="peak_memory", ops=40, seed=0, d=3, **spec):
    return opt.Problem(generate("random", ops, seed), DeviceSpec(d, **spec), objective)


def simulated_value(problem, sol):
    res = simulate(problem.graph, problem.devices, sol.placement, sol.priority,
                   sol.transfer_priority)
    return res.objective(problem.objective), res


# -- search quality ----------------------------------------------------------

def test_brkga_beats_random_search_at_equal_budget():
    """Paired over 40 synthetic graphs with fixed seeds: BRKGA wins on most (31/40 when
    written; 84 of 100 graphs in a one-off run) and by more than 1% on average; a one-sided
    sign test on the wins rejects "no better than random" at p < 0.01 (needs >= 28 wins)."""
    from scipy.stats import binomtest

    wins, gains = 0, []
    for i in range(40):
        problem = opt.Problem(generate("random", 80, i), DeviceSpec(3), "peak_memory")
        ga = opt.solve("brkga", problem, 600, seed=i, population_size=40)
        rs = opt.solve("random", problem, 600, seed=i)
        assert ga.evaluations == rs.evaluations == 600
        wins += ga.value < rs.value
        gains.append((rs.value - ga.value) / rs.value)
    assert binomtest(wins, 40, 0.5, alternative="greater").pvalue < 0.01, wins
    assert np.mean(gains) > 0.01, np.mean(gains)


# -- re-scoring and the interface ----------------------------------------------

@pytest.mark.parametrize("method", ["brkga", "random"])
@pytest.mark.parametrize("objective", ["peak_memory", "makespan"])
def test_solutions_rescore_to_their_objective(method, objective):
    problem = small_problem(objective, memory_limit=2000 if objective == "makespan" else None)
    sol = opt.solve(method, problem, 120, seed=1, **({"population_size": 20}
                                                      if method == "brkga" else {}))
    value, res = simulated_value(problem, sol)
    assert sol.value == value
    np.testing.assert_array_equal(sol.peak, res.peak)
    assert sol.makespan == res.makespan and sol.feasible == res.feasible
    assert sol.method == method and sol.seed == 1 and sol.evaluations == 120
    assert sol.wall_time > 0
    limits = problem.devices.limits
    want = 0 if limits is None else int(np.maximum(res.peak - limits, 0).sum())
    assert sol.overflow == want


def test_brkga_value_is_the_best_the_evaluator_returned():
    seen = []

    class Recording(opt.Problem):
        def evaluate(self, keys):
            values = super().evaluate(keys)
            seen.append(values)
            return values

    problem = Recording(generate("random", 30, 2), DeviceSpec(2), "peak_memory")
    sol = opt.solve("brkga", problem, 130, seed=0, population_size=10)
    assert sum(len(v) for v in seen) == 130
    assert sol.value == min(v.min() for v in seen)


def test_random_search_counts_and_is_seeded():
    calls = []

    class Counting(opt.Problem):
        def evaluate(self, keys):
            calls.append(len(keys))
            return super().evaluate(keys)

    problem = Counting(generate("random", 30, 3), DeviceSpec(2), "peak_memory")
    a = opt.solve("random", problem, 250, seed=4, batch_size=100)
    assert calls == [100, 100, 50]
    b = opt.solve("random", problem, 250, seed=4, batch_size=100)
    np.testing.assert_array_equal(a.placement, b.placement)
    assert a.value == b.value


def test_warm_start_never_loses_the_seed():
    problem = small_problem(seed=5)
    rr = opt.round_robin(problem)
    sol = opt.solve("brkga", problem, 40, seed=0, population_size=20, initial=rr)
    assert sol.value <= rr.value
    other = opt.Problem(generate("random", problem.graph.num_nodes + 3, 1), DeviceSpec(3))
    for method, options in (("brkga", {"population_size": 20}), ("local-search", {}),
                            ("cpsat-lns", {"time_limit": 1})):
        with pytest.raises(ValueError, match="initial: solution 0 places"):
            opt.solve(method, problem, 40, seed=0, initial=opt.round_robin(other), **options)


def test_solve_rescores_a_method_that_lies():
    problem = small_problem(seed=6)

    def liar(problem, budget, seed, **options):
        honest = opt.single_device(problem)
        return opt.Solution(**{**honest.__dict__, "value": 1.0, "evaluations": 7})

    opt.register("liar", liar)
    try:
        sol = opt.solve("liar", problem, 10, seed=0, progress=lambda *a: None)
    finally:
        del opt.METHODS["liar"]
    assert sol.value == opt.single_device(problem).value != 1.0
    assert sol.extra["reported_value"] == 1.0 and sol.evaluations == 7


def test_registry_lazy_import_and_unknown_names():
    opt.register("lazy-random", "regal.optimizers:solve_random")
    try:
        assert opt.get_method("lazy-random") is opt.solve_random
    finally:
        del opt.METHODS["lazy-random"]
    opt.register("missing", "no_such_module_xyz:solve")
    try:
        with pytest.raises(ValueError, match="missing"):
            opt.get_method("missing")
    finally:
        del opt.METHODS["missing"]
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        opt.solve("nope", small_problem(), 10, 0)


@pytest.mark.parametrize("method", ["random", "brkga", "local-search", "regal", "m-topo"])
def test_solve_checks_budget_seed_and_options_for_every_method(method):
    """One check in `solve`, whatever the method: a budget that is no whole number >= 1, a
    seed that is no integer >= 0, or an option the method does not take is a ValueError
    that names it (not a numpy TypeError, nor a truncated budget)."""
    problem = small_problem()
    for budget in ("100", 1.5, float("nan"), float("inf"), True, 0, -3):
        with pytest.raises(ValueError, match="budget must be a positive integer"):
            opt.solve(method, problem, budget, 0)
    for seed in (-1, None, 1.5, "0"):
        with pytest.raises(ValueError, match="seed must be an integer >= 0"):
            opt.solve(method, problem, 200, seed)
    with pytest.raises(ValueError, match=f"method '{method}' takes no option 'timelimit'"):
        opt.solve(method, problem, 200, 0, timelimit=1)
    assert opt.solve(method, problem, 200.0, np.int64(0)).value == \
        opt.solve(method, problem, 200, 0).value


def test_problem_validation():
    g = generate("random", 10, 0)
    with pytest.raises(ValueError, match="graph: expected a ComputationGraph"):
        opt.Problem("g.npz", 2)    # a path where the graph goes
    with pytest.raises(ValueError, match="problem: expected a regal.optimizers.Problem"):
        opt.solve("brkga", g, 200, 0)
    with pytest.raises(ValueError, match="objective"):
        opt.Problem(g, DeviceSpec(2), "latency")
    assert opt.Problem(g, 3).devices == DeviceSpec(3)


def test_trivial_placements():
    problem = small_problem(d=4, seed=7)
    one, rr = opt.single_device(problem), opt.round_robin(problem)
    assert (one.placement == 0).all() and one.peak[1:].sum() == 0
    topo = problem.graph.topo_order
    assert rr.placement[topo].tolist() == [i % 4 for i in range(len(topo))]
    # topological priorities: earlier ops first
    assert (np.diff(one.priority[topo]) < 0).all()


def test_solution_json_round_trip_and_keys():
    problem = small_problem(seed=8)
    sol = opt.solve("random", problem, 30, seed=2)
    back = opt.Solution.from_json(sol.to_json())
    for name in ("placement", "priority", "transfer_priority", "peak"):
        np.testing.assert_array_equal(getattr(back, name), getattr(sol, name))
    assert (back.value, back.method, back.seed, back.evaluations) == \
        (sol.value, sol.method, sol.seed, sol.evaluations)
    placement, priority, transfer = decode(sol.keys(), problem.graph, problem.devices)
    np.testing.assert_array_equal(placement, sol.placement)
    np.testing.assert_array_equal(priority, sol.priority)
    # a run over limits of 0 has an infinite value: standard JSON ("Infinity"), read back
    over = opt.Problem(problem.graph, DeviceSpec(2, memory_limit=0), "makespan")
    misfit = opt.solve("random", over, 30, seed=2)
    text = misfit.to_json()
    assert not misfit.feasible and "Infinity" in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} in JSON"))
    back = opt.Solution.from_json(text)
    assert back.value == misfit.value and back.makespan == misfit.makespan


def test_solution_record_orders_match_the_trace():
    problem = small_problem(seed=9)
    sol = opt.solve("random", problem, 30, seed=0)
    rec = opt.solution_record(problem, sol, 30, source="x")
    tr = trace(problem.graph, problem.devices, sol.placement, sol.priority,
               sol.transfer_priority)
    for k in range(3):
        ops = [v for v, name in enumerate(problem.graph.names) if rec["ops"][name]["device"] == k]
        by_order = sorted(ops, key=lambda v: rec["ops"][problem.graph.names[v]]["order"])
        assert [rec["ops"][problem.graph.names[v]]["order"] for v in by_order] == \
            list(range(len(ops)))
        assert (np.diff(tr.op_start[by_order]) >= 0).all()
    again = opt.read_solution(json.loads(json.dumps(rec)), problem)
    assert again.value == sol.value
    other = opt.Problem(generate("random", 40, 10), problem.devices)
    with pytest.raises(ValueError, match="fingerprint"):
        opt.read_solution(rec, other)


# -- the command ---------------------------------------------------------------

@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    from regal.io import save_graph
    path = tmp_path_factory.mktemp("g") / "cnn.npz"
    save_graph(generate("cnn", 60, 1), path)
    return path


def test_cli_optimize_end_to_end(graph_file, tmp_path, capsys):
    out, png = tmp_path / "solution.json", tmp_path / "m.png"
    code = main(["optimize", str(graph_file), "--devices", "3", "--budget", "150",
                 "--seed", "2", "--out", str(out), "--plot", str(png)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "device 2: peak" in printed and "step time" in printed and "feasible: yes" in printed
    assert "vs one device" in printed and "improvement over round-robin" in printed
    rec = json.loads(out.read_text())
    # the printed figures are the simulator's, in human units (rounded to 2 decimals)
    from regal.units import parse_bytes, parse_duration_us
    step = re.search(r"^step time (\S+ \S+) \(", printed, flags=re.M).group(1)
    assert parse_duration_us(step) == pytest.approx(rec["result"]["makespan"], rel=5e-3,
                                                    abs=0.05)
    peak = re.search(r"^peak memory (\S+ \S+) \(", printed, flags=re.M).group(1)
    assert parse_bytes(peak) == pytest.approx(max(rec["result"]["peak"]), rel=5e-3, abs=0.5)
    from regal.io import load_graph
    graph = load_graph(graph_file)
    assert rec["graph"]["fingerprint"] == graph.fingerprint()
    assert (rec["budget"], rec["seed"], rec["objective"], rec["method"]) == \
        (150, 2, "peak_memory", "local-search")  # the default method
    assert rec["devices"]["count"] == 3 and rec["regal_version"]
    assert set(rec["ops"]) == set(graph.names.tolist())
    assert {e["device"] for e in rec["ops"].values()} <= {0, 1, 2}
    problem = opt.Problem(graph, DeviceSpec(3))
    assert opt.read_solution(rec, problem).value == rec["result"]["value"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _summary_figures(lines: list[str]) -> dict:
    """{'peak memory' | 'step time': (figure, change %, reference figure)} from `describe`."""
    out = {}
    for line in lines:
        m = re.fullmatch(r"(peak memory|step time) (\S+ \S+) \(([+-][\d.]+)% vs one device "
                         r"(\S+ \S+)\)", line)
        if m:
            out[m.group(1)] = (m.group(2), float(m.group(3)), m.group(4))
    return out


@pytest.mark.parametrize("objective, spec", [("peak_memory", {}),
                                             ("makespan", {"memory_limit": 2**40})])
def test_describe_step_time_and_peak_beside_one_device(objective, spec):
    """The summary's peak and step time are the simulator's figures for the solution and for
    everything on one device (simulated here independently), in human units, and the change
    printed is (solution - one device) / one device within the rounding."""
    from regal.units import format_bytes, parse_bytes, parse_duration_us

    problem = opt.Problem(generate("cnn", 120, 3), DeviceSpec(3, **spec), objective)
    sol = opt.solve("brkga", problem, 200, seed=1)
    one = opt.one_device(problem)
    lines = opt.describe(problem, sol, opt.reference_solutions(problem))
    figures = _summary_figures(lines)
    assert set(figures) == {"peak memory", "step time"}, lines
    # the objective's figure comes first
    first = next(line for line in lines if line.startswith(("peak memory", "step time")))
    assert first.startswith("peak memory" if objective == "peak_memory" else "step time")

    _, res = simulated_value(problem, sol)
    placement_one = np.zeros(problem.graph.num_nodes, dtype=np.int32)
    res_one = simulate(problem.graph, problem.devices, placement_one, one.priority,
                       one.transfer_priority)
    for name, mine, ref, parse in (
            ("peak memory", res.peak.max(), res_one.peak.max(), parse_bytes),
            ("step time", res.makespan, res_one.makespan, parse_duration_us)):
        text, change, ref_text = figures[name]
        assert parse(text) == pytest.approx(mine, rel=5e-3, abs=0.5), name
        assert parse(ref_text) == pytest.approx(ref, rel=5e-3, abs=0.5), name
        assert change == pytest.approx((mine - ref) / ref * 100, abs=0.051), name
    assert not any(line.startswith("one device:") for line in lines)  # it fits
    for k, peak in enumerate(res.peak):
        assert any(re.match(rf"  device {k}: peak {re.escape(format_bytes(peak))}", line)
                   for line in lines), (k, lines)
    assert lines[0].startswith(f"method brkga, seed 1: {sol.evaluations:,} evaluations")


def test_describe_notes_a_one_device_reference_over_its_limit():
    """Under a limit one device cannot meet, the summary says that the one-device figure is
    over the largest device's limit, on a line of its own, and the answer's figures are not
    marked (they fit); no ranking penalty is printed as a time."""
    from regal.units import format_bytes

    problem = opt.Problem(generate("cnn", 60, 0), DeviceSpec(2), "makespan")
    need = int(opt.one_device(problem).peak.max())
    problem = opt.Problem(problem.graph, DeviceSpec(2, memory_limit=[need - 2, need - 1]),
                          "makespan")
    one = opt.one_device(problem)
    assert not one.feasible and one.makespan == pytest.approx(problem.graph.compute_cost.sum())
    sol = opt.solve("brkga", problem, 100, seed=0)
    assert sol.feasible
    lines = opt.describe(problem, sol, opt.reference_solutions(problem))
    assert (f"one device: the whole graph needs {format_bytes(need)}, over the largest "
            f"device's {format_bytes(need - 1)} limit") in "\n".join(lines)
    assert "feasible: yes" in lines and not any("OVER" in line for line in lines)
    figures = _summary_figures(lines)
    assert set(figures) == {"peak memory", "step time"}
    # every time printed is a schedule's makespan, never the penalised objective
    assert all(str(round(one.value)) not in line for line in lines)


def test_describe_names_the_device_over_its_limit():
    """An answer over a limit: the summary names the device, by how much, and its limit."""
    from regal.units import format_bytes

    graph = generate("cnn", 60, 0)
    free = opt.solve("m-topo", opt.Problem(graph, DeviceSpec(2)), 1)
    limits = [int(free.peak[0]) - 1000, 10 * int(free.peak.max())]
    problem = opt.Problem(graph, DeviceSpec(2, memory_limit=limits))
    sol = opt.solve("m-topo", problem, 1)   # the limit-free answer only: over on device 0
    assert not sol.feasible
    lines = opt.describe(problem, sol, opt.reference_solutions(problem))
    assert f"  device 0: peak {format_bytes(sol.peak[0])} / limit {format_bytes(limits[0])}, " \
        f"OVER by {format_bytes(1000)}" in "\n".join(lines)
    assert any(line.startswith(f"feasible: NO - device 0 is {format_bytes(1000)} over its "
                               f"{format_bytes(limits[0])} limit") for line in lines)
    # the peak printed is the device's peak, not the ranking value (above the largest limit)
    assert sol.value > max(limits)
    assert f"peak memory {format_bytes(sol.peak.max())}" in "\n".join(lines)


def test_cli_impossible_memory_limit_exits_3(tmp_path, capsys):
    from regal.io import save_graph
    b = GraphBuilder()
    for i in range(3):
        v = b.add_op(f"w{i}", 1.0, persistent_memory=1000)
        b.add_output(v, 10)
    path = tmp_path / "big.npz"
    save_graph(b.build(), path)
    code = main(["optimize", str(path), "--devices", "2", "--memory-limit", "900",
                 "--budget", "100", "--objective", "makespan", "--out", str(tmp_path / "s.json")])
    assert code == 3
    printed = capsys.readouterr().out
    assert "feasible: NO" in printed and "smallest overflow found" in printed
    rec = json.loads((tmp_path / "s.json").read_text())
    assert rec["result"]["feasible"] is False and rec["result"]["overflow"] > 0


@pytest.mark.parametrize("args", [
    ["--devices", "2", "--memory-limit", "12XB"],
    ["--devices", "two"],
    ["--devices", "2", "--objective", "latency"],
])
def test_cli_bad_arguments_exit_2(graph_file, args):
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(graph_file), *args])
    assert exc.value.code == 2


@pytest.mark.parametrize("args, message", [
    (["--devices", "0"], "count"),
    (["--devices", "2", "--method", "brkga", "--budget", "50"], "budget"),
    (["--devices", "2", "--method", "nope"], "unknown method"),
])
def test_cli_user_errors_exit_2(graph_file, args, message, capsys):
    assert main(["optimize", str(graph_file), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_missing_file_exits_2(tmp_path):
    assert main(["optimize", str(tmp_path / "none.npz"), "--devices", "2"]) == 2


def test_one_device_yardstick_ignores_pins_and_takes_the_roomiest_device():
    """Item 12 of issue 36: the one-device figures are the whole graph on one device, the
    same with or without the user's pins, and judged against the largest device's limit."""
    from regal.constraints import with_constraints

    graph = generate("cnn", 60, 0)
    plain = opt.one_device(opt.Problem(graph, DeviceSpec(2)))
    name = str(graph.names[graph.topo_order[-1]])
    pinned = with_constraints(graph, pins={name: 1}, num_devices=2)
    got = opt.one_device(opt.Problem(pinned, DeviceSpec(2)))
    assert np.array_equal(got.peak, plain.peak) and got.makespan == plain.makespan
    assert got.makespan == pytest.approx(graph.compute_cost.sum())
    need = int(plain.peak.max())
    assert opt.one_device(opt.Problem(graph, DeviceSpec(2, [0, need]))).feasible
    assert opt.one_device(opt.Problem(graph, DeviceSpec(2, [need, need - 1]))).feasible
    assert not opt.one_device(opt.Problem(graph, DeviceSpec(2, [need - 1, need - 1]))).feasible
    # the trivial method puts everything on the roomiest device, pins kept
    single = opt.single_device(opt.Problem(pinned, DeviceSpec(2, [need // 2, 2 * need])))
    assert (single.placement == 1).all()
