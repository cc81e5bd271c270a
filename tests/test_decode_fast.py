"""The compiled `decode` against the numpy implementation it replaced (kept verbatim below):
placement, priority and transfer keys equal bit for bit, with groups, pins, ties, NaN, -0.0."""

import numpy as np
import pytest

from regal.decode import _check_pins, decode, num_devices, num_genes, split
from regal.graph_builder import GraphBuilder


def reference_decode(keys, graph, devices):
    """Keys -> (placement int32, priority float64, transfer_priority float64).

    `keys` is one chromosome [G] or a batch [B, G]; the outputs gain the same
    leading batch axis. `devices` is a DeviceSpec or a device count.
    """
    d = num_devices(devices)
    n = graph.num_nodes
    keys = np.asarray(keys, dtype=np.float64)
    expected = num_genes(n, d)
    if keys.ndim not in (1, 2) or keys.shape[-1] != expected:
        raise ValueError(f"keys: expected {expected} genes ({n} ops x ({d} devices + 2)), "
                         f"got shape {keys.shape}")
    affinity, priority, transfer = split(keys, n, d)
    if graph.constrained:
        _check_pins(graph, d)
        # SIM_RULES 13: the leader's row decides for its group; a pin overrides the keys
        placement = np.argmax(affinity[..., graph.colocation, :], axis=-1).astype(np.int32)
        placement = np.where(graph.pinned >= 0, graph.pinned, placement).astype(np.int32)
    else:
        placement = np.argmax(affinity, axis=-1).astype(np.int32)  # first maximum = lower device
    return placement, priority.copy(), transfer.copy()


def _graph(rng, n, d, groups, pins):
    """n ops in a chain; `groups` random colocate calls; up to `pins` groups pinned below d."""
    pairs = [tuple(int(x) for x in rng.integers(0, n, size=2)) for _ in range(groups)]

    def build(pin_map):
        b = GraphBuilder()
        for i in range(n):
            b.add_op(f"a{i}", 1.0)
            b.add_output(i, 8)
            if i:
                b.add_input(i, i - 1)
        for x, y in pairs:
            b.colocate(x, y)
        for v, k in pin_map.items():
            b.pin(v, k)
        return b.build()

    g = build({})
    leaders = np.unique(g.colocation)
    chosen = rng.choice(leaders, size=min(pins, len(leaders)), replace=False)
    return build({int(v): int(rng.integers(0, d)) for v in chosen}) if pins else g


def _keys(rng, rows, n, d, kind):
    shape = (rows, num_genes(n, d))
    if kind == "uniform":
        return rng.random(shape)
    if kind == "halves":                            # many ties in every affinity row
        return np.round(rng.random(shape) * 2) / 2
    if kind == "equal":                             # whole rows equal: device 0 everywhere
        keys = rng.random(shape)
        keys[:, :n * d] = 0.5
        return keys
    keys = rng.choice(np.array([0.0, -0.0, 0.5, 1.0, np.nan, np.inf, -np.inf]), size=shape)
    return keys                                     # "special": NaN, signed zeros, infinities


def _assert_same(keys, g, d):
    got, want = decode(keys, g, d), reference_decode(keys, g, d)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=True)
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_decode_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    d = int(rng.integers(1, 9))
    groups = int(rng.integers(0, n + 1)) if seed % 4 else 0
    pins = int(rng.integers(0, 5)) if seed % 3 else 0
    g = _graph(rng, n, d, groups, pins)
    for kind in ("uniform", "halves", "equal", "special"):
        keys = _keys(rng, int(rng.integers(1, 7)), n, d, kind)
        _assert_same(keys, g, d)                    # a batch
        _assert_same(keys[0], g, d)                 # one chromosome
        _assert_same(keys[::2], g, d)               # a strided batch
        wide = np.zeros((len(keys), 2 * keys.shape[1]))
        wide[:, ::2] = keys
        _assert_same(wide[:, ::2], g, d)            # non-contiguous rows


def test_decode_matches_reference_on_empty_batches():
    rng = np.random.default_rng(0)
    g = _graph(rng, 12, 3, 6, 2)
    _assert_same(np.empty((0, num_genes(12, 3))), g, 3)
    free = _graph(rng, 12, 3, 0, 0)
    _assert_same(np.empty((0, num_genes(12, 3))), free, 3)


def test_decode_nan_and_ties_follow_numpy_argmax():
    g = _graph(np.random.default_rng(0), 5, 4, 0, 0)
    nan = np.nan
    rows = np.array([[nan, 1.0, 1.0, 0.0], [1.0, nan, nan, 2.0], [0.0, -0.0, 0.0, -1.0],
                     [0.5, 1.0, 1.0, 0.5], [-np.inf, -np.inf, -np.inf, -np.inf]])
    keys = np.concatenate([rows.ravel(), np.zeros(10)])
    placement, _, _ = decode(keys, g, 4)
    assert placement.tolist() == [0, 1, 0, 1, 0] == np.argmax(rows, axis=1).tolist()


def test_decode_still_checks_pins():
    b = GraphBuilder()
    for i in range(3):
        b.add_op(f"a{i}", 1.0)
    b.colocate(0, 1)
    b.pin(2, 3)
    g = b.build()
    keys = np.zeros(num_genes(3, 2))
    with pytest.raises(Exception) as got:
        decode(keys, g, 2)
    with pytest.raises(type(got.value), match=str(got.value)[:20]):
        reference_decode(keys, g, 2)
    _assert_same(np.zeros(num_genes(3, 4)), g, 4)
