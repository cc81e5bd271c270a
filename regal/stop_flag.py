"""A signal turned into a flag that long work checks between its steps (`StopFlag`): the
first SIGINT (or SIGTERM) asks it to stop where it can keep what it has (a training run saves
its checkpoint, a search returns its best so far); a second one interrupts at once."""

from __future__ import annotations

import signal
import threading

__all__ = ["StopFlag"]


class StopFlag:
    """`with StopFlag(signals) as stop:` ... `stop.raised` once one of `signals` came
    (`stop.signum`: the first one's number; a command exits 128 + it). Off the main thread,
    where no handler can be set, the flag is never raised. The previous handlers come back
    on exit."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)) -> None:
        self.signals = tuple(signals)
        self.raised = False
        self.signum = None
        self.previous = {}

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.raised:
            raise KeyboardInterrupt
        self.raised, self.signum = True, signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
