"""The Python moves of a climb, as they were before they were compiled
(`regal.search.draw_kernel`): the reference the compiled drawing must equal, key for key and
draw for draw (tests/test_climb.py); and the numpy listing of what is live at the peak that
`regal.search.moves.peak_facts` compiled. Like tests/sim_reference.py, deliberately plain."""

from __future__ import annotations

import numpy as np

from regal.decode import split
from regal.search.moves import Moves


class ReferenceMoves(Moves):
    """`Moves` whose `neighbours` are drawn one at a time in Python (the old code, verbatim)."""

    def _target(self, avoid: int) -> int:
        """The device with the lowest peak (ties: lowest id), sometimes a random other one;
        while a device is over its limit, the one with the most room below its limit (under
        one limit for every device that is the lowest peak again)."""
        peaks = self.facts.peaks.astype(np.float64).copy()
        if self.rng.random() < 0.3:
            others = [k for k in range(self.d) if k != avoid]
            return int(others[int(self.rng.integers(len(others)))])
        if self.limits is not None and (peaks > self.limits).any():
            peaks -= self.limits
        peaks[avoid] = np.inf
        return int(np.argmin(peaks))

    def _pick(self, cumulative: np.ndarray) -> int:
        """An index drawn with probability proportional to its weight (running sums given)."""
        total = cumulative[-1]
        if total <= 0:
            return int(self.rng.integers(len(cumulative)))
        return min(int(np.searchsorted(cumulative, self.rng.random() * total, side="right")),
                   len(cumulative) - 1)

    def _consumers(self, tensor: int) -> np.ndarray:
        g = self.graph
        return g.consumer[g.consumer_ptr[tensor]:g.consumer_ptr[tensor + 1]]

    def kick(self, keys: np.ndarray) -> np.ndarray:
        """The kick as it was: each swap sorts its block anew."""
        out = keys.copy()
        affinity, priority, transfer = split(out, self.n, self.d)
        strength = max(1, int(round(0.02 * self.n)))
        for _ in range(strength):
            if self.d > 1:
                self._move(affinity)
            self._swap(priority)
        if self.rng.random() < 0.5:
            self._swap(transfer)
        return out

    def random_neighbour(self, keys: np.ndarray) -> np.ndarray:
        out = keys.copy()
        affinity, priority, transfer = split(out, self.n, self.d)
        r = self.rng.random()
        if self.d > 1 and r < 0.4:
            self._move(affinity)
        elif r < 0.85:
            self._swap(priority)
        else:
            self._swap(transfer)
        return out

    # -- peak-directed moves

    def _reorder(self, priority: np.ndarray, v: int, earlier: bool) -> bool:
        """Moves op v a random number of places earlier/later in its device's run order."""
        f = self.facts
        device = int(self.placement[v])
        order = f.orders[device]
        here = int(f.position[v])
        room = here if earlier else len(order) - 1 - here
        if room <= 0:
            return False
        # jump lengths spread over scales: 1, 2, 4, ... up to the whole run order
        jump = min(room, max(1, int(2.0 ** (self.rng.random() * np.log2(room + 1)))))
        other = int(order[here - jump if earlier else here + jump])
        spacing = 1.0 / (2.0 * self.n + 2.0)
        value = priority[other] + (spacing if earlier else -spacing)
        if value == priority[v]:
            return False
        priority[v] = value
        return True

    def directed_neighbour(self, keys: np.ndarray) -> np.ndarray | None:
        f = self.facts
        out = keys.copy()
        affinity, priority, _ = split(out, self.n, self.d)
        g = self.graph
        k = f.device
        r = self.rng.random()
        multi = self.d > 1
        if not len(f.tensors) and not len(f.ops):
            return None
        # one live item, tensors and ops' persistent/temporary bytes alike, by its bytes
        i = self._pick(f.weights)
        if i >= len(f.tensors):
            v = int(f.ops[i - len(f.tensors)])
            s = self.rng.random()
            if multi and s < 0.35:
                done = self._assign(affinity, [v], self._target(k))
            elif multi and s < 0.7:
                # with the readers of its outputs there, so its outputs do not come back
                readers = np.concatenate([self._consumers(int(x)) for x in
                                          range(g.output_ptr[v], g.output_ptr[v + 1])] or [[]])
                readers = readers.astype(np.int64)
                readers = readers[self.placement[readers] == k]
                done = self._assign(affinity, np.append(readers, v), self._target(k))
            else:
                done = self._reorder(priority, v, earlier=self.rng.random() < 0.5)
            return out if done else None
        tensor, remote = int(f.tensors[i]), bool(f.remote[i])
        producer = int(g.tensor_producer[tensor])
        consumers = self._consumers(tensor)
        here = consumers[self.placement[consumers] == k]
        waiting = here[f.end[here] > f.time]          # consumers that still hold the tensor
        if multi and r < 0.55:
            s = self.rng.random()
            if remote:
                # run the consumers where the tensor already is, or elsewhere off the peak
                home = int(self.placement[producer])
                target = home if s < 0.6 else self._target(k)
                done = self._assign(affinity, here, target)
            elif s < 0.5:
                done = self._assign(affinity, np.append(here, producer), self._target(k))
            elif s < 0.7:
                done = self._assign(affinity, [producer], self._target(k))
            else:
                # a window of the peak device's run order around the producer
                at = int(f.position[producer])
                width = max(1, int(2.0 ** (self.rng.random() * np.log2(max(2, len(f.order))))))
                lo = max(0, at - int(self.rng.integers(width)))
                done = self._assign(affinity, f.order[lo:lo + width], self._target(k))
            return out if done else None
        if remote and (not len(waiting) or self.rng.random() < 0.5):
            # the copy arrives as soon as its producer (elsewhere) ends: produce it later
            done = self._reorder(priority, producer, earlier=False)
        elif len(waiting) and (remote or self.rng.random() < 0.6):
            v = int(waiting[np.argmax(f.end[waiting])])
            if self.rng.random() < 0.3:
                v = int(waiting[int(self.rng.integers(len(waiting)))])
            done = self._reorder(priority, v, earlier=True)
        elif not remote:
            done = self._reorder(priority, producer, earlier=False)
        else:
            return None
        return out if done else None

    def neighbours(self, keys: np.ndarray, count: int, directed_share: float) -> np.ndarray:
        batch = []
        tries = 0
        while len(batch) < count:
            tries += 1
            candidate = None
            if self.facts is not None and self.rng.random() < directed_share and tries < 20 * count:
                candidate = self.directed_neighbour(keys)
                # now and then two or three peak-directed changes at once, to leave optima
                # that no single change improves
                for _ in range(int(self.rng.random() < 0.25) * int(self.rng.integers(1, 3))):
                    if candidate is None:
                        break
                    candidate = self.directed_neighbour(candidate)
            if candidate is None:
                candidate = self.random_neighbour(keys)
            batch.append(candidate)
        return np.stack(batch)



