"""experiments/apply_large.py and a researcher's mistakes: an unknown model or an output in
a missing folder is one line on stderr and exit code 2, before the minutes of the apply."""

from __future__ import annotations

import pytest

from helpers import experiment
from regal.user_errors import report_user_errors


@pytest.mark.parametrize("flags, needle", [
    (["--model", "gpt2"], "'gpt2'"),
    (["--out", "/nonexistent/dir/apply.md"], "/nonexistent/dir"),
])
def test_mistakes_are_refused_before_the_apply(monkeypatch, capsys, flags, needle):
    script = experiment("apply_large")

    def no_apply(*args, **kwargs):
        raise AssertionError("the apply ran")
    monkeypatch.setattr(script, "apply_step", no_apply)
    monkeypatch.delenv("REGAL_DEBUG", raising=False)
    assert report_user_errors("apply_large.py", lambda: script.main(flags)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1 and needle in errors[0], err
