"""Pool-worker set-up: numba's thread share, and workers that end when their parent is killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numba

from regal.workers import set_numba_threads

PARENT = textwrap.dedent("""
    import multiprocessing, sys, time
    from regal.workers import exit_with_parent

    def child():
        exit_with_parent(poll_seconds=0.05)
        time.sleep(60)

    if __name__ == "__main__":
        p = multiprocessing.get_context("spawn").Process(target=child)
        p.start()
        print(p.pid, flush=True)
        time.sleep(60)
""")


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_worker_exits_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.3)
    assert alive(child)
    os.kill(parent.pid, signal.SIGKILL)                  # no cleanup runs in the parent
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not alive(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone


def test_numba_threads_are_clamped():
    before = numba.get_num_threads()
    try:
        set_numba_threads(10 ** 6)
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
        set_numba_threads(0)
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
