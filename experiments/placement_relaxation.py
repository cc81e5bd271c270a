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

Early arrivals (unless `--no-arrivals`; where `arrival_followers` proves them). The
relaxation above counts a copy transferred to k only while its reader runs. When links are
fast, the simulator's copies arrive much earlier: let every op last at least `dmin` > 0 and every op's
outputs take less than `dmin` to transfer, one after another. A channel (a, k) carries only
tensors produced on a, whose producers end at least `dmin` apart, so by induction it is idle
when a producer p ends; p's transfers start at once and end before e_p + dmin [R5, R7]. An op
w below a child q of p (a strict descendant of a strict descendant) starts at or after q
ends, at least e_p + dmin, so every copy of p's tensors has arrived when w starts. So R_k with
arrivals also counts the copy of a tensor T transferred to k from the first of k's ops that
reads T or lies below a child of T's producer, until every reader of T on k has run [R6];
it is still at most peak[k], and at least R_k.

How low can such a bound go at all? `least_relaxed_placement` searches over placements for
the least max_k R_k (moves of one colocation group at a time, from the best-known placement
and from random ones). Any placement it finds caps every timing-free bound: min over
placements of max_k R_k is at most its value. If the best-known value is far above that cap,
no bound that drops the cross-device timing can certify it closely, however clever.

Is the cap reachable, or is the value near the optimum? `timed_value` pins a placement and
searches the priorities alone with the simulator: done for the best-known placement (a
control: it should come back near the value) and for the least relaxed placement found with
arrivals. A search proves nothing, but if such placements stay far above the value once timed,
what the cap leaves is the timing (copies that arrive long before their reader can run, eager
starts), and the value is likely close to the optimum.

    python experiments/placement_relaxation.py [--store data/bestknown/synth_test.jsonl]
        [--graphs runs/transfer_graphs/synth_test_100] [--devices 2 4] [--max-ops 27]
        [--max-graph-ops 100] [--search-starts 3] [--search-iterations 2000]
        [--search-max-ops 20] [--seed 0] [--timed-budget 2000] [--no-arrivals]
        [--out experiments/results/placement_relaxation.md]
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

from regal.arguments import (check_device_counts, check_output, device_count,  # noqa: E402
                             non_negative_int, positive_int)
from regal.bestknown_store import read_stores  # noqa: E402
from regal.files import write_text  # noqa: E402
from regal.io import load_graph  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.sim import DeviceSpec, simulate  # noqa: E402
from regal.user_errors import UserError, refuse_empty  # noqa: E402

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


def arrival_followers(graph, devices: DeviceSpec) -> list[int] | None:
    """Per tensor, the bitmask (Python int) of the ops below a child of its producer, which
    start only after every transfer of it has ended; None where the fast-link rule of the
    module docstring does not hold (an op of cost 0, device speeds, or an op whose outputs
    take `dmin` or more to transfer)."""
    cost = np.asarray(graph.compute_cost, np.float64)
    if graph.num_nodes == 0 or devices.flops is not None \
            or devices.memory_bandwidth is not None or not (cost > 0).all():
        return None
    per_op = np.zeros(graph.num_nodes)
    np.add.at(per_op, np.asarray(graph.tensor_producer),
              devices.transfer_time(graph.tensor_size))
    if per_op.max() >= cost.min() * (1 - 1e-9):     # a margin far above float rounding
        return None
    below = [0] * graph.num_nodes                    # strict descendants
    for u in graph.topo_order[::-1].tolist():
        mask = 0
        for w in graph.successors(u).tolist():
            mask |= below[w] | (1 << w)
        below[u] = mask
    under_child = []
    for p in range(graph.num_nodes):
        mask = 0
        for q in graph.successors(p).tolist():
            mask |= below[q]
        under_child.append(mask)
    return [under_child[int(p)] for p in graph.tensor_producer]


