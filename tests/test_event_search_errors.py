"""experiments/event_search.py and a researcher's mistakes: a graph name that is neither one
of the synthetic test split's first 20 nor a sample is one line on stderr and exit code 2,
before any search."""

from __future__ import annotations

import pytest

from helpers import experiment, script_refused
from regal.user_errors import UserError


@pytest.fixture(scope="module")
def script():
    return experiment("event_search")


@pytest.mark.parametrize("argv, needle", [
    (["--graphs", "inception_infer40"], "inception_infer40"),
    (["--graphs", "test_abc"], "test_abc"),
    (["--graphs", "test_00099"], "test_00099"),
    (["--graphs", "test_00000", "inception_infer40"], "inception_infer40"),  # before any search
    (["--devices", "0"], "--devices"),
    (["--time-limit", "0"], "--time-limit"),
])
def test_a_mistake_is_one_line_and_exit_2_before_any_search(script, capsys, argv, needle):
    captured = script_refused(script.main, argv, capsys, needle)
    assert captured.out == ""


def test_the_graph_names_still_load(script):
    """`_graph` is also imported by other scripts: good names give their graphs."""
    assert script._graph("test_00000").num_nodes == 68
    assert script._graph("inception_infer_40").num_nodes > 0
    with pytest.raises(UserError):
        script._graph("test_00020")
