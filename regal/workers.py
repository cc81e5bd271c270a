"""The one parallel executor (`Workers`: a local process pool, Ray, or this process) that the
experiment harness, the best-known builder and training use, and its workers' set-up: their
share of the cores for numba's batch evaluator, and an exit when the parent process dies."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from typing import Callable


def set_numba_threads(threads: int) -> None:
    """Numba's thread count for this process, clamped to what numba was started with."""
    try:
        import numba
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except Exception:
        pass


@functools.cache
def blas_controller():
    """This process's BLAS thread pools, found once (the scan of the loaded libraries takes
    a while: call it at load time where a first call must be fast)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


_blas_limit = threading.local()      # how deep this thread is in `single_threaded_blas`


@contextlib.contextmanager
def single_threaded_blas():
    """A context in which BLAS runs on one thread. Why: on 2 cores a multi-threaded BLAS
    call leaves its threads spinning, and they fight numba's threads in the simulator's
    next batch (a `regal` run of 5,000 evaluations on a 137-op graph took 1.1 s with the
    move ranker's small matmuls threaded, 0.15 s without); matmuls this small gain nothing
    from threads. Inside another one it does nothing: setting the limit costs about 30 us,
    which a climb paid at every step before `regal` held one limit for its whole search."""
    depth = getattr(_blas_limit, "depth", 0)
    if depth:
        _blas_limit.depth = depth + 1
        try:
            yield
        finally:
            _blas_limit.depth = depth
        return
    with blas_controller().limit(limits=1, user_api="blas"):
        _blas_limit.depth = 1
        try:
            yield
        finally:
            _blas_limit.depth = 0


def exit_with_parent(poll_seconds: float = 0.5) -> None:
    """Ends this process soon after its parent dies (however it died: a SIGKILL runs no
    cleanup), so a killed run leaves no orphan worker finishing queued work."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class WorkerDied(RuntimeError):
    """A worker process died (killed, out of memory) before reporting its call. `in_flight`:
    the tags of the calls then running (`Workers.run`), the dead one's first. The CLI prints
    it as one line."""

    def __init__(self, message: str, in_flight=()):
        super().__init__(message)
        self.in_flight = list(in_flight)


def _init_process(threads: int, ignore_interrupts: bool) -> None:
    """A local pool worker: Ctrl-C left to the parent (`ignore_interrupts`), its share of the
    cores for numba, and an exit when the parent dies."""
    if ignore_interrupts:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    set_numba_threads(threads)


def _call_in_ray(fn, *args):
    """A Ray task holds one CPU: numba gets one thread."""
    set_numba_threads(1)
    return fn(*args)


def _done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


class Workers:
    """The one parallel executor (experiment harness, best-known builder, training): calls of
    module-level functions in a spawn-based local process pool (numba's threads and fork do
    not mix), as Ray tasks, or, for one process and no Ray, in this process one by one.

    `count`: processes (or Ray CPUs; default every core); `jobs`: at most this many pool
    processes are started (no more than there is work for); `ray`: Ray tasks on the cluster at
    `address`, or on a local Ray of `count` CPUs unless one is initialised already (then left
    running); `ignore_interrupts`: pool processes leave Ctrl-C to the parent (whose loop
    handles it); `retries`: Ray only, times a task whose worker died runs again.
    As a context manager it closes on exit: at once after an error or Ctrl-C, queued calls
    cancelled, else after the running calls end. A pool worker that dies is `WorkerDied`."""

    def __init__(self, count: int | None = None, *, jobs: int | None = None, ray: bool = False,
                 address: str | None = None, ignore_interrupts: bool = False,
                 retries: int = 0) -> None:
        self.count = count or os.cpu_count() or 1
        self.ray = bool(ray or address)
        self.inline = False  # calls run in this process, each as it is submitted
        self._pool = self._ray = None
        self._started_ray = False
        if self.ray:
            import ray as ray_module

            if not ray_module.is_initialized():
                kwargs = dict(include_dashboard=False, log_to_driver=False)
                if address:
                    ray_module.init(address=address, **kwargs)
                else:
                    ray_module.init(num_cpus=self.count, **kwargs)
                self._started_ray = True
            self._ray = ray_module
            self._remote = ray_module.remote(num_cpus=1, max_retries=retries)(_call_in_ray)
            return
        if jobs is not None:
            self.count = max(1, min(self.count, jobs))
        self.inline = self.count == 1
        if not self.inline:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            threads = max(1, (os.cpu_count() or 1) // self.count)
            self._pool = ProcessPoolExecutor(
                self.count, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_process, initargs=(threads, ignore_interrupts))

    def put(self, value):
        """`value` as a call argument shared by many calls (Ray: stored once)."""
        return self._ray.put(value) if self.ray else value

    def submit(self, fn, *args):
        """Starts `fn(*args)`; a handle for `wait` and `result`."""
        if self.ray:
            return self._remote.remote(fn, *args)
        if self.inline:
            return _done(fn(*args))
        return self._pool.submit(fn, *args)

    def wait(self, handles):
        """One of `handles` whose call has ended."""
        if self.ray:
            return self._ray.wait(list(handles), num_returns=1)[0][0]
        done, _ = wait_futures(handles, return_when=FIRST_COMPLETED)
        return next(iter(done))

    def result(self, handle):
        """The call's value, or its exception; WorkerDied when its pool process died."""
        if self.ray:
            return self._ray.get(handle)
        try:
            return handle.result()
        except BrokenProcessPool:  # the worker itself died (killed, out of memory)
            raise WorkerDied("a worker process died (killed, or out of memory)") from None

    def map(self, fn, items) -> list:
        """`[fn(item) for item in items]`, in order, the calls spread over the workers."""
        handles = [self.submit(fn, item) for item in items]
        if self.ray:
            return self._ray.get(handles)
        try:
            return [self.result(handle) for handle in handles]
        finally:
            for handle in handles:
                handle.cancel()

    def run(self, start: Callable, finish: Callable, window: int | None = None) -> None:
        """Keeps up to `window` calls running (default: one per worker; in this process one
        at a time). `start()` gives the next call as (tag, fn, *args), or None when none can
        start now; `finish(tag, get)` takes each call as it ends, in the order they end, and
        `get()` returns its value or raises its exception (WorkerDied: `in_flight` says which
        calls were running)."""
        window = 1 if self.inline else window or self.count
        running: dict = {}

        def fill() -> None:
            while len(running) < window:
                call = start()
                if call is None:
                    return
                tag, fn, *args = call
                running[self.submit(fn, *args)] = tag

        fill()
        while running:
            handle = self.wait(running)
            tag = running.pop(handle)

            def get(handle=handle, tag=tag):
                try:
                    return self.result(handle)
                except WorkerDied as died:
                    in_flight = [tag, *running.values()]
                    raise WorkerDied(f"{died} with {len(in_flight)} call"
                                     f"{'s' * (len(in_flight) != 1)} in flight",
                                     in_flight) from None

            finish(tag, get)
            fill()

    def close(self, wait: bool = True) -> None:
        """Ends the workers (`wait`: after their running calls); queued calls are cancelled."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(wait=kind is None)  # Ctrl-C or an error: do not wait for queued calls