def device_arrays(graph, placement: np.ndarray, k: int, anc: list[int],
                  followers: list[int] | None = None):
    """What the dynamic program of device k reads (indices local to k's ops, masks as int64):
    need [m]: the k-ops that must run before each; own [m]: the bytes of live_k(v) that do
    not depend on what ran before (temporary memory, new outputs, inputs from other devices;
    an alias input from k costs 0, a non-alias one is a held tensor, counted there while a
    reader on k has not run); held_* [h]: the non-alias tensors produced on k, the k-ops whose
    start allocates them (their producer), size, the k-ops that read them, whether nothing
    reads them anywhere and whether they arrive (False here); base: persistent memory of k's
    ops; m. With `followers` (`arrival_followers`), a copy transferred to k is a held item
    instead of part of its readers' `own`: allocated by the first of its readers and of the
    k-ops below a child of its producer (`arrives` True: counted at that op's start too)."""
    ops = np.flatnonzero(placement == k)
    index = {int(v): i for i, v in enumerate(ops)}
    m = len(ops)
    size, alias = graph.tensor_size, graph.tensor_alias
    producer = graph.tensor_producer
    need = np.zeros(m, np.int64)
    own = np.zeros(m, np.int64)
    held_by, held_size, held_readers, held_forever = [], [], [], []
    arrives = []
    for i, v in enumerate(ops.tolist()):
        need[i] = sum(1 << index[u] for u in index if (anc[v] >> u) & 1)
        own[i] = int(graph.temporary_memory[v])
        for t in range(graph.output_ptr[v], graph.output_ptr[v + 1]):
            if alias[t] < 0:
                own[i] += int(size[t])
                readers = graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]]
                mask = sum(1 << index[int(c)] for c in readers if int(c) in index)
                held_by.append(1 << i)
                held_size.append(int(size[t]))
                held_readers.append(mask)
                held_forever.append(len(readers) == 0)
                arrives.append(False)
        if followers is not None:
            continue
        inputs = set(graph.input_tensor[graph.input_ptr[v]:graph.input_ptr[v + 1]].tolist())
        for t in inputs:
            if placement[producer[t]] != k:
                own[i] += int(size[t])              # the transferred copy on k
            # from k: a non-alias input is a held tensor (counted there), an alias costs 0
    if followers is not None:                       # copies transferred to k, as held items
        for t in range(graph.num_tensors):
            if placement[producer[t]] == k:
                continue
            readers = graph.consumer[graph.consumer_ptr[t]:graph.consumer_ptr[t + 1]].tolist()
            mask = sum(1 << index[int(c)] for c in set(readers) if int(c) in index)
            if not mask:
                continue
            early = sum(1 << i for v, i in index.items() if (followers[t] >> v) & 1)
            held_by.append(mask | early)
            held_size.append(int(size[t]))
            held_readers.append(mask)
            held_forever.append(False)
            arrives.append(True)
    return (need, own, np.asarray(held_by, np.int64), np.asarray(held_size, np.int64),
            np.asarray(held_readers, np.int64), np.asarray(held_forever, np.bool_),
            np.asarray(arrives, np.bool_), int(graph.persistent_memory[ops].sum()), m)


# not cache=True: the tests load this script under another module name, and a cache written
# under one name fails to load under the other (a second `make test` failed)
@njit
def _relaxed_peak(m, need, own, held_by, held_size, held_readers, held_forever, arrives,
                  base):
    """min over run orders of max over ops of live_k (module docstring), by dynamic
    programming over the sets of ops that have run (bitmasks, in increasing order: a set
    minus one op is a smaller number). A held item is live once one of the ops `held_by`
    has run, until it is never freed or all its readers on k have run; an arriving copy is
    also live at the start of the op of `held_by` that allocates it."""
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
            if (held_by[j] & done) != 0 and (held_forever[j] or (held_readers[j] & ~done) != 0):
                live += held_size[j]
        for i in range(m):
            if (done >> i) & 1 or (need[i] & ~done) != 0:
                continue
            value = live + own[i]
            for j in range(h):    # a copy that arrived for i, or before i (held_by: readers too)
                if arrives[j] and (held_by[j] & done) == 0 and (held_by[j] >> i) & 1:
                    value += held_size[j]
            if value < best[done]:
                value = best[done]
            nxt = done | (1 << i)
            if value < best[nxt]:
                best[nxt] = value
    return best[states - 1]


def _device_peak(graph, placement: np.ndarray, k: int, anc: list[int], max_ops: int,
                 followers: list[int] | None = None) -> int:
    """R_k, or a number above any peak when k holds more than `max_ops` ops (not solved)."""
    arrays = device_arrays(graph, placement, k, anc, followers)
    m = arrays[-1]
    if m > max_ops:
        return _INF
    if m == 0:
        return 0
    return int(_relaxed_peak(m, *arrays[:-1]))


