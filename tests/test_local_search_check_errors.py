"""experiments/local_search_check.py and a researcher's mistakes: one line on stderr and exit
code 2 before any run; a cache that is not this script's is neither read nor overwritten; both
methods' answers are saved as they come (a rerun resumes) under their code revision."""

from __future__ import annotations

import json

import pytest

from helpers import experiment, one_synthetic_graph, script_refused
from regal import optimizers
from regal.user_errors import report_user_errors


@pytest.fixture(scope="module")
def script():
    return experiment("local_search_check")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real")
    return folder, one_synthetic_graph(folder, 10, 12, 1)


def _argv(real, cache):
    folder, _ = real
    return ["--real-dir", str(folder), "--devices", "2", "--seeds", "1", "--budget", "100",
            "--cache", str(cache)]



@pytest.mark.parametrize("flags, needle", [
    (["--devices", "2,x"], "--devices"), (["--devices", "two"], "--devices"),
    (["--devices", "0"], "--devices"), (["--budget", "-5"], "--budget"),
    (["--real-dir", "/nonexistent/typo_real"], "/nonexistent/typo_real"),
    (["--graphs", "no_such_graph"], "no_such_graph"),
    (["--cache", "/nonexistent/dir/c.json"], "/nonexistent/dir"),
])
def test_bad_values_are_refused(script, real, tmp_path, capsys, flags, needle):
    script_refused(script.main, _argv(real, tmp_path / "c.json") + flags, capsys, needle)
    assert not (tmp_path / "c.json").exists()


def test_an_empty_real_dir_is_refused(script, tmp_path, capsys):
    argv = ["--real-dir", str(tmp_path), "--cache", str(tmp_path / "c.json")]
    script_refused(script.main, argv, capsys, "no .npz graph files")


def test_another_file_as_the_cache_is_refused_and_kept(script, real, tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    for text in ('{"key": "a", "peak": 1}\n{"key": "b", "peak": 2}\n', '["a list"]\n',
                 "garbled", '{"table1": [1, 2], "timing": [3]}\n'):   # a JSON object of lists
        other.write_text(text)
        script_refused(script.main, _argv(real, other), capsys, str(other))
        assert other.read_text() == text
    script_refused(script.main, _argv(real, tmp_path), capsys, "is a folder")


def test_both_answers_are_saved_and_a_rerun_resumes(script, real, tmp_path, capsys,
                                                    monkeypatch):
    cache = tmp_path / "c.json"
    argv = _argv(real, cache)
    assert report_user_errors("local_search_check.py", lambda: script.main(argv)) == 0
    saved = json.loads(cache.read_text())
    assert sorted(k.split("@")[0] for k in saved) == ["brkga", "local-search"]

    def no_run(*args, **kwargs):
        raise AssertionError("a cached run ran again")
    monkeypatch.setattr(optimizers, "solve", no_run)
    argv = _argv(real, cache)
    assert report_user_errors("local_search_check.py", lambda: script.main(argv)) == 0
    assert json.loads(cache.read_text()) == saved
    # another revision of BRKGA's code: its answer is not reused
    monkeypatch.setitem(optimizers.REVISIONS, "brkga", "changed-1")
    with pytest.raises(AssertionError, match="ran again"):
        script.main(_argv(real, cache))