def reference_peak_facts(problem, placement, priority, transfer):
    """`regal.search.moves.peak_facts` in numpy, as it was before it was compiled: a dict of
    the same fields (the compiled one must equal it, tests/test_climb.py)."""
    from regal.search.moves import _critical_device
    from regal.sim import trace

    graph = problem.graph
    n, t = graph.num_nodes, graph.num_tensors
    tr = trace(graph, problem.devices, placement, priority, transfer)
    peaks = np.asarray(tr.result.peak, dtype=np.int64)
    k = _critical_device(problem, peaks)
    times, live_bytes = tr.memory[k]
    at = float(times[int(np.argmax(live_bytes))]) if len(times) else 0.0
    start, end = tr.op_start, tr.op_end
    placement = np.asarray(placement)

    producer = graph.tensor_producer
    home = placement[producer]
    edge_tensor = np.repeat(np.arange(t), np.diff(graph.consumer_ptr))
    consumer = graph.consumer
    # producer-side copy: freed when the producer, its local consumers and its transfers end
    local = placement[consumer] == home[edge_tensor]
    free = end[producer].copy()
    np.maximum.at(free, edge_tensor[local], end[consumer[local]])
    if len(tr.transfer_tensor):
        np.maximum.at(free, tr.transfer_tensor, tr.transfer_end)
    free[np.diff(graph.consumer_ptr) == 0] = np.inf         # graph outputs stay live
    own = np.where(graph.tensor_alias < 0, graph.tensor_size, 0)
    live_home = (home == k) & (start[producer] <= at) & (free > at) & (own > 0)
    tensors = [np.flatnonzero(live_home)]
    sizes = [own[live_home]]
    # copies transferred onto k: live from the transfer's start to the last consumer there
    into = np.flatnonzero(tr.transfer_dst == k)
    if len(into):
        remote_free = np.full(t, -np.inf)
        on_k = placement[consumer] == k
        np.maximum.at(remote_free, edge_tensor[on_k], end[consumer[on_k]])
        tensor_in = tr.transfer_tensor[into]
        live = (tr.transfer_start[into] <= at) & (remote_free[tensor_in] > at) \
            & (graph.tensor_size[tensor_in] > 0)
        tensors.append(tensor_in[live])
        sizes.append(graph.tensor_size[tensor_in[live]])
    remote = np.concatenate([np.full(len(part), i > 0) for i, part in enumerate(tensors)])
    mine = placement == k
    running = mine & (start <= at) & ((end > at) | (start == at))
    holds = graph.persistent_memory + np.where(running, graph.temporary_memory, 0)
    ops = np.flatnonzero(mine & (holds > 0))
    position = np.zeros(n, np.int64)
    orders = []
    for device in range(problem.devices.count):
        ops_d = np.flatnonzero(placement == device)
        ops_d = ops_d[np.lexsort((ops_d, start[ops_d]))]
        position[ops_d] = np.arange(len(ops_d))
        orders.append(ops_d)
    tensor_bytes = np.concatenate(sizes).astype(np.float64)
    op_bytes = holds[ops].astype(np.float64)
    return dict(device=k, time=at, tensors=np.concatenate(tensors), tensor_bytes=tensor_bytes,
                remote=remote, ops=ops, op_bytes=op_bytes, order=orders[k], orders=orders,
                position=position, start=start, end=end, peaks=peaks,
                weights=np.cumsum(np.concatenate([tensor_bytes, op_bytes])))
