"""What native code (C/C++ libraries) writes straight to this process's file descriptors.

TensorFlow's absl notices and METIS's complaints are printed by C code, below Python's
`sys.stdout`/`sys.stderr`, so redirecting those objects does not reach them: only the file
descriptor itself can be pointed elsewhere for a while.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["silenced"]


@contextlib.contextmanager
def silenced(fd: int):
    """Sends file descriptor `fd` (1: stdout, 2: stderr) to /dev/null meanwhile; what Python
    buffered for it before is written first, and it is restored afterwards."""
    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        stream.flush()
    saved = os.dup(fd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        if stream is not None:
            stream.flush()
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)
