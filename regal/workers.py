"""Set-up shared by every process-pool worker (experiment harness, training): its share of
the cores for numba's batch evaluator, and an exit when the parent process dies."""

from __future__ import annotations

import os
import threading
import time


def set_numba_threads(threads: int) -> None:
    """Numba's thread count for this process, clamped to what numba was started with."""
    try:
        import numba
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except Exception:
        pass


def exit_with_parent(poll_seconds: float = 0.5) -> None:
    """Ends this process soon after its parent dies (however it died: a SIGKILL runs no
    cleanup), so a killed run leaves no orphan worker finishing queued work."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
