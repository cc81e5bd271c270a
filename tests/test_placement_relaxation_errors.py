"""experiments/placement_relaxation.py and a researcher's mistakes: one line on stderr and
exit code 2 before any work, and a committed table never replaced by an empty one."""

from __future__ import annotations

import pytest

from helpers import experiment, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment("placement_relaxation")


@pytest.mark.parametrize("argv, needle", [
    (["--max-ops", "-1"], "--max-ops"),
    (["--devices", "0"], "--devices"),
    (["--store", "{tmp}/none.jsonl"], "--store"),
    (["--graphs", "{tmp}/typo"], "--graphs"),
    (["--out", "{tmp}/missing/out.md"], "--out"),
    ([], "nothing to tabulate"),        # no graph of the store in --graphs
])
def test_a_mistake_is_one_line_exit_2_and_the_table_is_kept(script, tmp_path, capsys, argv,
                                                            needle):
    store = tmp_path / "store.jsonl"
    store.write_text("")
    (tmp_path / "graphs").mkdir()
    out = tmp_path / "out.md"
    out.write_text("# the committed table\n")
    argv = ["--store", str(store), "--graphs", str(tmp_path / "graphs"), "--out", str(out),
            *(a.replace("{tmp}", str(tmp_path)) for a in argv)]
    script_refused(script.main, argv, capsys, needle)
    assert out.read_text() == "# the committed table\n"
