"""Colocation groups and pins, end to end: the graph fields and their checks, the .npz format,
decoding (SIM_RULES 13), the simulator's rejection of a placement that breaks them, the
projection helper, user constraints by name/pattern, every method's answer, and the CLI."""

import io
import itertools

import numpy as np
import pytest

import regal.sim as sim
from regal.cli import main
from regal.constraints import with_constraints
from regal.decode import colocation_violation, decode, encode, respect_colocation
from regal.graph import GraphError, build_graph, group_leaders
from regal.graph_builder import GraphBuilder
from regal.io.native import graph_to_arrays, read_native, write_native
from regal.optimizers import Problem, Solution, round_robin, single_device, solve
from regal.sim import DeviceSpec
from helpers import random_graph
from sim_reference import reference_decode


def _chain(n=6, colocate=(), pins=None):
    """Ops a0 -> a1 -> ... (one 100-byte tensor each, op i holds i bytes of weights)."""
    b = GraphBuilder()
    for i in range(n):
        b.add_op(f"a{i}", 1.0 + i, persistent_memory=10 * i)
        b.add_output(i, 100)
        if i:
            b.add_input(i, i - 1)
    for x, y in colocate:
        b.colocate(x, y)
    for v, k in (pins or {}).items():
        b.pin(v, k)
    return b.build()


def _raw(n=4, **constraints):
    return dict(names=[f"op{i}" for i in range(n)], compute_cost=np.ones(n),
                tensor_producer=np.arange(n), tensor_size=np.full(n, 8),
                input_ptr=np.r_[0, np.arange(n)], input_tensor=np.arange(n - 1), **constraints)


def _components(n, pairs):
    """Connected components by repeated relaxation (an independent union-find check)."""
    label = list(range(n))
    changed = True
    while changed:
        changed = False
        for a, b in pairs:
            low = min(label[a], label[b])
            if label[a] != low or label[b] != low:
                label[a] = label[b] = low
                changed = True
    return label


# ---------------------------------------------------------------------------
# graph fields


def test_default_graph_has_no_constraints():
    g = _chain()
    assert g.colocation.tolist() == list(range(6)) and g.pinned.tolist() == [-1] * 6
    assert not g.constrained and g.groups() == {}


def test_builder_groups_are_canonical_and_pins_spread():
    g = _chain(colocate=[(4, 1), (1, 3)], pins={3: 1})
    assert g.colocation.tolist() == [0, 1, 2, 1, 1, 5]
    assert g.pinned.tolist() == [-1, 1, -1, 1, 1, -1]
    assert {k: v.tolist() for k, v in g.groups().items()} == {1: [1, 3, 4]}
    assert not g.colocation.flags.writeable and not g.pinned.flags.writeable


