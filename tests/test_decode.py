"""Chromosome layout (SIM_RULES 12), decoding, ties, and the encode round trip."""

from types import SimpleNamespace

import numpy as np
import pytest

from regal.decode import decode, encode, num_genes, rank_normalize
from regal.graph_builder import GraphBuilder


def chain(n):
    b = GraphBuilder()
    for i in range(n):
        v = b.add_op(f"op{i}", 1.0)
        b.add_output(v, 8)
        if i:
            b.add_input(v, v - 1)
    return b.build()


def test_num_genes():
    assert num_genes(5, 3) == 25
    assert num_genes(1, 1) == 3


def test_layout_by_hand():
    g = chain(3)  # d = 2: 6 affinity genes, 3 priority, 3 transfer
    keys = np.array([0.1, 0.9,   0.8, 0.2,   0.4, 0.6,
                     0.11, 0.22, 0.33,
                     0.44, 0.55, 0.66])
    placement, priority, transfer = decode(keys, g, 2)
    assert placement.tolist() == [1, 0, 1]
    assert placement.dtype == np.int32
    np.testing.assert_array_equal(priority, [0.11, 0.22, 0.33])
    np.testing.assert_array_equal(transfer, [0.44, 0.55, 0.66])


def test_ties_go_to_the_lower_device():
    g = chain(4)
    keys = np.concatenate([[0.5, 0.5, 0.5,  0.2, 0.7, 0.7,  0.9, 0.1, 0.9,  0.0, 0.0, 0.0],
                           np.zeros(8)])
    placement, _, _ = decode(keys, g, 3)
    assert placement.tolist() == [0, 1, 0, 0]


def test_batch_matches_single_and_accepts_device_spec():
    g = chain(7)
    rng = np.random.default_rng(0)
    keys = rng.random((5, num_genes(7, 3)))
    spec = SimpleNamespace(count=3)  # anything with .count, like regal.sim.DeviceSpec
    batch = decode(keys, g, spec)
    assert batch[0].shape == batch[1].shape == batch[2].shape == (5, 7)
    for i in range(5):
        for got, want in zip((b[i] for b in batch), decode(keys[i], g, 3)):
            np.testing.assert_array_equal(got, want)
    # brute force argmax per op
    aff = keys[:, :21]
    for i in range(5):
        for v in range(7):
            row = aff[i, v * 3:(v + 1) * 3]
            assert batch[0][i, v] == min(k for k in range(3) if row[k] == row.max())


def test_bad_keys_and_devices():
    g = chain(3)
    with pytest.raises(ValueError, match="keys"):
        decode(np.zeros(11), g, 2)
    with pytest.raises(ValueError, match="devices"):
        decode(np.zeros(12), g, 0)
    with pytest.raises(ValueError, match="devices"):
        decode(np.zeros(12), g, "two")


def test_round_trip_unit_priorities():
    g = chain(6)
    rng = np.random.default_rng(1)
    placement = rng.integers(0, 4, size=6)
    priority, transfer = rng.random(6), rng.random(6)
    keys = encode(placement, priority, transfer, 4)
    assert keys.shape == (num_genes(6, 4),)
    assert ((keys >= 0) & (keys <= 1)).all()
    p, q, t = decode(keys, g, 4)
    np.testing.assert_array_equal(p, placement)
    np.testing.assert_array_equal(q, priority)
    np.testing.assert_array_equal(t, transfer)


def test_round_trip_of_random_chromosomes_keeps_the_decoding():
    g = chain(9)
    rng = np.random.default_rng(2)
    for _ in range(20):
        keys = rng.random(num_genes(9, 3))
        once = decode(keys, g, 3)
        twice = decode(encode(*once, 3), g, 3)
        for a, b in zip(once, twice):
            np.testing.assert_array_equal(a, b)


def test_out_of_range_priorities_are_rank_normalised():
    g = chain(5)
    priority = np.array([10.0, -3.0, 10.0, 7.5, 0.0])    # e.g. negated positions of an order
    keys = encode(np.zeros(5, int), priority, np.arange(5), 2)
    _, q, t = decode(keys, g, 2)
    np.testing.assert_array_equal(q, [1.0, 0.0, 1.0, 2 / 3, 1 / 3])
    np.testing.assert_array_equal(t, [0.0, 0.25, 0.5, 0.75, 1.0])
    # order and ties survive: the same pairs compare the same way
    assert (np.sign(np.subtract.outer(q, q)) == np.sign(np.subtract.outer(priority, priority))).all()


def test_rank_normalize_constant():
    np.testing.assert_array_equal(rank_normalize([3.0, 3.0]), [0.5, 0.5])


def test_encode_bad_input():
    with pytest.raises(ValueError, match="placement"):
        encode([0, 2], [0.1, 0.2], [0.1, 0.2], 2)
    with pytest.raises(ValueError, match="placement"):
        encode([0.0, 1.0], [0.1, 0.2], [0.1, 0.2], 2)
    with pytest.raises(ValueError, match="priority"):
        encode([0, 1], [0.1], [0.1, 0.2], 2)
    with pytest.raises(ValueError, match="transfer_priority"):
        encode([0, 1], [0.1, 0.2], [0.1, np.nan], 2)


# --- schedule digests: equal digest, equal simulation (SIM_RULES 3, 5)


