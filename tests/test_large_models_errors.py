"""experiments/large_models.py and a researcher's mistakes: one line on stderr and exit code 2
before any run; runs of another `--limit-factor` not reused; a torn last line cut."""

from __future__ import annotations

import json

import pytest

from helpers import experiment, script_refused


@pytest.fixture(scope="module")
def script():
    return experiment("large_models")


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    from regal.io import save_graph
    from regal.synth import generate

    folder = tmp_path_factory.mktemp("large")
    save_graph(generate("cnn", 40, 3, training=True), folder / "small_train_b1.npz")
    return folder


def _argv(graphs, tmp_path, *flags):
    return ["--graphs", str(graphs), "--devices", "2", "--time-limit", "1", "--fit-only",
            "--methods", "m-topo", "--records", str(tmp_path / "r.jsonl"),
            "--out", str(tmp_path / "t.md"), *flags]



@pytest.mark.parametrize("flags, needle", [
    (["--files", "/nonexistent/nope.npz"], "/nonexistent/nope.npz"),
    (["--graphs", "/nonexistent/typo"], "/nonexistent/typo"),
    (["--models", "small", "smal"], "smal"), (["--batch", "4"], "--batch 4"),
    (["--methods", "m_topo"], "'m_topo'"), (["--bisect", "nope"], "'nope'"),
    (["--devices", "0"], "--devices"), (["--devices", "two"], "--devices"),
    (["--time-limit", "-1"], "--time-limit"), (["--limit-factor", "0"], "--limit-factor"),
    (["--out", "/nonexistent/dir/t.md"], "/nonexistent/dir"),
    (["--records", "/nonexistent/dir/r.jsonl"], "/nonexistent/dir"),
])
def test_mistakes_are_refused_before_any_run(script, graphs, tmp_path, capsys, flags, needle):
    script_refused(script.main, _argv(graphs, tmp_path, *flags), capsys, needle)
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "t.md").exists()


def test_records_that_are_a_folder_or_another_file_are_refused(script, graphs, tmp_path,
                                                                 capsys):
    script_refused(script.main, _argv(graphs, tmp_path, "--records", str(tmp_path)), capsys,
                   "is a folder")
    other = tmp_path / "other.jsonl"
    other.write_text('{"set": "s", "value": 1}\n')
    script_refused(script.main, _argv(graphs, tmp_path, "--records", str(other)), capsys,
                   "line 1 is not a large-model run")
    assert other.read_text() == '{"set": "s", "value": 1}\n'
    assert not (tmp_path / "t.md").exists()


def test_another_limit_factor_runs_again_and_a_torn_line_is_cut(script, graphs, tmp_path):
    records = tmp_path / "r.jsonl"

    def rows():
        return [json.loads(line) for line in records.read_text().splitlines()]

    assert script.main(_argv(graphs, tmp_path, "--limit-factor", "1.3")) == 0
    (first,) = rows()
    assert first["key"].endswith("|1.0|0")       # the default factor: the key as before
    assert script.main(_argv(graphs, tmp_path, "--limit-factor", "0.6")) == 0
    assert len(rows()) == 2
    second = rows()[1]
    assert second["limit_factor"] == 0.6 and second["limit"] < first["limit"]
    table = (tmp_path / "t.md").read_text()
    assert "0.6 x the one-device peak" in table
    whole = records.read_text()
    with records.open("a") as fh:
        fh.write('{"key": "small_tr')
    assert script.main(_argv(graphs, tmp_path, "--limit-factor", "1.3")) == 0   # reused
    assert records.read_text() == whole
