"""CostGraphDef text/binary reader and writer: hand-derived fixtures, TensorFlow's own
message class as the reference encoding, every bad-input path, and fuzzing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import random_graph
from regal.graph import GraphError
from regal.graph_builder import GraphBuilder
from regal.io import costgraph
from regal.io.costgraph import (parse_costgraph_bytes, parse_costgraph_text, to_costgraph_bytes,
                                to_costgraph_text)

DATA = Path(__file__).parent / "data"
README_EXAMPLE = (DATA / "regal_readme_example.pbtxt").read_text()
FEATURES = (DATA / "features.pbtxt").read_text()


# ---------------------------------------------------------------------------
# hand-derived fixtures


def test_readme_example_counts():
    # _SOURCE (id 0) is dropped with the four control_input: 0 edges; node_0 has no outputs;
    # node_3 reads port 0 of id 2 = node_1, whose output is tensor 0.
    g = parse_costgraph_text(README_EXAMPLE)
    assert g.names.tolist() == ["node_0", "node_1", "node_2", "node_3"]
    assert (g.num_nodes, g.num_tensors, g.num_data_edges, g.num_control_edges) == (4, 3, 1, 0)
    assert g.compute_cost.tolist() == [0, 58, 47, 58]
    assert g.tensor_size.tolist() == [70, 52, 55]
    assert g.tensor_producer.tolist() == [1, 2, 3]
    assert g.tensor_alias.tolist() == [-1, -1, -1]
    assert g.input_tensor.tolist() == [0] and g.inputs(3).tolist() == [0]
    assert g.depth() == 2


def test_features_fixture_maps_every_field():
    g = parse_costgraph_text(FEATURES)
    # file order, _SOURCE and _SINK dropped
    assert g.names.tolist() == ["input", "weights", "matmul", "split", "reshape", "add"]
    assert g.compute_cost.tolist() == [3, 1, 120, 10, 0, 5]
    assert g.temporary_memory.tolist() == [0, 0, 512, 0, 0, 0]
    assert g.persistent_memory.tolist() == [0, 1024, 0, 0, 0, 0]
    assert g.is_final.tolist() == [False] * 5 + [True]
    # tensors: input:0 weights:0 matmul:0 split:0 split:1 reshape:0 add:0
    assert g.tensor_producer.tolist() == [0, 1, 2, 3, 3, 4, 5]
    assert g.tensor_size.tolist() == [4096, 1024, 4096, 2048, 2048, 2048, 2048]
    # inputs by id: matmul <- (7:0, 3:0); split <- 9:0; reshape <- 4:1; add <- 4:0, 12:0, 12:0
    assert [g.inputs(v).tolist() for v in range(6)] == [[], [], [0, 1], [2], [4], [3, 5, 5]]
    # reshape's missing alias_input_port reads as 0 (proto3) -> split:1; add aliases port 1
    assert g.tensor_alias.tolist() == [-1, -1, -1, -1, -1, 4, 5]
    # add: preceding_port -1 from weights, then control_input 7 (input); _SINK's edges dropped
    assert g.control_inputs(5).tolist() == [1, 0] and g.num_control_edges == 2
    assert g.consumers(5).tolist() == [5]        # read on two ports, one consumer
    assert g.depth() == 5


def test_ids_not_indices_and_ports():
    text = """
    node { name: "c" id: 100 input_info { preceding_node: -5 preceding_port: 1 }
           output_info { size: 3 alias_input_port: -1 } }
    node { name: "b" id: -5 input_info { preceding_node: 42 }
           output_info { size: 1 alias_input_port: -1 } output_info { size: 2 alias_input_port: -1 } }
    node { name: "a" id: 42 output_info { size: 7 alias_input_port: -1 } }
    """
    g = parse_costgraph_text(text)
    assert g.names.tolist() == ["c", "b", "a"]
    assert g.tensor_size.tolist() == [3, 1, 2, 7]
    assert g.inputs(0).tolist() == [2] and g.inputs(1).tolist() == [3]
    assert g.topo_order.tolist() == [2, 1, 0]


def test_compute_cost_rounds_on_write():
    b = GraphBuilder()
    for i, cost in enumerate([2.4, 2.6, 0.0, 1e6 + 0.5]):
        b.add_op(f"op{i}", cost)
    g = parse_costgraph_bytes(to_costgraph_bytes(b.build()))
    assert g.compute_cost.tolist() == [2, 3, 0, 1e6]


def test_round_trip_text_graph_text_graph():
    for text in (README_EXAMPLE, FEATURES):
        g1 = parse_costgraph_text(text)
        out = to_costgraph_text(g1)
        g2 = parse_costgraph_text(out)
        assert g1.equals(g2)
        assert to_costgraph_text(g2) == out      # the writer is a fixed point
        assert parse_costgraph_bytes(to_costgraph_bytes(g1)).equals(g1)


@pytest.mark.parametrize("seed", range(40))
def test_round_trip_random_graphs(seed):
    g = random_graph(np.random.default_rng(seed), integer=True)  # aliases, controls, dup ports
    assert parse_costgraph_text(to_costgraph_text(g)).equals(g)
    assert parse_costgraph_bytes(to_costgraph_bytes(g)).equals(g)


def test_names_with_quotes_and_unicode_survive_text():
    b = GraphBuilder()
    names = ['a "quoted" op', "back\\slash", "tab\there", "ünï/cødé:0", "new\nline"]
    for name in names:
        b.add_op(name, 1.0)
    g = parse_costgraph_text(to_costgraph_text(b.build()))
    assert g.names.tolist() == names


def test_reserved_names_refused_on_write():
    b = GraphBuilder()
    b.add_op("_SINK", 1.0)
    with pytest.raises(GraphError, match="'_SINK' is reserved"):
        to_costgraph_text(b.build())


def test_file_helpers(tmp_path):
    g = parse_costgraph_text(FEATURES)
    costgraph.write_costgraph_text(g, tmp_path / "g.pbtxt")
    costgraph.write_costgraph_bytes(g, tmp_path / "g.pb")
    assert costgraph.read_costgraph_text(tmp_path / "g.pbtxt").equals(g)
    assert costgraph.read_costgraph_bytes(tmp_path / "g.pb").equals(g)
    (tmp_path / "bad.pbtxt").write_bytes(b'node { name: "\xff\xfe" }')
    with pytest.raises(GraphError, match=r"bad\.pbtxt: not UTF-8"):
        costgraph.read_costgraph_text(tmp_path / "bad.pbtxt")


# ---------------------------------------------------------------------------
# TensorFlow's own classes as the reference (tests may import TF; the library may not)


@pytest.fixture(scope="module")
def tf_pb2():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    cost_graph_pb2 = pytest.importorskip("tensorflow.core.framework.cost_graph_pb2")
    from tensorflow.core.framework import types_pb2
    return cost_graph_pb2, types_pb2


def _fields(desc):
    out = {}
    for f in desc.fields:
        out[f.name] = (f.number, f.type, f.is_repeated, f.message_type.full_name
                       if f.message_type else None, f.enum_type.full_name if f.enum_type else None)
    return out


def test_descriptor_matches_tensorflow(tf_pb2):
    cost_graph_pb2, types_pb2 = tf_pb2
    ref, mine = cost_graph_pb2.CostGraphDef.DESCRIPTOR, costgraph.CostGraphDef.DESCRIPTOR
    pairs = [(ref, mine)]
    while pairs:
        r, m = pairs.pop()
        assert r.full_name == m.full_name
        assert _fields(r) == _fields(m), r.full_name
        pairs += [(f.message_type, m.fields_by_name[f.name].message_type)
                  for f in r.fields if f.message_type]
    ref_enum = types_pb2.DataType.DESCRIPTOR
    mine_enum = mine.nested_types_by_name["Node"].nested_types_by_name["OutputInfo"] \
        .fields_by_name["dtype"].enum_type
    assert [(v.name, v.number) for v in ref_enum.values] == \
        [(v.name, v.number) for v in mine_enum.values]


def test_reads_tensorflow_bytes_and_tensorflow_reads_ours(tf_pb2):
    from google.protobuf import text_format
    cost_graph_pb2, _ = tf_pb2
    ref = text_format.Parse(FEATURES, cost_graph_pb2.CostGraphDef())
    g = parse_costgraph_bytes(ref.SerializeToString())
    assert g.equals(parse_costgraph_text(FEATURES))
    # shape and dtype survive our class byte-for-byte
    mine = costgraph.CostGraphDef.FromString(ref.SerializeToString())
    assert mine.SerializeToString(deterministic=True) == ref.SerializeToString(deterministic=True)
    assert text_format.MessageToString(mine) == text_format.MessageToString(ref)
    # our writer's bytes through TensorFlow's class
    ours = to_costgraph_bytes(g)
    back = cost_graph_pb2.CostGraphDef.FromString(ours)
    assert text_format.MessageToString(back) == to_costgraph_text(g)
    assert back.SerializeToString() == ours
    assert [n.id for n in back.node] == list(range(6))
    assert [len(n.input_info) for n in back.node] == [0, 0, 2, 1, 1, 3]


# ---------------------------------------------------------------------------
# bad input: GraphError with one line naming the problem

NODE_A = 'node { name: "a" id: 1 output_info { size: 8 alias_input_port: -1 } }'
BAD_TEXTS = {
    "": "empty graph",
    'node { name: "_SOURCE" } node { name: "_SINK" id: 1 }': "empty graph",
    NODE_A + ' node { name: "b" id: 2 input_info { preceding_node: 99 } }':
        "node 'b' \\(id 2\\): input_info 0 names missing node id 99",
    NODE_A + ' node { name: "b" id: 2 input_info { preceding_node: 1 preceding_port: 1 } }':
        "node 'b' \\(id 2\\): input_info 0 names output port 1 of node 'a' \\(id 1\\)",
    NODE_A + ' node { name: "b" id: 2 input_info { preceding_node: 1 preceding_port: -2 } }':
        "output port -2 of node 'a'",
    NODE_A + ' node { name: "b" id: 2 control_input: 5 }':
        "node 'b' \\(id 2\\): control_input 0 names missing node id 5",
    'node { name: "a" output_info { size: -8 alias_input_port: -1 } }':
        "node 'a' \\(id 0\\): output_info 0: size must be non-negative, got -8",
    'node { name: "a" compute_cost: -1 }': "node 'a' \\(id 0\\): compute_cost must be non-neg",
    'node { name: "a" temporary_memory_size: -1 }': "'a' \\(id 0\\): temporary_memory_size must",
    'node { name: "a" persistent_memory_size: -3 }': "'a' \\(id 0\\): persistent_memory_size must",
    'node { name: "a" compute_cost: 9007199254740993 }': "'a' \\(id 0\\): compute_cost is too large",
    'node { name: "a" output_info { size: 8 } }':
        "'a' \\(id 0\\): output_info 0 has alias_input_port 0, but the node has 0 input",
    NODE_A + ' node { name: "b" id: 2 input_info { preceding_node: 1 } '
             'output_info { size: 8 alias_input_port: 3 } }': "alias_input_port 3, but the node has 1",
    NODE_A + ' node { name: "b" id: 2 input_info { preceding_node: 1 preceding_port: -1 } '
             'output_info { size: 8 alias_input_port: 0 } }': "aliases input_info 0, which is a control",
    NODE_A + ' node { name: "b" id: 1 }': "node 'b': duplicate id 1 \\(also used by node 'a'\\)",
    NODE_A + ' node { name: "a" id: 2 }': "duplicate op name 'a'",
    NODE_A + ' node { id: 2 }': "node #1 \\(id 2\\): missing name",
    (DATA / "cycle.pbtxt").read_text(): "cycle: op '[ab]' lies on a cycle",
    'node { name: "a" input_info { preceding_node: 0 } output_info { size: 1 alias_input_port: -1 } }':
        "cycle: op 'a' depends on itself",
    'node { name: "a" control_input: 0 }': "cycle: op 'a' depends on itself",
    'node { name: "a" colour: 3 }': "malformed CostGraphDef text: .*colour",
    'node { name: "a" id: x }': "malformed CostGraphDef text",
    'node { name: "a" id: 99999999999 }': "malformed CostGraphDef text",
    'node { name: "a"': "malformed CostGraphDef text",
}


@pytest.mark.parametrize("text,pattern", list(BAD_TEXTS.items()))
def test_bad_text_raises_one_line_graph_error(text, pattern):
    with pytest.raises(GraphError, match=pattern) as info:
        parse_costgraph_text(text, source="x.pbtxt")
    message = str(info.value)
    assert message.startswith("x.pbtxt: ") and "\n" not in message


def test_bad_bytes():
    good = to_costgraph_bytes(parse_costgraph_text(FEATURES))
    with pytest.raises(GraphError, match=r"^g\.pb: malformed CostGraphDef binary"):
        parse_costgraph_bytes(good[:-3], source="g.pb")
    with pytest.raises(GraphError, match="empty graph"):
        parse_costgraph_bytes(b"")
    with pytest.raises(GraphError, match="malformed"):
        parse_costgraph_bytes(b"\x0a\xff\xff\xff\xff\x0f")   # node of absurd length


def test_tensorflow_control_slot_and_sink_edges_are_dropped():
    text = NODE_A + """
    node { name: "_SINK" id: 9 input_info { preceding_node: 1 preceding_port: -1 }
           control_input: 1 }
    node { name: "b" id: 2 input_info { preceding_node: 0 } control_input: 0 control_input: 9 }
    node { name: "_SOURCE" id: 0 }"""
    g = parse_costgraph_text(text)
    assert g.names.tolist() == ["a", "b"]
    assert g.num_data_edges == 0 and g.num_control_edges == 0


# ---------------------------------------------------------------------------
# fuzzing: only GraphError may escape, and whatever parses must round-trip



def fuzz(examples: int) -> settings:
    """Deterministic (derandomized) and deadline-free, so CI is never flaky."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