@pytest.mark.parametrize("seed", range(20))
def test_group_leaders_match_connected_components(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    pairs = [tuple(rng.integers(0, n, 2)) for _ in range(int(rng.integers(0, 2 * n)))]
    assert group_leaders(n, pairs).tolist() == _components(n, pairs)


@pytest.mark.parametrize("constraints, message", [
    (dict(colocation=[0, 2, 2, 3]), "op 'op1': colocation leader is op 'op2', which has a "
                                    "higher id"),
    (dict(colocation=[0, 0, 1, 3]), "op 'op2': colocation leader 'op1' is not in the group"),
    (dict(colocation=[0, -1, 2, 3]), "op 'op1': colocation leader is -1, not an op"),
    (dict(colocation=[0, 0, 2, 3], pinned=[0, 1, -1, -1]),
     "op 'op1': pinned to device 1, but its colocation group \\(leader 'op0'\\) is pinned "
     "to device 0"),
    (dict(colocation=[0, 0, 2, 3], pinned=[0, -1, -1, -1]), "op 'op1': pinned to device -1"),
    (dict(pinned=[-1, -2, -1, -1]), "op 'op1': pinned to device -2"),
    (dict(colocation=[0, 0, 2]), "field 'colocation': expected one value per op"),
])
def test_build_graph_rejects_bad_constraints(constraints, message):
    with pytest.raises(GraphError, match=message):
        build_graph(**_raw(**constraints))


def test_builder_rejects_one_group_on_two_devices():
    with pytest.raises(GraphError, match="op 'a4': pinned to device 0, but op 'a1' of the "
                                         "same colocation group"):
        _chain(colocate=[(1, 4)], pins={1: 1, 4: 0})


def test_fingerprint_changes_only_with_constraints():
    free = _chain()
    assert free.fingerprint() == _chain(colocate=[], pins={}).fingerprint()
    grouped = _chain(colocate=[(1, 2)])
    pinned = _chain(pins={2: 1})
    both = _chain(colocate=[(1, 2)], pins={2: 1})
    prints = {g.fingerprint() for g in (free, grouped, pinned, both)}
    assert len(prints) == 4


# ---------------------------------------------------------------------------
# .npz


def test_npz_round_trip_keeps_constraints(tmp_path):
    g = _chain(colocate=[(0, 5), (2, 3)], pins={3: 2})
    path = tmp_path / "g.npz"
    write_native(g, path)
    back = read_native(path)
    assert back.equals(g) and back.fingerprint() == g.fingerprint()


def test_a_costgraphdef_save_warns_of_what_it_drops(tmp_path, capsys):
    """A CostGraphDef keeps no groups nor pins: saving a graph that has them says so (and
    `regal import` prints it as one warning line); a graph without them saves quietly."""
    import warnings

    from regal.cli import main
    from regal.io import load_graph, save_graph
    g = _chain(colocate=[(0, 5)], pins={3: 1})
    with pytest.warns(UserWarning, match="keeps no colocation groups or pins"):
        save_graph(g, tmp_path / "g.pbtxt")
    back = load_graph(tmp_path / "g.pbtxt")
    assert not back.has_groups and not back.has_pins
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_graph(_chain(), tmp_path / "plain.pbtxt")
    write_native(g, tmp_path / "g.npz")
    assert main(["import", str(tmp_path / "g.npz"), "--out", str(tmp_path / "h.pb")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("regal: warning:") and err.count("\n") == 1 and "pins" in err


def test_npz_version_1_reads_without_constraints(tmp_path):
    g = _chain()
    arrays = graph_to_arrays(g)
    arrays["format_version"] = np.array(1)
    del arrays["colocation"], arrays["pinned"]
    path = tmp_path / "old.npz"
    np.savez(path, **arrays)
    back = read_native(path)
    assert back.equals(g) and not back.constrained


def test_npz_version_2_requires_the_constraint_arrays(tmp_path):
    arrays = graph_to_arrays(_chain())
    del arrays["pinned"]
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(GraphError, match="bad.npz: missing array 'pinned'"):
        read_native(path)


def test_npz_rejects_a_split_pin(tmp_path):
    arrays = graph_to_arrays(_chain(colocate=[(1, 2)]))
    arrays["pinned"] = np.array([-1, 0, 1, -1, -1, -1], np.int32)
    path = tmp_path / "split.npz"
    np.savez(path, **arrays)
    with pytest.raises(GraphError, match="split.npz: op 'a2': pinned to device 1, but its "
                                         "colocation group"):
        read_native(path)


# ---------------------------------------------------------------------------
# decoding


def test_decode_by_leader_row_and_pin_by_hand():
    # groups {0, 2} (leader 0) and {1, 3} pinned to device 0; op 4 free
    g = _chain(5, colocate=[(2, 0), (1, 3)], pins={3: 0})
    affinity = np.array([[0.1, 0.9],    # leader 0 -> device 1
                         [0.0, 1.0],    # pinned group: the pin wins over the keys
                         [0.9, 0.1],    # member of 0's group: ignored
                         [0.9, 0.0],
                         [0.7, 0.7]])   # free, a tie: the lower device
    keys = np.concatenate([affinity.ravel(), np.full(10, 0.5)])
    placement, _, _ = decode(keys, g, 2)
    assert placement.tolist() == [1, 0, 1, 0, 0]
    assert reference_decode(keys, 5, 2, g.colocation, g.pinned)[0] == [1, 0, 1, 0, 0]


def test_decode_of_unconstrained_graph_is_plain_argmax():
    rng = np.random.default_rng(1)
    g = random_graph(rng, num_ops=40)
    keys = rng.random((5, 40 * 5))
    placement, _, _ = decode(keys, g, 3)
    assert (placement == keys[:, :120].reshape(5, 40, 3).argmax(axis=2)).all()


def test_decode_rejects_pin_outside_devices():
    g = _chain(pins={2: 3})
    with pytest.raises(GraphError, match="op 'a2': pinned to device 3, outside 0..1"):
        decode(np.zeros(6 * 4), g, 2)
    with pytest.raises(GraphError, match="op 'a2': pinned to device 3, outside 0..2"):
        sim.evaluate(g, DeviceSpec(3), np.zeros((1, 6 * 5)))
    with pytest.raises(GraphError, match="pinned to device 3"):
        Problem(g, DeviceSpec(2))


def test_encode_gives_keys_that_decode_to_a_valid_placement():
    g = _chain(colocate=[(1, 2), (2, 5)], pins={0: 1})
    prio = np.linspace(0, 1, 6)
    good = np.array([1, 0, 0, 1, 0, 0])
    assert decode(encode(good, prio, prio, 2), g, 2)[0].tolist() == good.tolist()
    bad = np.array([0, 1, 0, 0, 0, 1])  # splits {1, 2, 5}, breaks the pin on 0
    placement = decode(encode(bad, prio, prio, 2), g, 2)[0]
    assert colocation_violation(g, placement) is None
    projected = decode(encode(bad, prio, prio, 2, graph=g), g, 2)[0]
    assert projected.tolist() == respect_colocation(g, bad).tolist()


# ---------------------------------------------------------------------------
# the simulator rejects a placement that breaks a group or a pin


def test_simulate_rejects_split_group_and_broken_pin():
    g = _chain(colocate=[(1, 3)], pins={5: 1})
    prio = np.zeros(6)
    devices = DeviceSpec(2)
    sim.simulate(g, devices, [0, 1, 0, 1, 0, 1], prio, prio)  # conforming: runs
    with pytest.raises(ValueError, match="op 'a3' is on device 0, but its colocation group "
                                         "leader 'a1' is on device 1"):
        sim.simulate(g, devices, [0, 1, 0, 0, 0, 1], prio, prio)
    with pytest.raises(ValueError, match="op 'a5' is on device 0, but its group is pinned to "
                                         "device 1"):
        sim.trace(g, devices, [0, 0, 0, 0, 0, 0], prio, prio)
    with pytest.raises(ValueError, match="op 'a5': pinned to device 1, outside 0..0"):
        sim.simulate(g, DeviceSpec(1), np.zeros(6, int), prio, prio)


# ---------------------------------------------------------------------------
# projection


def test_respect_colocation_by_hand():
    # group {0,1,2} (leader 0): op 2 holds most bytes (outputs 100 each + 10*i weights)
    g = _chain(4, colocate=[(0, 1), (1, 2)])
    assert respect_colocation(g, np.array([0, 0, 1, 1])).tolist() == [0, 0, 0, 1]
    assert respect_colocation(g, np.array([1, 0, 0, 1])).tolist() == [0, 0, 0, 1]
    # a tie (two ops of equal bytes): the leader's device
    tie = _chain(4, colocate=[(0, 3)])._replace(persistent_memory=np.zeros(4, np.int64))
    assert respect_colocation(tie, np.array([1, 0, 0, 0])).tolist() == [1, 0, 0, 1]
    # the pin wins over the vote
    pinned = _chain(4, colocate=[(0, 1), (1, 2)], pins={0: 1})
    assert respect_colocation(pinned, np.array([0, 0, 0, 0])).tolist() == [1, 1, 1, 0]


@pytest.mark.parametrize("seed", range(10))
def test_respect_colocation_properties(seed):
    rng = np.random.default_rng(seed)
    g = random_graph(rng, num_ops=30)
    names = g.names.tolist()
    g = with_constraints(g, colocate=[list(rng.choice(names, 3, replace=False))
                                      for _ in range(5)], pins={names[0]: 2})
    for _ in range(20):
        placement = rng.integers(0, 3, 30).astype(np.int32)
        projected = respect_colocation(g, placement)
        assert colocation_violation(g, projected) is None
        assert respect_colocation(g, projected).tolist() == projected.tolist()
        # only ops of groups that broke a rule move
        split = {int(L) for L, members in g.groups().items()
                 if len(set(placement[members])) > 1}
        split |= {int(g.colocation[v]) for v in np.flatnonzero(
            (g.pinned >= 0) & (placement != g.pinned))}
        moved = np.flatnonzero(projected != placement)
        assert all(int(g.colocation[v]) in split for v in moved)


# ---------------------------------------------------------------------------
# user constraints


def test_with_constraints_pins_by_name_glob_and_regex():
    g = _chain(8)
    assert with_constraints(g, pins={"a3": 1}).pinned.tolist() == [-1] * 3 + [1] + [-1] * 4
    globbed = with_constraints(g, pins={"a[12]": 1, "a7": 0}, num_devices=2)
    assert globbed.pinned.tolist() == [-1, 1, 1, -1, -1, -1, -1, 0]
    assert with_constraints(g, pins={"re:a[4-5]": 1}).pinned.tolist() == \
        [-1] * 4 + [1, 1] + [-1] * 2
    assert g.pinned.tolist() == [-1] * 8  # a pure function


def test_with_constraints_merges_groups_and_pins_the_whole_group():
    g = _chain(8, colocate=[(6, 7)])
    out = with_constraints(g, colocate=[["a2", "a6"], ["a0", "a1"]], pins={"a7": 1})
    assert out.colocation.tolist() == [0, 0, 2, 3, 4, 5, 2, 2]
    assert out.pinned.tolist() == [-1, -1, 1, -1, -1, -1, 1, 1]


@pytest.mark.parametrize("kwargs, message", [
    (dict(pins={"nope": 0}), "pin 'nope': no op has that name"),
    (dict(pins={"b*": 0}), "pin 'b\\*': the pattern matches no op"),
    (dict(pins={"re:(": 0}), "pin 're:\\(': bad regular expression"),
    (dict(pins={"a1": 2}, num_devices=2), "pin 'a1': device 2 is outside 0..1"),
    (dict(pins={"a1": -1}), "pin 'a1': device -1: expected an integer >= 0"),
    (dict(colocate=[["a1", "zz"]]), "colocate: no op named 'zz'"),
    # a flat list is groups of one op each: a mistake, not a no-op
    (dict(colocate=["a1", "a2"]), "colocate: a group lists at least two op names"),
    (dict(colocate=[["a1", "a2"]], pins={"a1": 0, "a2": 1}),
     "op 'a2': pinned to device 1, but op 'a1' of the same colocation group"),
    (dict(pins={"a*": 0, "a1": 1}), "op 'a1': pinned to devices 0 and 1 by two patterns"),
])
def test_with_constraints_errors(kwargs, message):
    with pytest.raises(GraphError, match=message):
        with_constraints(_chain(), **kwargs)


def test_with_constraints_rejects_a_pin_against_an_existing_one():
    g = _chain(pins={3: 0})
    with pytest.raises(GraphError, match="op 'a3': pinned to device 1, but op 'a3'"):
        with_constraints(g, pins={"a3": 1})


# ---------------------------------------------------------------------------
# every method's answer respects them


def _constrained_problem(seed=0, d=3):
    rng = np.random.default_rng(seed)
    g = random_graph(rng, num_ops=40)
    names = g.names.tolist()
    g = with_constraints(g, colocate=[names[i:i + 4] for i in range(0, 24, 6)],
                         pins={names[30]: 2, names[2]: 1})
    return Problem(g, DeviceSpec(d))


@pytest.mark.parametrize("method", ["brkga", "random", "gp-dfs", "m-topo", "m-etf"])
def test_methods_return_conforming_placements(method):
    problem = _constrained_problem()
    solution = solve(method, problem, 120, seed=0)
    assert colocation_violation(problem.graph, solution.placement) is None
    if method != "gp-dfs":  # METIS cannot fix a vertex; gp-dfs projects its pins itself
        assert solution.extra["colocation_repaired"] == 0


def test_solve_projects_a_method_that_ignores_groups():
    problem = _constrained_problem()
    n = problem.graph.num_nodes

    def careless(problem, budget, seed):
        placement = np.arange(n, dtype=np.int32) % 3
        return Solution(placement=placement, priority=np.zeros(n), transfer_priority=np.zeros(n),
                        value=0.0, peak=np.zeros(3, np.int64), makespan=0.0, feasible=True)

    from regal import optimizers
    optimizers.register("careless-test", careless)
    try:
        solution = solve("careless-test", problem, 1)
    finally:
        del optimizers.METHODS["careless-test"]
    projected = respect_colocation(problem.graph, np.arange(n) % 3)
    assert solution.placement.tolist() == projected.tolist()
    assert solution.extra["colocation_repaired"] == int((projected != np.arange(n) % 3).sum()) > 0


def test_unconstrained_solutions_carry_no_repair_count():
    problem = Problem(random_graph(np.random.default_rng(3), num_ops=20), DeviceSpec(2))
    assert "colocation_repaired" not in solve("m-topo", problem, 1).extra


def test_reference_placements_respect_pins():
    problem = _constrained_problem()
    for solution in (single_device(problem), round_robin(problem)):
        assert colocation_violation(problem.graph, solution.placement) is None
        assert solution.placement[30] == 2


# ---------------------------------------------------------------------------
# CLI


@pytest.fixture
def chain_file(tmp_path):
    path = tmp_path / "chain.npz"
    write_native(_chain(8), path)
    return path


def test_cli_pins_by_pattern(chain_file, tmp_path, capsys):
    import json

    out = tmp_path / "sol.json"
    code = main(["optimize", str(chain_file), "--devices", "2", "--budget", "100",
                 "--pin", "a[0-3]=1", "--colocate", "a5,a7", "--out", str(out)])
    assert code == 0
    ops = json.loads(out.read_text())["ops"]
    assert [ops[f"a{i}"]["device"] for i in range(4)] == [1, 1, 1, 1]
    assert ops["a5"]["device"] == ops["a7"]["device"]


@pytest.mark.parametrize("args, message", [
    (["--pin", "zz=0"], "pin 'zz': no op has that name"),
    (["--pin", "a1=2"], "pin 'a1': device 2 is outside 0..1"),
    (["--pin", "a1"], "--pin 'a1': expected OP=DEVICE"),
    (["--pin", "q*=0"], "the pattern matches no op"),
    (["--colocate", "a1,zz"], "colocate: no op named 'zz'"),
    (["--colocate", "a1,a2", "--pin", "a1=0", "--pin", "a2=1"], "same colocation group"),
])
def test_cli_bad_constraints_exit_2(chain_file, args, message, capsys):
    code = main(["optimize", str(chain_file), "--devices", "2", "--budget", "10", *args])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
