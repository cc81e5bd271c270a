"""Chromosome layout and decoding (docs/design.md §5, SIM_RULES 12-13).

For `n` ops and `d` devices a chromosome holds `n * (d + 2)` keys in [0, 1]:

    keys[:n*d].reshape(n, d)   affinity: dev(v) = argmax_k affinity[v, k], ties to the lower k
    keys[n*d : n*d+n]          priority of op v (higher runs first)
    keys[n*d+n : n*d+2n]       transfer priority of every tensor v produces

Colocation groups and pins (SIM_RULES 13): a group's device is decided once, by its pin,
else by its leader's affinity row, and every member takes it; so any keys decode to a
placement that respects the graph's constraints. `respect_colocation` projects a
placement that does not (for methods that place ops directly).

Blocks are per node, so a policy's per-node parameters broadcast over them simply.
`encode` maps any method's solution back to keys, so it can seed the BRKGA.
"""

from __future__ import annotations

import numpy as np

from regal.graph import op_bytes

__all__ = ["num_genes", "num_devices", "split", "decode", "encode", "order_priority",
           "rank_normalize",
           "respect_colocation", "colocation_violation", "schedule_digests"]


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
    if graph.constrained:
        _check_pins(graph, d)
        # SIM_RULES 13: the leader's row decides for its group; a pin overrides the keys
        placement = np.argmax(affinity[..., graph.colocation, :], axis=-1).astype(np.int32)
        placement = np.where(graph.pinned >= 0, graph.pinned, placement).astype(np.int32)
    else:
        placement = np.argmax(affinity, axis=-1).astype(np.int32)  # first maximum = lower device
    return placement, priority.copy(), transfer.copy()


def schedule_digests(graph, placement, priority, transfer) -> list[bytes]:
    """One 16-byte digest per decoded solution [B, n]: equal digests, equal simulation.

    Why: a search that proposes the same schedule twice should not pay twice. The
    simulator compares priorities only among the ops of one device (SIM_RULES 3, ties by
    lower id) and transfer priorities only among the transfers of one channel (rule 5, ties
    by lower tensor id, and tensor ids follow their producers' ids). So a solution is
    determined by its placement, each device's ops in (priority, id) order, and each
    device's sending ops (a consumer elsewhere) in (transfer priority, id) order; the
    transfer keys of ops that send nothing never matter. Chromosomes that differ only in
    what these leave out simulate identically, whatever the objective or memory limits.
    """
    import hashlib

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
    placement = placement.astype(np.int32)
    return [hashlib.blake2b(placement[i].tobytes() + run_order[i].tobytes()
                            + send_order[i].tobytes(), digest_size=16).digest()
            for i in range(rows)]


def _check_pins(graph, d: int) -> None:
    from regal.graph import check_pins
    check_pins(graph.names, graph.pinned, d)


def colocation_violation(graph, placement) -> tuple[int, str] | None:
    """(op, reason) for the first op whose device breaks its group or pin, else None."""
    if not graph.constrained:
        return None
    placement = np.asarray(placement)
    pinned = graph.pinned
    bad = (pinned >= 0) & (placement != pinned)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(graph.colocation[v])
        group = "" if L == v else f" (colocation group of {str(graph.names[L])!r})"
        return v, (f"op {str(graph.names[v])!r} is on device {placement[v]}, but its group"
                   f"{group} is pinned to device {pinned[v]}")
    bad = placement != placement[graph.colocation]
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        L = int(graph.colocation[v])
        return v, (f"op {str(graph.names[v])!r} is on device {placement[v]}, but its "
                   f"colocation group leader {str(graph.names[L])!r} is on device "
                   f"{placement[L]}; a group runs on one device")
    return None


def respect_colocation(graph, placement) -> np.ndarray:
    """`placement` with every group on one device and every pin kept, moving few bytes.

    Each group goes to its pin; else to the device holding most of its members' bytes
    (persistent + temporary + outputs), which moves the fewest of them; by op count when
    the group holds no bytes; ties go to the leader's device when it is among the best,
    else to the lowest. A conforming placement comes back unchanged.
    Pins are not range-checked here (the simulator and `decode` check them against d).
    """
    placement = np.asarray(placement)
    if placement.shape != (graph.num_nodes,) or not np.issubdtype(placement.dtype, np.integer):
        raise ValueError(f"placement: expected one integer device per op "
                         f"({graph.num_nodes}), got {placement.dtype} shape {placement.shape}")
    placement = placement.astype(np.int32)
    if colocation_violation(graph, placement) is None:
        return placement
    leaders = graph.colocation
    d = int(max(placement.max(initial=0), graph.pinned.max(initial=-1))) + 1
    weight = op_bytes(graph)  # each op votes with the bytes it holds
    votes = np.zeros((graph.num_nodes, d))
    np.add.at(votes, (leaders, placement), weight)
    counts = np.zeros((graph.num_nodes, d))
    np.add.at(counts, (leaders, placement), 1.0)
    empty = votes.sum(axis=1) == 0
    votes[empty] = counts[empty]
    best = votes.max(axis=1, keepdims=True)
    choice = np.argmax(votes == best, axis=1)  # lowest device among the best
    # row L of `votes` is group L's: its leader's own device wins a tie
    keep_leader = votes[np.arange(graph.num_nodes), placement] == best[:, 0]
    choice = np.where(keep_leader, placement, choice)
    result = choice[leaders]
    result = np.where(graph.pinned >= 0, graph.pinned, result)
    return result.astype(np.int32)


def order_priority(order) -> np.ndarray:
    """Priority keys that run the ops in `order` (a permutation of 0..n-1) first to last:
    the first gets 1.0, the last 0.0, evenly spaced and distinct (one op: 0.5)."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    keys = np.empty(n)
    keys[order] = np.linspace(1.0, 0.0, n) if n > 1 else 0.5
    return keys


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


def encode(placement, priority, transfer_priority, num_devices: int,
           graph=None) -> np.ndarray:
    """A solution -> one chromosome that decodes back to it.

    The affinity block is one-hot (1.0 on the chosen device, 0.0 elsewhere).
    Priorities already in [0, 1] are stored as they are, so decode(encode(x)) == x;
    any other priority vector is rank-normalised first, which keeps the order
    and the ties (hence the schedule the simulator builds) but not the values.
    Keys always decode to a placement that respects the graph's groups and pins (the
    leader's row decides); given `graph`, a placement that breaks them is first projected
    by `respect_colocation`, so the keys decode to that projection.
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
    if graph is not None:
        placement = respect_colocation(graph, placement)
    keys = np.zeros(num_genes(n, d))
    affinity, prio, transfer = split(keys, n, d)
    affinity[np.arange(n), placement] = 1.0
    prio[:] = _unit_keys("priority", priority, n)
    transfer[:] = _unit_keys("transfer_priority", transfer_priority, n)
    return keys