BASE_TEXTS = [README_EXAMPLE, FEATURES, to_costgraph_text(random_graph(np.random.default_rng(7),
                                                                      num_ops=12, integer=True))]
TOKENS = ["node {", "}", "{", "name: ", '"a"', '"node_1"', '"_SOURCE"', "id: ", "input_info {",
          "output_info {", "preceding_node: ", "preceding_port: ", "size: ", "alias_input_port: ",
          "control_input: ", "compute_cost: ", "is_final: true", "-1", "0", "1", "2", "3", "-7",
          "9223372036854775807", "99999999999999999999", "\n", " ", ":", '"', "\\", "#", "é", "\x00",
          "dtype: DT_FLOAT", "shape { dim { size: 4 } }", "temporary_memory_size: ",
          "persistent_memory_size: "]


OUTCOMES: dict[str, int] = {}


def _accepts(parse, data):
    try:
        g = parse(data)
    except GraphError as exc:
        assert "\n" not in str(exc)
        OUTCOMES["error"] = OUTCOMES.get("error", 0) + 1
        return
    OUTCOMES["ok"] = OUTCOMES.get("ok", 0) + 1
    assert parse_costgraph_bytes(to_costgraph_bytes(g)).equals(g)


@fuzz(500)
@given(st.sampled_from(BASE_TEXTS), st.data())
def test_fuzz_text_splices(base, data):
    i = data.draw(st.integers(0, len(base)))
    j = data.draw(st.integers(i, min(len(base), i + 40)))
    insert = "".join(data.draw(st.lists(st.sampled_from(TOKENS), max_size=6)))
    _accepts(parse_costgraph_text, base[:i] + insert + base[j:])


