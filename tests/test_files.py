"""Issue 36 items 7-10: every write atomic and locked (`regal.files`).

A second `best-known` build or `train` run on the same store / run folder is refused before
any work; a write that fails (full disk, `ulimit -f`) is one line, exit 2, and leaves the
previous file as it was; `regal optimize ... | head -1` keeps its solution file; every JSON
the project writes is standard JSON; an interrupted `regal train` exits 128 + the signal."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal

import pytest

from regal.cli import main
from helpers import one_error_line, one_synthetic_graph, refused, run_regal, strict_json


@contextlib.contextmanager
def held_lock(path):
    """Another process's lock on `path` (a file or folder), taken without regal.files: a
    second open file description in this process conflicts just as another process does."""
    fd = os.open(path, os.O_RDONLY if os.path.isdir(path) else os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def forbidden(*args, **kwargs):
    raise AssertionError("work started although another writer holds the lock")


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> str:
    return one_synthetic_graph(tmp_path_factory.mktemp("graphs"), 14, 20, 5)


# ---------------------------------------------------------------------------
# the helpers themselves


def test_replacing_leaves_the_old_file_and_no_temporary_behind(tmp_path):
    from regal import files

    path = tmp_path / "keep.json"
    path.write_text("old")
    path.chmod(0o640)
    with pytest.raises(files.WriteError,
                       match=r"keep.json: File too large \(the previous file is unchanged\)"):
        with files.replacing(path) as tmp:
            tmp.write_text("half")
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    with pytest.raises(KeyboardInterrupt):
        with files.replacing(path) as tmp:
            raise KeyboardInterrupt
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["keep.json"]
    files.write_json(path, {"a": 1})
    assert path.read_text() == '{"a": 1}\n' and os.listdir(tmp_path) == ["keep.json"]
    assert path.stat().st_mode & 0o777 == 0o640  # the output keeps its permissions


def test_json_text_is_standard_json():
    from regal import files

    value = {"value": float("inf"), "low": -float("inf"), "x": [float("nan"), 1.5], "n": 3}
    text = files.json_text(value, sort_keys=True)
    assert strict_json(text) == {"value": "Infinity", "low": "-Infinity", "x": ["NaN", 1.5],
                                 "n": 3}
    assert float(strict_json(text)["value"]) == float("inf")  # float() reads it back


def test_lock_is_exclusive_and_follows_a_replaced_file(tmp_path):
    from regal import files

    path = tmp_path / "store.jsonl"
    with files.Lock(path, "busy"):
        with pytest.raises(ValueError, match="busy"):
            files.Lock(path, "busy")
        files.write_text(path, "compacted\n")  # replaced while locked (Store.compact)
        # the old file's lock no longer covers the path: a newcomer locks the new file
        with files.Lock(path, "busy"), pytest.raises(ValueError, match="busy"):
            files.Lock(path, "busy")
    with files.Lock(tmp_path, "folder busy"), pytest.raises(ValueError, match="folder busy"):
        files.Lock(tmp_path, "folder busy")


def test_a_failed_append_is_cut_and_named(tmp_path):
    """A line the disk took only half of must not stay: the next reader would see a
    garbled line in the middle of the file once more lines follow."""
    from regal import files

    path = tmp_path / "records.jsonl"
    writer = files.JsonLinesWriter(path, busy="busy")
    writer.write({"a": 1})
    real = writer.file

    class HalfDisk:
        def write(self, data):
            real.write(bytes(data[:5]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def fileno(self):
            return real.fileno()

    writer.file = HalfDisk()
    with pytest.raises(files.WriteError, match="records.jsonl: No space left on device"):
        writer.write({"b": 2})
    writer.file = real
    writer.write({"c": 3})
    writer.close()
    assert path.read_bytes() == b'{"a": 1}\n{"c": 3}\n'


# ---------------------------------------------------------------------------
# item 7: best-known locks its store at the start


def test_a_second_best_known_build_is_refused_before_any_work(graph, tmp_path, capsys,
                                                              monkeypatch):
    import regal.bestknown

    store = tmp_path / "bk.jsonl"
    store.write_bytes(b'{"note": "another build is running"}\n')
    monkeypatch.setattr(regal.bestknown, "_run_job", forbidden)
    with held_lock(store):
        refused(["best-known", graph, "--devices", "2", "--time-per-graph", "30",
                 "--workers", "1", "--quiet", "--out", str(store)], capsys,
                "another process is writing it")
    assert store.read_bytes() == b'{"note": "another build is running"}\n'


# ---------------------------------------------------------------------------
# item 8 and judgement (b): train locks its run folder; a signal is exit 128 + N


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_training_run_in_one_folder_is_refused_before_any_work(tmp_path, capsys,
                                                                        monkeypatch, resume):
    """Refused before TensorFlow loads, before the stored configuration is rewritten and
    before any graph is read."""
    import dataclasses

    import regal.tfenv
    import regal.train

    run = tmp_path / "run"
    run.mkdir()
    config = json.dumps(dataclasses.asdict(regal.train.TrainConfig(
        train="train:3", val="valid:1", out=str(run))), indent=2)
    (run / "train_config.json").write_text(config)
    if resume:
        (run / "checkpoint.npz").write_bytes(b"")
    monkeypatch.setattr(regal.tfenv, "quiet_native_logs", forbidden)
    monkeypatch.setattr(regal.train.loop, "graph_source", forbidden)
    argv = ["train", "--resume", str(run)] if resume else \
        ["train", "--train", "train:3", "--val", "valid:1", "--out", str(run)]
    with held_lock(run):
        refused(argv + ["--quiet"], capsys, "another training run is using")
    assert (run / "train_config.json").read_text() == config
    assert sorted(os.listdir(run)) == ["checkpoint.npz", "train_config.json"][not resume:]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_training_run_exits_128_plus_the_signal(tmp_path, capsys, monkeypatch,
                                                               signum, code):
    """As `compare` does on Ctrl-C (130), after the run saved its checkpoint."""
    import regal.train

    def stopped_by_a_signal(config, resume=False):
        return {"stopped": "signal", "signal": int(signum), "step": 3, "wall_time": 6.0,
                "val_improvement": None, "policy": str(tmp_path / "run" / "policy")}
    monkeypatch.setattr(regal.train, "train", stopped_by_a_signal)
    assert main(["train", "--train", "t", "--val", "v", "--out", str(tmp_path / "run"),
                 "--quiet"]) == code
    captured = capsys.readouterr()
    assert "stopped (signal) at step 3" in captured.out
    assert "last validation: none yet" in captured.out
    assert "interrupted" in captured.err and "--resume" in captured.err


# ---------------------------------------------------------------------------
# item 9: a full disk (here a file-size limit) is one line and keeps the previous file


def test_full_disk_keeps_the_init_file_that_optimize_would_replace(graph, tmp_path, capsys):
    keep = tmp_path / "keep.json"
    assert main(["optimize", graph, "--devices", "2", "--budget", "100", "--out",
                 str(keep)]) == 0
    before = keep.read_bytes()
    code, _, err = run_regal(["optimize", graph, "--devices", "2", "--budget", "100", "--method",
                          "local-search", "--init", keep, "--out", keep],
                         file_limit=len(before) // 2)
    assert code == 2, err
    line = one_error_line(err)
    assert str(keep) in line and "File too large" in line and "unchanged" in line, line
    assert keep.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.json"]  # no temporary file left behind


# ---------------------------------------------------------------------------
# item 10: `regal optimize ... --out s.json | head -1` keeps the solution


@pytest.mark.parametrize("limit, exit_code", [(None, 0), ("1", 3)])
def test_a_closed_pipe_keeps_the_files_and_the_exit_code(graph, tmp_path, limit, exit_code):
    solution, plot = tmp_path / "s.json", tmp_path / "s.png"
    argv = ["optimize", graph, "--devices", "2", "--budget", "100", "--out", solution,
            "--plot", plot] + (["--memory-limit", limit] if limit else [])
    code, out, err = run_regal(argv, read_lines=1)
    assert out.endswith("ops on 2 devices\n") and out.count("\n") == 1
    assert code == exit_code and "Traceback" not in err and "BrokenPipe" not in err, err
    record = strict_json(solution.read_text())
    assert len(record["ops"]) == record["graph"]["ops"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------
# judgement (a): standard JSON everywhere, and its readers accept it


def test_an_infinite_value_is_written_as_standard_json_and_read_back(graph, tmp_path, capsys):
    """Every memory limit 0 under the makespan objective: the makespan is infinite."""
    from regal import harness

    out = tmp_path / "inf.json"
    assert main(["optimize", graph, "--devices", "2", "--budget", "50", "--objective",
                 "makespan", "--memory-limit", "0", "--out", str(out)]) == 3
    assert strict_json(out.read_text())["result"]["value"] == "Infinity"
    argv = ["compare", "--methods", "random", "--graphs", os.path.dirname(graph),
            "--objective", "makespan", "--memory-limit", "0", "--budget", "100", "--seeds",
            "1", "--workers", "1", "--quiet", "--out", str(tmp_path / "res")]
    assert main(argv) == 0
    lines = (tmp_path / "res" / harness.RECORDS_FILE).read_text().splitlines()
    assert [strict_json(line)["value"] for line in lines] == ["Infinity"]
    capsys.readouterr()
    assert main(argv) == 0  # the reader accepts the record: resumed, not run again
    assert "0 runs done, 1 already recorded" in capsys.readouterr().out


def test_read_own_rows_cuts_or_skips_a_torn_line_and_refuses_foreign_files(tmp_path):
    from regal.files import read_own_rows
    from regal.user_errors import UserError

    path = tmp_path / "runs.jsonl"
    assert read_own_rows(path, ("a",), "--records") == []          # none yet
    whole = '{"a": 1, "b": 2}\n\n{"a": 3}\n'
    path.write_text(whole + '{"a": 4, "b')                          # killed mid-line
    assert read_own_rows(path, ("a",), "--records", cut=False) == [{"a": 1, "b": 2}, {"a": 3}]
    assert path.read_text().endswith('"b')                          # another script's: kept
    assert read_own_rows(path, ("a",), "--records") == [{"a": 1, "b": 2}, {"a": 3}]
    assert path.read_text() == whole                                 # ours: cut
    with pytest.raises(UserError, match=r"--records .*: line 3 is not a run \(it lacks some "
                                        r"of a, b\)"):
        read_own_rows(path, ("a", "b"), "--records", "run")
    path.write_text("not json\n")
    with pytest.raises(UserError, match="line 1 is not JSON"):
        read_own_rows(path, ("a",), "--cache")
    with pytest.raises(UserError, match="is a folder"):
        read_own_rows(tmp_path, ("a",), "--cache")
