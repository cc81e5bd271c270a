"""Which is loose, the best-known value or the lower bound? (issue 39): the best any schedule
could do with the best-known placement, by a relaxation solved exactly per device.

For a fixed placement, device k's peak under any priorities and transfer order is at least

    R_k = min over run orders of k's ops of  max over ops v of  live_k(v),

where a run order is any order of k's ops that keeps every path of the graph (an op runs after
its ancestors, on any device), and live_k(v), the bytes on k right after v's allocations, keeps
only what the simulator's rules force (regal/sim/SIM_RULES.md): the persistent memory of every
op on k [R1]; v's temporary memory and new (non-alias) outputs [R4]; v's distinct inputs, a
tensor from another device at its size (the transferred copy) and one from k at its size or 0
when it is an alias [R5, R6]; and every non-alias tensor an op on k produced earlier that has
no consumer (never freed) or a consumer on k that has not run yet [R6]. The rest is dropped:
copies waiting for a transfer, transferred copies that arrive before their consumer is next,
alias holds. Each device runs one op at a time [R3], so its ops' start order is a run order,
and at each start what is listed is live: R_k <= peak[k], and max_k R_k <= the value of every
schedule of that placement.

R_k is exact by dynamic programming over the sets of k's ops that can have run (ideals of its
run orders), so only devices of at most `--max-ops` ops are solved (2^ops states). A bound
that knows the placement only through per-device orders (every bound of `regal.bounds`, and
every relaxation that drops the cross-device timing) can at best reach min over placements of
max_k R_k, which is at most max_k R_k of the best-known placement: if that is far below the
value, the value or the cross-device timing is where the gap is, not a weak packing argument.

    python experiments/placement_relaxation.py [--store data/bestknown/synth_test.jsonl]
        [--graphs runs/transfer_graphs/synth_test_100] [--devices 2 4] [--max-ops 27]
        [--max-graph-ops 100] [--out experiments/results/placement_relaxation.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from regal.bestknown_store import read_stores  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec, simulate  # noqa: E402

_INF = np.iinfo(np.int64).max


def _ancestors(graph) -> list[int]:
    """Per op, the bitmask (Python int) of its strict ancestors over data and control edges."""
    anc = [0] * graph.num_nodes
    pp, pr = graph.pred_ptr, graph.pred
    for v in graph.topo_order.tolist():
        mask = 0
        for u in pr[pp[v]:pp[v + 1]].tolist():
            mask |= anc[u] | (1 << u)
        anc[v] = mask
    return anc


def device_arrays(graph, placement: np.ndarray, k: int, anc: list[int]):
    """What the dynamic program of device k reads (indices local to k's ops, masks as int64):
    need [m]: the k-ops that must run before each; own [m]: the bytes of live_k(v) that do
    not depend on what ran before (temporary memory, new outputs, inputs from other devices;
    an alias input from k costs 0, a non-alias one is a held tensor, counted there while a
    reader on k has not run); held_* [h]: the non-alias tensors produced on k, their producer,
    size, the k-ops that read them and whether nothing reads them anywhere; base: persistent
    memory of k's ops; m."""
    ops = np.flatnonzero(placement == k)
    index = {int(v): i for i, v in enumerate(ops)}
    m = len(ops)
    size, alias = graph.tensor_size, graph.tensor_alias
    producer = graph.tensor_producer
    need = np.zeros(m, np.int64)
    own = np.zeros(m, np.int64)
    held_producer, held_size, held_readers, held_forever = [], [], [], []
    for i, v in enumerate(ops.tolist()):
        need[i] = sum(1 << index[u] for u in index if (anc[v] >> u) & 1)
        own[i] = int(graph.temporary_memory[v])
        for t in range(graph.output_ptr[v], graph.output_ptr[v + 1]):
            if alias[t] < 0:
                own[i] += int(size[t])
                readers = graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]]
                mask = sum(1 << index[int(c)] for c in readers if int(c) in index)
                held_producer.append(i)
                held_size.append(int(size[t]))
                held_readers.append(mask)
                held_forever.append(len(readers) == 0)
        inputs = set(graph.input_tensor[graph.input_ptr[v]:graph.input_ptr[v + 1]].tolist())
        for t in inputs:
            if placement[producer[t]] != k:
                own[i] += int(size[t])              # the transferred copy on k
            # from k: a non-alias input is a held tensor (counted there), an alias costs 0
    return (need, own, np.asarray(held_producer, np.int64), np.asarray(held_size, np.int64),
            np.asarray(held_readers, np.int64), np.asarray(held_forever, np.bool_),
            int(graph.persistent_memory[ops].sum()), m)


