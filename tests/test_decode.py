"""Chromosome layout (SIM_RULES 12), decoding, ties, and the encode round trip."""

from types import SimpleNamespace

import numpy as np
import pytest

from regal.decode import decode, encode, num_genes, rank_normalize
from regal.graph import GraphBuilder


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
