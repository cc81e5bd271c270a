"""The graph model: hand-built graphs with hand-computed arrays, properties on random
graphs against brute force, and every GraphError path."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import random_graph
from regal.graph import GraphError, build_graph, summarize
from regal.graph_builder import GraphBuilder
from regal import graph as graph_module


def diamond():
    """a -> (b, c) -> d, plus a control edge b -> c; b has two outputs, d reads c twice.

    tensors: a:0=t0 (10 B), b:0=t1 (20 B), b:1=t2 (5 B), c:0=t3 (30 B, alias of t0), d:0=t4
    """
    b = GraphBuilder()
    a_, b_, c_, d_ = (b.add_op(n, cost, persistent_memory=p, temporary_memory=tm)
                      for n, cost, p, tm in [("a", 1, 100, 0), ("b", 2, 0, 7), ("c", 3, 0, 0),
                                             ("d", 4, 50, 0)])
    b.add_output(a_, 10)
    b.add_input(b_, a_)
    b.add_output(b_, 20)
    b.add_output(b_, 5)
    b.add_input(c_, a_)
    b.add_output(c_, 30, alias_input_port=0)
    b.add_input(d_, b_, 1)
    b.add_input(d_, c_)
    b.add_input(d_, c_)
    b.add_output(d_, 1)
    b.add_control(b_, c_)
    return b.build()


def test_diamond_arrays():
    g = diamond()
    assert g.num_nodes == 4 and g.num_tensors == 5
    assert g.output_ptr.tolist() == [0, 1, 3, 4, 5]
    assert g.tensor_producer.tolist() == [0, 1, 1, 2, 3]
    assert g.tensor_port.tolist() == [0, 0, 1, 0, 0]
    assert g.input_ptr.tolist() == [0, 0, 1, 2, 5]
    assert g.input_tensor.tolist() == [0, 0, 2, 3, 3]
    assert g.tensor_alias.tolist() == [-1, -1, -1, 0, -1]
    assert g.control_ptr.tolist() == [0, 0, 0, 1, 1] and g.control_pred.tolist() == [1]
    # consumers are unique per tensor: d reads t3 on two ports, counted once
    assert [g.consumers(t).tolist() for t in range(5)] == [[1, 2], [], [3], [3], []]
    assert g.consumer_ptr.tolist() == [0, 2, 2, 3, 4, 4]
    assert [g.successors(v).tolist() for v in range(4)] == [[1, 2], [2, 3], [3], []]
    assert [g.predecessors(v).tolist() for v in range(4)] == [[], [0], [0, 1], [1, 2]]
    assert g.topo_order.tolist() == [0, 1, 2, 3]
    assert g.depth() == 4            # a -> b -(control)-> c -> d
    assert g.index_of("c") == 2
    with pytest.raises(KeyError):
        g.index_of("zz")


def test_diamond_summary():
    s = summarize(diamond())
    assert s == {"ops": 4, "tensors": 5, "data edges": 5, "control edges": 1,
                 "total bytes": 66, "largest tensor": 30, "persistent bytes": 150,
                 "temporary bytes": 7, "compute cost (us)": 10.0, "depth": 4}


def test_arrays_are_read_only_and_typed():
    g = diamond()
    for name, arr in zip(g._fields, g):
        if arr is None:  # the cost model's counts (op_flops, op_bytes) are optional
            assert name in ("op_flops", "op_bytes")
            continue
        assert not arr.flags.writeable, name
        assert arr.flags.c_contiguous, name
    assert g.compute_cost.dtype == np.float64 and g.tensor_size.dtype == np.int64
    assert g.input_tensor.dtype == np.int32 and g.topo_order.dtype == np.int32


def test_topo_order_is_fifo_kahn_with_ascending_sources():
    # ids are not in dependency order: 3 and 1 are sources, 0 depends on 3, 2 on 0 and 1
    b = GraphBuilder()
    for name in "wxyz":
        b.add_op(name)
    b.add_control(3, 0)
    b.add_control(0, 2)
    b.add_control(1, 2)
    assert b.build().topo_order.tolist() == [1, 3, 0, 2]


def _longest_path_ops(g) -> int:
    """Brute force: longest path by memoised DFS over successors."""
    memo = {}

    def longest(v):
        if v not in memo:
            memo[v] = 1 + max((longest(int(w)) for w in g.successors(v)), default=0)
        return memo[v]
    return max(longest(v) for v in range(g.num_nodes))


@pytest.mark.parametrize("seed", range(60))
def test_random_graph_properties(seed):
    g = random_graph(np.random.default_rng(seed))
    n = g.num_nodes
    pos = np.empty(n, dtype=np.int64)
    pos[g.topo_order] = np.arange(n)
    assert sorted(g.topo_order.tolist()) == list(range(n))
    for v in range(n):                      # every data and control edge goes forward
        for t in g.inputs(v):
            assert pos[g.tensor_producer[t]] < pos[v]
        for u in g.control_inputs(v):
            assert pos[u] < pos[v]
    # succ/pred/consumer agree with the raw edges (brute force sets)
    edges = {(int(g.tensor_producer[t]), v) for v in range(n) for t in g.inputs(v)}
    edges |= {(int(u), v) for v in range(n) for u in g.control_inputs(v)}
    assert {(v, int(w)) for v in range(n) for w in g.successors(v)} == edges
    assert {(int(u), v) for v in range(n) for u in g.predecessors(v)} == edges
    for t in range(g.num_tensors):
        assert g.consumers(t).tolist() == sorted({v for v in range(n) if t in g.inputs(v)})
        if g.tensor_alias[t] >= 0:
            assert g.tensor_alias[t] in g.inputs(int(g.tensor_producer[t]))
    assert g.depth() == _longest_path_ops(g)


def test_single_op_depth_and_fingerprint():
    b = GraphBuilder()
    b.add_op("only", 1.0)
    g = b.build()
    assert g.depth() == 1 and g.num_tensors == 0
    assert g.fingerprint() == b.build().fingerprint()
    assert g.fingerprint() != diamond().fingerprint()


def test_equals_detects_any_difference():
    g = diamond()
    raw = dict(names=g.names.tolist(), compute_cost=g.compute_cost.copy(),
               tensor_producer=g.tensor_producer, tensor_size=g.tensor_size,
               input_ptr=g.input_ptr, input_tensor=g.input_tensor,
               temporary_memory=g.temporary_memory, persistent_memory=g.persistent_memory,
               tensor_alias=g.tensor_alias, control_src=[1], control_dst=[2])
    assert build_graph(**raw).equals(g)
    raw["compute_cost"] = np.array([1, 2, 3, 4.5])
    assert not build_graph(**raw).equals(g)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.integers(-50, 50), max_size=40))
def test_sorted_unique_matches_numpy(values):
    a = np.asarray(values, dtype=np.int64)
    assert np.array_equal(graph_module._sorted_unique(a), np.unique(a))


# ---------------------------------------------------------------------------
# GraphError paths


def test_cycle_names_an_op_on_the_cycle():
    # tail -> x -> y -> z -> x ; the message must name x, y or z, never tail or the exit op
    b = GraphBuilder()
    for name in ["tail", "x", "y", "z", "exit"]:
        b.add_op(name)
        b.add_output(b.op_id(name), 4)
    for src, dst in [("tail", "x"), ("x", "y"), ("y", "z"), ("z", "x"), ("z", "exit")]:
        b.add_input(b.op_id(dst), b.op_id(src))
    with pytest.raises(GraphError, match=r"^cycle: op '(x|y|z)' lies on a cycle$"):
        b.build()


def test_control_cycle_and_self_loop():
    b = GraphBuilder()
    b.add_op("p")
    b.add_op("q")
    b.add_control(0, 1)
    b.add_control(1, 0)
    with pytest.raises(GraphError, match=r"cycle: op '[pq]'"):
        b.build()
    b = GraphBuilder()
    b.add_op("me")
    b.add_output(0, 1)
    b.add_input(0, 0)
    with pytest.raises(GraphError, match="cycle: op 'me' depends on itself"):
        b.build()


def _one_op(**kwargs):
    b = GraphBuilder()
    b.add_op("op_a", kwargs.pop("cost", 1.0), **kwargs)
    return b


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(cost=-1.0), "op 'op_a': compute_cost must be a non-negative number, got -1.0"),
    (dict(cost=math.nan), "op 'op_a': compute_cost must be a non-negative number, got nan"),
    (dict(cost=math.inf), "op 'op_a': compute_cost must be finite"),
    (dict(temporary_memory=-5), "op 'op_a': temporary_memory must be a non-negative"),
    (dict(persistent_memory=-5), "op 'op_a': persistent_memory must be a non-negative"),
])
def test_bad_op_values(kwargs, pattern):
    with pytest.raises(GraphError, match=pattern):
        _one_op(**kwargs).build()


def test_bad_tensor_size_names_tensor_and_field():
    b = _one_op()
    b.add_output(0, 8)
    b.add_output(0, -3)
    with pytest.raises(GraphError, match=r"tensor 1 \(output of op 'op_a'\): size must be a non-neg"):
        b.build()
    b = _one_op()
    b.add_output(0, math.nan)
    with pytest.raises(GraphError, match=r"tensor 0 .*size must be a non-negative number, got nan"):
        b.build()


def test_missing_op_or_port():
    b = _one_op()
    b.add_op("op_b")
    b.add_input(1, 0, port=0)              # op_a has no outputs
    with pytest.raises(GraphError, match="op 'op_b': input names missing output 0 of op 'op_a'"):
        b.build()
    b = _one_op()
    b.add_input(0, 7)
    with pytest.raises(GraphError, match="op 'op_a': input names missing output 0 of op 7"):
        b.build()
    with pytest.raises(GraphError, match="no op named 'ghost'"):
        _one_op().op_id("ghost")
    b = _one_op()
    b.add_control(5, 0)
    with pytest.raises(GraphError, match=r"op 'op_a': control edge names a missing op \(5\)"):
        b.build()


def test_missing_tensor_in_raw_arrays():
    with pytest.raises(GraphError, match=r"op 'b': input 0 names a missing tensor \(3\)"):
        build_graph(names=["a", "b"], compute_cost=[0, 0], tensor_producer=[0],
                    tensor_size=[1], input_ptr=[0, 0, 1], input_tensor=[3])


def test_raw_array_shape_errors():
    base = dict(names=["a", "b"], compute_cost=[0, 0], tensor_producer=[1, 0],
                tensor_size=[1, 1], input_ptr=[0, 0, 0], input_tensor=[])
    with pytest.raises(GraphError, match="tensor 1: tensors must be ordered by producer"):
        build_graph(**base)
    with pytest.raises(GraphError, match="field 'compute_cost': expected one value per op"):
        build_graph(**{**base, "tensor_producer": [0, 1], "compute_cost": [0]})
    with pytest.raises(GraphError, match="field 'input_ptr': not a valid CSR"):
        build_graph(**{**base, "tensor_producer": [0, 1], "input_ptr": [0, 2, 1]})
    with pytest.raises(GraphError, match="tensor 0: producer 5 is not an op"):
        build_graph(**{**base, "tensor_producer": [5, 5]})


def test_alias_errors():
    b = _one_op()
    b.add_output(0, 4, alias_input_port=0)     # op_a has no inputs
    with pytest.raises(GraphError, match="op 'op_a': output 0 aliases input port 0, but the op "
                                         "has 0 inputs"):
        b.build()
    with pytest.raises(GraphError, match="alias_of names tensor 0, which is not an input"):
        build_graph(names=["a", "b"], compute_cost=[0, 0], tensor_producer=[0, 1],
                    tensor_size=[1, 1], tensor_alias=[-1, 0], input_ptr=[0, 0, 0],
                    input_tensor=[])


def test_duplicate_names_and_empty_graph():
    b = _one_op()
    with pytest.raises(GraphError, match="duplicate op name 'op_a'"):
        b.add_op("op_a")
    with pytest.raises(GraphError, match="duplicate op name 'a'"):  # smallest duplicate named
        build_graph(names=["b", "a", "b", "a"], compute_cost=[0] * 4, tensor_producer=[],
                    tensor_size=[], input_ptr=[0] * 5, input_tensor=[])
    with pytest.raises(GraphError, match="empty graph"):
        GraphBuilder().build()


def test_errors_are_value_errors_and_one_line():
    assert issubclass(GraphError, ValueError)
    for names in itertools.permutations(["x\ny", "x\ny"]):
        with pytest.raises(GraphError) as info:
            build_graph(names=list(names), compute_cost=[0, 0], tensor_producer=[],
                        tensor_size=[], input_ptr=[0, 0, 0], input_tensor=[])
        assert "\n" not in str(info.value)   # repr() of the name escapes the newline


# -- issue 24 items 1-2: what a graph may hold ------------------------------------------------

def _wide(n: int, **per_op):
    b = GraphBuilder()
    for i in range(n):
        b.add_op(f"n{i}", 1.0, **per_op)
    return b


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(temporary_memory=2**62 + 1), r"op 'op_a': temporary_memory is 4611686018427387905 bytes"),
    (dict(persistent_memory=2**63 - 1), r"op 'op_a': persistent_memory is 9223372036854775807 bytes"),
])
def test_a_byte_count_above_2_62_is_refused_exactly(kwargs, pattern):
    """2**62 + 1 would round to 2**62 through a float and pass; it must be refused."""
    with pytest.raises(GraphError, match=pattern):
        _one_op(**kwargs).build()


def test_a_byte_count_of_2_62_is_held_exactly():
    g = _one_op(persistent_memory=2**62).build()
    assert int(g.persistent_memory[0]) == 2**62
    b = _one_op()
    b.add_output(0, 2**53 + 1)  # above float's exact range: kept exact
    assert int(b.build().tensor_size[0]) == 2**53 + 1


def test_a_uint64_size_does_not_wrap():
    from regal.graph import build_graph
    with pytest.raises(GraphError, match=r"tensor 0 .*size is 18446744073709551615 bytes"):
        build_graph(names=["a"], compute_cost=[1.0], tensor_producer=[0],
                    tensor_size=np.array([2**64 - 1], np.uint64), input_ptr=[0, 0],
                    input_tensor=[])


def test_per_graph_totals_are_bounded_and_name_the_op():
    # 1,100 ops of 2**53 persistent bytes: every value allowed, the int64 sum wraps negative
    with pytest.raises(GraphError, match=r"op 'n512': the graph's total persistent_memory "
                                         r"passes 2\*\*62 bytes here \(in all 9907919180215091200\)"):
        _wide(1100, persistent_memory=2**53).build()
    b = _wide(2)
    b.add_output(0, 2**62)
    b.add_output(1, 1)
    with pytest.raises(GraphError, match=r"tensor 1 \(output of op 'n1'\): the graph's total "
                                         r"tensor size passes"):
        b.build()
    # each total allowed, all together not: one device's peak could reach their sum
    b = _wide(1, persistent_memory=2**61, temporary_memory=2**61)
    b.add_output(0, 1)
    with pytest.raises(GraphError, match=r"the graph holds 4611686018427387905 bytes in all"):
        b.build()
    b = _wide(1, persistent_memory=2**61, temporary_memory=2**61)
    assert summarize(b.build())["persistent bytes"] == 2**61


def test_total_compute_cost_is_bounded():
    b = GraphBuilder()
    for i in range(3):
        b.add_op(f"n{i}", 2.0**61)
    with pytest.raises(GraphError, match=r"op 'n2': the graph's total compute_cost passes"):
        b.build()
    b = GraphBuilder()
    b.add_op("n0", 1.0)
    b.add_op("n1", 1e308)
    b.add_op("n2", 1e308)  # each finite, the sum infinite
    with pytest.raises(GraphError, match=r"op 'n1': the graph's total compute_cost passes"):
        b.build()


def test_builder_refuses_an_id_that_names_no_op_at_once():
    """A negative id would name another op (Python lists read -1 as the last one), and a
    name or a float is no id: refused when given, naming the call."""
    for call in (lambda b: b.add_output(-1, 10), lambda b: b.add_output(1, 10),
                 lambda b: b.add_input(-1, 0), lambda b: b.add_input(0, -1),
                 lambda b: b.add_input(0, "op_a"), lambda b: b.add_input(0, 0, port=0.0),
                 lambda b: b.set_counts(-1, 5, 5), lambda b: b.pin(-1, 1),
                 lambda b: b.pin("op_a", 0), lambda b: b.colocate("op_a", 0),
                 lambda b: b.add_control(0, -2), lambda b: b.add_output(0, 8, 0.0)):
        with pytest.raises(GraphError, match="add_output|add_input|set_counts|pin|colocate|"
                                             "add_control"):
            call(_one_op())
    b = _one_op()
    b.add_op("op_b")
    b.add_input(1, 0)     # a producer added before: fine; one added later is checked by build
    b.add_input(0, 5)
    with pytest.raises(GraphError, match="missing output 0 of op 5"):
        b.build()