def _same_orders_new_values(rng, placement, values, members):
    """Fresh distinct values that keep every device's (value desc, id) order of `members`;
    values of ops outside `members` are drawn anew."""
    out = rng.random(len(values))
    for device in np.unique(placement):
        ops = np.flatnonzero((placement == device) & members)
        ops = ops[np.lexsort((ops, -values[ops]))]
        out[ops] = np.sort(rng.uniform(2.0, 3.0, len(ops)))[::-1]
    return out


def _senders(graph, placement):
    sends = np.zeros(graph.num_nodes, bool)
    for t in range(graph.num_tensors):
        producer = graph.tensor_producer[t]
        readers = graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]]
        sends[producer] |= bool((placement[readers] != placement[producer]).any())
    return sends


@pytest.mark.parametrize("seed", range(60))
def test_solutions_with_one_digest_simulate_alike(seed):
    """New priority values that keep each device's order, new transfer values that keep each
    device's senders' order (non-senders' values anything): same digest, same simulation."""
    from helpers import random_case
    from regal.decode import schedule_digests
    from regal.sim import DeviceSpec, simulate

    rng = np.random.default_rng(seed)
    case = random_case(rng)
    graph, placement = case["graph"], case["placement"].astype(np.int32)
    devices = DeviceSpec(case["count"], bandwidth=case["bandwidth"], latency=case["latency"])
    priority, transfer = case["priority"], case["transfer_priority"]
    everyone = np.ones(graph.num_nodes, bool)
    priority2 = _same_orders_new_values(rng, placement, priority, everyone)
    transfer2 = _same_orders_new_values(rng, placement, transfer, _senders(graph, placement))
    first, second = schedule_digests(graph, np.stack([placement, placement]),
                                     np.stack([priority, priority2]),
                                     np.stack([transfer, transfer2]))
    assert first == second
    a = simulate(graph, devices, placement, priority, transfer)
    b = simulate(graph, devices, placement, priority2, transfer2)
    assert np.array_equal(a.peak, b.peak) and a.makespan == b.makespan


@pytest.mark.parametrize("seed", range(40))
def test_a_digest_changes_with_what_the_simulator_reads(seed):
    """Swapping two ops of one device in priority, two senders of one device in transfer
    priority, or moving one op each give another digest."""
    from helpers import random_graph
    from regal.decode import schedule_digests

    rng = np.random.default_rng(seed)
    graph = random_graph(rng, int(rng.integers(4, 30)))
    n, d = graph.num_nodes, 3
    placement = rng.integers(0, d, n).astype(np.int32)
    priority, transfer = rng.random(n), rng.random(n)
    rows = [(placement, priority, transfer)]
    same_device = np.flatnonzero(placement == np.bincount(placement).argmax())
    if len(same_device) >= 2:
        a, b = rng.choice(same_device, 2, replace=False)
        swapped = priority.copy()
        swapped[[a, b]] = swapped[[b, a]]
        rows.append((placement, swapped, transfer))
    sends = _senders(graph, placement)
    for device in range(d):
        ops = np.flatnonzero(sends & (placement == device))
        if len(ops) >= 2:
            a, b = rng.choice(ops, 2, replace=False)
            swapped = transfer.copy()
            swapped[[a, b]] = swapped[[b, a]]
            rows.append((placement, priority, swapped))
            break
    moved = placement.copy()
    moved[int(rng.integers(n))] += 1
    rows.append((moved % d, priority, transfer))
    digests = schedule_digests(graph, *map(np.stack, zip(*rows)))
    assert len(set(digests)) == len(rows)


def test_digests_of_a_batch_equal_digests_one_by_one():
    from helpers import random_graph
    from regal.decode import schedule_digests

    rng = np.random.default_rng(3)
    graph = random_graph(rng, 25)
    keys = rng.random((6, num_genes(25, 4)))
    batch = schedule_digests(graph, *decode(keys, graph, 4))
    assert batch == [schedule_digests(graph, *decode(row, graph, 4))[0] for row in keys]
    assert all(len(h) == 16 for h in batch)


@pytest.mark.parametrize("seed", range(30))
def test_chromosomes_grouped_by_digest_score_alike(seed):
    """Keys from a few values (many ties, many repeats): every chromosome of a digest group
    gets the same objective, peaks and makespan from the simulator."""
    from helpers import random_graph
    from regal.decode import schedule_digests
    from regal.sim import DeviceSpec, evaluate

    rng = np.random.default_rng(seed)
    graph = random_graph(rng, int(rng.integers(1, 7)))
    d = int(rng.integers(1, 4))
    keys = rng.choice([0.1, 0.5, 0.9], size=(400, num_genes(graph.num_nodes, d)))
    values, peaks, makespans = evaluate(graph, DeviceSpec(d, bandwidth=3.0, latency=1.0), keys,
                                        "peak_memory", return_details=True)
    groups = {}
    for row, digest in enumerate(schedule_digests(graph, *decode(keys, graph, d))):
        groups.setdefault(digest, []).append(row)
    assert len(groups) < len(keys)                  # the draw does repeat schedules
    for rows in groups.values():
        assert len({(values[r], tuple(peaks[r]), makespans[r]) for r in rows}) == 1


def test_order_priority_runs_ops_in_the_given_order():
    from regal.decode import order_priority
    np.testing.assert_array_equal(order_priority([2, 0, 1]), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(order_priority([0]), [0.5])
    assert order_priority([]).shape == (0,)
