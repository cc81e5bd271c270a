"""`regal` in a child process, under the conditions a test cannot make in its own process
(issue 36): a small file-size limit, a stdout whose reader has gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def regal(argv, *, file_limit: int | None = None, read_lines: int | None = None,
          timeout: float = 300) -> tuple[int, str, str]:
    """Runs `python -m regal.cli ARGV`: (exit code, stdout, stderr).

    `file_limit`: no file may grow past this many bytes (RLIMIT_FSIZE with SIGXFSZ ignored,
    so a write past it fails with EFBIG, as on a full disk). `read_lines`: the reader of its
    stdout takes that many lines and closes the pipe (0: before anything is printed, as
    `| head -0`); the child is unbuffered, so every print after that meets a closed pipe."""
    env = {k: v for k, v in os.environ.items() if k != "REGAL_DEBUG"}
    if read_lines is not None:
        env["PYTHONUNBUFFERED"] = "1"

    def limit():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    proc = subprocess.Popen([sys.executable, "-m", "regal.cli", *map(str, argv)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=limit if file_limit is not None else None)
    if read_lines is None:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    out = "".join(proc.stdout.readline() for _ in range(read_lines))
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=timeout)
    return proc.returncode, out, err


def one_error_line(err: str) -> str:
    """The single `regal: error:` line of a refusal, checked to be the last line written and
    to come without a traceback (progress bars' lines aside)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1 and lines[-1] == errors[0], err
    return errors[0]