@fuzz(400)
@given(st.sampled_from(BASE_TEXTS), st.data())
def test_fuzz_text_numbers_and_truncation(base, data):
    numbers = list(re.finditer(r"-?\d+", base))
    picked = data.draw(st.sets(st.integers(0, len(numbers) - 1), min_size=1, max_size=3))
    text = base
    for k in sorted(picked, reverse=True):       # right to left: earlier offsets stay valid
        m = numbers[k]
        value = data.draw(st.one_of(st.integers(-3, 15), st.integers(-2 ** 64, 2 ** 64)))
        text = text[:m.start()] + str(value) + text[m.end():]
    if data.draw(st.booleans()):
        text = text[:data.draw(st.integers(0, len(text)))]
    _accepts(parse_costgraph_text, text)


@fuzz(300)
@given(st.sampled_from(BASE_TEXTS), st.data())
def test_fuzz_text_node_blocks(base, data):
    """Whole node blocks dropped, duplicated and reordered: dangling ids, duplicates, cycles."""
    blocks = re.findall(r"node \{.*?\n\}", base, flags=re.S)
    picked = data.draw(st.lists(st.sampled_from(blocks), max_size=len(blocks) + 2))
    _accepts(parse_costgraph_text, "\n".join(picked))


BASE_BLOBS = [to_costgraph_bytes(parse_costgraph_text(t)) for t in BASE_TEXTS]


@fuzz(300)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(blob):
    _accepts(parse_costgraph_bytes, blob)


@fuzz(600)
@given(st.sampled_from(BASE_BLOBS), st.data())
def test_fuzz_mutated_bytes(base, data):
    blob = bytearray(base)
    for _ in range(data.draw(st.integers(0, 4))):
        k = data.draw(st.integers(0, len(blob) - 1))
        if data.draw(st.booleans()):
            blob[k] ^= 1 << data.draw(st.integers(0, 7))          # bit flip
        else:
            blob[k] = data.draw(st.integers(0, 255))              # byte substitution
    if data.draw(st.booleans()):
        blob = blob[:data.draw(st.integers(0, len(blob)))]         # truncation
    _accepts(parse_costgraph_bytes, bytes(blob))
