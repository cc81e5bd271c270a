"""A lower bound that keeps the timing, by exhaustive search over the simulator's own events
(issue 39; a research experiment, not a method: its state count explodes on the graphs the
issue's targets name, and this script measures that).

The bounds of `regal.bounds` and CP-SAT's one-at-a-time models drop the cross-device timing,
and on small graphs at 4 devices that is what they lose (`placement_relaxation.py`). This
search replays the simulator's event loop (SIM_RULES 7) and, wherever the simulator would
consult a placement or a priority, branches over every choice instead:

- an op's device, decided when its first predecessor finishes (or at time 0 for an op with
  none): before that nothing depends on it (it cannot be ready, no copy goes towards it,
  no free waits on it) except its persistent memory, which is live for the whole run and so
  adds the same bytes to every instant of the device's curve, past ones included;
- at each instant, after the finishes and frees of SIM_RULES 7a, which ready op each idle
  device starts and which ready copy each idle channel sends (7b).

Every simulated schedule is one path of this tree (its placement and priorities make one
choice at each branch), so the least peak over the leaves is at most the simulator's optimum:
a valid lower bound, and a proof of optimality when it equals a simulated value. A device's
choices can always be realised by static priorities (its start order), so the search relaxes
only the transfer order. `follow` replays one given solution instead of branching: it gives
the simulator's peaks to the byte (tests/test_event_search.py holds the event loop to that).

Interchangeable devices (no speeds, no pins, one limit for all) are labelled by first use.
A state's future depends only on its present (what runs and for how long, what is placed
and not finished, which copies are live, each device's persistent bytes), not on its past,
so states met again are pruned when an earlier visit had no larger peak on any device; a
look-ahead prunes a state once some op not started must start above the target.

Measured (session 46): exact on every tiny graph of tests/test_exact.py (4-7 ops, the
exhaustive optimum, well under a second each), but on inception_infer_40 at 2 devices
22,769 / 65,478 / 361,530 states refute a target 1 byte / 0.05% / 0.2% above the floor, where
the open gap is 1.04% (about 10^9 states by extrapolation), and on a 53-op synthetic test
graph not even "peak < floor + 1 byte" is refuted in half a minute: the branching is almost
all placement (`experiments/results/event_search.md`).

    .venv/bin/python experiments/event_search.py [--graphs inception_infer_40 test_00018]
        [--devices 2 4] [--above-pct 0 0.05 0.2] [--time-limit 60]

prints, per graph, device count and target (the floor, `regal.bounds.lower_bound`, plus
ABOVE percent of it and at least 1 byte), whether the search refuted it (a proven bound),
and the states it expanded."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _OutOfTime(Exception):
    pass


class SearchBound(NamedTuple):
    """`value`: proven lower bound on max_k peak[k] (bytes); `complete`: the search ran to
    the end, so `value` is the least peak over every schedule the search admits (and equals
    the optimum when a simulated solution reaches it); `states`: states expanded."""
    value: int
    complete: bool
    states: int
    seconds: float


class EventSearch:
    """The search tree over one graph on `devices` (a regal.sim.DeviceSpec)."""

    def __init__(self, graph, devices) -> None:
        from regal.sim.speeds import op_durations

        n, d = graph.num_nodes, devices.count
        self.n, self.d = n, d
        durations = op_durations(graph, devices)  # [d, n] float64, SIM_RULES 3
        if durations is None:
            durations = np.tile(np.asarray(graph.compute_cost, np.float64), (d, 1))
        self.dur = [[float(x) for x in row] for row in durations]
        self.size = [int(s) for s in graph.tensor_size]
        self.alias = [int(a) for a in graph.tensor_alias]
        self.producer = [int(p) for p in graph.tensor_producer]
        self.temp = [int(x) for x in graph.temporary_memory]
        self.pers = [int(x) for x in graph.persistent_memory]
        bw, lat = float(devices.bandwidth), float(devices.latency)
        self.tr_dur = [lat + float(s) / bw for s in graph.tensor_size]
        self.inputs = [sorted({int(t) for t in graph.inputs(v)}) for v in range(n)]
        self.outputs = [[int(t) for t in graph.outputs(v)] for v in range(n)]
        self.consumers = [sorted({int(c) for c in graph.consumers(t)})
                          for t in range(graph.num_tensors)]
        self.control = [sorted({int(u) for u in
                                graph.control_pred[graph.control_ptr[v]:graph.control_ptr[v + 1]]})
                        for v in range(n)]
        succ = [set() for _ in range(n)]
        for v in range(n):
            for t in self.inputs[v]:
                succ[self.producer[t]].add(v)
            for u in self.control[v]:
                succ[u].add(v)
        self.succ = [sorted(s) for s in succ]
        self.sources = [v for v in range(n) if not self.inputs[v] and not self.control[v]]
        # for the look-ahead: v and its descendants as a bit mask, each tensor's consumers,
        # and the least bytes v's device holds while v starts apart from what is live now
        below = [0] * n
        for v in reversed([int(u) for u in graph.topo_order]):
            below[v] = 1 << v
            for w in self.succ[v]:
                below[v] |= below[w]
        self.below = below
        self.cons_mask = [sum(1 << c for c in cs) for cs in self.consumers]
        home = [0 if a >= 0 else sz for a, sz in zip(self.alias, self.size)]
        self.home_cost = home
        self.own = [self.temp[v] + sum(home[t] for t in self.outputs[v]) for v in range(n)]
        self.children = [[] for _ in range(graph.num_tensors)]  # alias children
        for t2, t1 in enumerate(self.alias):
            if t1 >= 0:
                self.children[t1].append(t2)
        leader = [int(x) for x in graph.colocation]
        self.group = {}
        for v in range(n):
            self.group.setdefault(leader[v], []).append(v)
        self.leader = leader
        self.pinned = [int(x) for x in graph.pinned]
        limit = devices.memory_limit
        same_limit = limit is None or np.ndim(limit) == 0 or len(set(np.ravel(limit))) == 1
        self.symmetric = (not devices.has_speeds and not any(p >= 0 for p in self.pinned)
                          and same_limit)

    # ------------------------------------------------------------------ state
    def _initial(self) -> dict:
        d = self.d
        return dict(now=0.0, dev=[-1] * self.n, used=0, finished=set(), started=set(),
                    running=[None] * d, channel={}, pending=set(), done=set(), live=set(),
                    freed=set(), mem=[0] * d, peak=[0] * d, persistent=[0] * d,
                    on=[0] * d,
                    to_place=list(self.sources), just=[], stage="place", skip=set())

    @staticmethod
    def _copy(s: dict) -> dict:
        return dict(now=s["now"], dev=list(s["dev"]), used=s["used"],
                    finished=set(s["finished"]), started=set(s["started"]),
                    running=list(s["running"]), channel=dict(s["channel"]),
                    pending=set(s["pending"]), done=set(s["done"]), live=set(s["live"]),
                    freed=set(s["freed"]), mem=list(s["mem"]), peak=list(s["peak"]),
                    persistent=list(s["persistent"]), on=list(s["on"]),
                    to_place=list(s["to_place"]),
                    just=list(s["just"]), stage=s["stage"], skip=set(s["skip"]))

    def _copy_bytes(self, s, t: int, k: int) -> int:
        home = s["dev"][self.producer[t]]
        return 0 if (k == home and self.alias[t] >= 0) else self.size[t]

    def _present(self, s, t: int, k: int) -> bool:
        p = self.producer[t]
        if s["dev"][p] == k:
            return p in s["finished"]
        return (t, k) in s["done"]

    def _ready(self, s, v: int) -> bool:
        k = s["dev"][v]
        return (all(self._present(s, t, k) for t in self.inputs[v])
                and all(u in s["finished"] for u in self.control[v]))

    def _may_free(self, s, t: int, k: int) -> bool:
        for t2 in self.children[t]:
            if s["dev"][self.producer[t2]] == k and (t2, k) not in s["freed"]:
                return False  # SIM_RULES 6: an alias copy on k holds its source's copy
        dev, fin = s["dev"], s["finished"]
        here = [c for c in self.consumers[t] if dev[c] == k]
        if any(c not in fin for c in here):
            return False
        p = self.producer[t]
        if dev[p] == k:
            if not self.consumers[t] or p not in fin:
                return False
            return not any(x[0] == t for x in s["pending"]) and not any(
                v[0] == t for v in s["channel"].values())
        return True

    def _free(self, s) -> None:
        changed = True
        while changed:
            changed = False
            for t, k in sorted(s["live"]):
                if self._may_free(s, t, k):
                    s["live"].remove((t, k))
                    s["freed"].add((t, k))
                    s["mem"][k] -= self._copy_bytes(s, t, k)
                    changed = True

    def _allocate(self, s, k: int, nbytes: int) -> None:
        s["mem"][k] += nbytes
        if s["mem"][k] > s["peak"][k]:
            s["peak"][k] = s["mem"][k]

    # -------------------------------------------------------------- the moves
    def _place(self, s, v: int, k: int) -> None:
        for u in self.group[self.leader[v]]:
            s["dev"][u] = k
            s["on"][k] |= 1 << u
            s["persistent"][k] += self.pers[u]
            s["mem"][k] += self.pers[u]
            s["peak"][k] += self.pers[u]  # live for the whole run: every instant, past too
        s["used"] = max(s["used"], k + 1)

    def _start_op(self, s, k: int, v: int) -> None:
        s["started"].add(v)
        s["running"][k] = (v, s["now"] + self.dur[k][v])
        self._allocate(s, k, self.temp[v])
        for t in self.outputs[v]:
            s["live"].add((t, k))
            self._allocate(s, k, self._copy_bytes(s, t, k))

    def _start_transfer(self, s, src: int, t: int, k: int) -> None:
        s["pending"].remove((t, k))
        s["channel"][(src, k)] = (t, k, s["now"] + self.tr_dur[t])
        s["live"].add((t, k))
        self._allocate(s, k, self.size[t])

    def placement_options(self, s, v: int) -> list[int]:
        pin = self.pinned[self.leader[v]]
        if pin >= 0:
            return [pin]
        if self.symmetric:
            return list(range(min(s["used"] + 1, self.d)))
        return list(range(self.d))

    def advance(self, s):
        """Runs the event loop from `s` until a choice is needed: returns ("place", v),
        ("op", k, ready ops) or ("copy", (src, dst), ready copies as (tensor, dst)); or None
        when every op and copy has run."""
        while True:
            if s["stage"] == "finish":  # SIM_RULES 7a
                now, just = s["now"], []
                for k in range(self.d):
                    r = s["running"][k]
                    if r is not None and r[1] == now:
                        s["running"][k] = None
                        s["finished"].add(r[0])
                        s["mem"][k] -= self.temp[r[0]]
                        just.append(r[0])
                for ch in sorted(s["channel"]):
                    t, k, end = s["channel"][ch]
                    if end == now:
                        del s["channel"][ch]
                        s["done"].add((t, k))
                for v in just:
                    for w in self.succ[v]:
                        if s["dev"][w] < 0 and w not in s["to_place"]:
                            s["to_place"].append(w)
                s["just"] = just
                s["stage"] = "place"
            if s["stage"] == "place":
                while s["to_place"] and s["dev"][s["to_place"][0]] >= 0:
                    s["to_place"].pop(0)  # placed with its group
                if s["to_place"]:
                    return ("place", s["to_place"][0])
                for v in s["just"]:  # SIM_RULES 5: copies ready when the producer finishes
                    home = s["dev"][v]
                    for t in self.outputs[v]:
                        for k in sorted({s["dev"][c] for c in self.consumers[t]}):
                            if k != home:
                                s["pending"].add((t, k))
                s["just"] = []
                self._free(s)
                s["stage"] = "start"
                s["skip"] = set()
            if s["stage"] == "start":  # SIM_RULES 7b
                for k in range(self.d):
                    if s["running"][k] is None and ("op", k) not in s["skip"]:
                        ready = [v for v in range(self.n) if s["dev"][v] == k
                                 and v not in s["started"] and self._ready(s, v)]
                        if ready:
                            return ("op", k, ready)
                        s["skip"].add(("op", k))
                for src in range(self.d):
                    for dst in range(self.d):
                        ch = (src, dst)
                        if src == dst or ch in s["channel"] or ("copy", ch) in s["skip"]:
                            continue
                        ready = sorted((t, k) for t, k in s["pending"] if k == dst
                                       and s["dev"][self.producer[t]] == src)
                        if ready:
                            return ("copy", ch, ready)
                        s["skip"].add(("copy", ch))
                ends = [r[1] for r in s["running"] if r is not None] + \
                    [c[2] for c in s["channel"].values()]
                if not ends:
                    return None
                s["now"] = min(ends)   # 7c: an end at this instant is handled next, at once
                s["stage"] = "finish"

    def apply(self, s, choice, option) -> None:
        """Makes `option` at `choice` (as `advance` returned them) in `s`."""
        if choice[0] == "place":
            self._place(s, choice[1], option)
        elif choice[0] == "op":
            self._start_op(s, choice[1], option)
            s["skip"].add(("op", choice[1]))
        else:
            self._start_transfer(s, choice[1][0], *option)
            s["skip"].add(("copy", choice[1]))

    def options(self, s, choice) -> list:
        if choice[0] == "place":
            return self.placement_options(s, choice[1])
        return list(choice[2])

    def look_ahead(self, s) -> int:
        """A lower bound on the final max_k peak[k] from `s`: each device's peak so far, and
        for each op not started the bytes its device must hold when it starts (SIM_RULES
        4, 6): the device's persistent memory; every copy live there now that a consumer on
        the device which is the op or one of its descendants still needs (it cannot be
        freed before the op starts), or that nobody consumes (never freed); the op's inputs
        not yet there (at least their cost on their producer's device); its outputs and
        temporary memory. An op not placed yet goes at best to the device with the least
        persistent memory, bringing its own."""
        best = max(s["peak"])
        dev, started, live = s["dev"], s["started"], s["live"]
        per_device = [[] for _ in range(self.d)]
        for t, k in live:
            per_device[k].append(t)
        least = min(s["persistent"])
        for v in range(self.n):
            if v in started:
                continue
            k = dev[v]
            if k < 0:
                need = least + self.pers[v] + self.own[v] + sum(
                    self.home_cost[t] for t in self.inputs[v])
            else:
                mask = self.below[v] & s["on"][k]
                need = s["persistent"][k] + self.own[v]
                here = set()
                for t in per_device[k]:
                    cm = self.cons_mask[t]
                    if cm == 0 or cm & mask:
                        here.add(t)
                        need += self._copy_bytes(s, t, k)
                need += sum(self.home_cost[t] for t in self.inputs[v] if t not in here)
            if need > best:
                best = need
        return best

    # --------------------------------------------------------------- replay
    def follow(self, placement, priority, transfer_priority) -> list[int]:
        """Each device's peak when every choice is the simulator's for this solution."""
        s = self._initial()
        while True:
            choice = self.advance(s)
            if choice is None:
                return list(s["peak"])
            if choice[0] == "place":
                option = int(placement[choice[1]])
            elif choice[0] == "op":
                option = min(choice[2], key=lambda v: (-float(priority[v]), v))
            else:
                option = min(choice[2], key=lambda x: (-float(transfer_priority[
                    self.producer[x[0]]]), x[0]))
            self.apply(s, choice, option)

    # --------------------------------------------------------------- search
    def _key(self, s):
        running = tuple(None if r is None else (r[0], r[1] - s["now"]) for r in s["running"])
        channel = tuple(sorted((ch, t, k, end - s["now"]) for ch, (t, k, end)
                               in s["channel"].items()))
        # a finished op's device still matters while a copy of its outputs is live or waits
        # to be sent (the channel's source, whether a copy is the home one)
        holding = {self.producer[t] for t, _ in s["live"]} | \
            {self.producer[t] for t, _ in s["pending"]}
        placed = tuple(s["dev"][v] if v not in s["finished"] or v in holding else -2
                       for v in range(self.n))
        return (frozenset(s["finished"]), running, channel, placed, frozenset(s["live"]),
                frozenset(s["pending"]), frozenset(s["done"] & s["live"]),
                tuple(s["persistent"]), s["used"], frozenset(s["started"]))

    def least_peak_below(self, target: int, deadline: float | None = None):
        """(the least max-peak of a leaf below `target`, or None when there is none;
        states expanded). Raises _OutOfTime past `deadline` (a perf_counter instant)."""
        best = [None]
        limit = [int(target)]
        seen: dict = {}
        count = [0]

        def visit(s):
            while True:
                if max(s["peak"]) >= limit[0]:
                    return
                choice = self.advance(s)
                if choice is None:
                    limit[0] = max(s["peak"])
                    best[0] = limit[0]
                    return
                count[0] += 1
                if self.look_ahead(s) >= limit[0]:
                    return
                if deadline is not None and count[0] % 256 == 0 \
                        and time.perf_counter() > deadline:
                    raise _OutOfTime
                opts = self.options(s, choice)
                if len(opts) == 1:
                    self.apply(s, choice, opts[0])
                    continue
                key = self._key(s) + (choice[0], choice[1], frozenset(s["skip"]),
                                      tuple(s["to_place"]))
                peaks = tuple(s["peak"])
                prior = seen.get(key)
                if prior is not None:
                    if any(all(a <= b for a, b in zip(p, peaks)) for p in prior):
                        return
                    prior.append(peaks)
                else:
                    seen[key] = [peaks]
                for option in opts:
                    child = self._copy(s)
                    self.apply(child, choice, option)
                    visit(child)
                return

        visit(self._initial())
        return best[0], count[0]


def event_search_bound(graph, devices, lower: int, upper: int,
                       time_limit: float = 10.0) -> SearchBound:
    """A proven lower bound on max_k peak[k] from `EventSearch`, between `lower` (a proven
    bound) and `upper` (a simulated value): bisection on the target, each search that ends
    without a leaf below its target proving that target; stops at `time_limit` seconds."""
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit)
    search = EventSearch(graph, devices)
    lo, hi = int(lower), int(upper)   # proven: optimum >= lo; some leaf has peak <= hi
    states = 0
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 100_000))
    try:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            try:
                found, count = search.least_peak_below(mid, deadline)
            except _OutOfTime:
                return SearchBound(lo, False, states, time.perf_counter() - t0)
            states += count
            if found is None:
                lo = mid            # no leaf below mid
            else:                   # the search ran to the end: `found` is the least leaf
                lo = hi = found
    finally:
        sys.setrecursionlimit(old)
    return SearchBound(lo, True, states, time.perf_counter() - t0)


SYNTH_TEST_GRAPHS = 20  # test_00000 .. test_00019: the first graphs of the synthetic test split


def _graph(name: str):
    """The graph NAME: test_NNNNN (one of the first 20 of the synthetic test split) or the
    stem of a file of data/synth/samples; a UserError naming NAME for any other."""
    from regal.io import load_graph
    from regal.synth import graph_at, recipe_named
    from regal.user_errors import UserError

    if name.startswith("test_"):
        index = name[5:]
        if not (index.isdigit() and int(index) < SYNTH_TEST_GRAPHS):
            raise UserError(f"--graphs {name!r}: expected test_00000..test_"
                            f"{SYNTH_TEST_GRAPHS - 1:05d} (the synthetic test split's first "
                            f"{SYNTH_TEST_GRAPHS})")
        return graph_at(recipe_named("test", SYNTH_TEST_GRAPHS), int(index))
    path = ROOT / "data/synth/samples" / f"{name}.npz"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.npz"))
        raise UserError(f"--graphs {name!r}: no such graph; test_NNNNN or one of "
                        f"{', '.join(known)}")
    return load_graph(path)


def main(argv=None) -> int:
    import argparse

    from regal.arguments import check_device_counts, device_count, non_negative_float, \
        positive_float
    from regal.bounds import lower_bound
    from regal.sim import DeviceSpec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["inception_infer_40", "test_00018"])
    parser.add_argument("--devices", nargs="+", type=device_count, default=[2, 4])
    parser.add_argument("--above-pct", nargs="+", type=non_negative_float,
                        default=[0.0, 0.05, 0.2])
    parser.add_argument("--time-limit", type=positive_float, default=60.0)
    args = parser.parse_args(argv)
    check_device_counts(args)
    graphs = [(name, _graph(name)) for name in args.graphs]  # every name checked first
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
    print("| graph | ops | devices | floor | target | refuted | states | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for name, graph in graphs:
        for d in args.devices:
            devices = DeviceSpec(d)
            floor = lower_bound(graph, devices).value
            search = EventSearch(graph, devices)
            for pct in args.above_pct:
                target = floor + max(1, math.ceil(floor * pct / 100))
                start = time.perf_counter()
                try:
                    found, states = search.least_peak_below(target, start + args.time_limit)
                    refuted = "yes" if found is None else f"no (a leaf at {found})"
                except _OutOfTime:
                    refuted, states = "out of time", "-"
                print(f"| {name} | {graph.num_nodes} | {d} | {floor:,} | {target:,} | "
                      f"{refuted} | {states if isinstance(states, str) else f'{states:,}'} | "
                      f"{time.perf_counter() - start:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    raise SystemExit(report_user_errors("event_search.py", main))