def relaxed_peaks(graph, placement: np.ndarray, devices: int, max_ops: int,
                  followers: list[int] | None = None) -> list:
    """R_k per device (None where k holds more than `max_ops` ops); with `followers`
    (`arrival_followers`), R_k with early arrivals."""
    anc = _ancestors(graph)
    peaks = (_device_peak(graph, placement, k, anc, max_ops, followers)
             for k in range(devices))
    return [None if peak == _INF else peak for peak in peaks]


def least_relaxed_placement(graph, devices: int, start: np.ndarray, iterations: int,
                            rng: np.random.Generator, max_ops: int = 27,
                            followers: list[int] | None = None):
    """(max_k R_k, placement): a local search over placements for the least max_k R_k, from
    `start`. Each step moves one colocation group (never a pinned one) to another device,
    mostly one of the device whose R_k is the largest, and keeps the move when (max_k R_k,
    the R_k in decreasing order) does not grow. What it finds is a placement whose relaxed
    peak is that low, so it is an upper bound on min over placements of max_k R_k: on what
    any bound that drops the cross-device timing can reach."""
    anc = _ancestors(graph)
    placement = np.asarray(start, np.int64).copy()
    leader = np.asarray(graph.colocation, np.int64)
    pinned = np.asarray(graph.pinned, np.int64)
    placement = placement[leader]                       # a group on its leader's device
    placement[pinned >= 0] = pinned[pinned >= 0]
    free = np.flatnonzero((leader == np.arange(graph.num_nodes)) & (pinned < 0))
    peaks = [_device_peak(graph, placement, k, anc, max_ops, followers) for k in range(devices)]
    best = (max(peaks), sorted(peaks, reverse=True))
    if devices < 2 or not len(free):
        return best[0], placement
    for _ in range(iterations):
        worst = int(np.argmax(peaks))
        on_worst = free[placement[free] == worst]
        v = int(rng.choice(on_worst)) if len(on_worst) and rng.random() < 0.7 \
            else int(rng.choice(free))
        source = int(placement[v])
        target = int(rng.integers(devices - 1))
        target += target >= source
        group = leader == v
        placement[group] = target
        trial = list(peaks)
        trial[source] = _device_peak(graph, placement, source, anc, max_ops, followers)
        trial[target] = _device_peak(graph, placement, target, anc, max_ops, followers)
        key = (max(trial), sorted(trial, reverse=True))
        if key <= best:
            peaks, best = trial, key
        else:
            placement[group] = source
    return best[0], placement


def _least_found(graph, devices: int, placement: np.ndarray, top: int, args,
                 rng: np.random.Generator, followers: list[int] | None = None):
    """(least, where): the least max_k R_k `least_relaxed_placement` finds
    (`--search-starts` starts: the best-known placement, then random ones), never above `top`,
    the best-known placement's, and the placement that has it (None when none is below
    `top`)."""
    least, best = top, None
    for start in range(args.search_starts):
        origin = placement if start == 0 else rng.integers(devices, size=graph.num_nodes)
        found, where = least_relaxed_placement(graph, devices, origin, args.search_iterations,
                                               rng, args.search_max_ops, followers)
        if found < least:
            check = relaxed_peaks(graph, where, devices, args.max_ops, followers)
            assert max(check) == found, (check, found)
            least, best = found, where.copy()
    return least, best


