"""Writing outputs so that no failure and no second process can spoil them (issue 36).

Why: a full disk, a file-size limit (`ulimit -f`) or a kill in the middle of a write must
neither leave half a file nor destroy the one it replaces (`regal optimize --init keep.json
--out keep.json`), and two processes writing one records file, store or run folder would
each keep half of their work. So every output goes through one of these:

- `replacing` (and `write_bytes`, `write_text`, `write_json` on top of it): a whole file is
  written to a temporary file beside it, fsynced and renamed over it; on any failure the
  temporary file is removed and the old file is left exactly as it was;
- `Lock`: an exclusive lock on a file or folder, taken before any work and held to the end;
  a second writer is refused at once, not after hours of work it would then lose;
- `JsonLinesWriter`: appends JSON lines (compare records, best-known stores, training
  history) under the file's `Lock`, each line flushed and fsynced; a line that could not be
  written whole is cut off again, and a torn last line left by a kill is cut before the
  next append (readers skip it: `regal.harness.read_records`);
- `json_text`: standard JSON only: NaN and infinities, which `json.dumps` writes as bare
  `NaN` / `Infinity` that strict readers refuse, are written as the strings "NaN",
  "Infinity" and "-Infinity", which `float()` reads back.

A write that fails raises `WriteError`, an OSError naming the output, that the CLI prints as
one line (exit 2). Standard library only: the CLI imports this before any heavy module.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["replacing", "write_bytes", "write_text", "write_json", "json_text", "Lock",
           "JsonLinesWriter", "WriteError", "WRITE_ERRNOS", "cut_torn_tail", "read_json_lines",
           "read_own_rows"]

# what a full or failing disk looks like: the CLI turns these into one line, never a traceback
WRITE_ERRNOS = frozenset(code for code in (errno.ENOSPC, errno.EFBIG, errno.EIO,
                                           getattr(errno, "EDQUOT", None)) if code)


class WriteError(OSError):
    """An output that could not be written; `filename` names it and `kept` says what of it
    is left (the previous file, or the lines before), so the message is the whole story."""

    def __init__(self, cause: OSError, path, kept: str):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.kept = kept

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror} ({self.kept})"


# ---------------------------------------------------------------------------
# whole files: a temporary file, renamed over the output


@contextlib.contextmanager
def replacing(path):
    """Yields a temporary path beside `path` for the block to write; then fsyncs it and
    renames it over `path` (one step: a reader sees the old file or the new one). The
    temporary name ends in `path`'s suffix, so writers that choose the format by it
    (matplotlib, numpy) choose the same. On any failure the temporary file is removed and
    `path` is untouched; an OSError becomes a WriteError naming `path`."""
    path = Path(path)
    kept = "the previous file is unchanged" if path.exists() else "nothing was written"
    tmp = None
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                                       dir=path.parent)
            os.close(fd)
            yield Path(tmp)
            _fsync(tmp)
            os.chmod(tmp, _mode_of(path))
            os.replace(tmp, path)
            tmp = None
        except WriteError:
            raise
        except OSError as exc:
            raise WriteError(exc, path, kept) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    with contextlib.suppress(OSError):  # the rename itself survives a crash (best effort)
        _fsync(path.parent)


def write_bytes(path, data: bytes) -> None:
    """Replaces `path` with `data` atomically (see `replacing`)."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text(path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path, value, **options) -> None:
    """Replaces `path` with `value` as standard JSON (`json_text`) and a final newline."""
    write_text(path, json_text(value, **options) + "\n")


def json_text(value, **options) -> str:
    """`json.dumps(value)` that never writes NaN or Infinity (not JSON: jq, JavaScript and
    Go refuse them): non-finite floats become the strings "NaN", "Infinity", "-Infinity"."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # rare (a run over a memory limit has an infinite makespan): walk it
        return json.dumps(_finite(value), allow_nan=False, **options)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mode_of(path: Path) -> int:
    """The output keeps its permissions; a new one gets the usual 0666 less the umask
    (mkstemp's 0600 would hide it from everyone else)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


# ---------------------------------------------------------------------------
# locks and appends


class Lock:
    """An exclusive lock (flock) on a file (created if missing) or a folder, held until
    `release`. Not waiting for it is the point: a second build or training run that waited
    would repeat hours of the first one's work, so `busy` (a ValueError) comes at once.

    A file replaced while it is locked (`Store.compact`) is not unlocked by that: whoever
    locks the old file afterwards sees that the path names another file and locks that."""

    def __init__(self, path, busy: str):
        import fcntl

        path = Path(path)
        flags = os.O_RDONLY if path.is_dir() else os.O_RDONLY | os.O_CREAT
        while True:
            fd = os.open(path, flags, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ValueError(busy) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                if os.path.samestat(os.fstat(fd), os.stat(path)):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # replaced between open and flock: lock what the path names now
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class JsonLinesWriter:
    """Appends one JSON line per record (`json_text`) to `path`, flushed and fsynced, holding
    the file's `Lock` (`busy`: the refusal's message) until `close`.

    A line is whole or absent: one that fails (full disk, file-size limit) is cut off again
    before the WriteError, and a torn tail from a kill is cut when the file is opened."""

    def __init__(self, path, busy: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = Lock(self.path, busy)
        try:
            cut_torn_tail(self.path)
            self.file = open(self.path, "ab", buffering=0)  # unbuffered: nothing pending
        except BaseException:
            self._lock.release()
            raise

    def write(self, record) -> None:
        line = memoryview((json_text(record, sort_keys=True) + "\n").encode())
        start = os.fstat(self.file.fileno()).st_size
        try:
            while line:
                line = line[self.file.write(line):]
            os.fsync(self.file.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.truncate(self.file.fileno(), start)
            raise WriteError(exc, self.path, "the lines before this one are kept") from exc

    def close(self) -> None:
        self.file.close()
        self._lock.release()

    def __enter__(self) -> "JsonLinesWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_json_lines(path) -> list:
    """The values of a JSON-lines file (`JsonLinesWriter`'s), blank lines skipped; [] when
    there is no such file. Open the writer first when resuming: it cuts a torn last line."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_own_rows(path, fields, flag: str, kind: str = "record of this kind",
                  cut: bool = True) -> list[dict]:
    """The rows of a script's own JSON-lines file, [] when there is none. A torn last line (a
    killed run) is cut first, as its writer does; with `cut` false (another script's file,
    read and never changed) it is left out instead. A folder, a line that is not JSON, or a
    row without every one of `fields` is the user's error (a UserError naming `flag`, the
    file and the line), so that a wrong path is neither read as empty nor appended to."""
    from regal.user_errors import UserError

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a folder; expected a JSON-lines file")
    if not path.is_file():
        return []
    if cut:
        cut_torn_tail(path)
    lines = path.read_bytes().splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()                     # torn, and not ours to cut
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"{flag} {path}: line {number} is not JSON ({exc})") from None
        if not isinstance(row, dict) or any(field not in row for field in fields):
            raise UserError(f"{flag} {path}: line {number} is not a {kind} (it lacks some of "
                            f"{', '.join(fields)})")
        rows.append(row)
    return rows


def cut_torn_tail(path) -> None:
    """Truncates a half-written last line so the next append starts on a fresh line."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        block, pos = 65536, size
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            i = f.read(pos - start).rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
