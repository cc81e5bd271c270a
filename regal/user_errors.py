"""What counts as the user's error, and how a command reports one: one line on stderr and
exit code 2, no traceback (REGAL_DEBUG=1 shows it).

Why one place: the `regal` command and the experiment scripts (`experiments/*.py`) take the
same kinds of input (graph files, records, budgets, device counts) and owe a researcher the
same answer to a typo, so both run their work through `report_user_errors`.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """A problem with the user's input; printed as one line, exit code 2."""


def report_user_errors(prog: str, run: Callable[[], int | None]) -> int:
    """`run()`'s exit code; a user error (UserError, a bad graph, a ValueError, a file that
    cannot be read or written) is printed as "PROG: error: ..." and gives EXIT_USAGE, an
    interrupt "PROG: interrupted" and EXIT_INTERRUPTED. A worker that died is not the user's
    input: one line, exit 1 (a rerun resumes). An OSError that names no file and is no
    write failure is a bug, and keeps its traceback."""
    from regal.files import WRITE_ERRNOS, WriteError
    from regal.workers import WorkerDied

    try:
        return int(run() or 0)
    except WorkerDied as exc:
        if os.environ.get("REGAL_DEBUG"):
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except (UserError, OSError, ValueError) as exc:   # GraphError is a ValueError
        # an OSError is the user's when it names a file (missing, a folder, not writable),
        # or when an output cannot be written (full disk, `ulimit -f`: regal.files)
        disk = isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS
        if os.environ.get("REGAL_DEBUG") or (isinstance(exc, OSError) and not exc.filename
                                             and not disk):
            raise
        if isinstance(exc, WriteError) or not isinstance(exc, OSError):
            msg = str(exc)
        elif exc.filename:
            msg = f"{exc.strerror}: {exc.filename}"
        else:  # a writer that does not go through regal.files names no file
            msg = f"{exc.strerror} (a file could not be written or read)"
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def refuse_empty(rows, what: str) -> None:
    """Refuses to write a table from no rows: a typo in an input path must not replace a
    committed table with an empty one. `what` names the input that gave nothing."""
    if not rows:
        raise UserError(f"{what}: nothing to tabulate (no rows), so no table was written")
