"""regal.user_errors: what the `regal` command and the experiment scripts print and return
for a user's error, an interrupt, a dead worker and a bug."""

from __future__ import annotations

import errno

import pytest

from regal.files import WriteError
from regal.graph import GraphError
from regal.user_errors import (EXIT_INTERRUPTED, EXIT_USAGE, UserError, refuse_empty,
                               report_user_errors)
from regal.workers import WorkerDied


def _raising(exc):
    def run():
        raise exc
    return run


@pytest.mark.parametrize("exc, shown", [
    (UserError("--budget: expected a positive integer"), "--budget: expected a positive integer"),
    (ValueError("op 'a': device 7 is outside 0..1"), "op 'a': device 7 is outside 0..1"),
    (GraphError("g.npz: not a graph"), "g.npz: not a graph"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "missing.npz"),
     "No such file or directory: missing.npz"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "runs/"), "Is a directory: runs/"),
    (WriteError(OSError(errno.ENOSPC, "No space left on device"), "out.md", "nothing kept"),
     "out.md"),
])
def test_a_users_error_is_one_line_and_exit_2(monkeypatch, capsys, exc, shown):
    monkeypatch.delenv("REGAL_DEBUG", raising=False)
    assert report_user_errors("tool", _raising(exc)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tool: error: ") and shown in err
    assert "Traceback" not in err


def test_the_exit_code_of_the_run_passes_through_and_none_is_0():
    assert report_user_errors("tool", lambda: 3) == 3
    assert report_user_errors("tool", lambda: None) == 0


def test_an_interrupt_and_a_dead_worker(monkeypatch, capsys):
    monkeypatch.delenv("REGAL_DEBUG", raising=False)
    assert report_user_errors("tool", _raising(KeyboardInterrupt())) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "tool: interrupted\n"
    assert report_user_errors("tool", _raising(WorkerDied("worker 2 died"))) == 1
    assert capsys.readouterr().err == "tool: error: worker 2 died\n"


def test_a_bug_keeps_its_traceback(monkeypatch):
    monkeypatch.delenv("REGAL_DEBUG", raising=False)
    with pytest.raises(KeyError):
        report_user_errors("tool", _raising(KeyError("x")))
    with pytest.raises(OSError):   # an OSError naming no file, no write failure: a bug
        report_user_errors("tool", _raising(OSError(errno.EPIPE, "Broken pipe")))
    monkeypatch.setenv("REGAL_DEBUG", "1")
    with pytest.raises(ValueError):
        report_user_errors("tool", _raising(ValueError("shown with its traceback")))


def test_refuse_empty_names_the_input():
    refuse_empty([1], "--records r.jsonl")
    with pytest.raises(UserError, match="--records r.jsonl: nothing to tabulate"):
        refuse_empty([], "--records r.jsonl")
