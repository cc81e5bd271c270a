"""regal.bounds_time: the step-time bound is at most the optimum (brute force over placements
x orders on tiny graphs with control edges, groups and pins), at most every simulated step on
larger ones, and equal to the optimum where its proof says it must."""

import itertools

import numpy as np
import pytest

from regal import synth
from regal.bounds_time import step_time_bound
from regal.graph_builder import GraphBuilder
from regal.sim import DeviceSpec, evaluate, simulate
from test_bounds import _constrained_graph


def brute_force_step(graph, d: int) -> float:
    """min over every placement (honouring groups and pins) x op order x transfer order of the
    simulated step time."""
    n = graph.num_nodes
    orders = [np.asarray(p, dtype=np.float64) for p in itertools.permutations(range(n))]
    transfer_orders = orders if d > 1 else orders[:1]
    keys = []
    for placement in itertools.product(range(d), repeat=n):
        placement = np.asarray(placement)
        if (placement != placement[graph.colocation]).any():
            continue
        if ((graph.pinned >= 0) & (placement != graph.pinned)).any():
            continue
        affinity = np.eye(d)[placement].ravel()
        for order in orders:
            for transfer in transfer_orders:
                keys.append(np.concatenate([affinity, order, transfer]))
    return float(evaluate(graph, DeviceSpec(d), np.asarray(keys), "makespan", threads=1).min())


def test_the_bound_never_exceeds_the_optimum_of_tiny_graphs():
    """Control edges, colocation groups and pins, 1-3 devices (4 ops), 4 devices (3 ops); the
    bound is reached on many of them (it is not trivially low)."""
    rng = np.random.default_rng(7)
    reached = 0
    for i in range(60):
        d = [1, 2, 3, 4][i % 4]
        graph = _constrained_graph(rng, int(rng.integers(1, 5 if d <= 3 else 4)), d)
        optimum = brute_force_step(graph, d)
        bound = step_time_bound(graph, d)
        assert bound.value <= optimum, (i, d, bound, optimum)
        reached += bool(np.isclose(bound.value, optimum, rtol=1e-6))
    assert reached >= 20


@pytest.mark.parametrize("make, training", [
    (synth.random_dag, False), (synth.layered_cnn, True), (synth.transformer_like, True)])
