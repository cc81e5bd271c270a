"""experiments/budget_schedules.py and a researcher's mistakes: one line on stderr and exit
code 2 before any run, an unreadable cache refused and kept, a torn last line cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import experiment, one_synthetic_graph, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment("budget_schedules")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schedules")
    folder = tmp / "graphs"
    for seed in (1, 2):
        (tmp / f"g{seed}").mkdir()
        path = Path(one_synthetic_graph(tmp / f"g{seed}", 10, 12, seed))
        folder.mkdir(exist_ok=True)
        path.rename(folder / f"graph{seed}.npz")
    return folder



def _argv(folder, out):
    return ["--graphs", str(folder), "--devices", "2", "--seeds", "0", "--budget", "100",
            "--schedules", "local-search", "--out", str(out)]


@pytest.mark.parametrize("flags, needle", [
    (["--budget", "-5"], "--budget"), (["--devices", "0"], "--devices"),
    (["--devices", "two"], "--devices"), (["--limit", "-1"], "--limit"),
    (["--seeds", "-1"], "--seeds"), (["--out", "/nonexistent/dir/t.md"], "/nonexistent/dir"),
    (["--cache", "/nonexistent/dir/t.jsonl"], "/nonexistent/dir"),
])
def test_bad_values_are_refused_before_any_run(script, folder, tmp_path, capsys, flags, needle):
    script_refused(script.main, _argv(folder, tmp_path / "t.md") + flags, capsys, needle)
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "t.md").exists()


def test_a_cache_that_is_a_folder_or_another_file_is_refused_and_kept(script, folder, tmp_path,
                                                                       capsys):
    script_refused(script.main, _argv(folder, tmp_path / "t.md") + ["--cache", str(tmp_path)],
                   capsys, "is a folder")
    other = tmp_path / "other.jsonl"
    for text in ('{"key": "x", "peak": 1}\n', "garbled\n"):
        other.write_text(text)
        script_refused(script.main, _argv(folder, tmp_path / "t.md") + ["--cache", str(other)],
                       capsys, str(other))
        assert other.read_text() == text and not (tmp_path / "t.md").exists()


def test_a_torn_last_line_is_cut_and_the_run_resumes(script, folder, tmp_path):
    out = tmp_path / "t.md"
    assert script.main(_argv(folder, out)) == 0
    cache = out.with_suffix(".jsonl")
    whole = cache.read_text()
    assert len(whole.splitlines()) == 4            # brkga and local search on two graphs
    with cache.open("a") as fh:
        fh.write('{"schedule": "brk')
    assert script.main(_argv(folder, out)) == 0
    assert cache.read_text() == whole and "0 runs made" in out.read_text()
    # --limit 1: the first graph only (a negative one no longer drops the last graph)
    assert script.main(_argv(folder, out) + ["--limit", "1"]) == 0
    assert "4 from" not in out.read_text() and "2 from" in out.read_text()
