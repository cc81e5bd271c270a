"""`regal optimize` over its memory limits: the smallest device count that fits
(`regal.fit_search`), proven impossible counts, exit code 3; and the layer-split comparison."""

from regal.bounds import lower_bound
from regal.cli import main
from regal.fit_search import describe_fit, fit_cap, smallest_device_count
from regal.graph_builder import GraphBuilder
from regal.io import save_graph
from regal.optimizers import Problem
from regal.sim import DeviceSpec
from regal.units import format_bytes

LIMIT = 1500


def three_weights(huge: int = 0):
    """Three independent ops, each 1000 bytes of persistent memory and a 10-byte output that
    no op reads (never freed): 3,030 bytes on one device, 1,010 per op. Two devices hold two
    of them on one device (2,020 > LIMIT, proven by the packing bound); three hold 1,010 each.
    `huge`: a fourth op with that much persistent memory."""
    b = GraphBuilder()
    for i in range(3):
        v = b.add_op(f"w{i}", 1.0, persistent_memory=1000)
        b.add_output(v, 10)
    if huge:
        v = b.add_op("huge", 1.0, persistent_memory=huge)
        b.add_output(v, 10)
    return b.build()


def run(tmp_path, capsys, graph, devices, limit=str(LIMIT), *extra):
    path = tmp_path / "g.npz"
    save_graph(graph, path)
    code = main(["optimize", str(path), "--devices", str(devices), "--memory-limit", limit,
                 "--budget", "200", "--objective", "makespan", *extra])
    return code, capsys.readouterr().out


def test_the_bound_proves_two_devices_short_and_three_fit():
    graph = three_weights()
    assert lower_bound(graph, 2).value == 2020 > LIMIT >= lower_bound(graph, 3).value == 1010
    fit = smallest_device_count(Problem(graph, DeviceSpec(2, memory_limit=LIMIT), "makespan"))
    assert [(t.count, t.outcome) for t in fit.tried] == [(2, "proven"), (3, "fits")]
    assert fit.found.count == 3
    assert fit.found.solution.feasible and max(fit.found.solution.peak) == 1010
    assert fit_cap(2) == 8 and fit_cap(1) == 4 and fit_cap(16) == 64 and fit_cap(100) == 101


def test_cli_over_the_limit_names_the_smallest_count_and_exits_3(tmp_path, capsys):
    code, out = run(tmp_path, capsys, three_weights(), 2)
    assert code == 3
    assert "feasible: NO" in out
    lines = out.splitlines()
    assert any(line.startswith("smallest device count found that fits: 3 (") for line in lines)
    assert (f"2 devices provably cannot fit (lower bound {format_bytes(2020)} > "
            f"{format_bytes(LIMIT)})") in lines
    # layer-split cannot fit either: it says by how much
    assert any(line.startswith("layer-split does not fit: device ") and
               f"over its {format_bytes(LIMIT)} limit" in line for line in lines), out
    # the search can be left out
    code, out = run(tmp_path, capsys, three_weights(), 2, str(LIMIT), "--no-fit-search")
    assert code == 3 and "feasible: NO" in out and "device count" not in out


def test_cli_fits_exit_0_with_the_layer_split_line(tmp_path, capsys):
    code, out = run(tmp_path, capsys, three_weights(), 3)
    assert code == 0
    assert "feasible: yes" in out and "device count" not in out
    line = next(line for line in out.splitlines() if "layer-split" in line)
    assert line.startswith("step time vs layer-split: ") and " (fits) -> " in line


def test_an_op_larger_than_the_limit_fits_no_count(tmp_path, capsys):
    code, out = run(tmp_path, capsys, three_weights(huge=5000), 2)
    assert code == 3
    line = next(line for line in out.splitlines() if line.startswith("no device count fits"))
    assert f"op 'huge' needs {format_bytes(5010)}" in line and format_bytes(LIMIT) in line
    assert "smallest device count found" not in out


