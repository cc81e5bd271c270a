"""Device speeds (issue 40, item 2): per-device compute speed and memory bandwidth, the
presets, the simulator's per-device op times, m-ETF, the CLI flags and the solution file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from regal.graph_builder import GraphBuilder
from regal.io import load_graph
from regal.io.native import read_native, write_native
from regal.io.solution import check_solution_record, solution_devices
from regal.optimizers import Problem, solution_record, solve
from regal.sim import DeviceSpec, evaluate, infeasible_offset, simulate, trace
from regal.sim.speeds import (BYTES_PER_US, FLOPS_PER_US, LAUNCH_US, PRESETS, fastest_device,
                              op_durations, preset)
from helpers import random_graph, refused

REPO = Path(__file__).resolve().parent.parent
from sim_reference import reference_simulate


def counted(flops, nbytes, sizes=None, chain=True):
    """A chain (or independent ops) whose compute costs are the cost model's at the
    reference speeds, with the counts kept, as the TensorFlow importer makes them."""
    b = GraphBuilder()
    for v, (f, m) in enumerate(zip(flops, nbytes)):
        b.add_op(f"op{v}", 0.0 if f == m == 0 else LAUNCH_US + max(f / FLOPS_PER_US,
                                                                   m / BYTES_PER_US))
        b.add_output(v, 100 if sizes is None else sizes[v])
        if chain and v:
            b.add_input(v, v - 1, 0)
        b.set_counts(v, f, m)
    return b.build()


def with_counts(graph, rng):
    """`graph` with random counts and the compute costs they give at the reference speeds."""
    n = graph.num_nodes
    flops = np.rint(rng.uniform(0, 5e8, n))
    nbytes = np.rint(rng.uniform(0, 2e7, n))
    free = rng.random(n) < 0.2
    cost = np.where(free, 0.0, LAUNCH_US + np.maximum(flops / FLOPS_PER_US,
                                                      nbytes / BYTES_PER_US))
    return graph._replace(compute_cost=cost, op_flops=flops, op_bytes=nbytes)


# ---------------------------------------------------------------------------
# the simulator


def test_chain_on_two_devices_by_hand():
    # op times at 10 / 20 TFLOP/s (bytes take 2 us everywhere): op0 11 | 6, op1 21 | 11,
    # op2 31 | 16; one 100-byte copy takes 5 + 100 / 1e5 = 5.001 us
    g = counted([1e8, 2e8, 3e8], [1e6] * 3)
    spec = DeviceSpec(2, flops=[1e7, 2e7])
    tr = trace(g, spec, [0, 1, 1], [0, 0, 0], [0, 0, 0])
    assert tr.op_start.tolist() == [0.0, 16.001, 27.001]
    assert tr.op_end.tolist() == [11.0, 27.001, 27.001 + 16]
    assert simulate(g, spec, [1, 1, 1], [0] * 3, [0] * 3).makespan == 6 + 11 + 16
    assert simulate(g, spec, [0, 0, 0], [0] * 3, [0] * 3).makespan == 11 + 21 + 31
    # memory-bound: 1e7 bytes at 500 vs 1000 GB/s
    g = counted([0.0, 1.0], [1e7, 1e7])
    spec = DeviceSpec(2, memory_bandwidth=[5e5, 1e6])
    assert simulate(g, spec, [1, 1], [0, 0], [0, 0]).makespan == 2 * 11.0
    assert simulate(g, spec, [0, 0], [0, 0], [0, 0]).makespan == 2 * 21.0


def test_free_ops_stay_free_and_counts_are_required():
    g = counted([0.0, 1e8], [0.0, 0.0])
    assert op_durations(g, DeviceSpec(2, flops=[1e6, 1e9]))[:, 0].tolist() == [0.0, 0.0]
    bare = g._replace(op_flops=None, op_bytes=None)
    assert op_durations(bare, DeviceSpec(2)) is None
    with pytest.raises(ValueError, match="FLOP and byte counts"):
        simulate(bare, DeviceSpec(2, flops=1e7), [0, 1], [0, 0], [0, 0])


@pytest.mark.parametrize("seed", range(12))
def test_reference_speeds_are_bit_identical_to_no_speeds(seed):
    """Explicit reference speeds take the per-device path and give today's answers bit for
    bit (peaks, makespans, objectives) on random graphs and chromosomes."""
    rng = np.random.default_rng(seed)
    graph = with_counts(random_graph(rng), rng)
    d = int(rng.integers(1, 5))
    keys = rng.random((16, graph.num_nodes * (d + 2)))
    keys[::2] = np.round(keys[::2], 1)  # ties
    plain = evaluate(graph, DeviceSpec(d), keys, "makespan", return_details=True)
    for spec in (DeviceSpec(d, flops=FLOPS_PER_US), DeviceSpec(d, memory_bandwidth=BYTES_PER_US),
                 DeviceSpec(d, flops=[FLOPS_PER_US] * d, memory_bandwidth=BYTES_PER_US)):
        same = evaluate(graph, spec, keys, "makespan", return_details=True)
        for a, b in zip(plain, same):
            assert np.array_equal(a, b)
        assert infeasible_offset(graph, spec) == infeasible_offset(graph, DeviceSpec(d))


@pytest.mark.parametrize("seed", range(20))
def test_kernel_agrees_with_the_reference_under_speeds(seed):
    rng = np.random.default_rng(100 + seed)
    graph = with_counts(random_graph(rng), rng)
    d = int(rng.integers(1, 5))
    spec = DeviceSpec(d, bandwidth=float(rng.uniform(1e3, 1e5)), latency=1.0,
                      flops=rng.uniform(2e6, 5e7, d).tolist(),
                      memory_bandwidth=rng.uniform(1e5, 2e6, d).tolist())
    n = graph.num_nodes
    placement = rng.integers(0, d, n)
    priority, transfer = rng.random(n), rng.random(n)
    got = simulate(graph, spec, placement, priority, transfer)
    want = reference_simulate(graph, d, None, spec.bandwidth, spec.latency, placement,
                              priority, transfer, durations=op_durations(graph, spec))
    assert got.peak.tolist() == want["peak"]
    assert got.makespan == want["makespan"]
    assert got.makespan <= infeasible_offset(graph, spec)


# ---------------------------------------------------------------------------
# DeviceSpec, presets


def test_device_spec_checks_and_normalises_speeds():
    spec = DeviceSpec(3, flops=2e7)
    assert spec.flops == (2e7,) * 3 and spec.memory_bandwidth is None and spec.has_speeds
    assert not DeviceSpec(3).has_speeds
    assert DeviceSpec(2, flops=[1, 2], presets=["A"]) == DeviceSpec(2, flops=[1.0, 2.0])
    assert hash(DeviceSpec(2, flops=1e7)) == hash(DeviceSpec(2, flops=[1e7, 1e7]))
    for bad, match in (({"flops": [1, 2, 3]}, "one value per device"),
                       ({"flops": 0}, "flops: device 0"), ({"memory_bandwidth": -1}, "> 0"),
                       ({"flops": [1, float("nan")]}, "device 1"), ({"flops": True}, "> 0")):
        with pytest.raises(ValueError, match=match):
            DeviceSpec(2, **bad)
    grown = DeviceSpec(2, memory_limit=5, flops=[3e7, 1e7], presets=["x", "y"]).with_count(4, 7)
    assert grown.flops == (3e7, 1e7, 1e7, 1e7) and grown.memory_limit == (7,) * 4
    assert grown.presets is None and DeviceSpec(2).with_count(3).flops is None


def test_presets_follow_the_datasheet_convention():
    assert preset("V100").flops == FLOPS_PER_US and preset("v100").memory_bandwidth == BYTES_PER_US
    assert preset("h100 sxm") is PRESETS["H100-SXM"] is preset("H100_SXM")
    assert 6 <= len(PRESETS) <= 12
    for p in PRESETS.values():
        assert p.flops > 0 and p.memory_bandwidth > 0
        assert p.flops / FLOPS_PER_US == pytest.approx(p.peak_tflops / 15.7)
        assert p.memory_bandwidth / BYTES_PER_US == pytest.approx(p.peak_gbps / 900)
    assert PRESETS["H100-SXM"].flops > PRESETS["A100-80GB"].flops > PRESETS["T4"].flops
    assert PRESETS["A100-80GB"].memory_bandwidth > PRESETS["A100-40GB"].memory_bandwidth
    with pytest.raises(ValueError, match="known: V100"):
        preset("K80")


def test_fastest_device_is_the_least_total_time():
    g = counted([1e8, 2e8], [1e6, 1e6])
    assert fastest_device(g, DeviceSpec(3)) == 0
    assert fastest_device(g, DeviceSpec(3, flops=[1e7, 4e7, 4e7])) == 1


# ---------------------------------------------------------------------------
# m-ETF


def test_m_etf_puts_ops_on_the_faster_free_device():
    g = counted([1e9, 1e9], [0.0, 0.0], chain=False)
    slow_first = Problem(g, DeviceSpec(2, flops=[1e7, 1e8]), "makespan")
    found = solve("m-etf", slow_first, 10, 0)
    # op0 on the 10x faster device 1 (11 us, not 101); op1 then finishes sooner there too
    # (11 + 11 = 22 < 101)
    assert found.placement.tolist() == [1, 1] and found.makespan == 22.0
    same = solve("m-etf", Problem(g, DeviceSpec(2), "makespan"), 10, 0)
    assert same.placement.tolist() == [0, 1]


# ---------------------------------------------------------------------------
# graph files and solution files


def test_counts_survive_the_graph_file_and_leave_the_fingerprint(tmp_path):
    g = counted([1e8, 0.0, 5.0], [1e6, 0.0, 7.0])
    bare = g._replace(op_flops=None, op_bytes=None)
    assert g.fingerprint() == bare.fingerprint()
    write_native(g, tmp_path / "g.npz")
    back = read_native(tmp_path / "g.npz")
    assert back.equals(g) and back.op_flops.tolist() == [1e8, 0.0, 5.0]
    write_native(bare, tmp_path / "bare.npz")
    back = read_native(tmp_path / "bare.npz")
    assert back.op_flops is None and back.op_bytes is None and back.equals(bare)
    assert not back.equals(g)


def test_solution_file_records_speeds_and_reads_old_files():
    g = counted([1e8, 2e8, 3e8], [1e6] * 3)
    spec = DeviceSpec(2, flops=[PRESETS["T4"].flops, PRESETS["H100-SXM"].flops],
                      memory_bandwidth=[PRESETS["T4"].memory_bandwidth,
                                        PRESETS["H100-SXM"].memory_bandwidth],
                      presets=["T4", "H100-SXM"])
    problem = Problem(g, spec, "makespan")
    solution = solve("m-etf", problem, 10, 0)
    record = json.loads(json.dumps(solution_record(problem, solution, 10)))
    assert record["devices"]["presets"] == ["T4", "H100-SXM"]
    check_solution_record(record)
    back = solution_devices(record)
    assert back == spec and back.presets == ("T4", "H100-SXM")
    assert solution_devices(record, 3).flops == spec.flops + (min(spec.flops),)
    plain = solution_record(Problem(g, DeviceSpec(2), "makespan"), solution, 10)
    assert not {"flops", "memory_bandwidth", "presets"} & set(plain["devices"])
    assert not solution_devices(plain).has_speeds
    record["devices"]["flops"] = [1.0]
    with pytest.raises(ValueError, match="'flops'"):
        check_solution_record(record)


# ---------------------------------------------------------------------------
# the command line


def test_optimize_takes_presets_and_speeds(tmp_path, capsys):
    from regal.cli import main

    path = tmp_path / "g.npz"
    write_native(counted([1e8, 2e8, 3e8, 4e8], [1e6] * 4, chain=False), path)
    out = tmp_path / "s.json"
    code = main(["optimize", str(path), "--devices", "2", "--budget", "50", "--objective",
                 "makespan", "--device-preset", "t4,H100-SXM", "--device-bandwidth", "800",
                 "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "device speeds: 0: T4" in text
    assert "vs one device (the fastest, device 1)" in text
    devices = json.loads(out.read_text())["devices"]
    assert devices["presets"] == ["T4", "H100-SXM"]
    assert devices["memory_bandwidth"] == [8e5, 8e5]
    assert devices["flops"] == [PRESETS["T4"].flops, PRESETS["H100-SXM"].flops]
    assert load_graph(str(path)).op_flops is not None


@pytest.mark.parametrize("flags, needle", [
    (["--device-preset", "K80"], "K80"),
    (["--device-preset", "V100,T4,L4"], "--device-preset"),
    (["--device-flops", "1,2,3"], "--device-flops"),
    (["--device-flops", "0"], "--device-flops"),
    (["--device-bandwidth", "-5"], "--device-bandwidth"),
    (["--device-bandwidth", "nan"], "--device-bandwidth"),
])
def test_bad_speeds_exit_2_naming_the_flag(tmp_path, capsys, flags, needle):
    path = tmp_path / "g.npz"
    write_native(counted([1e8, 2e8], [1e6] * 2), path)
    refused(["optimize", str(path), "--devices", "2", "--budget", "10", *flags], capsys, needle)


def test_speeds_on_a_graph_without_counts_exit_2_naming_it(tmp_path, capsys):
    path = tmp_path / "bare.npz"
    write_native(counted([1e8, 2e8], [1e6] * 2)._replace(op_flops=None, op_bytes=None), path)
    err = refused(["optimize", str(path), "--devices", "2", "--budget", "10",
                   "--device-preset", "A100-80GB"], capsys, str(path))
    assert "import it from the TensorFlow model again" in err


def test_the_shipped_real_graphs_keep_their_counts():
    """data/real was imported with the counts: at the reference speeds they give each op's
    compute_cost again, and a faster device runs the graph sooner."""
    from regal.optimizers import Problem, one_device

    graph = load_graph(str(REPO / "data" / "real" / "mobilenetv2_train_b1.npz"))
    assert graph.op_flops is not None
    durations = op_durations(graph, DeviceSpec(2, flops=FLOPS_PER_US,
                                               memory_bandwidth=BYTES_PER_US))
    assert np.allclose(durations, graph.compute_cost[None, :], rtol=1e-12, atol=1e-9)
    slow = one_device(Problem(graph, DeviceSpec(1), "makespan"))
    fast = one_device(Problem(graph, DeviceSpec(2, flops=[FLOPS_PER_US, 4 * FLOPS_PER_US],
                                                memory_bandwidth=[BYTES_PER_US, 4 * BYTES_PER_US]),
                              "makespan"))
    assert fast.extra["fastest_device"] == 1 and fast.makespan < slow.makespan


def test_the_reference_cache_tells_graphs_apart_by_their_counts_under_speeds():
    """Two graphs alike but for their op counts share a fingerprint (it leaves the counts
    out), yet on devices with speeds their op times differ: the policy's reference solution
    is cached per counts there, so each gets its own (the one `compute_reference` gives)."""
    from regal.policy.reference import compute_reference, reference_for

    rng = np.random.default_rng(3)
    g = with_counts(random_graph(rng, 12), rng)
    g2 = g._replace(op_flops=g.op_flops * 50)
    assert g.fingerprint() == g2.fingerprint()
    spec = DeviceSpec(2, flops=[1e7, 2e6])
    first = reference_for(g, spec, "makespan")
    second = reference_for(g2, spec, "makespan")
    assert second.value == compute_reference(Problem(g2, spec, "makespan")).value
    assert second.value != first.value
    assert reference_for(g, spec, "makespan") is first   # the same graph: cached