@njit(cache=True)
def _relaxed_peak(m, need, own, held_producer, held_size, held_readers, held_forever, base):
    """min over run orders of max over ops of live_k (module docstring), by dynamic
    programming over the sets of ops that have run (bitmasks, in increasing order: a set
    minus one op is a smaller number)."""
    states = 1 << m
    best = np.full(states, _INF, np.int64)
    best[0] = 0
    h = len(held_size)
    for done in range(states):
        if best[done] == _INF:
            continue
        # held tensors of ops that ran: never freed, or a reader on k has not run
        live = base
        for j in range(h):
            if (done >> held_producer[j]) & 1 and (held_forever[j]
                                                  or (held_readers[j] & ~done) != 0):
                live += held_size[j]
        for i in range(m):
            if (done >> i) & 1 or (need[i] & ~done) != 0:
                continue
            value = live + own[i]
            if value < best[done]:
                value = best[done]
            nxt = done | (1 << i)
            if value < best[nxt]:
                best[nxt] = value
    return best[states - 1]


def relaxed_peaks(graph, placement: np.ndarray, devices: int, max_ops: int) -> list:
    """R_k per device (None where k holds more than `max_ops` ops)."""
    anc = _ancestors(graph)
    out = []
    for k in range(devices):
        arrays = device_arrays(graph, placement, k, anc)
        m = arrays[-1]
        if m > max_ops:
            out.append(None)
            continue
        if m == 0:
            out.append(0)
            continue
        need, own, hp, hs, hr, hf, base, _ = arrays
        out.append(int(_relaxed_peak(m, need, own, hp, hs, hr, hf, base)))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=ROOT / "data/bestknown/synth_test.jsonl")
    parser.add_argument("--graphs", type=Path, default=ROOT / "runs/transfer_graphs/synth_test_100")
    parser.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-ops", type=int, default=27,
                        help="largest device solved (2^ops states, 8 bytes each)")
    parser.add_argument("--max-graph-ops", type=int, default=100)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "experiments/results/placement_relaxation.md")
    args = parser.parse_args(argv)
    if not args.store.is_file() or not args.graphs.is_dir():
        print(f"error: need the store {args.store} and the graphs {args.graphs} (make them "
              "with `python experiments/transfer.py`)", file=sys.stderr)
        return 2
    store = read_stores([args.store])
    graphs = {}
    for path in sorted(args.graphs.glob("*.npz")):
        graph = load_graph(path)
        if graph.num_nodes <= args.max_graph_ops:
            graphs[graph.fingerprint()] = (path.stem, graph)
    rows, ratios = [], {d: [] for d in args.devices}
    for entry in sorted(store.values(), key=lambda e: (e.graph, e.devices)):
        if entry.devices not in args.devices or entry.fingerprint not in graphs \
                or entry.objective != "peak_memory" or entry.memory_limit is not None:
            continue
        name, graph = graphs[entry.fingerprint]
        placement = np.asarray(entry.placement, np.int64)
        counts = np.bincount(placement, minlength=entry.devices)
        if counts.max() > args.max_ops:
            continue
        relaxed = relaxed_peaks(graph, placement, entry.devices, args.max_ops)
        peaks = simulate(graph, DeviceSpec(entry.devices), *entry.arrays()).peak
        if any(r > p for r, p in zip(relaxed, peaks.tolist())):   # the docstring's claim
            raise SystemExit(f"{name}, {entry.devices} devices: relaxed peaks {relaxed} above "
                             f"the simulated ones {peaks.tolist()}")
        top = max(relaxed)
        gap_value = 100.0 * (entry.value - top) / top
        gap_bound = 100.0 * (entry.value - entry.bound) / entry.bound if entry.bound else None
        ratios[entry.devices].append(gap_value)
        rows.append([name, graph.num_nodes, entry.devices, "/".join(map(str, counts.tolist())),
                     f"{entry.value:,.0f}", "-" if entry.bound is None else f"{entry.bound:,.0f}",
                     "-" if gap_bound is None else f"{gap_bound:.2f}",
                     "/".join(map(str, relaxed)), f"{top:,}", f"{gap_value:.2f}"])
        print(*rows[-1], flush=True)
    lines = ["# The best-known placement's relaxed peak (issue 39: which is loose?)", "",
             "Per graph of the store with at most "
             f"{args.max_graph_ops} ops and every device at most {args.max_ops} ops: the "
             "best-known value and bound (the store's), and R_k per device, the least peak any "
             "run order of the device's ops can have when only the memory the simulator's "
             "rules force is counted and the cross-device timing is dropped (exact, by dynamic "
             "programming; `experiments/placement_relaxation.py`'s docstring). max_k R_k is at "
             "most the value of every schedule of that placement, and at least what a bound "
             "that drops the cross-device timing can reach for it.", ""]
    lines += markdown_table(["graph", "ops", "devices", "ops per device", "best-known",
                             "bound", "certified gap %", "R_k per device", "max R_k",
                             "value over max R_k %"], rows, "lrrrrrrrrr")
    lines.append("")
    for d, values in ratios.items():
        if values:
            lines.append(f"- {d} devices: {len(values)} graphs; value over max R_k: median "
                         f"{statistics.median(values):.2f}%, within 1%: "
                         f"{sum(v <= 1.0 for v in values)}, within 5%: "
                         f"{sum(v <= 5.0 for v in values)}, largest {max(values):.2f}%")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(ratios):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
