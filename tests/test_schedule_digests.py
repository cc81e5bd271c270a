"""`regal.decode.schedule_digests`, compiled, against the implementation it replaced.

The climbs skip a neighbour whose digest was scored before, so two rows must get equal
digests exactly when the earlier implementation (kept below as the reference) gave them
equal digests: then every climb takes the same steps. The compiled one hashes the same
canonical bytes (placement, run order, send order as int32) with MurmurHash3_x64_128
instead of blake2b, so the tests compare those bytes row by row, the digests' equalities,
and the hash with a plain-Python MurmurHash3.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from helpers import random_graph
from regal.decode import _murmur3, _schedule_words, decode, num_genes, schedule_digests
from search_cases import with_groups_and_pins


# ---------------------------------------------------------------------------
# the implementation replaced (regal/decode.py before the compiled one), verbatim


def _reference_parts(graph, placement, priority, transfer):
    placement = np.atleast_2d(np.asarray(placement))
    priority = np.atleast_2d(np.asarray(priority, np.float64))
    transfer = np.atleast_2d(np.asarray(transfer, np.float64))
    rows, n = placement.shape
    ids = np.broadcast_to(np.arange(n), (rows, n))
    edge_tensor = np.repeat(np.arange(graph.num_tensors), np.diff(graph.consumer_ptr))
    edge_producer = graph.tensor_producer[edge_tensor]
    remote = placement[:, graph.consumer] != placement[:, edge_producer]
    sends = np.zeros((rows, n), bool)
    row, edge = np.nonzero(remote)
    sends[row, edge_producer[edge]] = True
    run_order = np.lexsort((ids, -priority, placement), axis=-1).astype(np.int32)
    send_order = np.lexsort((ids, -np.where(sends, transfer, 0.0), placement, ~sends),
                            axis=-1).astype(np.int32)
    return placement.astype(np.int32), run_order, send_order


def reference_digests(graph, placement, priority, transfer) -> list[bytes]:
    placement, run_order, send_order = _reference_parts(graph, placement, priority, transfer)
    return [hashlib.blake2b(placement[i].tobytes() + run_order[i].tobytes()
                            + send_order[i].tobytes(), digest_size=16).digest()
            for i in range(len(placement))]


def reference_words(graph, placement, priority, transfer) -> np.ndarray:
    """[B, 3n] uint32: the bytes the reference hashes."""
    parts = _reference_parts(graph, placement, priority, transfer)
    return np.concatenate(parts, axis=1).view(np.uint32)


# ---------------------------------------------------------------------------
# MurmurHash3_x64_128 in plain Python (Austin Appleby's MurmurHash3.cpp)

_M = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _fmix(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes) -> bytes:
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = 0
    blocks = len(data) // 16
    for i in range(blocks):
        k1 = int.from_bytes(data[16 * i:16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        h1 ^= (_rotl((k1 * c1) & _M, 31) * c2) & _M
        h1 = ((_rotl(h1, 27) + h2) * 5 + 0x52DCE729) & _M
        h2 ^= (_rotl((k2 * c2) & _M, 33) * c1) & _M
        h2 = ((_rotl(h2, 31) + h1) * 5 + 0x38495AB5) & _M
    tail = data[16 * blocks:]
    if len(tail) > 8:
        h2 ^= (_rotl((int.from_bytes(tail[8:], "little") * c2) & _M, 33) * c1) & _M
    if tail:
        h1 ^= (_rotl((int.from_bytes(tail[:8], "little") * c1) & _M, 31) * c2) & _M
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _M
    h2 = (h2 + h1) & _M
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M
    h2 = (h2 + h1) & _M
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


def test_python_murmur3_matches_the_published_vector():
    digest = murmur3_x64_128(b"The quick brown fox jumps over the lazy dog")
    assert digest.hex() == "6c1b07bc7bbc4be347939ac4a93c437a"
    assert murmur3_x64_128(b"") == bytes(16)


def test_compiled_murmur3_matches_python():
    rng = np.random.default_rng(0)
    for m in list(range(12)) + [37, 64, 301]:    # every tail: 0, 4, 8, 12 bytes
        words = rng.integers(0, 2 ** 32, m, dtype=np.uint64).astype(np.uint32)
        h1, h2 = _murmur3(words)
        got = int(h1).to_bytes(8, "little") + int(h2).to_bytes(8, "little")
        assert got == murmur3_x64_128(words.astype("<u4").tobytes()), m


def test_digests_hash_the_canonical_words():
    rng = np.random.default_rng(1)
    graph = random_graph(rng, 20)
    keys = rng.random((5, num_genes(20, 3)))
    decoded = decode(keys, graph, 3)
    words = _schedule_words(graph, *decoded)
    assert schedule_digests(graph, *decoded) == [
        murmur3_x64_128(row.astype("<u4").tobytes()) for row in words]


# ---------------------------------------------------------------------------
# batches like a climb's, and worse


def _graph(rng, i):
    from regal import synth
    if i % 3 == 2:                              # big enough for the "sort the row anew" path
        graph = synth.random_dag(int(rng.integers(80, 300)), int(rng.integers(1, 99)))
    else:
        graph = random_graph(rng, int(rng.integers(1, 31)))
    d = int(rng.integers(1, 5))
    if i % 2 and graph.num_nodes >= 2:
        graph = with_groups_and_pins(graph, rng, d)
    return graph, d


def _batch(rng, graph, d, rows):
    """Decoded rows: neighbours of one incumbent (an op's or a group's device, priority
    keys swapped between ops of one device or of two devices, kept in order with new values,
    tied, signed zeros, transfer keys of senders and non-senders), duplicates, and a few
    rows from elsewhere (another incumbent, new random keys)."""
    n = graph.num_nodes
    tied = rng.random() < 0.3
    draw = (lambda size: rng.choice([0.0, 0.25, 0.5, 1.0], size)) if tied else rng.random
    incumbent = draw(num_genes(n, d))
    place0, prio0, trans0 = decode(incumbent, graph, d)
    out = []
    for _ in range(rows):
        kind = rng.random()
        keys = incumbent.copy()
        affinity = keys[:n * d].reshape(n, d)
        for _ in range(int(rng.integers(1, 4))):
            v = int(rng.integers(n))
            move = int(rng.integers(7))
            if move == 0:                                        # another device
                affinity[v] = 0.0
                affinity[v, int(rng.integers(d))] = 1.0
            elif move == 1:                                      # a new priority key
                keys[n * d + v] = draw(1)[0]
            elif move == 2:                                      # a new transfer key
                keys[n * d + n + v] = draw(1)[0]
            elif move in (3, 4):                                 # swap two ops' priorities
                same = place0 == place0[v]
                pool = np.flatnonzero(same if move == 3 else ~same)
                if len(pool):
                    u = int(rng.choice(pool))
                    a, b = n * d + v, n * d + u
                    keys[a], keys[b] = keys[b], keys[a]
            elif move == 5:                                      # new value, same order?
                keys[n * d + v] = np.nextafter(keys[n * d + v], 2.0)
            else:                                                # swap transfer keys
                u = int(rng.integers(n))
                a, b = n * d + n + v, n * d + n + u
                keys[a], keys[b] = keys[b], keys[a]
        if kind < 0.08:
            keys = draw(num_genes(n, d))                         # from elsewhere
        placement, priority, transfer = decode(keys, graph, d)
        if kind > 0.9:                                           # signed zeros
            priority[priority == 0.0] = -0.0
            transfer[rng.random(n) < 0.3] = -0.0
        out.append((placement, priority, transfer))
        if rng.random() < 0.2:
            out.append(tuple(a.copy() for a in out[-1]))         # a duplicate
    order = rng.permutation(len(out))
    return tuple(np.stack([out[i][k] for i in order]) for k in range(3))


def _same_pattern(a, b):
    a, b = np.asarray(a, object), np.asarray(b, object)
    return np.array_equal(a[:, None] == a[None, :], b[:, None] == b[None, :])


@pytest.mark.parametrize("seed", range(40))
def test_digests_are_equal_exactly_when_the_reference_ones_are(seed):
    rng = np.random.default_rng(seed)
    graph, d = _graph(rng, seed)
    batch = _batch(rng, graph, d, int(rng.integers(1, 40)))
    expected = reference_words(graph, *batch)
    np.testing.assert_array_equal(_schedule_words(graph, *batch), expected)
    digests = schedule_digests(graph, *batch)
    reference = reference_digests(graph, *batch)
    assert len(digests) == len(reference) and all(len(h) == 16 for h in digests)
    assert _same_pattern(digests, reference)
    # each row alone, and the rows in another order (another base), give the same digests
    assert [schedule_digests(graph, *(a[i] for a in batch))[0]
            for i in range(len(digests))] == digests
    flip = np.arange(len(digests))[::-1]
    assert schedule_digests(graph, *(a[flip] for a in batch)) == [digests[i] for i in flip]


@pytest.mark.parametrize("seed", range(10))
def test_the_hint_changes_no_word(seed):
    """The base's orders start from the last call's; any permutation must give the same."""
    rng = np.random.default_rng(100 + seed)
    graph, d = _graph(rng, seed)
    batch = _batch(rng, graph, d, 12)
    expected = reference_words(graph, *batch)
    n = graph.num_nodes
    for hint in (None, (rng.permutation(n), rng.permutation(n)),
                 (np.arange(n)[::-1], np.arange(n)),
                 (expected[0, n:2 * n], expected[0, 2 * n:])):
        np.testing.assert_array_equal(_schedule_words(graph, *batch, hint=hint), expected)


def test_priority_swaps_across_devices_that_keep_or_change_the_order():
    """Two devices, ops 0-1 on device 0 and 2-3 on device 1: swapping the priorities of
    ops 0 and 2 keeps every device's order in one case and reverses device 0's in another."""
    from regal.graph_builder import GraphBuilder
    b = GraphBuilder()
    for i in range(4):
        b.add_op(f"op{i}", 1.0)
        b.add_output(i, 8)
    graph = b.build()
    placement = np.array([[0, 0, 1, 1]] * 4, np.int32)
    priority = np.array([[0.9, 0.1, 0.8, 0.2],     # device 0: 0, 1; device 1: 2, 3
                         [0.8, 0.1, 0.9, 0.2],     # 0 and 2 swapped: the same orders
                         [0.2, 0.5, 0.8, 0.9],     # device 0: 1, 0; device 1: 3, 2
                         [0.8, 0.5, 0.2, 0.9]])    # 0 and 2 swapped: device 0: 0, 1
    transfer = np.zeros((4, 4))
    digests = schedule_digests(graph, placement, priority, transfer)
    assert digests[0] == digests[1] and digests[2] != digests[3]
    assert _same_pattern(digests, reference_digests(graph, placement, priority, transfer))


def test_nan_and_infinite_keys_order_as_numpy_sorts_them():
    rng = np.random.default_rng(5)
    graph = random_graph(rng, 25)
    n = graph.num_nodes
    values = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 5e-324])
    placement = rng.integers(0, 3, (30, n)).astype(np.int32)
    placement[10:] = placement[0]
    priority = rng.choice(values, (30, n))
    transfer = rng.choice(values, (30, n))
    np.testing.assert_array_equal(_schedule_words(graph, placement, priority, transfer),
                                  reference_words(graph, placement, priority, transfer))


def test_int64_placements_and_empty_batches():
    rng = np.random.default_rng(6)
    graph = random_graph(rng, 12)
    keys = rng.random((4, num_genes(12, 2)))
    placement, priority, transfer = decode(keys, graph, 2)
    assert schedule_digests(graph, placement.astype(np.int64), priority, transfer) == \
        schedule_digests(graph, placement, priority, transfer)
    assert schedule_digests(graph, placement[:0], priority[:0], transfer[:0]) == []
    with pytest.raises(ValueError):
        schedule_digests(graph, placement[:, :5], priority[:, :5], transfer[:, :5])
