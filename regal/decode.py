"""Chromosome layout and decoding (DESIGN §5, SIM_RULES 12).

For `n` ops and `d` devices a chromosome holds `n * (d + 2)` keys in [0, 1]:

    keys[:n*d].reshape(n, d)   affinity: dev(v) = argmax_k affinity[v, k], ties to the lower k
    keys[n*d : n*d+n]          priority of op v (higher runs first)
    keys[n*d+n : n*d+2n]       transfer priority of every tensor v produces

Blocks are per node, so a policy's per-node parameters broadcast over them simply.
`encode` maps any method's solution back to keys, so it can seed the BRKGA.
"""

from __future__ import annotations

import numpy as np

__all__ = ["num_genes", "num_devices", "split", "decode", "encode", "rank_normalize"]


def num_genes(num_nodes: int, num_devices: int) -> int:
    """Length of a chromosome for `num_nodes` ops on `num_devices` devices."""
    return int(num_nodes) * (int(num_devices) + 2)


def num_devices(devices) -> int:
    """Device count of a `regal.sim.DeviceSpec` or of a plain integer."""
    count = devices if isinstance(devices, (int, np.integer)) else getattr(devices, "count", None)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"devices: expected a DeviceSpec or a positive device count, "
                         f"got {devices!r}")
    return int(count)


def split(keys: np.ndarray, num_nodes: int, d: int):
    """Views of the three blocks: affinity [..., n, d], priority [..., n], transfer [..., n]."""
    n = num_nodes
    lead = keys.shape[:-1]
    affinity = keys[..., :n * d].reshape(*lead, n, d)
    return affinity, keys[..., n * d:n * d + n], keys[..., n * d + n:n * (d + 2)]


def decode(keys, graph, devices):
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
    placement = np.argmax(affinity, axis=-1).astype(np.int32)  # first maximum = lower device
    return placement, priority.copy(), transfer.copy()


def rank_normalize(values) -> np.ndarray:
    """Order-preserving map to [0, 1]: equal values stay equal, so tie-breaks by id survive.

    Distinct values are spread evenly by their dense rank (lowest 0, highest 1);
    a single distinct value maps to 0.5.
    """
    values = np.asarray(values, dtype=np.float64)
    unique, rank = np.unique(values, return_inverse=True)
    if len(unique) == 1:
        return np.full(values.shape, 0.5)
    return rank.reshape(values.shape) / (len(unique) - 1)


def _unit_keys(name: str, values, n: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ValueError(f"{name}: expected one value per op ({n}), got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name}: values must be finite")
    if ((values >= 0.0) & (values <= 1.0)).all():
        return values
    return rank_normalize(values)


def encode(placement, priority, transfer_priority, num_devices: int) -> np.ndarray:
    """A solution -> one chromosome that decodes back to it.

    The affinity block is one-hot (1.0 on the chosen device, 0.0 elsewhere).
    Priorities already in [0, 1] are stored as they are, so decode(encode(x)) == x;
    any other priority vector is rank-normalised first, which keeps the order
    and the ties (hence the schedule the simulator builds) but not the values.
    """
    d = int(num_devices)
    if d < 1:
        raise ValueError(f"num_devices must be positive, got {num_devices}")
    placement = np.asarray(placement)
    if placement.ndim != 1 or not np.issubdtype(placement.dtype, np.integer):
        raise ValueError(f"placement: expected a 1-D integer array, got {placement.dtype} "
                         f"shape {placement.shape}")
    n = len(placement)
    bad = (placement < 0) | (placement >= d)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise ValueError(f"placement: op {v} is on device {placement[v]}, "
                         f"outside 0..{d - 1}")
    keys = np.zeros(num_genes(n, d))
    affinity, prio, transfer = split(keys, n, d)
    affinity[np.arange(n), placement] = 1.0
    prio[:] = _unit_keys("priority", priority, n)
    transfer[:] = _unit_keys("transfer_priority", transfer_priority, n)
    return keys