def timed_value(graph, devices: int, placement: np.ndarray, budget: int, seed: int) -> float:
    """The least simulated peak a search over priorities alone finds for `placement` (BRKGA,
    `budget` evaluations, every op pinned where the placement puts it): what that placement
    is worth once the cross-device timing counts, as far as a search can tell."""
    from regal.optimizers import solve
    from regal.problem import Problem

    pinned = graph._replace(pinned=np.asarray(placement, np.int32))
    return solve("brkga", Problem(pinned, DeviceSpec(devices), "peak_memory"), budget,
                 seed=seed).value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=ROOT / "data/bestknown/synth_test.jsonl")
    parser.add_argument("--graphs", type=Path, default=ROOT / "runs/transfer_graphs/synth_test_100")
    parser.add_argument("--devices", type=device_count, nargs="+", default=[2, 4])
    parser.add_argument("--max-ops", type=positive_int, default=27,
                        help="largest device solved (2^ops states, 8 bytes each)")
    parser.add_argument("--max-graph-ops", type=positive_int, default=100)
    parser.add_argument("--search-starts", type=non_negative_int, default=3,
                        help="searches for the least max R_k over placements: from the "
                             "best-known placement, then from random ones (0: no search)")
    parser.add_argument("--search-iterations", type=non_negative_int, default=2000)
    parser.add_argument("--search-max-ops", type=positive_int, default=20,
                        help="the search keeps every device at most this many ops")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--timed-budget", type=non_negative_int, default=2000,
                        help="evaluations of the priority search that times the placements "
                             "(the best-known one and the least found with arrivals); 0: none")
    parser.add_argument("--no-arrivals", action="store_true",
                        help="leave out the columns of R_k with early arrivals")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "experiments/results/placement_relaxation.md")
    args = parser.parse_args(argv)
    check_device_counts(args)
    if not args.store.is_file():
        raise UserError(f"--store {args.store}: no such file (make it with `python "
                        "experiments/transfer.py`)")
    if not args.graphs.is_dir():
        raise UserError(f"--graphs {args.graphs}: no such folder (make it with `python "
                        "experiments/transfer.py`)")
    check_output("--out", args.out, inputs=(args.store,))
    store = read_stores([args.store])
    graphs = {}
    for path in sorted(args.graphs.glob("*.npz")):
        graph = load_graph(path)
        if graph.num_nodes <= args.max_graph_ops:
            graphs[graph.fingerprint()] = (path.stem, graph)
    rows, ratios = [], {d: [] for d in args.devices}
    found_gaps = {d: [] for d in args.devices}
    over_bound = {d: [] for d in args.devices}
    arrival_gaps = {d: [] for d in args.devices}
    timed = {d: [] for d in args.devices}
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
        least, _ = _least_found(graph, entry.devices, placement, top, args,
                                np.random.default_rng([args.seed, entry.devices,
                                                       graph.num_nodes]))
        gap_least = 100.0 * (entry.value - least) / least
        followers = None if args.no_arrivals \
            else arrival_followers(graph, DeviceSpec(entry.devices))
        arrived = ["-"] * 6
        if followers is not None:
            with_arrivals = relaxed_peaks(graph, placement, entry.devices, args.max_ops,
                                          followers)
            if any(r > p for r, p in zip(with_arrivals, peaks.tolist())):
                raise SystemExit(f"{name}, {entry.devices} devices: relaxed peaks with "
                                 f"arrivals {with_arrivals} above the simulated ones "
                                 f"{peaks.tolist()}")
            least_arrived, where = _least_found(
                graph, entry.devices, placement, max(with_arrivals), args,
                np.random.default_rng([args.seed, entry.devices, graph.num_nodes, 1]), followers)
            arrival_gaps[entry.devices].append(100.0 * (entry.value - least_arrived)
                                               / least_arrived)
            arrived = [f"{max(with_arrivals):,}", f"{least_arrived:,}",
                       f"{arrival_gaps[entry.devices][-1]:.2f}"]
            if args.timed_budget and where is not None:
                control, found = (timed_value(graph, entry.devices, p, args.timed_budget,
                                              args.seed) for p in (placement, where))
                timed[entry.devices].append((100.0 * (control - entry.value) / entry.value,
                                             100.0 * (found - entry.value) / entry.value))
                arrived += [f"{control:,.0f}", f"{found:,.0f}",
                            f"{timed[entry.devices][-1][1]:+.2f}"]
            else:
                arrived += ["-"] * 3
        found_gaps[entry.devices].append(gap_least)
        if entry.bound:
            over_bound[entry.devices].append(100.0 * (least - entry.bound) / entry.bound)
        gap_bound = 100.0 * (entry.value - entry.bound) / entry.bound if entry.bound else None
        ratios[entry.devices].append(gap_value)
        rows.append([name, graph.num_nodes, entry.devices, "/".join(map(str, counts.tolist())),
                     f"{entry.value:,.0f}", "-" if entry.bound is None else f"{entry.bound:,.0f}",
                     "-" if gap_bound is None else f"{gap_bound:.2f}",
                     "/".join(map(str, relaxed)), f"{top:,}", f"{gap_value:.2f}",
                     f"{least:,}", f"{gap_least:.2f}", *arrived])
        print(*rows[-1], flush=True)
    lines = ["# The best-known placement's relaxed peak (issue 39: which is loose?)", "",
             "Per graph of the store with at most "
             f"{args.max_graph_ops} ops and every device at most {args.max_ops} ops: the "
             "best-known value and bound (the store's), and R_k per device, the least peak any "
             "run order of the device's ops can have when only the memory the simulator's "
             "rules force is counted and the cross-device timing is dropped (exact, by dynamic "
             "programming; `experiments/placement_relaxation.py`'s docstring). max_k R_k is at "
             "most the value of every schedule of that placement, and at least what a bound "
             "that drops the cross-device timing can reach for it. The last two "
             "columns: the least max_k R_k a local search over placements found "
             f"({args.search_starts} starts: the best-known placement, then random ones; "
             f"{args.search_iterations} moves each; devices of at most {args.search_max_ops} "
             "ops): no bound that knows no more than R_k does (per-device run orders and the "
             "memory they force, no cross-device timing) can be above it; and the "
             "best-known value over it: the smallest certified gap such a bound could give. "
             "The three columns after them: the same with early arrivals (the module "
             "docstring; '-' where the fast-link rule does not hold): max_k R_k of the "
             "best-known placement, the least found over placements (another search, "
             "the same starts and moves) and the value over it, the smallest certified gap "
             "a bound that also knows when copies arrive (but not the eager starts) could "
             "give. The last three: both placements timed (`timed_value`: a search over "
             f"priorities alone, BRKGA, {args.timed_budget:,} evaluations, every op pinned): "
             "the best-known placement (a control: the search should come back near the "
             "best-known value) and the least found with arrivals, and the latter over the "
             "best-known value: how much of its low relaxed peak is left once the devices "
             "run in parallel.",
             ""]
    lines += markdown_table(["graph", "ops", "devices", "ops per device", "best-known",
                             "bound", "certified gap %", "R_k per device", "max R_k",
                             "value over max R_k %", "least max R_k found, any placement",
                             "value over it %", "max R_k, arrivals",
                             "least found, arrivals", "value over it, arrivals %",
                             "best-known placement, timed", "least found, timed",
                             "timed over best-known %"],
                            rows, "lrrrrrrrrrrrrrrrrr")
    lines.append("")
    for d, values in ratios.items():
        if values:
            lines.append(f"- {d} devices: {len(values)} graphs; value over max R_k: median "
                         f"{statistics.median(values):.2f}%, within 1%: "
                         f"{sum(v <= 1.0 for v in values)}, within 5%: "
                         f"{sum(v <= 5.0 for v in values)}, largest {max(values):.2f}%")
    def spread(values: list) -> str:
        return (f"median {statistics.median(values):.2f}%, at most 5%: "
                f"{sum(v <= 5.0 for v in values)} of {len(values)}, largest {max(values):.2f}%")

    summary = [f"- {d} devices: the best-known value over the least max R_k found over "
               f"placements: {spread(values)}; that least max R_k over the store's bound: "
               f"median {statistics.median(over_bound[d]):.2f}%"
               for d, values in found_gaps.items() if values]
    summary += [f"- {d} devices, with early arrivals ({len(values)} graphs): the best-known "
                f"value over the least max R_k found: {spread(values)}"
                for d, values in arrival_gaps.items() if values]
    summary += [f"- {d} devices, timed ({len(pairs)} graphs): the best-known placement's "
                f"priority search {statistics.median(p[0] for p in pairs):+.2f}% median over "
                f"the best-known value (largest {max(p[0] for p in pairs):+.2f}%); the least "
                f"relaxed placement found with arrivals, timed: median "
                f"{statistics.median(p[1] for p in pairs):+.2f}% over it (least "
                f"{min(p[1] for p in pairs):+.2f}%, below it on "
                f"{sum(p[1] < 0 for p in pairs)})"
                for d, pairs in timed.items() if pairs]
    lines += summary
    refuse_empty(rows, f"--store {args.store} with --graphs {args.graphs} (no key of at most "
                       f"--max-graph-ops ops and --max-ops ops per device)")
    write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines[-len(ratios) - len(summary):]))
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("placement_relaxation.py", main))