def test_the_bound_never_exceeds_simulated_steps_of_larger_graphs(make, training):
    """Synthetic models (100 ops, training steps of them), 2 and 4 devices, with and without
    device speeds (ops given FLOP and byte counts, devices of two speeds): the bound is below
    the step of every random placement and order."""
    rng = np.random.default_rng(3)
    graph = make(100, rng)
    if training:
        graph = synth.training_graph(graph)
    n = graph.num_nodes
    counted = graph._replace(op_flops=np.rint(rng.uniform(0, 5e8, n)),
                             op_bytes=np.rint(rng.uniform(0, 2e7, n)))
    for d in (2, 4):
        for g, devices in ((graph, DeviceSpec(d)),
                           (counted, DeviceSpec(d, flops=[1e7, 3e7] * (d // 2)))):
            bound = step_time_bound(g, devices)
            keys = rng.random((300, n * (d + 2)))
            steps = evaluate(g, devices, keys, "makespan", threads=1)
            assert 0 < bound.value <= steps.min()


def _builder(costs):
    b = GraphBuilder()
    for v, cost in enumerate(costs):
        b.add_op(f"op{v}", float(cost))
    return b


def test_hand_cases_where_each_argument_is_the_optimum():
    # a chain 1 -> 2 -> 3: the critical path, 6 on any device count
    b = _builder([1, 2, 3])
    for v in range(2):
        b.add_output(v, 8)
        b.add_input(v + 1, v, 0)
    chain = b.build()
    for d in (1, 2, 3):
        bound = step_time_bound(chain, d)
        assert bound.source == "critical_path" and bound.value == pytest.approx(6.0)
        assert bound.value <= brute_force_step(chain, d)
    # four independent ops of cost 1 on 2 devices: the work, 2 (met: two on each)
    four = _builder([1, 1, 1, 1]).build()
    bound = step_time_bound(four, 2)
    assert bound.source == "work" and bound.value == pytest.approx(2.0)
    assert brute_force_step(four, 2) == pytest.approx(2.0)
    # a group of two ops of cost 3 and two free ops of cost 1 on 3 devices: the group, 6
    b = _builder([3, 3, 1, 1])
    b.colocate(0, 1)
    grouped = b.build()
    bound = step_time_bound(grouped, 3)
    assert bound.source == "one_device" and bound.value == pytest.approx(6.0)
    assert brute_force_step(grouped, 3) == pytest.approx(6.0)
    # two ops of cost 2 pinned to device 0 and two free ops of cost 1 on 2 devices: 4
    b = _builder([2, 2, 1, 1])
    b.pin(0, 0)
    b.pin(1, 0)
    pinned = b.build()
    bound = step_time_bound(pinned, 2)
    assert bound.source == "one_device" and bound.value == pytest.approx(4.0)
    assert brute_force_step(pinned, 2) == pytest.approx(4.0)


def test_the_bound_is_below_its_exact_value_by_a_rounding_slack_only():
    """A whole run of equal ops on one device: the simulator's step and the bound agree to the
    last few bits, the bound never above."""
    graph = _builder([0.1] * 30).build()
    bound = step_time_bound(graph, 1)
    order = np.arange(30, dtype=np.float64)
    step = simulate(graph, DeviceSpec(1), np.zeros(30, np.int32), order, order).makespan
    assert bound.value <= step and bound.value == pytest.approx(step, rel=1e-8)


def test_optimize_certifies_a_step_that_fits_and_not_one_over_a_limit(tmp_path, capsys):
    """`regal optimize --objective makespan`: four independent ops of cost 1 on 2 devices end
    at 2 us, the bound (work), so the answer is proven optimal; under a limit that nothing
    meets there is no step to certify."""
    from regal.cli import main
    from regal.io import save_graph

    b = _builder([1, 1, 1, 1])
    for v in range(4):
        b.add_output(v, 100)
    path = tmp_path / "four.npz"
    save_graph(b.build(), path)
    assert main(["optimize", str(path), "--devices", "2", "--objective", "makespan",
                 "--budget", "200"]) == 0
    printed = capsys.readouterr().out
    assert "certified: proven optimal (lower bound 2" in printed and "argument work" in printed
    assert main(["optimize", str(path), "--devices", "2", "--objective", "makespan",
                 "--budget", "200", "--memory-limit", "50", "--no-fit-search"]) == 3
    assert "certified" not in capsys.readouterr().out


def test_best_known_says_a_step_on_its_bound_is_proven_optimal(tmp_path):
    """The step-time bound sits a rounding slack below its exact value; `regal best-known`
    (the portfolio's line and `--bounds-only`'s) reads a best-known step on it as proven
    optimal, as `regal optimize` does: four independent ops of cost 1 on 2 devices end at
    2 us, the work bound."""
    import subprocess
    import sys

    from regal.io import save_graph

    b = _builder([1, 1, 1, 1])
    for v in range(4):
        b.add_output(v, 100)
    path = tmp_path / "four.npz"
    save_graph(b.build(), path)
    store = tmp_path / "store.jsonl"
    argv = [sys.executable, "-m", "regal.cli", "best-known", str(path), "--devices", "2",
            "--objective", "makespan", "--out", str(store)]
    for extra in (["--time-per-graph", "1"], ["--bounds-only", "--again"]):
        run = subprocess.run(argv + extra, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert "certified: proven optimal (lower bound 2" in run.stdout, run.stdout
        assert "above the optimum" not in run.stdout


def test_the_bounds_command_prints_the_step_time_bound(tmp_path, capsys):
    """`regal bounds --objective makespan`: the chain 1 -> 2 -> 3 at 2 devices, its argument
    and every argument's value; `--bytes` the number alone (µs)."""
    from regal.cli import main
    from regal.io import save_graph

    b = _builder([1, 2, 3])
    for v in range(2):
        b.add_output(v, 8)
        b.add_input(v + 1, v, 0)
    path = tmp_path / "chain.npz"
    save_graph(b.build(), path)
    assert main(["bounds", str(path), "--devices", "2", "--objective", "makespan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].endswith("[argument: critical_path]")
    assert "step time at least 6" in out[0]
    assert all(f"{name} " in out[1] for name in ("critical_path", "work", "one_device"))
    assert main(["bounds", str(path), "--devices", "2", "--objective", "makespan",
                 "--bytes"]) == 0
    from regal.io import load_graph
    assert float(capsys.readouterr().out.rsplit(" ", 1)[1]) == \
        step_time_bound(load_graph(path), 2).value
