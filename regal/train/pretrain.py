"""Supervised targets: a best-known store (regal.bestknown's JSON lines) read for the
supervised pretraining steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from regal.train.sources import GraphSource


@dataclass(frozen=True, eq=False)
class BestKnown:
    """One stored best-known solution as training reads it (`read_best_known`)."""

    fingerprint: str
    devices: int
    memory_limit: tuple | None
    objective: str
    value: float
    placement: np.ndarray          # [n] int
    priority: np.ndarray           # [n] (ranks or keys: only the order matters)
    transfer_priority: np.ndarray  # [n]

    @classmethod
    def from_entry(cls, entry) -> "BestKnown":
        """A `regal.bestknown.Entry` with numpy vectors."""
        fingerprint, devices, limit, objective = entry.key()
        return cls(fingerprint, devices, limit, objective, float(entry.value),
                   np.asarray(entry.placement, np.int64),
                   np.asarray(entry.priority, np.float64),
                   np.asarray(entry.transfer_priority, np.float64))


def read_best_known(path) -> list[BestKnown]:
    """The best entry per (fingerprint, devices, memory limit, objective) of a best-known
    store, or of several given as one comma-separated string ("a.jsonl,b.jsonl")
    (`regal.bestknown.read_stores`). ValueError naming the file when one is missing or none
    holds a solution."""
    from regal.bestknown import read_stores

    paths = [p for p in str(path).split(",") if p] if isinstance(path, str) else [path]
    try:
        best = read_stores(paths)
    except ValueError as exc:
        raise ValueError(f"pretrain_from: {exc}") from None
    if not best:
        raise ValueError(f"pretrain_from: {path} holds no best-known solution")
    return [BestKnown.from_entry(entry) for entry in best.values()]


def supervised_targets(entries: list[BestKnown], source: GraphSource) -> list[tuple]:
    """[(graph, DeviceSpec, entry)] for the entries whose graph is in `source` (matched by
    fingerprint; every graph of `source` is loaded once for it)."""
    from regal.sim import DeviceSpec

    wanted = {e.fingerprint for e in entries}
    graphs = {}
    for i in range(source.count):
        graph = source[i]
        if graph.fingerprint() in wanted:
            graphs[graph.fingerprint()] = graph
    out = []
    for e in entries:
        graph = graphs.get(e.fingerprint)
        if graph is None or graph.num_nodes != len(e.placement) or e.placement.max() >= e.devices:
            continue
        spec = DeviceSpec(e.devices, memory_limit=None if e.memory_limit is None
                          else list(e.memory_limit))
        out.append((graph, spec, e))
    if not out:
        raise ValueError(f"pretrain_from: none of its {len(entries)} entries is a graph of "
                         f"{source.spec}")
    return out


def _target_tables(policy, graph, spec, entry: BestKnown) -> tuple:
    """(features, per-head target log-likelihood tables) of one best-known solution."""
    from regal.policy.menus import target_log_likelihoods
    from regal.policy.reference import order_keys

    features = policy.features(graph, spec, entry.objective)
    reference = features.reference
    tables = target_log_likelihoods(policy.menus, reference, reference.target_slots(entry.placement),
                                    order_keys(entry.priority),
                                    order_keys(entry.transfer_priority))
    return features, {h: t for h, t in tables.items() if h in policy.learned}
