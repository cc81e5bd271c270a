"""`DeviceSpec`: how many devices, how much memory each has, and how fast they talk.

Units follow CostGraphDef: time in microseconds (µs), sizes in bytes, so bandwidth is
bytes/µs (1 GB/s = 1,000 bytes/µs).

Defaults model GPUs linked point to point by NVLink-class links:
  - bandwidth 100,000 bytes/µs = 100 GB/s per direction per device pair, between the
    50 GB/s of two bonded NVLink-2 links (V100 DGX-1) and the ~300 GB/s of an NVLink-3/4
    switch port (A100/H100), and well above PCIe 4.0 x16 (~25 GB/s);
  - latency 5 µs: a peer copy's launch plus link latency, as measured by the usual
    p2p latency tests (a few µs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["DeviceSpec", "DEFAULT_BANDWIDTH", "DEFAULT_LATENCY"]

DEFAULT_BANDWIDTH = 100_000.0  # bytes per µs (100 GB/s)
DEFAULT_LATENCY = 5.0          # µs


@dataclass(frozen=True)
class DeviceSpec:
    """`count` devices; `memory_limit` is None (unlimited), one int for all, or one per device."""

    count: int
    memory_limit: None | int | Sequence[int] = None
    bandwidth: float = DEFAULT_BANDWIDTH
    latency: float = DEFAULT_LATENCY

    def __post_init__(self) -> None:
        count = self.count
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"count: expected an integer >= 1, got {count!r}")
        object.__setattr__(self, "count", int(count))
        for name in ("bandwidth", "latency"):
            value = getattr(self, name)
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: expected a number, got {getattr(self, name)!r}") from None
            object.__setattr__(self, name, value)
        if not (self.bandwidth > 0):  # also rejects NaN
            raise ValueError(f"bandwidth: expected a positive number of bytes/µs, "
                             f"got {self.bandwidth!r}")
        if not (0 <= self.latency < math.inf):
            raise ValueError(f"latency: expected a finite number of µs >= 0, got {self.latency!r}")
        limit = self.memory_limit
        if limit is None:
            return
        if np.ndim(limit) == 0:
            limits = [limit] * self.count
        else:
            limits = list(limit)
            if len(limits) != self.count:
                raise ValueError(f"memory_limit: expected one limit per device ({self.count}), "
                                 f"got {len(limits)}")
        checked = []
        for k, value in enumerate(limits):
            try:
                whole = not isinstance(value, bool) and float(value).is_integer() and value >= 0
            except (TypeError, ValueError):
                whole = False
            if not whole:
                raise ValueError(f"memory_limit: device {k}: expected a whole number of bytes "
                                 f">= 0, got {value!r}")
            checked.append(int(value))
        object.__setattr__(self, "memory_limit", tuple(checked))

    @property
    def limits(self) -> np.ndarray | None:
        """Per-device limits as int64, or None when unlimited."""
        if self.memory_limit is None:
            return None
        return np.asarray(self.memory_limit, dtype=np.int64)

    def transfer_time(self, size) -> np.ndarray:
        """latency + size / bandwidth, in float64 (SIM_RULES 5)."""
        return self.latency + np.asarray(size, dtype=np.float64) / self.bandwidth
