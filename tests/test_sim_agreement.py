"""The compiled simulator (regal.sim) must agree exactly with the independent pure-Python
reference (tests/sim_reference.py) on random graphs: peaks equal as integers, times and
objectives equal to 1e-9 relative, feasibility equal (docs/design.md §4, regal/sim/SIM_RULES.md).
"""

import numpy as np

import regal.sim as sim
from regal.sim import kernel
from helpers import random_case
from sim_reference import (reference_decode, reference_objective, reference_simulate,
                           relative_close)

NUM_GRAPHS = 500
NUM_POPULATION_GRAPHS = 40
POPULATION = 8           # 40 graphs x 8 individuals x 2 objectives


def _memory_limit(rng, peak, count):
    """None, one limit for all, or one per device, near the unconstrained peaks (both sides)."""
    kind = rng.integers(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return max(1, int(max(peak) * rng.uniform(0.6, 1.3)))
    return [max(1, int(p * rng.uniform(0.6, 1.3))) for p in peak]


def _case(seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng)
    free = reference_simulate(case["graph"], case["count"], None, case["bandwidth"],
                              case["latency"], case["placement"], case["priority"],
                              case["transfer_priority"])
    case["memory_limit"] = _memory_limit(rng, free["peak"], case["count"])
    return case, rng


def _devices(case):
    return sim.DeviceSpec(count=case["count"], memory_limit=case["memory_limit"],
                          bandwidth=case["bandwidth"], latency=case["latency"])


def _ref_objective(ref, case, name):
    return reference_objective(ref, case["graph"], case["count"], case["memory_limit"],
                               case["bandwidth"], case["latency"], name)


def _describe(seed, case, ref, got):
    g = case["graph"]
    return (f"seed {seed}: {g} d={case['count']} limit={case['memory_limit']} "
            f"bw={case['bandwidth']} lat={case['latency']}\n  reference {ref}\n  compiled  {got}")


def test_simulate_agrees_with_reference_on_random_graphs():
    mismatches = []
    for seed in range(NUM_GRAPHS):
        case, _ = _case(seed)
        ref = reference_simulate(case["graph"], case["count"], case["memory_limit"],
                                 case["bandwidth"], case["latency"], case["placement"],
                                 case["priority"], case["transfer_priority"])
        res = sim.simulate(case["graph"], _devices(case), case["placement"], case["priority"],
                           case["transfer_priority"])
        got = dict(peak=[int(p) for p in res.peak], makespan=float(res.makespan),
                   feasible=bool(res.feasible),
                   peak_memory=float(res.objective("peak_memory")),
                   makespan_objective=float(res.objective("makespan")))
        ok = (got["peak"] == ref["peak"]
              and all(float(p) == float(q) for p, q in zip(res.peak, ref["peak"]))
              and relative_close(got["makespan"], ref["makespan"])
              and got["feasible"] == ref["feasible"]
              and relative_close(got["peak_memory"], _ref_objective(ref, case, "peak_memory"))
              and relative_close(got["makespan_objective"],
                                 _ref_objective(ref, case, "makespan")))
        if not ok:
            ref = dict(ref, peak_memory=_ref_objective(ref, case, "peak_memory"),
                       makespan_objective=_ref_objective(ref, case, "makespan"))
            mismatches.append(_describe(seed, case, ref, got))
    assert not mismatches, (f"{len(mismatches)}/{NUM_GRAPHS} graphs disagree:\n"
                            + "\n".join(mismatches[:5]))


def _population(rng, n, count):
    """Random keys, a quarter of them coarsely quantised so affinities and priorities tie."""
    keys = rng.random((POPULATION, n * (count + 2)))
    coarse = rng.random(POPULATION) < 0.25
    keys[coarse] = np.round(keys[coarse] * 2) / 2
    return keys


def test_evaluate_agrees_with_reference_on_decoded_keys():
    mismatches, checked = [], 0
    for seed in range(NUM_POPULATION_GRAPHS):
        case, rng = _case(10_000 + seed)
        g, count = case["graph"], case["count"]
        keys = _population(rng, g.num_nodes, count)
        devices = _devices(case)
        for name in ("peak_memory", "makespan"):
            scores = np.asarray(sim.evaluate(g, devices, keys, name), dtype=np.float64)
            assert scores.shape == (POPULATION,)
            for i, row in enumerate(keys):
                placement, priority, transfer = reference_decode(row, g.num_nodes, count)
                ref = reference_simulate(g, count, case["memory_limit"], case["bandwidth"],
                                         case["latency"], placement, priority, transfer)
                want = _ref_objective(ref, case, name)
                checked += 1
                if not relative_close(float(scores[i]), want):
                    mismatches.append(f"seed {10_000 + seed} individual {i} {name}: "
                                      f"reference {want} compiled {scores[i]}")
    assert checked == NUM_POPULATION_GRAPHS * POPULATION * 2
    assert not mismatches, f"{len(mismatches)}/{checked} disagree:\n" + "\n".join(mismatches[:5])


BIG = 3 * 2 ** 30 + 7   # byte counts times this pass 2**31: the kernel's int64 path


def _bytes_scaled(graph, factor: int):
    """The same graph with every byte count times `factor` (the costs stay)."""
    return graph._replace(temporary_memory=graph.temporary_memory * factor,
                          persistent_memory=graph.persistent_memory * factor,
                          tensor_size=graph.tensor_size * factor)


def test_agreement_with_byte_counts_beyond_int32():
    """Graphs whose tensors pass 2**31 bytes take the kernel's int64 byte path (small ones
    take the int32 path); both must agree with the reference."""
    mismatches, wide = [], 0
    for seed in range(100):
        case, _ = _case(20_000 + seed)
        g = case["graph"]
        big = _bytes_scaled(g, BIG)
        if case["memory_limit"] is not None:
            case["memory_limit"] = (case["memory_limit"] * BIG
                                    if np.ndim(case["memory_limit"]) == 0
                                    else [m * BIG for m in case["memory_limit"]])
        devices = _devices(case)
        narrow = kernel.prepare(g, devices)[kernel.S_SIZE].dtype == np.int32
        wide += kernel.prepare(big, devices)[kernel.S_SIZE].dtype == np.int64
        assert narrow
        ref = reference_simulate(big, case["count"], case["memory_limit"], case["bandwidth"],
                                 case["latency"], case["placement"], case["priority"],
                                 case["transfer_priority"])
        res = sim.simulate(big, devices, case["placement"], case["priority"],
                           case["transfer_priority"])
        if not ([int(p) for p in res.peak] == ref["peak"]
                and relative_close(float(res.makespan), ref["makespan"])
                and bool(res.feasible) == ref["feasible"]):
            mismatches.append(_describe(seed, case, ref, dict(peak=res.peak.tolist(),
                                                              makespan=res.makespan)))
    assert wide >= 80   # graphs with no byte at all stay int32
    assert not mismatches, f"{len(mismatches)}/100 disagree:\n" + "\n".join(mismatches[:5])


def test_evaluate_with_byte_counts_beyond_int32():
    """The batched evaluator on the int64 byte path (its own compilation) against the reference."""
    checked = 0
    for seed in range(10):
        case, rng = _case(30_000 + seed)
        big, count = _bytes_scaled(case["graph"], BIG), case["count"]
        devices = sim.DeviceSpec(count=count, bandwidth=case["bandwidth"],
                                 latency=case["latency"])
        if kernel.prepare(big, devices)[kernel.S_SIZE].dtype != np.int64:
            continue
        keys = _population(rng, big.num_nodes, count)
        scores = sim.evaluate(big, devices, keys, "peak_memory")
        for i, row in enumerate(keys):
            ref = reference_simulate(big, count, None, case["bandwidth"], case["latency"],
                                     *reference_decode(row, big.num_nodes, count))
            assert scores[i] == max(ref["peak"]), (seed, i)
            checked += 1
    assert checked >= 40


# ---------------------------------------------------------------------------
# colocation groups and pins (SIM_RULES 13)


def _with_random_constraints(rng, graph, count):
    """The graph with random colocation groups (about a third of the ops joined) and, half
    the time, pins on a few of its ops (devices in 0..count-1)."""
    from regal.constraints import with_constraints

    names = graph.names.tolist()
    n = len(names)
    colocate = []
    for _ in range(int(rng.integers(1, max(2, n // 3) + 1))):
        size = int(rng.integers(2, 5))
        colocate.append([names[int(v)] for v in rng.choice(n, size=min(size, n), replace=False)])
    constrained = with_constraints(graph, colocate=colocate if n > 1 else [])
    pins = {}
    if rng.random() < 0.5:
        taken = {}
        for v in rng.choice(n, size=int(rng.integers(1, min(4, n) + 1)), replace=False):
            leader = int(constrained.colocation[v])
            device = taken.setdefault(leader, int(rng.integers(0, count)))
            pins[names[int(v)]] = device
    return with_constraints(constrained, pins=pins, num_devices=count)


def test_grouped_evaluate_and_decode_agree_with_reference():
    """Kernel decoding (evaluate) and regal.decode against [R13] reference decoding, on random
    graphs with groups and pins; the decoded placements respect every group and pin."""
    from regal.decode import decode

    mismatches, checked, grouped, pinned = [], 0, 0, 0
    for seed in range(60):
        case, rng = _case(40_000 + seed)
        count = case["count"]
        g = _with_random_constraints(rng, case["graph"], count)
        grouped += g.has_groups
        pinned += g.has_pins
        keys = _population(rng, g.num_nodes, count)
        devices = _devices(case)
        placements, _, _ = decode(keys, g, count)
        for name in ("peak_memory", "makespan"):
            scores = sim.evaluate(g, devices, keys, name)
            for i, row in enumerate(keys):
                placement, priority, transfer = reference_decode(
                    row, g.num_nodes, count, g.colocation.tolist(), g.pinned.tolist())
                assert placements[i].tolist() == placement, (seed, i)
                assert (placements[i] == placements[i][g.colocation]).all()
                assert ((g.pinned < 0) | (placements[i] == g.pinned)).all()
                ref = reference_simulate(g, count, case["memory_limit"], case["bandwidth"],
                                         case["latency"], placement, priority, transfer)
                want = _ref_objective(ref, case, name)
                checked += 1
                if not relative_close(float(scores[i]), want):
                    mismatches.append(f"seed {40_000 + seed} individual {i} {name}: "
                                      f"reference {want} compiled {scores[i]}")
    assert checked == 60 * POPULATION * 2
    assert grouped >= 50 and pinned >= 15   # the cases do exercise both
    assert not mismatches, f"{len(mismatches)}/{checked} disagree:\n" + "\n".join(mismatches[:5])


def test_grouped_simulate_agrees_with_reference():
    """simulate() on conforming placements of constrained graphs (the constraints only
    restrict which placements are allowed; the schedule rules are unchanged)."""
    for seed in range(100):
        case, rng = _case(50_000 + seed)
        count = case["count"]
        g = _with_random_constraints(rng, case["graph"], count)
        placement, _, _ = reference_decode(rng.random(g.num_nodes * (count + 2)), g.num_nodes,
                                           count, g.colocation.tolist(), g.pinned.tolist())
        ref = reference_simulate(g, count, case["memory_limit"], case["bandwidth"],
                                 case["latency"], placement, case["priority"],
                                 case["transfer_priority"])
        res = sim.simulate(g, _devices(case), placement, case["priority"],
                           case["transfer_priority"])
        assert [int(p) for p in res.peak] == ref["peak"], seed
        assert relative_close(float(res.makespan), ref["makespan"]), seed


def test_random_case_covers_the_hard_cases():
    # the agreement test is only as good as its inputs: count graphs with each feature
    seen = dict.fromkeys(["alias", "alias chain", "control", "temporary", "persistent",
                          "no consumer", "two remote devices", "zero cost", "zero size",
                          "repeated input", "several devices"], 0)
    for seed in range(100):
        case = random_case(np.random.default_rng(seed))
        g, dev = case["graph"], case["placement"]
        alias = g.tensor_alias
        remote = [set(dev[g.consumers(t)].tolist()) - {dev[g.tensor_producer[t]]}
                  for t in range(g.num_tensors)]
        seen["alias"] += bool((alias >= 0).any())
        seen["alias chain"] += any(a >= 0 and alias[a] >= 0 for a in alias)
        seen["control"] += g.num_control_edges > 0
        seen["temporary"] += bool((g.temporary_memory > 0).any())
        seen["persistent"] += bool((g.persistent_memory > 0).any())
        seen["no consumer"] += bool((np.diff(g.consumer_ptr) == 0).any())
        seen["two remote devices"] += any(len(r) >= 2 for r in remote)
        seen["zero cost"] += bool((g.compute_cost == 0).any())
        seen["zero size"] += bool((g.tensor_size == 0).any())
        seen["repeated input"] += any(len(set(g.inputs(v).tolist())) < len(g.inputs(v))
                                      for v in range(g.num_nodes))
        seen["several devices"] += case["count"] > 1
    assert min(seen.values()) >= 20, seen
