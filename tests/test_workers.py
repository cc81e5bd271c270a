"""Pool-worker set-up: numba's thread share, and workers that end when their parent is killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numba
import pytest

from regal.workers import Workers, blas_controller, set_numba_threads, single_threaded_blas
from helpers import alive

PARENT = textwrap.dedent("""
    import multiprocessing, sys, time
    from regal.workers import exit_with_parent

    def child(ready):
        exit_with_parent(poll_seconds=0.05)
        open(ready, "w").close()   # watching its parent from now on
        time.sleep(60)

    if __name__ == "__main__":
        p = multiprocessing.get_context("spawn").Process(target=child, args=(sys.argv[1],))
        p.start()
        print(p.pid, flush=True)
        time.sleep(60)
""")


def test_worker_exits_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    ready = tmp_path / "ready"
    parent = subprocess.Popen([sys.executable, str(script), str(ready)], stdout=subprocess.PIPE,
                              text=True)
    child = int(parent.stdout.readline())
    # the parent is killed once the child watches it (a condition, not a time: a child that
    # had not started watching yet would take init for its parent and never end)
    deadline = time.monotonic() + 300
    while not ready.exists() and alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists() and alive(child)
    os.kill(parent.pid, signal.SIGKILL)                  # no cleanup runs in the parent
    parent.wait()
    deadline = time.monotonic() + 60                     # it looks every 0.05 s
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


def test_one_executor_in_a_pool_and_in_this_process():
    for count in (1, 2):
        with Workers(count) as workers:
            assert workers.inline == (count == 1)
            assert workers.map(abs, [-3, 1, -2]) == [3, 1, 2]  # in order
            queue, ended = iter([-1, -2, -3, -4, -5]), []

            def start():
                x = next(queue, None)
                return None if x is None else (x, abs, x)

            workers.run(start, lambda tag, get: ended.append((tag, get())))
            if workers.inline:  # one at a time, in order
                assert ended == [(-1, 1), (-2, 2), (-3, 3), (-4, 4), (-5, 5)]
            assert sorted(ended) == [(-5, 5), (-4, 4), (-3, 3), (-2, 2), (-1, 1)]
    assert Workers(8, jobs=1).inline  # no more processes than there is work for


def test_a_worker_process_that_dies_is_worker_died():
    """WorkerDied names the calls in flight, and the pool's other worker is not waited for.
    Run in a fresh interpreter: inside the full test run the same calls (time.sleep and
    os._exit themselves) once made the pool wait for the sleeping worker, a state left by
    earlier tests that is not traced yet."""
    script = textwrap.dedent("""
        import os, time
        from regal.workers import Workers, WorkerDied

        def sleeps(seconds):
            time.sleep(seconds)

        def dies(code):
            os._exit(code)

        def main():
            calls = iter([("sleeps", sleeps, 60), ("dies", dies, 1)])
            began = time.monotonic()
            try:
                with Workers(2) as workers:
                    workers.run(lambda: next(calls, None), lambda tag, get: get())
            except WorkerDied as died:
                print(sorted(died.in_flight), time.monotonic() - began < 30,
                      "call" in str(died))

        if __name__ == "__main__":
            main()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=180)
    assert out.stdout.split() == ["['dies',", "'sleeps']", "True", "True"], out.stderr


def test_single_threaded_blas_limits_blas_and_restores_it():
    """Inside the context every BLAS pool runs one thread; on leaving, each is back to what
    it was (numpy's matmuls are the move ranker's and the policy's)."""
    import numpy as np

    np.ones((64, 64)) @ np.ones((64, 64))       # numpy's BLAS is loaded
    before = [pool["num_threads"] for pool in blas_controller().select(user_api="blas").info()]
    assert before
    with single_threaded_blas():
        inside = [pool["num_threads"]
                  for pool in blas_controller().select(user_api="blas").info()]
        assert inside == [1] * len(before)
    after = [pool["num_threads"] for pool in blas_controller().select(user_api="blas").info()]
    assert after == before


def test_single_threaded_blas_nests_and_restores_once_at_the_outer_exit():
    """A nested context (a ranker's call inside `regal`'s whole-search one) keeps the single
    thread, leaves it on when it exits, and the outer exit restores the pools."""
    import numpy as np

    np.ones((64, 64)) @ np.ones((64, 64))

    def threads():
        return [pool["num_threads"] for pool in blas_controller().select(user_api="blas").info()]

    before = threads()
    with single_threaded_blas():
        with single_threaded_blas():
            assert threads() == [1] * len(before)
        assert threads() == [1] * len(before)
        with pytest.raises(KeyError):
            with single_threaded_blas():
                raise KeyError("an error inside still unwinds the depth")
        assert threads() == [1] * len(before)
    assert threads() == before
    with single_threaded_blas():
        assert threads() == [1] * len(before)
    assert threads() == before
