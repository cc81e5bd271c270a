"""`GraphBuilder`: a graph built op by op by name (readers, generators and tests), validated
once by `regal.graph.build_graph` when it is built."""

from __future__ import annotations

import numpy as np

from regal.constraints import spread_pins
from regal.graph import ComputationGraph, GraphError, build_graph, group_leaders

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Incremental construction by op name, for readers, generators and tests.

    Tensors may be added in any order; `build()` renumbers them by (producer, port). Sizes
    and memories are whole bytes (a float is truncated: give bytes, not MB); op ids are the
    numbers `add_op` returns.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._types: list[str] = []
        self._cost: list[float] = []
        self._temp: list[float] = []
        self._pers: list[float] = []
        self._final: list[bool] = []
        self._outputs: list[list[tuple[float, int]]] = []  # per op: (size, alias input port)
        self._inputs: list[list[tuple[int, int]]] = []      # per op: (producer op, port)
        self._control: list[tuple[int, int]] = []
        self._colocated: list[tuple[int, int]] = []
        self._pins: dict[int, int] = {}
        self._counts: dict[int, tuple[float, float]] = {}  # op -> (FLOPs, bytes)

    def __len__(self) -> int:
        return len(self._names)

    def add_op(self, name: str, compute_cost: float = 0.0, *, temporary_memory: float = 0,
               persistent_memory: float = 0, op_type: str = "", is_final: bool = False) -> int:
        if name in self._index:
            raise GraphError(f"duplicate op name {name!r}")
        v = len(self._names)
        self._index[name] = v
        self._names.append(name)
        self._types.append(op_type)
        self._cost.append(compute_cost)
        self._temp.append(temporary_memory)
        self._pers.append(persistent_memory)
        self._final.append(is_final)
        self._outputs.append([])
        self._inputs.append([])
        return v

    def op_id(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"no op named {name!r}") from None

    @staticmethod
    def _integer(value, what: str) -> int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise GraphError(f"{what}: {value!r} is not an integer")
        return int(value)

    def _op(self, op, what: str, added: bool = True) -> int:
        """`op` checked to be an op id: of an op added already (`added`; a negative index
        would name another op, as Python lists read it), else at least not negative (an
        op added later: `build` checks it)."""
        op = self._integer(op, f"{what}: op id")
        if op < 0 or (added and op >= len(self._names)):
            raise GraphError(f"{what}: {op} is not the id of an op"
                             + (f" added so far (0..{len(self._names) - 1})" if added else "")
                             + "; op_id(name) gives it")
        return op

    def add_output(self, op: int, size: float, alias_input_port: int = -1) -> int:
        """Adds the next output port of `op`; returns the port."""
        op = self._op(op, "add_output")
        alias_input_port = self._integer(
            alias_input_port, f"add_output: op {self._names[op]!r}: alias_input_port")
        self._outputs[op].append((size, alias_input_port))
        return len(self._outputs[op]) - 1

    def add_input(self, op: int, producer: int, port: int = 0) -> int:
        """Appends the next input port of `op`, reading `producer`'s output `port`."""
        op = self._op(op, "add_input")
        producer = self._op(producer, f"add_input: op {self._names[op]!r}: producer",
                            added=False)
        port = self._integer(port, f"add_input: op {self._names[op]!r}: port")
        self._inputs[op].append((producer, port))
        return len(self._inputs[op]) - 1

    def add_control(self, src: int, dst: int) -> None:
        self._control.append((self._op(src, "add_control", added=False),
                              self._op(dst, "add_control", added=False)))

    def colocate(self, a: int, b: int) -> None:
        """Ops `a` and `b` (and their groups) must run on one device."""
        self._colocated.append((self._op(a, "colocate", added=False),
                                self._op(b, "colocate", added=False)))

    def set_counts(self, op: int, flops: float, nbytes: float) -> None:
        """The cost model's FLOP and byte counts of `op` (regal.sim.speeds); once any op has
        them, the graph keeps them for every op (0 for the others)."""
        self._counts[self._op(op, "set_counts")] = (float(flops), float(nbytes))

    def pin(self, op: int, device: int) -> None:
        """Op `op`'s whole colocation group runs on `device`."""
        self._pins[self._op(op, "pin")] = device

    def build(self) -> ComputationGraph:
        n = len(self._names)
        out_counts = [len(o) for o in self._outputs]
        output_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(out_counts, out=output_ptr[1:])
        producer = np.repeat(np.arange(n), out_counts)
        sizes = [s for outs in self._outputs for s, _ in outs]
        in_counts = [len(i) for i in self._inputs]
        input_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(in_counts, out=input_ptr[1:])
        input_tensor = []
        for v, ins in enumerate(self._inputs):
            for p, port in ins:
                if not (0 <= p < n) or not (0 <= port < out_counts[p]):
                    src = repr(self._names[p]) if 0 <= p < n else str(p)
                    raise GraphError(f"op {self._names[v]!r}: input names missing output "
                                     f"{port} of op {src}")
                input_tensor.append(int(output_ptr[p]) + port)
        alias = []
        for v, outs in enumerate(self._outputs):
            for port, (_, a) in enumerate(outs):
                if a is None or a < 0:
                    alias.append(-1)
                elif a >= in_counts[v]:
                    raise GraphError(f"op {self._names[v]!r}: output {port} aliases input port "
                                     f"{a}, but the op has {in_counts[v]} inputs")
                else:
                    alias.append(input_tensor[int(input_ptr[v]) + a])
        csrc = [s for s, _ in self._control]
        cdst = [d for _, d in self._control]
        for a, b in self._colocated:
            for v in (a, b):
                if not 0 <= v < n:
                    raise GraphError(f"colocation names a missing op ({v})")
        leaders = group_leaders(n, self._colocated)
        pinned = spread_pins(self._names, leaders, self._pins)
        counts = {}
        if self._counts:
            flops, nbytes = np.zeros(n), np.zeros(n)
            for v, (f, b) in self._counts.items():
                flops[v], nbytes[v] = f, b
            counts = {"op_flops": flops, "op_bytes": nbytes}
        return build_graph(
            names=self._names, op_types=self._types, compute_cost=self._cost,
            temporary_memory=self._temp, persistent_memory=self._pers, is_final=self._final,
            tensor_producer=producer, tensor_size=sizes, tensor_alias=alias,
            input_ptr=input_ptr, input_tensor=np.asarray(input_tensor, dtype=np.int64),
            control_src=csrc, control_dst=cdst, colocation=leaders, pinned=pinned, **counts,
        )