def test_per_device_limits_extend_with_the_smallest(tmp_path, capsys):
    code, out = run(tmp_path, capsys, three_weights(), 2, "1500,1400")
    assert code == 3
    assert "smallest device count found that fits: 3 (" in out
    assert f"(each added device with the smallest limit given, {format_bytes(1400)})" in out
    # the added device has 1,400 bytes: still enough for one op (1,010)
    # with 1,000 bytes, no added device holds an op (1,010): nothing fits, none proven
    problem = Problem(three_weights(), DeviceSpec(2, memory_limit=[1500, 1000]), "makespan")
    fit = smallest_device_count(problem, 50, cap=4)
    assert fit.found is None and fit.too_large is None and not fit.timed_out
    assert fit.limit == 1500 and fit.added_limit == 1000
    assert [t.outcome for t in fit.tried] == ["proven", "not found", "not found"]
    lines = describe_fit(fit)
    assert lines[0] == "no device count up to 4 found that fits (local-search, at most 50 " \
        "evaluations each)"
    assert "3-4 devices: none found that fits (local-search, at most 50 evaluations each), " \
        "not proven impossible" in lines


def test_the_time_cap_is_said():
    fit = smallest_device_count(Problem(three_weights(), DeviceSpec(2, memory_limit=LIMIT)),
                                seconds=0)
    assert fit.timed_out and fit.found is None
    assert describe_fit(fit)[0] == "no device count searched before the 0 s cap of this search"


def test_the_count_asked_for_may_fit_when_the_users_search_missed_it():
    """The user's count is searched too (minimising peak memory): a fit there is said so."""
    fit = smallest_device_count(Problem(three_weights(), DeviceSpec(3, memory_limit=LIMIT),
                                        "makespan"))
    assert [(t.count, t.outcome) for t in fit.tried] == [(3, "fits")]
    lines = describe_fit(fit)
    assert lines[0].startswith("smallest device count found that fits: 3, the count asked for (")
    assert lines[1] == "the search above missed it: try a larger --budget, or " \
        "--objective peak_memory"


def test_optimize_certifies_its_answer_with_the_lower_bound(tmp_path, capsys):
    """Peak memory: the answer's distance to a valid lower bound bounds its distance to the
    optimum. Three ops of 1,010 bytes on three devices: the answer (1,010) meets the bound
    (the largest item), 'proven optimal'; on two devices the best answer holds two of them
    (2,020) and the packing bound proves it: proven optimal too; on one device with a
    budget too small to matter the line still names the bound and its argument."""
    path = tmp_path / "g.npz"
    save_graph(three_weights(), path)
    for devices in ("3", "2"):
        assert main(["optimize", str(path), "--devices", devices, "--budget", "200"]) == 0
        out = capsys.readouterr().out
        assert "certified: proven optimal (lower bound " in out, out
    # a real sample where the short search stays above the bound: the figure is the gap
    sample = "data/synth/samples/cnn_infer_40.npz"
    assert main(["optimize", sample, "--devices", "2", "--budget", "300"]) == 0
    out = capsys.readouterr().out
    from regal.io import load_graph
    from regal.optimizers import solve
    graph = load_graph(sample)
    value = solve("local-search", Problem(graph, DeviceSpec(2)), 300, 0).value
    bound = lower_bound(graph, 2)
    gap = 100 * (value - bound.value) / bound.value
    assert gap > 0
    assert f"certified: at most {gap:.2f}% above the optimum (lower bound " \
        f"{format_bytes(bound.value)}, argument {bound.source})" in out, out


def test_a_count_neither_fitted_nor_proven_points_to_regal():
    """When the user's count is searched without a fit and not proven impossible, the lines say
    that `--method regal` (which climbs to a fit first) may still fit it; not after a `regal`
    run, nor when the count is proven impossible."""
    import dataclasses
    from types import SimpleNamespace

    from regal.fit_search import FitSearch, Tried
    from regal.optimizers import solve
    from regal.summary import REGAL_FIT_HINT, describe

    problem = Problem(three_weights(), DeviceSpec(2, memory_limit=LIMIT), "makespan")
    answer = solve("local-search", problem, 50, 0)
    assert not answer.feasible

    def lines(solution, first):
        fit = FitSearch(devices=2, limit=LIMIT, added_limit=LIMIT, per_device=False, cap=3,
                        budget=50, seconds=60.0, tried=[first, Tried(3, "not found")])
        return describe(problem, solution, [], fit)

    assert REGAL_FIT_HINT in lines(answer, Tried(2, "not found"))
    assert REGAL_FIT_HINT in lines(answer, Tried(2, "cut short"))
    assert REGAL_FIT_HINT not in lines(dataclasses.replace(answer, method="regal"),
                                       Tried(2, "not found"))
    proven = Tried(2, "proven", bound=SimpleNamespace(value=2020))
    assert REGAL_FIT_HINT not in lines(answer, proven)
